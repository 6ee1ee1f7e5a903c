"""What a trained model saw: the record a run writes into its ``pretrained_cfg["training_data"]``, and
the split ``opzoo eval`` scores on a file, chosen from that record so that trajectories the model trained
on are never scored (or labelled) as held-out.

A record names each file by its name and content hash (:func:`opzoo.data.fingerprint.content_hash`), not
its local path: the same file elsewhere is recognized, and a published card leaks no path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..data.datasets import train_test_split
from ..data.fingerprint import content_hash
from ..errors import ConfigError


def _span(indices: Sequence[int]) -> list[int] | None:
    idx = sorted(indices)
    if not idx:
        return None
    if idx != list(range(idx[0], idx[-1] + 1)):
        raise ValueError(f"trajectory indices {idx} are not contiguous")
    return [idx[0], idx[-1]]


def training_record(datasets: Sequence[Any], tests: Sequence[Any]) -> list[dict[str, Any]]:
    """``pretrained_cfg["training_data"]`` of a run: ``datasets`` its ``DatasetSpec``s, ``tests`` the
    matching test ``TrajectoryDataset``."""
    out = []
    for spec, test in zip(datasets, tests):
        n = int(test.source.n_samples)
        if spec.test_path:
            out.append({"file": Path(spec.path).name, "content_hash": content_hash(spec.path), "trajectories": None,
                        "train": "all", "test": None})
            out.append({"file": Path(spec.test_path).name, "content_hash": content_hash(spec.test_path),
                        "trajectories": n, "train": None, "test": "all"})
        else:
            test_span = _span(test.indices)
            out.append({"file": Path(spec.path).name, "content_hash": content_hash(spec.path), "trajectories": n,
                        "train": [0, test_span[0] - 1] if test_span[0] > 0 else None, "test": test_span})
    return out


def record_for(model, path: str) -> dict[str, Any] | None:
    """The model's training record of the file at ``path`` (matched by content), or None."""
    records = (getattr(model, "pretrained_cfg", None) or {}).get("training_data") or []
    if not records:
        return None
    digest = content_hash(path)
    return next((r for r in records if r.get("content_hash") == digest), None)


def _indices(part, n: int) -> list[int]:
    if part is None:
        return []
    if part == "all":
        return list(range(n))
    return list(range(part[0], part[1] + 1))


def _describe(idx: list[int]) -> str:
    return f"trajectory {idx[0]}" if len(idx) == 1 else f"trajectories {idx[0]}-{idx[-1]}"


def choose_split(model, path: str, n: int, split: str | None, test_fraction: float | None,
                 include_training: bool) -> tuple[list[int], str, int]:
    """``(indices, label, seen)``: which trajectories of a file of ``n`` to score, the label that says what
    they are, and how many of them the model trained on.

    For a file the model records: the held-out part by default (``split`` None or ``"test"``); ``"train"``
    and ``"all"`` score trajectories it trained on, so they need ``include_training`` and are labelled so.
    For any other file: ``split`` as asked (default all), the test split being training's rule (the last
    ``test_fraction``, default 0.1).
    """
    if test_fraction is not None and not 0 < test_fraction < 1:
        raise ConfigError(f"--test-fraction must be in (0, 1), as finetune's; got {test_fraction:g}")
    record = record_for(model, path)
    if record is None:
        split = split or "all"
        if split == "all":
            return list(range(n)), f"all {n} trajectories (the model records no training on this file)", 0
        fraction = 0.1 if test_fraction is None else test_fraction
        try:
            train, test = train_test_split(n, fraction)  # training's rule, from its one home
        except ValueError as e:
            raise ConfigError(f"{path}: {e}") from None
        idx = list(test) if split == "test" else list(train)
        return idx, (f"{split} split: {_describe(idx)} of {n} (test = the last {fraction:g} of the file, training's "
                     f"rule; the model records no training on this file)"), 0
    if record.get("trajectories") not in (None, n):
        raise ConfigError(f"{path}: has {n} trajectories, but the model's record of this file ({record['file']}) says "
                          f"{record['trajectories']}")
    trained, held_out = _indices(record.get("train"), n), _indices(record.get("test"), n)
    if test_fraction is not None:
        raise ConfigError(f"{path}: the model trained on this file ({record['file']}) and records its split: "
                          f"held out {_describe(held_out) if held_out else 'nothing'}; leave --test-fraction out")
    if split in (None, "test"):
        if not held_out:
            raise ConfigError(f"{path}: the model trained on every trajectory of this file, so none is held out; "
                              f"evaluate on another file, or pass --split all --include-training to score training "
                              f"trajectories (labelled as seen in training)")
        return held_out, (f"held-out split the model records: {_describe(held_out)} of {n} (it trained on "
                          f"{_describe(trained) if trained else 'none'} of this file)"), 0
    chosen = trained if split == "train" else list(range(n))
    if not include_training:
        raise ConfigError(f"{path}: --split {split} would score {len(trained)} trajectories the model trained on "
                          f"({_describe(trained)} of this file, by its record); the default scores the held-out "
                          f"{_describe(held_out) if held_out else 'none'}. Pass --include-training to score them anyway, "
                          f"labelled as seen in training")
    seen = len(set(chosen) & set(trained))
    return chosen, f"{split}: {_describe(chosen)} of {n}, {seen} of them SEEN IN TRAINING (--include-training)", seen


__all__ = ["training_record", "record_for", "choose_split"]
