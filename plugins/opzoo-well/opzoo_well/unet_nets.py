"""The Well's two U-Nets, channels-first inside: ``[B, dim_in, *S] -> [B, dim_out, *S]``.

* ``UNetClassic`` (The Well after PDEBench's U-Net): four levels of two ``3^d`` convolutions (no bias),
  BatchNorm and tanh, max-pooling down, ``2^d`` stride-2 transposed convolutions up with the skip
  concatenated, and a final ``1^d`` *transposed* convolution (as The Well has it). Every spatial size
  must be divisible by 16.
* ``UNetConvNext``: a ``3^d`` input convolution, ``stages`` encoder stages (ConvNeXt blocks then a
  channels-first "LayerNorm" and a stride-2 convolution), a neck, decoder stages (a ``1^d`` skip
  projection of the concatenated skip from the second on, ConvNeXt blocks, the norm and a stride-2
  transposed convolution) and a ``3^d`` output convolution. The Well's channels-first "LayerNorm" is
  ``F.normalize(x, p=2, dim=1, eps=1e-6) * weight`` (an L2 normalization over channels; its ``bias``
  is a parameter that the forward does not use) — kept exactly, since the checkpoints learned with it.
  ConvNeXt block: depthwise ``7^d`` convolution, LayerNorm over channels (eps 1e-6), Linear(C, 4C),
  GELU, Linear(4C, C), layer scale ``gamma``, residual. Every spatial size must be divisible by
  ``2**stages``.

Parameter names are The Well's, so its state dicts load as they are.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
CONV_T = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}
POOL = {1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}
BATCH_NORM = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}


def check_divisible(x: Tensor, factor: int, what: str) -> None:
    sizes = list(x.shape[2:])
    if any(s % factor for s in sizes):
        raise ValueError(f"{what} needs every spatial size divisible by {factor}, got {sizes}")


class UNet(nn.Module):
    """What The Well's two U-Nets share: ``features(x) -> (h, kept)`` and ``head(h)``, each their own."""

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x)[0])


class UNetClassicNet(UNet):
    def __init__(self, dim_in: int, dim_out: int, n_spatial_dims: int, init_features: int = 32):
        super().__init__()
        d, f = n_spatial_dims, init_features
        self.n_spatial_dims = d
        self.encoder1 = self._block(dim_in, f, "enc1")
        self.pool1 = POOL[d](kernel_size=2, stride=2)
        self.encoder2 = self._block(f, 2 * f, "enc2")
        self.pool2 = POOL[d](kernel_size=2, stride=2)
        self.encoder3 = self._block(2 * f, 4 * f, "enc3")
        self.pool3 = POOL[d](kernel_size=2, stride=2)
        self.encoder4 = self._block(4 * f, 8 * f, "enc4")
        self.pool4 = POOL[d](kernel_size=2, stride=2)
        self.bottleneck = self._block(8 * f, 16 * f, "bottleneck")
        self.upconv4 = CONV_T[d](16 * f, 8 * f, kernel_size=2, stride=2)
        self.decoder4 = self._block(16 * f, 8 * f, "dec4")
        self.upconv3 = CONV_T[d](8 * f, 4 * f, kernel_size=2, stride=2)
        self.decoder3 = self._block(8 * f, 4 * f, "dec3")
        self.upconv2 = CONV_T[d](4 * f, 2 * f, kernel_size=2, stride=2)
        self.decoder2 = self._block(4 * f, 2 * f, "dec2")
        self.upconv1 = CONV_T[d](2 * f, f, kernel_size=2, stride=2)
        self.decoder1 = self._block(2 * f, f, "dec1")
        self.conv = CONV_T[d](f, dim_out, kernel_size=1)

    def _block(self, in_channels: int, features: int, name: str) -> nn.Sequential:
        d = self.n_spatial_dims
        return nn.Sequential(OrderedDict([
            (name + "conv1", CONV[d](in_channels, features, kernel_size=3, padding=1, bias=False)),
            (name + "norm1", BATCH_NORM[d](features)),
            (name + "tanh1", nn.Tanh()),
            (name + "conv2", CONV[d](features, features, kernel_size=3, padding=1, bias=False)),
            (name + "norm2", BATCH_NORM[d](features)),
            (name + "tanh2", nn.Tanh()),
        ]))

    n_blocks = 9  # encoder1-4, the bottleneck, decoder4-1

    def features(self, x: Tensor, keep: Sequence[int] = (), run=None) -> tuple[Tensor, list[Tensor]]:
        """``[B, dim_in, *S] -> ([B, init_features, *S]`` before the last convolution, the outputs of the blocks
        ``keep``: encoder1-4, the bottleneck, decoder4-1); ``run(fn, *args)`` calls each block (e.g. checkpointed)."""
        check_divisible(x, 16, "UNetClassic")
        run = run or (lambda fn, *args: fn(*args))
        enc1 = run(self.encoder1, x)
        enc2 = run(self.encoder2, self.pool1(enc1))
        enc3 = run(self.encoder3, self.pool2(enc2))
        enc4 = run(self.encoder4, self.pool3(enc3))
        h = run(self.bottleneck, self.pool4(enc4))
        outs = [enc1, enc2, enc3, enc4, h]
        h = run(self.decoder4, torch.cat((self.upconv4(h), enc4), dim=1))
        outs.append(h)
        h = run(self.decoder3, torch.cat((self.upconv3(h), enc3), dim=1))
        outs.append(h)
        h = run(self.decoder2, torch.cat((self.upconv2(h), enc2), dim=1))
        outs.append(h)
        h = run(self.decoder1, torch.cat((self.upconv1(h), enc1), dim=1))
        outs.append(h)
        return h, [outs[i] for i in keep]

    def head(self, h: Tensor) -> Tensor:
        return self.conv(h)


