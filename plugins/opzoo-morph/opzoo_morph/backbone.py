"""MORPH as an opzoo backbone: physical fields in and out, 1-D, 2-D or 3-D, with the same weights.

``forward(x: [B, *S, T_in, C]) -> [B, *S, 1, C]`` for ``len(S)`` of 1, 2 or 3. Around the network
(:class:`opzoo_morph.network.MorphNet`):

1. the channels are grouped into fields (``field_components``: how many components each field has, in channel order;
   default: every channel a scalar field). A scalar field is repeated over the components of the widest field, as
   upstream's data loaders build their (F, C) arrays (density and pressure repeated beside a 2-component velocity);
2. the spatial axes go right-aligned to upstream's ``(D, H, W)`` (1-D data on ``W``, 2-D on ``(H, W)``);
3. with ``normalization="revin"`` each sample's fields are standardized by their own mean and variance over the
   input window (reversible instance normalization, ``(x - mu) / sqrt(var + eps)``), and the prediction is brought
   back with the same statistics; a field uniform over the window (variance below ``eps``: a velocity at rest) is
   refused, since it would be normalized to 0 and never change (upstream's RevIN is over the whole trajectory, which a
   forecast cannot see); ``"stats"``: each channel z-scored by ``field_mean``/``field_std`` (its data's statistics,
   which opzoo's fit computes from a file's training split) and brought back; ``"none"``: the network sees the input
   as given (upstream's network on data that its scripts normalized beforehand, which opzoo's parity tests use);
4. the predicted frame's fields back to channels: a vector field's components as they are, a scalar field as the mean
   of its repeated copies.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Optional

import torch
from torch import Tensor

import opzoo

from .network import MorphNet, patch_sizes

SPATIAL_AXES = ("D", "H", "W")


@dataclasses.dataclass
class MorphConfig(opzoo.ModelConfig):
    """MORPH's sizes (defaults: MORPH-Ti, as the foundation checkpoints were built) and the physical-field wrapper's
    choices."""

    in_channels: int = 1
    out_channels: int = 1
    in_timesteps: int = 1
    out_timesteps: int = 1
    conv_filters: int = 8
    dim: int = 256
    depth: int = 4
    heads: int = 4
    mlp_dim: int = 1024
    heads_xa: int = 32
    patch_size: int = 8
    max_fields: int = 3
    max_components: int = 3
    max_ar: int = 1
    max_patches: int = 4096
    time_positions: Literal["slice", "interpolate"] = "slice"
    dropout: float = 0.1
    emb_dropout: float = 0.1
    field_components: Optional[list[int]] = None  # components per field in channel order; None: each channel a scalar
    normalization: Literal["revin", "stats", "none"] = "revin"
    revin_eps: float = 1e-6
    field_mean: Optional[tuple[float, ...]] = None  # per channel (normalization="stats")
    field_std: Optional[tuple[float, ...]] = None

    per_channel_fields = ("field_components", "field_mean", "field_std")

    def validate(self, source: str = "model_args") -> None:
        if self.in_channels != self.out_channels or self.out_timesteps != 1:
            raise opzoo.ConfigError(f"{source}: MORPH predicts the next frame of its own fields: in_channels = "
                                    f"out_channels and out_timesteps = 1, got {self.in_channels} -> "
                                    f"{self.out_channels} channels, out_timesteps {self.out_timesteps}")
        if self.time_positions == "slice" and self.in_timesteps > self.max_ar:
            raise opzoo.ConfigError(f"{source}.in_timesteps: {self.in_timesteps} frames, but the position table has "
                                    f"max_ar={self.max_ar} rows and time_positions='slice' takes the first "
                                    f"in_timesteps of them: use in_timesteps <= {self.max_ar}")
        for key, divisor in (("dim", self.heads), ("dim", self.heads_xa)):
            if self.dim % divisor:
                raise opzoo.ConfigError(f"{source}.{key}: {self.dim} is not divisible by the {divisor} heads")
        if self.conv_filters % 8:
            raise opzoo.ConfigError(f"{source}.conv_filters: {self.conv_filters} is not a multiple of 8")
        if self.revin_eps <= 0:
            raise opzoo.ConfigError(f"{source}.revin_eps: must be > 0, got {self.revin_eps}")
        opzoo.kit.check_field_statistics(self, source)
        self.fields(source)

    def fields(self, source: str = "model_args") -> tuple[list[int], int]:
        """``(components of each field, C)``: the field layout of the channels and the components each field takes
        in the network (the widest field's)."""
        groups = list(self.field_components) if self.field_components is not None else [1] * self.in_channels
        if any(g < 1 for g in groups) or sum(groups) != self.in_channels:
            raise opzoo.ConfigError(f"{source}.field_components: {groups} must be positive and add up to the "
                                    f"{self.in_channels} channels")
        width = max(groups)
        if len(groups) > self.max_fields or width > self.max_components:
            raise opzoo.ConfigError(
                f"{source}.field_components: {len(groups)} fields of up to {width} components, but MORPH takes at most "
                f"{self.max_fields} fields of at most {self.max_components} components; group the {self.in_channels} "
                "channels into fewer fields (field_components=[3, 1, 1] is a 3-vector and two scalars)")
        if any(g not in (1, width) for g in groups):
            raise opzoo.ConfigError(f"{source}.field_components: {groups}: every field is a scalar (1) or has the "
                                    f"widest field's {width} components, as in MORPH's data (a scalar is repeated "
                                    "over the components; a narrower vector has no such rule)")
        return groups, width


class Morph(opzoo.Backbone):
    """``[B, *S, T_in, C] -> [B, *S, 1, C]`` around :class:`MorphNet`."""

    config_class = MorphConfig
    supports_grad_checkpointing = True
    takes_any_channel_count = True  # no tensor depends on the channel count (up to 3 fields of 3 components)
    no_weight_decay_keys = ("net.positions.table", "net.embed.field_query")

    def __init__(self, config: MorphConfig):
        super().__init__(config)
        config.validate("model_args")
        c = config
        self.net = MorphNet(patch_size=c.patch_size, dim=c.dim, depth=c.depth, heads=c.heads, heads_xa=c.heads_xa,
                            mlp_dim=c.mlp_dim, max_components=c.max_components, conv_filters=c.conv_filters,
                            max_ar=c.max_ar, max_patches=c.max_patches, max_fields=c.max_fields,
                            time_positions=c.time_positions, dropout=c.dropout, emb_dropout=c.emb_dropout)

    # ---- the wrapper: channels <-> (fields, components), S <-> (D, H, W), RevIN ----
    def _name(self) -> str:
        return self.preset_name or "morph"

    def check_input(self, x: Tensor) -> tuple[int, ...]:
        """The spatial grid of ``x`` after checking its shape, or ValueError saying what MORPH takes."""
        c = self.config
        if x.ndim not in (4, 5, 6) or tuple(x.shape[-2:]) != (c.in_timesteps, c.in_channels):
            raise ValueError(f"{self._name()} expects [B, *S, T_in={c.in_timesteps}, C={c.in_channels}] with S of 1, "
                             f"2 or 3 axes, got {list(x.shape)}")
        grid = tuple(x.shape[1:-2])
        bad = [n for n in grid if n > 1 and n % c.patch_size]
        if bad:
            raise ValueError(f"{self._name()}: every spatial axis longer than 1 must be a multiple of the patch size "
                             f"{c.patch_size}, got the grid {list(grid)}")
        tokens = 1
        for n, p in zip(grid, patch_sizes((1,) * (3 - len(grid)) + grid, c.patch_size)[3 - len(grid):]):
            tokens *= n // p
        if tokens > c.max_patches:
            raise ValueError(f"{self._name()}: the grid {list(grid)} makes {tokens} patches, more than the "
                             f"{c.max_patches} its position table was trained for (MORPH's limit: 128^3 points)")
        return grid

    def to_fields(self, x: Tensor) -> Tensor:
        """``[B, *S, T, C] -> [B, T, F, C', D, H, W]``: channels grouped into fields (scalars repeated over the
        components), the spatial axes right-aligned to ``(D, H, W)``."""
        groups, width = self.config.fields()
        b, t = x.shape[0], x.shape[-2]
        grid = tuple(x.shape[1:-2])
        x = x.movedim(-2, 1).movedim(-1, 2)  # [B, T, C, *S]
        x = x.reshape(b, t, x.shape[2], *(1,) * (3 - len(grid)), *grid)
        fields, start = [], 0
        for g in groups:
            part = x[:, :, start:start + g]
            fields.append(part.expand(-1, -1, width, -1, -1, -1) if g < width else part)
            start += g
        return torch.stack(fields, dim=2)

    def from_fields(self, y: Tensor, grid: tuple[int, ...]) -> Tensor:
        """``[B, F, C', D, H, W] -> [B, *S, 1, C]``: a scalar field is the mean of its copies."""
        groups, width = self.config.fields()
        parts = [y[:, f, :g] if g == width else y[:, f].mean(dim=1, keepdim=True) for f, g in enumerate(groups)]
        out = torch.cat(parts, dim=1).reshape(y.shape[0], -1, *grid)  # [B, C, *S]
        return out.movedim(1, -1).unsqueeze(-2)

    def revin_stats(self, v: Tensor) -> tuple[Tensor, Tensor]:
        """Per sample and field, the mean and ``sqrt(var + eps)`` over the window, components and space:
        ``[B, 1, F, 1, 1, 1, 1]`` each."""
        dims = (1, 3, 4, 5, 6)
        mean = v.mean(dim=dims, keepdim=True)
        var = v.var(dim=dims, keepdim=True, unbiased=False)
        return mean, torch.sqrt(var + self.config.revin_eps)

    def _channel_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        c = self.config
        if c.field_mean is None:
            raise opzoo.ConfigError(f"{self._name()}: normalization='stats' z-scores each channel by its data's statistics, "
                             f"and it has none: give field_mean and field_std (one per channel), or let opzoo compute "
                             f"them from a file's training split (opzoo eval, finetune)")
        return (torch.tensor(c.field_mean, dtype=x.dtype, device=x.device),
                torch.tensor(c.field_std, dtype=x.dtype, device=x.device))

    def _normalized(self, x: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor] | None, tuple[int, ...]]:
        grid = self.check_input(x)
        mode = self.config.normalization
        if mode == "stats":
            mean, std = self._channel_stats(x)
            return self.to_fields((x - mean) / std), None, grid
        v = self.to_fields(x)
        if mode == "none":
            return v, None, grid
        stats = self.revin_stats(v)
        if not torch.compiler.is_compiling():  # a data-dependent refusal; a compiled graph runs after eager checks
            self._refuse_frozen(v, stats)
        return (v - stats[0]) / stats[1], stats, grid

    def check_window(self, x: Tensor) -> None:
        """The refusal of :meth:`_refuse_frozen` for input windows ``[B, *S, T_in, C]``, without running the network
        (the fit asks it of each file's first windows)."""
        if self.config.normalization not in ("stats", "none"):
            v = self.to_fields(x)
            self._refuse_frozen(v, self.revin_stats(v))

    def _refuse_frozen(self, v: Tensor, stats: tuple[Tensor, Tensor]) -> None:
        """RevIN on the window breaks where a field is uniform over it: its variance is 0, so it is normalized to 0
        and de-normalized by sqrt(eps), and a rollout can never move it (a velocity starting at rest stays frozen)."""
        var = stats[1].detach().square() - self.config.revin_eps  # [B, 1, F, 1, 1, 1, 1]
        flat = var.reshape(var.shape[0], -1)
        if bool((flat < self.config.revin_eps).any()):
            b, f = (int(i) for i in (flat < self.config.revin_eps).nonzero()[0])
            groups, _ = self.config.fields()
            first = sum(groups[:f])
            chans = f"channel {first}" if groups[f] == 1 else f"channels {first}-{first + groups[f] - 1}"
            raise opzoo.ConfigError(f"{self._name()}: field {f} ({chans}) of sample {b} is uniform over the input window "
                             f"(variance below revin_eps={self.config.revin_eps:g}): RevIN on the window would "
                             f"normalize it to 0 and it could never change (upstream's RevIN is over the whole "
                             f"trajectory, which a forecast cannot see); use normalization='stats' (each channel by its training "
                             f"split's statistics: opzoo eval/rollout --model-args normalization=stats, finetune --set "
                             f"model.args.normalization=stats)")

    def _physical(self, y: Tensor, stats, grid) -> Tensor:
        if stats is not None:
            y = y * stats[1][:, 0] + stats[0][:, 0]
        out = self.from_fields(y, grid)
        if self.config.normalization == "stats":
            mean, std = self._channel_stats(out)
            out = out * std + mean
        return out

    def forward(self, x: Tensor) -> Tensor:
        v, stats, grid = self._normalized(x)
        y = self.net.decode(self.net.features(v, self._checkpoint_fn()), v.shape[2], v.shape[3], tuple(v.shape[-3:]))
        return self._physical(y, stats, grid)

    def _checkpoint_fn(self):
        return self.checkpointed if self.grad_checkpointing and torch.is_grad_enabled() else None

    # ---- timm's model API ----
    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, *S, T_in, C] -> [B, T_in, n, dim]``: the tokens after the last block (``n`` patches)."""
        v, _, _ = self._normalized(x)
        return self.net.features(v, self._checkpoint_fn())

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[B, T_in, n, dim] -> [B, *S, 1, C]``: the decoder on the last frame's tokens, brought back to physical
        units with the input window's statistics, so ``x`` is needed."""
        if x is None:
            raise ValueError(f"{self._name()}.forward_head needs x: the output is de-normalized with the input "
                             "window's statistics and laid out on its grid")
        v, stats, grid = self._normalized(x)
        return self._physical(self.net.decode(features, v.shape[2], v.shape[3], tuple(v.shape[-3:])), stats, grid)

    def forward_intermediates(self, x: Tensor, indices=None, intermediates_only: bool = False):
        """The tokens ``[B, T_in, n, dim]`` after the blocks ``indices``."""
        keep = set(self.block_indices(indices, len(self.net.blocks)))
        v, _, _ = self._normalized(x)
        net = self.net
        h = net.emb_drop((e := net.embed(v)) + net.emb_drop(net.positions(e.shape[1], e.shape[2])))
        grid, kept = net.token_grid(v.shape[-3:]), []
        for i, block in enumerate(net.blocks):
            h = block(h, grid)
            if i in keep:
                kept.append(h)
        return kept if intermediates_only else (h, kept)

    def group_matcher(self) -> dict:
        return {"stem": r"^net\.(?:embed|positions)\.", "blocks": r"^net\.blocks\.(\d+)\."}

    def grid_for(self, data_grid) -> tuple[tuple[int, ...], str]:
        """The data's own grid, or on each axis the nearest larger multiple of the patch, within the patches its
        position table holds (``max_patches``, MORPH's limit); a grid of more patches is scaled down, its aspect kept,
        to the largest that fits (the data is resampled to it, and predictions back)."""
        p, limit = self.config.patch_size, self.config.max_patches
        grid = tuple(n if n == 1 or n % p == 0 else -(-n // p) * p for n in (int(n) for n in data_grid))

        def patches(g) -> int:
            out = 1
            for n in g:
                out *= 1 if n == 1 else n // p
            return out

        if patches(grid) > limit:
            scale = (limit / patches(grid)) ** (1 / sum(n > 1 for n in grid))
            counts = [1 if n == 1 else max(1, int(n // p * scale)) for n in grid]
            while patches([c * p if n > 1 else 1 for c, n in zip(counts, grid)]) > limit:
                counts[max(range(len(counts)), key=lambda i: counts[i])] -= 1
            grid = tuple(c * p if n > 1 else 1 for c, n in zip(counts, grid))
            return grid, (f"a grid of about the data's aspect within the {limit} patches of {self._name()}'s "
                          f"position table (MORPH's limit); --resolution sets another")
        if grid == tuple(int(n) for n in data_grid):
            return grid, f"{self._name()} runs at any grid whose axes are 1 or multiples of its patch {p}"
        return grid, f"the nearest grid {self._name()} runs at: every axis longer than 1 a multiple of its patch {p}"

    @classmethod
    def io_layout(cls, old: MorphConfig, new: MorphConfig) -> dict:
        """No tensor depends on the channel count or (up to ``max_ar``) the window: fine-tuning on other fields or
        another window keeps every weight."""
        return {}
