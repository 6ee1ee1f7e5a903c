"""Fourier attention against a direct implementation of DESIGN §6.2 (explicit DFT sums, loops),
and the exp_mlp time aggregation against a loop."""

import itertools
import math

import numpy as np
import pytest
import torch

import opzoo
from opzoo.layers.time_agg import TimeAggregator


def gelu(v):
    return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))


def fourier_attention_direct(x, w1, b1, w2, b2, modes):
    """Loops over modes and heads; forward DFT by its sum, inverse by the real-output formula."""
    x = x.astype(np.float64)
    bsz, *sizes, d = x.shape
    nb, bs = w1.shape[1], w1.shape[2]
    half = [*sizes[:-1], sizes[-1] // 2 + 1]
    norm = math.sqrt(np.prod(sizes))
    pos = np.array(list(itertools.product(*[range(n) for n in sizes])))      # [N, dims]
    out = np.zeros_like(x)
    for k in itertools.product(*[range(min(modes, h)) for h in half]):
        phase = np.exp(-2j * np.pi * (pos * (np.array(k) / np.array(sizes))).sum(1))  # [N]
        spec = np.einsum("n,bnd->bd", phase, x.reshape(bsz, -1, d)) / norm             # X[:, k, :]
        o2 = np.zeros((bsz, d), dtype=complex)
        for h in range(nb):
            xr, xi = spec[:, h * bs:(h + 1) * bs].real, spec[:, h * bs:(h + 1) * bs].imag
            o1r = gelu(xr @ w1[0, h] - xi @ w1[1, h] + b1[0, h])
            o1i = gelu(xi @ w1[0, h] + xr @ w1[1, h] + b1[1, h])
            o2[:, h * bs:(h + 1) * bs] = (o1r @ w2[0, h] - o1i @ w2[1, h] + b2[0, h]) + 1j * (
                o1i @ w2[0, h] + o1r @ w2[1, h] + b2[1, h])
        # irfftn: a half-spectrum bin k_last counts twice except DC and (even-size) Nyquist,
        # and only the real part survives
        k_last, n_last = k[-1], sizes[-1]
        weight = 1.0 if (k_last == 0 or 2 * k_last == n_last) else 2.0
        inv = np.exp(2j * np.pi * (pos * (np.array(k) / np.array(sizes))).sum(1))     # [N]
        out += weight * np.real(np.einsum("n,bd->bnd", inv, o2)).reshape(out.shape) / norm
    return out


@pytest.mark.parametrize("sizes,modes", [((7,), 3), ((6, 5), 3), ((6, 4), 8), ((4, 5, 4), 2)])
def test_fourier_attention_matches_direct_equations(sizes, modes):
    torch.manual_seed(0)
    registry = opzoo.get_registry()
    mixer = registry.get("mixer", "fourier-attention")(8, n_blocks=2, modes=modes).double()
    with torch.no_grad():  # non-trivial values (the init is U[0,1)/bs^2, too small to see much)
        for p in mixer.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    x = torch.randn(2, *sizes, 8, dtype=torch.float64)
    got = mixer(x).detach().numpy()
    want = fourier_attention_direct(x.numpy(), *(p.detach().numpy() for p in (mixer.w1, mixer.b1, mixer.w2, mixer.b2)), modes)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_fourier_attention_shapes_and_init():
    mixer = opzoo.get_registry().get("mixer", "fourier-attention")(64, n_blocks=4, modes=32)
    assert mixer.w1.shape == (2, 4, 16, 16) and mixer.b2.shape == (2, 4, 16)
    for p in (mixer.w1, mixer.b1, mixer.w2, mixer.b2):  # U[0, 1) / bs^2
        assert p.min() >= 0 and p.max() < 1 / 16**2
    with pytest.raises(opzoo.ConfigError, match="n_blocks"):
        opzoo.get_registry().get("mixer", "fourier-attention")(30, n_blocks=4)


def test_time_aggregation_matches_loop():
    torch.manual_seed(1)
    t, d = 5, 6
    agg = TimeAggregator(t, d, "exp_mlp")
    with torch.no_grad():
        agg.gamma.copy_(torch.rand(1, d) * 4)
    x = torch.randn(2, 3, 4, t, d)
    got = agg(x)
    tl = torch.linspace(0, 1, t)
    want = torch.zeros(2, 3, 4, d)
    for j in range(d):
        for tt in range(t):
            for i in range(d):
                emb = math.cos(tl[tt].item() * agg.gamma[0, i].item())
                want[..., j] += agg.w[tt, i, j] * x[..., tt, i] * emb
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    plain = TimeAggregator(t, d, "mlp")
    want = sum(x[..., tt, :] @ plain.w[tt] for tt in range(t))
    torch.testing.assert_close(plain(x), want, rtol=1e-5, atol=1e-5)


def test_time_aggregation_init():
    agg = TimeAggregator(10, 512, "exp_mlp")
    torch.testing.assert_close(agg.gamma, 2 ** torch.linspace(-10, 10, 512).unsqueeze(0))
    assert abs(agg.w.std().item() - 1 / (10 * 512**0.5)) < 2e-4
