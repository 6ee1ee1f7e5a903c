"""Walrus as an opzoo backbone: physical fields in and out, each channel one of the network's named slots.

``forward(x: [B, *S, T_in, C]) -> [B, *S, 1, C]`` for ``len(S)`` 2 or 3. Around :class:`opzoo_walrus.network.WalrusNet`,
as upstream's trainer runs it (PolymathicAI/walrus_steering ``walrus_steering/walrus_steering/trainer/training.py`` @ e963fad, ``rollout_model`` and
``SamplewiseRevNormalization``; ``walrus_steering/walrus_steering/data/inflated_dataset.py`` for 2-D data):

1. channel ``c`` is the slot named ``fields[c]`` in ``field_names`` (:data:`opzoo_walrus.fields.FIELD_INDEX_MAP`, the
   published 67);
2. 2-D data is embedded in 3-D: a trailing singleton axis (periodic, as upstream's metadata pads it), and the
   components a 2-D vector or tensor field lacks (``velocity_z`` beside ``velocity_x, velocity_y``) as zero channels;
3. each sample's fields divided by their RMS over the history and grid (no mean subtracted; at least 5e-6);
4. the network predicts the change to the next frame, divided by the RMS of the history's frame-to-frame changes (at
   least 5e-6): the output is the last frame plus the prediction times that RMS;
5. ``boundaries`` gives each axis's boundary in The Well's words (``periodic``, ``wall``, ``open``; ``wall/open`` for
   different sides);
6. ``jitter`` (upstream's ``jitter_patches: true``, at inference too): the padded grid rolled by a random amount before
   the stem, and the tokens along every periodic axis before each block; the draws come from torch's generator
   (``torch.manual_seed`` repeats them); ``jitter=False`` is the deterministic network (the JAX port's).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch import Tensor

import opzoo

from .fields import BOUNDARY_SLOTS, FIELD_INDEX_MAP, inflated
from .network import OPEN, PERIODIC, WALL, WalrusNet, accepted_sizes, kernels_for, pad_plan, tokens_per_axis

RMS_FLOOR = 5e-6  # SamplewiseRevNormalization.compute_stats's epsilon: the least RMS a field or its change is given
BOUNDARY_CODES = {"wall": WALL, "open": OPEN, "periodic": PERIODIC}
DEFAULT_FIELDS = ("density", "pressure", "velocity_x", "velocity_y")


def boundary_codes(boundaries, source: str = "model_args") -> list[list[int]]:
    """``[[before, after]] * axes`` in The Well's codes from ``("periodic", "wall/open", ...)``."""
    out = []
    for axis, word in enumerate(boundaries):
        sides = str(word).lower().split("/")
        if len(sides) == 1:
            sides = sides * 2
        if len(sides) != 2 or any(s not in BOUNDARY_CODES for s in sides):
            raise opzoo.ConfigError(f"{source}.boundaries[{axis}]: {word!r} is not a boundary: periodic, wall, open, "
                                    "or two of wall and open as before/after (wall/open)")
        if (PERIODIC in [BOUNDARY_CODES[s] for s in sides]) and sides[0] != sides[1]:
            raise opzoo.ConfigError(f"{source}.boundaries[{axis}]: {word!r}: a periodic axis is periodic on both sides")
        out.append([BOUNDARY_CODES[s] for s in sides])
    return out


