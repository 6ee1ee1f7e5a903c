"""FLeRM records: per-tensor function-space learning rates over training, as JSON (never pickle).

File layout (``RUN_DIR/flerm/record.json`` for a recording run, ``match.json`` for a matching run)::

    {"format": "opzoo-flerm", "version": 2, "mode": "record" | "match",
     "steps": [1, 100, 200, ...],            # updates done when measured (log.jsonl's "step")
     "fslr": {name: [float per step]},       # ‖Δ_ℓ f‖_RMS of the lr = 1 update
     "base_lr": [float per step],            # η0 · schedule at that step
     "lr_scale": {name: [float per step]},   # the tensor's lr / (η0 · schedule · FLeRM's multiplier)
     "multipliers": {name: [float per step]},  # match mode only
     "clamped": [{"step": s, "raw": {name: float}}],  # match mode only: multipliers that were clamped
     "block_lists": {"blocks": 4, ...},      # ModuleList lengths (for depth mapping)
     "readout": [names], "settings": {...}}

Depth and width mapping by name (:func:`map_base_values`): names match one-to-one, except inside a
``ModuleList`` of blocks: when the scaled model has ``depth_mult`` times the base's blocks, base block
``m`` maps to scaled blocks ``m·k … m·k + k − 1``, each getting ``base / k`` (Sec. 3.3).
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from torch import nn

import opzoo

FORMAT, VERSION = "opzoo-flerm", 2


def block_lists(model: nn.Module) -> dict[str, int]:
    """``{path: len}`` of the model's outermost ``ModuleList`` s that hold parameters (its stacks of blocks)."""
    out: dict[str, int] = {}
    for name, m in model.named_modules():
        if isinstance(m, nn.ModuleList) and name and any(True for _ in m.parameters()):
            if not any(name.startswith(f"{outer}.") for outer in out):
                out[name] = len(m)
    return out


def split_block_name(name: str, lists: Mapping[str, int]) -> tuple[str, int, str] | None:
    """``"blocks.3.mlp.fc1.weight"`` -> ``("blocks", 3, "mlp.fc1.weight")`` when ``blocks`` is a block list."""
    for path in lists:
        m = re.fullmatch(re.escape(path) + r"\.(\d+)\.(.+)", name)
        if m:
            return path, int(m.group(1)), m.group(2)
    return None


def group_name(name: str, lists: Mapping[str, int]) -> str:
    """The layer group of a tensor: its name with the block index replaced by ``*`` (for plots)."""
    parts = split_block_name(name, lists)
    return name if parts is None else f"{parts[0]}.*.{parts[2]}"


