"""Sparse dispatch equals a dense reference (every expert on every input, masked; here only) to float32
rounding, forward and backward, image- and token-level, k = 1 and 2.

Both float32 paths are compared with a float64 run of the dense reference (same weights, same expert
choices). The experts are 1-2 layer networks of width <= 32 over <= 64 tokens: each output is a sum of
<= 64 float32 products of O(1) terms, so its rounding error is below ~64 * 2**-24 * scale ~ 4e-6 * scale
in the worst case; we allow 2e-5 relative to the largest output/gradient magnitude. A gradient that is
zero in exact arithmetic (the top-1 gate gradient through w = p / p = 1) is a difference of rounded
O(upstream) terms, so for gradients the scale is at least the largest parameter gradient of the run.
"""

import copy

import pytest
import torch

from opzoo import Routing, get_registry
from opzoo.contracts.routing import aux_losses
from opzoo_moe import AttentionExpert, ImageRouter, SparseMoEFeedForward, TokenRouter, dispatch


def dense_reference(x, router, experts):
    """Every expert on every group, weighted by the renormalized top-k mask (0 for experts not chosen)."""
    h = router.features(x)
    probs = torch.softmax(router.gate(h), -1)
    idx = router.last_indices                                              # the tested run's choices
    top = probs.gather(1, idx)
    mask = torch.zeros_like(probs).scatter(1, idx, top / top.sum(1, keepdim=True))  # [G, E]
    out = 0
    for e, expert in enumerate(experts):
        y = expert(x)
        out = out + mask[:, e].view(-1, *([1] * (y.ndim - 1))) * y
    return out


def remember_indices(router):
    def hook(module, args, output):
        module.last_indices = output.indices
    return router.register_forward_hook(hook)


def grads(module):
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in module.named_parameters()}


def close(a, b, what, floor=0.0):
    scale = max(float(b.abs().max()), floor)
    err = float((a.double() - b.double()).abs().max())
    assert err <= 2e-5 * scale, f"{what}: max error {err:.3g} vs scale {scale:.3g}"


def run(module, forward, x, target):
    module.zero_grad(set_to_none=True)
    xx = x.clone().requires_grad_(True)
    out = forward(module, xx)
    (out * target).sum().backward()
    return out.detach(), xx.grad, grads(module)


def check(module, sparse, dense, x, target):
    remember_indices(module.router)
    out32, gx32, g32 = run(module, sparse, x, target)
    idx = module.router.last_indices
    for e in set(range(module.router.num_experts)) - set(idx.unique().tolist()):  # idle: no gradient at all
        assert all(p.grad is None for p in module.experts[e].parameters())
    dense32 = run(module, dense, x, target)
    m64 = copy.deepcopy(module).double()
    m64.router.last_indices = idx  # the reference reuses the float32 run's expert choices
    out64, gx64, g64 = run(m64, dense, x.double(), target.double())
    for name, (o, gx, g) in {"sparse": (out32, gx32, g32), "dense": dense32}.items():
        close(o, out64, f"{name} output")
        close(gx, gx64, f"{name} input grad")
        floor = max(float(v.abs().max()) for v in g64.values())
        for p in g64:
            close(g[p], g64[p], f"{name} grad {p}", floor)


@pytest.mark.parametrize("k", [1, 2])
def test_token_level_sparse_moe_equals_dense_reference(k):
    torch.manual_seed(k)
    ffn = SparseMoEFeedForward(16, 24, num_experts=4, top_k=k, num_shared=1)
    x, target = torch.randn(2, 4, 4, 16), torch.randn(2, 4, 4, 16)

    def sparse(m, x):
        return m(x)

    def dense(m, x):
        t = x.reshape(-1, 16)
        y = dense_reference(t, m.router, m.experts) + m.shared[0](t)
        return y.view(x.shape)

    check(ffn, sparse, dense, x, target)


class ImageMoE(torch.nn.Module):
    """Image-level routing over attention experts (an MLP FFN each): ``[B, S, S, D]``."""

    def __init__(self, dim, k):
        super().__init__()
        mlp = get_registry().get("feedforward", "mlp")
        self.router = ImageRouter(dim, 4, top_k=k)
        self.experts = torch.nn.ModuleList(AttentionExpert(dim, 2, mlp(dim, hidden_dim=2 * dim)) for _ in range(4))


