"""``torch.compile(model, fullgraph=True)`` for every registered preset (issue 16).

Compiled and eager float32 are both compared with the same model run eagerly in float64 (the
function itself): outputs and parameter gradients of one MSE training step. Each preset is traced
whole (``fullgraph=True``: no graph break) through dynamo + AOTAutograd (``aot_eager``): the
default suite traces a representative of the fast-compiling families (seconds each); every preset
(AOT and MoE presets take 15-30 s each on 2 shared cores) and inductor's generated code (half a
minute to minutes per model: a representative POT and FNO, then every other preset, marked
``inductor``) run under ``-m slow``.
``OPZOO_TEST_DEVICE=cuda`` runs the same checks on a GPU (``benchmarks/gpu_report.py``).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from .small_presets import all_presets, device_under_test, small_input, small_model

# Max error relative to max |reference|. A float32 result differs from the float64 function by
# sums of roundings of eps32 = 6e-8 per operation along the path; at these dims the longest
# reductions (FFTs, GEMMs, GroupNorm statistics) have <= ~10^3 terms, so n * eps32 ~ 6e-5 is a
# worst-case bound; 2e-4 leaves room for cancellation in the gradients. Eager float32 must meet
# the same bound (it does, with room: ~1e-6), so the check can tell a wrong graph from rounding.
REL_TOL = 2e-4
REPRESENTATIVE = ["simple-op", "dpot-ti", "fno-2d"]
INDUCTOR_REPRESENTATIVE = ["dpot-ti", "fno-2d"]


def step(model, x, y, run=None):
    """Output and parameter gradients of one MSE step of ``run`` (default ``model``) on ``model``'s weights."""
    model.zero_grad(set_to_none=True)
    out = (model if run is None else run)(x)
    F.mse_loss(out, y).backward()
    return out.detach(), {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}


def rel_err(got: torch.Tensor, want: torch.Tensor, floor: float = 0.0) -> float:
    """``max |got - want| / max(max |want|, floor)`` (complex tensors: the modulus)."""
    return ((got.to(want.dtype) - want).abs().max() / max(want.abs().max().item(), floor, 1e-30)).item()


def grad_floor(grads: dict[str, torch.Tensor]) -> float:
    """A gradient's rounding error scales with the terms summed into it (activations times upstream
    gradients), not with the gradient itself: one that is ~0 by symmetry (e.g. an AOT stream
    gate at init) is compared relative to 1 % of the largest gradient of the model."""
    return 1e-2 * max(g.abs().max().item() for g in grads.values())


def check_compiled(name: str, backend: str) -> None:
    device = device_under_test()
    torch._dynamo.reset()
    model = small_model(name).to(device)
    x, y = (t.to(device) for t in small_input(model))
    reference = copy.deepcopy(model).double()
    want_out, want_grads = step(reference, x.double(), y.double())
    eager_out, eager_grads = step(model, x, y)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    for _ in range(2):  # the second call runs the cached graph
        got_out, got_grads = step(model, x, y, run=compiled)
    # an MoE expert that got no input has no gradient in eager mode and a zero one in the compiled
    # graph, which runs it on its empty slice (opzoo_moe.dispatch)
    assert set(want_grads) <= set(got_grads), name
    assert not any(got_grads[k].any() for k in set(got_grads) - set(want_grads)), name
    assert rel_err(eager_out, want_out) < REL_TOL, (name, "eager")
    assert rel_err(got_out, want_out) < REL_TOL, (name, backend, "output")
    floor = grad_floor(want_grads)
    for k, g in want_grads.items():
        assert rel_err(eager_grads[k], g, floor) < REL_TOL, (name, "eager", k)
        assert rel_err(got_grads[k], g, floor) < REL_TOL, (name, backend, k)


@pytest.mark.slow
@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_representatives_compile_as_one_graph(name):
    check_compiled(name, "aot_eager")


@pytest.mark.slow
@pytest.mark.parametrize("name", all_presets())
def test_every_preset_compiles_as_one_graph(name):
    check_compiled(name, "aot_eager")


@pytest.mark.slow
@pytest.mark.parametrize("name", INDUCTOR_REPRESENTATIVE)
def test_inductor_representatives(name):
    check_compiled(name, "inductor")


@pytest.mark.slow
@pytest.mark.inductor
@pytest.mark.parametrize("name", [n for n in all_presets() if n not in INDUCTOR_REPRESENTATIVE])
def test_inductor_every_other_preset(name):
    check_compiled(name, "inductor")
