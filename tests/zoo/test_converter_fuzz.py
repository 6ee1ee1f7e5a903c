"""Issue 49: malformed upstream checkpoints given to each converter (pde-transformer, the-well, dpot): every case of a
fuzz over the converter's config values and tensor headers is one line on stderr, exit 2, and no output directory,
as the config.json fuzz is for opzoo's own repos (tests/zoo/test_config_fuzz.py)."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from opzoo.cli import main

from ..fourier.reference_dpot import official_state_dict
from ..pdet.conftest import DATA as PDET_DATA

NASTY = {"nan": float("nan"), "inf": float("inf"), "zero": 0, "negative": -1, "huge": 10**12, "string": "x",
         "list": [1], "object": {"a": 1}, "null": None, "true": True}


def labels(*default: str) -> list:
    """Every NASTY label: ``default`` ones in the default run, the rest in the slow tier (the same checks)."""
    return [label if label in default else pytest.param(label, marks=pytest.mark.slow) for label in NASTY]


def deep(n: int = 100_000) -> str:
    return "[" * n + "]" * n


def convert(capsys, tmp_path, converter: str, source: Path, *options: str) -> None:
    out = tmp_path / "out"
    t0 = time.monotonic()
    code = main(["convert", converter, str(source), str(out), *options])
    err = capsys.readouterr().err.strip()
    assert code == 2, (converter, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists()
    assert time.monotonic() - t0 < 60  # refused from the files, not after building a huge model


# ---- pde-transformer: a diffusers directory (config.json + diffusion_pytorch_model.safetensors) ----------------
PDET_KEYS = ["in_channels", "out_channels", "patch_size", "periodic", "window_size", "carrier_token_active", "type"]


def pdet_dir(tmp_path: Path) -> Path:
    d = tmp_path / "pdet"
    shutil.copytree(PDET_DATA / "periodic", d)
    return d


# what converts, and why: upstream reads `type` only to pick a named size (opzoo takes the sizes from the tensors and
# checks a named size against them; a list or object there is refused), and `carrier_token_active`/`periodic` by
# truthiness, as Python does upstream
PDET_CONVERTS = {("type", label) for label in NASTY if label not in ("list", "object")} | {("carrier_token_active", "zero"),
                                                        ("carrier_token_active", "null"), ("periodic", "true")}


@pytest.mark.parametrize("key", PDET_KEYS)
@pytest.mark.parametrize("label", labels("negative", "object"))
def test_pde_transformer_config_values(tmp_path, capsys, key, label):
    d = pdet_dir(tmp_path)
    doc = json.loads((d / "config.json").read_text())
    doc[key] = NASTY[label]
    (d / "config.json").write_text(json.dumps(doc))
    if (key, label) in PDET_CONVERTS:
        assert main(["convert", "pde-transformer", str(d), str(tmp_path / "out")]) == 0, capsys.readouterr().err
        return
    convert(capsys, tmp_path, "pde-transformer", d)


@pytest.mark.parametrize("text", ["{", "[]", "null", "{\"type\": " + deep() + "}", deep()])
def test_pde_transformer_config_documents(tmp_path, capsys, text):
    d = pdet_dir(tmp_path)
    (d / "config.json").write_text(text)
    convert(capsys, tmp_path, "pde-transformer", d)


@pytest.mark.parametrize("damage", ["drop-embedder", "reshape-embedder", "flat-heads", "extra-foreign", "empty-file",
                                    "not-safetensors"])
def test_pde_transformer_tensor_headers(tmp_path, capsys, damage):
    d = pdet_dir(tmp_path)
    weights = d / "diffusion_pytorch_model.safetensors"
    sd = load_file(str(weights))
    if damage == "drop-embedder":
        sd.pop("model.x_embedder.proj.weight")
    elif damage == "reshape-embedder":
        sd["model.x_embedder.proj.weight"] = torch.zeros(3)
    elif damage == "flat-heads":
        sd["model.encoder_level_0.blocks.0.attn.logit_scale"] = torch.zeros(())
    elif damage == "extra-foreign":
        sd["optimizer.state"] = torch.zeros(1)
    if damage == "empty-file":
        weights.write_bytes(b"")
    elif damage == "not-safetensors":
        weights.write_bytes(b"\x80\x04this is a pickle")
    else:
        save_file(sd, str(weights))
    convert(capsys, tmp_path, "pde-transformer", d)


# ---- the-well: a PyTorchModelHubMixin directory (config.json + model.safetensors) -----------------------------
@pytest.fixture(scope="module")
def well_dir(tmp_path_factory) -> Path:
    from the_well.benchmark.models import FNO

    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("well") / "repo"
    FNO(dim_in=16, dim_out=4, n_spatial_dims=2, spatial_resolution=(256, 512), modes1=4, modes2=4,
        hidden_channels=8).save_pretrained(d)
    return d


def copy_well(well_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / "well"
    shutil.copytree(well_dir, d)
    return d


WELL = ["--dataset", "shear_flow", "--option", "fourier_blocks=applied"]


@pytest.mark.parametrize("key", ["dim_in", "dim_out", "n_spatial_dims", "spatial_resolution", "modes1",
                                 "hidden_channels"])
@pytest.mark.parametrize("label", labels("nan", "string", "null"))
def test_the_well_config_values(well_dir, tmp_path, capsys, key, label):
    d = copy_well(well_dir, tmp_path)
    doc = json.loads((d / "config.json").read_text())
    doc[key] = NASTY[label]
    (d / "config.json").write_text(json.dumps(doc))
    if label == "null" and key in ("n_spatial_dims", "spatial_resolution"):  # optional: null is absent, as upstream
        assert main(["convert", "the-well", str(d), str(tmp_path / "out"), *WELL]) == 0
        return
    convert(capsys, tmp_path, "the-well", d, *WELL)


@pytest.mark.parametrize("text", ["{", "[]", deep(), "{\"dim_in\": " + deep() + "}"])
def test_the_well_config_documents(well_dir, tmp_path, capsys, text):
    d = copy_well(well_dir, tmp_path)
    (d / "config.json").write_text(text)
    convert(capsys, tmp_path, "the-well", d, *WELL)


def test_the_well_huge_grid_is_refused_before_a_model_is_built(well_dir, tmp_path, capsys):
    d = copy_well(well_dir, tmp_path)
    doc = json.loads((d / "config.json").read_text())
    doc["spatial_resolution"] = [1_000_000, 1_000_000]
    (d / "config.json").write_text(json.dumps(doc))
    convert(capsys, tmp_path, "the-well", d, *WELL)


@pytest.mark.parametrize("damage", ["drop-lifting", "reshape-spectral", "empty-file"])
def test_the_well_tensor_headers(well_dir, tmp_path, capsys, damage):
    d = copy_well(well_dir, tmp_path)
    weights = d / "model.safetensors"
    sd = load_file(str(weights))
    if damage == "drop-lifting":
        for k in [k for k in sd if "lifting" in k]:
            sd.pop(k)
    elif damage == "reshape-spectral":
        k = next(k for k in sd if "convs" in k)
        sd[k] = torch.zeros(2)
    if damage == "empty-file":
        weights.write_bytes(b"")
    else:
        save_file(sd, str(weights))
    convert(capsys, tmp_path, "the-well", d, *WELL)


# ---- dpot: the hzk17/DPOT .pth layout, read with weights_only ------------------------------------------------
SMALL = dict(width=32, depth=1, n_blocks=4, mlp_ratio=2.0, out_layer_dim=8, patch=4, img=16, c_in=2, c_out=2,
             t_in=3, t_out=1, n_cls=12)


def dpot_file(tmp_path: Path, sd=None, **args) -> Path:
    sd = official_state_dict(**SMALL, generator=torch.Generator().manual_seed(0)) if sd is None else sd
    path = tmp_path / "model.pth"
    torch.save({"args": argparse.Namespace(**args), "model": sd}, path)
    return path


@pytest.mark.parametrize("key", ["modes", "act", "normalize"])
@pytest.mark.parametrize("label", labels("negative", "huge", "object"))
def test_dpot_args(tmp_path, capsys, key, label):
    path = dpot_file(tmp_path, **{key: NASTY[label]})
    if (key, label) in (("normalize", "zero"), ("normalize", "true")):  # a store_true flag's values (0/1, bools)
        assert main(["convert", "dpot", str(path), str(tmp_path / "out")]) == 0, capsys.readouterr().err
        return
    convert(capsys, tmp_path, "dpot", path)  # modes=True was taken as 1 mode, normalize="x" as True


@pytest.mark.parametrize("damage", ["drop-pos", "reshape-filter", "scalar-gamma", "not-a-dict", "no-model"])
def test_dpot_tensors(tmp_path, capsys, damage):
    sd = official_state_dict(**SMALL, generator=torch.Generator().manual_seed(0))
    if damage == "drop-pos":
        sd.pop("pos_embed")
    elif damage == "reshape-filter":
        sd["blocks.0.filter.w1"] = torch.zeros(5)
    elif damage == "scalar-gamma":
        sd["time_agg_layer.gamma"] = torch.zeros(())
    path = dpot_file(tmp_path, sd)
    if damage == "not-a-dict":
        torch.save([1, 2, 3], path)
    elif damage == "no-model":
        torch.save({"args": argparse.Namespace(modes=3)}, path)
    convert(capsys, tmp_path, "dpot", path)
