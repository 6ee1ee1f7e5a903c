"""The AOT residual against DESIGN §6.3 (float64 references of the equations): equations,
initialization, stream adapter, training, float32 and bf16 accuracy, gradcheck, compile, errors."""

import copy
import math

import pytest
import torch

import opzoo
from opzoo_aot import AOTResidual, AOTState, AOTStreams, collect_diagnostics, equations

from .aot_reference import aot_coefficients, aot_forward

U32 = 2.0**-24  # float32 unit roundoff


def randomize(module: torch.nn.Module, seed: int = 0, scale: float = 1.0) -> None:
    """Give every parameter a random value, so no equation is hidden by the zero/identity init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def linear_branch(dim: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(dim, dim, generator=g) / math.sqrt(dim)
    return lambda u: torch.tanh(u @ w)


# ---- equations ------------------------------------------------------------------------------
def test_coefficients_match_the_equations_with_loops():
    torch.manual_seed(0)
    res = AOTResidual(6, index=1, n=3, sinkhorn_iters=5)
    randomize(res, seed=3, scale=0.5)
    state = torch.randn(2, 3, 4, 5, 6)  # [B, n, X, Y, D]
    h_pre, h_post, H_res = res.coefficients(AOTState.of(state))
    ref_pre, ref_post, ref_res = aot_coefficients(res, state)
    torch.testing.assert_close(h_pre.double(), ref_pre, rtol=0, atol=1e-6)
    torch.testing.assert_close(h_post.double(), ref_post, rtol=0, atol=1e-6)
    torch.testing.assert_close(H_res.double(), ref_res, rtol=0, atol=1e-6)


@pytest.mark.parametrize("spatial", [(7,), (4, 5), (2, 3, 4)])
def test_forward_matches_the_equations_with_loops(spatial):
    torch.manual_seed(1)
    res = AOTResidual(5, index=2, n=4, sinkhorn_iters=20)
    randomize(res, seed=4, scale=0.3)
    state = torch.randn(2, 4, *spatial, 5)
    branch = linear_branch(5)
    out = res(AOTState.of(state), branch)
    assert isinstance(out, AOTState) and out.streams.shape == state.shape
    torch.testing.assert_close(out.streams.double(), aot_forward(res, state, branch), rtol=0, atol=2e-5)
    # the carried mean is the mean of the updated streams
    torch.testing.assert_close(out.pooled, equations.pool(out.streams), rtol=0, atol=1e-6)


def test_initialization_values():
    res = AOTResidual(8, index=6, n=4)
    p = dict(res.named_parameters())
    assert set(p) == {"phi_pre", "phi_post", "phi_res", "b_pre", "b_post", "b_res",
                      "alpha_pre", "alpha_post", "alpha_res"}
    assert p["phi_pre"].shape == (32, 4) and p["phi_post"].shape == (32, 4) and p["phi_res"].shape == (32, 16)
    for name in ("phi_pre", "phi_post", "phi_res", "b_post"):
        assert torch.count_nonzero(p[name]) == 0, name
    for name in ("alpha_pre", "alpha_post", "alpha_res"):
        assert p[name].shape == (1,) and p[name].item() == pytest.approx(0.01)  # [1], not 0-dim: FSDP2 shards it
    torch.testing.assert_close(p["b_res"].detach(), 4 * torch.eye(4))
    torch.testing.assert_close(p["b_pre"].detach(), torch.tensor([-4.0, -4.0, 4.0, -4.0]))  # 6 mod 4 = 2

    h_pre, h_post, H_res = res.coefficients(AOTState.of(torch.randn(3, 4, 5, 5, 8)))
    sig = lambda v: 1 / (1 + math.exp(-v))
    preferred = sig(4) / (sig(4) + 3 * sig(-4))
    f64 = dict(dtype=torch.float64)
    torch.testing.assert_close(h_pre[:, 2], torch.full((3,), preferred, **f64), rtol=0, atol=1e-12)
    torch.testing.assert_close(h_post, torch.ones(3, 4, **f64), rtol=0, atol=0)
    # H_res ≈ 0.95·I: exp(4·I) is already doubly stochastic up to scale, rows (e^4 + 3)
    diag = math.exp(4) / (math.exp(4) + 3)
    expected = torch.full((4, 4), (1 - diag) / 3, **f64).fill_diagonal_(diag)
    torch.testing.assert_close(H_res, expected.expand(3, 4, 4), rtol=0, atol=1e-12)


@pytest.mark.parametrize("index", range(9))
def test_preferred_stream_is_index_mod_n(index):
    b_pre = AOTResidual(4, index=index, n=3).b_pre.detach()
    assert b_pre.argmax().item() == index % 3 and (b_pre == -4).sum() == 2


# ---- stream adapter -------------------------------------------------------------------------
def test_stream_adapter_expand_and_gated_readout():
    adapter = AOTResidual.stream_adapter(6, n=3, sinkhorn_iters=20)
    assert isinstance(adapter, AOTStreams) and isinstance(adapter, opzoo.StreamAdapter)
    x = torch.randn(2, 4, 5, 6)
    state = adapter.expand(x)
    assert isinstance(state, AOTState) and state.streams.shape == (2, 3, 4, 5, 6)
    for i in range(3):
        torch.testing.assert_close(state.streams[:, i], x, rtol=0, atol=0)
    torch.testing.assert_close(state.pooled, x.mean(dim=(1, 2)).unsqueeze(1).expand(2, 3, 6))
    torch.testing.assert_close(adapter.collapse(state), x)  # g = 0: uniform
    with torch.no_grad():
        adapter.g.copy_(torch.tensor([0.0, math.log(2), math.log(5)]))  # softmax = [1, 2, 5] / 8
    streams = torch.randn(2, 3, 4, 5, 6)
    expected = (streams[:, 0] + 2 * streams[:, 1] + 5 * streams[:, 2]) / 8
    torch.testing.assert_close(adapter.collapse(AOTState.of(streams)), expected)


# ---- the function at initialization and after training ---------------------------------------
def simple_pair(**residual_args):
    """A simple-backbone network with AOT residuals and the same network with plain residuals."""
    args = dict(in_channels=2, out_channels=2, in_timesteps=3, width=16, depth=2)
    torch.manual_seed(0)
    aot = opzoo.create_model("simple", residual="aot", residual_args=residual_args, **args)
    plain = opzoo.create_model("simple", residual="plain", **args)
    shared = {k: v for k, v in aot.state_dict().items() if k in plain.state_dict()}
    plain.load_state_dict(shared, strict=True)
    return aot, plain


@pytest.mark.parametrize("scale", [1.0, 100.0, 1e-3])
def test_equals_plain_residual_network_at_init(scale):
    """At init the AOT network is the plain-residual network with the same sub-layers, for any
    input: the float32 AOT network against the plain network in float64. Tolerance: at init
    H_res X = X exactly only in exact arithmetic (rows sum to 1 within a few u), and the float32
    layers round at u = 6e-8 relative: 1e-5 of the output's scale (measured 2-4e-7)."""
    aot, plain = simple_pair()
    x = torch.randn(3, 8, 8, 3, 2) * scale
    reference = plain.double()(x.double())
    out = aot(x)
    assert (out.double() - reference).abs().max() <= 1e-5 * reference.abs().max()


