"""MPP's AViT as an opzoo backbone: physical fields in and out, each channel one of the network's named state slots.

``forward(x: [B, X, Y, T_in, C]) -> [B, X, Y, 1, C]``. Around the network (:class:`opzoo_mpp.network.AViTNet`):

1. channel ``c`` is the state slot named ``fields[c]`` in ``state_names`` (MPP's vocabulary of fields, shared by
   every dataset; the pretrained one has 12 slots, 10 used: :data:`STATE_NAMES`);
2. the axes go to upstream's ``[T, B, C, H, W]`` with ``H`` the file's first spatial axis (upstream reads PDEBench's
   ``[N, T, X, Y]`` arrays so);
3. the network standardizes each sample's fields over the history and grid itself, and brings its prediction back;
4. ``periodic`` is upstream's boundary flag ``bcs`` (both axes): a periodic axis wraps its relative positions.

Fine-tuning on a field of no slot appends a slot for it (``state_names`` grows), as upstream's
``AViT.expand_projections`` does: the new columns and output rows start afresh, every other weight is kept.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch import Tensor

import opzoo

from .network import AViTNet

# MPP's 12 state slots, in the order upstream fills them (data_utils/datasets.py @ 38eefb1: MixedDataset with
# use_all_fields=True numbers the fields of DSET_NAME_TO_OBJECT's datasets in its order, swe, incompNS, diffre2d,
# compNS; each dataset's field_names from data_utils/hdf5_datasets.py). n_states: 12 leaves two slots unused.
STATE_NAMES = ("swe.h", "incompNS.Vx", "incompNS.Vy", "incompNS.particles", "diffre2d.activator",
               "diffre2d.inhibitor", "compNS.Vx", "compNS.Vy", "compNS.density", "compNS.pressure",
               "unused.10", "unused.11")
USED_SLOTS = STATE_NAMES[:10]
UNUSED_SLOTS = STATE_NAMES[10:]  # never trained on data; a new field takes one before new slots are appended
DEFAULT_FIELDS = ("compNS.Vx", "compNS.Vy", "compNS.density", "compNS.pressure")
# The fewest patches per axis the commands run MPP at. Its RMS instance norms divide each map by its std over the patch
# grid plus 1e-8 (models/spatial_modules.py RMSInstanceNorm2d @ 38eefb1): over 2x2 or 3x3 patches a map flat to
# float32 rounding is multiplied by up to 1e8, the residual stream grows by that factor at each such step, and a
# float32 rollout overflows (the attention's LayerNorm of values near 1e26) within a few steps; float64's range holds
# them (finite over 60 steps). Measured at random init (docs/models.md, MPP): 32x32 and 48x48 turn non-finite within 3-15 steps, 64x64 and 96x96 not in 30;
# upstream pretrained at 8x8 patches (128x128) and more.
MIN_PATCHES = 4


@dataclasses.dataclass
class MppConfig(opzoo.ModelConfig):
    """MPP-AViT's sizes (defaults: AViT-B, config/mpp_avit_b_config.yaml) and the fields it reads."""

    in_channels: int = 4
    out_channels: int = 4
    in_timesteps: int = 16  # n_steps: the history upstream pretrained on
    out_timesteps: int = 1
    dim: int = 768
    heads: int = 12
    depth: int = 12
    state_names: tuple[str, ...] = STATE_NAMES  # the slots; their number is the network's n_states
    fields: Optional[tuple[str, ...]] = DEFAULT_FIELDS  # the slot of each channel, by name
    periodic: bool = False
    drop_path: float = 0.2  # AViT's default: build_avit does not pass the config's drop_path (0.1) on

    per_channel_fields = ("fields",)

    def validate(self, source: str = "model_args") -> None:
        if self.in_channels != self.out_channels or self.out_timesteps != 1:
            raise opzoo.ConfigError(f"{source}: MPP predicts the next frame of its own fields: in_channels = "
                                    f"out_channels and out_timesteps = 1, got {self.in_channels} -> "
                                    f"{self.out_channels} channels, out_timesteps {self.out_timesteps}")
        if self.dim % 4 or self.dim % self.heads:
            raise opzoo.ConfigError(f"{source}.dim: {self.dim} must be a multiple of 4 and of the {self.heads} heads")
        if len(set(self.state_names)) != len(self.state_names):
            raise opzoo.ConfigError(f"{source}.state_names: a slot name appears twice in {list(self.state_names)}")
        if not 0.0 <= self.drop_path < 1.0:
            raise opzoo.ConfigError(f"{source}.drop_path: a rate in [0, 1), got {self.drop_path}")
        self.slots(source)

    def slots(self, source: str = "model_args") -> list[int]:
        """The slot index of each channel."""
        if self.fields is None:
            raise opzoo.ConfigError(f"{source}.fields: MPP reads each channel as one of its state slots; name the slot "
                                    f"of each of the {self.in_channels} channels (fields=[...], from "
                                    f"{', '.join(self.state_names)}); opzoo's fit names them from a file's fields")
        if len(self.fields) != self.in_channels:
            raise opzoo.ConfigError(f"{source}.fields: {len(self.fields)} names for {self.in_channels} channels")
        unknown = [f for f in self.fields if f not in self.state_names]
        if unknown:
            raise opzoo.ConfigError(f"{source}.fields: {', '.join(unknown)} is no state slot of this network (it has "
                                    f"{', '.join(self.state_names)})")
        if len(set(self.fields)) != len(self.fields):
            raise opzoo.ConfigError(f"{source}.fields: a slot read twice in {list(self.fields)}")
        return [self.state_names.index(f) for f in self.fields]


