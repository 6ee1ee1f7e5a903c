"""timm's model API on the core's backbones (issue 37): features and head, per-block latents, gradient
checkpointing; the same checks run over every preset in tests/zoo/test_every_preset.py."""

import pytest
import torch

import opzoo


@pytest.fixture
def pot():
    torch.manual_seed(0)
    return opzoo.create_model("pot", img_size=[16, 16], patch_size=4, width=32, depth=3, out_layer_dim=8,
                              in_timesteps=3, in_channels=2, out_channels=2, normalize=True).eval()


def test_intermediates_are_the_latents_after_each_block(pot):
    x = torch.randn(2, 16, 16, 3, 2)
    with torch.no_grad():
        z, kept = pot.forward_intermediates(x)
        # by hand: standardize, embed, run the blocks one by one
        mu, sigma = x.mean(dim=(1, 2, 3), keepdim=True), x.std(dim=(1, 2, 3), keepdim=True) + 1e-6
        state = pot.embed_aggregated((x - mu) / sigma)
        by_hand = []
        for block in pot.blocks:
            state = block(state)
            by_hand.append(state)
        assert len(kept) == 3 and all(torch.equal(a, b) for a, b in zip(kept, by_hand))
        assert torch.equal(z, by_hand[-1]) and z.shape == (2, 4, 4, 32)
        firsts = pot.forward_intermediates(x, indices=[0, -1], intermediates_only=True)
        assert torch.equal(firsts[0], by_hand[0]) and torch.equal(firsts[1], by_hand[2])
        assert torch.equal(pot.forward_intermediates(x, indices=2, intermediates_only=True)[0], by_hand[1])
    for bad in (0, 4, [3], [-4]):
        with pytest.raises(opzoo.ConfigError, match="indices"):
            pot.forward_intermediates(x, indices=bad)


def test_a_standardizing_head_needs_the_input(pot):
    x = torch.randn(2, 16, 16, 3, 2)
    with torch.no_grad():
        assert torch.equal(pot.forward_head(pot.forward_features(x), x), pot(x))
        with pytest.raises(opzoo.ConfigError, match=r"forward_head\(features, x\) needs the input x"):
            pot.forward_head(pot.forward_features(x))
        plain = opzoo.create_model("simple").eval()
        y = torch.randn(1, 8, 8, plain.config.in_timesteps, plain.config.in_channels)
        assert torch.equal(plain.forward_head(plain.forward_features(y)), plain(y))


def test_grad_checkpointing_keeps_loss_and_gradients_and_is_refused_where_not_implemented(pot):
    x, y = torch.randn(2, 16, 16, 3, 2), torch.randn(2, 16, 16, 1, 2)
    pot.train()

    def step():
        loss = torch.nn.functional.mse_loss(pot(x), y)
        return loss, torch.autograd.grad(loss, list(pot.parameters()), allow_unused=True)  # cls_head: unused

    loss, grads = step()
    pot.set_grad_checkpointing(True)
    loss2, grads2 = step()
    assert torch.equal(loss, loss2)
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(grads, grads2))

    class NoBlocks(opzoo.Backbone):
        config_class = opzoo.ModelConfig

        def forward(self, x):
            return x

    with pytest.raises(opzoo.ConfigError, match="NoBlocks does not implement gradient checkpointing"):
        NoBlocks(opzoo.ModelConfig()).set_grad_checkpointing(True)


def test_checkpoint_path_and_pretrained_cfg_overlay_with_timms_meaning(tmp_path):
    torch.manual_seed(3)
    trained = opzoo.load("simple-op")
    trained.save_pretrained(tmp_path / "repo")
    weights = tmp_path / "repo" / "model.safetensors"
    same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))  # noqa: E731
    # checkpoint_path: a local weights file for the preset, loaded strictly, eval mode as a pretrained load
    loaded = opzoo.load("simple-op", checkpoint_path=weights)
    assert same(loaded, trained) and not loaded.training
    # the overlay: where the weights are (a directory for a preset that publishes none) and pretrained_cfg facts
    overlaid = opzoo.load("simple-op", pretrained=True,
                          pretrained_cfg_overlay={"directory": str(tmp_path / "repo"), "datasets": ["mine"]})
    assert same(overlaid, trained) and overlaid.pretrained_cfg["datasets"] == ["mine"]
    assert opzoo.get_registry().preset("simple-op").pretrained is None  # the registry is untouched
    assert same(opzoo.load("simple-op", pretrained_cfg_overlay={"file": str(weights)}), trained)
    # pretrained=True with checkpoint_path: the file's weights, as timm loads them (issue 74: it was refused)
    assert same(opzoo.load("simple-op", checkpoint_path=weights, pretrained=True), trained)
    for kwargs, match in [
        (dict(pretrained_cfg_overlay={"nope": 1}), "unknown field.*'nope'"),
        (dict(pretrained_cfg_overlay={"revision": "v1"}), "publishes no weights"),
        (dict(pretrained_cfg_overlay={"file": str(weights)}, checkpoint_path=weights), "give one"),
        (dict(checkpoint_path=tmp_path / "repo" / "config.json"), "not a .safetensors file"),
    ]:
        with pytest.raises(opzoo.ConfigError, match=match):
            opzoo.load("simple-op", **kwargs)
    with pytest.raises(opzoo.HubError, match="is not a file"):
        opzoo.load("simple-op", checkpoint_path=tmp_path / "missing.safetensors")
    with pytest.raises(opzoo.ConfigError, match="apply to presets"):
        opzoo.load(f"local-dir:{tmp_path / 'repo'}", checkpoint_path=weights)
