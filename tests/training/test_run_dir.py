"""Run directories in-process (fast): the lock, temp-dir ownership, explicit resume, checksums,
SIGTERM, the DDP timeout, shape and length checks, pretrained_cfg validation, saved-repo checksums.
test_run_dir_cli.py runs the same paths through the CLI in subprocesses."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import opzoo
from opzoo.files import clean_dead_temporaries, temporaries
from opzoo.training import OptimizerHook, Trainer, parse_run_config
from opzoo.training.checkpoint import list_checkpoints, write_checkpoint
from opzoo.training.run_dir import HARMLESS_KEYS, RunDirBusyError, RunDirError, RunDirLock, config_changes
from opzoo.training.stop import RunStopped

from ..small_disk import small_disk
from .conftest import run_document, tiny_pot_args, train_losses, write_canonical


def _doc(out, datasets, steps=4, **training):
    return run_document(out, {"heat": datasets["heat"]}, model={"name": "pot", "args": tiny_pot_args()},
                        training={"steps": steps, "batch_size": 2, "log_every": 1, **training},
                        checkpoint={"every": 2, "keep_last": 3}, seed=3)


def _fit(doc, **kw):
    return Trainer(parse_run_config(doc), show_progress=False).fit(**kw)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, datasets):
    """A finished 4-step run (checkpoints 2 and 4)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    _fit(_doc(out, datasets))
    return out


def _unfinished_copy(finished: Path, to: Path) -> Path:
    shutil.copytree(finished, to)
    shutil.rmtree(to / "checkpoints" / "step-00000004")
    return to


# ---- the lock -----------------------------------------------------------------------------------
def test_a_held_lock_refuses_a_second_run_naming_pid_and_host(tmp_path, datasets, finished):
    run_dir = _unfinished_copy(finished, tmp_path / "run")
    holder = RunDirLock(run_dir)
    holder.acquire()
    holder.record_holder()
    try:
        before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
        with pytest.raises(RunDirBusyError, match=f"is in use by another run: PID {os.getpid()} on host "
                                                  f"{socket.gethostname()}, started "):
            _fit(_doc(run_dir, datasets))
        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before
    finally:
        holder.release()
    assert _fit(_doc(run_dir, datasets)).resumed_from == 2  # released: the run resumes


