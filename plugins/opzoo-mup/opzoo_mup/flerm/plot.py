"""``opzoo flerm plot RUN_DIR``: function-space learning rates over training per layer group (the
paper's Figure 1), one line per tensor coloured by its group, as a PNG."""

from __future__ import annotations

import os
from pathlib import Path

import opzoo

from .record import group_name


def find_records(run_dir: str | os.PathLike) -> list[Path]:
    """``RUN_DIR/flerm/{record,match}.json`` (or ``RUN_DIR`` itself when it is a record file)."""
    p = Path(run_dir)
    if p.is_file():
        return [p]
    found = [f for f in (p / "flerm" / "record.json", p / "flerm" / "match.json") if f.is_file()]
    if not found:
        raise opzoo.OpzooError(f"{p}: no FLeRM record (expected {p / 'flerm' / 'record.json'} or match.json; "
                               "train with optimizer.hooks: [{name: flerm}])")
    return found


def plot_record(path: str | os.PathLike, out: str | os.PathLike, actual: bool = True) -> Path:
    """Plot one record file; ``actual`` multiplies the lr = 1 values by the lr the measured update used
    (base lr x the tensor's lr scale x FLeRM's multiplier in effect for it)."""
    from opzoo.evaluation import pyplot, save_figure

    from .record import FslrRecord

    plt = pyplot()

    rec = FslrRecord.load(path)
    doc = rec.extra
    groups: dict[str, list[str]] = {}
    for name in rec.fslr:
        groups.setdefault(group_name(name, rec.block_lists), []).append(name)
    base_lr = doc.get("base_lr") or [1.0] * len(rec.steps)
    mults = doc.get("multipliers", {})
    has_mult = bool(mults)
    fig, axes = plt.subplots(1, 2 if has_mult else 1, figsize=(13 if has_mult else 9, 5), squeeze=False)
    ax = axes[0, 0]
    cmap = plt.get_cmap("tab20")
    for gi, (group, names) in enumerate(sorted(groups.items())):
        color = cmap(gi % 20)
        for j, name in enumerate(names):
            ys = rec.fslr[name]
            if actual:  # the update measured at a step ran with the multiplier set at the measurement before
                in_effect = [1.0] + mults.get(name, [1.0] * len(ys))[:-1]
                scale = rec.lr_scale[name]
                ys = [y * lr * sc * mm for y, lr, sc, mm in zip(ys, base_lr, scale, in_effect)]
            pts = [(s, y) for s, y in zip(rec.steps, ys) if y > 0]
            if pts:
                ax.plot(*zip(*pts), color=color, lw=1.0, marker=".", ms=3, label=group if j == 0 else None)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("‖Δ_ℓ f‖_RMS per update" if actual else "‖Δ_ℓ f‖_RMS of the lr = 1 update")
    ax.set_title(f"function-space learning rates ({doc.get('mode', 'record')}), {len(rec.fslr)} tensors")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=1 + len(groups) // 16, loc="best")
    if has_mult:
        ax2 = axes[0, 1]
        for gi, (group, names) in enumerate(sorted(groups.items())):
            for j, name in enumerate(names):
                ax2.plot(rec.steps, mults[name], color=cmap(gi % 20), lw=1.0, marker=".", ms=3,
                         label=group if j == 0 else None)
        ax2.set_yscale("log")
        ax2.set_xlabel("step")
        ax2.set_ylabel("FLeRM lr multiplier (base / current)")
        ax2.set_title("matched per-tensor lr multipliers")
        ax2.grid(True, which="both", alpha=0.3)
    return save_figure(plt, fig, out)


def plot_command(args) -> int:
    paths = find_records(args.run_dir)
    for p in paths:
        out = Path(args.out) if args.out and len(paths) == 1 else p.with_suffix(".png")
        if args.out and len(paths) > 1:
            out = Path(args.out).with_name(f"{Path(args.out).stem}-{p.stem}.png")
        plot_record(p, out, actual=not args.lr1)
        print(f"wrote {out}")
    return 0


def add_commands(subparsers) -> None:
    """``opzoo flerm plot RUN_DIR [--out PNG] [--lr1]``."""
    flerm = subparsers.add_parser("flerm", help="FLeRM: function-space learning rates (opzoo-mup)")
    sub = flerm.add_subparsers(dest="flerm_command", required=True)
    p = sub.add_parser("plot", help="plot a run's function-space learning rates per layer group (PNG)")
    p.add_argument("run_dir", help="a run directory with flerm/record.json or flerm/match.json, or a record file")
    p.add_argument("--out", default=None, help="PNG path (default: next to the record, flerm/record.png)")
    p.add_argument("--lr1", action="store_true", help="plot the lr = 1 values the estimator tracks, not lr x them")
    p.set_defaults(func=plot_command)
