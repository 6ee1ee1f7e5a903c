"""The morph-* presets: sizes, loading from the Hub cache with the tensor check, the offline refusal, `opzoo verify`
and `opzoo convert`, the converter's refusals (a pickle is never run), the physical-field wrapper for 1-D, 2-D and 3-D
data, and the README's fine-tuning path on a 1-D and a 2-D file."""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants

import opzoo
from opzoo.cli import main
from opzoo_morph.converter import convert_morph, upstream_name
from opzoo_morph.family import MORPH

from ..hub_cache import COMMIT, place_in_hf_cache, record_pushes

DATA = Path(__file__).parent / "data"
REPO = "mahindrautela/MORPH"
TI_FILE = "models/FM/morph-Ti-FM-max_ar1_ep225.pth"
# the recorded upstream checkpoint's sizes (tests/morph/record_reference.py)
SMALL = {"dim": 32, "depth": 2, "heads": 4, "heads_xa": 4, "mlp_dim": 48, "conv_filters": 16, "patch_size": 4,
         "max_ar": 3, "max_patches": 64}


# upstream's ViT3DRegression at each file's sizes (config/argument_parser.py MORPH_MODELS, the FM's patch 8, 4096
# patches, 3 fields of 3 components, max_ar 1 or 16), counted by its own code at a16d5c4 on the meta device
UPSTREAM_PARAMS = {"morph-ti": 9_864_408, "morph-s": 32_829_656, "morph-m": 125_602_008, "morph-l": 483_293_400}


def test_each_rows_count_is_upstreams():
    """The table's counts are upstream's (the conformance suite builds each preset and checks it has its row's)."""
    assert {v.name: v["params"] for v in MORPH.variants} == UPSTREAM_PARAMS
    assert abs(UPSTREAM_PARAMS["morph-l"] - 480e6) < 5e6  # upstream's note: "Large (with AR1:16 ~480M)"


def use_cache(monkeypatch, cache: Path, checkpoint: Path, name: str = TI_FILE) -> None:
    place_in_hf_cache(cache, REPO, {name: checkpoint})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_offline_load_is_one_line_naming_the_file_and_the_download_command(monkeypatch, tmp_path):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(opzoo.HubError) as e:
        opzoo.load("morph-ti", pretrained=True)
    msg = str(e.value)
    assert "\n" not in msg and f"hf download {REPO} {TI_FILE}" in msg


def test_load_from_the_hub_cache_converts_checks_and_matches_opzoo_convert(monkeypatch, tmp_path):
    use_cache(monkeypatch, tmp_path / "hub", DATA / "morph-small-slice.pth")
    model = opzoo.load("morph-ti", pretrained=True, **SMALL)
    assert not model.training and model.preset_name == "morph-ti"
    assert model.pretrained_cfg["weights_commit"] == COMMIT  # the file "main" named when it was read
    assert main(["convert", "morph", str(DATA / "morph-small-slice.pth"), str(tmp_path / "repo"), "--option", "heads=4",
                 "heads_xa=4"]) == 0
    again = opzoo.load(str(tmp_path / "repo"))
    x = torch.randn(2, 16, 16, 1, 1)
    with torch.no_grad():
        assert torch.equal(model(x), again(x))
    # the preset's own sizes are not the file's: refused, saying which overrides load it
    with pytest.raises(opzoo.CheckFailed, match=r"another MORPH network \(.*dim: file 32, model 256.*opzoo.load\(\.\.\., "
                                                r"conv_filters=16, dim=32"):
        opzoo.load("morph-ti", pretrained=True)


