"""Issue 71: each export form of opzoo-fourier computes its layer's function (float64), holds no complex tensor, shares
the layer's trained values, and is what opzoo.with_export_forms puts in a model's copy (the model is left as it was)."""

from __future__ import annotations

import pytest
import torch

import opzoo
from opzoo_fourier.fourier_attention import FourierAttention, FourierAttentionExport
from opzoo_fourier.spectral_conv import SpectralConv, SpectralConvExport
from tests.zoo.small_presets import small_overrides

GRIDS = {1: [(8,), (9,)], 2: [(8, 8), (9, 10), (12, 7)], 3: [(8, 8, 8), (9, 10, 12)]}


def _no_complex(module):
    return not any(t.is_complex() for t in [*module.parameters(), *module.buffers()])


@pytest.mark.parametrize("d", [1, 2, 3])
def test_the_spectral_convolutions_form_is_the_layer_in_float64(d):
    torch.manual_seed(d)
    layer = SpectralConv(3, 5, 3, d).double()
    form = layer.export_form()
    assert isinstance(form, SpectralConvExport) and _no_complex(form)
    for sizes in GRIDS[d]:
        if min(sizes[:-1], default=99) < 6 or sizes[-1] // 2 + 1 < 3:
            continue
        x = torch.randn(2, *sizes, 3, dtype=torch.float64)
        torch.testing.assert_close(form(x), layer(x), rtol=0, atol=1e-14)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_fourier_attentions_form_is_the_layer_in_float64(d):
    torch.manual_seed(d)
    layer = FourierAttention(8, n_blocks=2, modes=3).double()
    form = layer.export_form()
    assert isinstance(form, FourierAttentionExport) and _no_complex(form)
    assert form.w1 is layer.w1  # the same trained values, not a copy
    for sizes in GRIDS[d]:
        x = torch.randn(2, *sizes, 8, dtype=torch.float64)
        torch.testing.assert_close(form(x), layer(x), rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", ["fno-3d", "dpot-micro", "nestor-ti"])
def test_with_export_forms_replaces_every_form_in_a_copy_and_computes_the_same(name):
    torch.manual_seed(0)
    model = opzoo.load(name, **small_overrides(name)).double().eval()
    copy = opzoo.with_export_forms(model)
    assert not any(isinstance(m, (SpectralConv, FourierAttention)) for m in copy.modules())
    assert any(isinstance(m, (SpectralConv, FourierAttention)) for m in model.modules())  # the model is untouched
    assert not copy.training
    c = model.config
    sizes = getattr(c, "img_size", None) or [8] * c.spatial_dims
    x = torch.randn(2, *sizes, c.in_timesteps, c.in_channels, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(copy(x), model(x), rtol=0, atol=1e-12)
