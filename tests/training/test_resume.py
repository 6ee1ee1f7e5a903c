"""Checkpoints: atomic directories, keep-last-k, SIGKILL (also mid-write) and exact resume."""

import os
import signal
import subprocess
import sys
import time

import pytest

from opzoo.training import latest_checkpoint, list_checkpoints, read_checkpoint
from opzoo.training.checkpoint import SLEEP_ENV

from .conftest import run_cli, run_document, tiny_pot_args, train_losses, write_json


def _doc(out, datasets, steps=8):
    return run_document(out, datasets, model={"name": "pot", "args": tiny_pot_args()},
                        training={"steps": steps, "batch_size": 4, "log_every": 1, "noise_scale": 5e-4},
                        checkpoint={"every": 2, "keep_last": 2}, optimizer={"lr": 3e-3}, seed=3)


def _wait_for(predicate, timeout=120.0, proc=None):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"run ended early: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def reference(tmp_path_factory, datasets):
    """An uninterrupted 8-step run (in a subprocess, like the runs it is compared with)."""
    tmp = tmp_path_factory.mktemp("ref")
    ref = run_cli("pretrain", str(write_json(tmp / "ref.json", _doc(tmp / "run", datasets))))
    assert ref.returncode == 0, ref.stderr
    return tmp / "run"


@pytest.mark.slow  # 10 s: its reference run is a subprocess (the slow resume tests share it)
def test_uninterrupted_run_keeps_last_k(reference):
    assert [s for s, _ in train_losses(reference)] == list(range(1, 9))
    assert [p.name for p in list_checkpoints(reference / "checkpoints")] == ["step-00000006", "step-00000008"]


@pytest.mark.slow
def test_kill_during_checkpoint_write_then_resume_reproduces(tmp_path, datasets, reference):
    run_dir = tmp_path / "run"

    cfg = write_json(tmp_path / "run.json", _doc(run_dir, datasets))
    env = {**os.environ, "OMP_NUM_THREADS": "1", SLEEP_ENV: "4:60"}
    proc = subprocess.Popen([sys.executable, "-m", "opzoo", "pretrain", str(cfg)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ckpts = run_dir / "checkpoints"
    try:
        writing = lambda: any((p / "WRITING").exists() for p in ckpts.glob(".step-*.opzoo-tmp-*")) if ckpts.is_dir() else False
        assert _wait_for(writing, proc=proc), "the checkpoint writer never reached its mid-write pause"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    # the half-written step-4 checkpoint is only a temp dir; the latest complete one reads back
    assert any(p.name.startswith(".step-00000004.opzoo-tmp-") for p in ckpts.iterdir())
    assert [p.name for p in list_checkpoints(ckpts)] == ["step-00000002"]
    path, files = latest_checkpoint(ckpts)
    assert files["state.json"]["step"] == 2 and path.name == "step-00000002"

    resumed = run_cli("pretrain", str(cfg))
    assert resumed.returncode == 0, resumed.stderr
    assert train_losses(run_dir) == train_losses(reference)  # bit-exact, steps 1..8
    assert not any(".opzoo-tmp-" in p.name for p in ckpts.iterdir())


@pytest.mark.slow
def test_kill_between_checkpoints_then_resume_reproduces(tmp_path, datasets, reference):
    run_dir = tmp_path / "run"
    cfg = write_json(tmp_path / "run.json", _doc(run_dir, datasets))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "opzoo", "pretrain", str(cfg)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = run_dir / "log.jsonl"
    try:
        # step 5 is logged after the step-4 checkpoint: kill in the middle of training
        assert _wait_for(lambda: log.exists() and '"step": 5' in log.read_text(), proc=proc)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert run_cli("pretrain", str(cfg)).returncode == 0
    assert train_losses(run_dir) == train_losses(reference)


@pytest.mark.slow
def test_unreadable_latest_falls_back(tmp_path, reference):
    import shutil

    shutil.copytree(reference / "checkpoints", tmp_path / "checkpoints")
    ckpts = list_checkpoints(tmp_path / "checkpoints")
    (ckpts[-1] / "optimizer.safetensors").write_bytes(b"garbage")  # e.g. a disk fault after the rename
    with pytest.warns(UserWarning, match="optimizer.safetensors"):
        path, _ = latest_checkpoint(tmp_path / "checkpoints")
    assert path == ckpts[-2]
    files = read_checkpoint(ckpts[-2])
    assert set(files["model.safetensors"]) and files["state.json"]["step"] == 6
