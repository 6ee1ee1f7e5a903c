"""The POT backbone: official parameter counts, block layouts, any resolution, 3D and 2D->3D."""

import pytest
import torch
import torch.nn.functional as F

import opzoo

from ..zoo.test_pot_time_fold import per_step_embedding

OFFICIAL_COUNTS = {"dpot-ti": 7_534_643, "dpot-s": 30_801_459, "dpot-m": 122_125_875,
                   "dpot-l": 509_018_739, "dpot-h": 1_031_082_099}
SMALL = dict(img_size=[32, 32], patch_size=8, width=32, depth=2, out_layer_dim=8, in_timesteps=3,
             mixer="fourier-attention", mixer_args={"n_blocks": 4, "modes": 32})


@pytest.mark.parametrize("name", sorted(OFFICIAL_COUNTS))
def test_parameter_counts_are_the_official_ones(name):
    with torch.device("meta"):
        model = opzoo.load(name)
    assert sum(p.numel() for p in model.parameters()) == OFFICIAL_COUNTS[name]
    n_blocks = model.config.mixer_args["n_blocks"]
    assert {"dpot-l": 16, "dpot-h": 8}.get(name, n_blocks) == n_blocks


def test_dpot_h_and_l_dims():
    cfg = opzoo.get_registry().preset("dpot-h").args
    assert (cfg["width"], cfg["depth"], cfg["mixer_args"]["n_blocks"], cfg["mlp_ratio"], cfg["out_layer_dim"]) == (2048, 27, 8, 4.0, 128)


def test_presets_point_at_the_official_weights():
    for name, file in [("dpot-ti", "model_Ti.pth"), ("dpot-s", "model_S.pth"), ("dpot-h", "model_H.pth")]:
        src = opzoo.get_registry().preset(name).pretrained
        assert (src.repo_id, src.filename, src.converter) == ("hzk17/DPOT", file, "dpot")


def test_dpot_preset_args_is_dpots_setup_at_given_dims():
    """The helper the preset plugins share: DPOT's setup (DPOT §4 / official configs) at one row of the size
    table with DPOT's Fourier attention (n_blocks = heads, 32 modes), ``overrides`` replacing fields, a fresh
    dict each call, unknown fields rejected."""
    from opzoo_fourier import dpot_preset_args

    assert opzoo.POT_SIZES["S"] == opzoo.PotSize(width=1024, depth=6, heads=8, mlp_ratio=1.0, out_layer_dim=32)
    args = dpot_preset_args("S")
    assert dpot_preset_args("s") == dpot_preset_args(opzoo.PotSize(1024, 6, 8, 1.0, 32)) == args
    assert args == dict(
        in_channels=4, out_channels=4, in_timesteps=10, out_timesteps=1, spatial_dims=2, img_size=[128, 128],
        patch_size=8, width=1024, depth=6, mlp_ratio=1.0, out_layer_dim=32, n_cls=12, act="gelu",
        time_agg="exp_mlp", normalize=False, block="dpot", mixer="fourier-attention",
        mixer_args={"n_blocks": 8, "modes": 32}, residual="plain", residual_args={},
    )
    assert args == opzoo.get_registry().preset("dpot-s").args
    sandwich = dpot_preset_args("S", block="sandwich", residual="aot", residual_args={"n": 2})
    assert sandwich == {**args, "block": "sandwich", "residual": "aot", "residual_args": {"n": 2}}
    other_mixer = opzoo.pot_preset_args("S", mixer="pointwise-mlp", mixer_args={})
    assert other_mixer == {**args, "mixer": "pointwise-mlp", "mixer_args": {}}
    args["img_size"].append(3)
    args["residual_args"]["n"] = 7
    assert dpot_preset_args("S")["img_size"] == [128, 128]
    assert dpot_preset_args("S")["residual_args"] == {}
    with pytest.raises(opzoo.ConfigError, match="'widht'"):
        dpot_preset_args("Ti", widht=256)
    # the core's helper without mixer= is the old call form: DPOT's network, with a DeprecationWarning
    with pytest.warns(DeprecationWarning, match="pot_preset_args without mixer= gives 'fourier-attention'"):
        assert opzoo.pot_preset_args("S") == dpot_preset_args("S")
    with pytest.warns(DeprecationWarning, match="pot_micro_preset_args without mixer="):
        from opzoo_fourier import dpot_micro_preset_args

        assert opzoo.micro.pot_micro_preset_args(block="sandwich") == dpot_micro_preset_args(block="sandwich")


def test_dpot_block_is_one_residual_around_the_whole_branch():
    torch.manual_seed(0)
    model = opzoo.create_model("pot", **SMALL)
    block = model.blocks[0]
    assert [type(m).__name__ for m in block.children()][-1] == "PlainResidual"
    z = torch.randn(2, 4, 4, 32)
    u = block.norm1(z)
    want = z + block.mlp(block.norm2(block.mixer(u) + u))
    torch.testing.assert_close(block(z), want)


def test_sandwich_block_two_residuals_with_indices():
    torch.manual_seed(0)
    model = opzoo.create_model("pot", block="sandwich", **{**SMALL, "depth": 3})
    idx = [(b.residual1.index, b.residual2.index) for b in model.blocks]
    assert idx == [(0, 1), (2, 3), (4, 5)]
    names = {n.split(".", 2)[2] for n in model.state_dict() if n.startswith("blocks.0.")}
    assert {"norm1.weight", "mixer.w1", "post_norm1.weight", "norm2.weight", "mlp.fc1.weight", "post_norm2.bias"} <= names
    block = model.blocks[1]
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    z = torch.randn(2, 4, 4, 32)
    y = z + block.post_norm1(block.mixer(block.norm1(z)))
    want = y + block.post_norm2(block.mlp(block.norm2(y)))
    torch.testing.assert_close(block(z), want)


