"""opzoo.model_io.adapt (via opzoo.training.adapt_model): a pretrained model's input/output layers adapted to new data shapes.

The rule (copy what matches, initialize the rest; new inputs start at zero) makes exact statements
checkable: with more channels the adapted model computes the pretrained function on the old
channels, and another resolution computes what the pretrained model computes on the fly.
"""

import pytest
import torch

import opzoo
from opzoo.model_io.adapt import adapt_model

from .conftest import tiny_pot_args

POT_VARIANTS = {
    "dpot": {},
    "aot-sandwich": {"block": "sandwich", "residual": "aot", "residual_args": {"n": 4, "sinkhorn_iters": 20, "alpha": 0.01}},
}


def _pot(variant: str, **extra):
    torch.manual_seed(0)
    return opzoo.create_model("pot", **{**tiny_pot_args(channels=1), **POT_VARIANTS[variant], **extra}).eval()


@pytest.mark.parametrize("variant", POT_VARIANTS)
def test_more_channels_keep_the_pretrained_function_on_the_old_channels(variant):
    model = _pot(variant)
    adapted = adapt_model(model, in_channels=3, out_channels=3).eval()
    assert (adapted.config.in_channels, adapted.config.out_channels) == (3, 3)
    x = torch.randn(2, 16, 16, 4, 3)
    with torch.no_grad():
        new, old = adapted(x), model(x[..., :1])
    assert new.shape == (2, 16, 16, 1, 3)
    # the new channels' input weights are zero, so they do not reach the old output; a convolution over
    # more (zero-weighted) input channels may sum in another order: float32 rounding-level differences
    torch.testing.assert_close(new[..., :1], old, rtol=1e-5, atol=1e-5)
    assert new[..., 1:].abs().sum() > 0  # new output rows: freshly initialized, not zero


@pytest.mark.parametrize("variant", POT_VARIANTS)
def test_other_resolution_resizes_the_positional_embedding(variant):
    model = _pot(variant)
    adapted = adapt_model(model, img_size=[32, 32]).eval()
    assert adapted.pos_embed.shape[-2:] == (8, 8)
    x = torch.randn(2, 32, 32, 4, 1)
    with torch.no_grad():  # the pretrained model interpolates pos_embed on the fly in the same way
        torch.testing.assert_close(adapted(x), model(x), rtol=0, atol=1e-6)


def test_other_t_in_keeps_the_newest_frames_weights():
    model = _pot("dpot")
    longer = adapt_model(model, in_timesteps=6)
    shorter = adapt_model(model, in_timesteps=3)
    w = model.state_dict()["time_agg.w"]
    assert torch.equal(longer.state_dict()["time_agg.w"][2:], w)
    assert torch.equal(shorter.state_dict()["time_agg.w"], w[1:])
    assert longer(torch.randn(1, 16, 16, 6, 1)).shape == (1, 16, 16, 1, 1)


def test_fno_more_channels_keep_the_pretrained_function():
    torch.manual_seed(0)
    model = opzoo.load("fno-2d", width=16, modes=4, in_timesteps=2).eval()
    adapted = adapt_model(model, in_channels=2, out_channels=2).eval()
    x = torch.randn(2, 16, 16, 2, 2)
    with torch.no_grad():
        # float32 sums over a different number of (zero) terms: rounding-level differences only
        torch.testing.assert_close(adapted(x)[..., :1], model(x[..., :1]), rtol=1e-5, atol=1e-6)


def test_nothing_to_change_returns_the_model_and_bad_requests_are_named():
    model = _pot("dpot")
    assert adapt_model(model, in_channels=1, img_size=[16, 16]) is model
    with pytest.raises(opzoo.ConfigError, match="can change only"):
        adapt_model(model, width=64)
    simple = opzoo.load("simple-op")
    with pytest.raises(opzoo.ConfigError, match=r"cannot adapt backbone 'simple'.*SimpleOperator has no io_layout"):
        adapt_model(simple, in_channels=simple.config.in_channels + 1)
