"""Walrus's PyTorch reference code, run beside opzoo's network by ``opzoo benchmark``: Polymathic AI's fork
``PolymathicAI/walrus_steering`` @ e963fad (the main repository cannot be fetched), from a checkout named by
``OPZOO_WALRUS_FORK``, its ``models/`` with torch, einops, timm and the_well.

The fork's ``SpaceTimeSplitBlock`` (``FullAttention`` and ``AxialTimeAttention``, layer scales at 1: the published
network has none), ``AdaptiveDVstrideEncoder`` (its first kernel the published one's columns of the channels' slots and
flags, scaled as the SpaceBag stem) and ``AdaptiveDVstrideDecoder`` hold the opzoo model's weights. The boundary padding
and its flag channels have no PyTorch upstream (the fork pads with learned tokens): they are made by opzoo's code before
any timing, as a data pipeline would; the timed module is the stem, the blocks and the decoder of every frame (as
upstream's causal model decodes them; its trainer keeps the last), on walls and open sides (the fork's decoder has no
periodic wrap)."""

from __future__ import annotations

import os
from functools import partial

import torch

import opzoo
from opzoo import kit

from .network import FLAG_SLOTS, N_FLAGS, PERIODIC, kernels_for

REPO_ENV = "OPZOO_WALRUS_FORK"
FORK = "PolymathicAI/walrus_steering"
FORK_AT = "e963fad"
BASE = ((8, 4), (8, 4), (8, 4))


def fork_module(name: str, repo=None):
    return kit.import_from_checkout(REPO_ENV, f"walrus_steering.models.{name}", family="Walrus",
                                    url=f"https://github.com/{FORK}", marker="walrus_steering/walrus_steering/models/"
                                    "isotropic_model.py", repo=repo, at=FORK_AT, root="walrus_steering",
                                    package_init=False)


class ForkWalrus(torch.nn.Module):
    """The fork's stem, blocks and decoder: ``([T B, C + 3, H', W', D'], T) -> [T, B, C, H', W', D']`` before the
    padding is cut (every frame decoded, as upstream's causal model does)."""

    def __init__(self, model, columns: list[int], kernels, repo=None):
        super().__init__()
        c, net = model.config, model.net
        norm = fork_module("shared_utils.normalization", repo).RMSGroupNorm
        enc_cls = fork_module("encoders.vstride_encoder", repo).AdaptiveDVstrideEncoder
        dec_cls = fork_module("decoders.vstride_decoder", repo).AdaptiveDVstrideDecoder
        block_cls = fork_module("spatiotemporal_blocks.space_time_split", repo).SpaceTimeSplitBlock
        full = fork_module("spatial_blocks.full_attention", repo).FullAttention
        axial = fork_module("temporal_blocks.axial_time_attention", repo).AxialTimeAttention
        self.kernels = kernels
        self.encoder = enc_cls(kernel_scales_seq=((2, 2),), base_kernel_size3d=BASE, input_dim=len(columns),
                               inner_dim=c.inner, output_dim=c.hidden, spatial_dims=3, groups=c.groups,
                               norm_layer=norm, activation=torch.nn.SiLU)
        self.blocks = torch.nn.ModuleList(
            block_cls(space_mixing=partial(full, num_heads=c.heads), channel_mixing=partial(torch.nn.Identity),
                      time_mixing=partial(axial, num_heads=c.heads, bias_type="rel"), hidden_dim=c.hidden,
                      drop_path=0.0, causal_in_time=True, norm_layer=norm) for _ in range(c.depth))
        self.decoder = dec_cls(base_kernel_size3d=BASE, input_dim=c.hidden, inner_dim=c.inner,
                               output_dim=len(c.field_names), spatial_dims=3, groups=c.groups, norm_layer=norm,
                               activation=torch.nn.SiLU)
        self.to(next(model.parameters()).dtype)  # before the weights are copied: none rounded on the way
        with torch.no_grad():
            stem = next(iter(net.embed.values()))
            w = stem.proj1.weight[:, columns]
            scale = ((stem.proj1.weight.shape[1] - N_FLAGS) / (w.shape[1] - N_FLAGS)) ** 0.5
            self.encoder.proj1.weight.copy_(torch.cat([w[:, :-2] * scale, w[:, -2:]], dim=1))
            for name in ("norm1.weight", "proj2.weight", "norm2.weight"):
                self.encoder.get_parameter(name).copy_(stem.get_parameter(name))
            dec = next(iter(net.debed.values()))
            self.decoder.load_state_dict(dec.state_dict())
            for mine, theirs in zip(net.blocks, self.blocks):
                state = {k.replace("ff_out.", "ff_out.1."): v for k, v in mine.state_dict().items()}
                state |= {k: torch.ones_like(v) for k, v in theirs.state_dict().items() if k.endswith("gamma")
                          or k.endswith("gamma_att")}
                theirs.load_state_dict(state, strict=True)
        self.register_buffer("slots", model.slots.clone(), persistent=False)

    def forward(self, h: torch.Tensor, t: int) -> torch.Tensor:
        x, _ = self.encoder(h[None], random_kernel=self.kernels)  # [1, T B, ...]
        x = x[0].unflatten(0, (t, -1))
        for blk in self.blocks:
            x, _ = blk(x, None, None)
        # causal_in_time: upstream's IsotropicModel decodes every frame, and its trainer keeps the last (rollout_model)
        return self.decoder(x, self.slots, stage_info={"random_kernel": self.kernels})


class ForkCall(torch.nn.Module):
    def __init__(self, fork: ForkWalrus, t: int):
        super().__init__()
        self.fork, self.t = fork, t

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fork(h, self.t)


def build_upstream_walrus(model, x) -> opzoo.Upstream:
    """The fork's parts with the model's weights, on the model's input padded and flagged (no jitter), on walls and
    open sides only (the fork's decoder has no periodic wrap)."""
    if any(bc[0] == PERIODIC for bc, n in zip(model.bcs, model.to_upstream(x).shape[3:]) if n > 1):
        raise opzoo.UpstreamUnavailable("the fork's decoder has no periodic wrap: benchmark Walrus beside it with "
                                        "--model-args boundaries=wall,wall (or open)")
    v = model.to_upstream(x)
    kernels = kernels_for(v.shape[3:])
    columns = model.slots.tolist() + list(FLAG_SLOTS)
    fork = ForkWalrus(model, columns, kernels).eval()

    def inputs(xx):
        u = model.to_upstream(xx)
        h, _ = model.net.pad(u / model.rms(u)[0], model.bcs, None)
        return h.detach()

    return opzoo.Upstream(f"{FORK} @ {FORK_AT} stem, blocks and decoder ({os.environ.get(REPO_ENV)})",
                          ForkCall(fork, v.shape[0]), inputs=inputs, outputs=lambda y: y[-1:])
