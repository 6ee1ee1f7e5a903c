"""The degraded items of issue 34, each a one-line error or the right behaviour: data whose errors are
undefined or overflow (D8), a huge sparse weights file (D10), export over a user's files (D12), a plugin
calling sys.exit (D5), a missing DDP rank (D16), a full disk at run start (D15)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import opzoo
from opzoo.cli import main

from .conftest import heat_trajectories, write_canonical


def test_values_that_overflow_and_all_zero_data_are_named_in_eval(tmp_path, capsys):
    """D8: values of 1e38 gave `l2 nan` and all-zero data gave 1.8e9, exit 0."""
    heat = heat_trajectories(4, 32, 14, seed=1)
    huge = heat.copy()
    huge[1, 3, 3, 12, 0] = 1e38
    write_canonical(tmp_path / "huge.h5", huge, ["T"], "heat")
    zero = heat.copy()
    zero[2] = 0.0
    write_canonical(tmp_path / "zero.h5", zero, ["T"], "heat")
    for name, words in (("huge", "trajectory 1 holds 1 value(s) of magnitude >= 1e+18, which overflow float32"),
                        ("zero", "trajectory 2 is zero everywhere")):
        code = main(["eval", "dpot-micro", "--data", str(tmp_path / f"{name}.h5"), "--out", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    code = main(["eval", "dpot-micro", "--data", str(tmp_path / "zero.h5"), "--out", str(tmp_path / "z2"),
                 "--skip-bad-trajectories", "--plot-steps", "1"])
    assert code == 0 and "skipped 1 trajectory(ies)" in capsys.readouterr().out


def test_a_huge_sparse_weights_file_is_refused_by_its_header_before_hashing(tmp_path):
    """D10: a 200 GB sparse safetensors was hashed for over a minute before any header check."""
    big = opzoo.load("dpot-micro", width=64)
    repo = big.save_pretrained(tmp_path / "repo")  # weights of another width than the config says
    small = opzoo.load("dpot-micro").save_pretrained(tmp_path / "small")
    os.replace(small / "config.json", repo / "config.json")
    with open(repo / "model.safetensors", "r+b") as f:
        f.truncate(200 << 30)  # sparse: 200 GB that cost nothing on disk
    t0 = time.monotonic()
    with pytest.raises(opzoo.WeightsError):
        opzoo.load(str(repo))
    assert time.monotonic() - t0 < 10


def test_export_asks_before_replacing_a_users_files(tmp_path, capsys):
    """D12: `opzoo export` overwrote a user's README.md and config.json without asking."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "README.md").write_text("my notes")
    assert main(["export", "simple-op", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err and (out / "README.md").read_text() == "my notes"
    assert main(["export", "simple-op", str(out), "--force"]) == 0
    assert (out / "config.json").is_file()


@pytest.mark.slow
def test_a_plugin_calling_sys_exit_is_one_failed_plugin(tmp_path):
    """D5: a plugin raising SystemExit at import made every command exit silently."""
    from tests.core.fake_dists import write_dist
    from tests.core.subprocess_utils import run_python

    write_dist(tmp_path, "opzoo-quitter", "1.0", "opzoo_quitter", "import sys\nsys.exit(3)\n")
    done = run_python("from opzoo.cli import main; import sys; sys.exit(main(['plugins']))",
                      env={"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
                           "OPZOO_NO_INDEX": "1"})
    assert done.returncode == 0, done.stderr
    assert "FAILED opzoo-quitter 1.0: import failed: SystemExit: 3" in done.stdout
    assert "opzoo-fourier" in done.stdout


def test_a_missing_rank_is_one_line_naming_the_timeout(tmp_path, datasets, missing_rank, capsys):
    """D16: a rank that does not answer ended the job with a raw gloo traceback."""
    import yaml

    from .conftest import run_document, tiny_pot_args
    doc = run_document(tmp_path / "run", {"heat": datasets["heat"]}, model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 2, "batch_size": 2}, distributed={"timeout_s": 1, "backend": "gloo"})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    assert main(["pretrain", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "distributed run failed" in err and "distributed.timeout_s" in err


def test_a_full_disk_names_where_it_was_writing(capsys):
    """D15: a disk full at run start said 'writing ?'."""
    import errno
    import types

    from opzoo.console import run_command

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device")

    assert run_command(types.SimpleNamespace(command="finetune", out="runs/x", func=full)) == 2
    assert "opzoo finetune: error: disk full writing runs/x" in capsys.readouterr().err
    assert np.isfinite(1.0)
