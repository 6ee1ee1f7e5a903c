"""Sinkhorn–Knopp: the DESIGN §6.3 recursion, float32 under autocast, stable for extreme inputs."""

import math

import pytest
import torch

from opzoo_aot import sinkhorn_knopp
from opzoo_aot.sinkhorn import compiled_sinkhorn, use_compiled

from .aot_reference import sinkhorn_loops


def test_one_iteration_hand_checked():
    # exp(logits) = [[1, 2], [3, 1]]; columns -> [[1/4, 2/3], [3/4, 1/3]]; then rows
    logits = torch.tensor([[0.0, math.log(2)], [math.log(3), 0.0]])
    h = sinkhorn_knopp(logits, iters=1)
    r0, r1 = 1 / 4 + 2 / 3, 3 / 4 + 1 / 3
    expected = torch.tensor([[(1 / 4) / r0, (2 / 3) / r0], [(3 / 4) / r1, (1 / 3) / r1]])
    torch.testing.assert_close(h, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("iters", [1, 3, 20])
def test_matches_direct_loops(iters):
    torch.manual_seed(0)
    logits = torch.randn(5, 4, 4) * 2 + 4 * torch.eye(4)
    h = sinkhorn_knopp(logits, iters)
    for b in range(5):
        torch.testing.assert_close(h[b].double(), sinkhorn_loops(logits[b], iters), rtol=0, atol=2e-6)


def test_eager_recursion_with_and_without_gradients_matches_direct_loops():
    """The eager path (one log_softmax per half-step, float64 on CPU) with and without the graph
    for the hand-written backward, against float64 loops of the equations."""
    torch.manual_seed(6)
    logits = torch.randn(5, 4, 4) * 3 + 4 * torch.eye(4)
    for h in (sinkhorn_knopp(logits, 20), sinkhorn_knopp(logits.clone().requires_grad_(), 20)):
        assert h.dtype == torch.float32
        for b in range(5):
            torch.testing.assert_close(h[b].double(), sinkhorn_loops(logits[b], 20), rtol=0, atol=2e-6)


def test_batched_call_equals_single_calls():
    torch.manual_seed(1)
    logits = torch.randn(3, 6, 4, 4)
    h = sinkhorn_knopp(logits, 20)
    assert h.shape == (3, 6, 4, 4)
    for idx in [(0, 0), (1, 3), (2, 5)]:
        torch.testing.assert_close(h[idx], sinkhorn_knopp(logits[idx], 20), rtol=0, atol=1e-7)


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
    assert h.dtype == torch.float32
    assert torch.isfinite(h).all() and (h >= 0).all()
    assert (h.sum(-1) - 1).abs().max() <= 1e-6


def test_extreme_logits_have_finite_gradients():
    logits = (torch.randn(8, 4, 4) * 1e6).requires_grad_()
    (sinkhorn_knopp(logits, 20) * torch.randn(8, 4, 4)).sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_float32_under_bf16_autocast_and_for_bf16_inputs():
    torch.manual_seed(4)
    logits = 4 * torch.eye(4) + 0.03 * torch.randn(32, 4, 4)
    reference = sinkhorn_knopp(logits, 20)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = sinkhorn_knopp(logits, 20)
    assert h.dtype == torch.float32
    torch.testing.assert_close(h, reference, rtol=0, atol=0)
    h16 = sinkhorn_knopp(logits.bfloat16(), 20)
    assert h16.dtype == torch.float32 and (h16.sum(-1) - 1).abs().max() <= 1e-6


@pytest.mark.parametrize("shape", [(4,), (3, 4), (2, 4, 3)])
def test_rejects_non_square(shape):
    with pytest.raises(ValueError, match=r"square matrices .*" + str(list(shape)).replace("[", r"\[").replace("]", r"\]")):
        sinkhorn_knopp(torch.zeros(shape), 20)


def test_rejects_zero_iterations():
    with pytest.raises(ValueError, match="iters >= 1"):
        sinkhorn_knopp(torch.zeros(2, 2), 0)


def test_compile_selection(monkeypatch):
    monkeypatch.delenv("OPZOO_AOT_COMPILE", raising=False)
    assert use_compiled("auto", torch.device("cuda")) and not use_compiled("auto", torch.device("cpu"))
    assert use_compiled(True, torch.device("cpu")) and not use_compiled(False, torch.device("cuda"))
    monkeypatch.setenv("OPZOO_AOT_COMPILE", "0")
    assert not use_compiled(True, torch.device("cuda"))
    monkeypatch.setenv("OPZOO_AOT_COMPILE", "1")
    assert use_compiled("auto", torch.device("cpu"))


@pytest.mark.slow
def test_compiled_path_matches_eager_on_cpu():
    """The torch.compile path (the one used on CUDA) computes the same projection; CPU inductor here."""
    torch.manual_seed(5)
    logits = torch.randn(16, 4, 4) + 4 * torch.eye(4)
    eager = sinkhorn_knopp(logits, 20, compile=False)
    torch.testing.assert_close(sinkhorn_knopp(logits, 20, compile=True), eager, rtol=0, atol=1e-6)
    torch.testing.assert_close(compiled_sinkhorn(20)(logits), eager, rtol=0, atol=1e-6)


@pytest.mark.parametrize("scale", [0.1, 3.0, 30.0])
def test_hand_written_backward_matches_autograd_through_the_iterations(scale):
    """The eager path's custom backward (float32) equals autograd of the unrolled log-space loop in
    float64. Tolerance: 40 half-steps, each a logsumexp and a subtraction (a few float32 roundings,
    u = 6e-8, relative to entries of size <= |g|), and the projection v - S·Σv is a contraction,
    so the error stays within ~40·4·u ≈ 1e-5 of the gradient's scale (rtol 1e-4 leaves 10x room)."""
    from opzoo_aot.sinkhorn import _sinkhorn_log_loop

    torch.manual_seed(5)
    logits = (scale * torch.randn(6, 4, 4)).requires_grad_()
    weights = torch.randn(6, 4, 4)
    (fast,) = torch.autograd.grad((sinkhorn_knopp(logits, 20, compile=False) * weights).sum(), logits)
    logits64 = logits.detach().double().requires_grad_()
    (reference,) = torch.autograd.grad((_sinkhorn_log_loop(logits64, 20) * weights.double()).sum(), logits64)
    torch.testing.assert_close(fast.double(), reference, rtol=1e-4, atol=1e-6 * reference.abs().max().item())
    (twice,) = torch.autograd.grad((sinkhorn_knopp(logits, 20, compile=False) * weights).sum(), logits)
    torch.testing.assert_close(twice, fast, rtol=0, atol=0)


@pytest.mark.slow
def test_compiled_coefficients_fuse_the_sinkhorn_iterations():
    """The CUDA default (torch.compile of the coefficient path), lowered here by inductor for CPU:
    projections, gates and the 20 Sinkhorn iterations become a few fused kernels and one matmul,
    not the ~100 separate launches of the eager loop."""
    import re

    from opzoo_aot import AOTResidual
    from opzoo_aot.coefficients import stream_coefficients
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    residual = AOTResidual(64, index=1)
    params = [p.detach().float() for p in residual._coefficient_parameters()]
    pooled = torch.randn(3, 4, 64)
    compiled = torch.compile(stream_coefficients, fullgraph=True, dynamic=True)
    result, sources = run_and_get_code(compiled, pooled, *params, residual.eps, residual.sinkhorn_iters)
    code = "\n".join(sources)
    fused = set(re.findall(r"cpp_fused_\w+", code))
    assert 1 <= len(fused) <= 4, sorted(fused)
    assert len(re.findall(r"extern_kernels\.\w+\(", code)) <= 2  # the projection matmul
    for a, b in zip(result, stream_coefficients(pooled, *params, residual.eps, residual.sinkhorn_iters)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
