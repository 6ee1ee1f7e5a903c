"""What ``opzoo compare`` writes into its directory, from its cells' scores (``result``: the
:class:`opzoo.benchmark.compare.CompareResult` of :mod:`opzoo.benchmark.compare`, which imports this module):

- ``compare.csv``: a row per cell (``model, start, trajectories, seed, status``), each score's median over the test
  trajectories with its 95 % bootstrap interval (``_lo``, ``_hi``), PDEBench's set, and ``accuracy_gain`` over the
  baseline at the same N and seed (with its paired interval);
- ``gains.csv``: a row per model and start, ``efficiency_gain`` (and whether it is extrapolated) and ``accuracy_gain``
  at the largest N, with bootstrap intervals (:mod:`opzoo.evaluation.gains`);
- ``compare.md``: the tables, each model's fit block, the costs, the budget, the machine and the command;
- ``compare.png``: the headline error against N, log-log, with intervals (the rollout pictures are
  :func:`opzoo.benchmark.compare.rollout_pictures`');
- ``compare.json``: what the report was made from, so that ``opzoo compare --report DIR`` re-renders it.
"""

from __future__ import annotations

import csv
import io
import math
import platform
from pathlib import Path
from typing import Any, Callable

import torch

from ..evaluation.gains import accuracy_gain, efficiency_gain

HEADLINE = "rel_l1"  # Poseidon's: the median relative L1 error over test trajectories (the gains are of it)
BOOTSTRAPS = 1000
SCORE_NAMES = ("vrmse_1", "vrmse_1_20", "vrmse_21_60", "vrmse_all", "rel_l2", "rel_l1")


def draws(n_trajectories: int, n: int = BOOTSTRAPS, seed: int = 0) -> torch.Tensor:
    """``[n, m]`` trajectory indices, the same for every cell (their test trajectories are the same, in order)."""
    return torch.randint(0, n_trajectories, (n, n_trajectories), generator=torch.Generator().manual_seed(seed))


def median(values) -> float:
    """The median (the mean of the two middle values of an even count; torch.median gives the lower one)."""
    return float(torch.quantile(torch.as_tensor(values, dtype=torch.float64), 0.5))


