"""The AOT residual's CPU kernels (``opzoo_aot.cpu_kernels``, ``csrc/``) and the deferred stream state.

Every implementation (the C kernels and the PyTorch path that CUDA, bf16 and machines without a
compiler run) is checked against the equations evaluated in float64, forward and backward (with
transposed incoming gradients), with tolerances that follow from float32 rounding (u = 2^-24 ≈
6e-8) and the conditioning of each computation, never against another float32 path; the kernels
also pass gradcheck in float64. ``make test`` runs this module a second time with
``OPZOO_AOT_CPU_KERNELS=0``; the tests of the kernels themselves skip there.
"""

from __future__ import annotations

import copy
import itertools
import os
import subprocess
import sys
import textwrap

import opzoo
import pytest
import torch
import torch.utils._pytree as pytree
from opzoo_aot import AOTResidual, AOTState, cpu_kernels
from opzoo_aot.coefficients import coefficients_cpu, coefficients_torch, stream_coefficients
from opzoo_aot.stream_ops import carry_pooled, combine_streams, combine_streams_torch

from .aot_reference import aot_coefficients

U32 = 2.0**-24  # float32 unit roundoff
requires_kernels = pytest.mark.skipif(os.environ.get(cpu_kernels.ENV_KERNELS, "").strip() == "0",
                                      reason=f"{cpu_kernels.ENV_KERNELS}=0: the PyTorch path only")


def assert_within(actual, reference, bound, what=""):
    """``|actual - reference| <= bound`` elementwise (reference in float64)."""
    err = (actual.double() - reference).abs()
    worst = (err - bound).argmax()
    assert bool((err <= bound).all()), (
        f"{what}: error {err.flatten()[worst].item():.3e} exceeds its bound {bound.flatten()[worst].item():.3e}")


@requires_kernels
def test_the_kernels_build_here():
    # the project's machines have a C compiler; without one the residual falls back (tested below)
    assert cpu_kernels.kernels() is not None


def transposed_like(t: torch.Tensor) -> torch.Tensor:
    """Random values with ``t``'s shape, laid out transposed (not contiguous)."""
    return torch.randn(t.shape[::-1], dtype=t.dtype).permute(*reversed(range(t.ndim)))


# ---- the stream map ------------------------------------------------------------------------------
# (H given, y given, h given, need_current): the first sub-layer, an update with aggregation, the
# update alone (materialize / a plain-tensor state), the gated readout of a pending update
MODES = [(False, False, True, True), (True, True, True, True), (True, True, False, True), (True, True, True, False),
         (True, False, True, True)]


def combine_streams_reference(streams, y, H, h_post, h, need_current=True):
    """The map with einsum, differentiated by autograd (called on float64 tensors)."""
    current = streams
    if H is not None:
        current = torch.einsum("bij,bjf->bif", H, streams)
        if y is not None:
            current = current + h_post[..., None] * y[:, None]
    u = None if h is None else torch.einsum("bi,bif->bf", h, current)
    return (current if need_current else None), u


def traced(fn):
    """``fn`` through dynamo and AOTAutograd (``aot_eager``): the graphs inductor would compile
    (``torch.compile`` is the CUDA default), run eagerly; a fresh cache for every call."""
    torch._dynamo.reset()
    return torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=False)


def combine_streams_traced(*inputs, need_current=True):
    return traced(lambda *a: combine_streams_torch(*a, need_current=need_current))(*inputs)


