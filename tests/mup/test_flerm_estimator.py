"""FLeRM estimators against the equations (hand-checked sums, finite differences) and against the exact
``‖Δ_ℓ f‖_RMS`` computed by brute force from per-output gradients, on a small MLP and a small FNO."""

import math

import pytest
import torch
from torch import nn

import opzoo
from opzoo_mup.flerm import (
    KroneckerEMA,
    MonteCarloEstimate,
    exact_function_space_lr,
    fslr_from_statistics,
    z_statistics,
)
from opzoo_mup.flerm.probe import find_readout, probe_gradients, z_samples


def test_z_statistics_are_the_sums_of_eq_18_and_eq_27():
    z = torch.randn(3, 4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    s = z_statistics(z)
    loops = []
    for d in range(3):
        total = 0.0
        others = [range(n) for i, n in enumerate(z.shape) if i != d]
        import itertools
        for idx in itertools.product(*others):
            acc = 0.0
            for i in range(z.shape[d]):
                full = list(idx)
                full.insert(d, i)
                acc += float(z[tuple(full)])
            total += acc ** 2
        loops.append(total)
    loops.append(float((z ** 2).sum()))
    torch.testing.assert_close(s, torch.tensor(loops, dtype=torch.float64))
    # matrix case, Eq. 16: ZZT·ZTZ / Z2
    m = z[..., 0]
    zzt = sum(float(m[:, k].sum()) ** 2 for k in range(4))
    ztz = sum(float(m[i, :].sum()) ** 2 for i in range(3))
    assert fslr_from_statistics(z_statistics(m)) == pytest.approx(math.sqrt(zzt * ztz / float((m ** 2).sum())), rel=1e-12)
    # readout rules (App. D): Eq. 32 rows independent; Eq. 34 entries independent
    assert float(z_statistics(m, "readout-weight")) == pytest.approx(sum(float(m[i].sum()) ** 2 for i in range(3)))
    v = z[:, 0, 0]
    assert float(z_statistics(v, "readout-bias")) == pytest.approx(float((v ** 2).sum()))
    # a vector: the Kronecker formula is the plain (ΣZ)² of the unbiased estimator
    assert fslr_from_statistics(z_statistics(v)) == pytest.approx(abs(float(v.sum())), rel=1e-12)


def test_kronecker_estimate_is_exact_for_tensor_normal_z():
    """If Cov[Z] = U3 ⊗ U2 ⊗ U1 (App. B, Eq. 20), Eq. 28 estimates Σ Cov = Π_d ΣU_d without bias."""
    g = torch.Generator().manual_seed(1)
    shapes = (3, 4, 2)
    chols = []
    for n in shapes:
        a = torch.randn(n, n, dtype=torch.float64, generator=g)
        chols.append(torch.linalg.cholesky(a @ a.T + n * torch.eye(n, dtype=torch.float64)))
    truth = math.prod(float((c @ c.T).sum()) for c in chols)
    n_samples = 20000
    e = torch.randn(n_samples, *shapes, dtype=torch.float64, generator=g)
    z = torch.einsum("ai,bj,ck,nijk->nabc", *chols, e)
    stats = torch.stack([z_statistics(s) for s in z]).mean(0)
    assert fslr_from_statistics(stats) ** 2 == pytest.approx(truth, rel=0.05)
    mc = MonteCarloEstimate()
    for s in z[:4000]:
        mc.update(s)
    assert abs(mc.squared - truth) < 4 * mc.squared_stderr


@pytest.mark.parametrize("beta", [0.9, 0.5, 1.0])
def test_ema_is_algorithm_1_with_beta_the_weight_of_the_newest_sample_and_bias_corrected(beta):
    """Algorithm 1: ``EMA <- (1 − β) EMA + β new``, bias-corrected by ``1 − (1 − β)^t``."""
    e = KroneckerEMA("readout-bias", beta=beta)
    xs = [1.0, 2.0, 3.0]
    for x in xs:
        e.update(torch.tensor([math.sqrt(x)], dtype=torch.float64))
    ema = 0.0
    for x in xs:
        ema = (1 - beta) * ema + beta * x
    assert float(e.expectations()) == pytest.approx(ema / (1 - (1 - beta) ** 3))
    assert e.value() == pytest.approx(math.sqrt(ema / (1 - (1 - beta) ** 3)))
    if beta == 1.0:
        assert float(e.expectations()) == pytest.approx(3.0)  # the newest sample alone
    with pytest.raises(ValueError, match="weight of the newest sample"):
        KroneckerEMA("readout-bias", beta=0.0)


def small_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8)).double()