class ChannelL2Norm(nn.Module):
    """The Well's channels-first ``LayerNorm``: ``F.normalize(x, dim=1, eps) * weight`` (``bias`` unused)."""

    def __init__(self, channels: int, n_spatial_dims: int, eps: float = 1e-6):
        super().__init__()
        shape = (channels,) + (1,) * n_spatial_dims
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(x, p=2, dim=1, eps=self.eps) * self.weight


class ChannelsLastLayerNorm(nn.Module):
    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


class Resample(nn.Module):
    """Norm then a stride-2 (transposed) convolution: The Well's ``Downsample`` / ``Upsample``."""

    def __init__(self, dim_in: int, dim_out: int, n_spatial_dims: int, up: bool):
        super().__init__()
        conv = (CONV_T if up else CONV)[n_spatial_dims]
        self.block = nn.Sequential(ChannelL2Norm(dim_in, n_spatial_dims), conv(dim_in, dim_out, kernel_size=2, stride=2))

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x)


class ConvNextBlock(nn.Module):
    def __init__(self, dim: int, n_spatial_dims: int, layer_scale_init_value: float = 1e-6):
        super().__init__()
        self.dwconv = CONV[n_spatial_dims](dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = ChannelsLastLayerNorm(dim)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        h = self.dwconv(x).movedim(1, -1).contiguous()  # [B, *S, C]; contiguous: aot_autograd's backward views it
        h = self.gamma * self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + h.movedim(-1, 1)


class Stage(nn.Module):
    def __init__(self, dim_in: int, dim_out: int, n_spatial_dims: int, depth: int, mode: str, skip_project: bool = False):
        super().__init__()
        self.skip_proj = CONV[n_spatial_dims](2 * dim_in, dim_in, 1) if skip_project else nn.Identity()
        if mode == "neck":
            self.resample = nn.Identity()
        else:
            self.resample = Resample(dim_in, dim_out, n_spatial_dims, up=mode == "up")
        self.blocks = nn.ModuleList(ConvNextBlock(dim_in, n_spatial_dims) for _ in range(depth))

    def forward(self, x: Tensor) -> Tensor:
        x = self.skip_proj(x)
        for block in self.blocks:
            x = block(x)
        return self.resample(x)


class UNetConvNextNet(UNet):
    def __init__(self, dim_in: int, dim_out: int, n_spatial_dims: int, stages: int = 4, blocks_per_stage: int = 1,
                 blocks_at_neck: int = 1, init_features: int = 32):
        super().__init__()
        d, f = n_spatial_dims, init_features
        self.stages = stages
        enc = [f * 2**i for i in range(stages + 1)]
        dec = enc[::-1]
        self.in_proj = CONV[d](dim_in, f, kernel_size=3, padding=1)
        self.out_proj = CONV[d](f, dim_out, kernel_size=3, padding=1)
        self.encoder = nn.ModuleList(Stage(enc[i], enc[i + 1], d, blocks_per_stage, "down") for i in range(stages))
        self.neck = Stage(enc[-1], enc[-1], d, blocks_at_neck, "neck")
        self.decoder = nn.ModuleList(Stage(dec[i], dec[i + 1], d, blocks_per_stage, "up", skip_project=i != 0)
                                     for i in range(stages))

    @property
    def n_blocks(self) -> int:
        return 2 * self.stages + 1  # the encoder stages, the neck, the decoder stages

    def features(self, x: Tensor, keep: Sequence[int] = (), run=None) -> tuple[Tensor, list[Tensor]]:
        """``[B, dim_in, *S] -> ([B, init_features, *S]`` before the output convolution, the outputs of the
        stages ``keep``: encoder stages, the neck, decoder stages); ``run(fn, *args)`` calls each stage."""
        check_divisible(x, 2**self.stages, "UNetConvNext")
        run = run or (lambda fn, *args: fn(*args))
        x = self.in_proj(x)
        skips, outs = [], []
        for enc in self.encoder:
            skips.append(x)
            x = run(enc, x)
            outs.append(x)
        x = run(self.neck, x)
        outs.append(x)
        for j, dec in enumerate(self.decoder):
            if j > 0:
                x = torch.cat([x, skips[-j]], dim=1)
            x = run(dec, x)
            outs.append(x)
        return x, [outs[i] for i in keep]

    def head(self, h: Tensor) -> Tensor:
        return self.out_proj(h)
