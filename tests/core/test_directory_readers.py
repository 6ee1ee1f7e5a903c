"""Issue 70: a reader of several files, or of a directory. A directory is a dataset when a reader claims it; the
fingerprints, the training record and `data inspect`'s size cover every member file, and an edit of one member is
seen by a resumed run and by eval."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import opzoo
from opzoo.cli import main
from opzoo.data import DataFormatError, SourceInfo, TrajectorySource, content_hash, open_source
from opzoo.data.fingerprint import dataset_files, file_fingerprint, fingerprint_changes

N, T, H, W = 6, 8, 8, 8


class CsvFramesSource(TrajectorySource):
    """A directory ``NAME.frames/``: ``meta.json`` ``{"n", "t", "fields"}`` and ``trajNNN/frameKKK.csv``, each frame
    ``H`` rows of ``W`` values (one field)."""

    layout = "csv-frames-test"
    suffixes = (".frames",)
    reads_directories = True
    expects = "a directory NAME.frames/ of meta.json and trajNNN/frameKKK.csv"

    @classmethod
    def detect(cls, f) -> bool:
        return False

    def _h5(self):
        if self._file is None:
            with open(os.path.join(self.path, "meta.json")) as f:
                self._file = json.load(f)
        return self._file

    def close(self) -> None:
        self._file = None

    def _validate(self, meta) -> SourceInfo:
        first = np.loadtxt(self._frame(0, 0), delimiter=",", ndmin=2)
        return SourceInfo(self.layout, int(meta["n"]), tuple(first.shape), int(meta["t"]), list(meta["fields"]))

    def _frame(self, sample: int, t: int) -> str:
        return os.path.join(self.path, f"traj{sample:03d}", f"frame{t:03d}.csv")

    def _read(self, meta, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        frames = [np.loadtxt(self._frame(sample, t), delimiter=",", ndmin=2) for t in range(t_start, t_stop)]
        return np.stack(frames, axis=-1)[..., None]  # [H, W, t, 1]


def write_frames(root, data: np.ndarray) -> str:
    """``data [N, H, W, T]`` as a ``.frames`` directory."""
    os.makedirs(root)
    with open(os.path.join(root, "meta.json"), "w") as f:
        json.dump({"n": data.shape[0], "t": data.shape[-1], "fields": ["u"]}, f)
    for i, traj in enumerate(data):
        os.makedirs(os.path.join(root, f"traj{i:03d}"))
        for t in range(traj.shape[-1]):
            np.savetxt(os.path.join(root, f"traj{i:03d}", f"frame{t:03d}.csv"), traj[..., t], delimiter=",")
    return str(root)


@pytest.fixture
def frames_reader():
    registry = opzoo.get_registry()
    with registry.owned_by("csv-frames-plugin"):
        registry.register_reader(CsvFramesSource)
    yield CsvFramesSource
    registry.forget("csv-frames-plugin")


@pytest.fixture
def frames(tmp_path):
    rng = np.random.default_rng(0)
    x = np.linspace(0, 2 * np.pi, W, endpoint=False)
    waves = np.stack([np.sin(x[None, :, None] + 0.3 * np.arange(T) + rng.uniform(0, 6)) * np.ones((H, 1, 1))
                      for _ in range(N)])
    return write_frames(tmp_path / "wave.frames", waves.astype(np.float32))


def edit_member(path: str) -> None:
    values = np.loadtxt(path, delimiter=",")
    values[0, 0] += 0.5
    np.savetxt(path, values, delimiter=",")


def test_a_directory_a_reader_claims_is_a_dataset_and_is_fingerprinted_whole(frames_reader, frames, tmp_path,
                                                                              capsys):
    with open_source(frames) as source:
        assert source.layout == "csv-frames-test" and source.shape == (N, H, W, T, 1)
        members = dataset_files(source)
        assert len(members) == 1 + N * T and members[0].name == "meta.json"
        digest = content_hash(source)
        assert digest.startswith("sha256-files:") and digest == content_hash(frames)  # the path alone: all its files
        before = file_fingerprint(frames, source)
    assert before["size"] == sum(m.stat().st_size for m in members) and len(before["files"]) == 1 + N * T
    edit_member(os.path.join(frames, "traj002", "frame003.csv"))
    with open_source(frames) as source:
        assert content_hash(source) != digest
        changes = fingerprint_changes(before, file_fingerprint(frames, source))
    assert "file(s) edited: traj002/frame003.csv" in changes and "the values of 1 trajectory(ies) (2)" in changes
    # data inspect's size covers every member
    assert main(["data", "inspect", frames]) == 0
    assert f"in {1 + N * T} files)" in capsys.readouterr().out
    # a directory without the suffix: --layout names the reader; a reader of files is refused, naming both ways
    plain = tmp_path / "plain"
    os.rename(frames, plain)
    with pytest.raises(DataFormatError, match=r"no reader of a directory claims it \(layouts that read one: "
                                              r"csv-frames-test; name one with --layout\)"):
        open_source(plain)
    assert open_source(plain, layout="csv-frames-test").shape == (N, H, W, T, 1)
    with pytest.raises(DataFormatError, match="The canonical layout reads a file, not a directory"):
        open_source(plain, layout="canonical")


def test_without_a_reader_of_directories_a_directory_is_still_refused(frames, capsys):
    assert main(["data", "inspect", frames]) == 2
    err = capsys.readouterr().err
    assert "is a directory, not a data file" in err and "\n" not in err.strip()


def test_a_reader_whose_files_are_not_files_is_refused_by_name(frames_reader, frames):
    class Broken(CsvFramesSource):
        layout = "broken-frames"

        def files(self):
            return [os.path.join(self.path, "meta.json"), os.path.join(self.path, "gone.csv")]

    with pytest.raises(DataFormatError, match=r"the broken-frames reader's files\(\) names .*gone.csv, which is "
                                              r"missing"):
        content_hash(Broken(frames))


def test_an_edited_member_is_seen_by_a_resumed_run_and_by_eval(frames_reader, frames, tmp_path, capsys):
    base = tmp_path / "simple"
    opzoo.create_model("simple", in_channels=1, out_channels=1, in_timesteps=2, width=8).save_pretrained(base)
    run = ["finetune", str(base), "--data", frames, "--out", str(tmp_path / "run"), "--test-fraction", "0.34",
           "--batch-size", "2", "--steps", "4", "--set", "evaluation.plots=false", "--set", "checkpoint.every=2"]
    assert main(run) == 0, capsys.readouterr().err
    model = tmp_path / "run" / "model"
    record = json.loads((model / "config.json").read_text())["pretrained_cfg"]["training_data"][0]
    assert record["file"] == "wave.frames" and record["content_hash"].startswith("sha256-files:")
    assert record["train"] == [0, 3] and record["test"] == [4, 5]
    capsys.readouterr()
    assert main(["eval", str(model), "--data", frames, "--out", str(tmp_path / "e1"), "--plot-steps", "1"]) == 0
    assert "held-out split the model records: trajectories 4-5 of 6" in capsys.readouterr().out

    edit_member(os.path.join(frames, "traj002", "frame005.csv"))  # a trajectory it trained on
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step-00000004")  # as if stopped at step 2
    (tmp_path / "run" / "finished.json").unlink()
    assert main(run) == 2  # resuming would train on other data than its checkpoints saw
    err = capsys.readouterr().err
    assert "changed since this run started" in err and "file(s) edited: traj002/frame005.csv" in err
    assert main(["eval", str(model), "--data", frames, "--out", str(tmp_path / "e2"), "--plot-steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "THE FILE CHANGED since the model trained on it as wave.frames" in out
    assert "trajectory 2 hold(s) other values than the model recorded, trajectory 2 of them trained on" in out
    scored = json.loads((tmp_path / "e2" / "eval.json").read_text())["datasets"]["wave"]["n_trajectories"]
    assert scored == 2  # trajectories 0-3 left out as trained on, the edited one with them
    # the one rule every command's split uses (eval's, finetune's held-out split): the edited trajectory is seen
    from opzoo.evaluation.splits import seen_in

    with open_source(frames) as source:
        seen = seen_in(opzoo.load(model), source)
    assert seen == {0: "this model", 1: "this model", 2: "this model (before the file changed)", 3: "this model"}
    # another dataset that happens to have the same name and count: not "changed", simply not trained on
    other = write_frames(tmp_path / "elsewhere" / "wave.frames", np.random.default_rng(5).normal(
        size=(N, H, W, T)).astype(np.float32))
    assert main(["eval", str(model), "--data", other, "--out", str(tmp_path / "e3"), "--plot-steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "CHANGED" not in out and f"all {N} trajectories (the model records no training on this file)" in out


class FramesetSource(CsvFramesSource):
    """A sidecar ``NAME.frameset`` (the meta.json of a ``.frames`` directory, beside it) naming its frame files:
    the dataset is the sidecar and every frame."""

    layout = "csv-frameset-test"
    suffixes = (".frameset",)
    reads_directories = False

    def _h5(self):
        if self._file is None:
            with open(self.path) as f:
                self._file = json.load(f)
        return self._file

    def _frame(self, sample: int, t: int) -> str:
        return os.path.join(os.path.dirname(self.path), "wave.frames", f"traj{sample:03d}", f"frame{t:03d}.csv")

    def files(self) -> list[str]:
        return [self.path] + [self._frame(i, t) for i in range(self.info.n_samples) for t in range(self.info.n_steps)]


def test_a_sidecar_format_is_fingerprinted_by_every_file_it_names(frames, tmp_path):
    sidecar = tmp_path / "wave.frameset"
    sidecar.write_text(open(os.path.join(frames, "meta.json")).read())
    source = FramesetSource(sidecar)
    digest, before = content_hash(source), file_fingerprint(sidecar, source)
    assert digest.startswith("sha256-files:") and content_hash(sidecar).startswith("sha256:")  # the sidecar alone
    edit_member(os.path.join(frames, "traj004", "frame000.csv"))
    again = FramesetSource(sidecar)
    assert content_hash(again) != digest
    changes = fingerprint_changes(before, file_fingerprint(sidecar, again))
    assert "file(s) edited: wave.frames/traj004/frame000.csv" in changes