@pytest.mark.parametrize("path", ["kernels", "torch", "traced"])
@pytest.mark.parametrize("n", [4, 3])  # 4: the kernels' register-blocked path; 3: the general one
@pytest.mark.parametrize("features", [37, 1024, 9000])  # below a block, whole blocks, several chunks
@pytest.mark.parametrize("mode", MODES)
def test_combine_streams_matches_the_equations_in_float64(path, n, features, mode):
    """Float32 results against float64 with the standard rounding bounds: every output entry and
    every gradient entry is a sum of products, whose float32 error is at most γ_m · Σ|terms|
    (γ_m = m·u/(1 - m·u), m the number of terms summed in float32: n + 2 for the maps, the block
    of at most 1024 features the implementations reduce in float32 before summing in float64 for
    the reductions over the features, plus the roundings of the few float32 products/sums after;
    the traced form sums those reductions in float64 throughout, within the same bound)."""
    if path == "kernels" and os.environ.get(cpu_kernels.ENV_KERNELS, "").strip() == "0":
        pytest.skip("kernels off")
    if path == "traced" and features == 1024:
        pytest.skip("the traced form has no blocks: 37 and 9000 features cover it")
    has_H, has_y, has_h, need_current = mode
    g = torch.Generator().manual_seed(features + n)

    def make(*shape):
        return torch.randn(*shape, generator=g).requires_grad_()

    b = 3
    inputs = [make(b, n, features), make(b, features) if has_y else None, make(b, n, n) if has_H else None,
              make(b, n) if has_H else None, make(b, n) if has_h else None]
    if path == "kernels":
        assert cpu_kernels.stream_kernel(inputs[0], inputs[1:]) is not None
        result = combine_streams(*inputs, need_current=need_current)
    elif path == "traced":
        result = combine_streams_traced(*inputs, need_current=need_current)
    else:
        result = combine_streams_torch(*inputs, need_current=need_current)
    inputs64 = [None if t is None else t.detach().double().requires_grad_() for t in inputs]
    reference = combine_streams_reference(*inputs64, need_current=need_current)
    absolute = combine_streams_reference(*[None if t is None else t.detach().abs() for t in inputs64],
                                         need_current=need_current)  # the sums of |terms|
    gamma = lambda m: m * U32 / (1 - m * U32)  # noqa: E731
    for a, r, mag, what in zip(result, reference, absolute, ("current", "u")):
        assert (a is None) == (r is None)
        if a is not None:
            assert_within(a, r.detach(), 2 * gamma(2 * n + 2) * mag, what)
    grads = [None if r is None else transposed_like(r.float()) for r in reference]
    pairs = [(i, gr) for i, gr in enumerate(grads) if gr is not None]
    live = [i for i, t in enumerate(inputs) if t is not None]
    got = torch.autograd.grad([result[i] for i, _ in pairs], [inputs[i] for i in live], [gr for _, gr in pairs],
                              allow_unused=True)
    want = torch.autograd.grad([reference[i] for i, _ in pairs], [inputs64[i] for i in live],
                               [gr.double() for _, gr in pairs], allow_unused=True)
    # the same backward on |inputs| and |incoming gradients|: Σ|terms| of every gradient entry
    abs_in = [None if t is None else t.detach().abs().requires_grad_() for t in inputs64]
    abs_out = combine_streams_reference(*abs_in, need_current=need_current)
    mags = torch.autograd.grad([abs_out[i] for i, _ in pairs], [abs_in[i] for i in live],
                               [gr.double().abs() for _, gr in pairs], allow_unused=True)
    bound = 4 * gamma(1024 + 2 * n + 4)
    for index, a, r, mag in zip(live, got, want, mags):
        if r is None:
            assert a is None or not a.any()
        else:
            assert_within(a, r, bound * mag + 1e-30, f"gradient of input {index}")


@pytest.mark.parametrize("path", ["kernels", "torch", "traced"])
@pytest.mark.parametrize("n", [4, 3])
def test_combine_streams_gradcheck_float64(monkeypatch, path, n):
    """Every implementation in every mode, float64 gradients against finite differences (the
    PyTorch path's hand-written gradients of the mixing matrix's coefficients included, and the
    form torch.compile traces)."""
    use_path(monkeypatch, "kernels" if path == "kernels" else "torch")
    g = torch.Generator().manual_seed(n)

    def make(*shape):
        return torch.randn(*shape, dtype=torch.float64, generator=g).requires_grad_()

    streams, y, H, h_post, h = make(2, n, 11), make(2, 11), make(2, n, n), make(2, n), make(2, n)
    combine = combine_streams if path == "kernels" else combine_streams_torch
    wrap = traced if path == "traced" else (lambda fn: fn)  # one compiled function per gradcheck
    assert torch.autograd.gradcheck(wrap(lambda *a: combine(*a)), (streams, y, H, h_post, h))
    assert torch.autograd.gradcheck(wrap(lambda s, w: combine(s, None, None, None, w)[1]), (streams, h))
    assert torch.autograd.gradcheck(wrap(lambda *a: combine(*a, need_current=False)[1]), (streams, y, H, h_post, h))
    assert torch.autograd.gradcheck(wrap(lambda s, y_, H_, p: combine(s, y_, H_, p, None)[0]), (streams, y, H, h_post))
    if path != "traced":  # a graph without outputs has nothing to trace
        assert combine(streams, y, H, h_post, None, need_current=False) == (None, None)  # nothing asked for


