"""PDE-Transformer's separate-channel network as an opzoo backbone: physical fields in and out, any number of channels.

``forward(x: [B, H, W, 1, C]) -> [B, H, W, 1, C]``, as pdetransformer's supervised training and prediction feed the
network (``core/separate_channels/train_supervised.py``: ``Supervised`` with ``timesteps: 2``, the task
``ForwardPrediction(m=1, n=1, task_idx=0)``; ``get_model_input``, ``MultiStepMSE.predict``):

1. with ``normalization="zscore"``, each channel standardized with ``mean``/``std`` (their data pipeline's
   ``mean-std``);
2. per channel two frame slots: the known frame, then zeros where the next frame is to be predicted; diffusion time
   0, task 0 (forward prediction), the channel's field type (``channel_types``, indices into ``FIELDS``) and the
   PDE (``pde_type``, an index into ``TASKS``); ``None`` gives the "no label" class;
3. the network (``separate_net.SeparateChannelNet``); the second slot is the prediction.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch
from torch import Tensor

import opzoo

from .backbones import PdetBackbone, PdetConfig
from .separate_net import SeparateChannelNet


@dataclasses.dataclass
class PdetSeparateConfig(PdetConfig):
    """The separate-channel PDE-Transformer (any number of channels)."""

    per_channel_fields = ("channel_types",)
    num_timesteps: int = 2  # frame slots per channel: the known frame and the predicted one
    pde_type: Optional[int] = None  # the PDE's index in opzoo_pdet.TASKS; None: the "no label" class
    channel_types: Optional[list[int]] = None  # each channel's field type, an index into opzoo_pdet.FIELDS

    def check(self) -> None:
        super().check()
        if self.num_timesteps != 2:
            raise opzoo.ConfigError(f"num_timesteps: the separate-channel PDE-Transformer predicts in two frame slots "
                                    f"(the known frame, the predicted one), got {self.num_timesteps}")
        if self.in_channels != self.out_channels:
            raise opzoo.ConfigError(f"in_channels/out_channels: every channel is predicted, got {self.in_channels}/"
                                    f"{self.out_channels}")
        self.check_label("pde_type", self.pde_type)
        if self.channel_types is not None:
            if len(self.channel_types) != self.in_channels:
                raise opzoo.ConfigError(f"channel_types: one field type per channel ({self.in_channels}), got "
                                        f"{self.channel_types}")
            for k in self.channel_types:
                self.check_label("channel_types", k)


class PdetSeparateChannels(PdetBackbone):
    """``[B, H, W, 1, C] -> [B, H, W, 1, C]`` around :class:`SeparateChannelNet`, for any ``C``."""

    config_class = PdetSeparateConfig
    takes_any_channel_count = True  # no tensor depends on the number of channels

    def build_net(self, c: PdetSeparateConfig) -> SeparateChannelNet:
        return SeparateChannelNet(c.num_timesteps, c.hidden_size, c.depth, c.num_heads, c.window_size, c.patch_size,
                                  c.mlp_ratio, c.num_classes, c.class_dropout_prob, c.periodic)

    @classmethod
    def io_layout(cls, old: PdetSeparateConfig, new: PdetSeparateConfig) -> dict | None:
        """No tensor depends on the number of channels: any count loads the same weights (new channels' field
        types are the "no label" class unless ``channel_types`` says)."""
        return {} if (old.in_timesteps, old.out_timesteps) == (new.in_timesteps, new.out_timesteps) else None

    @property
    def size_multiple(self) -> int:
        """Every spatial size must be a multiple of this (patch and down-samplings; with walls, whole windows)."""
        c = self.config
        return self.net.size_multiple * (1 if c.periodic else c.window_size)

    def grid_ok(self, size: int) -> bool:
        return size % self.size_multiple == 0

    def _slots(self, x: Tensor) -> Tensor:
        """``[B, H, W, 1, C]`` physical -> the network's ``[B, C, 2, H, W]``: the standardized frame, then zeros."""
        c = self.config
        name = self.preset_name or "pdet-sc"
        frame = self.standardized(x).permute(0, 3, 1, 2)  # [B, C, H, W]
        h, w = x.shape[1:3]
        if h % self.size_multiple or w % self.size_multiple:
            raise ValueError(f"{name}: the grid {h}x{w} must be a multiple of {self.size_multiple} on both axes "
                             f"(patch {c.patch_size}, {self.net.levels} down-samplings"
                             + ("" if c.periodic else f", whole {c.window_size}x{c.window_size} windows") + ")")
        return torch.stack([frame, torch.zeros_like(frame)], dim=2)

    def _embeddings(self, batch: int, device, pde_type=None, channel_types=None) -> list[Tensor]:
        """Per level ``e_i``; ``pde_type`` (an int or ``[B]``) and ``channel_types`` (``[C]`` or ``[B, C]``) replace
        the config's labels for this call, per sample as their data labels each sample."""
        c = self.config
        shape = (batch, c.in_channels)
        none = c.num_classes  # the "no label" class
        given = pde_type is not None or channel_types is not None  # the config's were checked when it was built
        types = c.channel_types if channel_types is None else channel_types
        types = torch.as_tensor(types if types is not None else [none] * c.in_channels, dtype=torch.long,
                                device=device)
        pde = c.pde_type if pde_type is None else pde_type
        pde = torch.as_tensor(none if pde is None else pde, dtype=torch.long, device=device)
        pde = pde.reshape(-1, 1) if pde.ndim == 1 else pde
        try:
            types, pde = types.expand(shape), pde.expand(shape)
        except RuntimeError:
            raise ValueError(f"labels: channel_types {list(types.shape)} and pde_type {list(pde.shape)} must fit "
                             f"[B={batch}, C={c.in_channels}] (channel_types [C] or [B, C]; pde_type one or [B])") from None
        for key, value in (("channel_types", types), ("pde_type", pde)) if given else ():
            if bool(((value < 0) | (value > none)).any()):
                raise ValueError(f"{key}: labels lie in [0, {none}], got {value.tolist()}")
        zeros = torch.zeros(shape, dtype=torch.long, device=device)
        return self.net.embeddings(torch.zeros(shape, device=device), types, pde, zeros)

    def feedback(self, out: Tensor, channel_types: Sequence[int] | Tensor | None = None, **_) -> Tensor:
        """A channel of field type 0 (their padding: its field id is 0) is fed back as zeros, as pdetransformer's
        rollout does (core/separate_channels/train_supervised.py @ 850e09d, ``Supervised.predict``: "set to zero
        where channel_id is zero"); its prediction itself is kept in the output, as theirs is."""
        types = self.config.channel_types if channel_types is None else channel_types
        if types is None:
            return out
        keep = (torch.as_tensor(types, device=out.device) != 0).to(out.dtype)  # [C] or [B, C]
        return out * (keep if keep.ndim == 1 else keep[:, None, None, None, :])

    def _physical(self, y: Tensor) -> Tensor:
        """The network's ``[B, C, 2, H, W]`` -> the predicted frame ``[B, H, W, 1, C]`` in physical units."""
        return (y[:, :, 1].permute(0, 2, 3, 1) * self.std + self.mean).unsqueeze(-2)

    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, H, W, 1, C] -> [B, C, H/p, W/p, D_1]``: each channel's tokens after the last decoder stage."""
        e = self._embeddings(x.shape[0], x.device)
        return self.net.features(self._slots(x), e, (), self.checkpointed)[0].permute(0, 1, 3, 4, 2)

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[B, C, H/p, W/p, D_1] -> [B, H, W, 1, C]`` (``x`` is not needed)."""
        e1 = self._embeddings(features.shape[0], features.device)[1]
        return self._physical(self.net.head(features.permute(0, 1, 4, 2, 3), e1))

    def forward_intermediates(self, x: Tensor, indices=None, intermediates_only: bool = False):
        """The stages' outputs ``[B, C, H', W', D']`` in the order the data meets them (the last is the features)."""
        keep = self.block_indices(indices, len(self.net.stage_names))
        e = self._embeddings(x.shape[0], x.device)
        h, kept = self.net.features(self._slots(x), e, keep, self.checkpointed)
        kept = [k.permute(0, 1, 3, 4, 2) for k in kept]
        return kept if intermediates_only else (h.permute(0, 1, 3, 4, 2), kept)

    def forward(self, x: Tensor, pde_type: int | Tensor | None = None,
                channel_types: Sequence[int] | Tensor | None = None) -> Tensor:
        """``[B, H, W, 1, C] -> [B, H, W, 1, C]``; ``pde_type`` (int or ``[B]``) and ``channel_types`` (``[C]`` or
        ``[B, C]``) replace the config's labels for this call."""
        e = self._embeddings(x.shape[0], x.device, pde_type, channel_types)
        return self._physical(self.net.head(self.net.features(self._slots(x), e, (), self.checkpointed)[0], e[1]))
