"""FNO's spectral convolution for d = 1, 2, 3 (Li et al. 2021; docs/models.md §5), channels-last.

Each weight tensor is complex ``[in, out, K, ..., K]`` with the reference standard-parametrization
init ``(1 / (in * out)) * U[0, 1)`` (real and imaginary parts). d = 2 has two tensors (rows
``k1 in [0, K)`` and ``k1 in [-K, 0)``), d = 3 has four (signs of ``k1, k2``); the last dim is
the rfft half-spectrum ``[0, K)``. Weights are stored modes-major in memory (see
:func:`modes_major`; state dicts are the reference shape). The layer implements the public marker
:class:`opzoo.SpectralLayer` (``spectral_weights``), through which optimizer hooks (e.g. μP for spectral weights)
find its weights and their kept modes (:func:`opzoo.find_spectral_weights`).
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor, nn

import opzoo


def modes_major(weight: Tensor) -> Tensor:
    """``weight [in, out, *K]`` with the same shape but modes-major memory (``[*K, in, out]``
    contiguous), so the per-mode matmul reads it without a copy and its gradient needs none."""
    d = weight.ndim - 2
    return weight.permute(*range(2, d + 2), 0, 1).contiguous().permute(d, d + 1, *range(d))


class SpectralConv(nn.Module):
    """``x [B, *S, in] -> [B, *S, out]``, ``len(S) == spatial_dims``; sizes ``>= 2K`` on full-FFT dims.

    ``y = irfftn(R . rfftn(x)[lowest K modes per dim])`` with ``norm="backward"`` as in the reference.
    """

    def __init__(self, in_channels: int, out_channels: int, modes: int, spatial_dims: int):
        super().__init__()
        if spatial_dims not in (1, 2, 3):
            raise opzoo.ConfigError(f"spatial_dims: spectral conv supports 1, 2 or 3, got {spatial_dims}")
        if modes < 1:
            raise opzoo.ConfigError(f"modes: must be >= 1, got {modes}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.modes, self.spatial_dims = modes, spatial_dims
        self.spectral_modes = (modes,) * spatial_dims
        scale = 1.0 / (in_channels * out_channels)
        shape = (in_channels, out_channels, *self.spectral_modes)
        # one tensor per sign pattern of the full-FFT dims (all but the last)
        # (the reference's order: weights1 (+, +), weights2 (-, +), weights3 (+, -), weights4 (-, -))
        self.signs = [tuple(reversed(s)) for s in itertools.product((1, -1), repeat=spatial_dims - 1)]
        self.weights = nn.ParameterList(
            nn.Parameter(modes_major(scale * torch.rand(shape, dtype=torch.cfloat))) for _ in self.signs
        )

    def spectral_weights(self, spatial_dims: int | None = None) -> list[tuple[nn.Parameter, tuple[int, ...]]]:
        """The public spectral-weight marker (:class:`opzoo.SpectralLayer`): every weight tensor
        with its kept modes ``(K,) * d`` (``spatial_dims`` is ignored: the layer knows its own)."""
        return [(w, self.spectral_modes) for w in self.weights]

    def forward(self, x: Tensor) -> Tensor:
        d, k = self.spatial_dims, self.modes
        if x.ndim != d + 2:
            raise ValueError(f"SpectralConv{d}d expects [B, {', '.join('XYZ'[:d])}, C], got {list(x.shape)}")
        sizes = tuple(x.shape[1:-1])
        if any(n < 2 * k for n in sizes[:-1]) or sizes[-1] // 2 + 1 < k:
            raise ValueError(f"SpectralConv{d}d with modes={k} needs spatial sizes >= {2 * k}, got {list(sizes)}")
        dtype, b = x.dtype, x.shape[0]
        if dtype in (torch.float16, torch.bfloat16):  # FFTs of half types need power-of-2 sizes
            x = x.float()
        # The spectrum is kept modes-major, [*S[:-1], K, B, C]: each weight block is then a
        # (mostly contiguous) [K^d, B, in] batch for one bmm. The rfft runs first on the last
        # spatial dim and is truncated to K bins before the full FFTs, which saves work.
        spec = torch.fft.rfft(x, dim=d).narrow(d, 0, k).permute(*range(1, d + 1), 0, d + 1).contiguous()
        full_dims = tuple(range(d - 1))
        if full_dims:
            spec = torch.fft.fftn(spec, dim=full_dims)
        products = {}
        for sign, w, rows in zip(self.signs, self.weights, _blocks(self.signs, self.modes, sizes)):
            block = spec[rows]                                                 # [K, ..., K, B, in]
            wm = w.to(spec.dtype).permute(*range(2, d + 2), 0, 1).reshape(-1, *w.shape[:2])  # [K^d, in, out]
            y = torch.bmm(block.reshape(-1, b, self.in_channels), wm)
            products[sign] = y.view(*block.shape[:-1], self.out_channels)
        out = _assemble(products, sizes[:-1])                                  # [*S[:-1], K, B, out]
        if full_dims:
            out = torch.fft.ifftn(out, dim=full_dims)
        out = out.permute(d, *range(d), d + 1)                                 # [B, *S[:-1], K, out]
        return torch.fft.irfft(out, n=sizes[-1], dim=d).to(dtype)

    def export_form(self) -> nn.Module:
        """The same function in real arithmetic between the FFTs (:class:`opzoo.ExportForm`, docs/export.md)."""
        return SpectralConvExport(self)


class SpectralConvExport(nn.Module):
    """:class:`SpectralConv`'s function with each complex weight held as its real view ``[in, out, *K, 2]`` (ONNX
    has no complex parameters) and the product per mode as real matmuls on the spectrum's real view: complex values
    exist only as an FFT's output and an inverse FFT's input. ``x [B, *S, in] -> [B, *S, out]``."""

    def __init__(self, layer: SpectralConv):
        super().__init__()
        self.in_channels, self.out_channels = layer.in_channels, layer.out_channels
        self.modes, self.spatial_dims, self.signs = layer.modes, layer.spatial_dims, layer.signs
        self.weights = nn.ParameterList(nn.Parameter(torch.view_as_real(w.detach()).clone(), requires_grad=w.requires_grad)
                                        for w in layer.weights)

    def forward(self, x: Tensor) -> Tensor:
        d, k = self.spatial_dims, self.modes
        sizes = tuple(x.shape[1:-1])
        dtype, b = x.dtype, x.shape[0]
        if dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        spec = torch.fft.rfft(x, dim=d).narrow(d, 0, k).permute(*range(1, d + 1), 0, d + 1)
        full_dims = tuple(range(d - 1))
        if full_dims:
            spec = torch.fft.fftn(spec, dim=full_dims)
        spec = torch.view_as_real(spec)                                          # [*S[:-1], K, B, in, 2]
        products = {}
        for sign, w, rows in zip(self.signs, self.weights, _blocks(self.signs, self.modes, sizes)):
            block = spec[rows].reshape(-1, b, self.in_channels, 2)              # [K^d, B, in, 2]
            wm = w.to(x.dtype).permute(*range(2, d + 2), 0, 1, d + 2).reshape(-1, self.in_channels,
                                                                             self.out_channels, 2)
            real = torch.bmm(block[..., 0], wm[..., 0]) - torch.bmm(block[..., 1], wm[..., 1])
            imag = torch.bmm(block[..., 0], wm[..., 1]) + torch.bmm(block[..., 1], wm[..., 0])
            products[sign] = torch.stack([real, imag], -1).view(*spec[rows].shape[:-2], self.out_channels, 2)
        out = _assemble(products, sizes[:-1])                                   # [*S[:-1], K, B, out, 2]
        # the half-spectrum's bins above K as zeros here, in reals (irfft would pad a complex tensor itself)
        gap = list(out.shape)
        gap[d - 1] = sizes[-1] // 2 + 1 - k
        out = torch.view_as_complex(torch.cat([out, out.new_zeros(gap)], dim=d - 1).contiguous())
        if full_dims:
            out = torch.fft.ifftn(out, dim=full_dims)
        out = out.permute(d, *range(d), d + 1)                                  # [B, *S[:-1], K, out]
        return torch.fft.irfft(out, n=sizes[-1], dim=d).to(dtype)


def _blocks(signs: list[tuple[int, ...]], k: int, sizes: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """For each weight tensor (one per sign pattern), the slices of the full-FFT dims (all but the last) it multiplies."""
    return [tuple(slice(0, k) if s > 0 else slice(n - k, n) for s, n in zip(sign, sizes[:-1])) for sign in signs]


def _assemble(products: dict[tuple[int, ...], Tensor], sizes: tuple[int, ...]) -> Tensor:
    """Place the ``+k`` and ``-k`` corner blocks along each full-FFT dim with zeros in between
    (concatenation: cheaper than filling a zero spectrum and assigning slices)."""
    if not sizes:
        return products[()]
    dim = len(sizes) - 1
    low = _assemble({s[:-1]: t for s, t in products.items() if s[-1] > 0}, sizes[:-1])
    high = _assemble({s[:-1]: t for s, t in products.items() if s[-1] < 0}, sizes[:-1])
    gap = list(low.shape)
    gap[dim] = sizes[dim] - low.shape[dim] - high.shape[dim]
    return torch.cat([low, low.new_zeros(gap), high], dim=dim)