def test_verify_runs_the_tensor_check_on_the_cached_file(monkeypatch, tmp_path, capsys):
    use_cache(monkeypatch, tmp_path / "hub", DATA / "morph-small-slice.pth")
    assert main(["verify", "morph-ti", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [r["check"] for r in rows if r["status"] == "FAILED"] == ["weights fit the preset",
                                                                    "the file's network is the preset's"]
    assert rows[0]["repo"] == f"hf-hub:{REPO}"


def upstream_checkpoint(model: torch.nn.Module, path: Path, prefix: str = "module.", **extra) -> Path:
    """``model``'s weights in upstream's checkpoint format."""
    sd = {prefix + upstream_name(k): v for k, v in model.state_dict().items()}
    torch.save({"epoch": 1, "model_state_dict": sd, **extra}, path)
    return path


@pytest.mark.parametrize("variant", MORPH.variants, ids=lambda v: v.name)
def test_each_published_files_tensors_convert_to_its_own_preset(variant):
    """The sizes the converter reads from a file of each preset's shapes (meta tensors: no 2 GB file) are the
    preset's, so ``opzoo convert morph`` names it; the L file's 16-frame table is interpolated in time, as upstream's
    pretraining builds the L size."""
    from opzoo_morph.converter import model_args

    with torch.device("meta"):
        model = opzoo.load(variant.name)
    args = model_args(model.state_dict(), variant.name)
    assert args == {k: getattr(model.config, k) for k in args}
    assert opzoo.get_registry().matching_preset("morph", args).name == variant.name
    assert args["time_positions"] == ("interpolate" if variant.name == "morph-l" else "slice")


def test_converter_reads_prefixed_and_plain_names_and_refuses_the_rest(tmp_path):
    torch.manual_seed(0)
    model = opzoo.create_model("morph", **SMALL)
    plain = convert_morph(upstream_checkpoint(model, tmp_path / "plain.pth", prefix=""), heads=4, heads_xa=4)
    prefixed = convert_morph(upstream_checkpoint(model, tmp_path / "prefixed.pth"), heads=4, heads_xa=4)
    assert plain.state_dict.keys() == prefixed.state_dict.keys() == model.state_dict().keys()
    assert plain.model_args == {**{k: getattr(model.config, k) for k in plain.model_args}}
    sd = {upstream_name(k): v for k, v in model.state_dict().items()}
    cases = {
        "mixed prefix": ({"model_state_dict": {**{"module." + k: v for k, v in list(sd.items())[:3]},
                                               **dict(list(sd.items())[3:])}}, "some tensor names have the 'module.'"),
        "lora": ({"model_state_dict": {**sd, "transformer_blocks.0.mlp.0.A": torch.zeros(2, 32)}},
                 "LoRA tensors"),
        "foreign": ({"model_state_dict": {**sd, "extra.weight": torch.zeros(1)}}, "not MORPH's ViT3DRegression"),
        "no state": ({"model": sd}, "expected a dict with 'model_state_dict'"),
        "missing": ({"model_state_dict": {k: v for k, v in sd.items() if "projection" not in k}},
                    "'net.embed.project.weight' is missing"),
    }
    for name, (payload, words) in cases.items():
        path = tmp_path / f"{name}.pth"
        torch.save(payload, path)
        with pytest.raises(opzoo.CheckpointError, match=words):
            convert_morph(path, heads=4, heads_xa=4)
    with pytest.raises(opzoo.CheckpointError, match="pass heads=N"):  # width 32 is no size of upstream's table
        convert_morph(tmp_path / "plain.pth")


class Planted:
    """A pickled object whose unpickling would write ``target``."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (Path.write_text, (self.target, "ran"))


def test_a_pth_holding_a_pickled_object_is_refused_without_running_it(tmp_path):
    target = tmp_path / "executed"
    path = tmp_path / "evil.pth"
    torch.save({"model_state_dict": {"pos_encoding.pos_embedding": torch.zeros(1)}, "extra": Planted(target)}, path)
    assert zipfile.is_zipfile(path) and not target.exists()
    with pytest.raises(opzoo.CheckpointError, match="that a weights-only load refuses: opzoo reads tensors"):
        convert_morph(path)
    assert main(["convert", "morph", str(path), str(tmp_path / "out")]) == 2
    assert not target.exists() and not (tmp_path / "out").exists()
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)


def test_wrapper_takes_1d_2d_and_3d_fields_with_the_same_weights():
    torch.manual_seed(0)
    model = opzoo.create_model("morph", **SMALL, in_channels=2, out_channels=2).eval()
    with torch.no_grad():
        for grid in ((16,), (8, 12), (4, 8, 4)):
            x = torch.randn(2, *grid, 1, 2) * 5 + 3
            y = model(x)
            assert y.shape == (2, *grid, 1, 2) and torch.isfinite(y).all()
            # physical units: RevIN brings the prediction back to the input's scale and offset
            assert (model(x * 10 + 7) - (y * 10 + 7)).abs().max() < 1e-3 * (y * 10 + 7).abs().max()
        roll = model.rollout(torch.randn(1, 16, 1, 2), steps=3)
        assert roll.shape == (1, 16, 3, 2)


def test_a_scalar_field_is_repeated_over_the_components_and_read_back_as_their_mean():
    """field_components=[2, 1]: a 2-vector and a scalar; the network sees the scalar twice (upstream's CFD2D layout)."""
    torch.manual_seed(0)
    model = opzoo.create_model("morph", **SMALL, in_channels=3, out_channels=3, field_components=[2, 1],
                               normalization="none").eval()
    x = torch.randn(1, 8, 8, 1, 3)
    v = model.to_fields(x)
    assert v.shape == (1, 1, 2, 2, 1, 8, 8)
    assert torch.equal(v[0, 0, 0, :, 0], x[0, :, :, 0, :2].permute(2, 0, 1))
    assert torch.equal(v[0, 0, 1, 0], v[0, 0, 1, 1]) and torch.equal(v[0, 0, 1, 0, 0], x[0, :, :, 0, 2])
    with torch.no_grad():
        y, net = model(x), model.net(v)
    assert torch.allclose(y[0, :, :, 0, 2], net[0, 1, :, 0].mean(0), atol=1e-6)
    assert torch.allclose(y[0, :, :, 0, :2], net[0, 0, :, 0].permute(1, 2, 0), atol=1e-6)


@pytest.mark.parametrize("args, words", [
    ({"in_channels": 4, "out_channels": 4}, "at most 3 fields"),
    ({"in_channels": 5, "out_channels": 5, "field_components": [3, 2]}, "every field is a scalar"),
    ({"in_channels": 2, "out_channels": 2, "field_components": [1, 2]}, "add up to the 2 channels"),
    ({"in_timesteps": 4}, "in_timesteps <= 3"),
    ({"heads": 5}, "not divisible by the 5 heads"),
])
def test_layouts_morph_cannot_take_are_refused_naming_the_field(args, words):
    with pytest.raises(opzoo.ConfigError, match=words):
        opzoo.create_model("morph", **{**SMALL, **args})


def test_grids_morph_cannot_take_are_refused_in_one_line():
    model = opzoo.create_model("morph", **SMALL).eval()
    for x, words in ((torch.randn(1, 10, 1, 1), "multiple of the patch size 4"),
                     (torch.randn(1, 64, 64, 1, 1), "256 patches, more than the 64"),
                     (torch.randn(1, 8, 8, 2, 1), r"expects \[B, \*S, T_in=1, C=1\]")):
        with pytest.raises(ValueError, match=words) as e:
            model(x)
        assert "\n" not in str(e.value)
    assert model.grid_for((12, 1, 16)) == ((12, 1, 16), "morph runs at any grid whose axes are 1 or multiples of "
                                                       "its patch 4")
    assert model.grid_for((10, 16))[0] == (12, 16) and "nearest grid" in model.grid_for((10, 16))[1]


def test_features_head_and_intermediates_agree_with_forward():
    torch.manual_seed(0)
    model = opzoo.create_model("morph", **SMALL, in_timesteps=2).eval()
    x = torch.randn(2, 8, 8, 2, 1)
    with torch.no_grad():
        y = model(x)
        f = model.forward_features(x)
        assert torch.allclose(model.forward_head(f, x), y, atol=1e-6)
        last, kept = model.forward_intermediates(x)
        assert torch.allclose(last, f) and len(kept) == 2 and torch.allclose(kept[-1], f)
    with pytest.raises(ValueError, match="needs x"):
        model.forward_head(f)


@pytest.mark.slow
@pytest.mark.parametrize("kind, res", [("burgers", 64), ("diffusion-reaction", 16)])
def test_readme_path_finetunes_morph_ti_on_a_1d_and_a_2d_file(kind, res, monkeypatch, tmp_path, capsys):
    """inspect, zero-shot eval, fine-tune (the Hub-cached checkpoint, small sizes: the recorded one stands in),
    eval, push. The 2-D file's two channels (u, v) are grouped as one 2-component field: ``field_components`` is set
    with the file's channel count (a label per channel, like ``in_channels`` a target of the adaptation)."""
    use_cache(monkeypatch, tmp_path / "hub", DATA / "morph-small-slice.pth")
    data = tmp_path / f"{kind}.h5"
    assert main(["data", "generate", kind, "--n", "4", "--res", str(res), "--steps", "5", "--out", str(data),
                 "--quiet"]) == 0
    assert main(["data", "inspect", str(data)]) == 0
    # zero-shot: the published file (here the small recorded one) converted, then evaluated on the file
    assert main(["convert", "morph", str(DATA / "morph-small-slice.pth"), str(tmp_path / "converted"), "--option", "heads=4",
                 "heads_xa=4"]) == 0
    assert main(["eval", str(tmp_path / "converted"), "--data", str(data), "--out", str(tmp_path / "zero")]) == 0
    assert "persistence" in capsys.readouterr().out
    grouping = {"field_components": [2]} if kind == "diffusion-reaction" else {}
    sets = [f"model.args.{k}={json.dumps(v)}" for k, v in {**SMALL, **grouping}.items()]
    assert main(["finetune", "morph-ti", "--data", str(data), "--out", str(tmp_path / "run"), "--steps", "3",
                 "--batch-size", "2", "--test-fraction", "0.5", "--set", *sets, "evaluation.plots=false"]) == 0
    out = capsys.readouterr().out
    assert "zero-shot -> fine-tuned" in out
    config = json.loads((tmp_path / "run" / "model" / "config.json").read_text())["model_args"]
    assert (config["in_channels"], config["field_components"]) == ((2, [2]) if grouping else (1, None))
    assert main(["eval", str(tmp_path / "run" / "model"), "--data", str(data), "--out", str(tmp_path / "eval")]) == 0
    assert "persistence" in capsys.readouterr().out
    uploaded = record_pushes(monkeypatch)  # what `opzoo push` hands to huggingface_hub (no network here)
    assert main(["push", str(tmp_path / "run" / "model"), f"me/morph-{kind}"]) == 0
    assert f"base_model: {REPO}" in uploaded["card"] and "model-index" in uploaded["card"]



def test_a_rollout_from_a_field_at_rest_is_refused_under_window_revin_and_moves_with_split_statistics(tmp_path, capsys):
    """With RevIN on the input window, a velocity starting from rest has variance 0: it was normalized to 0 and
    de-normalized by sqrt(eps), so it stayed frozen for the whole rollout. It is refused in one line naming the
    normalization that works; with the training split's statistics, the rollout moves it."""
    import numpy as np

    from opzoo.cli import main
    from opzoo.data import write_canonical
    from opzoo.evaluation.fit import fit_data, open_trajectories

    rng = np.random.default_rng(0)
    data = rng.standard_normal((4, 16, 16, 6, 2)).astype(np.float32)
    data[..., 0, 0] = 0.0  # channel 0 (a velocity) at rest in the first frame of every trajectory
    write_canonical(tmp_path / "rest.h5", data, ["velocity", "density"], pde="rest")
    torch.manual_seed(0)
    sizes = {**SMALL, "max_ar": 1, "dropout": 0.0, "emb_dropout": 0.0, "in_channels": 2, "out_channels": 2}
    revin = opzoo.create_model("morph", **sizes).eval()
    x = torch.from_numpy(data[:1, :, :, :1])  # [1, 16, 16, T=1, 2]: the velocity at rest, the density not
    with pytest.raises(opzoo.ConfigError, match=r"field 0 \(channel 0\) of sample 0 is uniform over the input window"
                                                r".*normalization='stats'") as e:
        revin.rollout(x, steps=3)
    assert "\n" not in str(e.value) and "--model-args normalization=stats" in str(e.value)
    stats = opzoo.create_model("morph", **sizes, normalization="stats").eval()
    stats.load_state_dict(revin.state_dict())
    src = open_trajectories(str(tmp_path / "rest.h5"))
    fitted = fit_data(stats, [src])
    assert any(line.startswith("normalization: velocity, density: mean") for line in fitted.lines)
    with torch.no_grad():
        traj = fitted.model.rollout(x, steps=3)
    assert traj[..., 0].abs().max() > 1e-3  # the field at rest moves (frozen, it stayed within sqrt(eps) of 0)
    assert (traj[..., 1:, 0] - traj[..., :-1, 0]).abs().max() > 1e-4
    # the command line: the refusal is one line, and --model-args normalization=stats rolls it out
    model_dir = tmp_path / "morph"
    revin.save_pretrained(model_dir)
    assert main(["rollout", str(model_dir), "--data", str(tmp_path / "rest.h5"), "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "normalization='stats'" in err
    assert main(["rollout", str(model_dir), "--data", str(tmp_path / "rest.h5"), "--steps", "2", "--model-args",
                 "normalization=stats"]) == 0
    assert "normalization: velocity, density: mean" in capsys.readouterr().out
