"""``opzoo benchmark``: the micro presets on tiny inputs, and the side-by-side run with upstream code that is
installed here (The Well's models, neuraloperator's FNO), at small dims."""

from __future__ import annotations

import csv
import math

import pytest
import torch

import opzoo
from opzoo.cli import main


def read_rows(path) -> dict[str, dict]:
    with open(path, newline="") as f:
        return {r["model"]: r for r in csv.DictReader(f)}


def test_benchmark_micro_presets_writes_csv_and_markdown(tmp_path, capsys):
    out = tmp_path / "bench.csv"
    assert main(["benchmark", "*pot-micro", "--resolution", "16", "16", "--repeats", "1", "--threads", "1",
                 "--out", str(out)]) == 0
    rows = read_rows(out)
    assert set(rows) == {"dpot-micro", "aot-pot-micro"}
    for name, row in rows.items():
        with torch.device("meta"):  # at 16x16 as fine-tuning adapts it: the position table of that grid
            n = sum(p.numel() for p in opzoo.load(name, img_size=[16, 16]).parameters())
        assert int(row["params"]) == n and row["resolution"] == "16x16"
        assert "img_size [32, 32] -> [16, 16], as fine-tuning at that grid adapts it" in row["note"]
        fwd, train = float(row["gflops_infer"]), float(row["gflops_train"])
        assert 0 < fwd < train < 4 * fwd  # backward costs about twice the forward
        assert float(row["activation_mib"]) > 0 and float(row["h100_bf16_ms_train_est"]) > 0
        assert float(row["cpu_ms_infer"]) > 0 and float(row["cpu_ms_train"]) > 0
    md = out.with_suffix(".md").read_text()
    assert "| dpot-micro | 16x16 |" in md and "estimate" in md
    assert "| aot-pot-micro |" in capsys.readouterr().out


def test_a_grid_bound_model_is_benchmarked_at_another_grid_as_fine_tuning_adapts_it(tmp_path):
    """GPhyT's position table is for its grid: `--resolution` builds it at the grid asked for (it failed)."""
    out = tmp_path / "bench.csv"
    assert main(["benchmark", "gphyt-micro", "--resolution", "16", "16", "--max-gflop", "0.0001",
                 "--out", str(out)]) == 0
    row = read_rows(out)["gphyt-micro"]
    assert row["resolution"] == "16x16" and float(row["gflops_train"]) > 0 and "failed" not in row["note"]
    assert "img_size [32, 32] -> [16, 16]" in row["note"]


def test_presets_over_the_flop_budget_are_counted_not_timed(tmp_path):
    out = tmp_path / "bench.csv"
    assert main(["benchmark", "dpot-micro", "--max-gflop", "0.001", "--out", str(out)]) == 0
    row = read_rows(out)["dpot-micro"]
    assert float(row["gflops_train"]) > 0 and row["cpu_ms_train"] == "" and "not timed" in row["note"]


WELL_FNO = "well-fno-turbulent_radiative_layer_2D"
SMALL_FNO = ["hidden_channels=8", "modes1=2", "modes2=2"]


def test_well_fno_side_by_side_with_the_wells_own_fno(tmp_path):
    pytest.importorskip("the_well.benchmark.models")
    out = tmp_path / "bench.csv"
    assert main(["benchmark", WELL_FNO, "--resolution", "16", "16", "--repeats", "1", "--out", str(out),
                 "--model-kwargs", "fourier_blocks=applied", *SMALL_FNO]) == 0
    row = read_rows(out)[WELL_FNO]
    assert row["upstream"].startswith("the_well ") and row["upstream"].endswith(" FNO")
    assert int(row["upstream_params"]) == int(row["params"])  # the same network
    assert not math.isnan(float(row["ratio_train"])) and float(row["upstream_cpu_ms_train"]) > 0
    # the preset as published drops its Fourier blocks, which the_well 1.2.0 does not: no ratio, and why
    assert main(["benchmark", WELL_FNO, "--resolution", "16", "16", "--repeats", "1", "--out", str(out),
                 "--model-kwargs", *SMALL_FNO]) == 0
    row = read_rows(out)[WELL_FNO]
    assert row["upstream"] == "" and "fourier_blocks=applied" in row["note"]


def test_fno_side_by_side_with_neuraloperator(tmp_path):
    pytest.importorskip("neuralop")
    out = tmp_path / "bench.csv"
    assert main(["benchmark", "fno-2d", "--resolution", "16", "16", "--repeats", "1", "--out", str(out),
                 "--model-kwargs", "width=8", "modes=4"]) == 0
    row = read_rows(out)["fno-2d"]
    assert row["upstream"].startswith("neuraloperator ") and float(row["ratio_train"]) > 0
    assert int(row["upstream_params"]) > 0
