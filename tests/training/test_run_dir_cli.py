"""Run directories through the real CLI (``python -m opzoo``) in subprocesses: locks, explicit resume,
finished runs, checksums, NaN data named, a full disk, SIGTERM. Each message is asserted on the
words that matter: the file, trajectory, key, PID.

A CLI start costs ~7 s here (importing torch, timm and the plugins), so the runs are tiny (a
16-wide POT, 6 steps) and shared where a test does not change them. Only the reference run and
the changed-key / finished-run test run by default; the others are marked slow (``make
test-slow``, ~2 min here). test_run_dir.py and test_divergence.py cover the same paths in-process,
fast.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from opzoo.training.checkpoint import SLEEP_ENV

from ..small_disk import small_disk as small_disk_at
from .conftest import run_cli, run_document, tiny_pot_args, train_losses, write_canonical, write_json

STEPS = 6


def _doc(out, data, lr=3e-3):
    doc = run_document(out, {"heat": data}, model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": STEPS, "batch_size": 2, "log_every": 1},
                       checkpoint={"every": 2, "keep_last": 3}, optimizer={"lr": lr}, seed=3)
    doc["data"]["max_test_trajectories"] = 2
    return doc


def opzoo(*args, env=None, timeout=300):
    return run_cli(*args, env=env, timeout=timeout, module="opzoo")


def one_line(stderr: str) -> str:
    """The last stderr line, after checking there is no traceback (warnings may precede it)."""
    assert "Traceback" not in stderr, stderr
    return stderr.strip().splitlines()[-1]


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _wait_for(predicate, proc, timeout=120.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended early: {proc.stderr.read()}")
        time.sleep(0.05)
    raise AssertionError("timed out")


def _popen(cfg, env=None):
    return subprocess.Popen([sys.executable, "-m", "opzoo", "pretrain", str(cfg)],
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _writing(ckpts: Path) -> bool:
    return ckpts.is_dir() and any((p / "WRITING").exists() for p in ckpts.glob(".step-*.opzoo-tmp-*"))


@pytest.fixture(scope="module")
def heat(datasets):
    return datasets["heat"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, heat):
    """An uninterrupted run: (config path, run dir)."""
    tmp = tmp_path_factory.mktemp("ref")
    cfg = write_json(tmp / "ref.json", _doc(tmp / "run", heat))
    done = opzoo("pretrain", str(cfg))
    assert done.returncode == 0, done.stderr
    return cfg, tmp / "run"


@pytest.mark.slow
def test_second_run_on_a_locked_directory_fails_naming_the_holder(tmp_path, heat, reference):
    run_dir = tmp_path / "run"
    first_cfg = write_json(tmp_path / "a.json", _doc(run_dir, heat))
    first = _popen(first_cfg, {SLEEP_ENV: "2:60"})  # pauses inside its step-2 checkpoint write
    try:
        _wait_for(lambda: _writing(run_dir / "checkpoints"), first)
        other = write_json(tmp_path / "b.json", _doc(run_dir, heat, lr=1e-3))
        second = opzoo("pretrain", str(other))
        assert second.returncode == 2
        line = one_line(second.stderr)
        assert f"{run_dir} is in use by another run: PID {first.pid} on host {socket.gethostname()}" in line
        # the second process removed nothing of the first's, and wrote nothing
        assert _writing(run_dir / "checkpoints")
        assert json.loads((run_dir / "run_config.json").read_text())["optimizer"]["lr"] == 3e-3
    finally:
        first.kill()
        first.wait()
    # the first process died mid-write: its temp dir is stale; the same command cleans it and runs
    stale = [p.name for p in (run_dir / "checkpoints").glob(".step-*.opzoo-tmp-*")]
    assert stale and all(f"-{first.pid}@" in n for n in stale)
    again = opzoo("pretrain", str(first_cfg))
    assert again.returncode == 0, again.stderr
    assert "starting again from step 0" in again.stdout
    assert not list((run_dir / "checkpoints").glob(".*opzoo-tmp-*"))
    assert train_losses(run_dir) == train_losses(reference[1])


@pytest.mark.slow  # 12 s of subprocesses; test_run_dir.py checks the same refusal in-process
def test_changed_key_is_refused_and_a_finished_run_is_left_alone(tmp_path, heat, reference):
    cfg, run_dir = reference
    before = snapshot(run_dir)
    changed = opzoo("pretrain", str(cfg), "--set", "optimizer.lr=0.001", "training.steps=12", "seed=4")
    assert changed.returncode == 2
    line = one_line(changed.stderr)
    assert "holds a run started with another config" in line
    for key in ("optimizer.lr: 0.003 -> 0.001", "training.steps: 6 -> 12", "seed: 3 -> 4"):
        assert key in line, line
    assert "--new" in line
    # the same config, and a harmless change: the run is finished, and nothing is touched
    finished = opzoo("pretrain", str(cfg), "--set", "training.log_every=3")
    assert finished.returncode == 0, finished.stderr
    assert f"{run_dir} holds this run, finished: {STEPS} of {STEPS} steps done" in finished.stdout
    assert "resuming" not in finished.stdout
    assert snapshot(run_dir) == before


@pytest.mark.slow
def test_new_moves_the_old_run_aside(tmp_path, heat, reference):
    cfg, ref_dir = reference
    run_dir = tmp_path / "run"
    shutil.copytree(ref_dir, run_dir)
    doc = _doc(run_dir, heat, lr=1e-3)
    fresh = opzoo("pretrain", str(write_json(tmp_path / "new.json", doc)), "--new")
    assert fresh.returncode == 0, fresh.stderr
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    assert len(moved) == 1 and f"moved the previous contents of {run_dir} to {moved[0]}" in fresh.stdout
    assert train_losses(moved[0]) == train_losses(ref_dir)  # the old run, intact
    assert json.loads((run_dir / "run_config.json").read_text())["optimizer"]["lr"] == 1e-3
    assert train_losses(run_dir) != train_losses(ref_dir)


@pytest.mark.slow
def test_zeroed_bytes_in_the_newest_checkpoint_fall_back_to_the_previous(tmp_path, reference):
    cfg, ref_dir = reference
    run_dir = tmp_path / "run"
    shutil.copytree(ref_dir, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "step-00000006")  # the run is at step 6 of 6 minus its last checkpoint
    weights = run_dir / "checkpoints" / "step-00000004" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-400:-200] = bytes(200)  # inside the tensor data: safetensors still parses the file
    weights.write_bytes(bytes(data))
    doc = json.loads(Path(cfg).read_text())
    doc["output_dir"] = str(run_dir)
    resumed = opzoo("pretrain", str(write_json(tmp_path / "cfg.json", doc)))
    assert resumed.returncode == 0, resumed.stderr
    assert f"skipping checkpoint: {weights}: sha256" in resumed.stderr
    assert f"using the previous good one, {run_dir / 'checkpoints' / 'step-00000002'}" in resumed.stderr
    assert f"resuming from step 2 of {STEPS} (checkpoint {run_dir / 'checkpoints' / 'step-00000002'})" in resumed.stdout
    assert train_losses(run_dir) == train_losses(ref_dir)


@pytest.mark.slow
def test_sigterm_stops_with_one_line_and_the_same_command_resumes_exactly(tmp_path, heat, reference):
    run_dir = tmp_path / "run"
    cfg = write_json(tmp_path / "run.json", _doc(run_dir, heat))
    proc = _popen(cfg, {SLEEP_ENV: "2:3"})
    try:
        _wait_for(lambda: _writing(run_dir / "checkpoints"), proc)
        proc.send_signal(signal.SIGTERM)  # mid-run, inside the step-2 checkpoint write
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    last = run_dir / "checkpoints" / "step-00000002"
    assert one_line(err) == f"SIGTERM: stopped at step 2; last checkpoint {last}; re-run the same command to resume"
    resumed = opzoo("pretrain", str(cfg))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from step 2 of {STEPS} (checkpoint {last})" in resumed.stdout
    assert train_losses(run_dir) == train_losses(reference[1])


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory, heat):
    """The heat file with NaN in trajectory 22 (of 24): in the test split of a run (the last 3)."""
    data = h5py.File(heat, "r")["data"][:]
    data[22, 2:4, 5, 7:9, 0] = np.nan  # 4 values
    data[22, 0, 0, 10, 0] = np.inf  # and 1 more
    return write_canonical(tmp_path_factory.mktemp("bad") / "poisoned.h5", data, ["u"], "heat")


@pytest.mark.slow
def test_nan_in_test_data_stops_pretrain_before_training(tmp_path, poisoned):
    run_dir = tmp_path / "run"
    doc = _doc(run_dir, poisoned)
    doc["data"]["max_test_trajectories"] = None
    done = opzoo("pretrain", str(write_json(tmp_path / "cfg.json", doc)))
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert f"{poisoned}: trajectory 22 holds 5 NaN/Inf value(s) (first in frame 7" in line
    assert "nothing was trained" in line
    assert not run_dir.exists()


@pytest.mark.slow
def test_nan_in_eval_data_is_named_or_skipped(tmp_path, poisoned):
    import opzoo as oz

    model = oz.create_model("pot", **tiny_pot_args(channels=1))
    repo = model.save_pretrained(tmp_path / "repo")
    refused = opzoo("eval", str(repo), "--data", str(poisoned), "--out", str(tmp_path / "e1"))
    assert refused.returncode == 2
    line = one_line(refused.stderr)
    assert f"{poisoned}: trajectory 22 holds 5 NaN/Inf value(s)" in line and "--skip-bad-trajectories" in line
    assert not (tmp_path / "e1").exists()
    skipped = opzoo("eval", str(repo), "--data", str(poisoned), "--out", str(tmp_path / "e2"),
                    "--skip-bad-trajectories")
    assert skipped.returncode == 0, skipped.stderr
    assert "poisoned: skipped 1 trajectory(ies) with NaN/Inf values: 22 (5 values)" in skipped.stdout
    result = json.loads((tmp_path / "e2" / "eval.json").read_text())["datasets"]["poisoned"]
    assert result["n_trajectories"] == 23 and result["skipped_trajectories"] == [22]
    assert np.isfinite(result["l2_full"])


@pytest.fixture
def small_disk(tmp_path):
    with small_disk_at(tmp_path / "disk", "48k") as disk:
        yield disk


@pytest.mark.slow
def test_disk_full_while_checkpointing_and_exporting_is_one_line(tmp_path, heat, small_disk):
    run_dir = small_disk / "run"
    done = opzoo("pretrain", str(write_json(tmp_path / "cfg.json", _doc(run_dir, heat))))
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("opzoo pretrain: error: disk full writing ")
    assert "/checkpoints/.step-00000002.opzoo-tmp-new-" in line and "(checkpoint of step 2" in line
    assert "no earlier checkpoint exists; free space and re-run the same command to resume" in line
    assert not list((run_dir / "checkpoints").glob(".*opzoo-tmp-*"))  # nothing half-written stays
    for p in small_disk.rglob("*"):  # make room: the export below fails on its own
        if p.is_file() and p.name == "log.jsonl":
            p.unlink()
    exported = opzoo("export", "simple-op", str(small_disk / "repo"))
    assert exported.returncode == 2
    line = one_line(exported.stderr)
    assert line.startswith(f"opzoo export: error: disk full writing {small_disk / 'repo'}")
    assert f"any earlier repo in {small_disk / 'repo'} is unchanged" in line
