"""The public surface is a promise to plugin authors (issue 36): ``opzoo.__all__``, ``opzoo.training.__all__``,
their signatures and the hookspecs are snapshotted in ``golden/public_api.json``. A change is a visible diff:
regenerate with ``python -m tests.core.test_public_api`` and say what changed in CHANGELOG.md.

The old call form of ``pot_preset_args`` (before the size table) still works, with a DeprecationWarning,
for plugins written against the earlier README."""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import warnings
from pathlib import Path

import pytest

GOLDEN = Path(__file__).with_name("golden") / "public_api.json"


def describe(obj) -> dict:
    if inspect.isclass(obj):
        out = {"kind": "class", "bases": [b.__name__ for b in obj.__mro__[1:] if b is not object]}
        if dataclasses.is_dataclass(obj):
            out["fields"] = {f.name: str(f.type) for f in dataclasses.fields(obj)}
        elif "__init__" in vars(obj):  # its own; an inherited one (torch's) is not opzoo's promise
            out["init"] = str(inspect.signature(vars(obj)["__init__"]))
        out["methods"] = sorted(n for n, v in vars(obj).items() if callable(v) and not n.startswith("_"))
        return out
    if callable(obj):
        return {"kind": "function", "signature": str(inspect.signature(obj))}
    return {"kind": type(obj).__name__}


def surface() -> dict:
    import opzoo
    import opzoo.contracts.hookspecs
    import opzoo.evaluation
    import opzoo.micro
    import opzoo.testing
    import opzoo.training

    out = {}
    for module in (opzoo, opzoo.training, opzoo.evaluation, opzoo.kit, opzoo.micro, opzoo.testing):
        out[module.__name__] = {name: describe(getattr(module, name)) for name in sorted(module.__all__)
                                if name != "__version__"}
    out["hookspecs"] = {name: str(inspect.signature(fn)) for name, fn in sorted(vars(opzoo.contracts.hookspecs).items())
                        if name.startswith("opzoo_") and callable(fn)}
    return out


def test_the_public_surface_matches_its_snapshot():
    current = surface()
    recorded = json.loads(GOLDEN.read_text())
    for module in current:
        added = sorted(set(current[module]) - set(recorded.get(module, {})))
        removed = sorted(set(recorded.get(module, {})) - set(current[module]))
        changed = sorted(k for k in set(current[module]) & set(recorded.get(module, {}))
                         if current[module][k] != recorded[module][k])
        assert not (added or removed or changed), (
            f"{module}: added {added}, removed {removed}, changed {changed}. A public API change is deliberate: "
            f"record it in CHANGELOG.md (keeping the old form behind a DeprecationWarning for a release) and "
            f"regenerate the snapshot with `python -m tests.core.test_public_api`")






def test_the_old_form_needs_all_five_dims():
    import opzoo

    with warnings.catch_warnings(), pytest.raises(opzoo.ConfigError, match="takes \\(width, depth, n_blocks"):
        warnings.simplefilter("ignore")
        opzoo.pot_preset_args(512, 4)


def test_renamed_training_names_still_work_with_a_deprecation_warning(tmp_path):
    """``Adapt`` and ``H5Trajectories`` became ``opzoo.data.FrameShape`` and ``TrajectoryDataset`` (one data
    pipeline); ``evaluate_dataset(adapt=...)`` became ``frame_shape=``. Each old form works for a release."""
    import numpy as np

    import opzoo.evaluation
    import opzoo.training
    from opzoo.data import FrameShape, TrajectoryDataset, write_canonical
    from opzoo.evaluation.rollouts import Persistence

    for old, new in (("Adapt", FrameShape), ("H5Trajectories", TrajectoryDataset)):
        with pytest.warns(DeprecationWarning, match=f"opzoo.training.{old} is deprecated; use opzoo.data.{new.__name__}"):
            assert getattr(opzoo.training, old) is new
    write_canonical(tmp_path / "a.h5", np.ones((2, 4, 4, 3, 1), np.float32), ["u"])
    with pytest.warns(DeprecationWarning, match="use frame_shape="):
        r = opzoo.evaluation.evaluate_dataset(Persistence(), "a", TrajectoryDataset(str(tmp_path / "a.h5")),
                                              adapt=FrameShape((4, 4), 1, 1))
    assert r.l2_full == 0.0
    with pytest.raises(TypeError, match="both adapt="):
        opzoo.evaluation.evaluate_dataset(Persistence(), "a", None, adapt=1, frame_shape=1)
    # issue 44: one home per name; opzoo.training's re-exports of evaluation's and data's names warn for a release
    import opzoo.data
    import opzoo.evaluation

    for name, home in (("evaluate_dataset", opzoo.evaluation), ("pyplot", opzoo.evaluation),
                       ("StepBatchSampler", opzoo.data), ("l2_full", opzoo.evaluation)):
        with pytest.warns(DeprecationWarning, match=f"opzoo.training.{name} is deprecated; use {home.__name__}.{name}"):
            assert getattr(opzoo.training, name) is getattr(home, name)
        assert name not in opzoo.training.__all__


