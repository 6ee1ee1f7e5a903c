"""The gphyt-* presets: sizes, loading from the Hub cache with the config and tensor check, the offline refusal,
`opzoo verify` and `opzoo convert`, the converter's refusals (a pickle is never run), the physical-field wrapper, and
the README's fine-tuning path on a file of The Well's layout and on a user's file of another PDE."""

from __future__ import annotations

import json
import pathlib
import pickle
import re
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants

import opzoo
from opzoo.cli import main
from opzoo_gphyt.converter import convert_gphyt, upstream_name
from opzoo_gphyt.family import GPHYT

from ..hub_cache import place_in_hf_cache, record_pushes

DATA = Path(__file__).parent / "data"
REPO = "flwi/Physics-Foundation-Model"
# upstream's PhysicsTransformer at the training config (5 fields, 4 x 256 x 128, patches 1 x 16 x 16, derivatives,
# absolute positions), counted by its own code at 4374116; x 4 bytes: the Hub files' ~32 MB, 446 MB, 1.5 GB, 3.2 GB
UPSTREAM_PARAMS = {"gphyt-s": 7_992_773, "gphyt-m": 111_597_317, "gphyt-l": 384_885_765, "gphyt-xl": 795_813_125}
# the recorded upstream checkpoint's sizes (tests/gphyt/record_reference.py)
SMALL = {"in_channels": 3, "out_channels": 3, "hidden_dim": 24, "mlp_dim": 32, "num_heads": 2, "num_layers": 2,
         "patch_size": [1, 4, 4], "img_size": [16, 8], "in_timesteps": 3}
# a narrow network at the published shapes (5 fields, 4 frames at 256 x 128), for the Hub-cache paths: shapes are what
# a pretrained load adapts after the check, so the file must have the preset's
NARROW = {"hidden_dim": 24, "mlp_dim": 32, "num_heads": 2, "num_layers": 2}


def upstream_file(path: Path, seed: int = 0) -> Path:
    """A narrow network at gphyt-s's shapes in upstream's checkpoint format (prefixes, buffers, recorded config)."""
    torch.manual_seed(seed)
    model = opzoo.load("gphyt-s", **NARROW)
    sd = {f"module._orig_mod.{upstream_name(k)}": v for k, v in model.state_dict().items()}
    diff = torch.tensor([-1.0, 0.0, 1.0])
    sd |= {"module._orig_mod.derivatives.dt_filter": diff.view(1, 1, 3, 1, 1).repeat(5, 1, 1, 1, 1),
           "module._orig_mod.derivatives.dh_filter": diff.view(1, 1, 1, 3, 1).repeat(5, 1, 1, 1, 1),
           "module._orig_mod.derivatives.dw_filter": diff.view(1, 1, 1, 1, 3).repeat(5, 1, 1, 1, 1),
           "module._orig_mod.tokenizer.patch_size": torch.tensor([1, 16, 16])}
    config = {"model": {"architecture": "gphyt", "img_size": [4, 256, 128],
                        "transformer": {"input_channels": 5, "pos_enc_mode": "absolute", "patch_size": [1, 16, 16],
                                        "use_derivatives": True, "integrator": "Euler", "dropout": 0.0},
                        "tokenizer": {"tokenizer_mode": "linear", "detokenizer_mode": "linear"}}}
    torch.save({"samples_trained": 1, "model_state_dict": sd, "config": config}, path)
    return path


@pytest.mark.parametrize("variant", GPHYT.variants, ids=lambda v: v.name)
def test_each_rows_count_is_its_checkpoints(variant):
    """The table's counts are upstream's (the conformance suite builds each preset and checks it has its row's)."""
    assert variant["params"] == UPSTREAM_PARAMS[variant.name]
    assert abs(variant["params"] * 4 / 1e6 - variant["megabytes"]) / variant["megabytes"] < 0.03


def use_cache(monkeypatch, cache: Path, checkpoint: Path, name: str = "gphyt-S.pth") -> None:
    place_in_hf_cache(cache, REPO, {name: checkpoint})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_offline_load_is_one_line_naming_the_file_and_the_download_command(monkeypatch, tmp_path):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(opzoo.HubError) as e:
        opzoo.load("gphyt-xl", pretrained=True)  # refused before a 3 GB model is built
    assert "\n" not in str(e.value) and f"hf download {REPO} gphyt-XL.pth" in str(e.value)


