"""FLeRM records: per-tensor function-space learning rates over training, as JSON (never pickle).

File layout (``RUN_DIR/flerm/record.json`` for a recording run, ``match.json`` for a matching run)::

    {"format": "opzoo-flerm", "version": 1, "mode": "record" | "match",
     "steps": [1, 100, 200, ...],            # updates done when measured (log.jsonl's "step")
     "fslr": {name: [float per step]},       # ‖Δ_ℓ f‖_RMS of the lr = 1 update
     "multipliers": {name: [float per step]},  # match mode only: base / current
     "base_lr": [float per step],            # optimizer.lr · schedule at that step
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

FORMAT, VERSION = "opzoo-flerm", 1


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
                 source: str = "<memory>", extra: Mapping[str, Any] | None = None):
        self.steps, self.fslr, self.block_lists = list(steps), {k: list(v) for k, v in fslr.items()}, dict(block_lists)
        self.source, self.extra = source, dict(extra or {})

    def at(self, step: int) -> dict[str, float]:
        """Values of the last measurement at or before ``step`` (the last one past the record's end)."""
        i = bisect.bisect_right(self.steps, step) - 1
        if i < 0:
            raise opzoo.ConfigError(f"{self.source}: no measurement at or before step {step} (first: {self.steps[0]})")
        return {k: v[i] for k, v in self.fslr.items()}

    @classmethod
    def load(cls, path: str | os.PathLike) -> "FslrRecord":
        """Read a record file, or ``RUN_DIR/flerm/record.json`` when ``path`` is a run directory."""
        p = Path(path)
        if p.is_dir():
            p = p / "flerm" / "record.json"
        if not p.is_file():
            raise opzoo.ConfigError(f"FLeRM base record {str(p)!r} does not exist (record one with mode: record)")
        try:
            doc = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise opzoo.ConfigError(f"{p}: not a JSON FLeRM record ({e})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise opzoo.ConfigError(f"{p}: not an opzoo FLeRM record (key 'format' is not {FORMAT!r})")
        if doc.get("version") != VERSION:
            raise opzoo.ConfigError(f"{p}: FLeRM record version {doc.get('version')!r} is not supported (expected {VERSION})")
        for key in ("steps", "fslr", "block_lists"):
            if key not in doc:
                raise opzoo.ConfigError(f"{p}: FLeRM record lacks key {key!r}")
        steps = doc["steps"]
        if not steps or sorted(steps) != steps or not all(isinstance(s, int) for s in steps):
            raise opzoo.ConfigError(f"{p}: 'steps' must be a non-empty increasing list of ints")
        for name, values in doc["fslr"].items():
            if len(values) != len(steps):
                raise opzoo.ConfigError(f"{p}: fslr[{name!r}] has {len(values)} values for {len(steps)} steps")
            if not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in values):
                raise opzoo.ConfigError(f"{p}: fslr[{name!r}] holds a negative or non-finite value")
        return cls(steps, doc["fslr"], doc["block_lists"], str(p), doc)

    @classmethod
    def mean(cls, records: Sequence["FslrRecord"]) -> "FslrRecord":
        """The average of several base records (e.g. seeds), which must share steps, names and blocks."""
        first = records[0]
        for r in records[1:]:
            if r.steps != first.steps or set(r.fslr) != set(first.fslr) or r.block_lists != first.block_lists:
                raise opzoo.ConfigError(f"FLeRM base records {first.source} and {r.source} differ in steps, "
                                        "parameter names or block lists; they cannot be averaged")
        fslr = {k: [sum(r.fslr[k][i] for r in records) / len(records) for i in range(len(first.steps))]
                for k in first.fslr}
        return cls(first.steps, fslr, first.block_lists, " + ".join(r.source for r in records))


def write_record(path: Path, doc: Mapping[str, Any]) -> None:
    """Write atomically (temp file, then rename), so a reader never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"format": FORMAT, "version": VERSION, **doc}, allow_nan=False))
    os.replace(tmp, path)


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


def map_base_values(names: Sequence[str], lists: Mapping[str, int], base: FslrRecord, step: int) -> dict[str, float]:
    """Base ``‖Δ_ℓ f‖`` of each scaled-model tensor at ``step`` (width by name, depth by block)."""
    mult = depth_multipliers(base.block_lists, lists, base.source)
    values = base.at(step)
    out, missing = {}, []
    for name in names:
        parts = split_block_name(name, lists)
        if parts is not None and parts[0] in mult:
            path, index, rest = parts
            k = mult[path]
            key = f"{path}.{index // k}.{rest}"
            if key in values:
                out[name] = values[key] / k
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