class FslrRecord:
    """A loaded record: steps, per-tensor values, and block-list lengths."""

    def __init__(self, steps: Sequence[int], fslr: Mapping[str, Sequence[float]], block_lists: Mapping[str, int],
                 source: str = "<memory>", extra: Mapping[str, Any] | None = None,
                 base_lr: Sequence[float] | None = None, lr_scale: Mapping[str, Sequence[float]] | None = None):
        self.steps, self.fslr, self.block_lists = list(steps), {k: list(v) for k, v in fslr.items()}, dict(block_lists)
        self.source, self.extra = source, dict(extra or {})
        self.base_lr = list(base_lr) if base_lr is not None else None
        # no lr scales (a record built in memory): every tensor trained at η0 · schedule
        self.lr_scale = ({k: list(v) for k, v in lr_scale.items()} if lr_scale is not None
                         else {k: [1.0] * len(self.steps) for k in self.fslr})

    def _index(self, step: int) -> int:
        i = bisect.bisect_right(self.steps, step) - 1
        if i < 0:
            raise opzoo.ConfigError(f"{self.source}: no measurement at or before step {step} (first: {self.steps[0]})")
        return i

    def at(self, step: int, field: str = "fslr") -> dict[str, float]:
        """Values (``fslr`` or ``lr_scale``) of the last measurement at or before ``step`` (the last one
        past the record's end)."""
        i = self._index(step)
        return {k: v[i] for k, v in getattr(self, field).items()}

    def base_lr_at(self, step: int) -> float | None:
        """The base lr the record measured at exactly ``step`` (None when it did not measure there)."""
        if self.base_lr is None or step not in self.steps:
            return None
        return self.base_lr[self.steps.index(step)]

    @classmethod
    def load(cls, path: str | os.PathLike) -> "FslrRecord":
        """Read a record file, or ``RUN_DIR/flerm/record.json`` when ``path`` is a run directory."""
        p = Path(path)
        if p.is_dir():
            p = p / "flerm" / "record.json"
        if not p.is_file():
            raise opzoo.ConfigError(f"FLeRM base record {str(p)!r} does not exist (record one with mode: record)")
        doc = opzoo.read_json(p, "a FLeRM record")
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise opzoo.ConfigError(f"{p}: not an opzoo FLeRM record (key 'format' is not {FORMAT!r})")
        if doc.get("version") == 1:
            raise opzoo.ConfigError(f"{p}: a version-1 FLeRM record: its estimates were dominated by the step-1 "
                                    "warm-up and it lacks the lr scales; record the base again with this version")
        if doc.get("version") != VERSION:
            raise opzoo.ConfigError(f"{p}: FLeRM record version {doc.get('version')!r} is not supported (expected {VERSION})")
        for key in ("steps", "fslr", "block_lists", "base_lr", "lr_scale"):
            if key not in doc:
                raise opzoo.ConfigError(f"{p}: FLeRM record lacks key {key!r}")
        steps = doc["steps"]
        if not steps or sorted(steps) != steps or not all(isinstance(s, int) for s in steps):
            raise opzoo.ConfigError(f"{p}: 'steps' must be a non-empty increasing list of ints")
        for key in ("fslr", "lr_scale"):
            for name, values in doc[key].items():
                if len(values) != len(steps):
                    raise opzoo.ConfigError(f"{p}: {key}[{name!r}] has {len(values)} values for {len(steps)} steps")
                if not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in values):
                    raise opzoo.ConfigError(f"{p}: {key}[{name!r}] holds a negative or non-finite value")
        if set(doc["lr_scale"]) != set(doc["fslr"]):
            raise opzoo.ConfigError(f"{p}: 'lr_scale' and 'fslr' name different tensors")
        base_lr = doc["base_lr"]
        if len(base_lr) != len(steps) or not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in base_lr):
            raise opzoo.ConfigError(f"{p}: 'base_lr' must hold one finite lr >= 0 per step")
        return cls(steps, doc["fslr"], doc["block_lists"], str(p), doc, base_lr, doc["lr_scale"])

    @classmethod
    def mean(cls, records: Sequence["FslrRecord"]) -> "FslrRecord":
        """The average of several base records (e.g. seeds), which must share steps, names and blocks."""
        first = records[0]
        for r in records[1:]:
            if r.steps != first.steps or set(r.fslr) != set(first.fslr) or r.block_lists != first.block_lists:
                raise opzoo.ConfigError(f"FLeRM base records {first.source} and {r.source} differ in steps, "
                                        "parameter names or block lists; they cannot be averaged")
            same_lr = (r.base_lr is None) == (first.base_lr is None) and (r.base_lr is None or all(
                math.isclose(a, b, rel_tol=1e-6) for a, b in zip(r.base_lr, first.base_lr)))
            same_scale = all(math.isclose(a, b, rel_tol=1e-6) for k in first.lr_scale
                             for a, b in zip(r.lr_scale[k], first.lr_scale[k]))
            if not (same_lr and same_scale):
                raise opzoo.ConfigError(f"FLeRM base records {first.source} and {r.source} were made at different "
                                        "base lrs or per-tensor lr scales; they cannot be averaged")
        fslr = {k: [sum(r.fslr[k][i] for r in records) / len(records) for i in range(len(first.steps))]
                for k in first.fslr}
        return cls(first.steps, fslr, first.block_lists, " + ".join(r.source for r in records),
                   base_lr=first.base_lr, lr_scale=first.lr_scale)


def write_record(path: Path, doc: Mapping[str, Any]) -> None:
    """Write atomically (temp file, then rename), so a reader never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    opzoo.atomic_write(path, json.dumps({"format": FORMAT, "version": VERSION, **doc}, allow_nan=False))


def depth_multipliers(base_lists: Mapping[str, int], lists: Mapping[str, int], source: str) -> dict[str, int]:
    """``{list: k}``: how many scaled blocks each base block became."""
    out, bad = {}, []
    for path, n in lists.items():
        b = base_lists.get(path)
        if b is None:
            continue  # its parameters are reported as unmapped by name
        if b <= 0 or n % b:
            bad.append(f"{path}: {n} blocks is not a multiple of the base's {b}")
        else:
            out[path] = n // b
    if bad:
        raise opzoo.ConfigError(f"{source}: cannot map depth: " + "; ".join(bad))
    return out


def map_base_values(names: Sequence[str], lists: Mapping[str, int], base: FslrRecord, step: int,
                    field: str = "fslr") -> dict[str, float]:
    """Base ``‖Δ_ℓ f‖`` (``field="fslr"``) of each scaled-model tensor at ``step`` (width by name, depth by
    block: a base block's value is shared by the ``k`` blocks it became), or its lr scale (``"lr_scale"``,
    taken over unshared)."""
    mult = depth_multipliers(base.block_lists, lists, base.source)
    values = base.at(step, field)
    out, missing = {}, []
    for name in names:
        parts = split_block_name(name, lists)
        if parts is not None and parts[0] in mult:
            path, index, rest = parts
            k = mult[path]
            key = f"{path}.{index // k}.{rest}"
            if key in values:
                out[name] = values[key] / k if field == "fslr" else values[key]
                continue
        elif name in values:
            out[name] = values[name]
            continue
        missing.append(name)
    if missing:
        raise opzoo.ConfigError(
            f"{base.source}: {len(missing)} parameter(s) of the model have no counterpart in the FLeRM base record: "
            + ", ".join(missing))
    return out
