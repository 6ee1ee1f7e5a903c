"""DPOT's Fourier attention (AFNO without sparsity), DESIGN §6.2: a registered opzoo Mixer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import opzoo


class FourierAttention(opzoo.Mixer):
    """``x [B, *S, D] -> [B, *S, D]`` for 1, 2 or 3 spatial dims (the FFT follows ``x.ndim``).

    ``X = rfftn(x, norm="ortho")`` over the spatial dims is split into ``n_blocks`` heads of
    ``bs = D / n_blocks`` channels; on the kept modes ``X[:, :m, ..., :m]`` (the rest is zeroed):
    ``o1 = act(Xr w1[0] - Xi w1[1] + b1[0]) + i act(Xi w1[0] + Xr w1[1] + b1[1])``,
    ``o2 = (o1r w2[0] - o1i w2[1] + b2[0]) + i (o1i w2[0] + o1r w2[1] + b2[1])`` (per head,
    ``w [2, nb, bs_in, bs_out]``), ``out = irfftn(o2, s=S, norm="ortho")``. No soft-shrink and no
    skip: the DPOT block adds ``+ z`` itself.
    """

    def __init__(self, dim: int, n_blocks: int = 8, modes: int = 32, act: str = "gelu"):
        super().__init__()
        if dim % n_blocks:
            raise opzoo.ConfigError(f"mixer_args.n_blocks: width {dim} is not divisible by n_blocks {n_blocks}")
        if modes < 1:
            raise opzoo.ConfigError(f"mixer_args.modes: must be >= 1, got {modes}")
        if act != "gelu":
            raise opzoo.ConfigError(f"mixer_args.act: fourier-attention implements DPOT's 'gelu' only, got {act!r}")
        self.dim, self.n_blocks, self.modes = dim, n_blocks, modes
        bs = dim // n_blocks
        scale = 1.0 / (bs * bs)
        self.w1 = nn.Parameter(scale * torch.rand(2, n_blocks, bs, bs))
        self.b1 = nn.Parameter(scale * torch.rand(2, n_blocks, bs))
        self.w2 = nn.Parameter(scale * torch.rand(2, n_blocks, bs, bs))
        self.b2 = nn.Parameter(scale * torch.rand(2, n_blocks, bs))

    def spectral_weights(self, spatial_dims: int | None) -> list[tuple[nn.Parameter, tuple[int, ...]]]:
        """The public spectral-weight marker (:class:`opzoo.SpectralLayer`): ``w1, b1, w2, b2``
        (the frequency-domain MLP), keeping nominally ``modes`` per spatial dim, ``N = modes^d``."""
        if spatial_dims is None:
            raise opzoo.ConfigError("spatial_dims: fourier-attention needs the model's number of spatial dims "
                                    "to count its kept modes (its FFT follows the input)")
        modes = (self.modes,) * spatial_dims
        return [(p, modes) for p in (self.w1, self.b1, self.w2, self.b2)]

    @staticmethod
    def _complex_block_linear(xr: Tensor, xi: Tensor, w: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        """Per-head complex affine map on ``[..., nb, bs]``: returns (real, imag) pre-activations."""
        real = torch.einsum("...bi,bio->...bo", xr, w[0]) - torch.einsum("...bi,bio->...bo", xi, w[1]) + b[0]
        imag = torch.einsum("...bi,bio->...bo", xi, w[0]) + torch.einsum("...bi,bio->...bo", xr, w[1]) + b[1]
        return real, imag

    def forward(self, x: Tensor) -> Tensor:
        spatial = tuple(range(1, x.ndim - 1))
        sizes = x.shape[1:-1]
        dtype = x.dtype
        if dtype in (torch.float16, torch.bfloat16):  # FFTs of half types need power-of-2 sizes
            x = x.float()
        spec = torch.fft.rfftn(x, dim=spatial, norm="ortho")                 # [B, *K, D] complex
        kept = (slice(None), *(slice(0, self.modes) for _ in spatial))
        part = spec[kept].unflatten(-1, (self.n_blocks, -1))                  # [B, *m, nb, bs]
        w1, b1, w2, b2 = (p.to(spec.real.dtype) for p in (self.w1, self.b1, self.w2, self.b2))
        r, i = self._complex_block_linear(part.real, part.imag, w1, b1)
        r, i = F.gelu(r), F.gelu(i)
        r, i = self._complex_block_linear(r, i, w2, b2)
        o2 = torch.complex(r, i).flatten(-2)                                  # [B, *m, D]
        if o2.shape != spec.shape:
            full = torch.zeros_like(spec)
            full[kept] = o2
            o2 = full
        return torch.fft.irfftn(o2, s=sizes, dim=spatial, norm="ortho").to(dtype)