class MppAViT(opzoo.Backbone):
    """``[B, X, Y, T_in, C] -> [B, X, Y, 1, C]`` around :class:`AViTNet`."""

    config_class = MppConfig
    supports_grad_checkpointing = True
    size_multiple = AViTNet.patch_size  # every spatial axis a multiple of the patch

    def __init__(self, config: MppConfig):
        super().__init__(config)
        config.validate("model_args")
        c = config
        self.net = AViTNet(dim=c.dim, heads=c.heads, depth=c.depth, n_states=len(c.state_names),
                           drop_path=c.drop_path)
        self.register_buffer("slots", torch.tensor(c.slots(), dtype=torch.long), persistent=False)

    def _name(self) -> str:
        return self.preset_name or "mpp-avit"

    def to_upstream(self, x: Tensor) -> Tensor:
        """``[B, X, Y, T, C] -> [T, B, C, X, Y]`` after checking the shape."""
        c = self.config
        if x.ndim != 5 or x.shape[-1] != c.in_channels or x.shape[-2] < 1:
            raise ValueError(f"{self._name()} expects [B, X, Y, T_in, C={c.in_channels}], got {list(x.shape)}")
        bad = [n for n in x.shape[1:3] if n % self.size_multiple]
        if bad:
            raise ValueError(f"{self._name()}: both spatial axes must be multiples of the patch size "
                             f"{self.size_multiple}, got the grid {list(x.shape[1:3])}")
        return x.permute(3, 0, 4, 1, 2)

    @property
    def _periodic(self) -> tuple[bool, bool]:
        return (bool(self.config.periodic),) * 2

    def _run(self):
        return self.checkpointed if self.grad_checkpointing and torch.is_grad_enabled() else None

    def forward(self, x: Tensor) -> Tensor:
        v, mean, std = self.net.normalize(self.to_upstream(x))
        y = self.net.decode(self.net.features(v, self.slots, self._periodic, self._run()), self.slots)
        return (y * std[0] + mean[0]).permute(0, 2, 3, 1).unsqueeze(-2)  # [B, C, X, Y] -> [B, X, Y, 1, C]

    # ---- timm's model API ----
    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, X, Y, T_in, C] -> [T_in, B, dim, X/16, Y/16]``: the tokens after the last block."""
        v, _, _ = self.net.normalize(self.to_upstream(x))
        return self.net.features(v, self.slots, self._periodic, self._run())

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[T_in, B, dim, h, w] -> [B, X, Y, 1, C]``: the last frame decoded and brought back to the units of
        ``x`` (its history's mean and std), so ``x`` is needed."""
        if x is None:
            raise ValueError(f"{self._name()}.forward_head needs x: the output is brought back with the history's "
                             "mean and standard deviation")
        _, mean, std = self.net.normalize(self.to_upstream(x))
        y = self.net.decode(features, self.slots) * std[0] + mean[0]
        return y.permute(0, 2, 3, 1).unsqueeze(-2)

    def forward_intermediates(self, x: Tensor, indices=None, intermediates_only: bool = False):
        """The tokens ``[T_in, B, dim, h, w]`` after the blocks ``indices``."""
        keep = set(self.block_indices(indices, len(self.net.blocks)))
        v, _, _ = self.net.normalize(self.to_upstream(x))
        t, b = v.shape[:2]
        h = self.net.space_bag(v.permute(0, 1, 3, 4, 2), self.slots)
        h = self.net.embed(h.flatten(0, 1).permute(0, 3, 1, 2)).unflatten(0, (t, b))
        kept = []
        for i, block in enumerate(self.net.blocks):
            h = block(h, self._periodic)
            if i in keep:
                kept.append(h)
        return kept if intermediates_only else (h, kept)

    def group_matcher(self) -> dict:
        return {"stem": r"^net\.(?:space_bag|embed)\.", "blocks": r"^net\.blocks\.(\d+)\."}

    def grid_for(self, data_grid) -> tuple[tuple[int, ...], str]:
        """The data's own grid, or on each axis the nearest larger multiple of the patch 16, and at least
        :data:`MIN_PATCHES` patches: nothing in the weights is tied to a grid (relative position biases)."""
        p, least = AViTNet.patch_size, MIN_PATCHES * AViTNet.patch_size
        rounded = tuple(-(-int(n) // p) * p for n in data_grid)
        grid = tuple(max(n, least) for n in rounded)
        if grid == tuple(int(n) for n in data_grid):
            return grid, (f"{self._name()} runs at any grid whose axes are multiples of its patch {p}, at least "
                          f"{least}")
        if grid != rounded:
            return grid, (f"at least {MIN_PATCHES} patches of {p} on each axis: {self._few_patches}")
        return grid, (f"the data's grid rounded up on each axis to a multiple of {self._name()}'s patch {p} (it runs at "
                      f"multiples of it)")

    _few_patches = ("over fewer, its RMS instance norms (std over the patch grid + 1e-8, as upstream) multiply a map "
                    "flat over those few patches by up to 1e8, and a float32 rollout overflows within a few steps")

    def check_window(self, x: Tensor) -> None:
        """Refuses a grid of fewer than :data:`MIN_PATCHES` patches on an axis (the network itself, as upstream's,
        takes any multiple of the patch)."""
        p, least = AViTNet.patch_size, MIN_PATCHES * AViTNet.patch_size
        if any(int(n) < least for n in x.shape[1:3]):
            grid = "x".join(str(int(n)) for n in x.shape[1:3])
            runs = " ".join(str(max(-(-int(n) // p) * p, least)) for n in x.shape[1:3])
            raise opzoo.ConfigError(f"{self._name()} does not run at {grid}: it needs at least {MIN_PATCHES} patches "
                                    f"of {p} ({least}) on each axis; {self._few_patches}. --resolution {runs} runs it "
                                    f"(the default grid for this file)")

    @classmethod
    def io_layout(cls, old: MppConfig, new: MppConfig) -> dict:
        """No tensor depends on the channel count or the history; an unused slot renamed (a new field taking it) keeps
        its tensors; new state slots (``state_names`` grown, upstream's ``expand_projections``) keep the old slots'
        columns and output rows, the new ones freshly initialized."""
        n_old, n_new = len(old.state_names), len(new.state_names)
        if n_new < n_old or any(a != b and a not in UNUSED_SLOTS for a, b in zip(old.state_names, new.state_names)):
            return None  # a slot of data renamed, or slots dropped: not an adaptation
        if n_new == n_old:
            return {}  # only unused slots renamed (a new field takes one): every tensor as it is
        index = tuple(i if i < n_old else None for i in range(n_new))
        return {"net.space_bag.weight": [opzoo.DimMap(1, index)],
                "net.debed.out_kernel": [opzoo.DimMap(1, index)],
                "net.debed.out_bias": [opzoo.DimMap(0, index)]}
