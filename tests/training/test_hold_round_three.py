"""Issue 49, round three of attacks on runs and files: what this session closed. `cards` no longer deletes or
overwrites a user's files, a command's --out is checked before any work, bad counts are argparse's one line, a batch
or grid no machine holds is refused before anything is allocated, results are written whole and never through a
planted link, and checkpoint weights get the umask's mode like every other file."""

from __future__ import annotations

import json
import os
import stat

import pytest

from opzoo.cli import main

from .conftest import run_document


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_cards_refuses_a_directory_of_the_users_files_and_never_deletes_them(tmp_path, capsys):
    out = tmp_path / "docs"
    out.mkdir()
    mine = {"notes.md": "# my notes\n", "CHANGELOG.md": "## 1.0\n", "README.md": "# my project\n"}
    for name, text in mine.items():
        (out / name).write_text(text)
    assert main(["cards", "--out", str(out)]) == 2  # refused before a single card is rendered
    err = one_line(capsys)
    assert "holds files opzoo did not write (CHANGELOG.md, README.md, notes.md)" in err and "--force" in err
    assert {p.name: p.read_text() for p in out.iterdir()} == mine
    # --force writes beside them; the catalogue's pruning removes only cards opzoo wrote
    (out / "gone-preset.md").write_text("---\nlibrary_name: opzoo\n---\n# gone-preset\n")
    from opzoo.model_io.card_catalogue import write_catalogue

    write_catalogue(out, ["simple-op"], complete=True, force=True)
    assert (out / "notes.md").read_text() == mine["notes.md"] and (out / "CHANGELOG.md").read_text() == mine["CHANGELOG.md"]
    assert not (out / "gone-preset.md").exists() and (out / "simple-op.md").is_file()
    # a file as --out: one line, before rendering
    assert main(["cards", "simple-op", "--out", str(out / "notes.md")]) == 2
    assert "not a directory" in one_line(capsys)


@pytest.mark.parametrize("argv, words", [
    (["benchmark", "simple-op", "--threads", "-1"], "--threads: must be >= 1, got -1"),
    (["benchmark", "simple-op", "--batch-size", "0"], "--batch-size: must be >= 1, got 0"),
    (["benchmark", "simple-op", "--repeats", "0"], "--repeats: must be >= 1, got 0"),
    (["validate", "simple-op", "--data", "x.h5", "--batch-size", "0"], "--batch-size: must be >= 1, got 0"),
    (["validate", "simple-op", "--data", "x.h5", "--max-trajectories", "-1"], "--max-trajectories: must be >= 1"),
    (["eval", "simple-op", "--data", "x.h5", "--horizon", "0"], "--horizon: must be >= 1, got 0"),
])
def test_bad_counts_are_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert words in err[-1]


def test_an_output_of_the_wrong_kind_is_refused_before_any_work(tmp_path, capsys, datasets):
    a_file, a_dir = tmp_path / "f.txt", tmp_path / "d"
    a_file.write_text("x")
    a_dir.mkdir()
    for argv, words in ((["eval", "simple-op", "--data", str(datasets["heat"]), "--out", str(a_file)], "a file, not a directory"),
                        (["validate", "simple-op", "--data", str(datasets["heat"]), "--out", str(a_dir)], "a directory; name the file"),
                        (["benchmark", "simple-op", "--out", str(a_dir)], "a directory; name the file"),
                        (["benchmark", "simple-op", "--out", str(a_file / "b.csv")], "is a file, not a directory")):
        assert main(argv) == 2, argv
        assert words in one_line(capsys)
    assert a_file.read_text() == "x" and not any(a_dir.iterdir())