def last_streams(model, x):
    seen = {}
    handle = model.blocks[-1].register_forward_hook(lambda m, a, out: seen.update(state=out.streams.detach()))
    model(x)
    handle.remove()
    return seen["state"]


def stream_spread(state):
    """Largest difference between a stream and stream 0, relative to the state's size."""
    return ((state - state[:, :1]).abs().max() / state.abs().max()).item()


def train_steps(model, steps=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, target = torch.randn(4, 8, 8, 3, 2, generator=g), torch.randn(4, 8, 8, 1, 2, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), target).backward()
        opt.step()
    return x


def test_streams_separate_after_five_steps():
    aot, _ = simple_pair()
    x = torch.randn(4, 8, 8, 3, 2)
    assert stream_spread(last_streams(aot, x)) < 1e-5  # copies at init
    train_steps(aot)
    assert stream_spread(last_streams(aot, x)) > 1e-3


def test_symmetric_biases_keep_the_streams_copies():
    """Why b_pre has a preferred stream: with b_pre symmetric, training keeps the streams identical."""
    aot, _ = simple_pair(pre_bias=0.0)
    x = train_steps(aot)
    assert stream_spread(last_streams(aot, x)) < 1e-5


# ---- H_res numerics in a network --------------------------------------------------------------
def assert_doubly_stochastic(H):
    assert H.dtype == torch.float64  # the coefficients are float64 on CPU (float32 at least anywhere)
    assert torch.isfinite(H).all() and (H >= 0).all()
    assert (H.sum(-1) - 1).abs().max() <= 1e-6
    assert (H.sum(-2) - 1).abs().max() <= 1e-3


def perturbed_aot_model():
    """An AOT simple network whose φ make H̃_res input dependent (logit deviations of std ≈ 0.03)."""
    aot, _ = simple_pair()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in aot.named_parameters():
            if ".phi_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 3.0 / math.sqrt(p.shape[0]))
    return aot


@pytest.mark.parametrize("scale", [1.0, 1e6, 1e-6])
def test_every_H_res_is_doubly_stochastic_for_scaled_inputs(scale):
    aot = perturbed_aot_model()
    x = torch.randn(4, 8, 8, 3, 2) * scale
    diag = collect_diagnostics(aot, x)
    assert len(diag.layers) == 4
    assert_doubly_stochastic(diag.H_res)
    assert diag.H_res.std(dim=1).max() > 1e-4 or scale == 1e-6  # the inputs really move H_res
    state = aot.streams.expand(torch.randn(2, 8, 8, 16) * scale)  # the residual alone, state scaled
    for _, residual in [(n, m) for n, m in aot.named_modules() if isinstance(m, AOTResidual)]:
        assert_doubly_stochastic(residual.coefficients(state)[2])
        out = residual(state, lambda u: u)
        assert torch.isfinite(out.streams).all() and torch.isfinite(out.pooled).all()


def test_bf16_autocast_is_finite_and_close_to_float64():
    """Under bf16 autocast the coefficients stay float64 on CPU (H_res doubly stochastic to float32
    accuracy) and the network output is close to the float64 network. Tolerances: the branches'
    matmuls and convolutions take bf16 operands (u = 2^-8 = 3.9e-3 relative), and a few such
    roundings accumulate over the two blocks: 3e-2 of the output's scale (measured 8.7e-3); H_res
    moves only through the bf16 rounding of its input (the streams' mean, of bf16 branch outputs,
    3.9e-3 relative) times the small logit weights α·φ (logit deviations ~0.03): 1e-4 (measured
    5.4e-6)."""
    aot = perturbed_aot_model()
    x = torch.randn(4, 8, 8, 3, 2)
    reference = copy.deepcopy(aot).double()(x.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        diag = collect_diagnostics(aot, x)
        out = aot(x)
    assert torch.isfinite(out.float()).all()
    assert_doubly_stochastic(diag.H_res)
    torch.testing.assert_close(diag.H_res, collect_diagnostics(aot, x).H_res, rtol=0, atol=1e-4)
    assert (out.double() - reference).abs().max() <= 3e-2 * reference.abs().max()


def test_every_H_res_is_doubly_stochastic_after_training():
    aot, _ = simple_pair()
    x = train_steps(aot)
    assert_doubly_stochastic(collect_diagnostics(aot, x).H_res)


def test_gradients_reach_every_aot_parameter():
    aot = perturbed_aot_model()
    aot(torch.randn(2, 8, 8, 3, 2)).square().mean().backward()
    # the first sub-layer sees n copies, so u = Σ h_pre[i]·x = x whatever h_pre: no gradient to h_pre there
    first_pre = {"blocks.0.residual1." + k for k in ("phi_pre", "b_pre", "alpha_pre")}
    for name, p in aot.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        if name in first_pre:
            assert p.grad.abs().max() < 1e-6, name
        elif "residual" in name or name == "streams.g":
            assert p.grad.abs().max() > 0, name


# ---- save / load --------------------------------------------------------------------------
def test_save_and_load_round_trip(tmp_path):
    aot = perturbed_aot_model()
    aot.save_pretrained(tmp_path / "repo")
    loaded = opzoo.load(f"local-dir:{tmp_path / 'repo'}")
    x = torch.randn(2, 8, 8, 3, 2)
    torch.testing.assert_close(loaded(x), aot(x), rtol=0, atol=0)
    assert isinstance(loaded.blocks[0].residual1, AOTResidual)


def test_builds_on_meta_device():
    with torch.device("meta"):
        res = AOTResidual(1024, index=3)
    assert res.phi_res.is_meta and res.phi_res.shape == (4096, 16)


# ---- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, match",
    [
        (dict(nn=4), r"unknown field\(s\) 'nn'.*known fields: alpha, compile, eps, n, pre_bias, res_bias, sinkhorn_iters"),
        (dict(n=0), r"residual_args\.n: expected an integer >= 1, got 0"),
        (dict(n=2.5), r"residual_args\.n"),
        (dict(sinkhorn_iters=0), r"residual_args\.sinkhorn_iters"),
        (dict(alpha="big"), r"residual_args\.alpha: expected float, got 'big'"),
        (dict(eps=0.0), r"residual_args\.eps: expected a positive number"),
        (dict(compile="yes"), r"residual_args\.compile: expected"),
    ],
)
def test_bad_residual_args_are_config_errors(args, match):
    with pytest.raises(opzoo.ConfigError, match=match):
        opzoo.create_model("simple", residual="aot", residual_args=args, in_channels=1, out_channels=1,
                           in_timesteps=2, width=8)


def test_bad_state_and_branch_shapes_name_the_shapes():
    res = AOTResidual(8, index=0, n=4)
    before = {k: v.clone() for k, v in res.state_dict().items()}
    with pytest.raises(ValueError, match=r"AOTState with streams \[B, 4, \*S, 8\].*got AOTState \[2, 3, 5, 8\]"):
        res(AOTState.of(torch.randn(2, 3, 5, 8)), lambda u: u)
    with pytest.raises(ValueError, match=r"got Tensor \[2, 4, 5, 8\]"):
        res(torch.randn(2, 4, 5, 8), lambda u: u)
    with pytest.raises(ValueError, match=r"branch must map \[2, 5, 8\] to the same shape, got \[2, 5, 4\]"):
        res(AOTState.of(torch.randn(2, 4, 5, 8)), lambda u: u[..., :4])
    with pytest.raises(ValueError, match=r"expand expects \[B, \*S, 8\], got \[2, 5, 7\]"):
        AOTStreams(8).expand(torch.randn(2, 5, 7))
    for k, v in res.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


# ---- float32 gradients against float64, gradcheck ----------------------------------------------
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


def forward_backward(model, x, run=None):
    """Output and parameter gradients of ``run(x)`` (default ``model(x)``) for a fixed linear loss."""
    model.zero_grad(set_to_none=True)
    out = (model if run is None else run)(x)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    return out.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


# Gradient tolerance relative to each tensor's own scale (max |g|). Why 1e-5: with the streams
# close to one another the gradients of H_res, h_pre and the readout are each a small difference
# of large, nearly equal dot products with the streams (the common part cancels because rows of
# H_res and the weights sum to 1). The entries are up to ~100x the result (κ ≈ 100, read off the
# float64 run), so rounding them once to float32 (u = 6e-8, unavoidable) costs ~100·u = 6e-6 of
# the gradient's scale; 1e-5 leaves no room for a reduction over the S·D features that is less
# accurate than float32 rounding of its result (a plain float32 GEMM gives 4e-4: docs/accuracy.md).
# Gradients that vanish in exact arithmetic (the first sub-layer sees identical streams) are
# float32 noise of the same cancellation: the absolute floor is u·max|g| of the largest gradient.
GRAD_RTOL = 1e-5
# The gate scalars' gradients are sums of B·n (B·n²) terms g·proj of both signs, each carrying the
# error above, and can be ~10-100x smaller than the terms (a second cancellation): 1e-4.
GATE_RTOL = 1e-4


def assert_matches_float64(result, reference):
    """Output and AOT parameter gradients of a float32 run against the same network in float64
    (the layers around the residual are PyTorch's own and sum over all positions in float32)."""
    out_scale = reference[0].abs().max().item()
    torch.testing.assert_close(result[0].double(), reference[0], rtol=0, atol=1e-5 * out_scale)
    largest = max(g.abs().max().item() for g in reference[1].values())
    for name, grad in reference[1].items():
        leaf = name.rsplit(".", 1)[-1]
        if "residual" not in name and name != "streams.g":
            continue
        rtol = GATE_RTOL if leaf in ("alpha_pre", "alpha_post") else GRAD_RTOL
        atol = rtol * grad.abs().max().item() + U32 * largest
        torch.testing.assert_close(result[1][name].double(), grad, rtol=0, atol=atol, msg=lambda m: f"{name}: {m}")


