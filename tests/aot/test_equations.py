"""The equations of DESIGN §6.3 (opzoo_aot.equations) against float64 loops: Sinkhorn–Knopp,
the stream maps and their gradients."""

import math

import pytest
import torch

from opzoo_aot import equations, sinkhorn_knopp

from .aot_reference import sinkhorn_loops

U32 = 2.0**-24  # float32 unit roundoff


# ---- Sinkhorn–Knopp --------------------------------------------------------------------------
def test_one_iteration_hand_checked():
    # exp(logits) = [[1, 2], [3, 1]]; columns -> [[1/4, 2/3], [3/4, 1/3]]; then rows
    logits = torch.tensor([[0.0, math.log(2)], [math.log(3), 0.0]])
    h = sinkhorn_knopp(logits, iters=1)
    r0, r1 = 1 / 4 + 2 / 3, 3 / 4 + 1 / 3
    expected = torch.tensor([[(1 / 4) / r0, (2 / 3) / r0], [(3 / 4) / r1, (1 / 3) / r1]])
    torch.testing.assert_close(h, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("iters", [1, 3, 20])
@pytest.mark.parametrize("spread", [2.0, 3.0])
def test_matches_float64_loops(iters, spread):
    """float32 against float64 loops of the equations. Tolerance: each of the 2·iters half-steps
    is a log_softmax (a max, an exp-sum and a log: a few roundings u = 6e-8 of entries <= 1 in
    log space, times |log M| <= ~20 here); the row/column normalization is a contraction, so the
    error does not grow with the iterations: 2e-6 (measured: 1.5e-7)."""
    torch.manual_seed(0)
    logits = torch.randn(5, 4, 4) * spread + 4 * torch.eye(4)
    h = sinkhorn_knopp(logits, iters)
    assert h.dtype == torch.float32
    for b in range(5):
        torch.testing.assert_close(h[b].double(), sinkhorn_loops(logits[b], iters), rtol=0, atol=2e-6)


def test_float64_logits_iterate_in_float64():
    torch.manual_seed(1)
    logits = torch.randn(3, 4, 4, dtype=torch.float64) * 3
    h = sinkhorn_knopp(logits, 20)
    assert h.dtype == torch.float64
    for b in range(3):
        torch.testing.assert_close(h[b], sinkhorn_loops(logits[b], 20), rtol=0, atol=1e-13)


def test_rows_and_columns_after_20_iterations_near_the_aot_init():
    torch.manual_seed(2)
    logits = 4 * torch.eye(4) + 0.03 * torch.randn(4096, 4, 4)  # b_res = 4·I plus a small input term
    h = sinkhorn_knopp(logits, 20)
    assert (h.sum(-1) - 1).abs().max() <= 1e-6
    assert (h.sum(-2) - 1).abs().max() <= 1e-3


@pytest.mark.parametrize("scale", [1e6, 1e-6, 1e30])
def test_extreme_logits_stay_finite_and_rows_stochastic(scale):
    torch.manual_seed(3)
    logits = torch.randn(64, 4, 4) * scale
    h = sinkhorn_knopp(logits, 20)
    assert torch.isfinite(h).all() and (h >= 0).all()
    assert (h.sum(-1) - 1).abs().max() <= 1e-6


def test_extreme_logits_have_finite_gradients():
    logits = (torch.randn(8, 4, 4) * 1e6).requires_grad_()
    (sinkhorn_knopp(logits, 20) * torch.randn(8, 4, 4)).sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_float32_under_bf16_autocast_and_for_bf16_logits():
    torch.manual_seed(4)
    logits = 4 * torch.eye(4) + 0.03 * torch.randn(32, 4, 4)
    reference = sinkhorn_knopp(logits, 20)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = sinkhorn_knopp(logits, 20)
    assert h.dtype == torch.float32
    torch.testing.assert_close(h, reference, rtol=0, atol=0)
    h16 = sinkhorn_knopp(logits.bfloat16(), 20)
    assert h16.dtype == torch.float32 and (h16.sum(-1) - 1).abs().max() <= 1e-6


@pytest.mark.parametrize("scale", [0.1, 3.0, 30.0])
def test_gradient_matches_float64(scale):
    """The float32 gradient against the same recursion in float64. Tolerance: 40 half-steps, each
    backward ``g - S·Σg`` a few roundings of entries <= |g|, and a contraction: ~40·4·u ≈ 1e-5 of
    the gradient's scale (rtol 1e-4 leaves 10x room)."""
    torch.manual_seed(5)
    logits = (scale * torch.randn(6, 4, 4)).requires_grad_()
    weights = torch.randn(6, 4, 4)
    (fast,) = torch.autograd.grad((sinkhorn_knopp(logits, 20) * weights).sum(), logits)
    logits64 = logits.detach().double().requires_grad_()
    (reference,) = torch.autograd.grad((sinkhorn_knopp(logits64, 20) * weights.double()).sum(), logits64)
    torch.testing.assert_close(fast.double(), reference, rtol=1e-4, atol=1e-6 * reference.abs().max().item())


def test_gradcheck_float64():
    logits = (torch.randn(2, 3, 3, dtype=torch.float64) * 2).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: sinkhorn_knopp(t, 5), (logits,))


