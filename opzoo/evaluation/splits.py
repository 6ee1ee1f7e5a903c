"""What a trained model saw, through its whole lineage: the record a run writes into its
``pretrained_cfg["training_data"]``, and the trajectories ``opzoo eval`` (``rollout``, ``validate``) may call held-out.

A record names each file by its name and content hash (:func:`opzoo.data.fingerprint.content_hash`), not its local
path, and each trajectory by its own content hash (:meth:`opzoo.data.TrajectorySource.trajectory_hash`): a trajectory
is recognised as seen in training wherever it lies (another file, another layout, a re-saved copy, a cut-out of the
training trajectories). A file an opzoo generator wrote is also recorded by its generation recipe
(:func:`opzoo.data.fingerprint.generation_recipe`): the same recipe makes the same trajectories at the same positions,
so a regenerated file is recognised where another CPU rounds its values differently. A fine-tune carries its base's record forward (entries marked ``"by"``: the base that trained
on them), so a chain of fine-tunes never forgets what its ancestors saw; a fine-tune's own test split leaves out what
its base trained on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..data.datasets import train_test_split
from ..data.fingerprint import content_hash, generation_recipe, trajectory_hashes
from ..errors import ConfigError


def _span(indices: Sequence[int]) -> list[int] | None:
    idx = sorted(indices)
    if not idx:
        return None
    if idx != list(range(idx[0], idx[-1] + 1)):
        raise ValueError(f"trajectory indices {idx} are not contiguous")
    return [idx[0], idx[-1]]


def _part(indices: Sequence[int], n: int):
    """A record's ``train``/``test`` field: ``"all"``, ``None``, ``[first, last]`` (a contiguous span) or
    ``{"indices": [...]}``."""
    idx = sorted(indices)
    if not idx:
        return None
    if idx == list(range(n)):
        return "all"
    return [idx[0], idx[-1]] if idx == list(range(idx[0], idx[-1] + 1)) else {"indices": idx}


def training_record(datasets: Sequence[Any], trains: Sequence[Any], tests: Sequence[Any],
                    base: dict | None = None, base_id: str | None = None,
                    validations: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """``pretrained_cfg["training_data"]`` of a run: ``datasets`` its ``DatasetSpec``s, ``trains`` and ``tests`` the
    matching ``TrajectoryDataset`` splits (``validations``: each file's validation split, or None), ``base`` the
    ``pretrained_cfg`` of the model it started from (whose record is carried forward, each entry marked with
    ``base_id`` as the model that trained on it). A validation split is recorded as ``validation``: never trained on,
    but the run chose its weights by it."""
    out = []
    validations = list(validations or [None] * len(datasets))
    for spec, train, test, validation in zip(datasets, trains, tests, validations):
        held = {} if validation is None else {"validation": _part(validation.indices, validation.source.n_samples)}
        if spec.test_path:
            out.append(_entry(spec.path, train.source, train=_part(train.indices, train.source.n_samples), test=None,
                              train_hashes=trajectory_hashes(train), test_hashes=[], **held))
            out.append(_entry(spec.test_path, test.source, train=None, test=_part(test.indices, test.source.n_samples),
                              train_hashes=[], test_hashes=trajectory_hashes(test)))
        else:
            n = int(test.source.n_samples)
            out.append(_entry(spec.path, test.source, train=_part(train.indices, n), test=_part(test.indices, n),
                              train_hashes=trajectory_hashes(train), test_hashes=trajectory_hashes(test), **held))
    for entry in (base or {}).get("training_data") or []:
        out.append({**entry, "by": entry.get("by") or base_id})
    return out


def _entry(path, source, **parts) -> dict[str, Any]:
    """One file's record: its name, content hash, trajectory count, the split's parts and hashes, and (for a file an
    opzoo generator wrote) its generation recipe."""
    entry = {"file": Path(path).name, "content_hash": content_hash(source), "trajectories": int(source.n_samples),
             **parts}
    recipe = generation_recipe(source)
    if recipe is not None:
        entry["recipe"] = recipe
    return entry


def _records(model) -> list[dict[str, Any]]:
    return list((getattr(model, "pretrained_cfg", None) or {}).get("training_data") or [])


def seen_hashes(model, own: str = "this model") -> dict[str, str]:
    """Every trajectory the model or an ancestor trained on: its hash -> who trained on it (``own`` for the model
    itself, else the base named in the record)."""
    out: dict[str, str] = {}
    for r in _records(model):
        for h in r.get("train_hashes") or []:
            out.setdefault(h, r.get("by") or own)
    return out


def record_for(model, path: str, source=None) -> dict[str, Any] | None:
    """The model's own training record of the file at ``path``, or None: matched by content, else (given ``source``,
    the file's :class:`~opzoo.data.TrajectorySource`) by the generation recipe of a file with as many trajectories,
    when the record says ``"matched": "recipe"``."""
    records = [r for r in _records(model) if not r.get("by")]
    if not records:
        return None
    digest = content_hash(source if source is not None else path)
    found = next((r for r in records if r.get("content_hash") == digest), None)
    if found is not None or source is None:
        return found
    recipe = generation_recipe(source)
    found = next((r for r in records if recipe is not None and r.get("recipe") == recipe
                  and r.get("trajectories") == source.n_samples), None)
    return None if found is None else {**found, "matched": "recipe"}


def changed_since_training(model, path: str, file) -> tuple[dict[str, Any], list[int], list[int]] | None:
    """For a file the model (or an ancestor: the record's ``by``) records by name and trajectory count but not by
    content, and that still holds some of the recorded trajectories where the record has them (an edited file, not
    another file of that name): ``(record, trained, held)``, the positions whose values differ from those recorded,
    among those trained on and those held out; None otherwise."""
    name, n = Path(path).name, file.n_samples
    for r in _records(model):
        if r.get("file") != name or r.get("trajectories") != n:
            continue
        changed: dict[str, list[int]] = {"train": [], "test": []}
        kept = 0
        for part in changed:
            idx, hashes = _indices(r.get(part), n, n, f"{path}: its training record"), r.get(f"{part}_hashes") or []
            if len(idx) == len(hashes):
                changed[part] = [i for i, h in zip(idx, hashes) if file.trajectory_hash(i) != h]
                kept += len(idx) - len(changed[part])
        if kept and (changed["train"] or changed["test"]):
            return r, changed["train"], changed["test"]
    return None


def describe_recipe(recipe: dict[str, Any]) -> str:
    """``opzoo.data.generators.ns v1, seed 0`` (the params are compared, not printed)."""
    return f"{recipe['generator']} v{recipe['generator_version']}, seed {recipe['seed']}"


def _indices(part, n, limit: int | None = None, where: str = "a training record") -> list[int]:
    """The trajectory positions a record's ``train``/``test`` part names, for a file of ``n`` trajectories (as the
    record says), below ``limit`` (the file at hand's count; a record is never trusted to size a list). A part that is
    not a span of the file (negative, past its end, reversed, another type) is a ConfigError naming ``where``: the
    record is damaged."""
    def damaged(why: str) -> ConfigError:
        return ConfigError(f"{where}: {why}: the training record in the model's config.json (pretrained_cfg."
                           f"training_data) is damaged; restore the model's files")

    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise damaged(f"its trajectory count {n!r} is not a count")
    stop = n if limit is None else max(0, min(n, limit))
    if part is None:
        return []
    if part == "all":
        return list(range(stop))
    if isinstance(part, dict):
        idx = part.get("indices")
        if not isinstance(idx, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n
                                                for i in idx):
            raise damaged(f"'indices' {str(idx)[:80]} are not positions in its {n} trajectories")
        return sorted(i for i in idx if i < stop)
    if (not isinstance(part, (list, tuple)) or len(part) != 2 or
            not all(isinstance(i, int) and not isinstance(i, bool) for i in part) or not 0 <= part[0] <= part[1] < n):
        raise damaged(f"the part {str(part)[:80]} is not [first, last] within its {n} trajectories")
    return list(range(part[0], min(part[1] + 1, stop)))


def _describe(idx: list[int]) -> str:
    if not idx:
        return "no trajectory"
    if len(idx) == 1:
        return f"trajectory {idx[0]}"
    return f"trajectories {idx[0]}-{idx[-1]}" if idx == list(range(idx[0], idx[-1] + 1)) else \
        f"{len(idx)} trajectories ({', '.join(map(str, idx[:6]))}{', ...' if len(idx) > 6 else ''})"


def seen_in(model, source, own: str = "this model") -> dict[int, str]:
    """Positions (in the file) of ``source``'s trajectories the model or an ancestor trained on -> who did: by each
    trajectory's content, and, for a generated file, by the positions a record of the same recipe trained on."""
    file = source.source if hasattr(source, "source") else source
    out: dict[int, str] = {}
    recipe = generation_recipe(file) if _records(model) else None
    if recipe is not None:
        for r in _records(model):
            if r.get("recipe") == recipe:
                n = r.get("trajectories") or 0
                for i in _indices(r.get("train"), n, file.n_samples, f"{file.path}: the record of {r.get('file')}"):
                    out.setdefault(i, r.get("by") or own)
    seen = seen_hashes(model, own)
    if seen:
        for i in range(file.n_samples):
            who = seen.get(file.trajectory_hash(i))
            if who:
                out.setdefault(i, who)
        edited = changed_since_training(model, file.path, file)
        if edited is not None:  # trained on in an earlier form: still not held-out data
            for i in edited[1]:
                out.setdefault(i, f"{edited[0].get('by') or own} (before the file changed)")
    return out


def trained_by(model, source, index: int) -> str | None:
    """Who trained on trajectory ``index`` of the file ``source`` (a ``TrajectoryDataset``): the model ("this model")
    or an ancestor, by the model's record of the file or by the trajectory's content; None: nobody."""
    record = record_for(model, source.path, source.source)
    n = source.source.n_samples
    if record is not None and index in _indices(record.get("train"), n, n, f"{source.path}: its training record"):
        return "this model"
    return seen_in(model, source).get(index)


def _who(seen: dict[int, str], idx: Sequence[int]) -> str:
    names = sorted({seen[i] for i in idx if i in seen})
    return " and ".join(names)


def choose_split(model, source, split: str | None, test_fraction: float | None,
                 include_training: bool) -> tuple[list[int], str, int]:
    """``(indices, label, seen)``: which trajectories of the file ``source`` (a ``TrajectoryDataset``) to score, the
    label that says what they are, and how many of them the model (or an ancestor) trained on.

    For a file the model records: the held-out part by default (``split`` None or ``"test"``); ``"train"`` and
    ``"all"`` score trajectories it trained on, so they need ``include_training`` and are labelled so. For any other
    file: ``split`` as asked (default all), the test split being training's rule (the last ``test_fraction``, default
    0.1). Either way, a trajectory the model or an ancestor trained on (recognised by its content wherever it lies, or by the position a record of the same generation recipe trained on) is
    never scored as held-out: it is left out, or with ``include_training`` scored and labelled as seen.
    """
    if test_fraction is not None and not 0 < test_fraction < 1:
        raise ConfigError(f"--test-fraction must be in (0, 1), as finetune's; got {test_fraction:g}")
    path, n = source.path, source.source.n_samples
    seen = seen_in(model, source)
    record = record_for(model, path, source.source)
    if record is None:
        asked, none, changed = split or "all", "the model records no training on this file", ""
        edited = changed_since_training(model, path, source.source)
        if edited is not None:  # seen_in holds its edited training trajectories as seen; the label says why
            was, trained, held = edited
            changed = (f"; THE FILE CHANGED since {was.get('by') or 'the model'} trained on it as {was['file']} "
                       f"({was.get('content_hash')}):"
                       f" {_describe(sorted(trained + held))} hold(s) other values than the model recorded"
                       + (f", {_describe(trained)} of them trained on" if trained else ""))
        if asked == "all":
            idx, label = list(range(n)), f"all {n} trajectories" + ("" if seen else f" ({none})") + changed
        else:
            fraction = 0.1 if test_fraction is None else test_fraction
            try:
                train, test = train_test_split(n, fraction)  # training's rule, from its one home
            except ValueError as e:
                raise ConfigError(f"{path}: {e}") from None
            idx = list(test) if asked == "test" else list(train)
            label = (f"{asked} split: {_describe(idx)} of {n} (test = the last {fraction:g} of the file, training's "
                     f"rule{'' if seen else '; ' + none}){changed}")
        return _without_seen(path, idx, label, seen, include_training)
    if record.get("trajectories") not in (None, n):
        raise ConfigError(f"{path}: has {n} trajectories, but the model's record of this file ({record['file']}) says "
                          f"{record['trajectories']}")
    where = f"{path}: the model's record of this file"
    trained, held_out = _indices(record.get("train"), n, n, where), _indices(record.get("test"), n, n, where)
    if test_fraction is not None:
        raise ConfigError(f"{path}: the model trained on this file ({record['file']}) and records its split: "
                          f"held out {_describe(held_out) if held_out else 'nothing'}; leave --test-fraction out")
    if split in (None, "test"):
        if not held_out:
            raise ConfigError(f"{path}: the model trained on every trajectory of this file, so none is held out; "
                              f"evaluate on another file, or pass --split all --include-training to score training "
                              f"trajectories (labelled as seen in training)")
        label = (f"held-out split the model records: {_describe(held_out)} of {n} (it trained on "
                 f"{_describe(trained) if trained else 'none'} of this file"
                 f"{_by_recipe(record)})")
        return _without_seen(path, held_out, label, seen, include_training=False)
    chosen = trained if split == "train" else list(range(n))
    if not include_training:
        raise ConfigError(f"{path}: --split {split} would score {len(trained)} trajectories the model trained on "
                          f"({_describe(trained)} of this file, by its record); the default scores the held-out "
                          f"{_describe(held_out) if held_out else 'none'}. Pass --include-training to score them anyway, "
                          f"labelled as seen in training")
    hit = set(chosen) & (set(trained) | set(seen))
    return chosen, (f"{split}: {_describe(chosen)} of {n}, {len(hit)} of them SEEN IN TRAINING "
                    f"(--include-training)"), len(hit)


def _by_recipe(record: dict[str, Any]) -> str:
    if record.get("matched") != "recipe":
        return ""
    return (f"; matched by its generation recipe, {describe_recipe(record['recipe'])}, not by content: the same "
            f"trajectories, regenerated")


def _without_seen(path: str, idx: list[int], label: str, seen: dict[int, str],
                  include_training: bool) -> tuple[list[int], str, int]:
    """``idx`` with the trajectories seen in training left out (or, ``include_training``, kept and labelled)."""
    hit = [i for i in idx if i in seen]
    if not hit:
        return idx, label, 0
    if include_training:
        return idx, (f"{label}; {len(hit)} of them SEEN IN TRAINING (by {_who(seen, hit)}, recognised by their "
                     f"content or generation recipe; --include-training)"), len(hit)
    kept = [i for i in idx if i not in seen]
    if not kept:
        raise ConfigError(f"{path}: every trajectory to score ({_describe(idx)}) was trained on by {_who(seen, hit)} "
                          f"(recognised by content or generation recipe), so none is held out; evaluate on other data, "
                          f"or pass --include-training to score them, labelled as seen in training")
    return kept, (f"{label}, without {_describe(hit)} trained on by {_who(seen, hit)} (recognised by their "
                  f"content or generation recipe; --include-training scores them, labelled)"), 0


def drop_seen_from_tests(model, opened: Sequence[Any]) -> list[str]:
    """A fine-tune's test splits without the trajectories its base (or an ancestor) trained on: they are not
    held-out data for this run either. Returns what was said; ConfigError when a test split would be empty."""
    import dataclasses

    said = []
    for k, o in enumerate(opened):
        seen = seen_in(model, o.test, own="the base model")
        hit = [i for i in o.test.indices if i in seen]
        if not hit:
            continue
        kept = [i for i in o.test.indices if i not in seen]
        if not kept:
            raise ConfigError(f"{o.test.path}: every trajectory of its test split ({_describe(o.test.indices)}) was "
                              f"trained on by {_who(seen, hit)} (recognised by content or generation recipe): nothing would be held out. "
                              f"Hold out other trajectories (another test_fraction or test_path)")
        opened[k] = dataclasses.replace(o, test=o.test.subset(kept))
        said.append(f"{o.test.path}: {_describe(hit)} of the test split were trained on by {_who(seen, hit)} "
                    f"(recognised by content or generation recipe): left out of the held-out scores")
    return said


def split_to_score(model, src, split: str | None, test_fraction: float | None, include_training: bool):
    """``(subset, label)``: the trajectories of ``src`` to score, chosen from what the model records it
    trained on (:func:`choose_split`)."""
    indices, label, _ = choose_split(model, src, split, test_fraction, include_training)
    return (src if indices == list(range(len(src))) else src.subset(indices)), label


def lineage_lines(pretrained_cfg: dict, own: str = "this model") -> list[str]:
    """What ``opzoo info`` says of a trained model's lineage: the chain of models that trained it (the base first) and,
    per file, who trained on which trajectories and which were held out (from ``pretrained_cfg["training_data"]``)."""
    records = list((pretrained_cfg or {}).get("training_data") or [])
    if not records:
        return []
    chain = list(dict.fromkeys(r.get("by") for r in reversed(records) if r.get("by")))
    lines = ["  lineage:    " + " -> ".join([*chain, own]) if chain else f"  lineage:    {own} (no base trained it)"]
    tuning = (pretrained_cfg or {}).get("tuning")
    if isinstance(tuning, dict) and tuning.get("mode"):  # what the last fine-tune trained (opzoo.training.tuning)
        mode = f"lora rank {tuning.get('rank')}" if tuning["mode"] == "lora" else tuning["mode"]
        lines.append(f"  tuned:      {mode}: {tuning.get('trainable_parameters', 0):,} of "
                     f"{tuning.get('parameters', 0):,} parameters trained"
                     + ("; the adapters merged into these weights" if tuning["mode"] == "lora" else ""))

    def span(part) -> str:
        if part is None:
            return "none"
        if part == "all":
            return "all"
        if isinstance(part, dict):
            return f"{len(part.get('indices', []))} listed"
        return f"{part[0]}-{part[1]}"

    for r in records:
        recipe = f"; generated: {describe_recipe(r['recipe'])}" if isinstance(r.get("recipe"), dict) else ""
        lines.append(f"    {r.get('file')} ({r.get('trajectories')} trajectories): trained on {span(r.get('train'))} by "
                     f"{r.get('by') or own} ({len(r.get('train_hashes') or [])} hashed), held out "
                     f"{span(r.get('test'))} ({len(r.get('test_hashes') or [])} hashed){recipe}")
    return lines


__all__ = ["training_record", "record_for", "changed_since_training", "describe_recipe", "seen_hashes", "seen_in", "trained_by", "choose_split", "split_to_score", "lineage_lines",
           "drop_seen_from_tests"]
