"""The POT backbone shared by DPOT, AOT-POT and NESTOR (DESIGN §6.1).

``[B, *S, T_in, C_in] -> [B, *S, T_out, C_out]`` for ``len(S) == spatial_dims`` (2 or 3):
grid channels, per-time-step patch embedding, positional embedding, time aggregation, ``depth``
blocks built from registry components (Mixer, Residual), a classification head and the
output head. The block layout, mixer, feed-forward and residual are registry components named in
the config (``block``, ``mixer``, ``feedforward``, ``residual``, each with its ``*_args``). With
``block="dpot"``, the ``fourier-attention`` mixer and the ``mlp`` feed-forward it is DPOT's network,
parameter for parameter; ``block="sandwich"`` is AOT-POT's two-sub-layer layout (DESIGN §6.3).

The latent between blocks is channels-last, ``[B, *S/p, D]``, as every Mixer expects.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Literal

import torch
import torch.nn.functional as F
from timm.layers import trunc_normal_
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..config import ModelConfig
from ..errors import ConfigError, WeightsError
from ..grid import append_grid
from ..interfaces import Backbone, Block, FeedForward, Mixer, Residual
from ..layers import ACTIVATIONS, ChannelsLastGroupNorm, make_activation
from ..plugins import get_registry
from .blocks import DpotBlock, SandwichBlock


@dataclasses.dataclass
class PotConfig(ModelConfig):
    """POT hyper-parameters; defaults are DPOT-Ti's (img 128, patch 8, D 512, depth 4)."""

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
    mixer: str = "fourier-attention"
    mixer_args: dict[str, Any] = dataclasses.field(default_factory=lambda: {"n_blocks": 4, "modes": 32})
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

    # ---- the parts a block builds (the components this config names) --------------------------
    def make_block(self, index: int) -> Block:
        """Block ``index``: ``registry block(self, index=index, **block_args)``."""
        return get_registry().get("block", self.block)(self, index=index, **self.block_args)

    def make_mixer(self) -> Mixer:
        """``registry mixer(width, **mixer_args)``: ``[B, *S, D] -> [B, *S, D]``."""
        return get_registry().get("mixer", self.mixer)(self.width, **self.mixer_args)

    def make_feedforward(self) -> FeedForward:
        """``registry feedforward(width, hidden_dim=int(width * mlp_ratio), act=act, **feedforward_args)``."""
        cls = get_registry().get("feedforward", self.feedforward)
        return cls(self.width, hidden_dim=int(self.width * self.mlp_ratio), act=self.act, **self.feedforward_args)

    def make_residual(self, index: int) -> Residual:
        """Sub-layer ``index``'s residual: ``registry residual(width, index=index, **residual_args)``."""
        return get_registry().get("residual", self.residual)(self.width, index=index, **self.residual_args)

    def make_norm(self) -> nn.Module:
        """The blocks' GroupNorm(norm_groups, width) over channels-last tokens."""
        return ChannelsLastGroupNorm(self.norm_groups, self.width)

    def make_activation(self) -> nn.Module:
        return make_activation(self.act)


# DPOT's pretraining setup, shared by every preset on the POT backbone (DESIGN §6.2): 128x128 inputs
# of 4 channels and 10 steps, patch 8, 32 Fourier modes, 12 dataset classes
_DPOT_SETUP: dict[str, Any] = dict(
    in_channels=4, out_channels=4, in_timesteps=10, out_timesteps=1,
    spatial_dims=2, img_size=[128, 128], patch_size=8, n_cls=12,
    act="gelu", time_agg="exp_mlp", normalize=False, block="dpot",
    mixer="fourier-attention", residual="plain", residual_args={},
)


def pot_preset_args(width: int, depth: int, n_blocks: int, mlp_ratio: float, out_layer_dim: int,
                    **overrides: Any) -> dict[str, Any]:
    """The config of a POT preset at DPOT's dims (a row of DESIGN §6.2's table) and pretraining
    setup: DPOT's network by default; ``overrides`` replace fields, e.g. ``block="sandwich",
    residual="aot"``. ``n_blocks`` is the Fourier-attention head count (``mixer_args``)."""
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(PotConfig)})
    if unknown:
        raise ConfigError(f"pot_preset_args: unknown POT config field(s) {', '.join(map(repr, unknown))}")
    args = copy.deepcopy(_DPOT_SETUP)  # callers may edit the lists and dicts they get
    args.update(width=width, depth=depth, mlp_ratio=mlp_ratio, out_layer_dim=out_layer_dim,
                mixer_args={"n_blocks": n_blocks, "modes": 32})
    args.update(overrides)  # mixer_args too
    return args