def test_a_lock_of_another_process_is_named(tmp_path):
    """The holder is a plain process (flock on the same file, the documented record format)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    code = ("import fcntl, json, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, json.dumps({'pid': os.getpid(), 'host': 'node7'}).encode()); "
            "print('locked', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run_dir / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirBusyError, match=f"PID {proc.pid} on host node7"):
            RunDirLock(run_dir).acquire()
    finally:
        proc.kill()
        proc.wait()
    lock = RunDirLock(run_dir)  # the kernel released it with the process
    lock.acquire()
    lock.release()


def test_only_dead_writers_temp_dirs_are_removed(tmp_path):
    host = socket.gethostname()
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "30"])
    try:
        names = {"dead": f".step-00000002.opzoo-tmp-new-{dead.pid}@{host}-0a1b2c3d",
                 "live": f".step-00000004.opzoo-tmp-new-{live.pid}@{host}-0a1b2c3d",
                 "other": f".step-00000004.opzoo-tmp-new-{dead.pid}@elsewhere-0a1b2c3d",
                 "mine": f".step-00000006.opzoo-tmp-new-{os.getpid()}@{host}-0a1b2c3d",
                 # the names checkpoints had before issue 44 (with and without the host) are cleaned the same way
                 "old dead": f".tmp-step-00000002-{dead.pid}@{host}", "older dead": f".tmp-step-00000002-{dead.pid}",
                 "old live": f".tmp-step-00000008-{live.pid}@{host}"}
        for n in names.values():
            (tmp_path / n).mkdir()
        (tmp_path / "step-00000001").mkdir()  # a checkpoint: not a temporary
        clean_dead_temporaries(tmp_path)
        left = temporaries(tmp_path)
    finally:
        live.kill()
        live.wait()
    assert sorted(p.name for p in left) == sorted(names[k] for k in ("live", "other", "mine", "old live"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([p.name for p in left] + ["step-00000001"])


# ---- explicit resume ----------------------------------------------------------------------------
def test_config_changes_are_listed_with_old_and_new_values():
    old = {"seed": 0, "optimizer": {"lr": 1e-3}, "data": {"datasets": [{"path": "a.h5"}]}, "training": {"log_every": 1}}
    new = {"seed": 0, "optimizer": {"lr": 2e-3}, "data": {"datasets": [{"path": "a.h5"}, {"path": "b.h5"}]},
           "training": {"log_every": 5}, "distributed": {"timeout_s": 600.0}}
    assert config_changes(old, new, {"distributed.timeout_s": 600.0}) == [
        ("data.datasets[1].path", "(absent)", "b.h5"), ("optimizer.lr", 1e-3, 2e-3), ("training.log_every", 1, 5)]
    assert "training.log_every" in HARMLESS_KEYS and "optimizer.lr" not in HARMLESS_KEYS


def test_resume_prints_its_step_and_allows_harmless_changes_only(tmp_path, datasets, finished, capsys):
    run_dir = _unfinished_copy(finished, tmp_path / "run")
    with pytest.raises(RunDirError) as info:
        _fit(_doc(run_dir, datasets, batch_size=4, noise_scale=1e-3))
    assert "Changed: training.batch_size: 2 -> 4; training.noise_scale: 0.0005 -> 0.001. Restore" in str(info.value)
    capsys.readouterr()
    result = _fit(_doc(run_dir, datasets, log_every=2, eval_every=4))
    out = capsys.readouterr().out
    assert f"resuming from step 2 of 4 (checkpoint {run_dir / 'checkpoints' / 'step-00000002'})" in out
    assert "changed since the start (harmless): training.eval_every: null -> 4; training.log_every: 1 -> 2" in out
    assert result.resumed_from == 2 and train_losses(run_dir) == train_losses(finished)
    assert json.loads((run_dir / "run_config.json").read_text())["training"]["log_every"] == 1  # the started config


def test_a_directory_with_other_files_or_resume_false_is_refused(tmp_path, datasets, finished):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match=r"notes is not empty and holds no opzoo run \(it has notes.txt\); pass --new"):
        _fit(_doc(tmp_path / "notes", datasets))
    run_dir = _unfinished_copy(finished, tmp_path / "run")
    doc = _doc(run_dir, datasets)
    doc["checkpoint"]["resume"] = False
    with pytest.raises(RunDirError, match="holds a run and checkpoint.resume is false; pass --new"):
        _fit(doc)
    result = _fit(doc, new=True)  # moved aside, started over
    assert result.resumed_from is None
    assert (tmp_path / "notes" / "notes.txt").read_text() == "mine"
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    assert len(aside) == 1 and (aside[0] / "checkpoints" / "step-00000002").is_dir()


def test_zeroed_bytes_in_the_newest_checkpoint_resume_from_the_previous(tmp_path, datasets, finished, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    (run_dir / "finished.json").unlink()  # as if killed during the final evaluation
    weights = run_dir / "checkpoints" / "step-00000004" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-300:-100] = bytes(200)
    weights.write_bytes(bytes(data))
    previous = run_dir / "checkpoints" / "step-00000002"
    with pytest.warns(UserWarning, match=f"skipping checkpoint: {weights}: sha256 .*; using the previous good one, "
                                         f"{previous}"):
        assert _fit(_doc(run_dir, datasets)).resumed_from == 2
    assert f"resuming from step 2 of 4 (checkpoint {previous})" in capsys.readouterr().out
    assert train_losses(run_dir) == train_losses(finished)


def test_no_verifiable_checkpoint_refuses_naming_each_file(tmp_path, datasets, finished):
    run_dir = _unfinished_copy(finished, tmp_path / "run")
    (run_dir / "checkpoints" / "step-00000002" / "state.json").write_text("{}")
    with pytest.raises(RunDirError) as info:
        _fit(_doc(run_dir, datasets))
    assert f"{run_dir / 'checkpoints' / 'step-00000002' / 'state.json'}: sha256" in str(info.value)
    assert "no checkpoint passes verification" in str(info.value)


# ---- SIGTERM ------------------------------------------------------------------------------------
class SignalAt(OptimizerHook):
    """Sends this process ``signum`` after optimizer step ``fire_at`` (0-based; -1: never)."""

    fire_at, signum = -1, signal.SIGTERM

    def after_optimizer_step(self, ctx):
        if ctx.step == SignalAt.fire_at:
            os.kill(os.getpid(), SignalAt.signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_checkpoints_the_step_reached_and_resume_is_exact(tmp_path, datasets, signum):
    registry = opzoo.get_registry()
    # the handlers in place before the run (SIGINT is ignored, not Python's, when the tests were started in the
    # background by a non-interactive shell)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    with registry.owned_by("tests"):
        registry.register_optimizer_hook("test-signal", SignalAt)
    try:
        def doc(out):
            d = _doc(out, datasets, steps=6)
            d["checkpoint"]["every"] = 4
            d["optimizer"] = {"hooks": [{"name": "test-signal"}]}
            return d

        _fit(doc(tmp_path / "ref"))
        SignalAt.fire_at, SignalAt.signum = 2, signum
        with pytest.raises(RunStopped) as info:
            _fit(doc(tmp_path / "run"))
        SignalAt.fire_at = -1
    finally:
        SignalAt.fire_at = -1
        registry.forget("tests")
    ckpt = tmp_path / "run" / "checkpoints" / "step-00000003"
    name = signal.Signals(signum).name
    assert str(info.value) == f"{name}: stopped at step 3; last checkpoint {ckpt}; re-run the same command to resume"
    assert info.value.exit_code == 128 + signum and ckpt.is_dir()
    assert {s: signal.getsignal(s) for s in before} == before  # handlers restored
    with registry.owned_by("tests"):
        registry.register_optimizer_hook("test-signal", SignalAt)
    try:
        assert _fit(doc(tmp_path / "run")).resumed_from == 3
    finally:
        registry.forget("tests")
    assert train_losses(tmp_path / "run") == train_losses(tmp_path / "ref")


# ---- DDP timeout --------------------------------------------------------------------------------
def test_distributed_timeout_bounds_the_wait_for_a_missing_rank(tmp_path, datasets, missing_rank):
    import time
    doc = _doc(tmp_path / "run", datasets)
    doc["distributed"] = {"timeout_s": 1, "backend": "gloo"}
    cfg = parse_run_config(doc)
    assert parse_run_config(_doc(tmp_path / "x", datasets)).distributed.timeout_s == 600
    t0 = time.perf_counter()
    with pytest.raises(Exception, match="1/2 clients joined"):
        Trainer(cfg, show_progress=False)
    assert time.perf_counter() - t0 < 30  # a 1 s timeout: measured 2.0 s with the trainer's set-up; the default is 600


# ---- shapes and lengths -------------------------------------------------------------------------
def test_modes_and_patch_sizes_that_do_not_fit_the_data_are_refused_before_writing(tmp_path, datasets):
    line = np.sin(np.linspace(0, 6, 16 * 14 * 8)).reshape(8, 16, 14, 1).astype(np.float32)
    path = write_canonical(tmp_path / "line.h5", line, ["u"], "wave")
    doc = run_document(tmp_path / "fno", {"line": path}, model={"name": "fno-1d", "args": {"modes": 12}})
    doc["data"]["resolution"] = None
    with pytest.raises(opzoo.ConfigError, match=r"line.h5 \(the run's resolution\): fno-1d cannot run on data at "
                                                r"resolution \[16\] \(T_in=1, C=1\): SpectralConv1d with modes=12"):
        Trainer(parse_run_config(doc), show_progress=False)
    doc = run_document(tmp_path / "pot", datasets, model={"name": "pot", "args": tiny_pot_args()})
    doc["data"]["resolution"] = [18, 18]
    with pytest.raises(opzoo.ConfigError, match=r"data.resolution: resolution \[18, 18\] is not divisible by "
                                                r"PotBackbone's patch_size 4|patch_size 4"):
        Trainer(parse_run_config(doc), show_progress=False)
    assert not (tmp_path / "fno").exists() and not (tmp_path / "pot").exists()


def _cli(capsys, *args):
    from opzoo.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_short_files_are_one_line_errors_in_eval_and_rollout(tmp_path, datasets, capsys):
    model = opzoo.create_model("pot", **tiny_pot_args(channels=1))
    repo = str(model.save_pretrained(tmp_path / "repo"))
    data = h5py.File(datasets["heat"], "r")["data"][:4, :, :, :4]  # 4 frames: T_in=4 leaves none
    short = str(write_canonical(tmp_path / "short.h5", data, ["u"], "heat"))
    code, _, err = _cli(capsys, "eval", repo, "--data", short, "--out", str(tmp_path / "e"))
    assert code == 2 and err.strip() == (f"opzoo eval: error: {short}: trajectories have 4 frames, too short for "
                                         f"T_in=4 input frames plus at least 1 to predict (need >= 5)")
    code, _, err = _cli(capsys, "rollout", repo, "--data", short)
    assert code == 2 and "too short for T_in=4" in err and len(err.strip().splitlines()) == 1
    code, _, err = _cli(capsys, "eval", repo, "--data", str(datasets["heat"]), "--horizon", "20", "--out", str(tmp_path / "e"))
    assert code == 2 and f"{datasets['heat']}: --horizon=20 needs T_in + 20 = 24 frames per trajectory; the file " \
                         f"has 14 (at most --horizon=10)" in err
    empty = str(write_canonical(tmp_path / "empty.h5", np.zeros((0, 16, 16, 14, 1), np.float32), ["u"], "heat"))
    code, _, err = _cli(capsys, "eval", repo, "--data", empty, "--out", str(tmp_path / "e"))
    assert code == 2 and err.strip().startswith(f"opzoo eval: error: {empty}: dataset 'data' has shape [0, 16, 16, 14, 1]: "
                                                f"an axis of size 0 holds no data")
    assert not (tmp_path / "e").exists()


def test_nan_in_eval_and_rollout_data_is_named_or_skipped(tmp_path, datasets, capsys):
    repo = str(opzoo.create_model("pot", **tiny_pot_args(channels=1)).save_pretrained(tmp_path / "repo"))
    data = h5py.File(datasets["heat"], "r")["data"][:6]
    data[4, 0, :3, 12, 0] = np.nan
    bad = str(write_canonical(tmp_path / "bad.h5", data, ["u"], "heat"))
    code, _, err = _cli(capsys, "eval", repo, "--data", bad, "--out", str(tmp_path / "e"))
    assert code == 2 and f"{bad}: trajectory 4 holds 3 NaN/Inf value(s) (first in frame 12 of the 14 checked)" in err
    assert not (tmp_path / "e").exists()
    code, out, err = _cli(capsys, "eval", repo, "--data", bad, "--out", str(tmp_path / "e"), "--horizon", "7")
    assert code == 0, err  # frames 0..10 only: trajectory 4 is finite there
    code, out, err = _cli(capsys, "eval", repo, "--data", bad, "--out", str(tmp_path / "e"), "--skip-bad-trajectories")
    assert code == 0 and "bad: skipped 1 trajectory(ies) with NaN/Inf values: 4 (3 values)" in out
    assert "bad: l2 full" in out and "over 5 trajectories" in out
    code, _, err = _cli(capsys, "rollout", repo, "--data", bad, "--index", "4")
    assert code == 2 and f"{bad}: trajectory 4 holds 3 NaN/Inf value(s) (first in frame 12); choose another --index" in err
    code, out, _ = _cli(capsys, "rollout", repo, "--data", bad, "--index", "3")
    assert code == 0 and "rolled out 10 steps from trajectory 3" in out


# ---- pretrained_cfg and saved repos -------------------------------------------------------------
@pytest.mark.parametrize("bad, words", [
    ({"resolution": "large"}, "pretrained_cfg.resolution: expected"),
    ({"channels": -2}, "pretrained_cfg.channels: must be >= 1, got -2"),
    ({"colour": "red"}, "unknown field(s) 'colour'"),
    ({"in_timesteps": 2.5}, "pretrained_cfg.in_timesteps: expected"),
])
def test_invalid_pretrained_cfg_is_refused_naming_file_and_key(tmp_path, bad, words, capsys):
    repo = opzoo.create_model("pot", **tiny_pot_args()).save_pretrained(tmp_path / "repo")
    doc = json.loads((repo / "config.json").read_text())
    doc["pretrained_cfg"].update(bad)
    (repo / "config.json").write_text(json.dumps(doc))
    with pytest.raises(opzoo.ConfigError) as info:
        opzoo.from_pretrained(repo)
    assert str(info.value).startswith(f"{repo / 'config.json'}: pretrained_cfg") and words in str(info.value)
    code, _, err = _cli(capsys, "info", str(repo))
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err


def test_every_shipped_config_json_has_a_valid_pretrained_cfg():
    from opzoo.config import read_config
    from opzoo.model_io.pretrained_cfg import schema_of, validate_pretrained_cfg

    root = Path(__file__).resolve().parents[2]
    shipped = sorted(root.glob("plugins/*/*/pretrained/*/config.json"))
    assert shipped
    for path in shipped:
        doc = read_config(path)
        cls = opzoo.get_registry().get("backbone", doc["architecture"])
        validate_pretrained_cfg(doc["pretrained_cfg"], str(path), schema_of(cls))
    assert opzoo.load("dpot-micro", pretrained=True).pretrained_cfg["resolution"] == [32, 32]


def test_saved_repos_record_and_verify_the_weights_sha256(tmp_path):
    from opzoo.model_io.checksums import sha256_file

    repo = opzoo.create_model("pot", **tiny_pot_args()).save_pretrained(tmp_path / "repo")
    doc = json.loads((repo / "config.json").read_text())
    assert doc["checksums"] == {"model.safetensors": sha256_file(repo / "model.safetensors")}
    weights = repo / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100:-50] = bytes(50)
    weights.write_bytes(bytes(data))
    with pytest.raises(opzoo.WeightsError, match=f"{weights}: sha256 .* does not match the recorded"):
        opzoo.from_pretrained(repo)
    del doc["checksums"]  # a repo saved before checksums were recorded still loads
    (repo / "config.json").write_text(json.dumps(doc))
    opzoo.from_pretrained(repo)


# ---- a full disk ----------------------------------------------------------------------------------
@pytest.fixture
def tiny_disk(tmp_path):
    with small_disk(tmp_path / "disk", "16k") as disk:
        yield disk


def test_disk_full_is_named_and_leaves_nothing_half_written(tiny_disk):
    from opzoo.disk_full import DiskFullError
    from opzoo.training.checkpoint import optimizer_to_flat

    model = opzoo.create_model("pot", **tiny_pot_args())
    with pytest.raises(DiskFullError, match=rf"disk full writing {tiny_disk}/ckpt/\.step-00000002\.opzoo-tmp-new-\d+@.*/model.safetensors "
                                            r"\(checkpoint of step 2; .* MiB free there\): no earlier checkpoint exists"):
        write_checkpoint(tiny_disk / "ckpt", 2, model_state=model.state_dict(),
                         optimizer_state=optimizer_to_flat(__import__("torch").optim.SGD(
                             [{"params": list(model.parameters()), "names": [n for n, _ in model.named_parameters()]}], lr=1)),
                         state={}, extra={}, keep_last=2)
    assert list((tiny_disk / "ckpt").iterdir()) == []
    with pytest.raises(DiskFullError, match=f"disk full writing {tiny_disk / 'repo' / 'model.safetensors'} "
                                            rf"\(saving the model.*\): any earlier repo in {tiny_disk / 'repo'} is unchanged"):
        model.save_pretrained(tiny_disk / "repo")
    assert not (tiny_disk / "repo").exists() and [p.name for p in tiny_disk.iterdir()] == ["ckpt"]  # no staging left
    assert list_checkpoints(tiny_disk / "ckpt") == []


def test_data_inspect_lists_trajectories_with_non_finite_values(tmp_path, datasets, capsys):
    data = h5py.File(datasets["heat"], "r")["data"][:]
    data[3, 1, 1, 6, 0] = np.nan
    data[17, :2, 0, 9:11, 0] = np.inf
    path = str(write_canonical(tmp_path / "bad.h5", data, ["u"], "heat"))
    code, out, _ = _cli(capsys, "data", "inspect", path)
    assert code == 0
    assert "trajectories with NaN/Inf values: 2 of the 24 read" in out
    assert "  trajectory 3: 1 NaN/Inf value(s), first in frame 6" in out
    assert "  trajectory 17: 4 NaN/Inf value(s), first in frame 9" in out


def test_finetune_out_follows_the_same_rules(tmp_path, datasets, capsys):
    out = str(tmp_path / "ft")
    args = ["finetune", "simple-op", "--no-pretrained", "--data", str(datasets["heat"]), "--out", out,
            "--steps", "2", "--batch-size", "2", "--set", "evaluation.plots=false"]  # the rules, not the plots
    code, first, err = _cli(capsys, *args, "--lr", "1e-3")
    assert code == 0, err
    assert "test l2 heat (random init -> trained; persistence)" in first and "zero-shot" not in first  # --no-pretrained (issue 27)
    code, _, err = _cli(capsys, *args, "--lr", "2e-3")
    assert code == 2 and "Changed: optimizer.lr: 0.001 -> 0.002." in err and len(err.strip().splitlines()) == 1
    code, again, _ = _cli(capsys, *args, "--lr", "1e-3")
    assert code == 0 and f"{out} holds this run, finished: 2 of 2 steps done" in again and "test l2" not in again
    code, fresh, err = _cli(capsys, *args, "--lr", "2e-3", "--new")
    assert code == 0, err
    assert f"moved the previous contents of {out} to {out}.replaced-" in fresh and "test l2 heat (random init -> trained; persistence)" in fresh


class MoveRunDirAt(OptimizerHook):
    """Moves the run directory to ``<dir>.moved`` after optimizer step ``at`` (0-based; -1: never)."""

    at = -1

    def after_optimizer_step(self, ctx):
        if ctx.step == MoveRunDirAt.at:
            os.rename(ctx.run_dir, ctx.run_dir.with_name(ctx.run_dir.name + ".moved"))


def test_a_run_whose_directory_is_moved_stops_before_writing_at_its_old_path_and_resumes_where_it_went(
        tmp_path, datasets, capsys):
    registry = opzoo.get_registry()
    with registry.owned_by("tests"):
        registry.register_optimizer_hook("test-move", MoveRunDirAt)
    out, moved = tmp_path / "run", tmp_path / "run.moved"
    doc = _doc(out, datasets, steps=4)
    doc["optimizer"] = {"hooks": [{"name": "test-move"}]}
    try:
        MoveRunDirAt.at = 0
        with pytest.raises(RunDirError, match=r"moved, removed or replaced while the run was going; stopped before "
                                              r"logging train step 1, writing nothing at that path") as info:
            _fit(doc)
        assert "\n" not in str(info.value)
        assert not out.exists()  # nothing was written at the old path
        assert (moved / "run_config.json").is_file() and not list_checkpoints(moved / "checkpoints")
        MoveRunDirAt.at = -1
        resumed = _fit({**doc, "output_dir": str(moved)})
        assert resumed.steps == 4 and (moved / "model" / "model.safetensors").is_file()
    finally:
        MoveRunDirAt.at = -1
        registry.forget("tests")