@pytest.mark.parametrize("pending", [True, False])
def test_traced_map_reads_the_rows_in_place(pending):
    """What torch.compile gets from the stream map, forward and backward: no stacked ``[B, n+1, F]``
    operand and no batched GEMM over the features, only broadcast products and reductions on the
    rows as they are, which inductor fuses into one pass each way (issue 16)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def keep(graph, example_inputs):
        graphs.append(graph)
        return make_boxed_func(graph)

    n, f = 4, 96
    streams = torch.randn(2, n, f, requires_grad=True)
    y, H, h_post = (torch.randn(2, f), torch.rand(2, n, n), torch.rand(2, n)) if pending else (None, None, None)
    h = torch.rand(2, n, requires_grad=True)
    torch._dynamo.reset()
    fn = torch.compile(combine_streams_torch, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep), fullgraph=True)
    current, u = fn(streams, y, H, h_post, h)
    (current.sum() + u.sum()).backward()
    assert len(graphs) == 2  # forward and backward
    feature_sized = [node.target for graph in graphs for node in graph.graph.nodes
                     if node.op == "call_function" and node.target in (torch.ops.aten.cat.default, torch.ops.aten.bmm.default)
                     and node.meta["val"].shape[-1] == f]
    assert not feature_sized, feature_sized


def test_traced_map_mixes_bfloat16_streams_in_float32():
    """bf16 streams under torch.compile: every output entry is the exact map of the bf16 inputs,
    accumulated in float32 and rounded to bf16 once: within bf16's unit roundoff (2^-8 relative) of
    the float64 result plus γ_(n+2) of the sum of |terms|, which a mixing matrix rounded to
    bf16 first (2^-8 of each coefficient, e.g. the entries of H^T h) does not meet where terms cancel."""
    n, f = 4, 257
    g = torch.Generator().manual_seed(5)
    inputs = [torch.randn(2, n, f, generator=g), torch.randn(2, f, generator=g), torch.randn(2, n, n, generator=g),
              torch.randn(2, n, generator=g), torch.randn(2, n, generator=g)]
    inputs = [t.bfloat16() for t in inputs]
    current, u = combine_streams_traced(*inputs)
    assert current.dtype == u.dtype == torch.bfloat16
    inputs64 = [t.double() for t in inputs]
    reference = combine_streams_reference(*inputs64)
    absolute = combine_streams_reference(*[t.abs() for t in inputs64])
    gamma = (2 * n + 2) * U32 / (1 - (2 * n + 2) * U32)
    for a, r, mag, what in zip((current, u), reference, absolute, ("current", "u")):
        assert_within(a, r, 2.0**-8 * r.abs() + 2 * gamma * mag, what)


@requires_kernels
def test_combine_streams_does_not_depend_on_the_number_of_threads():
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(*s, generator=g).requires_grad_() for s in ((2, 4, 70000), (2, 70000), (2, 4, 4), (2, 4), (2, 4))]
    results = []
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            current, u = combine_streams(*inputs)
            grads = torch.autograd.grad((current, u), inputs, (torch.ones_like(current), torch.ones_like(u)))
            results.append((current, u, *grads))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_pending_update_requires_its_matrix():
    with pytest.raises(ValueError, match="y without H"):
        combine_streams(torch.randn(1, 4, 6), torch.randn(1, 6))


# ---- the coefficients --------------------------------------------------------------------------
def randomized_residual(dim, n, seed, dtype=torch.float32):
    residual = AOTResidual(dim, index=1, n=n).to(dtype)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in residual.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=dtype) * 0.3)
    return residual


def coefficient_results(path, pooled, params, eps, iters):
    """``kernels``: the C kernel; ``torch``: the hand-written backward the eager PyTorch path runs;
    ``autograd``: the same ops differentiated by autograd (what torch.compile traces)."""
    if path == "kernels":
        if os.environ.get(cpu_kernels.ENV_KERNELS, "").strip() == "0":
            pytest.skip("kernels off")
        return coefficients_cpu(pooled, *params, eps=eps, iters=iters)
    if path == "torch":
        return coefficients_torch(pooled, *params, eps=eps, iters=iters)
    return stream_coefficients(pooled, *params, eps, iters)


@pytest.mark.parametrize("path", ["kernels", "torch", "autograd"])
@pytest.mark.parametrize("n", [4, 3])
def test_coefficients_match_the_loops_and_float64(path, n):
    """Forward against the float64 direct loops; gradients against the equations in float64.
    Tolerances: the projections are sums of n·D = 24 products (γ_24 ≈ 1.4e-6 of Σ|terms|, here
    |terms| ~ 1), then gates and 40 Sinkhorn half-steps that each add a few roundings and contract
    errors (rows normalized): 2e-6 absolute on values in [0, 2]. The backward adds the reverse of
    the same chains, ~100 roundings of quantities of the gradient's scale: 2e-5 of that scale. The
    gate scalars' and biases' gradients are sums over the batch and entries of terms up to the
    largest gradient's size that can cancel (alpha_pre's came out 1e-4 of its own scale in one
    state), so each also gets an absolute floor of 32 roundings of the largest gradient (2e-6 of it;
    measured at most 6e-7 over 40 states, every path)."""
    residual = randomized_residual(6, n, seed=n)
    params = [p for p in residual._coefficient_parameters()]
    state = torch.randn(5, n, 3, 2, 6, generator=torch.Generator().manual_seed(n))
    pooled = state.flatten(2, 3).mean(dim=2).requires_grad_()
    result = coefficient_results(path, pooled, params, residual.eps, residual.sinkhorn_iters)
    for a, l in zip(result, aot_coefficients(residual, state)):
        torch.testing.assert_close(a.double(), l, rtol=0, atol=2e-6)
    live64 = [t.detach().double().requires_grad_() for t in (pooled, *params)]
    reference = stream_coefficients(live64[0], *live64[1:], residual.eps, residual.sinkhorn_iters)
    grads = [transposed_like(r.float()) for r in reference]  # transposed: the kernel must copy them first
    got = torch.autograd.grad(result, [pooled, *params], grads)
    want = torch.autograd.grad(reference, live64, [gr.double() for gr in grads])
    largest = max(r.abs().max().item() for r in want)
    for a, r in zip(got, want):
        torch.testing.assert_close(a.double(), r, rtol=0, atol=2e-5 * r.abs().max().item() + 32 * U32 * largest)


@requires_kernels
def test_coefficients_gradcheck_float64():
    residual = randomized_residual(3, 4, seed=1, dtype=torch.float64)
    params = [p for p in residual._coefficient_parameters()]
    pooled = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    assert cpu_kernels.coefficient_kernel(pooled, params) is not None
    assert torch.autograd.gradcheck(lambda p, *ps: coefficients_cpu(p, *ps, eps=1e-6, iters=5), (pooled, *params))


@pytest.mark.parametrize("n", [4, 3])
def test_hand_written_coefficient_backward_passes_gradcheck(n):
    """The eager PyTorch path's backward (:func:`coefficients_torch`) against finite differences, in float64."""
    residual = randomized_residual(3, n, seed=n, dtype=torch.float64)
    params = [p.detach().clone().requires_grad_() for p in residual._coefficient_parameters()]
    pooled = torch.randn(2, n, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p, *ps: coefficients_torch(p, *ps, eps=1e-6, iters=5), (pooled, *params))


