"""The parts backbones are built from: the core's Mixer (``mixers``), feed-forward (``feedforward``)
and Residual (``residual``), norms and activations (``norm_act``), grid channels (``grid``), patch
embedding (``patch_embed``) and time aggregation (``time_agg``). Plugins add more of each kind:
Fourier attention (opzoo-fourier), the AOT residual (opzoo-aot), the sparse MoE FFN (opzoo-moe)."""
