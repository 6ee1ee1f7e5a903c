"""``opzoo validate`` (timm's ``validate.py``): many models scored on the same files, with the same split and
metrics, one CSV row per model and file; a model that cannot read a file is a row saying why, and the run
goes on."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import OpzooError

COLUMNS = ("model", "file", "status", "split", "trajectories", "horizon", "l2_full", "persistence_l2_full",
           "l2_step1", "l2_step5", "vrmse_one_step", "reason")


@dataclass
class ValidateRow:
    model: str
    file: str
    status: str  # "ok" or "failed"
    split: str = ""
    trajectories: int = 0
    horizon: int = 0
    l2_full: float = math.nan
    persistence_l2_full: float = math.nan
    l2_step1: float = math.nan
    l2_step5: float = math.nan
    vrmse_one_step: float = math.nan  # mean over the fields of The Well's one-step VRMSE
    reason: str = ""


def models_matching(patterns: Sequence[str]) -> list[str]:
    """Presets with published weights matching the glob ``patterns`` (``*-micro``), and any other reference (a
    saved repo, ``hf-hub:...``) as given."""
    from ..model_io.builder import list_models

    names: list[str] = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            found = list_models(pattern, pretrained=True)
            if not found:
                raise OpzooError(f"no preset with published weights matches {pattern!r} (`opzoo list --pretrained`)")
            names += found
        else:
            names.append(pattern)
    return list(dict.fromkeys(names))


def score(model, name: str, path: str, layout: str | None, horizon: int | None, split: str | None,
          test_fraction: float | None, batch_size: int, max_trajectories: int | None) -> ValidateRow:
    """One model on one file, as ``opzoo eval`` scores it (its split rule, l2, VRMSE, persistence)."""
    from .cli import _frame_shape_for, _split_of, _vrmse_fields
    from .evaluate import evaluate_dataset, with_persistence

    model, frame_shape, (src,) = _frame_shape_for(model, [path], None, layout)
    src, which = _split_of(model, src, split, test_fraction, False)
    r = evaluate_dataset(model, Path(path).stem, src, frame_shape, horizon, batch_size=batch_size,
                         max_trajectories=max_trajectories, vrmse_fields=_vrmse_fields(model, src))
    with_persistence(r, src, frame_shape, horizon, batch_size=batch_size, max_trajectories=max_trajectories)
    one_step = [v["one_step"] for v in r.vrmse.values() if "one_step" in v]
    return ValidateRow(name, path, "ok", which, r.n_trajectories, r.horizon, r.l2_full, r.persistence.l2_full,
                       r.short_horizons.get(1, math.nan), r.short_horizons.get(5, math.nan),
                       sum(one_step) / len(one_step) if one_step else math.nan)


def validate(patterns: Sequence[str], data: Sequence[str], out: Path, *, layout: str | None = None,
             horizon: int | None = None, split: str | None = None, test_fraction: float | None = None,
             batch_size: int = 8, max_trajectories: int | None = None) -> list[ValidateRow]:
    """Every model of ``patterns`` on every file of ``data``; writes ``out`` (CSV) and returns the rows."""
    from ..model_io.builder import load, resolve_weights

    rows: list[ValidateRow] = []
    for name in models_matching(patterns):
        try:
            model = load(name, pretrained=resolve_weights(name, None)[0]).eval()
        except (OpzooError, OSError, ValueError) as e:
            rows += [ValidateRow(name, path, "failed", reason=f"load: {' '.join(str(e).split())}") for path in data]
            print(f"{name}: cannot load: {rows[-1].reason}", flush=True)
            continue
        for path in data:
            try:
                row = score(model, name, path, layout, horizon, split, test_fraction, batch_size, max_trajectories)
                print(f"{name} on {Path(path).name}: l2 full {row.l2_full:.4g} (persistence "
                      f"{row.persistence_l2_full:.4g}), {row.trajectories} trajectories ({row.split})", flush=True)
            except (OpzooError, OSError, ValueError) as e:
                row = ValidateRow(name, path, "failed", reason=" ".join(str(e).split()))
                print(f"{name} on {Path(path).name}: FAILED: {row.reason}", flush=True)
            rows.append(row)
    write_rows(rows, out)
    return rows


def write_rows(rows: Sequence[ValidateRow], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in (getattr(r, c) for c in COLUMNS)])


def cmd_validate(args) -> int:
    out = Path(args.out)
    rows = validate(args.models, args.data, out, layout=args.layout, horizon=args.horizon, split=args.split,
                    test_fraction=args.test_fraction, batch_size=args.batch_size,
                    max_trajectories=args.max_trajectories)
    failed = [r for r in rows if r.status != "ok"]
    print(f"wrote {out}: {len(rows) - len(failed)} scored, {len(failed)} failed")
    for r in failed:
        print(f"  failed: {r.model} on {r.file}: {r.reason}")
    return 0 if len(failed) < len(rows) else 1


def add_validate_command(subparsers) -> None:
    """Add ``validate`` to an argparse sub-parser group (the ``opzoo`` command's)."""
    from .cli import LAYOUT_HELP as layout_help
    from .cli import _one_line_errors as one_line_errors

    p = subparsers.add_parser("validate", help="score many models on the same files (same split and metrics): one "
                                               "CSV row per model and file, persistence alongside")
    p.add_argument("models", nargs="+", help="glob patterns of presets with published weights (e.g. '*-micro'), or "
                                             "model references")
    p.add_argument("--data", nargs="+", required=True)
    p.add_argument("--out", default="validate.csv", help="the CSV written")
    p.add_argument("--layout", help=layout_help)
    p.add_argument("--horizon", type=int, help="rollout steps (default: whole trajectories)")
    p.add_argument("--split", choices=("test", "all"), help="as eval's --split (default: the held-out part of a file "
                                                           "a model trained on, else all)")
    p.add_argument("--test-fraction", type=float, help="as eval's --test-fraction")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-trajectories", type=int, help="score only the first N trajectories of the split")
    p.set_defaults(func=one_line_errors(cmd_validate))