def test_any_resolution_64_and_256():
    torch.manual_seed(0)
    model = opzoo.load("dpot-ti", depth=1).eval()
    with torch.no_grad():
        for n in (64, 256):
            assert model(torch.randn(1, n, n, 10, 4)).shape == (1, n, n, 1, 4)
        assert model(torch.randn(1, 64, 96, 10, 4)).shape == (1, 64, 96, 1, 4)
    with pytest.raises(ValueError, match="not divisible by patch_size 8"):
        model(torch.randn(1, 60, 64, 10, 4))
    with pytest.raises(ValueError, match=r"T_in=10, C=4\], got \[1, 64, 64, 9, 4\]"):
        model(torch.randn(1, 64, 64, 9, 4))


def test_position_embedding_is_bilinearly_interpolated():
    model = opzoo.create_model("pot", **SMALL)
    assert model.position_embedding((4, 4)) is model.pos_embed
    want = F.interpolate(model.pos_embed, size=(8, 2), mode="bilinear", align_corners=False)
    torch.testing.assert_close(model.position_embedding((8, 2)), want)
    # a constant embedding stays constant at any size
    with torch.no_grad():
        model.pos_embed.fill_(0.5)
    assert torch.allclose(model.position_embedding((13, 7)), torch.tensor(0.5))


def test_three_dimensional_pot_and_inflation_from_2d():
    torch.manual_seed(0)
    m2 = opzoo.create_model("pot", **SMALL)
    m3 = opzoo.create_model("pot", **{**SMALL, "spatial_dims": 3, "img_size": [32, 32, 16]})
    assert m3.pos_embed.shape == (1, 32, 4, 4, 2)
    assert m3(torch.randn(1, 16, 16, 24, 3, 4)).shape == (1, 16, 16, 24, 1, 4)
    m3.load_inflated_2d(m2.state_dict())
    sd2, sd3 = m2.state_dict(), m3.state_dict()
    for k in ("blocks.0.mixer.w1", "blocks.1.mlp.fc2.weight", "time_agg.w", "cls_head.4.weight"):
        assert torch.equal(sd2[k], sd3[k])
    # on a z-constant field the inflated patch embedding equals the 2D one at every z
    x2 = torch.randn(2, 32, 32, 3, 4)
    x3 = x2.unsqueeze(3).expand(2, 32, 32, 16, 3, 4)
    with torch.no_grad():
        e2 = per_step_embedding(m2, x2)          # [B, 4, 4, T, D]
        e3 = per_step_embedding(m3, x3)          # [B, 4, 4, 2, T, D]
        torch.testing.assert_close(e3, e2.unsqueeze(3).expand_as(e3), rtol=1e-5, atol=1e-5)
    with pytest.raises(opzoo.ConfigError, match="spatial_dims=2"):
        m2.load_inflated_2d(m2.state_dict())


def test_swapped_components_and_bad_config():
    model = opzoo.create_model("pot", mixer="pointwise-mlp", mixer_args={}, **{k: v for k, v in SMALL.items() if k not in ("mixer", "mixer_args")})
    assert model(torch.randn(1, 32, 32, 3, 4)).shape == (1, 32, 32, 1, 4)
    with pytest.raises(opzoo.ConfigError, match="img_size"):
        opzoo.create_model("pot", img_size=[30, 32])
    with pytest.raises(opzoo.UnknownNameError, match="unknown block 'triple'") as err:
        opzoo.create_model("pot", block="triple")
    blocks = sorted(opzoo.get_registry().names("block"))  # the core's layouts plus any plugin's (e.g. nestor)
    assert {"dpot", "sandwich"} <= set(blocks)
    assert str(err.value).endswith(f"Registered: {', '.join(blocks)}.")
    with pytest.raises(opzoo.UnknownNameError):
        opzoo.create_model("pot", **{**SMALL, "residual": "no-such-residual"})


def test_save_and_reload_roundtrip_with_card(tmp_path):
    torch.manual_seed(0)
    model = opzoo.load("dpot-ti", depth=1, width=64, mixer_args={"n_blocks": 4, "modes": 32})
    model.save_pretrained(tmp_path)
    card = (tmp_path / "README.md").read_text()
    assert "library_name: opzoo" in card and "Hao" in card and "bilinear" in card
    again = opzoo.load(f"local-dir:{tmp_path}")
    x = torch.randn(1, 64, 64, 10, 4)
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x))


def test_normalize_option_matches_official_formula():
    torch.manual_seed(0)
    model = opzoo.create_model("pot", normalize=True, **SMALL)
    x = 3 + 2 * torch.randn(2, 32, 32, 3, 4)
    mu, sigma = x.mean(dim=(1, 2, 3), keepdim=True), x.std(dim=(1, 2, 3), keepdim=True) + 1e-6
    with torch.no_grad():
        plain = opzoo.create_model("pot", **SMALL)
        plain.load_state_dict(model.state_dict())
        torch.testing.assert_close(model(x), plain((x - mu) / sigma) * sigma + mu, rtol=1e-5, atol=1e-5)
