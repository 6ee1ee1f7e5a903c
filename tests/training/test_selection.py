"""Selection on validation and early stopping (issue 68): a run keeps the weights of its evaluated step with the lowest
validation error, as Poseidon keeps its best on validation, stops after ``early_stopping`` evaluations without
improvement, and decides alike when it was interrupted and resumed."""

from __future__ import annotations

import json
import math

import pytest
import torch

import opzoo
from opzoo.training.selection import Selection

from .conftest import run_document, tiny_pot_args


def test_the_best_is_strictly_lower_and_the_patience_counts_evaluations_after_it():
    s = Selection(patience=2)
    assert s.add(0, 1.0) and s.add(2, 0.5) and not s.add(4, 0.5)  # equal: the first is kept
    assert s.best_step == 2 and s.since_best() == 1 and not s.should_stop()
    assert not s.add(6, 0.7) and s.should_stop() and s.protected() == {2}
    s = Selection()
    s.add(0, math.nan)
    s.add(2, 3.0)
    assert s.best_step == 2 and not s.should_stop()  # a NaN error is never the best; no patience: never stops
    summary = Selection(3, [(0, 2.0), (4, 1.0), (8, 1.5)]).summary(8, 10)
    assert summary["step"] == 4 and summary["early_stopped"] and summary["validation_l2"] == 1.0


def _doc(out, datasets, **training):
    data = {"datasets": [{"name": "heat", "path": str(datasets["heat"]), "test_fraction": 0.125,
                          "validation_fraction": 0.125}], "resolution": [16, 16]}
    return run_document(out, datasets, model={"name": "pot", "args": tiny_pot_args(channels=1)}, data=data,
                        training={"steps": 8, "batch_size": 4, "log_every": 1, "eval_every": 2,
                                  "selection": "validation", **training},
                        checkpoint={"every": None, "keep_last": 1}, optimizer={"lr": 3e-2}, seed=3)


def _fit(doc):
    from opzoo.training import parse_run_config
    from opzoo.training.trainer import Trainer

    return Trainer(parse_run_config(doc), show_progress=False).fit()


def _validation(run_dir):
    from opzoo.training import read_log

    return [(r["step"], r["l2_full/mean"]) for r in read_log(run_dir / "log.jsonl", kind="validation")]


def test_a_run_keeps_its_best_validation_step_and_stops_early(tmp_path, datasets):
    result = _fit(_doc(tmp_path / "run", datasets, early_stopping=2))
    run = tmp_path / "run"
    history = _validation(run)
    assert [s for s, _ in history][:2] == [0, 2]  # step 0 too: the starting weights may be the best
    best = min(history, key=lambda h: (h[1], h[0]))[0]
    finished = json.loads((run / "finished.json").read_text())
    assert finished["selection"]["step"] == best == result.selection["step"]
    done = finished["steps_done"]
    assert done == history[-1][0] and (done == 8 or done - best == 2 * 2)  # stopped 2 evaluations after its best
    # the exported weights are the best checkpoint's, which pruning kept
    from safetensors.torch import load_file

    exported = load_file(str(run / "model" / "model.safetensors"))
    kept = load_file(str(run / "checkpoints" / f"step-{best:08d}" / "model.safetensors"))
    assert all(torch.equal(exported[k], kept[k]) for k in kept)
    cfg = json.loads((run / "model" / "config.json").read_text())["pretrained_cfg"]
    assert cfg["selection"]["step"] == best and cfg["trained_steps"] == done
    assert cfg["training_data"][0]["validation"] == [18, 20]  # 3 of 24 heat trajectories, before the 3 tested
    assert "weights kept: step" in (run / "model" / "README.md").read_text()
    again = _fit(_doc(tmp_path / "run", datasets, early_stopping=2))
    assert again.already_finished  # an early-stopped run is finished


def test_a_resumed_run_selects_as_an_uninterrupted_one(tmp_path, datasets, monkeypatch):
    """Interrupted once right after a checkpoint and before its validation, once between two evaluations: the
    resumed runs evaluate what they missed and keep the same step, with bit-identical weights."""
    from safetensors.torch import load_file

    from opzoo.training.trainer import Trainer

    reference = _fit(_doc(tmp_path / "ref", datasets))
    for where in ("before validating step 4", "at step 5"):
        run = tmp_path / where.replace(" ", "_")
        original_validate, original_step = Trainer._validate, Trainer._step
        calls = {"n": 0}

        def validate(self, step, logger, original=original_validate):
            if where == "before validating step 4" and step == 4 and calls["n"] == 0:
                calls["n"] += 1
                raise KeyboardInterrupt
            return original(self, step, logger)

        def step_once(self, i, batch, logger, original=original_step):
            if where == "at step 5" and i + 1 == 5 and calls["n"] == 0:
                calls["n"] += 1
                raise KeyboardInterrupt
            return original(self, i, batch, logger)

        monkeypatch.setattr(Trainer, "_validate", validate)
        monkeypatch.setattr(Trainer, "_step", step_once)
        with pytest.raises(KeyboardInterrupt):
            _fit(_doc(run, datasets))
        resumed = _fit(_doc(run, datasets))
        monkeypatch.undo()
        assert resumed.selection["step"] == reference.selection["step"], where
        assert _validation(run) == _validation(tmp_path / "ref"), where
        a, b = (load_file(str(d / "model" / "model.safetensors")) for d in (run, tmp_path / "ref"))
        assert all(torch.equal(a[k], b[k]) for k in a), where


def test_selection_needs_a_validation_split_and_evaluations(tmp_path, datasets):
    from opzoo.training import parse_run_config

    doc = _doc(tmp_path / "run", datasets)
    doc["data"]["datasets"][0]["validation_fraction"] = 0.0
    with pytest.raises(opzoo.ConfigError, match="needs a validation split .* --validation-fraction"):
        parse_run_config(doc)
    doc = _doc(tmp_path / "run", datasets, early_stopping=2, selection="last")
    with pytest.raises(opzoo.ConfigError, match="early_stopping stops on the validation error"):
        parse_run_config(doc)
    doc = _doc(tmp_path / "run", datasets)
    doc["data"]["datasets"][0]["validation_fraction"] = 0.9
    with pytest.raises(opzoo.ConfigError, match="leave trajectories to train on"):
        parse_run_config(doc)
