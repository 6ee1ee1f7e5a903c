"""PDE-Transformer's mixed-channel network as an opzoo backbone: physical fields in and out.

``forward(x: [B, H, W, 1, C]) -> [B, H, W, 1, C]``: one frame to the next, as pdetransformer's supervised training
(``SingleStepSupervised``: ``data[:, 0]`` in, the next frame the target) and its rollout pipeline
(``VideoPipelineDirect``: each prediction fed back) use the network. Around the network:

1. with ``normalization="zscore"``, each channel is standardized with ``mean``/``std`` (pdetransformer's data
   pipeline does this per dataset, ``normalize_data: mean-std``; the network never sees physical units), and the
   output is brought back;
2. channels-first ``[B, C, H, W]``, the diffusion time 0 (a supervised step) and the class label ``task_id`` (the
   PDE's index in the pretraining mixture; ``None``: the "no label" class);
3. the network (``mixed_net.MixedChannelNet``).
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Optional

import torch
from torch import Tensor

import opzoo

from .mixed_net import MixedChannelNet

SIZES = {  # pdetransformer 0.1.11 core/mixed_channels/pde_transformer.py PDE_S / PDE_B / PDE_L
    "PDE-S": {"hidden_size": 96, "num_heads": 4},
    "PDE-B": {"hidden_size": 192, "num_heads": 8},
    "PDE-L": {"hidden_size": 384, "num_heads": 16},
}
DEPTH = [2, 5, 8, 5, 2]


@dataclasses.dataclass
class PdetConfig(opzoo.ModelConfig):
    """What both PDE-Transformers share (defaults: PDE-S, as the -s checkpoints were trained)."""

    in_channels: int = 2
    out_channels: int = 2
    in_timesteps: int = 1
    out_timesteps: int = 1
    spatial_dims: int = 2
    hidden_size: int = 96
    depth: list[int] = dataclasses.field(default_factory=lambda: list(DEPTH))
    num_heads: int = 4
    window_size: int = 8
    patch_size: int = 4
    mlp_ratio: float = 4.0
    num_classes: int = 1000
    class_dropout_prob: float = 0.1
    periodic: bool = True  # the boundary: shifted windows wrap around (True) or are masked at the edge (False)
    normalization: Literal["none", "zscore"] = "none"
    mean: list[float] = dataclasses.field(default_factory=list)
    std: list[float] = dataclasses.field(default_factory=list)

    def check(self) -> None:
        if (self.in_timesteps, self.out_timesteps, self.spatial_dims) != (1, 1, 2):
            raise opzoo.ConfigError("in_timesteps/out_timesteps/spatial_dims: a PDE-Transformer maps one 2D frame to "
                                    f"the next, got {self.in_timesteps}/{self.out_timesteps}/{self.spatial_dims}")
        if self.normalization == "zscore" and (self.mean or self.std):  # none yet: fitted from data before use
            for key in ("mean", "std"):
                if len(getattr(self, key)) != self.in_channels or self.in_channels != self.out_channels:
                    raise opzoo.ConfigError(f"{key}: normalization='zscore' needs one value per channel "
                                            f"({self.in_channels} in, {self.out_channels} out), got "
                                            f"{getattr(self, key)}")
            if min(self.std) <= 0:
                raise opzoo.ConfigError(f"std: every value must be positive, got {self.std}")

    def check_label(self, key: str, value: int | None) -> None:
        if value is not None and not 0 <= value <= self.num_classes:
            raise opzoo.ConfigError(f"{key} {value}: a label in [0, {self.num_classes}] ({self.num_classes} is the "
                                    "'no label' class)")


@dataclasses.dataclass
class PdetMixedConfig(PdetConfig):
    """The mixed-channel PDE-Transformer."""

    max_hidden_size: int = 2048
    task_id: Optional[int] = None  # the class label given to the network; None: the "no label" class

    def check(self) -> None:
        super().check()
        self.check_label("task_id", self.task_id)


@dataclasses.dataclass
class PdetPretrainedCfg(opzoo.PretrainedCfg):
    """What a PDE-Transformer checkpoint records beyond :class:`opzoo.PretrainedCfg`'s."""

    input_normalization: Optional[str] = None  # what the network expects its input to be standardized with
    tasks: Optional[str] = None  # what the class labels mean