def test_a_batch_or_grid_no_machine_holds_is_refused_before_anything_is_allocated(tmp_path, datasets, capsys):
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps(run_document(tmp_path / "run", datasets, training={"batch_size": 100_000_000})))
    assert main(["pretrain", str(cfg)]) == 2
    err = one_line(capsys)
    assert "training.batch_size 100000000: one batch of 100000000 windows" in err and "GiB of data alone" in err
    cfg.write_text(json.dumps(run_document(tmp_path / "run2", datasets, data={"resolution": [100_000, 100_000]})))
    assert main(["pretrain", str(cfg)]) == 2
    err = one_line(capsys)
    assert "data.resolution [100000, 100000] with training.batch_size 4" in err and "allow_oversize" in err
    assert not (tmp_path / "run2").exists()


def test_results_are_written_whole_and_never_through_a_planted_link(tmp_path):
    from opzoo.evaluation.rollouts import DatasetResult, write_results

    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    out = tmp_path / "eval"
    out.mkdir()
    for name in ("eval.json", "eval.csv", "eval_per_step.csv"):
        (out / name).symlink_to(outside)
    r = DatasetResult(name="a", l2_full=0.5, per_step=[0.1, 0.2], n_trajectories=1, horizon=2)
    write_results([r], out)
    assert outside.read_text() == "keep me"
    for name in ("eval.json", "eval.csv", "eval_per_step.csv"):
        assert not (out / name).is_symlink() and (out / name).is_file()
    assert json.loads((out / "eval.json").read_text())["datasets"]["a"]["l2_full"] == 0.5


def test_checkpoint_weights_get_the_umasks_mode_like_every_other_file(tmp_path, datasets):
    from opzoo.training import Trainer, parse_run_config

    old = os.umask(0o022)
    try:
        Trainer(parse_run_config(run_document(tmp_path / "run", datasets, training={"steps": 2}),),
                show_progress=False).fit()
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "run" / "checkpoints").rglob("*") if p.is_file()]
    assert any(p.suffix == ".safetensors" for p in files)
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {"0o644"}


@pytest.mark.parametrize("section, value, words", [
    ("training", {"device": "meta"}, "training.device 'meta': a run trains on cpu or cuda"),
    ("training", {"device": "cuda:7"}, "training.device 'cuda:7': this machine has"),
    ("training", {"device": "gpu"}, "training.device 'gpu': not a device"),
    ("training", {"num_workers": -1}, "training.num_workers must be >= 0"),
    ("data", {"max_test_trajectories": 0}, "data.max_test_trajectories must be >= 1 or null"),
])
def test_run_settings_out_of_range_are_one_line(tmp_path, datasets, capsys, section, value, words):
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps(run_document(tmp_path / "run", datasets, **{section: value})))
    assert main(["pretrain", str(cfg)]) == 2
    assert words in one_line(capsys)


