"""Poseidon (scOT) as an opzoo backbone: physical fields in and out.

``forward(x: [B, n, n, 1, C], lead_time=None) -> [B, n, n, T_out, C_out]``. Around the network
(:class:`opzoo_poseidon.network.ScOTNet`):

1. each channel standardized by ``(x - field_mean) / field_std`` (the constants of the data the weights were trained
   on, as upstream's data pipeline does; None: the fields as given);
2. for ``k = 1 .. T_out`` the network's prediction at lead time ``k * lead_time``, each from the input frame, as
   Poseidon predicts any lead time directly (``lead_time`` in the model's units: the pretraining trajectories span
   time 1 in 20 stored steps, upstream's ``time = t / 20``);
3. the prediction brought back to physical units.

Any square grid with an even side runs: the network Fourier-resamples it to ``image_size`` and the prediction back,
as upstream's forward does. A grid that is not square is refused (upstream assumes one).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

import opzoo

from .network import ScOTNet, fourier_resample


@dataclasses.dataclass
class PoseidonConfig(opzoo.ModelConfig):
    """scOT's sizes (defaults: Poseidon-T, as published)."""

    in_channels: int = 4
    out_channels: int = 4
    in_timesteps: int = 1
    out_timesteps: int = 1
    spatial_dims: int = 2
    image_size: int = 128
    patch_size: int = 4
    embed_dim: int = 48
    depths: tuple[int, ...] = (4, 4, 4, 4)
    num_heads: tuple[int, ...] = (3, 6, 12, 24)
    skip_connections: tuple[int, ...] = (2, 2, 2, 0)
    window_size: int = 16
    mlp_ratio: float = 4.0
    layer_norm_eps: float = 1e-5
    lead_time: float = 0.1
    field_mean: tuple[float, ...] | None = None
    field_std: tuple[float, ...] | None = None

    per_channel_fields = ("field_mean", "field_std")

    def buffer_bytes(self) -> int:
        """The shifted windows' attention masks and the grids they are cut from, computed when the model is built
        (float32; :func:`opzoo_poseidon.network.shift_mask`): they grow with the square of the patch grid."""
        try:
            size, window, total = self.image_size // self.patch_size, self.window_size, 0
        except (TypeError, ZeroDivisionError):
            return 0  # validate says what is wrong
        for level, depth in enumerate(self.depths):
            n = size // 2**level
            w = min(window, n)
            if n > w and isinstance(depth, int):
                total += (depth // 2) * 4 * (n * n * w * w + n * n)
        return total

    def validate(self, source: str = "model_args") -> None:
        if self.in_timesteps != 1 or self.spatial_dims != 2:
            raise opzoo.ConfigError(f"{source}: Poseidon maps one 2-D frame to later ones: in_timesteps = 1 and "
                                    f"spatial_dims = 2, got {self.in_timesteps} and {self.spatial_dims}")
        for key in ("in_channels", "out_channels", "image_size", "patch_size", "embed_dim", "window_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise opzoo.ConfigError(f"{source}.{key}: a whole number >= 1, got {value!r}")
        for key, low in (("depths", 1), ("num_heads", 1), ("skip_connections", 0)):
            values = getattr(self, key)
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= low for v in values):
                raise opzoo.ConfigError(f"{source}.{key}: whole numbers >= {low}, got {list(values)}")
        if not self.mlp_ratio > 0 or not self.layer_norm_eps > 0:
            raise opzoo.ConfigError(f"{source}: mlp_ratio and layer_norm_eps must be > 0, got {self.mlp_ratio} and "
                                    f"{self.layer_norm_eps}")
        levels = len(self.depths)
        if not (len(self.num_heads) == len(self.skip_connections) == levels >= 1):
            raise opzoo.ConfigError(f"{source}: depths, num_heads and skip_connections need one entry per level, got "
                                    f"{list(self.depths)}, {list(self.num_heads)}, {list(self.skip_connections)}")
        grid = self.image_size // self.patch_size
        if self.image_size % self.patch_size or grid % 2 ** (levels - 1):
            raise opzoo.ConfigError(f"{source}: image_size {self.image_size} / patch_size {self.patch_size} must be "
                                    f"a whole number of patches divisible by 2^{levels - 1} (one merge per level)")
        for i, heads in enumerate(self.num_heads):
            if (self.embed_dim * 2**i) % heads:
                raise opzoo.ConfigError(f"{source}.num_heads[{i}]: width {self.embed_dim * 2**i} is not divisible by "
                                        f"{heads} heads")
        opzoo.kit.check_field_statistics(self, source)
        if self.in_channels != self.out_channels and self.field_mean is not None:
            raise opzoo.ConfigError(f"{source}: field_mean/field_std standardize the input and restore the output "
                                    f"channels, so they need in_channels = out_channels ({self.in_channels} vs "
                                    f"{self.out_channels}); leave them out")
        if not self.lead_time > 0:
            raise opzoo.ConfigError(f"{source}.lead_time: a positive time, got {self.lead_time}")


class Poseidon(opzoo.Backbone):
    """``[B, n, n, 1, C] -> [B, n, n, T_out, C_out]`` around :class:`ScOTNet`."""

    fixed_export_grid = ("scOT resamples a grid other than image_size to it (a branch on the grid): torch.export traces "
                         "the branch of one grid")

    config_class = PoseidonConfig
    supports_grad_checkpointing = True

    def __init__(self, config: PoseidonConfig):
        super().__init__(config)
        config.validate("model_args")
        c = config
        self.net = ScOTNet(c.in_channels, c.out_channels, image_size=c.image_size, patch_size=c.patch_size,
                           embed_dim=c.embed_dim, depths=tuple(c.depths), num_heads=tuple(c.num_heads),
                           skip_connections=tuple(c.skip_connections), window_size=c.window_size,
                           mlp_ratio=c.mlp_ratio, eps=c.layer_norm_eps)
        self.net.init_weights()

    def constants(self, like: Tensor) -> tuple[Tensor, Tensor]:
        """``(mean, std)`` ``[1, C, 1, 1]`` at ``like``'s dtype, made from the config's numbers (float64 stays float64:
        not rounded through a float32 buffer)."""
        c = self.config
        mean = torch.tensor(c.field_mean, dtype=like.dtype, device=like.device).view(1, -1, 1, 1)
        return mean, torch.tensor(c.field_std, dtype=like.dtype, device=like.device).view(1, -1, 1, 1)

    def _name(self) -> str:
        return self.preset_name or "poseidon"

    def _frame(self, x: Tensor) -> Tensor:
        """``[B, n, n, 1, C]`` physical -> ``[B, C, n, n]`` standardized."""
        c = self.config
        if x.ndim != 5 or x.shape[3] != 1 or x.shape[4] != c.in_channels:
            raise ValueError(f"{self._name()} expects [B, H, W, T_in=1, C={c.in_channels}], got {list(x.shape)}")
        h, w = x.shape[1:3]
        if h != w or h % 2:
            raise ValueError(f"{self._name()} takes a square grid with an even side (its network Fourier-resamples "
                             f"it to {c.image_size}x{c.image_size} and back, and upstream assumes H = W), got "
                             f"{h}x{w}; resample the data to a square grid first (opzoo eval --resolution N N)")
        frame = x[:, :, :, 0].permute(0, 3, 1, 2)
        if c.field_mean is not None:
            mean, std = self.constants(frame)
            frame = (frame - mean) / std
        return frame

    def _physical(self, y: Tensor) -> Tensor:
        """``[B, C, n, n]`` -> ``[B, n, n, C]`` in the data's units."""
        if self.config.field_mean is not None:
            mean, std = self.constants(y)
            y = y * std + mean
        return y.permute(0, 2, 3, 1)

    def _times(self, x: Tensor, lead_time) -> Tensor:
        """``[B]`` lead times of one step (``lead_time``: a number, ``[B]``, or None for the config's)."""
        t = self.config.lead_time if lead_time is None else lead_time
        t = torch.as_tensor(t, dtype=x.dtype, device=x.device)
        if t.ndim == 0:
            t = t.expand(x.shape[0])
        if t.shape != (x.shape[0],):
            raise ValueError(f"{self._name()}: lead_time is a number or one per sample [B={x.shape[0]}], got shape "
                             f"{list(t.shape)}")
        return t

    def _run(self):
        """How a Swin block runs: through :meth:`checkpointed` while gradient checkpointing is on and grads are."""
        if self.grad_checkpointing and torch.is_grad_enabled():
            return lambda block, h, t: self.checkpointed(block, h, t)
        return None

    def _stages(self, x: Tensor, lead_time) -> list[list[Tensor]]:
        """For each lead time ``k * lead_time`` (``k = 1 .. T_out``), every stage's tokens (:meth:`ScOTNet.stages`)."""
        frame, step = self._frame(x), self._times(x, lead_time)
        frame = fourier_resample(frame, self.config.image_size)
        return [self.net.stages(frame, step * k, self._run()) for k in range(1, self.config.out_timesteps + 1)]

    @staticmethod
    def _grids(tokens: list[Tensor]) -> Tensor:
        """``T_out`` x ``[B, s^2, d]`` -> ``[B, T_out, s, s, d]``."""
        b, n, d = tokens[0].shape
        s = math.isqrt(n)
        return torch.stack([t.view(b, s, s, d) for t in tokens], dim=1)

    def forward(self, x: Tensor, lead_time: float | Tensor | None = None) -> Tensor:
        return self.forward_head(self.forward_features(x, lead_time), x)

    def forward_features(self, x: Tensor, lead_time: float | Tensor | None = None) -> Tensor:
        """``[B, n, n, 1, C] -> [B, T_out, s, s, d]``: the decoder's last tokens (``s = image_size / patch_size``), one
        set per lead time ``k * lead_time``."""
        return self._grids([stages[-1] for stages in self._stages(x, lead_time)])

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[B, T_out, s, s, d] -> [B, n, n, T_out, C_out]``: the recovery, the resampling to ``x``'s grid and the
        constants; ``x`` gives the grid, so it is needed."""
        if x is None:
            raise ValueError(f"{self._name()}.forward_head needs x: the prediction is resampled to its grid")
        b, t, s, _, d = features.shape
        n = x.shape[1]
        outs = [self._physical(fourier_resample(self.net.recover(features[:, k].reshape(b, s * s, d)), n))
                for k in range(t)]
        return torch.stack(outs, dim=3)

    def forward_intermediates(self, x: Tensor, indices=None, intermediates_only: bool = False):
        """The stages' tokens ``[B, T_out, s_i, s_i, d_i]``, the encoder's then the decoder's (``2 L`` stages; the
        last is the features), for stages ``indices``."""
        per_time = self._stages(x, None)
        grids = [self._grids([stages[i] for stages in per_time]) for i in range(len(per_time[0]))]
        kept = [grids[i] for i in self.block_indices(indices, len(grids))]
        return kept if intermediates_only else (grids[-1], kept)

    def group_matcher(self) -> dict:
        return {"stem": r"^net\.embeddings\.", "blocks": r"^net\.(?:encoder|decoder)\.layers\.(\d+)\."}

    def grid_for(self, data_grid) -> tuple[tuple[int, ...] | None, str]:
        """A square grid with an even side runs as it is (the network resamples it to its own and back, as upstream
        does); any other grid is resampled by the data pipeline to the model's."""
        grid = tuple(int(n) for n in data_grid)
        if len(grid) == 2 and grid[0] == grid[1] and grid[0] % 2 == 0:
            return grid, (f"{self._name()} runs any square grid with an even side: its network Fourier-resamples it "
                          f"to {self.config.image_size}x{self.config.image_size} and the prediction back, as upstream's")
        return None, f"{self._name()} takes square grids only (upstream assumes H = W)"

    @classmethod
    def io_layout(cls, old: PoseidonConfig, new: PoseidonConfig) -> dict | None:
        """For fine-tuning on other fields: the embedding's and the recovery's channel-shaped tensors start afresh
        when their shape changes, as upstream's ``from_pretrained(..., ignore_mismatched_sizes=True)`` does; every
        other weight is kept. Another window (Poseidon reads one frame) is not adapted."""
        if old.in_timesteps != new.in_timesteps:
            return None
        layout: dict = {}
        if old.in_channels != new.in_channels:
            layout["net.embeddings.patch_embeddings.projection.weight"] = [
                opzoo.DimMap(1, (None,) * new.in_channels)]
        if old.out_channels != new.out_channels:
            fresh = (None,) * new.out_channels
            layout["net.patch_recovery.projection.weight"] = [opzoo.DimMap(1, fresh)]
            layout["net.patch_recovery.projection.bias"] = [opzoo.DimMap(0, fresh)]
            layout["net.patch_recovery.mixup.weight"] = [opzoo.DimMap(0, fresh), opzoo.DimMap(1, fresh)]
        return layout