# ---- the stream maps -------------------------------------------------------------------------
def test_aggregate_and_update_with_loops():
    torch.manual_seed(6)
    X, y = torch.randn(2, 3, 4, 5, 6), torch.randn(2, 4, 5, 6)
    h, H, h_post = torch.rand(2, 3), torch.rand(2, 3, 3), torch.rand(2, 3)
    u, out = equations.aggregate(h, X), equations.update(X, H, h_post, y)
    X64, y64 = X.double(), y.double()
    for b in range(2):
        torch.testing.assert_close(u[b].double(), sum(h[b, i].double() * X64[b, i] for i in range(3)),
                                   rtol=0, atol=1e-6)
        for i in range(3):
            expected = sum(H[b, i, j].double() * X64[b, j] for j in range(3)) + h_post[b, i].double() * y64[b]
            torch.testing.assert_close(out[b, i].double(), expected, rtol=0, atol=1e-5)


def test_stream_maps_gradcheck_float64():
    torch.manual_seed(7)
    f64 = dict(dtype=torch.float64, requires_grad=True)
    X, y = torch.randn(2, 3, 4, 5, **f64), torch.randn(2, 4, 5, **f64)
    h, H, h_post = torch.rand(2, 3, **f64), torch.rand(2, 3, 3, **f64), torch.rand(2, 3, **f64)
    assert torch.autograd.gradcheck(equations.update, (X, H, h_post, y))
    assert torch.autograd.gradcheck(equations.aggregate, (h, X))


def test_coefficients_gradcheck_float64():
    torch.manual_seed(8)
    n, d = 3, 4
    shapes = [(n * d, n), (n * d, n), (n * d, n * n), (n,), (n,), (n, n), (1,), (1,), (1,)]
    params = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    pooled = torch.randn(2, n, d, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p, *ps: equations.coefficients(p, *ps, 1e-6, 5), (pooled, *params))


@pytest.mark.parametrize("features", [100, 65536 + 77])
def test_feature_dots_of_nearly_equal_rows_are_float64_accurate(features):
    """The reduction behind the gradients of H_res, h_post, h_pre and the readout weights
    (``Σ_f G_i X_j`` with rows that are nearly copies, the case where the gradients lose digits,
    docs/accuracy.md). Each product of two float32 numbers is exact in float64; chunks of 1024
    products are summed in float32 (~sqrt(1024)·u relative) and the chunks in float64, so the
    entries are good to ~3e-8 (measured 1.4e-8; below 2048 features the sum is all float64). A
    float32 GEMM over the 65613 features is off by 6e-7 here: the bound 1e-7 tells them apart."""
    torch.manual_seed(9)
    base = torch.randn(2, 1, features)
    a, b = base + 1e-3 * torch.randn(2, 4, features), base + 1e-3 * torch.randn(2, 5, features)
    exact = torch.einsum("bpf,bqf->bpq", a.double(), b.double())
    result = equations.feature_dots(a, b)
    assert result.dtype == torch.float64
    assert (result - exact).abs().max().item() <= 1e-7 * exact.abs().max().item()
