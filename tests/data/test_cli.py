"""``opzoo data generate`` / ``opzoo data inspect``."""

import argparse
import subprocess
import sys

import h5py
import numpy as np
import pytest

from opzoo.cli import main
from opzoo.cli.data import add_commands
from opzoo.data import open_source, write_canonical


def test_generate_and_inspect(tmp_path, capsys):
    out = tmp_path / "ns.h5"
    code = main(["data", "generate", "ns", "--n", "2", "--res", "8", "--steps", "2", "--set", "record_dt=0.25",
                 "--out", str(out), "--quiet", "--seed", "3"])
    assert code == 0 and "wrote 2 trajectories" in capsys.readouterr().out
    src = open_source(out)
    assert src.shape == (2, 8, 8, 2, 1)
    with h5py.File(out) as f:
        assert f.attrs["seed"] == 3
    assert main(["data", "inspect", str(out)]) == 0
    text = capsys.readouterr().out
    for expected in ("layout:   canonical", "[N, X, Y, T, C] = [2, 8, 8, 2, 1]", "fields:   vorticity",
                     "T = 2 frames, dt = 0.25", "statistics over 2 of 2 samples", "vorticity"):
        assert expected in text


def test_inspect_statistics(tmp_path, capsys):
    data = np.zeros((2, 3, 4, 2, 2), np.float32)
    data[..., 0] = 1.0
    data[1, ..., 1] = 2.0
    write_canonical(tmp_path / "s.h5", data, ["one", "half"])
    with h5py.File(tmp_path / "s.h5", "a") as f:  # the writer refuses NaN, so add it afterwards
        f["data"][0, 0, 0, 0, 1] = np.nan
    assert main(["data", "inspect", str(tmp_path / "s.h5")]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert [float(v) for v in rows["one"]] == [1, 1, 1, 0, 0]
    low, high, mean, std, bad = (float(v) for v in rows["half"])
    assert (low, high, bad) == (0, 2, 1) and abs(mean - 48 / 47) < 1e-3  # 24 twos and 23 finite zeros


def test_errors_exit_nonzero_with_message(tmp_path, capsys):
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as f:
        f["stuff"] = np.zeros(3)
    assert main(["data", "inspect", str(bad)]) == 2
    assert "not in any known layout" in capsys.readouterr().err
    assert main(["data", "generate", "darcy", "--n", "1", "--out", str(tmp_path / "d.h5"), "--set", "bogus=1", "--quiet"]) == 2
    assert "bogus" in capsys.readouterr().err
    (tmp_path / "e.h5").write_bytes(b"x")
    assert main(["data", "generate", "darcy", "--n", "1", "--res", "8", "--out", str(tmp_path / "e.h5"), "--quiet"]) == 2
    assert "exists" in capsys.readouterr().err


def test_the_data_commands_plug_into_a_parser():
    parser = argparse.ArgumentParser(prog="opzoo")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["data", "generate", "swe", "--n", "4", "--out", "x.h5", "--device", "cuda"])
    assert args.kind == "swe" and args.n == 4 and args.device == "cuda" and callable(args.func)
    args = parser.parse_args(["data", "inspect", "x.h5", "--max-samples", "3"])
    assert args.max_samples == 3 and callable(args.func)


@pytest.mark.slow
def test_module_runs_standalone(tmp_path):
    out = tmp_path / "b.h5"
    result = subprocess.run(
        [sys.executable, "-m", "opzoo", "data", "generate", "burgers", "--n", "2", "--res", "32",
         "--steps", "2", "--out", str(out), "--quiet", "--threads", "1"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert open_source(out).shape == (2, 32, 3, 1)


def test_the_parser_names_every_generator_and_layout_without_importing_them():
    from opzoo.cli.data import GENERATOR_KINDS, LAYOUT_NAMES
    from opzoo.data import GENERATORS, LAYOUTS

    assert sorted(GENERATOR_KINDS) == sorted(GENERATORS) and sorted(LAYOUT_NAMES) == sorted(LAYOUTS)