@pytest.mark.parametrize("path", ["kernels", "torch", "autograd"])
def test_coefficients_with_only_some_gradients(path):
    """One output used at a time (the others get no gradient); tolerance as above."""
    residual = randomized_residual(4, 4, seed=2)
    params = [p for p in residual._coefficient_parameters()]
    pooled = torch.randn(2, 4, 4, requires_grad=True)
    pooled64 = pooled.detach().double().requires_grad_()
    params64 = [p.detach().double() for p in params]
    for keep in range(3):
        result = coefficient_results(path, pooled, params, 1e-6, 20)[keep]
        reference = stream_coefficients(pooled64, *params64, 1e-6, 20)[keep]
        weights = torch.randn(reference.shape, dtype=torch.float64)  # (a plain sum of H has no gradient)
        (want,) = torch.autograd.grad((reference * weights).sum(), pooled64)
        (got,) = torch.autograd.grad((result * weights.float()).sum(), pooled)
        torch.testing.assert_close(got.double(), want, rtol=0,
                                   atol=2e-5 * want.abs().max().item() + 1e-12)


# ---- the carried pooled summary and the deferred state -----------------------------------------
def test_carry_pooled_is_the_mean_of_the_updated_streams_and_passes_gradcheck():
    g = torch.Generator().manual_seed(3)
    streams, y = torch.randn(2, 4, 5, 3, generator=g), torch.randn(2, 5, 3, generator=g)
    H, h_post = torch.rand(2, 4, 4, generator=g), torch.rand(2, 4, generator=g)
    updated = torch.einsum("bij,bjsd->bisd", H, streams) + h_post[..., None, None] * y[:, None]
    torch.testing.assert_close(carry_pooled(y, H, h_post, streams.mean(dim=2)), updated.mean(dim=2))
    args = [t.double().requires_grad_() for t in (y, H, h_post, streams.mean(dim=2))]
    assert torch.autograd.gradcheck(carry_pooled, args)