def test_a_save_onto_a_link_to_a_repo_replaces_the_link_and_leaves_nothing_behind(tmp_path):
    import opzoo

    model = opzoo.load("simple-op")
    model.save_pretrained(tmp_path / "real")
    before = (tmp_path / "real" / "model.safetensors").read_bytes()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    opzoo.load("simple-op").save_pretrained(tmp_path / "link")
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "link" / "config.json").is_file()
    assert (tmp_path / "real" / "model.safetensors").read_bytes() == before  # the link's target is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_a_killed_generate_leaves_nothing_the_next_write_does_not_clean(tmp_path):
    import subprocess

    import numpy as np

    from opzoo.data import write_canonical

    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / f".heat.h5.opzoo-tmp-new-{dead.pid}@{__import__('socket').gethostname()}-0a1b2c3d"
    left.write_bytes(b"half an HDF5 file")
    write_canonical(tmp_path / "heat.h5", np.zeros((2, 4, 4, 3, 1), np.float32), ["u"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heat.h5"]


def test_concurrent_saves_of_one_directory_all_succeed_and_leave_one_whole_repo(tmp_path):
    """Issue 49: two writers saving one directory at once: one in twelve died with a raw rename error when the other
    took the name between its two renames. Each now tries the swap again; the last save wins."""
    import threading

    import opzoo

    models = [opzoo.load("simple-op") for _ in range(4)]
    errors = []

    def save(model):
        try:
            for _ in range(15):
                model.save_pretrained(tmp_path / "repo")
        except Exception as e:  # noqa: BLE001 - collected, asserted below
            errors.append(e)

    threads = [threading.Thread(target=save, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    loaded = opzoo.from_pretrained(tmp_path / "repo")
    assert any(all(__import__("torch").equal(v, m.state_dict()[k]) for k, v in loaded.state_dict().items())
               for m in models)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]  # no staging or old directory left


def test_sizes_no_machine_holds_are_refused_in_one_line_before_allocation(monkeypatch):
    """Issue 49: img_size [1e30, 1e30] gave a TypeError with a C++ stack; width 20000 passed the size check (10x the
    machine's memory for training) and was killed by the kernel allocating its weights."""
    import opzoo
    from opzoo.model_io import size_check

    with pytest.raises(opzoo.ConfigError, match=r"img_size: .* is beyond any size a model can have"):
        opzoo.load("dpot-micro", img_size=[10**30, 10**30])
    small = opzoo.load("simple-op")
    need = 4 * sum(p.numel() for p in small.parameters())
    monkeypatch.setattr(size_check, "available_memory", lambda: need // 2)  # a machine with half of it free
    with pytest.raises(opzoo.ConfigError, match=r"GiB of float32 weights, more than the .* GiB this machine has free "
                                                r"now; .*allow_oversize"):
        opzoo.load("simple-op")
    assert opzoo.load("simple-op", allow_oversize=True) is not None
    import torch

    with torch.device("meta"):  # nothing is allocated on meta: counted, not refused for the free memory
        assert opzoo.load("simple-op") is not None


def test_an_edit_of_any_trajectory_refuses_the_resume_even_where_the_sampled_hash_does_not_read(
        tmp_path, datasets, monkeypatch):
    """Issue 49 Failed 2: on a large file, rewriting trajectories in place that lie outside every block the sampled
    content hash reads resumed silently. The run now records every trajectory's values hash and compares them. The
    sampled hash is made to read almost nothing here (as on a large file) to show it is the trajectory hashes that
    see the edit."""
    import gc
    import shutil

    import h5py

    from opzoo.data import fingerprint
    from opzoo.training import Trainer, parse_run_config
    from opzoo.training.run_dir import RunDirError

    from .conftest import tiny_pot_args

    monkeypatch.setattr(fingerprint, "FULL_HASH_BYTES", 0)
    monkeypatch.setattr(fingerprint, "EDGE_BYTES", 8)
    monkeypatch.setattr(fingerprint, "BLOCK_BYTES", 8)
    monkeypatch.setattr(fingerprint, "SAMPLES", 2)
    data = tmp_path / "heat.h5"
    shutil.copy(datasets["heat"], data)
    doc = run_document(tmp_path / "run", {"heat": str(data)}, model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 4, "batch_size": 2}, checkpoint={"every": 2, "keep_last": 3})
    Trainer(parse_run_config(doc), show_progress=False).fit()
    gc.collect()
    out = tmp_path / "run"
    shutil.rmtree(out / "checkpoints" / "step-00000004")
    (out / "finished.json").unlink()
    recorded = json.loads((out / "data_fingerprints.json").read_text())[0]
    assert len(recorded["trajectories"]) == recorded["shape"][0]
    content = fingerprint.content_hash(data)
    with h5py.File(data, "r+") as f:  # two trajectories in the middle, the size and the sampled blocks unchanged
        f["data"][10, 3, 3, 5, 0] += 1.0
        f["data"][11, 2, 2, 7, 0] -= 1.0
    assert fingerprint.content_hash(data) == content  # the sampled hash alone would have resumed
    with pytest.raises(RunDirError, match=r"changed since this run started \(the values of 2 trajectory\(ies\) "
                                          r"\(10, 11\)\)"):
        Trainer(parse_run_config(doc), show_progress=False).fit()
    # Failed 3: with the record deleted, the resume is refused, not re-recorded
    with h5py.File(data, "r+") as f:
        f["data"][10, 3, 3, 5, 0] -= 1.0
        f["data"][11, 2, 2, 7, 0] += 1.0
    (out / "data_fingerprints.json").unlink()
    with pytest.raises(RunDirError, match=r"data_fingerprints.json is gone: .*pass --new"):
        Trainer(parse_run_config(doc), show_progress=False).fit()
    assert not (out / "data_fingerprints.json").exists()


@pytest.mark.slow
def test_a_fifo_or_device_in_place_of_a_repos_file_is_refused_not_waited_on(tmp_path):
    """Issue 49: a damaged cache entry (a FIFO, a link to /dev/zero) where a weights or config file should be made a
    load hang or read until memory ran out, and `verify` called it "not in the cache". It is now named, at once."""
    import subprocess
    import sys

    import opzoo

    opzoo.load("simple-op").save_pretrained(tmp_path / "fifo")
    (tmp_path / "fifo" / "model.safetensors").unlink()
    os.mkfifo(tmp_path / "fifo" / "model.safetensors")
    opzoo.load("simple-op").save_pretrained(tmp_path / "zero")
    (tmp_path / "zero" / "model.safetensors").unlink()
    (tmp_path / "zero" / "model.safetensors").symlink_to("/dev/zero")
    opzoo.load("simple-op").save_pretrained(tmp_path / "config")
    (tmp_path / "config" / "config.json").unlink()
    os.mkfifo(tmp_path / "config" / "config.json")
    code = "\n".join([
        "import sys, opzoo",
        "for name, kind in (('fifo', 'a FIFO'), ('zero', 'a device'), ('config', 'a FIFO')):",
        f"    path = {str(tmp_path)!r} + '/' + name",
        "    try:",
        "        opzoo.load(path)",
        "    except opzoo.WeightsError as e:",
        "        assert kind + ', not a regular file' in str(e) and 'damaged' in str(e), str(e)",
        "    else:",
        "        sys.exit('loaded ' + name)",
        "from opzoo.model_io.weights import read_state_dict",
        "try:",
        f"    read_state_dict({str(tmp_path / 'zero' / 'model.safetensors')!r})",
        "except opzoo.WeightsError as e:",
        "    assert 'a device, not a regular file' in str(e), str(e)",
        "print('ok')"])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("preset, repo, files, damaged", [
    ("pdet-mc-s", "thuerey-group/pde-transformer", ("mc-s/config.json", "mc-s/diffusion_pytorch_model.safetensors"),
     "mc-s/diffusion_pytorch_model.safetensors"),
    ("morph-ti", "mahindrautela/MORPH", ("models/FM/morph-Ti-FM-max_ar1_ep225.pth",),
     "models/FM/morph-Ti-FM-max_ar1_ep225.pth"),
])
def test_verify_names_a_damaged_cache_blob_as_damaged_not_missing(preset, repo, files, damaged, tmp_path, capsys,
                                                                   monkeypatch):
    """The Hugging Face cache's layout (a snapshot's names link to blobs): a blob that is a FIFO is reported as not a
    regular file, never as missing and never opened."""
    from huggingface_hub import constants

    root = tmp_path / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / ("0" * 40)
    (root / "blobs").mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("0" * 40)
    for i, name in enumerate(files):
        blob = root / "blobs" / f"blob{i}"
        if name == damaged:
            os.mkfifo(blob)
        else:
            blob.write_text(json.dumps({"_class_name": "PDETransformer"}))
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).symlink_to(os.path.relpath(blob, (snapshot / name).parent))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert main(["verify", preset, "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in rows] == ["FAILED"]
    assert "not a regular file (a FIFO, device or directory)" in rows[0]["message"]
    assert "missing" not in rows[0]["message"]