# The micro pretraining setup (configs/micro/, docs/micro.md) of every plugin's *-micro preset, so
# that their weights come from the same data, budget and seed and compare directly: DPOT's network
# at D128, depth 4, 4 heads, on 32x32 inputs of 2 channels, patch 4, 8 modes, normalized per sample
_MICRO_SIZE = (128, 4, 4, 1.0, 32)  # D, depth, heads, mlp_ratio, out_layer_dim
_MICRO_SETUP: dict[str, Any] = dict(in_channels=2, out_channels=2, in_timesteps=10, img_size=[32, 32], patch_size=4,
                                    mixer_args={"n_blocks": 4, "modes": 8}, normalize=True)
_MICRO_PRETRAINED_CFG: dict[str, Any] = dict(
    channels=2, resolution=[32, 32], in_timesteps=10, datasets=["ns-nu1e-3", "ns-nu1e-4", "diffusion-reaction", "swe"],
    normalization="inside the model (normalize=True: each sample's channels standardized over space and time, the "
                  "output de-standardized); raw generated fields, 1-field datasets padded with 1.0 and masked",
)


def pot_micro_preset_args(**overrides: Any) -> dict[str, Any]:
    """The config of a micro preset on the POT backbone (the shared micro setup above); ``overrides``
    replace fields as in :func:`pot_preset_args`, e.g. ``block="sandwich", residual="aot"``."""
    return pot_preset_args(*_MICRO_SIZE, **{**copy.deepcopy(_MICRO_SETUP), **overrides})


def micro_pretrained_cfg() -> dict[str, Any]:
    """The ``pretrained_cfg`` of a micro preset: the data its weights were pretrained on."""
    return copy.deepcopy(_MICRO_PRETRAINED_CFG)


def _conv(spatial_dims: int) -> type[nn.Module]:
    return nn.Conv2d if spatial_dims == 2 else nn.Conv3d


def _conv_transpose(spatial_dims: int) -> type[nn.Module]:
    return nn.ConvTranspose2d if spatial_dims == 2 else nn.ConvTranspose3d


