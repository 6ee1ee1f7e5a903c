"""A non-finite loss stops the run naming the step and the dataset; the last good checkpoint stays intact."""

import h5py
import numpy as np
import pytest

from .conftest import run_document, tiny_pot_args, write_canonical
from opzoo.training import Trainer, TrainingDivergedError, latest_checkpoint, list_checkpoints, parse_run_config, read_log


def test_nan_data_stops_run_naming_step_and_dataset(tmp_path, datasets):
    data = h5py.File(datasets["heat"], "r")["data"][:]
    bad = data.copy()
    bad[:, 3:6, 3:6, 5:, 0] = np.nan  # every trajectory turns NaN from frame 5 on
    bad_path = write_canonical(tmp_path / "poisoned.h5", bad, ["u"], "heat")
    doc = run_document(tmp_path / "run", {"heat": datasets["heat"], "advection": datasets["advection"],
                                          "poisoned": bad_path},
                       model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 40, "batch_size": 2, "log_every": 1}, checkpoint={"every": 1, "keep_last": 2})
    doc["data"]["datasets"][2]["weight"] = 0.4
    doc["seed"] = 2  # with this seed the first poisoned sample is drawn at step 4
    trainer = Trainer(parse_run_config(doc))
    with pytest.raises(TrainingDivergedError) as info:
        trainer.fit()
    msg = str(info.value)
    steps = [r["step"] for r in read_log(tmp_path / "run" / "log.jsonl")]
    failed = steps[-1] + 1
    assert failed > 1, "pick a seed where the poisoned data is not in the first batch"
    assert f"at step {failed} " in msg and "dataset(s) poisoned" in msg and "heat" not in msg.split("dataset(s)")[1]
    # the last good checkpoint is the step before, complete and readable; nothing later was written
    path, files = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert files["state.json"]["step"] == failed - 1
    assert all(np.isfinite(v.numpy()).all() for v in files["model.safetensors"].values())
    assert [p.name for p in list_checkpoints(tmp_path / "run" / "checkpoints")][-1] == path.name
    errors = read_log(tmp_path / "run" / "log.jsonl", kind="error")
    assert errors and errors[0]["step"] == failed