def test_the_micro_helpers_moved_to_opzoo_micro_and_the_old_names_warn():
    """Issue 57: the micro setup's helpers left the top level for opzoo.micro; each old name still works, warning."""
    import opzoo
    import opzoo.micro

    for name in ("MICRO_SUITE", "POT_MICRO_SIZE", "micro_pretrained_cfg", "micro_results", "pot_micro_preset_args"):
        assert name in opzoo.micro.__all__ and name not in opzoo.__all__
        with pytest.warns(DeprecationWarning, match=f"opzoo.{name} is deprecated; use opzoo.micro.{name}"):
            assert getattr(opzoo, name) is getattr(opzoo.micro, name)


def test_moved_modules_keep_a_warning_shim_for_a_release():
    """opzoo.training.vrmse (now opzoo.evaluation.vrmse), opzoo.cli.common (now opzoo.console) and the command
    modules that lived in their library packages (now opzoo.cli.*): the old paths import, warn, and give the same
    objects under their old names; OptimizerHook is a contract, importable from its old module as well."""
    import importlib
    import sys

    import opzoo
    import opzoo.cli
    import opzoo.cli.benchmark
    import opzoo.cli.data
    import opzoo.cli.evaluation
    import opzoo.cli.training
    from opzoo.console import run_command
    from opzoo.evaluation.vrmse import vrmse

    moved = [("opzoo.training.vrmse", "vrmse", vrmse), ("opzoo.cli.common", "run_command", run_command),
             ("opzoo.data.cli", "add_data_commands", opzoo.cli.data.add_commands),
             ("opzoo.data.cli", "run_generate", opzoo.cli.data.cmd_data_generate),
             ("opzoo.training.cli", "add_training_commands", opzoo.cli.training.add_commands),
             ("opzoo.training.cli", "cmd_finetune", opzoo.cli.training.cmd_finetune),
             ("opzoo.evaluation.cli", "add_evaluation_commands", opzoo.cli.evaluation.add_commands),
             ("opzoo.benchmark.compare_cli", "add_compare_command", opzoo.cli.benchmark.add_commands)]
    for old, name, obj in moved:
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=f"{old} is deprecated"):
            module = importlib.import_module(old)
        assert getattr(module, name) is obj
        if old.endswith("cli"):
            assert module.main is opzoo.cli.main  # `python -m OLD ARGS` runs `opzoo ARGS`
    with pytest.warns(DeprecationWarning, match="opzoo.cli.preset_document is deprecated"):
        assert opzoo.cli.preset_document is opzoo.cli.models.preset_document
    from opzoo.contracts.optimizer_hook import OptimizerHook
    from opzoo.training.hooks import OptimizerHook as old_home

    assert opzoo.OptimizerHook is OptimizerHook is old_home


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(surface(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)


def test_the_family_kit_imports_as_the_docs_write_it():
    """Issue 70, item 8: `import opzoo.kit` (docs/adding-a-family.md) as well as `from opzoo import kit`."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", "import opzoo.kit; from opzoo import kit; "
                           "assert opzoo.kit is kit and kit.Renames; print('ok')"], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr
