"""aot-pot-* presets: registration, parameter counts (meta device), model cards, and the network-level
Must-shows on the real aot-pot-t: equal to the plain-residual network at init, streams separate
after 5 optimizer steps, every H_res doubly stochastic."""

import re

import pytest
import torch

import opzoo
from opzoo_aot import collect_diagnostics

pytestmark = pytest.mark.skipif(
    "pot" not in opzoo.get_registry().names("backbone")
    or "fourier-attention" not in opzoo.get_registry().names("mixer"),
    reason="needs the core's pot backbone and opzoo-fourier's fourier-attention mixer",
)

PAIRS = {"aot-pot-t": "dpot-ti", "aot-pot-s": "dpot-s", "aot-pot-m": "dpot-m", "aot-pot-l": "dpot-l"}
SPEC_OVERHEAD = {"aot-pot-t": 5.3, "aot-pot-s": 3.9, "aot-pot-m": 2.0, "aot-pot-l": 1.4}  # DESIGN / issue, %


def count_on_meta(name: str, **overrides) -> int:
    with torch.device("meta"):
        model = opzoo.load(name, **overrides)
    return sum(p.numel() for p in model.parameters())


def test_presets_and_alias_are_registered():
    assert opzoo.list_models("aot-pot-*") == ["aot-pot-l", "aot-pot-m", "aot-pot-micro", "aot-pot-s", "aot-pot-t"]
    registry = opzoo.get_registry()
    assert registry.preset("aot-pot-ti").name == "aot-pot-t"
    assert registry.owner("residual", "aot") == "opzoo-aot"


@pytest.mark.parametrize("name", PAIRS)
def test_same_dims_as_dpot_with_sandwich_blocks_and_aot_residuals(name):
    registry = opzoo.get_registry()
    aot, dpot = dict(registry.preset(name).args), dict(registry.preset(PAIRS[name]).args)
    assert registry.preset(name).backbone == "pot"
    assert aot.pop("block") == "sandwich" and aot.pop("residual") == "aot"
    assert aot.pop("residual_args") == {"n": 4, "sinkhorn_iters": 20, "alpha": 0.01}
    for key in ("block", "residual", "residual_args"):
        dpot.pop(key)
    assert aot == dpot


@pytest.mark.parametrize("name", PAIRS)
def test_parameter_counts_are_1_to_6_percent_above_dpot_and_on_the_card(name):
    aot, dpot = count_on_meta(name), count_on_meta(PAIRS[name])
    overhead = 100 * (aot / dpot - 1)
    assert 1.0 <= overhead <= 6.0
    assert overhead == pytest.approx(SPEC_OVERHEAD[name], abs=0.1)
    card = opzoo.get_registry().preset(name).card_template()  # the family's template filled for the row
    assert f"The preset as registered: {aot:,} parameters" in card
    assert f"{overhead:+.2f} % over {PAIRS[name]} ({dpot:,})" in card


@pytest.mark.parametrize("name", PAIRS)
def test_model_card_format(name):
    card = opzoo.get_registry().preset(name).card_template()  # the family's template filled for the row
    front = re.match(r"^---\n(.*?)\n---\n", card, re.S).group(1)
    for key in ("library_name: opzoo", "license:", "tags:", "datasets:", "metrics:"):
        assert key in front
    for section in ("Description", "Architecture", "Parameters", "Training data", "Evaluation",
                    "Intended use and limits", "Citation", "Usage"):
        assert f"\n## {section}\n" in card
    assert "lr" in card.lower() or "learning rate" in card
    assert "1000 epochs with 200 warm-up" in card and "batch 160" in card
    assert "${parameters}" in card and "${name}" in card


def test_card_renders_on_save(tmp_path):
    model = opzoo.load("aot-pot-t", img_size=[16, 16], width=16, mixer_args={"n_blocks": 2, "modes": 2},
                       out_layer_dim=8)
    model.save_pretrained(tmp_path)
    readme = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "# aot-pot-t" in readme and "library_name: opzoo" in readme
    assert f"This model: {sum(p.numel() for p in model.parameters()):,} parameters" in readme
    again = opzoo.load(f"local-dir:{tmp_path}")
    x = torch.randn(1, 16, 16, 10, 4)
    torch.testing.assert_close(again(x), model(x), rtol=0, atol=0)


# ---- the real aot-pot-t ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def aot_pot_t():
    torch.manual_seed(0)
    return opzoo.load("aot-pot-t")


def test_aot_pot_t_equals_the_plain_residual_network_at_init(aot_pot_t):
    plain = opzoo.load("aot-pot-t", residual="plain", residual_args={})
    state = aot_pot_t.state_dict()
    plain.load_state_dict({k: v for k, v in state.items() if k in plain.state_dict()}, strict=True)
    assert len(state) - len(plain.state_dict()) == 8 * 9 + 1  # 9 tensors per AOT sub-layer, plus g
    torch.manual_seed(1)
    x = torch.randn(2, 128, 128, 10, 4)
    with torch.no_grad():
        diff = (aot_pot_t(x) - plain(x)).abs().max().item()
    assert diff <= 1e-5


def final_streams(model, x):
    seen = {}
    handle = model.blocks[-1].register_forward_hook(lambda m, a, out: seen.update(state=out.streams.detach()))
    with torch.no_grad():
        model(x)
    handle.remove()
    return seen["state"]


def spread(state):
    return ((state - state[:, :1]).abs().max() / state.abs().max()).item()


@pytest.fixture(scope="module")
def trained_aot_pot_t():
    """aot-pot-t after 5 Adam steps (lr 1e-3) on random data at 32x32, with its data."""
    torch.manual_seed(2)
    model = opzoo.load("aot-pot-t")
    x, target = torch.randn(2, 32, 32, 10, 4), torch.randn(2, 32, 32, 1, 4)
    before = spread(final_streams(model, x))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), target).backward()
        opt.step()
    return model, x, before


def test_aot_pot_t_streams_separate_after_five_steps(trained_aot_pot_t):
    model, x, before = trained_aot_pot_t
    assert before < 1e-5
    assert spread(final_streams(model, x)) > 1e-3


def assert_doubly_stochastic(H):
    assert H.dtype == torch.float64  # the coefficients are float64 on CPU
    assert torch.isfinite(H).all() and (H >= 0).all()
    assert (H.sum(-1) - 1).abs().max() <= 1e-6
    assert (H.sum(-2) - 1).abs().max() <= 1e-3


@pytest.mark.parametrize("scale", [1.0, 1e6, 1e-6])
def test_aot_pot_t_every_H_res_after_training_and_for_scaled_inputs(trained_aot_pot_t, scale):
    model, x, _ = trained_aot_pot_t
    diag = collect_diagnostics(model, x * scale)
    assert [layer.index for layer in diag.layers] == list(range(8))
    assert_doubly_stochastic(diag.H_res)
    assert torch.isfinite(diag.h_pre).all() and torch.isfinite(diag.h_post).all()


def test_aot_pot_t_every_H_res_under_bf16_autocast(trained_aot_pot_t):
    model, x, _ = trained_aot_pot_t
    with torch.autocast("cpu", dtype=torch.bfloat16):
        diag = collect_diagnostics(model, x)
    assert_doubly_stochastic(diag.H_res)
