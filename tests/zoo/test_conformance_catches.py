"""Issue 70: the conformance suite's input checks fail, naming the channel or the parameter, on a network that ignores
an input channel, an output that never responds, a layer that gets no gradient and a sample that depends on its batch.
Each broken network is a tiny DPOT with one hook that breaks it; the suite's own checks are called on it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from . import test_conformance as conformance  # a module: pytest would collect an imported Test class again


class _Broken(conformance.TestDPOT):
    """TestDPOT's tiny model, broken by :meth:`breaks` (not collected: no Test prefix)."""

    def breaks(self, model) -> None:
        raise NotImplementedError

    def tiny_model(self, seed: int = 0, **changes):
        model = super().tiny_model(seed, **changes)
        self.breaks(model)
        return model


class DeafToChannel2(_Broken):
    def breaks(self, model):
        def deaf(module, args):
            x = args[0].clone()
            x[..., 2] = 0
            return (x,)

        model.register_forward_pre_hook(deaf)


class DeafToFrame0(_Broken):
    def breaks(self, model):
        def deaf(module, args):
            x = args[0].clone()
            x[..., 0, :] = 0
            return (x,)

        model.register_forward_pre_hook(deaf)


class SilentOutput1(_Broken):
    def breaks(self, model):
        def silent(module, args, out):
            return torch.cat([out[..., :1], torch.zeros_like(out[..., 1:2]), out[..., 2:]], -1)

        model.register_forward_hook(silent)


class DetachedMixer(_Broken):
    def breaks(self, model):
        model.blocks[0].mixer.register_forward_hook(lambda module, args, out: out.detach())


class BatchMean(_Broken):
    def breaks(self, model):
        model.register_forward_hook(lambda module, args, out: out + out.mean(0, keepdim=True))


def test_a_network_that_ignores_an_input_channel_fails_naming_it():
    with pytest.raises(AssertionError, match=r"dpot: the output does not change when input channel 2 changes \(1 of 4 "
                                             r"channels and 10 frames\): the network ignores it"):
        DeafToChannel2().test_every_input_channel_and_frame_changes_the_output()
    conformance.TestDPOT().test_every_input_channel_and_frame_changes_the_output()  # the intact network passes


def test_a_network_that_ignores_an_input_frame_fails_naming_it():
    with pytest.raises(AssertionError, match=r"dpot: the output does not change when input frame 0 changes"):
        DeafToFrame0().test_every_input_channel_and_frame_changes_the_output()


def test_an_output_channel_that_never_responds_fails_naming_it():
    with pytest.raises(AssertionError, match=r"dpot: output frame 0, channel 1 does not respond to the input"):
        SilentOutput1().test_every_output_channel_responds_to_the_input()


def test_a_layer_that_gets_no_gradient_fails_naming_its_parameter():
    with pytest.raises(AssertionError, match=r"dpot: parameter blocks\.0\.mixer\.w1 gets no gradient from a loss on "
                                             r"the output"):
        DetachedMixer().test_every_trainable_parameter_gets_a_gradient()


def test_a_sample_that_depends_on_its_batch_fails():
    with pytest.raises(AssertionError, match=r"dpot: a sample's output depends on its batch"):
        BatchMean().test_a_sample_does_not_depend_on_the_others_in_its_batch_and_runs_the_same_twice()


def test_an_unused_parameter_is_named():
    class Unused(_Broken):
        def breaks(self, model):
            model.spare = nn.Linear(2, 2)

    with pytest.raises(AssertionError, match=r"parameter spare\.weight gets no gradient"):
        Unused().test_every_trainable_parameter_gets_a_gradient()


def test_a_preset_whose_shipped_weights_no_longer_fit_its_arguments_fails(monkeypatch):
    """Issue 70, item 3: the suite loads every preset of the family whose weights are here (dpot-micro's are in
    opzoo-fourier's package). A preset whose arguments were changed away from its shipped weights fails, naming it."""
    import dataclasses

    from opzoo.registry.registry import get_registry

    registry = get_registry()
    micro = registry.preset("dpot-micro")
    assert micro.pretrained is not None
    refit = dataclasses.replace(micro, name="dpot-micro-refit", args={**micro.args, "width": micro.args.get("width",
                                                                                                     128) * 2})
    monkeypatch.setitem(registry._presets, refit.name, refit)
    suite = conformance.TestDPOT()
    assert "dpot-micro-refit" in suite.presets() and "dpot-micro" in suite.presets()
    with pytest.raises(pytest.fail.Exception, match=r"dpot-micro-refit: its weights are here, but the preset does "
                                                     r"not load them: .*mis-shaped"):
        suite.test_every_preset_with_weights_here_loads_offline_and_runs(monkeypatch)
