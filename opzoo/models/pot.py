"""The POT backbone (POT = "PDE operator transformer", DPOT's backbone), shared by DPOT, AOT-POT
and NESTOR (docs/models.md §1).

``[B, *S, T_in, C_in] -> [B, *S, T_out, C_out]`` for ``len(S) == spatial_dims`` (2 or 3):
grid channels (``layers.grid``), per-time-step patch embedding (``layers.patch_embed``), positional
embedding, time aggregation (``layers.time_agg``), ``depth`` blocks built from registry components,
a classification head and the output head. The block layout, mixer, feed-forward and residual are
registry components named in the config (``block``, ``mixer``, ``feedforward``, ``residual``, each
with its ``*_args``). With ``block="dpot"``, the ``fourier-attention`` mixer and the ``mlp``
feed-forward it is DPOT's network, parameter for parameter; ``block="sandwich"`` is AOT-POT's
two-sub-layer layout (docs/models.md §3), ``block="nestor"`` NESTOR's nested-MoE block (opzoo-moe), and
``residual="aot"`` AOT's hyper-connections (opzoo-aot). Preset sizes: :mod:`opzoo.models.pot_sizes`.

The latent between blocks is channels-last, ``[B, *S/p, D]``, as every Mixer expects.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from ..contracts.interfaces import Backbone, Block, FeedForward, Mixer, Residual
from ..contracts.io_layout import DimMap, fields_then_grid_index, newest_aligned_index, prefix_index, time_channel_index
from ..errors import ConfigError, WeightsError
from ..layers.grid import append_grid
from ..layers.norm_act import make_activation
from ..layers.patch_embed import PatchEmbed, conv_nd, conv_transpose_nd
from ..layers.time_agg import TimeAggregator, fold_time_weights
from ..layers.weight_init import trunc_normal_
from ..registry.registry import get_registry
from .pot_parts import PotParts, component_args


@dataclasses.dataclass
class PotConfig(ModelConfig):
    """POT hyper-parameters; the dims default to DPOT-Ti's (img 128, patch 8, D 512, depth 4), the components
    to the core's own (``dpot`` block, ``pointwise-mlp`` mixer, ``mlp`` feed-forward, ``plain`` residual), so
    that ``create_model("pot")`` builds with no plugin. DPOT's network names opzoo-fourier's
    ``fourier-attention`` mixer (``opzoo_fourier.dpot_preset_args``)."""

    spatial_dims: int = 2
    img_size: tuple[int, ...] = (128, 128)
    patch_size: int = 8
    width: int = 512
    depth: int = 4
    mlp_ratio: float = 1.0
    out_layer_dim: int = 32
    n_cls: int = 12
    act: str = "gelu"
    time_agg: Literal["exp_mlp", "mlp"] = "exp_mlp"
    normalize: bool = False
    norm_groups: int = 8
    block: str = "dpot"
    mixer: str = "pointwise-mlp"  # the core's own; DPOT's is opzoo-fourier's "fourier-attention"
    mixer_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    residual: str = "plain"
    residual_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    block_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    feedforward: str = "mlp"
    feedforward_args: dict[str, Any] = dataclasses.field(default_factory=dict)

    def check(self) -> None:
        """Raise ConfigError naming the first inconsistent field."""
        if self.spatial_dims not in (2, 3):
            raise ConfigError(f"spatial_dims: POT supports 2 or 3, got {self.spatial_dims}")
        if len(self.img_size) != self.spatial_dims:
            raise ConfigError(
                f"img_size: expected {self.spatial_dims} sizes for spatial_dims={self.spatial_dims}, got {list(self.img_size)}"
            )
        bad = [s for s in self.img_size if s % self.patch_size]
        if bad:
            raise ConfigError(f"img_size: {list(self.img_size)} is not divisible by patch_size {self.patch_size}")
        if self.width % self.norm_groups:
            raise ConfigError(f"width: {self.width} is not divisible by norm_groups {self.norm_groups}")
        for name in ("patch_size", "width", "depth", "out_layer_dim", "n_cls", "in_channels", "out_channels",
                     "in_timesteps", "out_timesteps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")

    def validate(self, source: str = "model_args") -> None:
        """Every component named here exists and takes its ``*_args`` (called where the config is built)."""
        from .pot_parts import check_component_args

        check_component_args(self, source)

    # ---- the old factory methods: the parts are built by opzoo.PotParts now ----------------------
    def _parts(self, method: str):
        import warnings

        from .pot_parts import PotParts

        warnings.warn(f"PotConfig.{method}() is deprecated (a config is data): use opzoo.PotParts(config).{method}() "
                      "(a block receives a PotParts as its first argument); removed in the next release",
                      DeprecationWarning, stacklevel=3)
        return PotParts(self)

    def make_block(self, index: int) -> Block:
        return self._parts("make_block").make_block(index)

    def make_mixer(self) -> Mixer:
        return self._parts("make_mixer").make_mixer()

    def make_feedforward(self) -> FeedForward:
        return self._parts("make_feedforward").make_feedforward()

    def make_residual(self, index: int) -> Residual:
        return self._parts("make_residual").make_residual(index)

    def make_norm(self) -> nn.Module:
        return self._parts("make_norm").make_norm()

    def make_activation(self) -> nn.Module:
        return self._parts("make_activation").make_activation()


class PotBackbone(Backbone):
    """``[B, *S, T_in, C_in] -> [B, *S, T_out, C_out]``; ``S`` any multiple of ``patch_size``.

    The positional embedding is laid out for ``img_size``; other resolutions interpolate it
    (bilinear in 2D, trilinear in 3D, ``align_corners=False``) to the latent grid ``S/p``.
    """

    # measured: a dynamic grid traces, then guards on the traced latent size (docs/export.md)
    fixed_export_grid = ("its position embedding is taken as is at img_size and interpolated at another grid, a branch "
                         "on the grid that torch.export traces for one grid")

    config_class = PotConfig
    supports_grad_checkpointing = True
    no_weight_decay_keys = ("pos_embed",)

    def group_matcher(self) -> dict:
        return {"stem": r"^(patch_embed|pos_embed|time_agg|streams)\b", "blocks": r"^blocks\.(\d+)\."}

    def __init__(self, config: PotConfig):
        super().__init__(config)
        c = config
        c.check()
        parts = PotParts(c)
        conv, conv_t = conv_nd(c.spatial_dims), conv_transpose_nd(c.spatial_dims)
        self.patch_embed = PatchEmbed(c.in_channels + c.spatial_dims + 1, c.out_channels * c.patch_size + 3, c.width,
                                      c.patch_size, c.spatial_dims, c.act)
        grid = [s // c.patch_size for s in c.img_size]
        self.pos_embed = nn.Parameter(torch.zeros(1, c.width, *grid))
        self.time_agg = TimeAggregator(c.in_timesteps, c.width, c.time_agg)
        residual = get_registry().get("residual", c.residual)
        self.streams = residual.stream_adapter(c.width, **component_args("residual", c.residual, residual,
                                                                           c.residual_args, "residual_args"))
        self.blocks = nn.ModuleList(parts.make_block(i) for i in range(c.depth))
        self.cls_head = nn.Sequential(
            nn.Linear(c.width, c.width), make_activation(c.act),
            nn.Linear(c.width, c.width), make_activation(c.act),
            nn.Linear(c.width, c.n_cls),
        )
        self.out_head = nn.Sequential(
            conv_t(c.width, c.out_layer_dim, kernel_size=c.patch_size, stride=c.patch_size),
            make_activation(c.act),
            conv(c.out_layer_dim, c.out_layer_dim, kernel_size=1, stride=1),
            make_activation(c.act),
            conv(c.out_layer_dim, c.out_channels * c.out_timesteps, kernel_size=1, stride=1),
        )
        trunc_normal_(self.pos_embed, std=0.02)
        self.cls_head.apply(_init_linear)

    # ---- pieces --------------------------------------------------------------------------
    def check_input(self, x: Tensor) -> None:
        c = self.config
        d = c.spatial_dims
        if x.ndim != d + 3 or tuple(x.shape[-2:]) != (c.in_timesteps, c.in_channels):
            raise ValueError(
                f"{type(self).__name__} expects [B, {', '.join('XYZ'[:d])}, T_in={c.in_timesteps}, "
                f"C={c.in_channels}], got {list(x.shape)}"
            )
        bad = [s for s in x.shape[1:1 + d] if s % c.patch_size]
        if bad:
            raise ValueError(
                f"{type(self).__name__}: spatial size {list(x.shape[1:1 + d])} is not divisible by "
                f"patch_size {c.patch_size}"
            )

    def position_embedding(self, grid: tuple[int, ...]) -> Tensor:
        """``pos_embed`` on latent grid ``grid``: ``[1, D, *grid]`` (interpolated if it differs)."""
        if tuple(self.pos_embed.shape[2:]) == tuple(grid):
            return self.pos_embed
        mode = "bilinear" if len(grid) == 2 else "trilinear"
        return F.interpolate(self.pos_embed, size=tuple(grid), mode=mode, align_corners=False)

    def embed_aggregated(self, x: Tensor) -> Tensor:
        """``[B, *S, T, C] -> [B, *S/p, D]``: ``time_agg(embed(x))`` computed without the per-step latent.

        With ``h_t = act(Conv_p(x_t))`` and ``z_t = W2 h_t + b2 + pos`` (the 1x1 conv), the time
        aggregation ``sum_t (z_t * c_t) @ w_t`` (``c_t = cos(t gamma)``) is, exactly,
        ``sum_t h_t @ (W2^T diag(c_t) w_t) + (b2 + pos) @ sum_t diag(c_t) w_t``: one GEMM of the
        ``T * hidden`` patch features (``hidden = C_out p + 3`` is small) instead of patch-embedding
        every step to ``D`` channels and contracting ``T * D`` of them. Same function as
        ``time_agg(embed(x))``; only the float rounding differs (summation order).
        """
        t = x.shape[-2]
        if t != self.time_agg.w.shape[0]:
            raise ValueError(f"time aggregation was built for {self.time_agg.w.shape[0]} input steps, got {t}")
        h = self.patch_embed.hidden_channels_last(append_grid(x))             # [B, *S/p, T, hidden]
        out_proj = self.patch_embed.proj[2]
        mixed, summed = fold_time_weights(out_proj.weight.flatten(1).t(), self.time_agg.cosine(), self.time_agg.w)
        pos = self.position_embedding(tuple(h.shape[1:-2])).movedim(1, -1) + out_proj.bias  # [1, *S/p, D]
        return h.flatten(-2) @ mixed.flatten(0, 1) + pos @ summed

    def forward_latent(self, x: Tensor, keep: Sequence[int] = ()) -> tuple[Tensor, list[Tensor]]:
        """``[B, *S, T_in, C]`` (standardized when ``normalize``) -> (the last latent ``[B, *S/p, D]``, the latents
        after the blocks ``keep``); each block checkpointed when gradient checkpointing is on."""
        state, kept = self.streams.expand(self.embed_aggregated(x)), []
        for i, block in enumerate(self.blocks):
            state = self.checkpointed(block, state)
            if i in keep:
                kept.append(self.streams.collapse(state))
        return self.streams.collapse(state), kept

    def head(self, z: Tensor) -> Tensor:
        """``[B, *S/p, D] -> [B, *S, T_out, C_out]`` (channel index ``t*C_out + c``)."""
        c = self.config
        y = self.out_head(z.movedim(-1, 1)).movedim(1, -1)
        return y.unflatten(-1, (c.out_timesteps, c.out_channels))

    def classify(self, z: Tensor) -> Tensor:
        """``[B, *S/p, D] -> [B, n_cls]``: the (unused by the loss) dataset classifier."""
        return self.cls_head(z.flatten(1, -2).mean(1))

    # ---- the operator --------------------------------------------------------------------
    def _standardization(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Per-sample, per-channel mean and std over space and time (``normalize``): ``[B, 1.., 1, C]`` each."""
        spatial_time = tuple(range(1, x.ndim - 1))
        return x.mean(dim=spatial_time, keepdim=True), x.std(dim=spatial_time, keepdim=True) + 1e-6

    def _standardized(self, x: Tensor) -> Tensor:
        self.check_input(x)
        if not self.config.normalize:
            return x
        mu, sigma = self._standardization(x)
        return (x - mu) / sigma

    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, *S, T_in, C] -> [B, *S/p, D]``: the latent after the blocks (of the standardized input when
        ``normalize``)."""
        return self.forward_latent(self._standardized(x))[0]

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[B, *S/p, D] -> [B, *S, T_out, C_out]``; with ``normalize`` the output is de-standardized with the
        statistics of the input ``x`` (required then)."""
        y = self.head(features)
        if not self.config.normalize:
            return y
        if x is None:
            raise ConfigError(f"{self.preset_name or 'this POT model'} standardizes each sample (normalize=True): "
                              "forward_head(features, x) needs the input x to de-standardize its output")
        mu, sigma = self._standardization(x)
        return y * sigma + mu

    def forward_intermediates(self, x: Tensor, indices: int | Sequence[int] | None = None,
                              intermediates_only: bool = False):
        """Per-block latents ``[B, *S/p, D]`` (the streams' read-out for a multi-stream residual)."""
        z, kept = self.forward_latent(self._standardized(x), self.block_indices(indices, len(self.blocks)))
        return kept if intermediates_only else (z, kept)

    def forward_with_class(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x [B, *S, T_in, C]`` -> (prediction ``[B, *S, T_out, C_out]``, class logits ``[B, n_cls]``),
        as the official DPOTNet returns them."""
        z = self.forward_features(x)
        return self.forward_head(z, x), self.classify(z)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_with_class(x)[0]

    # ---- adapting to other data (opzoo.training.adapt_model) ------------------------------
    @classmethod
    def io_layout(cls, old: PotConfig, new: PotConfig) -> Mapping[str, Sequence[DimMap] | str]:
        """The data-shaped tensors: the patch embedding reads the fields then ``d + 1`` grid channels
        and has hidden width ``C_out*p + 3``; the time weights are per input step; the head writes
        ``T_out*C_out`` rows (time-major); ``pos_embed`` is resized to a new resolution."""
        d = new.spatial_dims
        hidden = prefix_index(new.out_channels * new.patch_size + 3, old.out_channels * old.patch_size + 3)
        out_rows = time_channel_index(new.out_timesteps, new.out_channels, old.out_timesteps, old.out_channels)
        return {
            "patch_embed.proj.0.weight": [DimMap(0, hidden),
                                          DimMap(1, fields_then_grid_index(new.in_channels, old.in_channels, d + 1), "zero")],
            "patch_embed.proj.0.bias": [DimMap(0, hidden)],
            "patch_embed.proj.2.weight": [DimMap(1, hidden, "zero")],
            "time_agg.w": [DimMap(0, newest_aligned_index(new.in_timesteps, old.in_timesteps))],
            "pos_embed": "resize",
            "out_head.4.weight": [DimMap(0, out_rows)],
            "out_head.4.bias": [DimMap(0, out_rows)],
        }

    # ---- 2D -> 3D ------------------------------------------------------------------------
    def load_inflated_2d(self, state_dict_2d: dict[str, Tensor]) -> None:
        """Start this 3D model from a 2D POT state dict (DPOT App. A.1: same Fourier-attention,
        norm, MLP and time weights; patch/head convs and positions inflated along z).

        Conv kernels ``[o, i, p, p]`` become ``[o, i, p, p, p]`` (divided by p, so a z-constant
        input gives the 2D patch embedding); the new z-coordinate input channel gets zero weight;
        the transposed-conv head kernels are repeated along z; ``pos_embed`` is resized bilinearly
        to (X/p, Y/p) and repeated along z. The load is strict.
        """
        if self.config.spatial_dims != 3:
            raise ConfigError("load_inflated_2d: this model has spatial_dims=2; inflate into a spatial_dims=3 model")
        target = self.state_dict()
        out: dict[str, Tensor] = {}
        for key, ref in target.items():
            if key not in state_dict_2d:
                raise WeightsError(f"load_inflated_2d: the 2D state dict has no tensor {key!r}")
            src = state_dict_2d[key]
            out[key] = _inflate_tensor(key, src, tuple(ref.shape), self.config)
        unexpected = sorted(set(state_dict_2d) - set(target))
        if unexpected:
            raise WeightsError(f"load_inflated_2d: unexpected tensors in the 2D state dict: {', '.join(unexpected)}")
        self.load_state_dict(out, strict=True)


def _inflate_tensor(key: str, src: Tensor, shape: tuple[int, ...], cfg: PotConfig) -> Tensor:
    if tuple(src.shape) == shape:
        return src
    p = cfg.patch_size
    if key == "pos_embed":
        planar = F.interpolate(src, size=shape[2:4], mode="bilinear", align_corners=False)
        return planar.unsqueeze(-1).expand(*planar.shape, shape[4]).contiguous()
    if key == "patch_embed.proj.0.weight":
        # input channels: [data..., x, y, t] -> [data..., x, y, z, t], z weight 0
        c = cfg.in_channels
        zeros = torch.zeros_like(src[:, :1])
        src = torch.cat([src[:, : c + 2], zeros, src[:, c + 2:]], dim=1)
        return (src.unsqueeze(-1) / p).expand(*src.shape, p).contiguous()
    if src.ndim == 4 and len(shape) == 5:
        if key.startswith("out_head.0."):  # transposed conv: each output voxel sees one kernel entry
            return src.unsqueeze(-1).expand(*src.shape, shape[-1]).contiguous()
        return (src.unsqueeze(-1) / shape[-1]).expand(*src.shape, shape[-1]).contiguous()
    raise WeightsError(f"load_inflated_2d: cannot inflate {key!r} from {list(src.shape)} to {list(shape)}")


def _init_linear(module: nn.Module) -> None:
    # DPOTNet._init_weights: trunc-normal(0.02) Linear weights, zero biases. Only the class head is
    # nn.Linear in DPOT; the block MLPs are 1x1 convs whose default init equals nn.Linear's.
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


__all__ = ["PotConfig", "PotBackbone"]