def medians(values: list[float], idx: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The median of ``values`` and its bootstrap replicates under the draws ``idx``."""
    x = torch.tensor(values, dtype=torch.float64)
    return median(x), torch.quantile(x[idx], 0.5, dim=1)


def interval(replicates: torch.Tensor) -> tuple[float, float]:
    finite = replicates[torch.isfinite(replicates)]
    if finite.numel() == 0:
        return math.nan, math.nan
    return float(torch.quantile(finite, 0.025)), float(torch.quantile(finite, 0.975))


def cell_table(result) -> tuple[list[dict[str, Any]], dict]:
    """The rows of compare.csv, and the headline's replicates per (model, start, N, seed) for the gains."""
    done = [r for r in result.cells if r.status == "done"]
    m = len(done[0].scores["per_trajectory"][HEADLINE]) if done else 0
    idx = draws(m) if m else None
    reps: dict = {}
    rows = []
    for r in result.cells:
        c = r.cell
        row: dict[str, Any] = {"model": c.model, "start": c.start, "trajectories": c.trajectories, "seed": c.seed,
                               "status": r.status}
        if r.status == "done":
            for name in SCORE_NAMES:
                values = r.scores["per_trajectory"].get(name)
                if values is None:
                    continue
                value, rep = medians(values, idx)
                lo, hi = interval(rep)
                row.update({name: value, f"{name}_lo": lo, f"{name}_hi": hi})
                if name == HEADLINE:
                    reps[(c.model, c.start, c.trajectories, c.seed)] = (value, rep)
            for name, value in r.scores.get("pdebench", {}).items():
                lo, hi = r.scores.get("pdebench_intervals", {}).get(name, (math.nan, math.nan))
                row.update({name: value, f"{name}_lo": lo, f"{name}_hi": hi})
        rows.append(row)
    base = result.baseline
    for row in rows:
        mine = reps.get((row["model"], row["start"], row["trajectories"], row["seed"]))
        theirs = reps.get((base, "scratch", row["trajectories"], row["seed"]))
        if mine is not None and theirs is not None:
            row["accuracy_gain"] = accuracy_gain(theirs[0], mine[0])
            row["accuracy_gain_lo"], row["accuracy_gain_hi"] = interval(theirs[1] / mine[1])
    return rows, reps


def curve(reps: dict, model: str, start: str, ns, seeds: int, b: int | None = None) -> list[float]:
    """The headline error at each N, averaged over seeds (``b``: of bootstrap replicate ``b``)."""
    out = []
    for n in ns:
        vals = [reps[(model, start, n, s)] for s in range(seeds) if (model, start, n, s) in reps]
        if not vals:
            out.append(math.nan)
            continue
        out.append(sum(float(v[0] if b is None else v[1][b]) for v in vals) / len(vals))
    return out


def gains_table(result, reps: dict) -> list[dict[str, Any]]:
    """EG and AG at the largest N of each (model, start) over the baseline, with bootstrap intervals."""
    ns, seeds, base = result.options.trajectories, result.options.seeds, result.baseline
    baseline = curve(reps, base, "scratch", ns, seeds)
    rows = []
    pairs = dict.fromkeys((k[0], k[1]) for k in reps)
    for model, start in pairs:
        if model == base:
            continue
        mine = curve(reps, model, start, ns, seeds)
        eg = efficiency_gain(ns, mine, baseline)
        ag = accuracy_gain(baseline[-1], mine[-1])
        egs, ags = [], []
        for b in range(BOOTSTRAPS):
            egs.append(efficiency_gain(ns, curve(reps, model, start, ns, seeds, b),
                                       curve(reps, base, "scratch", ns, seeds, b)).value)
            mb, bb = curve(reps, model, start, ns[-1:], seeds, b), curve(reps, base, "scratch", ns[-1:], seeds, b)
            ags.append(accuracy_gain(bb[0], mb[0]))
        # no EG where the curve cannot say it (it never falls to the baseline's error): no interval either, though
        # some resampled curves may
        eg_lo, eg_hi = interval(torch.tensor(egs, dtype=torch.float64)) if math.isfinite(eg.value) else (math.nan,
                                                                                                        math.nan)
        ag_lo, ag_hi = interval(torch.tensor(ags, dtype=torch.float64))
        rows.append({"model": model, "start": start, "efficiency_gain": eg.value, "efficiency_gain_lo": eg_lo,
                     "efficiency_gain_hi": eg_hi, "efficiency_gain_extrapolated": eg.extrapolated,
                     "efficiency_gain_bound": eg.bound, "efficiency_gain_text": eg.text(),
                     "accuracy_gain": ag, "accuracy_gain_lo": ag_lo, "accuracy_gain_hi": ag_hi,
                     "trajectories": ns[-1], "metric": f"median {HEADLINE}"})
    return rows


def write_csv(path: Path, rows: list[dict[str, Any]], first: tuple[str, ...]) -> None:
    from ..files import atomic_write

    columns = list(first) + sorted({k for r in rows for k in r} - set(first))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write(path, buffer.getvalue().encode())


def _predicted_from(result):
    return next((r.scores.get("predicted_from") for r in result.cells if r.status == "done"), "?")


def _fmt(v) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3g}"