def test_load_from_the_hub_cache_converts_checks_and_matches_opzoo_convert(monkeypatch, tmp_path):
    file = upstream_file(tmp_path / "gphyt-S.pth")
    use_cache(monkeypatch, tmp_path / "hub", file)
    stats = {"field_mean": (0.1,) * 5, "field_std": (2.0,) * 5}  # what a fit computes from a file (none here)
    model = opzoo.load("gphyt-s", pretrained=True, **NARROW, **stats)
    assert not model.training and model.preset_name == "gphyt-s"
    assert main(["convert", "gphyt", str(file), str(tmp_path / "repo"), "--option", "num_heads=2"]) == 0
    again = opzoo.load(str(tmp_path / "repo"), **stats)
    x = torch.randn(1, 256, 128, 4, 5)
    with torch.no_grad():
        assert torch.equal(model(x), again(x))
    with pytest.raises(opzoo.CheckFailed, match=r"another GPhyT network \(hidden_dim: file 24, model 192.*"
                                                r"opzoo.load\(\.\.\., hidden_dim=24, mlp_dim=32"):
        opzoo.load("gphyt-s", pretrained=True)


def test_a_non_finite_file_is_refused_for_what_it_is_whatever_the_overrides(monkeypatch, tmp_path):
    """Issue 74 item 19: with normalization="none" (the override opzoo's own message recommends) a NaN checkpoint was
    refused as "the overrides ['normalization'] change tensors the published weights fix", the cause under Details."""
    payload = torch.load(upstream_file(tmp_path / "gphyt-S.pth"), weights_only=True)
    first = next(iter(payload["model_state_dict"]))
    payload["model_state_dict"][first] = torch.full_like(payload["model_state_dict"][first], float("nan"))
    (tmp_path / "nan").mkdir()
    torch.save(payload, tmp_path / "nan" / "gphyt-S.pth")
    use_cache(monkeypatch, tmp_path / "hub", tmp_path / "nan" / "gphyt-S.pth")
    with pytest.raises(opzoo.OpzooError) as e:
        opzoo.load("gphyt-s", pretrained=True, normalization="none", **NARROW)
    assert "non-finite" in str(e.value) and "overrides" not in str(e.value)


