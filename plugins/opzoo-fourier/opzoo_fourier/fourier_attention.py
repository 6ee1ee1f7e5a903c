"""DPOT's Fourier attention (AFNO without sparsity), docs/models.md §2: a registered opzoo Mixer."""

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
    def _complex_weights(w: Tensor, b: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``w [2, nb, bs, bs]``, ``b [2, nb, bs]`` -> complex ``w[0] + i w[1]`` ``[nb, bs, bs]``, bias ``[nb, 1, bs]``."""
        w, b = w.to(dtype), b.to(dtype)
        return torch.complex(w[0], w[1]), torch.complex(b[0], b[1]).unsqueeze(1)

    def forward(self, x: Tensor) -> Tensor:
        spatial = tuple(range(1, x.ndim - 1))
        sizes = x.shape[1:-1]
        dtype = x.dtype
        if dtype in (torch.float16, torch.bfloat16):  # FFTs of half types need power-of-2 sizes
            x = x.float()
        spec = torch.fft.rfftn(x, dim=spatial, norm="ortho")                 # [B, *K, D] complex
        part = spec[(slice(None), *(slice(0, self.modes) for _ in spatial))]  # [B, *m, D]
        # (Xr w0 - Xi w1) + i (Xi w0 + Xr w1) is the complex product X (w0 + i w1): one complex
        # batched matmul per layer, heads as the batch: [nb, B*m.., bs]
        heads = part.reshape(-1, self.n_blocks, self.dim // self.n_blocks).transpose(0, 1)
        w1, b1 = self._complex_weights(self.w1, self.b1, x.dtype)
        w2, b2 = self._complex_weights(self.w2, self.b2, x.dtype)
        o1 = torch.view_as_complex(F.gelu(torch.view_as_real(torch.baddbmm(b1, heads, w1))))  # gelu(re) + i gelu(im)
        o2 = torch.baddbmm(b2, o1, w2).transpose(0, 1).reshape(part.shape)
        # irfftn zero-pads each dim at the end to the full spectrum: the modes not kept are zero
        return torch.fft.irfftn(o2, s=sizes, dim=spatial, norm="ortho").to(dtype)

    def export_form(self) -> nn.Module:
        """The same function in real arithmetic between the FFTs (:class:`opzoo.ExportForm`, docs/export.md)."""
        return FourierAttentionExport(self)


class FourierAttentionExport(nn.Module):
    """:class:`FourierAttention`'s function with its parameters, real and imaginary parts as real tensors
    ``[..., 2]`` between ``rfftn`` and ``irfftn`` and the complex products as real ones: what ONNX's exporter takes
    (it has no complex matmul). ``x [B, *S, D] -> [B, *S, D]``."""

    def __init__(self, layer: FourierAttention):
        super().__init__()
        self.dim, self.n_blocks, self.modes = layer.dim, layer.n_blocks, layer.modes
        self.w1, self.b1, self.w2, self.b2 = layer.w1, layer.b1, layer.w2, layer.b2

    @staticmethod
    def _product(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        """``x [nb, N, bs, 2]`` times ``w [2, nb, bs, bs]`` plus ``b [2, nb, bs]`` as complex numbers, in reals."""
        xr, xi = x[..., 0], x[..., 1]
        real = torch.baddbmm(b[0].unsqueeze(1), xr, w[0]) - torch.bmm(xi, w[1])
        imag = torch.baddbmm(b[1].unsqueeze(1), xi, w[0]) + torch.bmm(xr, w[1])
        return torch.stack([real, imag], dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        spatial = tuple(range(1, x.ndim - 1))
        sizes = x.shape[1:-1]
        dtype = x.dtype
        if dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        spec = torch.view_as_real(torch.fft.rfftn(x, dim=spatial, norm="ortho"))    # [B, *K, D, 2]
        part = spec[(slice(None), *(slice(0, self.modes) for _ in spatial))]      # [B, *m, D, 2]
        heads = part.reshape(-1, self.n_blocks, self.dim // self.n_blocks, 2).transpose(0, 1)
        w1, b1, w2, b2 = (p.to(x.dtype) for p in (self.w1, self.b1, self.w2, self.b2))
        o1 = F.gelu(self._product(heads, w1, b1))
        o2 = self._product(o1, w2, b2).transpose(0, 1).reshape(part.shape)
        return torch.fft.irfftn(torch.view_as_complex(o2.contiguous()), s=sizes, dim=spatial, norm="ortho").to(dtype)