def markdown(result, rows, gains, command: str) -> str:
    o = result.options
    lines = [f"# opzoo compare: {', '.join(result.models)} on {', '.join(Path(p).name for p in result.data)}", "",
             f"Budget: {o.steps} optimizer steps per cell, batch {o.batch_size}, N = "
             f"{', '.join(map(str, o.trajectories))} training trajectories per file (nested: a smaller N's are the "
             f"first of a larger N's), {o.seeds} seed(s); baseline {result.baseline} from scratch; every model from "
             f"its weights" + (" and from scratch" if o.scratch else "") + ". Scores on the same held-out "
             f"trajectories (the last {o.test_fraction:g} of each file) and the same predicted frames (from frame "
             f"{_predicted_from(result)} on, each model's window just before it) at the file's own grid: medians over "
             "trajectories with 95 % bootstrap intervals.", "",
             f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, torch {torch.__version__}.", "",
             f"Reproduce: `{command}`", "", "## Scores", "",
             "| model | start | N | seed | status | median rel. L1 | VRMSE 1 step | VRMSE 1-20 | VRMSE 21-60 | "
             "rel. L2 | AG |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "done":
            lines.append(f"| {r['model']} | {r['start']} | {r['trajectories']} | {r['seed']} | {r['status'][:200]} "
                         f"| | | | | | |")
            continue
        ci = f" [{_fmt(r.get(HEADLINE + '_lo'))}, {_fmt(r.get(HEADLINE + '_hi'))}]"
        lines.append(f"| {r['model']} | {r['start']} | {r['trajectories']} | {r['seed']} | done | "
                     f"{_fmt(r.get(HEADLINE))}{ci} | {_fmt(r.get('vrmse_1'))} | {_fmt(r.get('vrmse_1_20'))} | "
                     f"{_fmt(r.get('vrmse_21_60'))} | {_fmt(r.get('rel_l2'))} | {_fmt(r.get('accuracy_gain'))} |")
    if result.persistence:
        p = result.persistence["per_trajectory"]
        lines += ["", f"Persistence (the last input frame repeated) on the same trajectories: median rel. L1 "
                      f"{_fmt(median(p[HEADLINE]))}."]
    lines += ["", "## Gains over the baseline (Poseidon's EG and AG, of the median relative L1 error)", "",
              "| model | start | EG | EG interval | AG at the largest N | AG interval |", "|---|---|---|---|---|---|"]
    for g in gains:
        eg = g["efficiency_gain_text"]
        lines.append(f"| {g['model']} | {g['start']} | {eg} | [{_fmt(g['efficiency_gain_lo'])}, "
                     f"{_fmt(g['efficiency_gain_hi'])}] | {_fmt(g['accuracy_gain'])} | [{_fmt(g['accuracy_gain_lo'])}, "
                     f"{_fmt(g['accuracy_gain_hi'])}] |")
    lines += ["", "## Cost per model", "", "| model | parameters | GFLOP per training step | memory MiB a step adds at "
              "its peak (measured here) | peak memory MiB of a step (estimate) | seconds per step (measured here) |",
              "|---|---|---|---|---|---|"]
    for model, c in result.costs.items():
        measured = c.get("memory_mib_measured")  # absent from a compare.json written before it was measured
        lines.append(f"| {model} | {c['parameters']:,} | {_fmt(c['gflop_per_step'])} | "
                     f"{'n/a' if measured is None else _fmt(measured)} | {_fmt(c['memory_mib_estimate'])} | "
                     f"{_fmt(c['seconds_per_step'])} |")
    lines += ["", "## How each model read the files", ""]
    for model in dict.fromkeys(r.cell.model for r in result.cells):
        cell = next((r for r in result.cells if r.cell.model == model and r.status == "done"), None)
        lines.append(f"**{model}**" + ("" if cell else ": no cell ran"))
        lines += [f"    {line}" for line in (cell.scores.get("fit", []) if cell else [])]
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(result, rows, path: Path) -> None:
    from ..evaluation.plots import legend, pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.6, 4.6))
    groups = dict.fromkeys((r["model"], r["start"]) for r in rows if HEADLINE in r)
    # one colour per model, a solid line from its weights and a dashed one from scratch (the baseline solid)
    colours = {m: f"C{i % 10}" for i, m in enumerate(dict.fromkeys(m for m, _ in groups))}
    for model, start in groups:
        ns, ys, los, his = [], [], [], []
        for n in result.options.trajectories:
            mine = [r for r in rows if (r["model"], r["start"], r["trajectories"]) == (model, start, n) and HEADLINE in r]
            if mine:
                ns.append(n)
                ys.append(sum(r[HEADLINE] for r in mine) / len(mine))
                los.append(min(r[HEADLINE + "_lo"] for r in mine))
                his.append(max(r[HEADLINE + "_hi"] for r in mine))
        err = [[y - lo for y, lo in zip(ys, los)], [hi - y for y, hi in zip(ys, his)]]
        scratch = start == "scratch" and model != result.baseline
        ax.errorbar(ns, ys, yerr=err, marker="s" if scratch else "o", capsize=3, color=colours[model],
                    linestyle="--" if scratch else "-", label=f"{model} ({start})")
    if result.persistence:
        ax.axhline(median(result.persistence["per_trajectory"][HEADLINE]), color="gray",
                   linestyle="--", label="persistence")
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import NullFormatter

    ax.set_xticks(list(result.options.trajectories), [str(n) for n in result.options.trajectories])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training trajectories N")
    ax.set_ylabel("median relative L1 error (test)")
    ax.set_title("error against the number of training trajectories")
    legend(ax, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    save_figure(plt, fig, path)


def write_report(result, say: Callable[[str], None] = print, command: str = "") -> dict[str, Path]:
    from ..files import atomic_write

    out = result.out
    out.mkdir(parents=True, exist_ok=True)
    rows, reps = cell_table(result)
    gains = gains_table(result, reps)
    paths = {"csv": out / "compare.csv", "gains": out / "gains.csv", "md": out / "compare.md",
             "png": out / "compare.png"}
    write_csv(paths["csv"], rows, ("model", "start", "trajectories", "seed", "status"))
    write_csv(paths["gains"], gains, ("model", "start", "efficiency_gain", "accuracy_gain"))
    command = command or f"opzoo compare {' '.join(result.models)} --data {' '.join(result.data)} --out {out}"
    atomic_write(paths["md"], markdown(result, rows, gains, command).encode())
    if any(HEADLINE in r for r in rows):
        plot(result, rows, paths["png"])
    return paths


__all__ = ["cell_table", "gains_table", "write_report"]
