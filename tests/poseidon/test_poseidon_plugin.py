"""The poseidon-* presets: sizes, loading from the Hub cache with the config and tensor check and the license notice,
the offline refusal, `opzoo verify` and `opzoo convert`, the converter's refusals (a pickle is never run), the
physical-field wrapper, fine-tuning's adaptation (upstream's ignore_mismatched_sizes), and the README's path on a
user's file of another PDE with another number of fields."""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants
from safetensors.torch import save_file

import opzoo
from opzoo.cli import main
from opzoo.model_io import pretrained as pretrained_module
from opzoo_poseidon.converter import convert_poseidon
from opzoo_poseidon.family import POSEIDON

from ..hub_cache import place_in_hf_cache, record_pushes

DATA = Path(__file__).parent / "data"
# upstream's ScOT at MODEL_MAP's T, B and L (4 -> 4 channels, 128 x 128, use_conditioning), counted by its own code at
# v1-paper with transformers 4.29.2: the "about 21M, 158M and 629M" of the Hub cards
UPSTREAM_PARAMS = {"poseidon-t": 20_774_444, "poseidon-b": 157_729_988, "poseidon-l": 628_575_524}
# a narrow network at poseidon-t's shapes (4 fields, 128 x 128, four levels), for the Hub-cache paths
NARROW = {"embed_dim": 8, "depths": (2, 2, 2, 2), "num_heads": (1, 2, 2, 4)}