def test_state_is_a_pytree_and_materializes_the_pending_update():
    g = torch.Generator().manual_seed(4)
    streams, y = torch.randn(2, 4, 3, 5, generator=g), torch.randn(2, 3, 5, generator=g)
    H, h_post = torch.rand(2, 4, 4, generator=g), torch.rand(2, 4, generator=g)
    state = AOTState(streams, streams.mean(dim=2), y, H, h_post)
    leaves, spec = pytree.tree_flatten(state)
    assert len(leaves) == 5 and all(isinstance(t, torch.Tensor) for t in leaves)
    assert isinstance(pytree.tree_unflatten(leaves, spec), AOTState)
    expected = torch.einsum("bij,bjsd->bisd", H, streams) + h_post[..., None, None] * y[:, None]
    torch.testing.assert_close(state.materialize(), expected)
    assert state.shape == (2, 4, 3, 5)


def aot_network(seed=0, width=16, depth=3):
    """A simple-backbone AOT network whose residual parameters are perturbed, so the streams differ."""
    torch.manual_seed(seed)
    model = opzoo.create_model("simple", residual="aot", in_channels=2, out_channels=2, in_timesteps=3,
                               width=width, depth=depth)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "residual" in name or name == "streams.g":
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
    return model


def forward_backward(model, x):
    model.zero_grad(set_to_none=True)
    out = model(x)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return out.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def use_path(monkeypatch, path):
    """Selects the C kernels or the PyTorch path (the one CUDA, bf16 and compiler-less CPUs run)."""
    if path == "kernels":
        if os.environ.get(cpu_kernels.ENV_KERNELS, "").strip() == "0":
            pytest.skip("kernels off")
        assert cpu_kernels.kernels() is not None
    else:
        monkeypatch.setenv(cpu_kernels.ENV_KERNELS, "0")
        assert cpu_kernels.kernels() is None


