"""Diagnostics: Amax gains on hand-checked matrices, composite products, per-sub-layer recording."""

import pytest
import torch

import opzoo
from opzoo_aot import (
    AOTResidual,
    amax_gains,
    aot_residuals,
    collect_diagnostics,
    composite_products,
    plot_amax_gains,
)
from opzoo_aot.diagnostics import AOTDiagnostics, SubLayerCoefficients

from .aot_reference import aot_coefficients


def test_amax_gains_hand_checked():
    m = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    forward, backward = amax_gains(m)
    assert forward.item() == 3.5  # rows: |1|+|-2| = 3, |3|+|0.5| = 3.5
    assert backward.item() == 4.0  # columns: 1+3 = 4, 2+0.5 = 2.5
    f, b = amax_gains(torch.stack([m, torch.eye(2), torch.full((2, 2), 0.5)]))
    assert f.tolist() == [3.5, 1.0, 1.0] and b.tolist() == [4.0, 1.0, 1.0]


def test_composite_products_order_hand_checked():
    h0 = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    h1 = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    h2 = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    p = composite_products(torch.stack([h0, h1, h2]))
    # P[l] = H2 @ ... @ H_l
    assert p[2].tolist() == [[1.0, 1.0], [0.0, 1.0]]
    assert p[1].tolist() == [[1.0, 1.0], [1.0, 0.0]]  # H2 @ H1
    assert p[0].tolist() == [[1.0, 2.0], [1.0, 0.0]]  # H2 @ H1 @ H0
    forward, backward = amax_gains(p)
    assert forward.tolist() == [3.0, 2.0, 2.0] and backward.tolist() == [2.0, 2.0, 2.0]


def test_composite_products_are_batched():
    torch.manual_seed(0)
    h = torch.rand(3, 5, 4, 4)
    p = composite_products(h)
    torch.testing.assert_close(p[0, 2], h[2, 2] @ h[1, 2] @ h[0, 2])


def test_gains_of_a_hand_made_diagnostics_record():
    # two sub-layers, one sample: H0 rows sum to 1, columns to 0.9 and 1.1
    h0 = torch.tensor([[0.9, 0.1], [0.0, 1.0]])
    h1 = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    layers = [SubLayerCoefficients(k, f"r{k}", torch.full((1, 2), 0.5), torch.ones(1, 2), h[None])
              for k, h in enumerate((h0, h1))]
    diag = AOTDiagnostics(layers)
    single = diag.single_gains()
    assert single.forward.flatten().tolist() == pytest.approx([1.0, 1.0])
    assert single.backward.flatten().tolist() == pytest.approx([1.1, 1.0])
    composite = diag.composite_gains()  # H1 @ H0 = [[0.45, 0.55], [0.45, 0.55]]
    assert composite.forward.flatten().tolist() == pytest.approx([1.0, 1.0])
    assert composite.backward.flatten().tolist() == pytest.approx([1.1, 1.0])
    assert diag.probe_features().shape == (1, 8)
    assert diag.probe_features()[0].tolist() == pytest.approx([0.9, 0.1, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])


def aot_model(depth=2):
    torch.manual_seed(0)
    model = opzoo.create_model("simple", residual="aot", in_channels=1, out_channels=1, in_timesteps=2,
                               width=8, depth=depth)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".phi_" in name:
                p.normal_(0, 0.3)
    return model


def test_collect_records_every_sub_layer_in_order_with_the_values_the_forward_used():
    model = aot_model(depth=3)
    x = torch.randn(5, 6, 6, 2, 1)
    states = {}
    residuals = aot_residuals(model)
    assert [m.index for _, m in residuals] == list(range(6))

    def remember(module, args):
        states[module.index] = args[0].streams.clone()

    handles = [m.register_forward_pre_hook(remember) for _, m in residuals]
    diag = collect_diagnostics(model, x)
    for h in handles:
        h.remove()
    assert [layer.index for layer in diag.layers] == list(range(6))
    assert diag.layers[1].name == "blocks.0.residual2"
    assert diag.H_res.shape == (6, 5, 4, 4) and diag.h_pre.shape == (6, 5, 4) and diag.h_post.shape == (6, 5, 4)
    for k in (0, 3, 5):
        ref_pre, ref_post, ref_res = aot_coefficients(residuals[k][1], states[k])
        torch.testing.assert_close(diag.layers[k].h_pre.double(), ref_pre, rtol=0, atol=1e-6)
        torch.testing.assert_close(diag.layers[k].h_post.double(), ref_post, rtol=0, atol=1e-6)
        torch.testing.assert_close(diag.layers[k].H_res.double(), ref_res, rtol=0, atol=1e-6)
    assert diag.probe_features().shape == (5, 6 * 16)
    torch.testing.assert_close(diag.probe_features()[2, 16:32], diag.H_res[1, 2].flatten())
    # the forward gain of a Sinkhorn output is 1 (rows exact), the backward gain close to 1
    single, composite = diag.single_gains(), diag.composite_gains()
    assert (single.forward - 1).abs().max() < 1e-6 and (single.backward - 1).abs().max() < 1e-2
    assert (composite.forward - 1).abs().max() < 1e-5 and composite.backward.shape == (6, 5)


def test_collect_leaves_no_hooks_and_does_not_need_grad():
    model = aot_model()
    collect_diagnostics(model, torch.randn(1, 6, 6, 2, 1))
    assert all(not m._forward_pre_hooks for m in model.modules() if isinstance(m, AOTResidual))


def test_collect_on_a_model_without_aot_residuals_is_an_error():
    plain = opzoo.create_model("simple", in_channels=1, out_channels=1, in_timesteps=2, width=8)
    with pytest.raises(ValueError, match="has no AOT residual"):
        collect_diagnostics(plain, torch.randn(1, 6, 6, 2, 1))


def test_plot_writes_a_png(tmp_path):
    diag = collect_diagnostics(aot_model(), torch.randn(2, 6, 6, 2, 1))
    path = plot_amax_gains(diag, tmp_path / "gains.png", title="simple-aot")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