def test_network_gradients_match_float64():
    model, x = aot_network(), torch.randn(2, 8, 8, 3, 2)
    reference = forward_backward(copy.deepcopy(model).double(), x.double())
    assert_matches_float64(forward_backward(model, x), reference)


def test_network_with_many_features_per_stream_matches_float64():
    """The network of docs/accuracy.md: S·D = 65536 features per stream, where a float32 GEMM
    for the stream maps' gradients loses ~4e-4 (the reason for equations.feature_dots)."""
    model, x = aot_network(seed=3, width=64, depth=2), torch.randn(2, 32, 32, 3, 2)
    reference = forward_backward(copy.deepcopy(model).double(), x.double())
    assert_matches_float64(forward_backward(model, x), reference)


def test_residual_gradcheck_float64():
    """The residual (coefficients, aggregation, update and the carried mean) by finite differences,
    in float64, with respect to the streams and every parameter."""
    res = AOTResidual(3, index=1, n=3, sinkhorn_iters=4).double()
    randomize(res, seed=2, scale=0.5)
    w = torch.randn(3, 3, dtype=torch.float64)
    names = [name for name, _ in res.named_parameters()]

    def run(X, *params):
        out = torch.func.functional_call(res, dict(zip(names, params)), (AOTState.of(X), lambda u: torch.tanh(u @ w)))
        return out.streams, out.pooled

    X = torch.randn(2, 3, 2, 2, 3, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_() for p in res.parameters()]
    assert torch.autograd.gradcheck(run, (X, *params))


# ---- torch.compile ----------------------------------------------------------------------------
def assert_compiled_matches_eager(model, x, **compile_args):
    reference = forward_backward(copy.deepcopy(model).double(), x.double())
    eager = forward_backward(model, x)
    compiled = forward_backward(model, x, torch.compile(model, fullgraph=True, **compile_args))
    assert_matches_float64(eager, reference)
    assert_matches_float64(compiled, reference)


class TwoSubLayers(torch.nn.Module):
    """expand -> two AOT sub-layers (tanh-linear branches) -> collapse: ``[B, *S, D] -> [B, *S, D]``."""

    def __init__(self, dim: int = 8, n: int = 4):
        super().__init__()
        self.streams = AOTStreams(dim, n)
        self.residuals = torch.nn.ModuleList(AOTResidual(dim, index=k, n=n) for k in range(2))
        self.branches = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(2))
        randomize(self, seed=3, scale=0.3)

    def forward(self, x):
        state = self.streams.expand(x)
        for residual, linear in zip(self.residuals, self.branches):
            state = residual(state, lambda u, linear=linear: torch.tanh(linear(u)))
        return self.streams.collapse(state)


@pytest.mark.slow
def test_residuals_compile_as_one_graph_and_match_float64():
    """Two sub-layers traced whole by dynamo + AOTAutograd (fullgraph: no graph break anywhere in
    the residual, its state or its hand-written backward), run by aot_eager, against float64;
    eager too, with the same tolerances."""
    torch._dynamo.reset()
    assert_compiled_matches_eager(TwoSubLayers(), torch.randn(2, 6, 5, 8), backend="aot_eager")


@pytest.mark.slow
def test_compile_switch_with_inductor_matches_float64():
    """``compile=True`` (the residual's switch, CUDA's default) with inductor on CPU."""
    torch._dynamo.reset()
    model, x = aot_network(seed=2), torch.randn(2, 8, 8, 3, 2)
    reference = forward_backward(copy.deepcopy(model).double(), x.double())
    for module in model.modules():
        if isinstance(module, AOTResidual):
            module.compile = True
    assert_matches_float64(forward_backward(model, x), reference)


@pytest.mark.slow
def test_network_under_inductor_matches_float64():
    torch._dynamo.reset()
    assert_compiled_matches_eager(aot_network(seed=1), torch.randn(2, 8, 8, 3, 2))