def upstream_dir(path: Path, seed: int = 0, **config_changes) -> Path:
    """A narrow network at poseidon-t's shapes as upstream's save_pretrained writes it: config.json (a ScOTConfig)
    and model.safetensors in upstream's names."""
    torch.manual_seed(seed)
    model = opzoo.load("poseidon-t", **NARROW)
    path.mkdir(parents=True)
    config = json.loads((DATA / "scot-small" / "config.json").read_text())
    config.update({"num_channels": 4, "num_out_channels": 4, "embed_dim": 8, "depths": [2, 2, 2, 2],
                   "num_heads": [1, 2, 2, 4], "skip_connections": [2, 2, 2, 0], **config_changes})
    (path / "config.json").write_text(json.dumps(config))
    save_file({k[len("net."):]: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"))
    return path


def use_cache(monkeypatch, cache: Path, checkpoint: Path) -> None:
    place_in_hf_cache(cache, "camlab-ethz/Poseidon-T", {name: checkpoint / name
                                                        for name in ("config.json", "model.safetensors")})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_each_rows_count_is_its_published_configs():
    """The table's counts are upstream's (the conformance suite builds each preset and checks it has its row's)."""
    assert {v.name: v["params"] for v in POSEIDON.variants} == UPSTREAM_PARAMS
    with torch.device("meta"):
        assert opzoo.load("poseidon-t").training  # no weights asked: a new module, in training mode as timm's


def test_offline_load_is_one_line_naming_the_file_and_the_download_command(monkeypatch, tmp_path):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(opzoo.HubError) as e:
        opzoo.load("poseidon-l", pretrained=True)  # refused before 629M parameters are built
    assert "\n" not in str(e.value)
    assert "hf download camlab-ethz/Poseidon-L model.safetensors config.json" in str(e.value)


def test_load_from_the_hub_cache_checks_says_the_license_once_and_matches_opzoo_convert(monkeypatch, tmp_path):
    ckpt = upstream_dir(tmp_path / "Poseidon-T")
    use_cache(monkeypatch, tmp_path / "hub", ckpt)
    monkeypatch.setattr(pretrained_module, "_NOTICED", set())
    with pytest.warns(pretrained_module.LicenseNotice, match="poseidon-t: the weights are licensed CC-BY-NC-4.0"):
        model = opzoo.load("poseidon-t", pretrained=True, **NARROW)
    assert not model.training and model.preset_name == "poseidon-t"
    with warnings.catch_warnings():
        warnings.simplefilter("error", pretrained_module.LicenseNotice)  # once per process
        opzoo.load("poseidon-t", pretrained=True, **NARROW)
    assert main(["convert", "poseidon", str(ckpt), str(tmp_path / "repo")]) == 0
    converted = opzoo.load(str(tmp_path / "repo"))  # the network's normalized units: no preset's constants
    x = torch.randn(1, 64, 64, 1, 4)
    with torch.no_grad():
        want = model(x)
        mean, std = (t.view(-1) for t in model.constants(x))
        standardized = (x - mean) / std
        got = converted(standardized) * std + mean
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(opzoo.CheckFailed, match=r"holds another Poseidon \(scOT\) network \(embed_dim: file 8, model 48.*"
                                                r"opzoo.load\(\.\.\., embed_dim=8"):
        opzoo.load("poseidon-t", pretrained=True)


def test_a_repo_with_only_the_pickled_bin_is_read_through_weights_only(monkeypatch, tmp_path):
    """Safetensors where the repo has them, else pytorch_model.bin (the repos' first uploads) through weights_only."""
    ckpt = upstream_dir(tmp_path / "Poseidon-T")
    from safetensors.torch import load_file

    torch.save(load_file(str(ckpt / "model.safetensors")), ckpt / "pytorch_model.bin")
    place_in_hf_cache(tmp_path / "hub", "camlab-ethz/Poseidon-T", {name: ckpt / name
                                                                   for name in ("config.json", "pytorch_model.bin")})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    model = opzoo.load("poseidon-t", pretrained=True, **NARROW)
    want = load_file(str(ckpt / "model.safetensors"))
    assert all(torch.equal(v, want[k[len("net."):]]) for k, v in model.state_dict().items() if k.startswith("net."))


def test_verify_runs_the_config_and_tensor_check_on_the_cached_files(monkeypatch, tmp_path, capsys):
    use_cache(monkeypatch, tmp_path / "hub", upstream_dir(tmp_path / "Poseidon-T"))
    assert main(["verify", "poseidon-t", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [r["check"] for r in rows if r["status"] == "FAILED"] == [
        "weights fit the preset", "the file's network is the preset's"]


def test_list_pretrained_shows_the_weights_license(capsys):
    assert main(["list", "--pretrained", "poseidon-*"]) == 0
    rows = {r[0]: r for r in (line.split() for line in capsys.readouterr().out.splitlines()[1:])}
    assert list(rows) == ["poseidon-b", "poseidon-l", "poseidon-micro", "poseidon-t"]
    # after where the weights are (download); poseidon-micro is opzoo's own, shipped
    assert all(rows[n][2].startswith("CC-BY-NC-4.0") for n in ("poseidon-b", "poseidon-l", "poseidon-t"))
    assert rows["poseidon-micro"][1:4] == ["shipped", "(offline)", "MIT"]


@pytest.mark.parametrize("change, message", [
    ({"use_conditioning": False}, "use_conditioning=False is not what opzoo-poseidon implements"),
    ({"residual_model": "resnet"}, "residual_model='resnet' is not what opzoo-poseidon implements"),
    ({"pretrained_window_sizes": [8, 0, 0, 0]}, "pretrained_window_sizes [8, 0, 0, 0] are not zero"),
    ({"depths": [2, 2, 2]}, "depths, num_heads and skip_connections need one entry per level"),
    ({"depths": "2222"}, "depths must be a list of integers"),
    # issue 72: each of these ended in Python's or torch's own text
    ({"num_heads": [0, 2, 2, 4]}, "num_heads: whole numbers >= 1, got [0, 2, 2, 4]"),
    ({"patch_size": 0}, "patch_size: a whole number >= 1, got 0"),
    ({"image_size": 0}, "image_size: a whole number >= 1, got 0"),
    ({"image_size": 1_000_000}, "the tensors it computes when built .* take about"),
])
def test_converter_refuses_what_it_does_not_implement(tmp_path, change, message, capsys):
    import re

    ckpt = upstream_dir(tmp_path / "ckpt", **change)
    pattern = message if "tensors" in message else re.escape(message)
    if "tensors" not in message:  # the record itself is refused; a huge grid is refused where it would be built
        with pytest.raises(opzoo.CheckpointError, match=r"config.json[:.] ?.*" + pattern):
            convert_poseidon(ckpt)
    code = main(["convert", "poseidon", str(ckpt), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "out").exists()
    assert re.search(pattern, err) and len(err.strip().splitlines()) == 1 and "Error:" not in err, err


def test_a_fifo_at_config_json_is_named_for_what_it_is(tmp_path):
    ckpt = upstream_dir(tmp_path / "ckpt")
    (ckpt / "config.json").unlink()
    os.mkfifo(ckpt / "config.json")
    with pytest.raises(opzoo.CheckpointError, match="a FIFO, not a regular file"):
        convert_poseidon(ckpt)


class Payload:
    def __reduce__(self):
        return (os.system, ("echo ran > /dev/null",))


def test_a_bin_holding_a_pickled_object_is_refused_without_running_it(tmp_path, monkeypatch):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text((DATA / "scot-small" / "config.json").read_text())
    with open(ckpt / "pytorch_model.bin", "wb") as f:
        pickle.dump({"w": Payload()}, f)
    ran = []
    monkeypatch.setattr(os, "system", lambda cmd: ran.append(cmd))
    with pytest.raises(opzoo.CheckpointError):
        convert_poseidon(ckpt)
    assert not ran
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "fifo-dir").mkdir()
    (tmp_path / "fifo-dir" / "config.json").write_text((DATA / "scot-small" / "config.json").read_text())
    os.rename(tmp_path / "fifo", tmp_path / "fifo-dir" / "model.safetensors")
    with pytest.raises(opzoo.CheckpointError, match="not a regular file"):
        convert_poseidon(tmp_path / "fifo-dir")
    with pytest.raises(opzoo.CheckpointError, match="neither model.safetensors nor pytorch_model.bin"):
        convert_poseidon(tmp_path)


def test_the_wrapper_refuses_grids_it_cannot_take_and_rolls_out_at_a_fixed_lead_time():
    model = opzoo.create_model("poseidon", **NARROW).eval()
    with pytest.raises(ValueError, match=r"takes a square grid with an even side .* got 64x32"):
        model(torch.randn(1, 64, 32, 1, 4))
    with pytest.raises(ValueError, match="got 63x63"):
        model(torch.randn(1, 63, 63, 1, 4))
    x = torch.randn(2, 32, 32, 1, 4)
    with torch.no_grad():
        steps = model.rollout(x, 3, lead_time=0.05)
        first = model(x, lead_time=0.05)
        second = model(first, lead_time=0.05)
    assert steps.shape == (2, 32, 32, 3, 4)
    torch.testing.assert_close(steps[..., :1, :], first)
    torch.testing.assert_close(steps[..., 1:2, :], second)
    assert model.grid_for([48, 48])[0] == (48, 48) and model.grid_for([64, 32])[0] is None


def test_fine_tuning_on_other_fields_replaces_only_the_channel_shaped_tensors():
    """upstream's from_pretrained(..., ignore_mismatched_sizes=True): the embedding's and recovery's tensors whose
    shape changes start afresh; every other weight, the time embeddings included, is kept."""
    from opzoo.training import adapt_model

    model = opzoo.create_model("poseidon", **NARROW, field_mean=(0.8, 0, 0, 0), field_std=(0.31, 0.391, 0.356, 0.185))
    wider = adapt_model(model, in_channels=1, out_channels=1)
    assert wider.config.field_mean is None  # the constants were the old channels'
    old, new = model.state_dict(), wider.state_dict()
    changed = {k for k in new if old[k].shape != new[k].shape}
    assert changed == {"net.embeddings.patch_embeddings.projection.weight", "net.patch_recovery.projection.weight",
                       "net.patch_recovery.projection.bias", "net.patch_recovery.mixup.weight"}
    assert all(torch.equal(old[k], new[k]) for k in new if k not in changed)


@pytest.mark.slow
def test_readme_path_finetunes_poseidon_t_on_a_users_file_of_another_pde(monkeypatch, tmp_path, capsys):
    """inspect, zero-shot eval (the converted checkpoint), fine-tune (the Hub-cached checkpoint; a narrow one stands in)
    on a 1-field file at its own 32 x 32 grid, eval, push."""
    ckpt = upstream_dir(tmp_path / "Poseidon-T")
    use_cache(monkeypatch, tmp_path / "hub", ckpt)
    data = tmp_path / "ns.h5"
    assert main(["data", "generate", "ns", "--n", "4", "--res", "32", "--steps", "6", "--out", str(data),
                 "--quiet"]) == 0
    assert main(["data", "inspect", str(data)]) == 0
    assert main(["convert", "poseidon", str(ckpt), str(tmp_path / "converted")]) == 0
    # vorticity is none of Poseidon's fields (a converted checkpoint of 4 channels reads upstream's): refused in one
    # line naming the flags that fit it, never padded
    assert main(["eval", str(tmp_path / "converted"), "--data", str(data), "--out", str(tmp_path / "zero")]) == 2
    err = capsys.readouterr().err
    assert "--field-map FILE=MODEL" in err and "opzoo finetune adapts" in err and len(err.strip().splitlines()) == 1
    # another PDE's fields: its own channel count (the embedding and recovery replaced, as upstream's fine-tuning does)
    own = {**NARROW, "in_channels": 1}
    sets = [f"model.args.{k}={json.dumps(list(v) if isinstance(v, tuple) else v)}" for k, v in own.items()]
    assert main(["finetune", "poseidon-t", "--data", str(data), "--out", str(tmp_path / "run"), "--steps", "2",
                 "--batch-size", "2", "--test-fraction", "0.5", "--set", *sets, "evaluation.plots=false"]) == 0
    out = capsys.readouterr().out
    assert "zero-shot -> fine-tuned" in out and "32x32" in out
    # the new field's normalization: its training split's statistics, said and kept with the model
    assert "normalization: vorticity: mean [" in out and "(statistics of trajectories 0-1 of ns.h5" in out
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert saved["model_args"]["in_channels"] == 1 and len(saved["model_args"]["field_mean"]) == 1
    assert saved["pretrained_cfg"]["fields"] == ["vorticity"]
    assert saved["pretrained_cfg"]["normalization"]["fields"] == ["vorticity"]
    assert main(["eval", str(tmp_path / "run" / "model"), "--data", str(data), "--out", str(tmp_path / "eval")]) == 0
    uploaded = record_pushes(monkeypatch)
    assert main(["push", str(tmp_path / "run" / "model"), "me/poseidon-ns"]) == 0
    assert "base_model: camlab-ethz/Poseidon-T" in uploaded["card"] and "cc-by-nc-4.0" in uploaded["card"]


def test_a_local_copy_holding_only_the_pickled_bin_loads_through_the_directory_overlay(tmp_path):
    """transformers 4.29.2's save_pretrained writes pytorch_model.bin (safe_serialization off): a local copy of the
    repo holding only that file loads as the Hub cache's does (read through weights_only)."""
    ckpt = upstream_dir(tmp_path / "Poseidon-T")
    from safetensors.torch import load_file

    torch.save(load_file(str(ckpt / "model.safetensors")), ckpt / "pytorch_model.bin")
    (ckpt / "model.safetensors").unlink()
    model = opzoo.load("poseidon-t", pretrained=True, pretrained_cfg_overlay={"directory": str(ckpt)}, **NARROW)
    assert not model.training and model.preset_name == "poseidon-t"
