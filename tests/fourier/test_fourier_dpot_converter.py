"""Official DPOT checkpoints: conversion, strict load, the official function, safety, the Hub path."""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import opzoo
from opzoo.cli import main as cli_main

from ..hub_cache import place_in_hf_cache
from .reference_dpot import dpot_forward_official, official_state_dict, write_official_checkpoint

SMALL = dict(width=32, depth=2, n_blocks=4, mlp_ratio=2.0, out_layer_dim=8, patch=4, img=16,
             c_in=2, c_out=2, t_in=3, t_out=2, n_cls=5)
MODES = 3  # latent 4x4 -> rfft2 4x3: the x axis is truncated, as with real data above 32 modes


@pytest.fixture
def official_file(tmp_path):
    sd = official_state_dict(**SMALL, generator=torch.Generator().manual_seed(0), prefix="module.")
    path = tmp_path / "model_small.pth"
    write_official_checkpoint(path, sd, modes=MODES, act="gelu", normalize=False, width=32, n_layers=2)
    return path, {k[len("module."):]: v for k, v in sd.items()}


def official_float64(sd, x):
    """The official forward evaluated in float64: the float32 model is compared with the equations,
    not with another float32 code path (FFT, conv and GEMM backends differ across CPUs). Tolerance
    1e-4: unit-scale activations through two blocks of float32 convolutions, FFTs (error ~log2(N)·u
    per transform) and MLPs of width <= 64 stay within ~1e-5; 10x room, far below a real mismatch."""
    sd64 = {k: v.double() if v.is_floating_point() else v for k, v in sd.items()}
    with torch.no_grad():
        return dpot_forward_official(sd64, x.double(), modes=MODES, patch=4, t_out=2)


def test_official_key_count_matches_design():
    sd = official_state_dict(**SMALL, generator=torch.Generator().manual_seed(0))
    assert len(sd) == 19 + 12 * SMALL["depth"]


def test_converted_model_computes_the_official_function(official_file):
    path, sd = official_file
    converted = opzoo.get_registry().get("converter", "dpot")(path)
    assert converted.architecture == "pot"
    args = converted.model_args
    assert (args["width"], args["depth"], args["mlp_ratio"], args["out_layer_dim"], args["patch_size"]) == (32, 2, 2.0, 8, 4)
    assert (args["in_channels"], args["out_channels"], args["in_timesteps"], args["out_timesteps"]) == (2, 2, 3, 2)
    assert args["img_size"] == [16, 16] and args["n_cls"] == 5
    assert args["mixer_args"] == {"n_blocks": 4, "modes": MODES}
    model = opzoo.create_model("pot", **args)
    opzoo.model_io.weights.load_state_dict_strict(model, converted.state_dict, str(path))
    x = torch.randn(2, 16, 16, 3, 2, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, got_cls = model.forward_with_class(x)
        want, want_cls = official_float64(sd, x)
    assert got.shape == (2, 16, 16, 2, 2)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_cls.double(), want_cls, rtol=1e-4, atol=1e-4)
    assert (got - want).abs().max() < 1e-3 * want.abs().max()


def test_strict_load_refuses_a_wrong_depth(official_file):
    path, _ = official_file
    converted = opzoo.get_registry().get("converter", "dpot")(path)
    model = opzoo.create_model("pot", **{**converted.model_args, "depth": 3})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(opzoo.WeightsError, match="missing tensors.*blocks.2"):
        opzoo.model_io.weights.load_state_dict_strict(model, converted.state_dict, str(path))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_unknown_official_key_is_named(tmp_path):
    sd = official_state_dict(**SMALL, generator=torch.Generator().manual_seed(0))
    sd["blocks.0.filter.scale"] = torch.ones(1)
    path = tmp_path / "odd.pth"
    write_official_checkpoint(path, sd, modes=MODES)
    with pytest.raises(opzoo.CheckpointError, match=r"odd\.pth.*blocks\.0\.filter\.scale"):
        opzoo.get_registry().get("converter", "dpot")(path)


def test_cli_convert_writes_an_opzoo_repo(official_file, tmp_path, capsys):
    path, sd = official_file
    out = tmp_path / "repo"
    assert cli_main(["convert", "dpot", str(path), str(out)]) == 0, capsys.readouterr().err
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "README.md"}
    doc = json.loads((out / "config.json").read_text())
    assert doc["architecture"] == "pot" and doc["model_args"]["mixer_args"]["modes"] == MODES
    weights = load_file(str(out / "model.safetensors"))
    torch.testing.assert_close(weights["blocks.1.mixer.w2"], sd["blocks.1.filter.w2"])
    torch.testing.assert_close(weights["blocks.0.mlp.fc1.weight"], sd["blocks.0.mlp.0.weight"][:, :, 0, 0])
    model = opzoo.load(f"local-dir:{out}")
    x = torch.randn(1, 16, 16, 3, 2)
    with torch.no_grad():
        torch.testing.assert_close(model(x).double(), official_float64(sd, x)[0], rtol=1e-4, atol=1e-4)