class PatchEmbed(nn.Module):
    """Per-time-step patchify: ``[N, C_in+d+1, *S] -> [N, D, *S/p]``.

    ``proj`` = Conv(k=p, stride p) -> act -> Conv(1x1), hidden width ``C_out*p + 3`` as in DPOT.
    """

    def __init__(self, cfg: PotConfig):
        super().__init__()
        conv = _conv(cfg.spatial_dims)
        in_chans = cfg.in_channels + cfg.spatial_dims + 1
        hidden = cfg.out_channels * cfg.patch_size + 3
        self.proj = nn.Sequential(
            conv(in_chans, hidden, kernel_size=cfg.patch_size, stride=cfg.patch_size),
            make_activation(cfg.act),
            conv(hidden, cfg.width, kernel_size=1, stride=1),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x)

    def hidden_channels_last(self, x: Tensor) -> Tensor:
        """``act(Conv_p(x))`` on channels-last frames: ``[B, *S, T, C_in+d+1] -> [B, *S/p, T, hidden]``.

        A conv with kernel = stride = p is one GEMM over non-overlapping patches: one layout copy
        of the input instead of the conv's im2col and its slow weight-gradient kernel.
        """
        conv, act = self.proj[0], self.proj[1]
        p = conv.kernel_size[0]
        d = x.ndim - 3
        b, *sizes, t, c = x.shape
        split = [n for s in sizes for n in (s // p, p)]
        x = x.reshape(b, *split, t, c)
        # [B, (n_i, p)..., T, C] -> [B, n_1.., T, C, p..]: the conv weight's (C, p, .., p) order
        order = [0, *range(1, 2 * d, 2), 2 * d + 1, 2 * d + 2, *range(2, 2 * d + 1, 2)]
        patches = x.permute(order).flatten(-(d + 1))                            # [B, *S/p, T, C p^d]
        return act(F.linear(patches, conv.weight.flatten(1), conv.bias))


class TimeAggregator(nn.Module):
    """DPOT's time aggregation: ``[..., T, D] -> [..., D]``.

    ``exp_mlp``: ``out[..., j] = sum_t sum_i w[t, i, j] * x[..., t, i] * cos(t_lin @ gamma)[t, i]``
    with ``t_lin = linspace(0, 1, T)``; ``mlp``: the same without the cosine factor.
    """

    def __init__(self, timesteps: int, dim: int, kind: str = "exp_mlp"):
        super().__init__()
        self.kind = kind
        self.w = nn.Parameter(torch.randn(timesteps, dim, dim) / (timesteps * dim**0.5))
        if kind == "exp_mlp":
            self.gamma = nn.Parameter(2 ** torch.linspace(-10, 10, dim).unsqueeze(0))

    def time_embedding(self, timesteps: int, device, dtype) -> Tensor:
        """``cos(t @ gamma)``: ``[T, D]``."""
        t = torch.linspace(0, 1, timesteps, device=device, dtype=dtype).unsqueeze(-1)
        return torch.cos(t @ self.gamma.to(dtype))

    def cosine(self) -> Tensor:
        """The factor on each input (step, channel): ``cos(t_lin @ gamma)`` for ``exp_mlp``, ones for
        ``mlp``: ``[T, D]``."""
        t = self.w.shape[0]
        if self.kind != "exp_mlp":
            return self.w.new_ones(t, self.w.shape[1])
        return self.time_embedding(t, self.w.device, self.w.dtype)

    def forward(self, x: Tensor) -> Tensor:
        t, d = x.shape[-2:]
        if t != self.w.shape[0]:
            raise ValueError(f"time aggregation was built for {self.w.shape[0]} input steps, got {t}")
        if self.kind == "exp_mlp":
            x = x * self.time_embedding(t, x.device, x.dtype)
        return x.flatten(-2) @ self.w.reshape(t * d, d)


class _FoldTimeWeights(torch.autograd.Function):
    """:func:`fold_time_weights` with a backward that writes the ``[T, D, D]`` gradient of ``w`` once.

    Autograd of the same expressions makes two ``w``-sized gradients and sums them (and ``w * c``
    materializes a third ``w``-sized tensor): at D = 1024 each is 40 MiB of fresh pages per step.
    """

    @staticmethod
    def forward(ctx, proj: Tensor, cos: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        scaled = proj.unsqueeze(0) * cos.unsqueeze(1)                     # [T, hidden, D]
        # per row i: cos[:, i] @ w[:, i, :], one strided bmm that reads w once
        summed = torch.bmm(cos.t().unsqueeze(1), w.transpose(0, 1)).squeeze(1)
        ctx.save_for_backward(proj, cos, w, scaled)
        return torch.bmm(scaled, w), summed

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_mixed: Tensor | None, grad_summed: Tensor | None):
        proj, cos, w, scaled = ctx.saved_tensors
        # under autocast the forward's products were bf16/fp16; the backward runs in the weights' dtype
        grad_mixed, grad_summed = (None if g is None else g.to(w.dtype) for g in (grad_mixed, grad_summed))
        grad_scaled = grad_w = grad_cos = None
        if grad_summed is not None:
            # d summed[i, j] / d w[t, i, j] = c[t, i]; d / d c[t, i] = sum_j g[i, j] w[t, i, j]
            grad_w = cos.unsqueeze(-1) * grad_summed
            grad_cos = torch.stack([(w_t * grad_summed).sum(-1) for w_t in w])
        if grad_mixed is not None:
            grad_scaled = torch.bmm(grad_mixed, w.transpose(1, 2))           # [T, hidden, D]
            if grad_w is None:
                grad_w = torch.bmm(scaled.transpose(1, 2), grad_mixed)
            else:
                grad_w.baddbmm_(scaled.transpose(1, 2), grad_mixed)
        grad_proj = None
        if grad_scaled is not None:
            grad_proj = (grad_scaled * cos.unsqueeze(1)).sum(0)
            from_scaled = (grad_scaled * proj.unsqueeze(0)).sum(1)
            grad_cos = from_scaled if grad_cos is None else grad_cos + from_scaled
        if grad_cos is None:
            grad_cos = torch.zeros_like(cos)
        return grad_proj, grad_cos, grad_w


def fold_time_weights(proj: Tensor, cos: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """The time aggregation folded into the patch embedding's 1x1 conv (``PotBackbone.embed_aggregated``).

    ``proj [hidden, D]`` (``W2^T``), ``cos [T, D]``, ``w [T, D, D]`` -> ``mixed [T, hidden, D]``
    with ``mixed[t] = proj diag(cos[t]) w[t]``, and ``summed [D, D] = sum_t diag(cos[t]) w[t]``.
    """
    if torch.compiler.is_compiling():  # the same expressions, for the compiler to fuse
        return torch.bmm(proj.unsqueeze(0) * cos.unsqueeze(1), w), (w * cos.unsqueeze(-1)).sum(0)
    return _FoldTimeWeights.apply(proj, cos, w)


class PotBackbone(Backbone):
    """``[B, *S, T_in, C_in] -> [B, *S, T_out, C_out]``; ``S`` any multiple of ``patch_size``.

    The positional embedding is laid out for ``img_size``; other resolutions interpolate it
    (bilinear in 2D, trilinear in 3D, ``align_corners=False``) to the latent grid ``S/p``.
    """

    config_class = PotConfig

    def __init__(self, config: PotConfig):
        super().__init__(config)
        c = config
        c.check()
        conv, conv_t = _conv(c.spatial_dims), _conv_transpose(c.spatial_dims)
        self.patch_embed = PatchEmbed(c)
        grid = [s // c.patch_size for s in c.img_size]
        self.pos_embed = nn.Parameter(torch.zeros(1, c.width, *grid))
        self.time_agg = TimeAggregator(c.in_timesteps, c.width, c.time_agg)
        self.streams = get_registry().get("residual", c.residual).stream_adapter(c.width, **c.residual_args)
        self.blocks = nn.ModuleList(c.make_block(i) for i in range(c.depth))
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

    def embed(self, x: Tensor) -> Tensor:
        """``[B, *S, T, C] -> [B, *S/p, T, D]``: grid channels, patch embedding, positions."""
        d = self.config.spatial_dims
        b, t = x.shape[0], x.shape[-2]
        x = append_grid(x)                                     # [B, *S, T, C+d+1]
        x = x.movedim(-2, 1).movedim(-1, 2).flatten(0, 1)      # [(B T), C+d+1, *S]
        z = self.patch_embed(x)                                # [(B T), D, *S/p]
        z = z + self.position_embedding(tuple(z.shape[2:]))
        z = z.unflatten(0, (b, t)).movedim(2, -1)              # [B, T, *S/p, D]
        return z.movedim(1, d + 1)                             # [B, *S/p, T, D]

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

    def forward_latent(self, x: Tensor) -> Tensor:
        """``[B, *S, T_in, C] -> [B, *S/p, D]``: the last latent (after the blocks)."""
        state = self.streams.expand(self.embed_aggregated(x))
        for block in self.blocks:
            state = block(state)
        return self.streams.collapse(state)

    def head(self, z: Tensor) -> Tensor:
        """``[B, *S/p, D] -> [B, *S, T_out, C_out]`` (channel index ``t*C_out + c``)."""
        c = self.config
        y = self.out_head(z.movedim(-1, 1)).movedim(1, -1)
        return y.unflatten(-1, (c.out_timesteps, c.out_channels))

    def classify(self, z: Tensor) -> Tensor:
        """``[B, *S/p, D] -> [B, n_cls]``: the (unused by the loss) dataset classifier."""
        return self.cls_head(z.flatten(1, -2).mean(1))

    # ---- the operator --------------------------------------------------------------------
    def forward_with_class(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x [B, *S, T_in, C]`` -> (prediction ``[B, *S, T_out, C_out]``, class logits ``[B, n_cls]``),
        as the official DPOTNet returns them."""
        self.check_input(x)
        spatial_time = tuple(range(1, x.ndim - 1))
        if self.config.normalize:
            mu = x.mean(dim=spatial_time, keepdim=True)
            sigma = x.std(dim=spatial_time, keepdim=True) + 1e-6
            x = (x - mu) / sigma
        z = self.forward_latent(x)
        y = self.head(z)
        if self.config.normalize:
            y = y * sigma + mu
        return y, self.classify(z)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_with_class(x)[0]

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


__all__ = ["PotConfig", "PotBackbone", "pot_preset_args", "DpotBlock", "SandwichBlock", "TimeAggregator", "PatchEmbed",
           "ChannelsLastGroupNorm", "ACTIVATIONS", "make_activation"]