def small_fno():
    torch.manual_seed(0)
    model = opzoo.create_model("fno", spatial_dims=1, width=16, depth=2, modes=6, projection_dim=32,
                               in_channels=2, out_channels=2).double()
    for p in model.parameters():  # Module.double() leaves complex weights complex64
        if p.is_complex():
            p.data = p.data.to(torch.complex128)
    return model


def adam_update(model, x, y, lr=1e-2, steps=3):
    """The lr = 1 update ``ΔW / lr`` of the last of a few AdamW steps on a regression loss."""
    params = dict(model.named_parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        before = {k: v.detach().clone() for k, v in params.items()}
        opt.step()
    opt.zero_grad()
    return params, {k: (params[k].detach() - before[k]) / lr for k in params}


CASES = {
    "mlp": (small_mlp, lambda g: (torch.randn(32, 8, dtype=torch.float64, generator=g),
                                   torch.randn(32, 8, dtype=torch.float64, generator=g))),
    "fno": (small_fno, lambda g: (torch.randn(4, 16, 1, 2, dtype=torch.float64, generator=g),
                                   torch.randn(4, 16, 1, 2, dtype=torch.float64, generator=g))),
}


def test_complex_and_real_z_sum_to_the_first_order_change_of_phi():
    """Σ Z = Δφ (Eq. 8) for real and complex tensors: finite differences of φ along ΔW, in float64."""
    model = small_fno()
    g = torch.Generator().manual_seed(3)
    x, y = CASES["fno"][1](g)
    params, deltas = adam_update(model, x, y)
    omega = torch.randn(model(x).shape, dtype=torch.float64, generator=g)
    phi = lambda: float((omega * model(x)).sum()) / math.sqrt(omega.numel())  # noqa: E731
    probe_gradients(model, model, {"x": x}, torch.Generator().manual_seed(0))
    model.zero_grad()
    ((omega * model(x)).sum() / math.sqrt(omega.numel())).backward()
    zs = z_samples(params, deltas)
    eps = 1e-6
    factored = z_samples(params, deltas, complex_dim="factor")
    for name in ("spectral.0.weights.0", "pointwise.1.weight", "lift.bias"):
        p = params[name]
        assert factored[name].shape == (*p.shape, 2) if p.is_complex() else factored[name].shape == p.shape
        torch.testing.assert_close(factored[name].sum(), zs[name].sum())
        assert p.is_complex() == name.startswith("spectral")
        with torch.no_grad():
            p += eps * deltas[name]
            up = phi()
            p -= 2 * eps * deltas[name]
            down = phi()
            p += eps * deltas[name]
        assert float(zs[name].sum()) == pytest.approx((up - down) / (2 * eps), rel=1e-6, abs=1e-12)


def test_exact_function_space_lr_matches_finite_differences():
    model = small_fno()
    x, y = CASES["fno"][1](torch.Generator().manual_seed(4))
    params, deltas = adam_update(model, x, y)
    exact = exact_function_space_lr(lambda: model(x), params, deltas)
    eps = 1e-6
    for name in ("spectral.1.weights.0", "project.2.weight"):
        p = params[name]
        with torch.no_grad():
            p += eps * deltas[name]
            up = model(x)
            p -= 2 * eps * deltas[name]
            down = model(x)
            p += eps * deltas[name]
        fd = ((up - down) / (2 * eps)).pow(2).mean().sqrt()
        assert exact[name] == pytest.approx(float(fd), rel=1e-6)


@pytest.fixture(scope="module", params=sorted(CASES))
def probed(request):
    """Exact values and 300 probes (fixed batch, fresh ω each) of one model's Z's (complex_dim "sum")."""
    return probe_model(request.param)


def probe_model(case, complex_dim="sum"):
    make, data = CASES[case]
    model = make()
    x, y = data(torch.Generator().manual_seed(2))
    params, deltas = adam_update(model, x, y)
    exact = exact_function_space_lr(lambda: model(x), params, deltas)
    readout = find_readout(model, model, x)
    g = torch.Generator().manual_seed(5)
    samples = []
    for _ in range(300):
        probe_gradients(model, model, {"x": x}, g)
        samples.append(z_samples(params, deltas, complex_dim=complex_dim))
    rules = {n: "kronecker" for n in params}
    if readout:
        rules[readout[0]] = "readout-weight"
        rules[readout[1]] = "readout-bias"
    return case, params, exact, rules, samples


def test_readout_is_found(probed):
    name, _, _, rules, _ = probed
    expected = {"mlp": ["4.weight", "4.bias"], "fno": ["project.2.weight", "project.2.bias"]}[name]
    assert [n for n, r in rules.items() if r != "kronecker"] == expected


def test_kronecker_estimate_after_warmup_agrees_with_exact(probed):
    """The warm-up measurement (the mean statistics of 40 probes) per tensor vs brute force; and the
    estimator's expectation.

    Every tensor: the estimator's expectation (300 probes) within 20 %. Matrices and spectral tensors
    (incl. the readout weight, App. D rule) after the 40-sample warm-up: within 20 %. Vectors (biases):
    the Kronecker formula for D = 1 is the unbiased estimator itself, and the readout rules of the
    FNO sum only C_out = 2 independent row terms: a mean of 40 samples of so few chi²
    terms has a relative spread of ~8-11 % on the RMS, so their warm-up value is checked within 50 %.
    """
    name, params, exact, rules, samples = probed
    for n in params:
        ema = KroneckerEMA(rules[n])
        ema.update_statistics(torch.stack([z_statistics(s[n], rules[n]) for s in samples[:40]]).mean(0))
        expectation = torch.stack([z_statistics(s[n], rules[n]) for s in samples]).mean(0)
        asymptotic = fslr_from_statistics(expectation, rules[n]) / exact[n]
        warm = ema.value() / exact[n]
        assert abs(asymptotic - 1) <= 0.2, (name, n, asymptotic)
        few_terms = params[n].ndim == 1 or (rules[n] == "readout-weight" and params[n].shape[0] < 8)
        tolerance = 0.5 if few_terms else 0.2
        assert abs(warm - 1) <= tolerance, (name, n, warm)


def test_monte_carlo_estimate_agrees_within_its_standard_error(probed):
    name, params, exact, _, samples = probed
    for n in params:
        mc = MonteCarloEstimate()
        for s in samples:
            mc.update(s[n])
        assert mc.stderr() < 0.1 * mc.value()
        assert abs(mc.value() - exact[n]) <= 3 * mc.stderr(), (name, n, mc.value(), exact[n], mc.stderr())


@pytest.mark.slow  # 6 s: 300 probes of a documented variant that is not the default
def test_factored_complex_dim_is_biased_low_on_spectral_weights():
    """The literal "real/imaginary as one more factored dim" variant: Eq. 28 over D + 1 dims. Its
    expectation (300 probes) is recorded here as measured (docs/flerm.md): within 35 % of exact on the
    small FNO's spectral weights, and not above the "sum" variant's (which assumes strictly less)."""
    _, params, exact, rules, samples = probe_model("fno", complex_dim="factor")
    _, _, _, _, summed = probe_model("fno", complex_dim="sum")
    for n in params:
        if not params[n].is_complex():
            continue
        factor = fslr_from_statistics(torch.stack([z_statistics(s[n]) for s in samples]).mean(0)) / exact[n]
        total = fslr_from_statistics(torch.stack([z_statistics(s[n]) for s in summed]).mean(0)) / exact[n]
        assert 0.65 <= factor <= 1.0 and abs(total - 1) <= 0.2, (n, factor, total)