class _Payload:
    """Unpickling this would create the marker file: the test checks that never happens."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


@pytest.mark.parametrize("legacy", [False, True])
def test_malicious_pickle_is_refused_and_nothing_runs(tmp_path, legacy, capsys):
    marker = tmp_path / "pwned"
    path = tmp_path / "model_S.pth"
    sd = official_state_dict(**SMALL, generator=torch.Generator().manual_seed(0))
    torch.save({"args": _Payload(marker), "model": sd}, path, _use_new_zipfile_serialization=not legacy)
    assert not marker.exists()
    with pytest.raises(opzoo.CheckpointError, match="model_S.pth"):
        opzoo.get_registry().get("converter", "dpot")(path)
    assert cli_main(["convert", "dpot", str(path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "a weights-only load refuses" in err and "weights_only=False" not in err and len(err.splitlines()) == 1
    assert not marker.exists() and not (tmp_path / "out" / "model.safetensors").exists()
    # the payload is real: plain unpickling does run it
    raw = tmp_path / "raw.pkl"
    raw.write_bytes(pickle.dumps(_Payload(marker)))
    pickle.loads(raw.read_bytes())
    assert marker.exists()



@pytest.mark.slow  # a full-size (31M) official file through a fresh process: the converter's logic is the small tests'
def test_load_pretrained_dpot_s_from_the_hub_cache(tmp_path):
    sd = official_state_dict(width=1024, depth=6, n_blocks=8, mlp_ratio=1.0, out_layer_dim=32, patch=8, img=128,
                             c_in=4, c_out=4, t_in=10, t_out=1, n_cls=12,
                             generator=torch.Generator().manual_seed(2), prefix="module.")
    assert sum(v.numel() for v in sd.values()) == 30_801_459
    src = tmp_path / "model_S.pth"
    write_official_checkpoint(src, sd, modes=32, act="gelu", normalize=False)
    place_in_hf_cache(tmp_path / "hub", "hzk17/DPOT", {"model_S.pth": src})
    probe = (
        "import torch, opzoo\n"
        "m = opzoo.load('dpot-s', pretrained=True)\n"
        "sd = m.state_dict()\n"
        "torch.save({k: sd[k] for k in ['blocks.5.mixer.w1', 'time_agg.gamma', 'out_head.0.weight']}, 'probe.pt')\n"
        "print(m.preset_name, sum(p.numel() for p in m.parameters()))\n"
        "try:\n"
        "    opzoo.load('dpot-ti', pretrained=True)\n"
        "except opzoo.HubError as e:\n"
        "    print('UNCACHED', e)\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1", "OPZOO_PLUGINS": "opzoo-fourier"}
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    first, uncached = proc.stdout.split("\n", 1)
    assert first.split() == ["dpot-s", "30801459"]
    # a file that is not cached fails offline with a message saying how to get it
    assert uncached.startswith("UNCACHED") and "model_Ti.pth" in uncached and "hf download hzk17/DPOT" in uncached
    got = torch.load(tmp_path / "probe.pt", weights_only=True)
    torch.testing.assert_close(got["blocks.5.mixer.w1"], sd["module.blocks.5.filter.w1"])
    torch.testing.assert_close(got["time_agg.gamma"], sd["module.time_agg_layer.gamma"])
    torch.testing.assert_close(got["out_head.0.weight"], sd["module.out_layer.0.weight"])


def test_cli_convert_refuses_an_option_the_converter_does_not_take(official_file, tmp_path, capsys):
    path, _ = official_file
    out = tmp_path / "repo"
    assert cli_main(["convert", "dpot", str(path), str(out), "--dataset", "shear_flow"]) == 2
    err = capsys.readouterr().err
    assert "converter 'dpot' takes no option(s) 'dataset'" in err and "Traceback" not in err
    assert not out.exists()


def test_checkpoint_path_reads_the_official_format_through_the_presets_converter(tmp_path):
    """timm's ``checkpoint_path=``: DPOT-Ti's published file, downloaded by hand, loads as the preset's weights."""
    sd = official_state_dict(width=512, depth=4, n_blocks=4, mlp_ratio=1.0, out_layer_dim=32, patch=8, img=128,
                             c_in=4, c_out=4, t_in=10, t_out=1, n_cls=12,
                             generator=torch.Generator().manual_seed(4), prefix="module.")
    path = tmp_path / "model_Ti.pth"
    write_official_checkpoint(path, sd, modes=32, act="gelu", normalize=False)
    model = opzoo.load("dpot-ti", checkpoint_path=path)
    assert not model.training
    torch.testing.assert_close(model.state_dict()["blocks.3.mixer.w1"], sd["module.blocks.3.filter.w1"])
    with pytest.raises(opzoo.CheckFailed, match=r"another DPOT network \(depth: file 4, model 2\); load it with "
                                                r"opzoo.load\(\.\.\., depth=4\)"):  # another size: refused, saying so
        opzoo.load("dpot-ti", checkpoint_path=path, depth=2)
    with pytest.raises(opzoo.CheckFailed, match="it is dpot-ti's network: load it as dpot-ti"):
        opzoo.load("dpot-s", checkpoint_path=path)
