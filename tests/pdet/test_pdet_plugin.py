"""The pdet-mc-* presets: published sizes, loading from the Hub cache with the config.json check, the offline refusal,
`opzoo verify`, the converter's refusals, and the model's documented arguments."""

from __future__ import annotations

import json

import pytest
import torch
from huggingface_hub import constants
from safetensors.torch import load_file

import opzoo
from opzoo.cli import main
from opzoo_pdet import TASKS

from ..hub_cache import place_in_hf_cache, record_pushes
from .conftest import SMALL

PUBLISHED = {"pdet-mc-s": 33e6, "pdet-mc-b": 130e6, "pdet-mc-l": 518e6}  # docs/pretrained-weights.md: ~33M ...
REPO = "thuerey-group/pde-transformer"


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_presets_build_on_meta_with_the_published_parameter_counts(name):
    with torch.device("meta"):
        model = opzoo.load(name)
    n = sum(p.numel() for p in model.parameters())
    assert int(n // 10**6) == int(PUBLISHED[name] // 10**6), n  # millions, as the table writes them (truncated)


def use_cache(monkeypatch, cache, subfolder: str, checkpoint) -> None:
    files = {f"{subfolder}/{f}": checkpoint / f for f in ("config.json", "diffusion_pytorch_model.safetensors")}
    place_in_hf_cache(cache, REPO, files)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


# the network on fields the test standardized itself (the presets z-score with a file's statistics, which a fit gives)
SMALL_ARGS = {**SMALL, "window_size": 4, "patch_size": 2, "normalization": "none"}


def test_offline_load_is_one_line_naming_the_file_and_the_download_command(monkeypatch, tmp_path):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(opzoo.HubError) as e:
        opzoo.load("pdet-mc-s", pretrained=True)
    msg = str(e.value)
    assert "\n" not in msg and "mc-s/diffusion_pytorch_model.safetensors" in msg
    assert f"hf download {REPO} mc-s/diffusion_pytorch_model.safetensors" in msg


def test_load_from_the_hub_cache_converts_checks_and_matches_the_converted_directory(reference, monkeypatch, tmp_path):
    use_cache(monkeypatch, tmp_path / "hub", "mc-s", reference / "periodic")
    model = opzoo.load("pdet-mc-s", pretrained=True, **SMALL_ARGS)
    assert not model.training and model.preset_name == "pdet-mc-s"
    assert main(["convert", "pde-transformer", str(reference / "periodic"), str(tmp_path / "repo")]) == 0
    again = opzoo.load(str(tmp_path / "repo"))
    x = torch.randn(1, 32, 64, 1, 2)
    with torch.no_grad():
        assert torch.equal(model(x), again(x))
    # the preset's own sizes (PDE-S) are not what this config.json and these tensors hold: refused, saying what to load
    with pytest.raises(opzoo.CheckFailed, match=r"describes another network.*hidden_size: config.json 8, model 96"):
        opzoo.load("pdet-mc-s", pretrained=True)


def test_verify_runs_the_config_check_on_the_cached_files(reference, monkeypatch, tmp_path, capsys):
    use_cache(monkeypatch, tmp_path / "hub", "mc-b", reference / "periodic")
    assert main(["verify", "pdet-mc-b", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    failed = [r for r in rows if r["status"] == "FAILED"]
    # small tensors in the Base preset's place: their shapes and their config.json both disagree
    assert [r["check"] for r in failed] == ["weights fit the preset", "mc-b/config.json agrees with the preset"]
    assert rows[0]["repo"] == f"hf-hub:{REPO}"


def test_converter_refuses_what_it_does_not_implement(reference, tmp_path):
    config = json.loads((reference / "periodic" / "config.json").read_text())
    for change, words in (({"carrier_token_active": True}, "carrier tokens are not implemented"),
                          ({"num_timesteps": 2}, "keys in_channels, out_channels, window_size are not known"),
                          ({"type": "PDE-S"}, r"config.json \(type 'PDE-S'\) and the weights disagree"),
                          ({"mystery": 1}, "keys mystery are not known")):
        folder = tmp_path / words[:8].replace(" ", "_")
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        (folder / "diffusion_pytorch_model.safetensors").symlink_to(
            reference / "periodic" / "diffusion_pytorch_model.safetensors")
        with pytest.raises(opzoo.CheckpointError, match=words):
            opzoo.convert_to_repo("pde-transformer", folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_task_normalization_and_grid_are_documented_arguments():
    torch.manual_seed(0)
    args = {**SMALL_ARGS, "depth": [1, 1, 1, 1, 1]}
    plain = opzoo.load("pdet-mc-s", **args).eval()
    burgers = opzoo.load("pdet-mc-s", **args, task_id=TASKS.index("burgers"))
    burgers.load_state_dict(plain.state_dict())
    x = torch.randn(2, 16, 16, 1, 2)
    with torch.no_grad():
        assert not torch.allclose(plain(x), burgers.eval()(x))  # the label conditions the network
    scaled = opzoo.load("pdet-mc-s", **{**args, "normalization": "zscore"}, mean=[1.0, -2.0], std=[3.0, 0.5]).eval()
    scaled.load_state_dict(plain.state_dict())
    mean, std = torch.tensor([1.0, -2.0]), torch.tensor([3.0, 0.5])
    with torch.no_grad():
        torch.testing.assert_close(scaled(x * std + mean), plain(x) * std + mean)
    with pytest.raises(ValueError, match="multiple of 8"):
        plain(torch.randn(1, 12, 16, 1, 2))
    with pytest.raises(opzoo.ConfigError, match="task_id 31"):
        opzoo.load("pdet-mc-s", **args, task_id=31)
    with pytest.raises(opzoo.ConfigError, match="std: every value must be positive"):
        opzoo.load("pdet-mc-s", **{**args, "normalization": "zscore"}, mean=[0.0, 0.0], std=[1.0, 0.0])
    with pytest.raises(ValueError, match=r"has none: give mean and std .* opzoo compute them from a file's training"):
        opzoo.load("pdet-mc-s", **{**args, "normalization": "zscore"}).eval()(x)  # the presets' default, unfitted


@pytest.mark.slow
def test_benchmark_times_pdetransformer_side_by_side(reference, tmp_path):
    """``opzoo benchmark`` with pdetransformer 0.1.11 importable (its own process: its diffusers wants an older
    huggingface_hub than opzoo's test environment)."""
    import os
    import subprocess
    import sys

    from .conftest import REFERENCE

    out = tmp_path / "bench.csv"
    kwargs = [f"{k}={json.dumps(v)}" for k, v in {**SMALL_ARGS, "depth": [1, 1, 1, 1, 1]}.items()]
    # pdetransformer's environment of its time had no peft or kernels; its diffusers and transformers import the ones
    # opzoo[lora] brings, which need a newer huggingface_hub than that environment's (tests/pdet/pdetransformer_0_1_11.py)
    without_peft = ("import importlib.util as u, sys; f = u.find_spec; u.find_spec = lambda n, p=None: None if "
                    "n.split('.')[0] in ('peft', 'kernels') else f(n, p); from opzoo.cli import main; "
                    "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", without_peft, "benchmark", "pdet-*-s", "--resolution", "32", "32",
                           "--repeats", "1", "--out", str(out), "--model-kwargs", *kwargs],
                          env={**os.environ, "PYTHONPATH": str(REFERENCE)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    import csv

    rows = list(csv.DictReader(open(out)))
    assert [r["model"] for r in rows] == ["pdet-mc-s", "pdet-sc-s"]
    for row in rows:
        assert row["upstream"].startswith("pdetransformer 0.1.11") and float(row["ratio_train"]) > 0, row
        assert int(row["upstream_params"]) == int(row["params"])  # the same network


def test_adapting_to_more_channels_keeps_the_old_channels_predictions():
    """Fine-tuning on a 3-channel file adapts the patch embedding (new channels start at zero) and the final layer
    (rows per patch, channels inner): the first two channels' predictions are unchanged."""
    from opzoo.training import adapt_model

    torch.manual_seed(0)
    model = opzoo.load("pdet-mc-s", **{**SMALL_ARGS, "depth": [1, 1, 1, 1, 1]}).eval()
    wider = adapt_model(model, in_channels=3, out_channels=3).eval()
    assert (wider.config.in_channels, wider.config.out_channels) == (3, 3)
    x = torch.randn(2, 16, 16, 1, 3)
    with torch.no_grad():
        torch.testing.assert_close(wider(x)[..., :2], model(x[..., :2]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size, hidden, heads", [("sc-s", 96, 4), ("sc-b", 192, 8), ("sc-l", 384, 16)])
def test_separate_channel_network_has_the_published_sizes(size, hidden, heads):
    """The docs' table: sc-s ~46M, sc-b ~178M, sc-l ~701M parameters (PDE_S/B/L: depth [2, 5, 8, 5, 2], 2 frames,
    window 8, patch 4, 1000 labels)."""
    from opzoo_pdet import SeparateChannelNet

    with torch.device("meta"):
        net = SeparateChannelNet(2, hidden, [2, 5, 8, 5, 2], heads)
    published = {"sc-s": 46, "sc-b": 178, "sc-l": 701}[size]  # millions, as the table writes them (truncated)
    assert int(sum(p.numel() for p in net.parameters()) // 10**6) == published


# ---- separate channels ----------------------------------------------------------------------------------------
SEPARATE_ARGS = {**SMALL, "window_size": 4, "patch_size": 2, "normalization": "none"}


@pytest.mark.parametrize("name, millions", [("pdet-sc-s", 46), ("pdet-sc-b", 178), ("pdet-sc-l", 701)])
def test_separate_presets_build_on_meta_with_the_published_sizes(name, millions):
    with torch.device("meta"):
        model = opzoo.load(name)
    assert sum(p.numel() for p in model.parameters()) // 10**6 == millions


def test_separate_model_feeds_the_frame_and_a_zero_slot_and_returns_the_second(tmp_path):
    """pdetransformer's supervised prediction (get_model_input, MultiStepMSE.predict): per channel the known frame,
    then zeros; diffusion time 0, task 0, the channel's field type and the PDE; the second slot is the prediction."""
    from opzoo_pdet import FIELDS, TASKS

    torch.manual_seed(0)
    types = [FIELDS.index("velocity x"), FIELDS.index("velocity y"), FIELDS.index("pressure")]
    args = {**SEPARATE_ARGS, "in_channels": 3, "out_channels": 3, "channel_types": types,
            "pde_type": TASKS.index("burgers"), "normalization": "zscore", "mean": [0.5, -1.0, 2.0],
            "std": [2.0, 0.5, 1.0]}
    model = opzoo.load("pdet-sc-s", **args).eval()
    x = torch.randn(2, 16, 16, 1, 3)
    mean, std = torch.tensor(args["mean"]), torch.tensor(args["std"])
    frame = ((x[..., 0, :] - mean) / std).permute(0, 3, 1, 2)
    slots = torch.stack([frame, torch.zeros_like(frame)], dim=2)
    shape = (2, 3)
    with torch.no_grad():
        want = model.net(slots, torch.zeros(shape), torch.tensor(types).expand(shape),
                         torch.full(shape, TASKS.index("burgers")), torch.zeros(shape, dtype=torch.long))
        got = model(x)
    torch.testing.assert_close(got, (want[:, :, 1].permute(0, 2, 3, 1) * std + mean).unsqueeze(-2))
    assert FIELDS[0] == "unknownvelocity" and "unknown" not in FIELDS  # upstream's list as Python reads it
    with pytest.raises(opzoo.ConfigError, match="channel_types: one field type per channel"):
        opzoo.load("pdet-sc-s", **{**SEPARATE_ARGS, "channel_types": [1]})


def test_separate_checkpoint_converts_and_computes_pdetransformers_function(reference, tmp_path):
    assert main(["convert", "pde-transformer", str(reference / "separate-periodic"), str(tmp_path / "repo")]) == 0
    model = opzoo.load(str(tmp_path / "repo")).eval()
    assert type(model).__name__ == "PdetSeparateChannels" and model.config.window_size == 4
    inputs = load_file(str(reference / "inputs.safetensors"))
    ref = load_file(str(reference / "separate-periodic" / "reference.safetensors"))
    args = [inputs[f"xs_{k}"] for k in ("t", "channel_type", "pde_type", "task")]
    with torch.no_grad():
        ours = model.net(inputs["xs"].float(), args[0].float(), *args[1:])
    torch.testing.assert_close(ours, ref["y32"], rtol=1e-4, atol=1e-4)
    # their constructor's default is carrier tokens on: a config.json that does not say off is refused
    folder = tmp_path / "carrier"
    folder.mkdir()
    config = json.loads((reference / "separate-periodic" / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "carrier_token_active"}))
    (folder / "diffusion_pytorch_model.safetensors").symlink_to(
        reference / "separate-periodic" / "diffusion_pytorch_model.safetensors")
    with pytest.raises(opzoo.CheckpointError, match="carrier tokens"):
        opzoo.convert_to_repo("pde-transformer", folder, tmp_path / "out")


def test_separate_preset_loads_from_the_hub_cache_and_checks_its_config(reference, monkeypatch, tmp_path):
    use_cache(monkeypatch, tmp_path / "hub", "sc-s", reference / "separate-periodic")
    model = opzoo.load("pdet-sc-s", pretrained=True, **SEPARATE_ARGS)
    assert not model.training and model.config.periodic
    with torch.no_grad():
        assert model(torch.randn(1, 16, 16, 1, 2)).shape == (1, 16, 16, 1, 2)
    with pytest.raises(opzoo.CheckFailed, match="describes another network"):
        opzoo.load("pdet-sc-s", pretrained=True)


@pytest.mark.slow
def test_readme_path_finetunes_pdet_sc_s_on_a_pde_it_never_saw(reference, monkeypatch, tmp_path, capsys):
    """inspect, fine-tune (the published weights, from the Hub cache, adapted to the file's one channel), eval: the
    separate-channel model on a generated Navier-Stokes file (small sizes: the recorded checkpoint stands in)."""
    use_cache(monkeypatch, tmp_path / "hub", "sc-s", reference / "separate-periodic")
    data = tmp_path / "ns.h5"
    assert main(["data", "generate", "ns", "--n", "6", "--res", "32", "--steps", "6", "--out", str(data)]) == 0
    assert main(["data", "inspect", str(data)]) == 0
    sizes = {k: v for k, v in SEPARATE_ARGS.items() if k != "normalization"}  # the preset's: z-scored by the fit
    sets = [f"model.args.{k}={json.dumps(v)}" for k, v in {**sizes, "in_channels": 1, "out_channels": 1}.items()]
    assert main(["finetune", "pdet-sc-s", "--data", str(data), "--out", str(tmp_path / "run"), "--steps", "3",
                 "--batch-size", "2", "--test-fraction", "0.34", "--set", *sets, "evaluation.plots=false"]) == 0
    out = capsys.readouterr().out
    assert "adapted pdet-sc from in_channels=2" in out and "zero-shot -> fine-tuned" in out
    assert "normalization: vorticity: mean [" in out  # its training split's statistics, as pdetransformer per dataset
    assert main(["eval", str(tmp_path / "run" / "model"), "--data", str(data), "--out", str(tmp_path / "eval")]) == 0
    assert "persistence" in capsys.readouterr().out
    uploaded = record_pushes(monkeypatch)  # what `opzoo push` hands to huggingface_hub (no network here)
    assert main(["push", str(tmp_path / "run" / "model"), "me/pdet-sc-ns"]) == 0
    assert uploaded["repo"] == "me/pdet-sc-ns" and "base_model: thuerey-group/pde-transformer" in uploaded["card"]
    assert "model-index" in uploaded["card"] and "license: unknown" in uploaded["card"]  # the base's, not MIT
