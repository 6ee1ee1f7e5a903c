"""Runs and files that hold, round five (issue 72): records read as untrusted data, a field map parsed in linear time
and bounded. (compare's own attacks are in test_compare.py.)"""

from __future__ import annotations

import json
import shutil
import time

import pytest

from opzoo.registry.contract import MAX_FIELD_MAP, parse_field_map


def test_a_field_map_is_parsed_in_linear_time_and_bounded():
    pairs = ",".join(f"a{i}=b{i}" for i in range(MAX_FIELD_MAP))
    assert len(parse_field_map(pairs)) == MAX_FIELD_MAP
    began = time.perf_counter()
    with pytest.raises(ValueError, match="more than"):  # 40,000 pairs took 35 s before, quadratic
        parse_field_map(",".join(f"a{i}=b{i}" for i in range(40_000)))
    with pytest.raises(ValueError, match="more than"):
        parse_field_map({f"a{i}": f"b{i}" for i in range(MAX_FIELD_MAP + 1)})
    assert time.perf_counter() - began < 10  # measured 0.14 s
    with pytest.raises(ValueError, match="v is mapped twice"):
        parse_field_map("a=v,b=v")
    with pytest.raises(ValueError, match="u:velocity_x is not FILE_FIELD=MODEL_FIELD"):  # no stray "=None"
        parse_field_map("u:velocity_x")


@pytest.fixture
def stopped_run(tmp_path, datasets):
    """A fine-tune stopped after its checkpoint at step 2 (its model and finished marker removed)."""
    from opzoo.cli import main

    run = tmp_path / "run"
    argv = ["finetune", "fno-2d", "--data", str(datasets["heat"]), "--out", str(run), "--steps", "4", "--batch-size",
            "2", "--test-fraction", "0.25", "--set", "evaluation.plots=false", "checkpoint.every=2",
            "model.args.width=8", "model.args.modes=4"]
    assert main(argv) == 0
    (run / "finished.json").unlink()
    shutil.rmtree(run / "model")
    for ckpt in sorted((run / "checkpoints").glob("step-*"))[1:]:
        shutil.rmtree(ckpt)
    return run, argv


def test_an_edited_base_weights_record_is_escaped_in_the_card_or_refused(stopped_run, capsys):
    from opzoo.cli import main

    run, argv = stopped_run
    record = run / "base_weights.json"
    original = json.loads(record.read_text())["weights"]
    injected = original + " <img src=x onerror=alert(1)> [click](http://evil.example) | x"
    record.write_text(json.dumps({"weights": injected}))
    assert main(argv) == 0
    card = (run / "model" / "README.md").read_text()
    assert "<img" not in card and "[click](" not in card and "&lt;img" in card and r"\[click\]" in card
    for doc, words in (({"weights": "someone-else pretrained, from hf-hub:evil/x"}, "names other weights"),
                       ({"weights": original + "x" * 100_000}, "larger than"), ({"weights": original + "x" * 5000}, "damaged"),
                       ({"weights": ["x"]}, "damaged"), ({"weights": original, "extra": 1}, "damaged")):
        (run / "finished.json").unlink(missing_ok=True)
        record.write_text(json.dumps(doc))
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
    (run / "finished.json").unlink(missing_ok=True)
    record.unlink()
    record.mkdir()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "a directory where the run records the weights it started from" in err and "Traceback" not in err


def test_the_stop_watchers_are_gone_when_a_run_ends():
    """A run's signal watcher held the run's state (through its target, a bound method); ending while the interpreter
    finalized, it dropped those tensors without the GIL and the process aborted after a finished run ("terminate called
    without an active exception", exit 134: 4 of 120 finetunes under load). The watchers are joined on the way out."""
    import threading

    import torch

    from opzoo.training.stop import StopSignals

    state = {"weights": torch.zeros(1000)}
    with StopSignals(20.0, lambda: state):
        assert any(t.name == "opzoo-stop-signals" for t in threading.enumerate())
    assert not [t for t in threading.enumerate() if t.name.startswith("opzoo-stop")]
