"""Non-finite data named (file, trajectory, count); a diverging model is not blamed on a dataset;
a finite divergence (loss over 100x its first value) is flagged; the log stays strict JSON."""

import json
import re

import h5py
import numpy as np
import pytest
import torch

import opzoo
from opzoo.data.errors import NonFiniteDataError
from opzoo.training import (
    OptimizerHook,
    Trainer,
    TrainingDivergedError,
    latest_checkpoint,
    list_checkpoints,
    parse_run_config,
    read_log,
)

from .conftest import run_document, tiny_pot_args, write_canonical


def _strict_records(path):
    def refuse(name):
        raise AssertionError(f"non-JSON constant {name} in {path}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def test_nan_training_data_stops_at_its_first_batch_naming_file_and_trajectory(tmp_path, datasets):
    data = h5py.File(datasets["heat"], "r")["data"][:]
    bad = data.copy()
    bad[5:10, 3:6, 3:6, 5:, 0] = np.nan  # trajectories 5..9 (training split), 3*3*9 = 81 values each, from frame 5
    bad_path = write_canonical(tmp_path / "poisoned.h5", bad, ["u"], "heat")
    doc = run_document(tmp_path / "run", {"heat": datasets["heat"], "poisoned": bad_path},
                       model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 40, "batch_size": 2, "log_every": 1}, checkpoint={"every": 1, "keep_last": 2})
    doc["seed"] = 1  # with this seed the first poisoned window is drawn after step 1
    with pytest.raises(NonFiniteDataError) as info:
        Trainer(parse_run_config(doc), show_progress=False).fit()
    msg = str(info.value)
    steps = [r["step"] for r in read_log(tmp_path / "run" / "log.jsonl")]
    failed = steps[-1] + 1
    assert failed > 1, "pick a seed where the poisoned data is not in the first batch"
    found = re.search(rf"{re.escape(str(bad_path))}: trajectory (\d+) holds 81 NaN/Inf value\(s\) \(first in frame 5\)", msg)
    assert found and 5 <= int(found.group(1)) <= 9, msg
    assert f"in the batch of step {failed};" in msg and "heat.h5" not in msg
    # nothing was updated with the bad batch: the last checkpoint is the step before, finite
    path, files = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert files["state.json"]["step"] == failed - 1
    assert all(np.isfinite(v.numpy()).all() for v in files["model.safetensors"].values())
    errors = read_log(tmp_path / "run" / "log.jsonl", kind="error")
    assert errors and errors[0]["step"] == failed and errors[0]["message"] == msg


def test_nan_test_data_is_refused_before_anything_is_written(tmp_path, datasets):
    data = h5py.File(datasets["heat"], "r")["data"][:]
    data[23, 0, 0, 2, 0] = np.inf  # the last trajectory: in the test split
    bad_path = write_canonical(tmp_path / "poisoned.h5", data, ["u"], "heat")
    doc = run_document(tmp_path / "run", {"poisoned": bad_path}, model={"name": "pot", "args": tiny_pot_args()})
    doc["data"]["max_test_trajectories"] = None
    with pytest.raises(NonFiniteDataError, match=re.escape(f"{bad_path}: trajectory 23 holds 1 NaN/Inf value(s) "
                                                           "(first in frame 2 of the 14 checked)")):
        Trainer(parse_run_config(doc), show_progress=False)
    assert not (tmp_path / "run").exists()


class Blowup(OptimizerHook):
    """Multiplies the last parameter by ``factor`` after optimizer step ``at`` (0-based)."""

    def __init__(self, at: int = 1, factor: float = 1e30):
        self.at, self.factor = at, factor

    def after_optimizer_step(self, ctx):
        if ctx.step == self.at:
            with torch.no_grad():
                for p in ctx.model.parameters():
                    p.mul_(self.factor) if self.factor != float("inf") else p.fill_(float("inf"))


@pytest.fixture
def blowup():
    registry = opzoo.get_registry()
    with registry.owned_by("tests"):
        registry.register_optimizer_hook("test-blowup", Blowup)
    yield
    registry.forget("tests")


def test_a_diverged_model_is_not_blamed_on_a_dataset(tmp_path, datasets, blowup):
    doc = run_document(tmp_path / "run", datasets, model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 6, "batch_size": 4, "log_every": 1}, checkpoint={"every": 1},
                       optimizer={"hooks": [{"name": "test-blowup", "args": {"at": 1, "factor": float("inf")}}]})
    with pytest.raises(TrainingDivergedError) as info:
        Trainer(parse_run_config(doc), show_progress=False).fit()
    msg = str(info.value)
    assert "at step 3 " in msg and "on every dataset in the batch (" in msg and "the model diverged" in msg
    assert "on dataset(s)" not in msg
    records = _strict_records(tmp_path / "run" / "log.jsonl")  # null, never NaN
    assert [r["loss"] for r in records if r["kind"] == "train"][-1] is not None
    assert records[-1]["kind"] == "error" and records[-1]["step"] == 3
    assert list_checkpoints(tmp_path / "run" / "checkpoints")[-1].name == "step-00000002"


def test_a_finite_divergence_is_flagged_in_log_and_summary(tmp_path, datasets, blowup):
    doc = run_document(tmp_path / "run", {"heat": datasets["heat"]}, model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 5, "batch_size": 2, "log_every": 1}, checkpoint={"every": None},
                       optimizer={"hooks": [{"name": "test-blowup", "args": {"at": 1, "factor": 1e3}}], "grad_clip": None})
    result = Trainer(parse_run_config(doc), show_progress=False).fit()
    first = result.losses[0]
    assert max(result.losses) > 100 * first and all(np.isfinite(result.losses))
    warning = [r for r in _strict_records(tmp_path / "run" / "log.jsonl") if r.get("divergence")]
    assert len(warning) == 1 and warning[0]["step"] == 3 and warning[0]["message"] == result.divergence
    assert result.divergence.startswith(f"loss {result.losses[2]:.4g} at step 3 is over 100x the first loss {first:.4g}")
    assert json.loads((tmp_path / "run" / "finished.json").read_text())["divergence"] == result.divergence