class PdetBackbone(opzoo.Backbone):
    """What both PDE-Transformer backbones share: the optional z-score around the network, the input's shape, the
    layer groups for fine-tuning."""

    # measured (docs/export.md): a dynamic grid takes 10x longer to trace, guards on the window count, and its ONNX
    # graph fails at another batch
    fixed_export_grid = ("its shifted windows pad the latent grid by amounts torch.export fixes for the traced grid")

    config_class = PdetConfig
    pretrained_cfg_class = PdetPretrainedCfg
    supports_grad_checkpointing = True
    # pdetransformer's data pipeline pads a PDE's missing channels with zeros (data/multi_module.py @ 850e09d:
    # torch.zeros up to max_channels, their field id 0)
    channel_pad_value = 0.0

    def __init__(self, config: PdetConfig):
        super().__init__(config)
        config.check()
        self.net = self.build_net(config)
        zscore = config.normalization == "zscore"  # config, not weights (upstream's files do not have them)
        self.register_buffer("mean", torch.tensor(config.mean if zscore else 0.0), persistent=False)
        self.register_buffer("std", torch.tensor(config.std if zscore else 1.0), persistent=False)

    def build_net(self, config: PdetConfig) -> torch.nn.Module:
        raise NotImplementedError

    def group_matcher(self) -> dict:
        """The patch embedding and the conditioning embedders, then each stage in the order the data meets them (its
        down- or up-sampling and channel reduction with it); the head is the output convolution and final layer."""
        n = self.net.levels
        order = [f"encoder_level_{i}|down{i}_{i + 1}" for i in range(n)] + ["latent"]
        order += [f"up{i + 1}_{i}|reduce_chan_level{i}|decoder_level_{i}" for i in range(n - 1, -1, -1)]
        return {"stem": r"^net\.(?:x_embedder|[a-z_]+_embedder_\d+)\.",
                "blocks": [(rf"^net\.(?:{names})\.", i) for i, names in enumerate(order)]}

    def grid_ok(self, size: int) -> bool:
        """Whether one axis of ``size`` points suits the network (its patch and down-samplings; with walls, whole
        windows at every level where a window fits)."""
        c = self.config
        if size % self.net.size_multiple:
            return False
        return c.periodic or all(size // (c.patch_size * 2**level) < c.window_size or
                                 (size // (c.patch_size * 2**level)) % c.window_size == 0
                                 for level in range(self.net.levels + 1))

    def grid_for(self, data_grid) -> tuple[tuple[int, ...], str]:
        """The data's own grid, or on each axis the nearest larger size the network takes: a PDE-Transformer has no
        resolution-bound embedding (windowed attention, relative positions), so nothing ties its weights to the
        256x256 grid it was trained at."""
        name = self.preset_name or type(self).__name__
        grid = []
        for size in data_grid:
            g = max(int(size), 1)
            while not self.grid_ok(g):
                g += 1
            grid.append(g)
        if tuple(grid) == tuple(data_grid):
            return tuple(grid), f"{name} runs at any grid that suits its patches and windows"
        return tuple(grid), (f"the nearest grid {name} runs at: every axis a multiple of {self.net.size_multiple}"
                             + ("" if self.config.periodic else f", whole {self.config.window_size}x"
                                f"{self.config.window_size} windows with walls"))

    def standardized(self, x: Tensor) -> Tensor:
        """``[B, H, W, 1, C]`` physical -> ``[B, H, W, C]`` standardized (the identity with ``normalization='none'``),
        after checking the shape."""
        c = self.config
        name = self.preset_name or type(self).__name__
        if x.ndim != 5 or tuple(x.shape[-2:]) != (1, c.in_channels):
            raise ValueError(f"{name} expects [B, X, Y, T_in=1, C={c.in_channels}], got {list(x.shape)}")
        if c.normalization == "zscore" and not c.mean:
            raise opzoo.ConfigError(f"{name} standardizes each channel by its dataset's mean and std, as its weights were "
                             f"trained (normalization='zscore'), and has none: give mean and std (one per channel), let "
                             f"opzoo compute them from a file's training split (opzoo eval, finetune), or pass "
                             f"normalization='none' for fields you standardized")
        return (x[..., 0, :] - self.mean) / self.std


class PdetMixedChannels(PdetBackbone):
    """``[B, H, W, 1, C] -> [B, H, W, 1, C]`` around :class:`MixedChannelNet`."""

    config_class = PdetMixedConfig

    def build_net(self, c: PdetMixedConfig) -> MixedChannelNet:
        return MixedChannelNet(c.in_channels, c.out_channels, c.hidden_size, c.depth, c.num_heads, c.window_size,
                               c.patch_size, c.mlp_ratio, c.num_classes, c.class_dropout_prob, c.periodic,
                               c.max_hidden_size)

    @property
    def size_multiple(self) -> int:
        """Every spatial size of an input must be a multiple of this (the patch and the down-samplings)."""
        return self.net.size_multiple

    def check_grid(self, h: int, w: int) -> None:
        c = self.config
        multiple = self.net.size_multiple
        if h % multiple or w % multiple:
            raise ValueError(f"{self.preset_name or 'pdet-mc'}: the grid {h}x{w} must be a multiple of {multiple} "
                             f"(patch {c.patch_size}, {self.net.levels} down-samplings by 2) on both axes")
        if c.periodic:
            return
        for level in range(self.net.levels + 1):  # Swin's edge mask needs whole windows where a window fits
            gh, gw = h // (c.patch_size * 2**level), w // (c.patch_size * 2**level)
            if gh >= c.window_size and gw >= c.window_size and (gh % c.window_size or gw % c.window_size):
                raise ValueError(f"{self.preset_name or 'pdet-mc'}: with periodic=False every level's grid must hold "
                                 f"whole {c.window_size}x{c.window_size} windows; level {level} is {gh}x{gw} "
                                 f"(choose a grid that is a multiple of {multiple * c.window_size})")

    def _net_input(self, x: Tensor) -> Tensor:
        frame = self.standardized(x)
        self.check_grid(x.shape[1], x.shape[2])
        return frame.permute(0, 3, 1, 2)

    def _labels(self, x: Tensor, task_id=None) -> Tensor | None:
        """``[B]`` class labels: ``task_id`` per sample (a ``[B]`` tensor, as their data labels each sample with its
        PDE) or for the batch (an int), else the config's; None: the "no label" class."""
        task = self.config.task_id if task_id is None else task_id
        if task is None:
            return None
        if isinstance(task, Tensor):
            labels = task.to(device=x.device, dtype=torch.long).reshape(-1)
            if labels.numel() != x.shape[0]:
                raise ValueError(f"task_id: one label per sample ({x.shape[0]}), got {list(task.shape)}")
            if bool(((labels < 0) | (labels > self.config.num_classes)).any()):
                raise ValueError(f"task_id: labels lie in [0, {self.config.num_classes}], got {labels.tolist()}")
            return labels
        self.config.check_label("task_id", int(task))
        return torch.full((x.shape[0],), int(task), dtype=torch.long, device=x.device)

    @classmethod
    def io_layout(cls, old: PdetMixedConfig, new: PdetMixedConfig) -> dict:
        """For ``opzoo.training.adapt_model``: the patch embedding reads the channels (new ones start at zero, so the
        old channels' predictions are unchanged); the final layer writes ``p*p`` rows per patch, channels inner."""
        if (old.in_timesteps, old.out_timesteps) != (new.in_timesteps, new.out_timesteps):
            return None
        pp = new.patch_size * new.patch_size
        rows = opzoo.time_channel_index(pp, new.out_channels, pp, old.out_channels)
        return {
            "net.x_embedder.proj.weight": [opzoo.DimMap(1, opzoo.time_channel_index(1, new.in_channels, 1,
                                                                                    old.in_channels), "zero")],
            "net.final_layer.out_proj.weight": [opzoo.DimMap(0, rows)],
            "net.final_layer.out_proj.bias": [opzoo.DimMap(0, rows)],
        }

    def _embeddings(self, x: Tensor, task_id=None) -> list[Tensor]:
        return self.net.embeddings(x.shape[0], None, self._labels(x, task_id), x.device)

    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, H, W, 1, C] -> [B, H/p, W/p, D_1]``: the last decoder stage's output, channels-last."""
        return self.net.features(self._net_input(x), self._embeddings(x), (), self.checkpointed)[0].permute(0, 2, 3, 1)

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[B, H/p, W/p, D_1] -> [B, H, W, 1, C]``: the output convolution and final layer (conditioned on the
        task label, from the config), unpatchified and brought back to physical units (``x`` is not needed)."""
        e1 = self.net.embeddings(features.shape[0], None, self._labels(features), features.device)[1]
        return self._physical(self.net.head(features.permute(0, 3, 1, 2), e1))

    def forward_intermediates(self, x: Tensor, indices=None, intermediates_only: bool = False):
        """The outputs ``[B, H', W', D']`` (channels-last) of the stages ``indices``, in the order the data meets
        them: encoder levels, the latent, decoder levels (the last is the features)."""
        keep = self.block_indices(indices, len(self.net.stage_names))
        h, kept = self.net.features(self._net_input(x), self._embeddings(x), keep, self.checkpointed)
        kept = [k.permute(0, 2, 3, 1) for k in kept]
        return kept if intermediates_only else (h.permute(0, 2, 3, 1), kept)

    def _physical(self, y: Tensor) -> Tensor:
        return (y.permute(0, 2, 3, 1) * self.std + self.mean).unsqueeze(-2)

    def mask_padded_channels(self, out: Tensor, channel_mask: Tensor) -> Tensor:
        """Padded channels' predictions are set to zero (before being fed back), as pdetransformer's rollout does
        (core/mixed_channels/train_supervised.py @ 850e09d, ``postprocess_output``: Fields > 0)."""
        return out * channel_mask.to(out.dtype)

    def forward(self, x: Tensor, task_id: int | Tensor | None = None) -> Tensor:
        """``[B, H, W, 1, C] -> [B, H, W, 1, C]``; ``task_id`` (an int, or a ``[B]`` tensor of per-sample labels)
        replaces the config's label for this call."""
        e = self._embeddings(x, task_id)
        h = self.net.features(self._net_input(x), e, (), self.checkpointed)[0]
        return self._physical(self.net.head(h, e[1]))
