"""Block layouts and feed-forward sub-layers of the POT backbone are registry components."""

import json

import pytest
import torch
from torch import nn

import opzoo
from opzoo.errors import UnknownNameError


def test_builtin_components_are_registered_under_their_names():
    registry = opzoo.get_registry()
    assert {"dpot", "sandwich"} <= set(registry.names("block"))
    assert "mlp" in registry.names("feedforward")
    assert registry.owner("block", "sandwich") == "opzoo"


class DoubleMlp(opzoo.FeedForward):
    """Two MLPs in sequence: ``[B, *S, D] -> [B, *S, D]``."""

    def __init__(self, dim, hidden_dim, act="gelu", scale=1.0):
        super().__init__()
        self.scale = scale
        self.a = nn.Linear(dim, hidden_dim)
        self.b = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        return self.scale * self.b(torch.tanh(self.a(x)))


class ThreeSublayerBlock(opzoo.Block):
    """mixer, feed-forward and a second feed-forward, each joined by its own residual."""

    sublayers = 3

    def __init__(self, config, index, gain=1.0):
        super().__init__()
        self.gain = gain
        self.norm = config.make_norm()
        self.mixer = config.make_mixer()
        self.ffn1 = config.make_feedforward()
        self.ffn2 = config.make_feedforward()
        self.residuals = nn.ModuleList(config.make_residual(3 * index + j) for j in range(3))

    def forward(self, state):
        for residual, branch in zip(self.residuals, (self.mixer, self.ffn1, self.ffn2)):
            state = residual(state, lambda z, f=branch: self.gain * f(self.norm(z)))
        return state


@pytest.fixture
def registry_with_components(fresh_plugins):
    registry = opzoo.get_registry()
    registry.register_feedforward("test-double-mlp", DoubleMlp)
    registry.register_block("test-three", ThreeSublayerBlock)
    return registry


TINY = dict(width=16, depth=2, img_size=[16, 16], patch_size=4, in_channels=2, out_channels=2, in_timesteps=3,
            mixer="pointwise-mlp", mixer_args={}, norm_groups=4)


def test_a_registered_feedforward_replaces_the_mlp_from_config_alone(registry_with_components):
    model = opzoo.create_model("pot", **TINY, feedforward="test-double-mlp", feedforward_args={"scale": 0.5},
                               mlp_ratio=2.0)
    ffn = model.blocks[0].mlp
    assert isinstance(ffn, DoubleMlp) and ffn.scale == 0.5 and ffn.a.out_features == 32
    assert model(torch.randn(2, 16, 16, 3, 2)).shape == (2, 16, 16, 1, 2)


def test_a_registered_block_builds_what_the_config_names(registry_with_components):
    model = opzoo.create_model("pot", **TINY, block="test-three", block_args={"gain": 0.5},
                               feedforward="test-double-mlp")
    blocks = list(model.blocks)
    assert all(isinstance(b, ThreeSublayerBlock) and b.gain == 0.5 for b in blocks)
    assert [r.index for b in blocks for r in b.residuals] == list(range(6))
    x = torch.randn(2, 16, 16, 3, 2)
    model(x).square().mean().backward()
    assert all(p.grad is not None for p in blocks[1].ffn2.parameters())


def test_a_plugin_block_saves_and_reloads(registry_with_components, tmp_path):
    model = opzoo.create_model("pot", **TINY, block="test-three", feedforward="test-double-mlp")
    model.save_pretrained(tmp_path / "m")
    again = opzoo.load(str(tmp_path / "m"))
    x = torch.randn(1, 16, 16, 3, 2)
    assert torch.equal(model(x), again(x))
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model_args"]["block"] == "test-three"


def test_an_unknown_block_or_feedforward_names_the_closest(fresh_plugins):
    with pytest.raises(UnknownNameError, match=r"unknown block 'sandwhich'.*sandwich"):
        opzoo.create_model("pot", **TINY, block="sandwhich")
    with pytest.raises(UnknownNameError, match=r"unknown feedforward 'mpl'.*mlp"):
        opzoo.create_model("pot", **TINY, feedforward="mpl")




def test_the_core_mlp_and_init_are_timms_without_importing_timm():
    """opzoo.layers.mlp.Mlp and opzoo.layers.weight_init.trunc_normal_ replace timm's at start-up (timm imports
    torchvision, seconds): same modules, same seeded weights, same output."""
    import timm.layers

    from opzoo.layers.mlp import Mlp
    from opzoo.layers.weight_init import trunc_normal_

    torch.manual_seed(3)
    ours = Mlp(8, hidden_features=16)
    torch.manual_seed(3)
    theirs = timm.layers.Mlp(8, hidden_features=16)
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    a, b = ours.state_dict(), theirs.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    x = torch.randn(2, 5, 8)
    assert torch.equal(ours(x), theirs(x))
    w1, w2 = torch.empty(64, 32), torch.empty(64, 32)
    torch.manual_seed(4)
    trunc_normal_(w1, std=0.02)
    torch.manual_seed(4)
    timm.layers.trunc_normal_(w2, std=0.02)
    assert torch.equal(w1, w2)


def test_import_opzoo_does_not_import_timm_or_torchvision():
    import subprocess
    import sys

    code = ("import sys, opzoo; opzoo.list_models(); "
            "print(sorted(m for m in ('timm', 'torchvision') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