@dataclasses.dataclass
class WalrusConfig(opzoo.ModelConfig):
    """Walrus's sizes (defaults: the published checkpoint, extended_config.yaml) and the fields it reads."""

    in_channels: int = 4
    out_channels: int = 4
    in_timesteps: int = 6  # n_steps_input: the history upstream trained on
    out_timesteps: int = 1
    spatial_dims: int = 2
    hidden: int = 1408
    heads: int = 16
    depth: int = 40
    inner: int = 352  # intermediate_dim: the stem's and decoder's inner width
    groups: int = 16
    drop_path: float = 0.05
    field_names: tuple[str, ...] = FIELD_INDEX_MAP  # the slots; their number is the network's n_states
    fields: Optional[tuple[str, ...]] = DEFAULT_FIELDS  # the slot of each channel, by name
    boundaries: Optional[tuple[str, ...]] = None  # each axis's, in The Well's words (None: periodic on every axis)
    jitter: bool = True  # upstream's jitter_patches (at inference too)

    per_channel_fields = ("fields",)

    def validate(self, source: str = "model_args") -> None:
        if self.in_channels != self.out_channels or self.out_timesteps != 1:
            raise opzoo.ConfigError(f"{source}: Walrus predicts the next frame of its own fields: in_channels = "
                                    f"out_channels and out_timesteps = 1, got {self.in_channels} -> "
                                    f"{self.out_channels} channels, out_timesteps {self.out_timesteps}")
        if self.in_timesteps < 2:
            raise opzoo.ConfigError(f"{source}.in_timesteps: {self.in_timesteps}; Walrus scales its prediction by the "
                                    "RMS of the history's frame-to-frame changes, so it needs at least 2 frames")
        if self.spatial_dims not in (2, 3):
            raise opzoo.ConfigError(f"{source}.spatial_dims: Walrus runs 2-D and 3-D grids, got {self.spatial_dims}")
        if self.hidden % self.heads or (self.hidden // self.heads) % 8:
            raise opzoo.ConfigError(f"{source}.hidden: {self.hidden} must be the {self.heads} heads times a multiple "
                                    "of 8 (each head's rotary embedding turns three quarters of its channels in pairs)")
        if self.inner % self.groups or self.hidden % self.groups:
            raise opzoo.ConfigError(f"{source}.groups: {self.groups} must divide inner {self.inner} and hidden "
                                    f"{self.hidden}")
        if tuple(self.field_names[:3]) != BOUNDARY_SLOTS or len(set(self.field_names)) != len(self.field_names):
            raise opzoo.ConfigError(f"{source}.field_names: the first three slots are the boundary flags "
                                    f"{', '.join(BOUNDARY_SLOTS)} and no name appears twice")
        if not 0.0 <= self.drop_path < 1.0:
            raise opzoo.ConfigError(f"{source}.drop_path: a rate in [0, 1), got {self.drop_path}")
        if self.boundaries is not None and len(self.boundaries) != self.spatial_dims:
            raise opzoo.ConfigError(f"{source}.boundaries: {len(self.boundaries)} for {self.spatial_dims} axes")
        boundary_codes(self.axis_boundaries(), source)
        self.slots(source)

    def axis_boundaries(self) -> tuple[str, ...]:
        """``boundaries``, or periodic on every axis."""
        return tuple(self.boundaries) if self.boundaries is not None else ("periodic",) * self.spatial_dims

    def slots(self, source: str = "model_args") -> list[int]:
        """The slot of each channel, then of the zero components a 2-D field lacks in 3-D."""
        if self.fields is None:
            raise opzoo.ConfigError(f"{source}.fields: Walrus reads each channel as one of its field slots; name the "
                                    f"slot of each of the {self.in_channels} channels (fields=[...], The Well's names: "
                                    "density, velocity_x, ...); opzoo's fit names them from a file's fields")
        if len(self.fields) != self.in_channels:
            raise opzoo.ConfigError(f"{source}.fields: {len(self.fields)} names for {self.in_channels} channels")
        unknown = [f for f in self.fields if f not in self.field_names or f in BOUNDARY_SLOTS]
        if unknown:
            raise opzoo.ConfigError(f"{source}.fields: {', '.join(unknown)} is no field slot of this network (it has "
                                    f"{len(self.field_names) - 3}: {', '.join(self.field_names[3:8])}, ...)")
        if len(set(self.fields)) != len(self.fields):
            raise opzoo.ConfigError(f"{source}.fields: a slot read twice in {list(self.fields)}")
        names = tuple(self.fields) + (inflated(self.fields, self.field_names) if self.spatial_dims == 2 else ())
        return [self.field_names.index(f) for f in names]


class Walrus(opzoo.Backbone):
    """``[B, *S, T_in, C] -> [B, *S, 1, C]`` around :class:`WalrusNet`."""

    config_class = WalrusConfig
    supports_grad_checkpointing = True

    def __init__(self, config: WalrusConfig):
        super().__init__(config)
        config.validate("model_args")
        c = config
        self.net = WalrusNet(len(c.field_names), c.hidden, c.heads, c.depth, c.inner, c.groups, drop_path=c.drop_path)
        self.register_buffer("slots", torch.tensor(c.slots(), dtype=torch.long), persistent=False)
        codes = boundary_codes(c.axis_boundaries())
        self.bcs = codes + [[PERIODIC, PERIODIC]] * (3 - len(codes))  # upstream pads 2-D metadata with a periodic axis

    def _name(self) -> str:
        return self.preset_name or "walrus"

    # ---- the layout and the normalization ----
    def to_upstream(self, x: Tensor) -> Tensor:
        """``[B, *S, T, C] -> [T, B, C', H, W, D]``: the zero components of 2-D data appended, ``D = 1`` for 2-D."""
        c = self.config
        d = c.spatial_dims
        if x.ndim != d + 3 or x.shape[-1] != c.in_channels or x.shape[-2] < 2:
            raise ValueError(f"{self._name()} expects [B, *S ({d} axes), T_in >= 2, C={c.in_channels}], got "
                             f"{list(x.shape)}")
        self.check_grid(x.shape[1:1 + d])
        h = x.movedim(-2, 0).movedim(-1, 2)  # [T, B, C, *S]
        extra = len(self.slots) - c.in_channels
        if extra:
            h = torch.cat([h, h.new_zeros(*h.shape[:2], extra, *h.shape[3:])], dim=2)
        return h if d == 3 else h.unsqueeze(-1)

    def check_grid(self, grid) -> None:
        full = tuple(int(n) for n in grid) + (1,) * (3 - len(grid))
        try:
            kernels_for(full)
        except ValueError:
            sizes = ", ".join(str(s) for s in accepted_sizes(full))
            raise opzoo.ConfigError(f"{self._name()} does not run at {'x'.join(map(str, grid))}: its stem makes "
                                    f"{tokens_per_axis(full)} tokens per axis, so each axis is one of {sizes}; "
                                    f"--resolution {' '.join(str(n) for n in self.grid_for(grid)[0])} runs it") from None

    @staticmethod
    def rms(v: Tensor) -> tuple[Tensor, Tensor]:
        """``[T, B, C, *S]`` -> the RMS of each sample's fields over time and grid, and of their changes between
        frames, each at least :data:`RMS_FLOOR` (``[1, B, C, 1, 1, 1]``), in float32 at least and outside autocast
        (upstream's ``compute_stats``)."""
        dims = (0, *range(3, v.ndim))
        with torch.autocast(device_type=v.device.type, enabled=False):  # in float32 at least, as upstream's
            v = v if v.dtype in (torch.float32, torch.float64) else v.float()
            floor = torch.tensor(RMS_FLOOR, dtype=v.dtype, device=v.device)
            field = torch.maximum(v.square().mean(dims, keepdim=True).sqrt(), floor)
            change = torch.maximum((v[1:] - v[:-1]).square().mean(dims, keepdim=True).sqrt(), floor)
        return field, change

    def _jitter(self, grid, jittered: bool = True):
        if not (jittered and self.config.jitter):
            return None, None
        jitter = self.net.jitter_rolls(grid, self.bcs)
        tokens = [n // (a * b) for n, (a, b) in zip(grid, kernels_for(grid))]
        return jitter, self.net.block_rolls(tokens, self.bcs)

    def _run(self):
        return self.checkpointed if self.grad_checkpointing and torch.is_grad_enabled() else None

    def _features(self, v: Tensor, field: Tensor, jittered: bool = True):
        jitter, rolls = self._jitter(v.shape[3:], jittered)
        h, plan = self.net.encode(v / field, self.slots, self.bcs, jitter)
        return self.net.process(h, self.bcs, rolls, self._run()), plan

    def _out(self, v: Tensor, y: Tensor, change: Tensor) -> Tensor:
        """The last frame plus the change, the user's channels, ``[B, *S, 1, C]``."""
        out = (v[-1:] + y * change)[:, :, :self.config.in_channels]
        if self.config.spatial_dims == 2:
            out = out.squeeze(-1)
        return out.movedim(2, -1).movedim(0, -2)

    def forward(self, x: Tensor) -> Tensor:
        v = self.to_upstream(x)
        field, change = self.rms(v)
        h, plan = self._features(v, field)
        return self._out(v, self.net.decode(h[-1:], self.slots, self.bcs, plan), change)

    # ---- timm's model API ----
    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, *S, T_in, C] -> [T_in, B, hidden, h, w, d]``: the tokens after the last block, without jitter."""
        v = self.to_upstream(x)
        return self._features(v, self.rms(v)[0], jittered=False)[0]

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[T_in, B, hidden, h, w, d] -> [B, *S, 1, C]``: the last frame's tokens decoded and brought back to the
        units of ``x`` (its history's last frame and RMS of changes), so ``x`` is needed; without jitter, as
        :meth:`forward_features`."""
        if x is None:
            raise ValueError(f"{self._name()}.forward_head needs x: the output is the history's last frame plus the "
                             "predicted change times the RMS of its changes")
        v = self.to_upstream(x)
        _, change = self.rms(v)
        grid = v.shape[3:]
        kernels = kernels_for(grid)
        const, circ = pad_plan(grid, self.bcs, kernels, self.net.base_kernels, jitter=False)
        plan = (grid, kernels, const, circ, None)
        return self._out(v, self.net.decode(features[-1:], self.slots, self.bcs, plan), change)

    def forward_intermediates(self, x: Tensor, indices=None, intermediates_only: bool = False):
        """The tokens ``[T_in, B, hidden, h, w, d]`` after the blocks ``indices`` (without jitter)."""
        keep = set(self.block_indices(indices, len(self.net.blocks)))
        v = self.to_upstream(x)
        h, _ = self.net.encode(v / self.rms(v)[0], self.slots, self.bcs, None)
        kept = []
        for i, block in enumerate(self.net.blocks):
            h = block(h)
            if i in keep:
                kept.append(h)
        return kept if intermediates_only else (h, kept)

    def group_matcher(self) -> dict:
        return {"stem": r"^net\.(?:encoder_dummy|embed)\.?", "blocks": r"^net\.blocks\.(\d+)\."}

    def grid_for(self, data_grid) -> tuple[tuple[int, ...], str]:
        """The data's grid where the stem takes it, else on each axis the nearest larger size it takes (32 tokens per
        axis in 2-D: 32, 128, 256, ...; 16 in 3-D: 16, 64, 128, ...)."""
        full = tuple(int(n) for n in data_grid) + (1,) * (3 - len(data_grid))
        sizes = accepted_sizes(full)
        grid = tuple(next((s for s in sizes if s >= n), sizes[-1]) for n in data_grid)
        if grid == tuple(int(n) for n in data_grid):
            return grid, f"{self._name()} runs at this grid (its stem takes {', '.join(map(str, sizes))} per axis)"
        over = " (down to its largest where the data's axis is longer)" if any(n > sizes[-1] for n in data_grid) else ""
        return grid, (f"the nearest larger grid {self._name()}'s stem takes on each axis{over} "
                      f"({', '.join(map(str, sizes))}: {tokens_per_axis(full)} tokens per axis)")

    def random_inference(self) -> str:
        if not self.config.jitter:
            return ""
        return ("jitter on, as upstream runs Walrus (jitter_patches: true, at inference too): each prediction rolls "
                "the padded grid and, before each block, the tokens along every periodic axis by random amounts "
                "(torch's generator: torch.manual_seed repeats a prediction); --model-args jitter=false runs the "
                "deterministic network")

    def check_window(self, x: Tensor) -> None:
        self.check_grid(x.shape[1:1 + self.config.spatial_dims])

    @classmethod
    def io_layout(cls, old: WalrusConfig, new: WalrusConfig) -> dict | None:
        """No tensor depends on the channel count, the history or the grid; new slots (``field_names`` grown: a new
        field, as upstream's ``align_checkpoint_with_field_to_index_map``) keep the old slots' columns of the stem and
        rows of the decoder, the new ones freshly initialized."""
        n_old, n_new = len(old.field_names), len(new.field_names)
        if n_new < n_old or tuple(new.field_names[:n_old]) != tuple(old.field_names):
            return None
        if n_new == n_old:
            return {}
        index = tuple(i if i < n_old else None for i in range(n_new))
        layout = {}
        for d in ("2", "3"):
            layout[f"net.embed.{d}.proj1.weight"] = [opzoo.DimMap(1, index)]
            layout[f"net.debed.{d}.proj2.weight"] = [opzoo.DimMap(1, index)]
            layout[f"net.debed.{d}.proj2.bias"] = [opzoo.DimMap(0, index)]
        return layout