def test_verify_runs_the_config_check_on_the_cached_file(monkeypatch, tmp_path, capsys):
    use_cache(monkeypatch, tmp_path / "hub", upstream_file(tmp_path / "gphyt-S.pth"))
    assert main(["verify", "gphyt-s", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [r["check"] for r in rows if r["status"] == "FAILED"] == [
        "weights fit the preset", "the file's network is the preset's"]


def resaved(tmp_path: Path, name: str, change) -> Path:
    payload = torch.load(DATA / "gphyt-small.pth", weights_only=True)
    change(payload)
    torch.save(payload, tmp_path / name)
    return tmp_path / name


def test_converter_refuses_what_it_does_not_implement_and_what_disagrees(tmp_path):
    def conv_tokenizer(p):
        p["config"]["model"]["tokenizer"]["tokenizer_mode"] = "conv_net"

    def rope(p):
        p["config"]["model"]["transformer"]["pos_enc_mode"] = "rope"

    def other_size(p):
        p["config"]["model"]["transformer"]["model_size"] = "GPT_S"

    def fourth_order(p):
        p["model_state_dict"]["module._orig_mod.derivatives.dt_filter"] = torch.tensor(
            [1 / 12, -2 / 3, 0, 2 / 3, -1 / 12]).repeat(3, 1).view(3, 1, 5, 1, 1)

    def foreign(p):
        p["model_state_dict"]["module._orig_mod.extra.weight"] = torch.zeros(1)

    for change, words in ((conv_tokenizer, "tokenizer_mode='conv_net'"), (rope, "pos_enc_mode='rope'"),
                          (other_size, "recorded config and the tensors disagree: hidden_dim 192 vs 24"),
                          (fourth_order, "not the 2nd-order central difference"),
                          (foreign, "not GPhyT's network")):
        with pytest.raises(opzoo.CheckpointError, match=words):
            convert_gphyt(resaved(tmp_path, f"{change.__name__}.pth", change), num_heads=2)
    with pytest.raises(opzoo.CheckpointError, match="pass num_heads=N"):  # width 24 is no size of the table
        convert_gphyt(DATA / "gphyt-small.pth")


@pytest.mark.parametrize("where, value, words", [
    (("transformer", "patch_size"), 16, "model.transformer.patch_size is 16, not a list of whole numbers"),
    (("transformer", "dropout"), "abc", "model.transformer.dropout is 'abc', not a number in"),
    (("transformer", "input_channels"), -5, "model.transformer.input_channels is -5"),
    (("transformer", "model_size"), ["GPT_S"], "model_size ['GPT_S'] is not one of"),
    (("tokenizer",), [1], "model.tokenizer is a list, not a section"),
    (("img_size",), [4, "x", 128], "model.img_size[1] is 'x'"),
    (("img_size",), 7, "model.img_size is 7, not [time, height, width]")])
def test_a_recorded_config_that_lies_is_refused_in_opzoos_words(tmp_path, where, value, words):
    """Issue 72: each of these ended in Python's TypeError or ValueError."""
    def lie(p):
        node = p["config"]["model"]
        for key in where[:-1]:
            node = node[key]
        node[where[-1]] = value

    with pytest.raises(opzoo.CheckpointError, match=re.escape(words)) as e:
        convert_gphyt(resaved(tmp_path, "lie.pth", lie), num_heads=2)
    assert "\n" not in str(e.value)


class Planted:
    """A pickled object whose unpickling would write ``target``."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (Path.write_text, (self.target, "ran"))


def test_a_pth_holding_a_pickled_object_is_refused_without_running_it_and_paths_are_allowed(tmp_path):
    target = tmp_path / "executed"
    evil = resaved(tmp_path, "evil.pth", lambda p: p.__setitem__("extra", Planted(target)))
    with pytest.raises(opzoo.CheckpointError, match="that a weights-only load refuses: opzoo reads tensors"):
        convert_gphyt(evil, num_heads=2)
    assert main(["convert", "gphyt", str(evil), str(tmp_path / "out")]) == 2
    assert not target.exists() and not (tmp_path / "out").exists()
    with pytest.raises(pickle.UnpicklingError):
        torch.load(evil, weights_only=True)
    # a config holding path objects (upstream allow-lists them too) converts
    with_paths = resaved(tmp_path, "paths.pth", lambda p: p["config"].__setitem__("log_dir", pathlib.PosixPath("/r")))
    assert convert_gphyt(with_paths, num_heads=2).model_args["hidden_dim"] == 24


def test_the_integrator_and_step_are_arguments_and_the_wrapper_refuses_other_shapes():
    torch.manual_seed(0)
    euler = opzoo.create_model("gphyt", **SMALL, normalization="none").eval()
    half = opzoo.create_model("gphyt", **SMALL, normalization="none", step_size=0.5).eval()
    half.load_state_dict(euler.state_dict())
    x = torch.randn(1, 16, 8, 3, 3)
    with torch.no_grad():
        f = euler.net.derivative(x.permute(0, 3, 1, 2, 4))[:, -1:].permute(0, 2, 3, 1, 4)
        torch.testing.assert_close(euler(x), x[..., -1:, :] + f)
        torch.testing.assert_close(half(x), x[..., -1:, :] + 0.5 * f)
        assert euler.rollout(x, steps=2).shape == (1, 16, 8, 2, 3)
    with pytest.raises(ValueError, match=r"expects \[B, H=16, W=8, T_in=3, C=3\]") as e:
        euler(torch.randn(1, 16, 16, 3, 3))
    assert "\n" not in str(e.value)
    with pytest.raises(opzoo.ConfigError, match="integrator"):
        opzoo.create_model("gphyt", **SMALL, integrator="Leapfrog")
    rk4 = opzoo.create_model("gphyt", **SMALL, integrator="RK4", normalization="instance").eval()
    with torch.no_grad():  # the head completes the step from the features (RK4's later stages run the network again)
        torch.testing.assert_close(rk4.forward_head(rk4.forward_features(x), x), rk4(x))


def test_adapting_to_more_channels_keeps_the_old_channels_predictions():
    from opzoo.training import adapt_model

    torch.manual_seed(0)
    model = opzoo.create_model("gphyt", **SMALL, normalization="instance").eval()
    wider = adapt_model(model, in_channels=4, out_channels=4).eval()
    x = torch.randn(2, 16, 8, 3, 4)
    with torch.no_grad():
        torch.testing.assert_close(wider(x)[..., :3], model(x[..., :3]), rtol=1e-5, atol=1e-5)
    finer = adapt_model(model, img_size=(32, 16)).eval()  # the position table interpolated
    assert finer.net.pos_embed.shape == (1, 3, 8, 4, 24)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["the-well", "ns"])
def test_readme_path_finetunes_gphyt_s_on_a_well_file_and_a_users_file(kind, monkeypatch, tmp_path, capsys):
    """inspect, zero-shot eval (the converted file), fine-tune (the Hub-cached checkpoint; the small recorded one
    stands in), eval, push."""
    file = upstream_file(tmp_path / "gphyt-S.pth")
    use_cache(monkeypatch, tmp_path / "hub", file)
    data = tmp_path / f"{kind}.h5"
    if kind == "the-well":  # shear_flow's fields (tracer, pressure, velocity): no density or temperature
        from ..well.well_files import write_well_file

        write_well_file(data, "shear_flow", (32, 16), n_traj=4, n_steps=6)
    else:
        assert main(["data", "generate", "ns", "--n", "4", "--res", "32", "--steps", "6", "--out", str(data),
                     "--quiet"]) == 0
    assert main(["data", "inspect", str(data)]) == 0
    assert main(["convert", "gphyt", str(file), str(tmp_path / "converted"), "--option", "num_heads=2"]) == 0
    zero_shot = main(["eval", str(tmp_path / "converted"), "--data", str(data), "--out", str(tmp_path / "zero")])
    if kind == "the-well":
        assert zero_shot == 0 and "persistence" in capsys.readouterr().out
    else:  # vorticity is none of GPhyT's fields: refused in one line naming the flags that fit it
        err = capsys.readouterr().err
        assert zero_shot == 2 and "--field-map FILE=MODEL" in err and "opzoo finetune adapts" in err
        assert len(err.strip().splitlines()) == 1
    if kind == "the-well":  # the preset names its fields: the file's are read by name, the missing ones as zero
        with torch.device("meta"):
            preset = opzoo.load("gphyt-s", **NARROW)
        from opzoo.evaluation.fit import open_trajectories, select_model_fields

        src = open_trajectories(data)
        raw = src.read(0).numpy()  # [x, y, T, (tracer, pressure, velocity_x, velocity_y)]
        lines = select_model_fields(preset, [src])  # shear_flow: read as upstream's preprocess.py wrote it
        assert lines == ["fields: density, temperature absent: read as 0 (as upstream wrote its training files "
                         "(add_missing_datasets: zeros; FloWsnr/General-Physics-Transformer gphyt/data/preprocess.py "
                         "@ 6324976)); left out of the loss and the scores, refilled in a rollout"]
        frames = src.read(0).numpy()
        assert src.channel_names == ["pressure", "density", "temperature", "velocity_x", "velocity_y"]
        assert src.spatial == (16, 32) and src.present == [True, False, False, True, True]
        assert not frames[..., 1:3].any()
        assert (frames[..., 0] == raw[..., 1].swapaxes(0, 1)).all()  # the grid transposed
        assert (frames[..., 3] == raw[..., 3].swapaxes(0, 1)).all()  # and the velocity components swapped
    # the narrow sizes and the file's own grid (the position table is interpolated to it); another PDE's file: its
    # own channel count (the patch convolutions adapted, new channels starting at zero)
    own = {"img_size": [16, 32]} if kind == "the-well" else {"img_size": [32, 32], "in_channels": 1}
    sets = [f"model.args.{k}={json.dumps(v)}" for k, v in {**NARROW, **own}.items()]
    assert main(["finetune", "gphyt-s", "--data", str(data), "--out", str(tmp_path / "run"), "--steps", "2",
                 "--batch-size", "2", "--test-fraction", "0.5", "--set", *sets, "evaluation.plots=false"]) == 0
    out = capsys.readouterr().out
    assert "zero-shot -> fine-tuned" in out
    assert main(["eval", str(tmp_path / "run" / "model"), "--data", str(data), "--out", str(tmp_path / "eval")]) == 0
    uploaded = record_pushes(monkeypatch)  # what `opzoo push` hands to huggingface_hub (no network here)
    assert main(["push", str(tmp_path / "run" / "model"), f"me/gphyt-{kind}"]) == 0
    assert f"base_model: {REPO}" in uploaded["card"] and "model-index" in uploaded["card"]


def test_upstream_names_round_trip():
    with torch.device("meta"):
        model = opzoo.create_model("gphyt", **SMALL)
    from opzoo_gphyt.converter import opzoo_name

    assert all(opzoo_name(upstream_name(k)) == k for k in model.state_dict())
