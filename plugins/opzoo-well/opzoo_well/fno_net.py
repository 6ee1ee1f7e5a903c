"""FNO and TFNO as The Well trained them: neuraloperator 0.3.0's ``FNO`` / ``TFNO`` at its defaults.

Channels-first inside: ``[B, dim_in, *S] -> [B, dim_out, *S]``. The network is

    lifting:    Conv1x1(dim_in -> 256), GELU, Conv1x1(256 -> hidden)
    n_layers x  h <- SpectralConv_i(h) + Conv1x1_i(h) (no bias), GELU except after the last layer
    projection: Conv1x1(hidden -> 256), GELU, Conv1x1(256 -> dim_out)

or, with ``apply_blocks=False``, ``projection(lifting(x))``: the network The Well's published FNO and
TFNO checkpoints were trained as. From commit 2d8d7ea (2024-06-03) until 21e51f6 / e430160
(2025-11-17, PR #64 "actually use the FNO blocks"), ``NeuralOpsCheckpointWrapper.forward`` in
``the_well/benchmark/models/{fno,tfno}/__init__.py`` called each block and dropped its output (every
git tag up to v1.2.0 and the PyPI wheels 1.0.1 and 1.1.0; the PyPI 1.2.0 wheel has the fix). The
block parameters exist (so the checkpoints load strictly) but are not computed: they never received a
gradient.

with neuraloperator 0.3.0's ``SpectralConv`` (``fft_norm="forward"``, a bias per layer): an
``rfftn`` over the spatial axes, ``fftshift`` on all but the last, the centred ``modes_k`` frequencies
on every axis but the last and the first ``modes_last // 2 + 1`` on the last are multiplied by a
complex weight ``[in, out, *kept]``, the spectrum is ``fftshift``-ed again (as 0.3.0 does; for odd
sizes that is not the inverse shift, and we keep it so) and ``irfftn``-ed. The shifts are done as
row indices on the kept frequencies, not as copies of the whole spectrum. TFNO stores that weight as
a complex Tucker factorization (tensorly-torch ``ComplexTucker``, rank fraction 1.0); it is
contracted factor by factor with the spectrum (never rebuilt), the same product as 0.3.0's factorized contraction.
Complex parameters are stored as real tensors with a trailing axis of 2 (tensorly-torch's layout).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}


def tucker_rank(shape: Sequence[int], fraction: float = 1.0) -> list[int]:
    """tensorly's ``validate_tucker_rank(shape, rank=fraction, rounding="round")``.

    Finds ``c`` in ``[0, max(fraction, 1)]`` with ``n c^N + (sum_k I_k^2) c = fraction n`` (``n`` the
    number of entries) and returns ``max(round(c I_k), 1)`` per mode (round half to even, as numpy).
    """
    n = math.prod(shape)
    order = len(shape)
    squares = sum(s * s for s in shape)

    def f(c: float) -> float:
        return n * c**order + squares * c - fraction * n

    lo, hi = 0.0, max(fraction, 1.0)
    for _ in range(200):  # bisection to machine precision (tensorly uses brentq; both give the root)
        mid = 0.5 * (lo + hi)
        if f(mid) > 0:
            hi = mid
        else:
            lo = mid
    c = 0.5 * (lo + hi)
    return [max(int(round(s * c)), 1) for s in shape]


class SpectralConv(nn.Module):
    """One layer of neuraloperator 0.3.0's ``SpectralConv``: ``[B, in, *S] -> [B, out, *S]``."""

    def __init__(self, in_channels: int, out_channels: int, modes: Sequence[int], factorization: str = "dense",
                 rank: float = 1.0):
        super().__init__()
        kept = [*modes[:-1], modes[-1] // 2 + 1]  # 0.3.0's n_modes setter halves the last axis
        self.kept = kept
        self.out_channels = out_channels
        self.factorization = factorization
        shape = [in_channels, out_channels, *kept]
        if factorization == "dense":
            self.weight = nn.Parameter(torch.zeros(*shape, 2))
        elif factorization == "tucker":
            ranks = tucker_rank(shape, rank)
            self.core = nn.Parameter(torch.zeros(*ranks, 2))
            self.factors = nn.ParameterList(nn.Parameter(torch.zeros(s, r, 2)) for s, r in zip(shape, ranks))
        else:
            raise ValueError(f"factorization must be 'dense' or 'tucker', got {factorization!r}")
        self.bias = nn.Parameter(torch.zeros(out_channels, *[1] * len(modes)))
        # 0.3.0's init (neuralop/layers/spectral_convolution.py, SpectralConv.__init__: init_std="auto",
        # weight.normal_(0, init_std), bias init_std * randn): tensorly-torch 0.5.0's normal_
        # (tltorch/factorized_tensors/factorized_tensors.py, DenseTensor/TuckerTensor.normal_, on the complex view of
        # complex_factorized_tensors.py) draws a complex tensor whose real and imaginary parts each have std/sqrt(2):
        # a dense one at init_std, a Tucker core and factors at (init_std / prod(sqrt(ranks)))^(1 / (order + 1))
        std = (2 / (in_channels + out_channels)) ** 0.5
        if factorization == "dense":
            nn.init.normal_(self.weight, 0.0, std / math.sqrt(2))
        else:
            factor_std = (std / math.prod(math.sqrt(r) for r in ranks)) ** (1 / (len(ranks) + 1))
            for p in (self.core, *self.factors):
                nn.init.normal_(p, 0.0, factor_std / math.sqrt(2))
        nn.init.normal_(self.bias, 0.0, std)

    def contract(self, xf: Tensor, w_slices: Sequence[slice]) -> Tensor:
        """``[B, in, *kept] -> [B, out, *kept]``: the kept spectrum times the weight cut to ``w_slices`` per mode.

        A Tucker weight is not rebuilt: the mode factors (their rows cut to the kept frequencies) meet the core, last
        rank axis first, so that each product is one matrix multiply on a contiguous tensor and the result is
        ``[*kept, R_in, R_out]``; then, per kept frequency, the input (through the in-factor) times it, then the
        out-factor. The same product as 0.3.0's factorized contraction, without a copy of the core."""
        if self.factorization == "dense":
            weight = torch.view_as_complex(self.weight)[(slice(None), slice(None), *w_slices)]
            return torch.einsum("bi...,io...->bo...", xf, weight)
        f_in, f_out, *f_modes = (torch.view_as_complex(f) for f in self.factors)
        g = torch.view_as_complex(self.core)  # [R_in, R_out, *R_modes]
        for f, sl in reversed(list(zip(f_modes, w_slices))):  # [*kept_k.., R_in, R_out, ..R_k] -> [kept_k, ...]
            g = torch.tensordot(f[sl], g, dims=([1], [g.ndim - 1]))
        h = torch.einsum("bi...,ia->...ba", xf, f_in)  # [*kept, B, R_in]
        return torch.einsum("...bc,oc->bo...", h @ g, f_out)

    def forward(self, x: Tensor) -> Tensor:
        batch, _, *sizes = x.shape
        d = len(sizes)
        dims = list(range(-d, 0))
        fft_size = [*sizes[:-1], sizes[-1] // 2 + 1]
        xf = torch.fft.rfftn(x, norm="forward", dim=dims)
        # which weight entries and which frequencies meet (0.3.0's slicing, in its fftshift-ed coordinates)
        starts = [m - min(size, m) for size, m in zip(fft_size, self.kept)]
        w_slices = [slice(s // 2, -s // 2) if s else slice(s, None) for s in starts[:-1]]
        w_slices.append(slice(None, -starts[-1]) if starts[-1] else slice(None))
        kept = [len(range(m)[sl]) for m, sl in zip(self.kept, w_slices)]
        starts = [size - min(size, m) for size, m in zip(fft_size, kept)]
        x_slices = [slice(s // 2, -s // 2) if s else slice(s, None) for s in starts[:-1]]
        last = slice(None, -starts[-1]) if starts[-1] else slice(None)
        # 0.3.0 fftshift-s the spectrum, cuts, multiplies, writes into zeros and fftshift-s again (not ifftshift:
        # for odd sizes the two differ). Row j of a shifted axis of size n is row (j - n//2) % n of the spectrum
        # on the way in, and lands on row (j + n//2) % n on the way out: the same rows, without the two copies.
        rows = [torch.arange(n, device=x.device)[sl] for n, sl in zip(fft_size[:-1], x_slices)]
        part = xf[..., last]
        for axis, (n, r) in enumerate(zip(fft_size[:-1], rows)):
            part = part.index_select(2 + axis, (r - n // 2) % n)
        put = [((r + n // 2) % n).view(-1, *[1] * (len(rows) - 1 - k)) for k, (n, r) in enumerate(zip(fft_size, rows))]
        out = torch.zeros(batch, self.out_channels, *fft_size, dtype=xf.dtype, device=x.device)
        out[(slice(None), slice(None), *put, last)] = self.contract(part, w_slices)
        return torch.fft.irfftn(out, s=sizes, dim=dims, norm="forward") + self.bias


class PointwiseMLP(nn.Module):
    """neuraloperator's ``MLP``: 1x1 convolutions with GELU between them."""

    def __init__(self, dims: Sequence[int], n_spatial_dims: int):
        super().__init__()
        self.fcs = nn.ModuleList(CONV[n_spatial_dims](a, b, 1) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x: Tensor) -> Tensor:
        for i, fc in enumerate(self.fcs):
            x = fc(x)
            if i < len(self.fcs) - 1:
                x = F.gelu(x)
        return x


class FNONet(nn.Module):
    """``[B, dim_in, *S] -> [B, dim_out, *S]``: neuraloperator 0.3.0's (T)FNO at The Well's settings."""

    def __init__(self, dim_in: int, dim_out: int, modes: Sequence[int], hidden_channels: int, n_layers: int = 4,
                 lifting_channels: int = 256, projection_channels: int = 256, factorization: str = "dense",
                 rank: float = 1.0, apply_blocks: bool = True):
        super().__init__()
        d = len(modes)
        self.apply_blocks = apply_blocks
        self.lifting = PointwiseMLP([dim_in, lifting_channels, hidden_channels], d)
        self.spectral = nn.ModuleList(SpectralConv(hidden_channels, hidden_channels, modes, factorization, rank)
                                      for _ in range(n_layers))
        self.skips = nn.ModuleList(CONV[d](hidden_channels, hidden_channels, 1, bias=False) for _ in range(n_layers))
        self.projection = PointwiseMLP([hidden_channels, projection_channels, dim_out], d)

    def _block(self, i: int, x: Tensor) -> Tensor:
        x = self.spectral[i](x) + self.skips[i](x)
        return F.gelu(x) if i < len(self.spectral) - 1 else x

    def features(self, x: Tensor, keep: Sequence[int] = (), run=None) -> tuple[Tensor, list[Tensor]]:
        """``[B, dim_in, *S] -> ([B, hidden, *S]`` before the projection, the outputs of the blocks ``keep``);
        ``run(fn, *args)`` calls each block (e.g. checkpointed)."""
        x, kept = self.lifting(x), []
        if not self.apply_blocks:  # the_well <= 1.1.0: the blocks ran and their output was dropped
            if keep:
                raise ValueError("the Fourier blocks of this model do not feed its output (fourier_blocks='dropped'): "
                                 "it has no per-block latents")
            return x, kept
        for i in range(len(self.spectral)):
            x = run(self._block, i, x) if run is not None else self._block(i, x)
            if i in keep:
                kept.append(x)
        return x, kept

    @property
    def n_blocks(self) -> int:
        return len(self.spectral)

    def head(self, h: Tensor) -> Tensor:
        return self.projection(h)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x)[0])
