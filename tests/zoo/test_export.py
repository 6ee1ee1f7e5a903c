"""Issue 71: `opzoo export --format onnx|pt2` for every family, each file read back by code of its own (onnxruntime, or
torch.export.load) and compared with the eager model at two batch sizes, and at a second grid where the graph takes
one; the export forms equal to their layers in float64 live beside each layer's tests (tests/fourier, tests/core)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import opzoo

ort = pytest.importorskip("onnxruntime", reason="the export extra (pip install 'opzoo[export]')")

# each family at a micro size: reference -> load kwargs (a shallower network where tracing time grows with depth; The
# Well's at a narrow width, MPP's smallest size from random init, its weights being downloaded by hand); dpot-micro's
# ONNX file is the command's test below
MODELS = {
    "dpot-micro": {},
    "fno-2d": {"width": 8, "modes": 4, "depth": 2},
    "well-unet-classic-shear_flow": {"init_features": 4, "grid": [32, 64]},
    "poseidon-micro": {"depths": [1, 1, 1]},
    "gphyt-micro": {},
    "morph-micro": {},
    "pdet-mc-micro": {"depth": [1, 1, 1, 1, 1]},
    "mpp-avit-ti": {"depth": 1},
}
SLOW = {  # the other families, in the slow tier, as ONNX (the format whose conversion can fail; pt2 is the same trace)
    "aot-pot-micro": {},
    "nestor-ti": {"depth": 1, "img_size": [32, 32]},
    "well-tfno-shear_flow": {"hidden_channels": 8, "modes1": 4, "modes2": 4, "grid": [32, 64]},
    "well-unet-convnext-shear_flow": {"init_features": 4, "grid": [32, 64]},
    "pdet-sc-s": {"depth": [1, 1, 1, 1, 1], "normalization": "none", "grid": [64, 64]},
    "fno-3d": {"width": 8, "modes": 2, "depth": 1, "grid": [16, 16, 16]},
}
DYNAMIC_GRID = {"fno-2d", "well-unet-classic-shear_flow", "mpp-avit-ti", "well-tfno-shear_flow",
                "well-unet-convnext-shear_flow", "fno-3d"}  # docs/export.md's table
# the default tier's 4 minutes on 2 cores: DPOT's and FNO's files (the Fourier layers' export forms); the other
# families, whose trace and conversion take 5-30 s a file (docs/benchmarks.md, "Export"), in the slow tier
SLOW_TRACE = {"well-unet-classic-shear_flow", "poseidon-micro", "pdet-mc-micro", "mpp-avit-ti", "gphyt-micro",
              "morph-micro"}
CASES = [pytest.param(name, fmt, kwargs, id=f"{name}-{fmt}", marks=[pytest.mark.slow] if name in SLOW_TRACE else [])
         for name, kwargs in MODELS.items() for fmt in ("onnx", "pt2") if (name, fmt) != ("dpot-micro", "onnx")]
CASES += [pytest.param(name, "onnx", kwargs, id=f"{name}-onnx", marks=pytest.mark.slow) for name, kwargs in SLOW.items()]


def _run_file(path: Path, fmt: str, x: torch.Tensor) -> torch.Tensor:
    """The exported file run as a deployment runs it: onnxruntime on numpy, or the pt2 program in torch."""
    if fmt == "onnx":  # as written: onnxruntime's graph optimizations reorder float32 sums (checked apart below)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
    with torch.no_grad():
        return torch.export.load(path).module()(x)


def _assert_matches_eager(model, path: Path, fmt: str, grids: list[list[int]]) -> None:
    c = model.config
    for grid in grids:
        for batch in (1, 4):  # the export checked 1 and 3; 4 is new to it
            x = torch.randn(batch, *grid, c.in_timesteps, c.in_channels, generator=torch.Generator().manual_seed(7))
            with torch.no_grad():
                ref = model(x)
            out = _run_file(path, fmt, x)
            assert out.shape == ref.shape
            assert (out - ref).norm() <= 1e-5 * ref.norm(), (path.name, batch, grid)  # relative L2


@pytest.mark.parametrize(("name", "fmt", "kwargs"), CASES)
def test_every_family_exports_and_its_file_matches_the_eager_model(name, fmt, kwargs, tmp_path):
    torch.manual_seed(0)
    kwargs = dict(kwargs)
    grid = kwargs.pop("grid", None)  # a smaller grid than the preset's own, where it runs at any
    model = opzoo.load(name, **kwargs)
    model.train()  # exported in eval mode, and given back as it came
    report = opzoo.export_model(model, tmp_path / f"{name}.{fmt}", fmt, grid=grid)
    assert model.training
    model.eval()
    record = json.loads((tmp_path / f"{name}.{fmt}.json").read_text())
    assert record["sha256"] and record["checks"] and record["dynamic"]["batch"] is True
    assert all(check["rel_l2"] <= 1e-5 for check in record["checks"])
    if fmt == "onnx":
        assert record["checked_with"]["onnxruntime"] == ort.__version__ and record["checked_with"]["opset"] == "20"
        # onnxruntime's default optimizations, measured and said: float32 reordering, not another function
        drift = max(check["optimized_rel_l2"] for check in record["checks"])
        assert drift <= 1e-4 and bool(record["notes"]) == (drift > 1e-5)
    grids = sorted({tuple(check["grid"]) for check in record["checks"]})
    assert report.dynamic["grid"] == (name in DYNAMIC_GRID)
    assert len(grids) == (2 if report.dynamic["grid"] else 1)
    if not report.dynamic["grid"]:
        assert report.dynamic["grid_note"]  # said why
    else:  # a third grid, never checked by the export
        grids.append(tuple(n + 2 * report.dynamic["grid_step"] for n in grids[0]))
    _assert_matches_eager(model, tmp_path / f"{name}.{fmt}", fmt, [list(g) for g in grids])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{name}.{fmt}", f"{name}.{fmt}.json"])


class _ComplexGain(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(width, dtype=torch.cfloat))

    def forward(self, x):
        return x * self.gain.real


def test_a_layer_that_cannot_export_is_refused_in_one_line_naming_it(tmp_path):
    model = opzoo.load("fno-2d", width=8, modes=4, depth=1)
    model.pointwise[0] = nn.Sequential(model.pointwise[0], _ComplexGain(8))
    with pytest.raises(opzoo.ExportRefused) as info:
        opzoo.export_model(model, tmp_path / "fno.onnx")
    message = str(info.value)
    assert "\n" not in message and "pointwise.0.1 (_ComplexGain)" in message and "export form" in message
    assert list(tmp_path.iterdir()) == []


def test_a_model_that_refuses_its_input_grid_is_said_and_nothing_written(tmp_path):
    with pytest.raises(opzoo.ExportRefused, match=r"refuses its example input .* --grid"):
        opzoo.export_model(opzoo.load("gphyt-micro"), tmp_path / "g.pt2", "pt2", grid=[48, 48])
    assert list(tmp_path.iterdir()) == []


def _opzoo(*args, cwd):
    return subprocess.run([sys.executable, "-m", "opzoo", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_command_writes_name_onnx_checked_and_refuses_to_overwrite(tmp_path):
    done = _opzoo("export", "dpot-micro", "--format", "onnx", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "weights: dpot-micro pretrained" in done.stdout and "checked with onnxruntime" in done.stdout
    record = json.loads((tmp_path / "dpot-micro.onnx.json").read_text())
    assert record["weights"].startswith("dpot-micro pretrained, from package opzoo-fourier")  # what the file holds
    assert (tmp_path / "dpot-micro.onnx").is_file() and (tmp_path / "dpot-micro.onnx.json").is_file()
    _assert_matches_eager(opzoo.load("dpot-micro", pretrained=True), tmp_path / "dpot-micro.onnx", "onnx", [[32, 32]])
    again = _opzoo("export", "dpot-micro", "--format", "onnx", cwd=tmp_path)
    assert again.returncode != 0 and "exists: pass --force" in again.stderr and len(again.stderr.splitlines()) == 1


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    from opzoo.model_io import graph_export

    real = graph_export.metadata.version

    def version(name):
        if name == "onnxruntime":
            raise graph_export.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(graph_export.metadata, "version", version)
    with pytest.raises(opzoo.ConfigError, match=r"needs onnxruntime, which is not installed: pip install 'opzoo\[export\]'"):
        graph_export.require_export_dependencies("onnx")


def test_a_saved_model_directory_exports_by_its_path(tmp_path):
    torch.manual_seed(0)
    model = opzoo.load("fno-2d", width=8, modes=4, depth=1)
    model.save_pretrained(tmp_path / "repo")
    done = _opzoo("export", str(tmp_path / "repo"), "--format", "pt2", "--out", "step.pt2", "--grid", "16", "16",
                  cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "(a saved opzoo repo)" in done.stdout and "the grid, in steps of 2 per axis" in done.stdout
    assert "output y ['B', 16, 16, 1, 1]" in done.stdout  # the traced grid's, as the input's
    record = json.loads((tmp_path / "step.pt2.json").read_text())
    assert {tuple(c["grid"]) for c in record["checks"]} == {(16, 16), (18, 18)}
    _assert_matches_eager(model.eval(), tmp_path / "step.pt2", "pt2", [[20, 20]])


class _StableSort(nn.Module):
    def forward(self, x):
        return x + torch.argsort(x, dim=-1, stable=True).to(x.dtype)


def test_an_operator_onnx_lacks_is_refused_naming_its_layer(tmp_path):
    model = opzoo.load("fno-2d", width=8, modes=4, depth=1)
    model.pointwise[0] = nn.Sequential(model.pointwise[0], _StableSort())
    with pytest.raises(opzoo.ExportRefused) as info:
        opzoo.export_model(model, tmp_path / "f.onnx", grid=[16, 16])
    assert "the ONNX exporter fails in layer pointwise.0.1 (_StableSort)" in str(info.value)
    assert "aten.sort" in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


class _Overflow(nn.Module):
    def forward(self, x):
        return x * 1e38 * 1e38


def test_a_model_whose_output_is_not_finite_is_refused_before_any_trace(tmp_path):
    model = opzoo.load("fno-2d", width=8, modes=4, depth=1)
    model.pointwise[0] = nn.Sequential(model.pointwise[0], _Overflow())
    with pytest.raises(opzoo.ExportRefused, match=r"fno-2d gives a non-finite output on its example input "
                                                  r"\[2, 16, 16, 1, 1\].*cannot be checked"):
        opzoo.export_model(model, tmp_path / "f.onnx", grid=[16, 16])
    assert list(tmp_path.iterdir()) == []


def test_a_grid_of_the_wrong_rank_and_a_grid_for_a_repo_are_refused_in_one_line(tmp_path):
    done = _opzoo("export", "fno-2d", "--format", "pt2", "--no-pretrained", "--grid", "16", cwd=tmp_path)
    assert done.returncode != 0 and "the grid [16] (--resolution, --grid): fno-2d has 2 spatial axes" in done.stderr
    done = _opzoo("export", "fno-2d", "repo", "--grid", "16", "16", cwd=tmp_path)
    assert done.returncode != 0 and "--grid is the grid an ONNX or pt2 export is traced" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []
