import pytest
import torch

import opzoo
from opzoo.errors import RegistryConflictError, UnknownNameError
from opzoo.registry.registry import Registry


def test_list_models_fnmatch_and_aliases():
    reg = Registry()
    for name in ("aot-pot-t", "aot-pot-s", "dpot-s"):
        reg.register_model(name, backbone="simple", aliases=("aot-pot-ti",) if name == "aot-pot-t" else ())
    assert reg.list_models("aot-pot-*") == ["aot-pot-s", "aot-pot-t"]
    assert reg.list_models("*-ti") == ["aot-pot-t"]  # an alias brings in its preset
    assert reg.list_models("aot-pot-*", include_aliases=True) == ["aot-pot-s", "aot-pot-t", "aot-pot-ti"]
    assert reg.preset("aot-pot-ti").name == "aot-pot-t"


def test_unknown_model_lists_closest_names():
    with pytest.raises(UnknownNameError) as info:
        opzoo.load("simple-oq")
    assert "unknown model or backbone 'simple-oq'" in str(info.value)  # load builds a backbone too
    assert "simple-op" in info.value.suggestions


def test_unknown_component_lists_registered():
    with pytest.raises(UnknownNameError, match=r"unknown mixer 'pointwise'.*pointwise-mlp"):
        opzoo.create_model("simple", mixer="pointwise")


def test_same_name_twice_names_both_owners():
    reg = Registry()
    with reg.owned_by("dist-a"):
        reg.register_mixer("m", object)
    with reg.owned_by("dist-b"), pytest.raises(RegistryConflictError, match=r"mixer 'm' is registered by both 'dist-a' and 'dist-b'"):
        reg.register_mixer("m", object)
    with reg.owned_by("dist-a"):
        reg.register_model("p", backbone="simple", aliases=("q",))
    with reg.owned_by("dist-c"), pytest.raises(RegistryConflictError, match=r"model 'q' is registered by both 'dist-a' and 'dist-c'"):
        reg.register_model("q", backbone="simple")


def test_forget_removes_only_that_owner():
    reg = Registry()
    with reg.owned_by("a"):
        reg.register_mixer("ma", object)
        reg.register_model("pa", backbone="simple", aliases=("pa2",))
    with reg.owned_by("b"):
        reg.register_mixer("mb", object)
    reg.forget("a")
    assert reg.names("mixer") == ["mb"] and reg.list_models(include_aliases=True) == []


def test_rollout_and_aux_loss_of_the_builtin_model():
    torch.manual_seed(0)
    model = opzoo.load("simple-op")
    x = torch.randn(2, 8, 8, 4, 1)
    traj = model.rollout(x, steps=3)
    assert traj.shape == (2, 8, 8, 3, 1)
    # step 2 is the model applied to the window shifted by the first prediction
    window = torch.cat([x[..., 1:, :], traj[..., :1, :]], dim=-2)
    torch.testing.assert_close(traj[..., 1:2, :], model(window))
    assert model.aux_loss().item() == 0.0


def test_builtin_simple_model_runs_in_1d_and_3d():
    m1 = opzoo.load("simple-op", spatial_dims=1)
    assert m1(torch.randn(2, 16, 4, 1)).shape == (2, 16, 1, 1)
    m3 = opzoo.load("simple-op", spatial_dims=3, out_timesteps=2)
    assert m3(torch.randn(1, 4, 4, 4, 4, 1)).shape == (1, 4, 4, 4, 2, 1)
    with pytest.raises(ValueError, match=r"expects \[B, S, S, 4, 1\], got \[2, 16, 4, 1\]"):
        opzoo.load("simple-op")(torch.randn(2, 16, 4, 1))