# Gradient tolerance relative to each tensor's own scale (max |g|), the same for every path.
# Why 1e-5: with the streams close to one another (copies at the start, kept close by the
# residual) the gradients of H_res, h_pre and the readout are each a small difference of large,
# nearly equal dot products with the streams (the common part cancels because rows of H_res and
# the weights sum to 1). In this network the entries are up to ~100x the result (κ ≈ 100, read
# off the float64 run), so rounding them once to float32 (u = 6e-8, unavoidable: both paths store
# them in float32) costs ~100·u = 6e-6 of the gradient's scale; 1e-5 leaves no room for a
# reduction over the S·D features that is less accurate than float32 rounding of its result
# (a plain float32 GEMM over 65536 features gave 1e-3: issue 11). Gradients that vanish in exact
# arithmetic (the first sub-layer sees identical streams) are float32 noise of the same
# cancellation, of the size of one rounding of the largest gradient: the absolute floor is u·max|g|.
GRAD_RTOL = 1e-5
# The gate scalars' gradients are themselves sums of B·n (B·n²) terms g·proj of both signs, each
# term carrying the error above, and can be ~10x smaller than the terms (a second cancellation):
# 1e-4 of their scale, on both paths. (The C kernels also combine their float32 reductions in
# float32, gH = G X^T + h·(X g_u) and the h_post analogue: up to 6e-5 measured on alpha_post.)
GATE_RTOL = 1e-4
# The layers around the residual (norms, mixers, the readout) are PyTorch's own, the same on both
# paths, and their gradients sum over all B·S positions in float32: only the AOT parameters
# (the residuals' and the readout weights g) are compared here.


def assert_matches_float64(result, reference, path="torch"):
    """Outputs and parameter gradients of a float32 run against the same network in float64."""
    out_scale = reference[0].abs().max().item()
    torch.testing.assert_close(result[0].double(), reference[0], rtol=0, atol=1e-5 * out_scale)
    largest = max(g.abs().max().item() for g in reference[1].values())
    for name, grad in reference[1].items():
        leaf = name.rsplit(".", 1)[-1]
        if ".residual" not in name and name != "streams.g":
            continue
        rtol = GATE_RTOL if leaf in ("alpha_pre", "alpha_post") else GRAD_RTOL
        atol = rtol * grad.abs().max().item() + U32 * largest
        torch.testing.assert_close(result[1][name].double(), grad, rtol=0, atol=atol, msg=lambda m: f"{name}: {m}")


def float64_reference(model, x):
    return forward_backward(copy.deepcopy(model).double(), x.double())


@pytest.mark.parametrize("path", ["kernels", "torch"])
def test_network_matches_float64(monkeypatch, path):
    model, x = aot_network(), torch.randn(2, 8, 8, 3, 2)
    reference = float64_reference(model, x)
    use_path(monkeypatch, path)
    assert_matches_float64(forward_backward(model, x), reference, path)


@pytest.mark.parametrize("path", ["kernels", "torch"])
def test_deferred_state_equals_applying_every_update_at_once(monkeypatch, path):
    """A network on AOTState (updates deferred, summary carried) in float32 against the same
    residuals on plain [B, n, *S, D] tensors (every update applied, every summary pooled) in float64."""
    model, x = aot_network(seed=1), torch.randn(2, 8, 8, 3, 2)
    use_path(monkeypatch, path)
    deferred = forward_backward(model, x)
    model = copy.deepcopy(model).double()
    expand = model.streams.expand
    model.streams.expand = lambda latent: expand(latent).materialize()  # a plain tensor from the start
    eager = forward_backward(model, x.double())
    assert_matches_float64(deferred, eager, path)


@requires_kernels
def test_unsupported_inputs_take_the_torch_path():
    x = torch.randn(1, 4, 8)
    assert cpu_kernels.stream_kernel(x.bfloat16(), ()) is None
    assert cpu_kernels.stream_kernel(x, (torch.randn(1, 4, 4, dtype=torch.float64),)) is None
    assert cpu_kernels.stream_kernel(torch.randn(1, cpu_kernels.NMAX + 1, 8), ()) is None
    assert cpu_kernels.stream_kernel(x.to("meta"), ()) is None


def test_bfloat16_streams_run_on_the_torch_path():
    model = aot_network().bfloat16()
    out = model(torch.randn(2, 8, 8, 3, 2).bfloat16())
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


# ---- the build ----------------------------------------------------------------------------------
@requires_kernels
def test_build_is_cached(tmp_path, monkeypatch):
    first = cpu_kernels.build_library(tmp_path)
    assert first.is_file() and first.parent.parent == tmp_path

    def no_compiler(*args, **kwargs):
        raise AssertionError("a cached build must not run the compiler")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    assert cpu_kernels.build_library(tmp_path) == first
    assert [p.name for p in first.parent.iterdir()] == ["libaot_kernels.so"]  # no temporary left behind


