"""Runs that hold under attack (issue 34): data fingerprints (F1, F2), the checkpoint's own record of its
config (F4), checkpoints without checksums (F5), locks that cannot be hijacked (F9, F10)."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from opzoo.training import Trainer, parse_run_config
from opzoo.training.run_dir import RunDirBusyError, RunDirError, RunDirLock

from .conftest import run_document, tiny_pot_args


def _doc(out, data, steps=4):
    return run_document(out, {"heat": str(data)}, model={"name": "pot", "args": tiny_pot_args()},
                        training={"steps": steps, "batch_size": 2, "log_every": 1},
                        checkpoint={"every": 2, "keep_last": 3}, seed=3)


def _fit(doc, **kw):
    return Trainer(parse_run_config(doc), show_progress=False).fit(**kw)


@pytest.fixture
def stopped_run(tmp_path, datasets):
    """A run of 4 steps stopped after its step-2 checkpoint, on its own copy of the data."""
    data = tmp_path / "heat.h5"
    shutil.copy(datasets["heat"], data)
    out = tmp_path / "run"
    _fit(_doc(out, data))
    gc.collect()  # the finished trainer's file handles
    shutil.rmtree(out / "checkpoints" / "step-00000004")
    (out / "finished.json").unlink()
    return out, data


def test_values_changed_under_a_run_refuse_its_resume(stopped_run):
    """F1: the values of a training file changed between a run and its resume."""
    out, data = stopped_run
    with h5py.File(data, "r+") as f:
        f["data"][0, 0, 0, 0, 0] += 1.0
    with pytest.raises(RunDirError, match=rf"{data}.*changed since this run started \(.*content"):
        _fit(_doc(out, data))


def test_a_changed_trajectory_count_refuses_the_resume(stopped_run):
    """F2: 48 -> 40 trajectories would move trained-on trajectories into the test split."""
    out, data = stopped_run
    with h5py.File(data, "r") as f:
        values, fields = f["data"][()], list(f.attrs["fields"])
    with h5py.File(data, "w") as f:
        f["data"] = values[:-2]
        f.attrs["fields"] = fields
    with pytest.raises(RunDirError, match=rf"trajectory count {len(values)} -> {len(values) - 2}"):
        _fit(_doc(out, data))


def test_the_same_file_touched_or_reached_by_another_path_resumes(stopped_run, monkeypatch):
    out, data = stopped_run
    os.utime(data)  # a new mtime, the same bytes: not a change
    monkeypatch.chdir(data.parent.parent)
    doc = _doc(out, Path(data.parent.name) / data.name)  # a relative path from elsewhere
    assert _fit(doc).resumed_from == 2


def test_an_edited_run_config_refuses_the_resume(stopped_run):
    """F4: run_config.json edited by hand (lr 1e-3 -> 5e-4) resumed under the new lr; the checkpoint's
    own state.json records the config it was trained under."""
    out, data = stopped_run
    config = json.loads((out / "run_config.json").read_text())
    old_lr = config["optimizer"]["lr"]
    config["optimizer"]["lr"] = old_lr / 2
    (out / "run_config.json").write_text(json.dumps(config))
    doc = _doc(out, data)
    doc["optimizer"] = {**doc.get("optimizer", {}), "lr": old_lr / 2}
    with pytest.raises(RunDirError, match=rf"disagrees with what checkpoint step-00000002 records .*optimizer.lr: "
                                          rf"{old_lr} -> {old_lr / 2}"):
        _fit(doc)


def test_a_checkpoint_without_checksums_is_not_trusted_silently(stopped_run):
    """F5: checksums.json deleted and a bit flipped in the weights resumed with an 'older opzoo' warning."""
    out, data = stopped_run
    ckpt = out / "checkpoints" / "step-00000002"
    (ckpt / "checksums.json").unlink()
    raw = bytearray((ckpt / "model.safetensors").read_bytes())
    raw[-1] ^= 1
    (ckpt / "model.safetensors").write_bytes(bytes(raw))
    with pytest.raises(RunDirError, match=r"no checksums.json\. opzoo writes it last.*cut off while being written.*"
                                          r"checkpoint.trust_unverified=true"):
        _fit(_doc(out, data))
    doc = _doc(out, data)
    doc["checkpoint"]["trust_unverified"] = True  # said explicitly: resumed, with a warning
    with pytest.warns(UserWarning, match="its files are not verified"):
        assert _fit(doc).resumed_from == 2


def test_a_planted_lock_symlink_is_never_written_through(tmp_path):
    """F9: a .lock symlink made the run overwrite the file it points to."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").symlink_to(victim)
    with pytest.raises(RunDirError, match=r"\.lock is a symbolic link .*victim.txt"):
        RunDirLock(run_dir).acquire()
    assert victim.read_text() == "precious"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(RunDirError, match="which does not exist"):
        RunDirLock(tmp_path / "dangling").acquire()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(RunDirError, match="is a file, not a directory"):
        RunDirLock(tmp_path / "afile").acquire()


def test_deleting_the_lock_file_does_not_free_the_run_directory(tmp_path):
    """F10: a .lock deleted during a run let a second run start and both wrote the same log."""
    run_dir = tmp_path / "run"
    code = ("import sys, time; from opzoo.training.run_dir import RunDirLock; lock = RunDirLock(sys.argv[1]); "
            "lock.acquire(); lock.record_holder(); print('locked', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        (run_dir / ".lock").unlink()
        with pytest.raises(RunDirBusyError, match="is in use by another run"):
            RunDirLock(run_dir).acquire()
    finally:
        proc.kill()
        proc.wait()
    time.sleep(0.05)
    lock = RunDirLock(run_dir)  # the holder is gone: free again
    lock.acquire()
    lock.release()


def test_a_file_truncated_mid_run_stops_it_naming_the_file(tmp_path, datasets):
    """F3: training went on over zeros after a file was truncated under it."""
    data = tmp_path / "heat.h5"
    shutil.copy(datasets["heat"], data)
    doc = _doc(tmp_path / "run", data, steps=6)
    trainer = Trainer(parse_run_config(doc), show_progress=False)
    size = data.stat().st_size
    with open(data, "r+b") as f:
        f.truncate(size // 2)
    from opzoo.data.errors import DataFormatError

    with pytest.raises(DataFormatError, match=rf"{data}: the file changed while it was being read"):
        trainer.fit()
    assert not (tmp_path / "run" / "model").exists()
    assert np.isfinite(size)