@pytest.mark.parametrize("k", [1, 2])
def test_image_level_sparse_dispatch_equals_dense_reference(k):
    torch.manual_seed(10 + k)
    moe = ImageMoE(16, k)
    x, target = torch.randn(6, 4, 4, 16), torch.randn(6, 4, 4, 16)

    def sparse(m, x):
        return dispatch(x, m.router(x), m.experts)

    def dense(m, x):
        return dense_reference(x, m.router, m.experts)

    check(moe, sparse, dense, x, target)


def test_an_expert_with_no_input_is_never_called():
    torch.manual_seed(0)
    ffn = SparseMoEFeedForward(8, 8, num_experts=4, top_k=1, num_shared=0)
    with torch.no_grad():
        ffn.router.gate.weight.zero_()
        ffn.router.gate.bias.copy_(torch.tensor([0.0, 5.0, 0.0, 0.0]))  # everything to expert 1
    calls = [0] * 4
    for e, expert in enumerate(ffn.experts):
        expert.register_forward_hook(lambda m, a, o, e=e: calls.__setitem__(e, calls[e] + a[0].shape[0]))
    x = torch.randn(3, 5, 8)
    ffn(x).sum().backward()
    assert calls == [0, 15, 0, 0]
    assert all(p.grad is None for e in (0, 2, 3) for p in ffn.experts[e].parameters())


@pytest.mark.slow
def test_compiled_dispatch_serves_any_routing_and_runs_an_idle_expert_on_nothing():
    """One graph for every routing (unbacked per-expert sizes): equal to eager, also when an expert
    gets no input; there its slice is empty, so its parameter gradients are exactly zero."""
    torch.manual_seed(3)
    moe = ImageMoE(16, 2)
    x = torch.randn(5, 4, 4, 16)

    def run_dispatch(x, weights, indices):
        return dispatch(x, Routing(weights, indices, weights.sum()), moe.experts)

    compiled = torch.compile(run_dispatch, fullgraph=True, backend="aot_eager")
    weights = torch.rand(5, 2)
    for indices in (torch.tensor([[0, 1], [2, 3], [1, 0], [3, 2], [0, 3]]),    # every expert busy
                    torch.tensor([[1, 2], [2, 3], [1, 3], [3, 1], [2, 1]])):   # expert 0 idle
        moe.zero_grad(set_to_none=True)
        want = run_dispatch(x, weights, indices)
        want.square().sum().backward()
        want_grads = grads(moe)
        moe.zero_grad(set_to_none=True)
        got = compiled(x, weights, indices)
        got.square().sum().backward()
        close(got.detach(), want.detach(), "compiled output")
        for name, g in grads(moe).items():
            close(g, want_grads[name], f"compiled grad {name}", floor=1.0)
    assert all(not p.grad.any() for p in moe.experts[0].parameters())


def test_a_router_given_no_groups_reports_zero_and_is_left_out_of_the_group_mean():
    torch.manual_seed(0)
    busy, empty = TokenRouter(8, 4, top_k=2), TokenRouter(8, 4, top_k=2)
    net = torch.nn.ModuleList([busy, empty])
    busy(torch.randn(10, 8))
    r = empty(torch.randn(0, 8))
    assert r.aux_loss.item() == 0.0 and empty.last_counts.tolist() == [0.0] * 4
    torch.testing.assert_close(aux_losses(net)["token"], busy.last_aux_loss)


@pytest.mark.parametrize("k", [1, 2])
def test_the_dense_dispatch_that_export_traces_is_the_sparse_one_in_float64(k):
    from opzoo_moe.dispatch import dense_dispatch

    torch.manual_seed(20 + k)
    moe = ImageMoE(16, k).double().eval()
    x = torch.randn(6, 4, 4, 16, dtype=torch.float64)
    routing = moe.router(x)
    with torch.no_grad():
        torch.testing.assert_close(dense_dispatch(x, routing, moe.experts), dispatch(x, routing, moe.experts),
                                   rtol=0, atol=1e-13)



def test_the_dense_dispatch_adds_nothing_of_an_expert_no_group_chose_even_a_non_finite_output():
    from opzoo_moe.dispatch import dense_dispatch

    x = torch.ones(3, 2, dtype=torch.float64)
    routing = Routing(indices=torch.tensor([[0], [0], [0]]),
                      weights=torch.tensor([[0.5], [1.0], [2.0]], dtype=torch.float64), aux_loss=torch.zeros(()))
    experts = [lambda t: 2 * t, lambda t: t * float("inf")]  # expert 1 is never chosen
    out = dense_dispatch(x, routing, experts)
    torch.testing.assert_close(out, torch.tensor([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0]], dtype=torch.float64))
    torch.testing.assert_close(out, dispatch(x, routing, experts))