@requires_kernels
def test_build_failure_names_the_compiler_and_leaves_nothing(tmp_path):
    with pytest.raises(cpu_kernels.KernelBuildError, match=r"(?s)could not build the AOT CPU kernels.*no-such-cc"):
        cpu_kernels.build_library(tmp_path, compiler="/no/such/dir/no-such-cc")
    assert not list(tmp_path.rglob("*.so"))


def test_without_a_compiler_the_residual_falls_back_and_warns_once(tmp_path):
    script = textwrap.dedent(
        """
        import warnings, torch, opzoo
        warnings.simplefilter("always")
        torch.manual_seed(0)
        model = opzoo.create_model("simple", residual="aot", in_channels=1, out_channels=1, in_timesteps=2, width=8)
        x = torch.randn(2, 6, 6, 2, 1)
        with warnings.catch_warnings(record=True) as caught:
            out = model(x)
            model(x).sum().backward()
        messages = [str(w.message) for w in caught if "CPU kernels are unavailable" in str(w.message)]
        assert len(messages) == 1, messages
        assert "no-such-cc" in messages[0], messages[0]
        print(repr(out.flatten()[:4].tolist()))
        """
    )
    env = {**os.environ, "CC": "/no/such/dir/no-such-cc", "OPZOO_CACHE_DIR": str(tmp_path)}
    env.pop(cpu_kernels.ENV_KERNELS, None)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    torch.manual_seed(0)
    model = opzoo.create_model("simple", residual="aot", in_channels=1, out_channels=1, in_timesteps=2, width=8)
    with torch.no_grad():
        expected = model(torch.randn(2, 6, 6, 2, 1)).flatten()[:4]
    torch.testing.assert_close(torch.tensor(eval(result.stdout.strip().splitlines()[-1])), expected,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("modes", list(itertools.product([False, True], repeat=2)))
def test_residual_on_a_plain_tensor_state_returns_a_tensor(modes):
    pending, batch_two = modes
    residual = randomized_residual(5, 4, seed=7)
    state = torch.randn(2 if batch_two else 1, 4, 3, 5)
    if pending:
        b = state.shape[0]
        state = AOTState(state, state.mean(dim=2), torch.randn(b, 3, 5), torch.softmax(torch.randn(b, 4, 4), -1),
                         torch.rand(b, 4))
        out = residual(state, torch.tanh)
        assert isinstance(out, AOTState) and out.y is not None
        torch.testing.assert_close(out.streams, state.materialize(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out.pooled, out.streams.mean(dim=2), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out.current_pooled(), out.materialize().mean(dim=2), rtol=1e-5, atol=1e-6)
    else:
        out = residual(state, torch.tanh)
        assert isinstance(out, torch.Tensor) and out.shape == state.shape


# ---- the fused sub-layer node ---------------------------------------------------------------------
@requires_kernels
@pytest.mark.parametrize("pending", [False, True])
@pytest.mark.parametrize("n", [4, 3])
def test_fused_sublayer_equals_its_composition(pending, n):
    from opzoo_aot.sublayer import fused_sublayer

    residual = randomized_residual(6, n, seed=11)
    params = [p.float() for p in residual._coefficient_parameters()]
    g = torch.Generator().manual_seed(12)
    b, s, d = 3, 10, 6
    streams = torch.randn(b, n, s * d, generator=g).requires_grad_()
    pooled = streams.detach().view(b, n, s, d).mean(dim=2).requires_grad_()
    y = H = h_post = None
    if pending:
        y = torch.randn(b, s * d, generator=g).requires_grad_()
        H = torch.softmax(torch.randn(b, n, n, generator=g), -1).requires_grad_()
        h_post = torch.rand(b, n, generator=g).requires_grad_()
    fused = fused_sublayer(streams, y, H, h_post, pooled, params, residual.eps, residual.sinkhorn_iters)
    current_pooled = pooled if not pending else carry_pooled(y.view(b, s, d), H, h_post, pooled)
    h_pre, h_post_new, H_new = stream_coefficients(current_pooled, *params, residual.eps, residual.sinkhorn_iters)
    current, u = combine_streams_torch(streams, y, H, h_post, h_pre)
    composed = (current, u, h_post_new, H_new, current_pooled)
    for a, r in zip(fused, composed):
        torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-5)
    live = [t for t in (streams, y, H, h_post, pooled, *params) if t is not None]
    grads = [transposed_like(r) for r in composed]
    for a, r in zip(torch.autograd.grad(fused, live, grads, allow_unused=True),
                    torch.autograd.grad(composed, live, grads, allow_unused=True)):
        if r is None:
            assert a is None or not a.any()
        else:
            torch.testing.assert_close(a, r, rtol=1e-3, atol=1e-4)


@pytest.mark.slow
def test_compiled_path_on_the_deferred_state_matches_the_kernels():
    """compile=True (the CUDA default, run here with inductor on CPU) against float64."""
    model = aot_network(seed=2)
    x = torch.randn(2, 8, 8, 3, 2)
    reference = float64_reference(model, x)
    for m in model.modules():
        if isinstance(m, AOTResidual):
            m.compile = True
    compiled = forward_backward(model, x)
    assert_matches_float64(compiled, reference)


# ---- the caching pool ----------------------------------------------------------------------------
@requires_kernels
def test_pool_reuses_freed_buffers_and_releases_them():
    like = torch.zeros(1)
    cpu_kernels.empty_cache()
    a = cpu_kernels.pooled_empty(like, 2, 4, 40000)
    assert a.shape == (2, 4, 40000) and a.dtype == torch.float32 and a.is_contiguous() and a.data_ptr() % 64 == 0
    a.fill_(3.0)
    address = a.data_ptr()
    del a
    assert cpu_kernels.cached_bytes() == 2 * 4 * 40000 * 4
    b = cpu_kernels.pooled_empty(like, 2, 4, 40000)
    assert b.data_ptr() == address and cpu_kernels.cached_bytes() == 0
    view = b.view(8, -1)  # a view keeps the buffer: nothing returns to the pool until both are gone
    del b
    assert cpu_kernels.cached_bytes() == 0
    del view
    assert cpu_kernels.empty_cache() == 2 * 4 * 40000 * 4 and cpu_kernels.cached_bytes() == 0
    small = cpu_kernels.pooled_empty(like, 10)  # small tensors come from PyTorch's allocator
    del small
    assert cpu_kernels.cached_bytes() == 0
    assert cpu_kernels.pooled_empty(like.double(), 70000).dtype == torch.float64


@pytest.mark.parametrize("path", ["kernels", "torch"])
def test_network_with_pooled_buffers_matches_float64(monkeypatch, path):
    """Issue 11's network: S·D = 65536 features per stream, streams close to one another, large
    enough that every stream buffer comes from a pool (each >= 256 KiB: the kernels' pool, or the
    Python pool of the PyTorch path), over two steps so the second one runs on reused buffers."""
    model = aot_network(seed=3, width=64, depth=2)
    x = torch.randn(2, 32, 32, 3, 2)
    reference = float64_reference(model, x)
    use_path(monkeypatch, path)
    cpu_kernels.empty_cache()
    first = forward_backward(model, x)
    assert cpu_kernels.cached_bytes() > 0
    second = forward_backward(model, x)
    for result in (first, second):
        assert_matches_float64(result, reference, path)


@pytest.mark.parametrize("value, kept", [("0", False), ("64", True)])
def test_pool_limit_from_the_environment(tmp_path, value, kept):
    script = textwrap.dedent(
        """
        import torch
        from opzoo_aot import cpu_kernels
        buffer = cpu_kernels.pooled_empty(torch.zeros(1), 4, 65536)
        del buffer
        print(cpu_kernels.cached_bytes())
        """
    )
    env = {**os.environ, cpu_kernels.ENV_POOL: value}
    env.pop(cpu_kernels.ENV_KERNELS, None)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.split()[-1]) == (4 * 65536 * 4 if kept else 0)


def test_bad_pool_limit_is_a_clear_error():
    script = "import torch; from opzoo_aot import cpu_kernels; cpu_kernels.pooled_empty(torch.zeros(1), 70000)"
    env = {**os.environ, cpu_kernels.ENV_POOL: "lots"}
    env.pop(cpu_kernels.ENV_KERNELS, None)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "OPZOO_AOT_POOL_MB='lots': expected a whole number of MiB" in result.stderr
