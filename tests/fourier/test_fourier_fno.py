"""FNO: spectral convolution against the reference formulation, tagging, presets, and learning the
exact heat semigroup in 1D and 2D."""

import math

import pytest
import torch

import opzoo


def spectral_conv_reference(x, weights, modes):
    """The reference code's SpectralConv{1,2,3}d on channels-first ``x [B, C, *S]`` (einsum over
    full rfftn, weight blocks at the corners (+/-k) of the full-FFT dims)."""
    d = x.ndim - 2
    dims = tuple(range(2, 2 + d))
    x_ft = torch.fft.rfftn(x, dim=dims)
    out = torch.zeros(x.shape[0], weights[0].shape[1], *x_ft.shape[2:], dtype=torch.cfloat)
    k = modes
    eq = "bi" + "xyz"[:d] + ",io" + "xyz"[:d] + "->bo" + "xyz"[:d]
    if d == 1:
        corners = [(slice(0, k),)]
    elif d == 2:
        corners = [(slice(0, k), slice(0, k)), (slice(-k, None), slice(0, k))]
    else:
        corners = [(slice(0, k), slice(0, k), slice(0, k)), (slice(-k, None), slice(0, k), slice(0, k)),
                   (slice(0, k), slice(-k, None), slice(0, k)), (slice(-k, None), slice(-k, None), slice(0, k))]
    for w, c in zip(weights, corners):
        idx = (slice(None), slice(None), *c)
        out[idx] = torch.einsum(eq, x_ft[idx], w)
    return torch.fft.irfftn(out, s=x.shape[2:], dim=dims)


@pytest.mark.parametrize("d,sizes,modes", [(1, (20,), 5), (2, (12, 10), 4), (3, (8, 10, 9), 3)])
def test_spectral_conv_matches_reference(d, sizes, modes):
    from opzoo_fourier import SpectralConv

    torch.manual_seed(0)
    conv = SpectralConv(3, 5, modes, d)
    assert len(conv.weights) == 2 ** (d - 1)
    x = torch.randn(2, *sizes, 3)
    got = conv(x)
    want = spectral_conv_reference(x.movedim(-1, 1), list(conv.weights), modes).movedim(1, -1)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_spectral_init_and_tags():
    model = opzoo.load("fno-2d", modes=24)
    assert model.config.modes == 24
    spectral = opzoo.find_spectral_weights(model)
    assert len(spectral) == 4 * 2
    for w in spectral:
        p = w.param
        assert p.is_complex() and p.shape == (64, 64, 24, 24) and w.modes == (24, 24)
        # reference init: (1/(in*out)) * U[0,1) for real and imaginary parts
        assert 0 <= p.real.min() and p.real.max() < 1 / 64**2 and 0 <= p.imag.min() and p.imag.max() < 1 / 64**2
        assert abs(p.real.mean().item() - 0.5 / 64**2) < 0.02 / 64**2
    marked = {w.name for w in spectral}
    others = [n for n, p in model.named_parameters() if n not in marked]
    assert others and all("spectral" not in n for n in others) and all(p.is_complex() == (n in marked)
                                                                       for n, p in model.named_parameters())


def test_presets_and_shapes():
    for d, modes in ((1, 16), (2, 12), (3, 8)):
        with torch.device("meta"):
            model = opzoo.load(f"fno-{d}d")
        c = model.config
        assert (c.width, c.depth, c.act, c.modes, c.spatial_dims) == (64, 4, "gelu", modes, d)
        assert all(w.modes == (modes,) * d for w in opzoo.find_spectral_weights(model))
    model = opzoo.load("fno-3d", modes=4)
    assert model(torch.randn(1, 8, 8, 8, 1, 1)).shape == (1, 8, 8, 8, 1, 1)
    with pytest.raises(ValueError, match="T_in=1, C=1"):
        model(torch.randn(1, 8, 8, 8, 2, 1))
    with pytest.raises(ValueError, match="needs spatial sizes >= 8"):
        model(torch.randn(1, 6, 8, 8, 1, 1))


def heat_pairs(batch, n, d, k_max, nu_t, generator):
    """Random band-limited ``u0`` and the exact heat solution ``u(t)``: each Fourier mode decays by
    ``exp(-nu t |2 pi k|^2)`` on the unit torus. Shapes ``[B, *S, 1, 1]``."""
    shape = (batch,) + (n,) * (d - 1) + (n // 2 + 1,)
    freqs = [torch.fft.fftfreq(n, 1 / n)] * (d - 1) + [torch.fft.rfftfreq(n, 1 / n)]
    k = torch.meshgrid(*freqs, indexing="ij")
    k2 = sum(f ** 2 for f in k)
    band = torch.stack([f.abs() <= k_max for f in k]).all(0)
    coef = torch.randn(shape, dtype=torch.cfloat, generator=generator) * band / (1 + k2)
    dims = tuple(range(1, d + 1))
    u0 = torch.fft.irfftn(coef, s=(n,) * d, dim=dims)
    ut = torch.fft.irfftn(coef * torch.exp(-nu_t * 4 * math.pi**2 * k2), s=(n,) * d, dim=dims)
    scale = u0.flatten(1).std(1).reshape(-1, *[1] * d)
    return (u0 / scale)[..., None, None], (ut / scale)[..., None, None]


def relative_l2(pred, target):
    return ((pred - target).flatten(1).norm(dim=1) / target.flatten(1).norm(dim=1)).mean()


@pytest.mark.slow
@pytest.mark.parametrize("d,n,steps,batch", [(1, 64, 300, 32), (2, 16, 300, 16)])
def test_fno_learns_the_heat_semigroup(d, n, steps, batch):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: one thread is faster and fair to neighbours
    try:
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(1)
        k_max, nu_t = 4, 0.002   # mode |k| = 4 decays to exp(-0.002 (8 pi)^2) = 0.28
        model = opzoo.create_model("fno", spatial_dims=d, width=32, depth=2, modes=k_max + 2)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
        x, y = heat_pairs(64, n, d, k_max, nu_t, torch.Generator().manual_seed(123))
        with torch.no_grad():
            before = relative_l2(model(x), y).item()
        for _ in range(steps):
            u0, ut = heat_pairs(batch, n, d, k_max, nu_t, gen)
            loss = relative_l2(model(u0), ut)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        with torch.no_grad():
            after = relative_l2(model(x), y).item()
            identity = relative_l2(x, y).item()  # the trivial guess u(t) = u0, for scale
    finally:
        torch.set_num_threads(threads)
    assert before > 0.5 and identity > 0.1
    assert after < 0.01, f"relative L2 {after:.4f} after {steps} steps ({d}D)"


def test_spectral_weights_roundtrip_through_safetensors(tmp_path):
    torch.manual_seed(0)
    model = opzoo.load("fno-1d", modes=8)
    model.save_pretrained(tmp_path)
    again = opzoo.load(f"local-dir:{tmp_path}")
    assert again.config.modes == 8 and (tmp_path / "README.md").read_text().count("Fourier Neural Operator")
    x = torch.randn(2, 32, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x))
    assert [w.name for w in opzoo.find_spectral_weights(again)] == [w.name for w in opzoo.find_spectral_weights(model)]
