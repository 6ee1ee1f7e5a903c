"""What ``opzoo compare`` writes into its directory, from its cells' score records (``result``: the
:class:`opzoo.benchmark.compare.CompareResult`):

- ``compare.csv``: a row per cell (``model, start, trajectories, seed, status``): Poseidon's error (the headline, of
  which the gains are) and the other scores, each aggregated as its protocol says with a 95 % bootstrap interval
  (``_lo``, ``_hi``), PDEBench's set and the plugins' metrics, ``accuracy_gain`` over the baseline at the same N and
  seed (paired interval), whether the cell (or the baseline under its gain) is worse than persistence, the cell's lr,
  the step its weights were kept from and the steps it ran, and why a score is ``n/a``. Only what the cells'
  weights determine: a re-render, or a compare run from ``--plan``'s commands, writes the same file.
- ``gains.csv``: a row per model and start, EG and AG at the largest N with bootstrap intervals
  (:mod:`opzoo.evaluation.gains`);
- ``compare.md``: the protocol, the tables, the costs (measured once, kept with a cell), each model's fit as training
  read the files, each cell's command, the machine;
- ``compare.png`` and ``rollout-<model>.png``.
"""

from __future__ import annotations

import csv
import io
import math
import os
import platform
from pathlib import Path
from typing import Any

import torch

from ..evaluation.gains import accuracy_gain, efficiency_gain
from ..evaluation.protocols import WINDOWS

HEADLINE = "poseidon_l1"  # Poseidon's error: the gains are of it
BOOTSTRAPS = 1000
POOLED = (("rel_l1", "median"), ("rel_l2", "median"), ("vrmse_all", "median"))
SCORES = (*POOLED, *((w.name, w.aggregate) for w in WINDOWS))  # (column, aggregate over trajectories)
FIRST = ("model", "start", "trajectories", "seed", "status")


def draws(n_trajectories: int, n: int = BOOTSTRAPS, seed: int = 0) -> torch.Tensor:
    """``[n, m]`` trajectory indices, the same for every cell (their test trajectories are the same, in order)."""
    return torch.randint(0, n_trajectories, (n, n_trajectories), generator=torch.Generator().manual_seed(seed))


def median(values) -> float:
    """The median (the mean of the two middle values of an even count, as numpy's; torch.median gives the lower)."""
    return float(torch.quantile(torch.as_tensor(values, dtype=torch.float64), 0.5))


def aggregate(values, idx: torch.Tensor, how: str) -> tuple[float, torch.Tensor]:
    """The median or mean of ``values`` and its bootstrap replicates under the draws ``idx``."""
    x = torch.tensor(values, dtype=torch.float64)
    if how == "mean":
        return float(x.mean()), x[idx].mean(1)
    return median(x), torch.quantile(x[idx], 0.5, dim=1)


def poseidon_table(per_function: dict[str, list]) -> torch.Tensor:
    """``{function: [value or None per trajectory]}`` -> ``[trajectories, functions]`` (NaN: the file lacks it)."""
    return torch.tensor([[math.nan if v is None else v for v in values] for values in per_function.values()],
                        dtype=torch.float64).T


def poseidon_replicates(table: torch.Tensor, idx: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Poseidon's error of ``table`` (:func:`opzoo.evaluation.protocols.poseidon_error`) and its replicates."""
    from ..evaluation.protocols import poseidon_error

    medians = torch.stack([torch.nanquantile(table[:, f][idx], 0.5, dim=1) for f in range(table.shape[1])], 1)
    return poseidon_error(table), medians.nanmean(1)


def interval(replicates: torch.Tensor) -> tuple[float, float]:
    finite = replicates[torch.isfinite(replicates)]
    if finite.numel() == 0:
        return math.nan, math.nan
    return float(torch.quantile(finite, 0.025)), float(torch.quantile(finite, 0.975))


def headline_of(scores: dict[str, Any]) -> float:
    from ..evaluation.protocols import poseidon_error

    return poseidon_error(poseidon_table(scores["per_function"])) if scores else math.nan


def cell_table(result) -> tuple[list[dict[str, Any]], dict]:
    """The rows of compare.csv, and the headline's value and replicates per (model, start, N, seed) for the gains."""
    done = [r for r in result.cells if r.status == "done"]
    m = len(next(iter(done[0].scores["per_function"].values()))) if done else 0
    idx = draws(m) if m else None
    persistence = headline_of(result.persistence) if result.persistence else math.nan
    reps: dict = {}
    rows = []
    for r in result.cells:
        c = r.cell
        row: dict[str, Any] = {"model": c.model, "start": c.start, "trajectories": c.trajectories, "seed": c.seed,
                               "status": r.status}
        if r.status == "done":
            value, rep = poseidon_replicates(poseidon_table(r.scores["per_function"]), idx)
            lo, hi = interval(rep)
            row.update({HEADLINE: value, f"{HEADLINE}_lo": lo, f"{HEADLINE}_hi": hi,
                        "worse_than_persistence": bool(value > persistence)})
            reps[(c.model, c.start, c.trajectories, c.seed)] = (value, rep)
            for name, how in SCORES:
                values = r.scores["per_trajectory"].get(name)
                if values is None:
                    continue
                value, rep = aggregate(values, idx, how)
                lo, hi = interval(rep)
                row.update({name: value, f"{name}_lo": lo, f"{name}_hi": hi})
            for name, value in r.scores.get("pdebench", {}).items():
                lo, hi = r.scores.get("pdebench_intervals", {}).get(name, (math.nan, math.nan))
                row.update({name: value, f"{name}_lo": lo, f"{name}_hi": hi})
            selection = r.record.get("selection") or {}
            row.update({"lr": r.record.get("lr"), "selected_step": selection.get("step"),
                        "steps_done": selection.get("steps_done"), "early_stopped": selection.get("early_stopped")})
            if r.scores.get("not_available"):
                row["notes"] = "; ".join(f"{k}: n/a, {v}" for k, v in r.scores["not_available"].items())
        rows.append(row)
    base = result.baseline
    for row in rows:
        mine = reps.get((row["model"], row["start"], row["trajectories"], row["seed"]))
        theirs = reps.get((base, "scratch", row["trajectories"], row["seed"]))
        if mine is not None and theirs is not None:
            row["accuracy_gain"] = accuracy_gain(theirs[0], mine[0])
            row["accuracy_gain_lo"], row["accuracy_gain_hi"] = interval(theirs[1] / mine[1])
            row["baseline_worse_than_persistence"] = bool(theirs[0] > persistence)
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
    """EG and AG at the largest N of each (model, start) over the baseline, with bootstrap intervals (none for an EG
    that is extrapolated or a bound: the curve says nothing measured there)."""
    ns, seeds, base = result.options.trajectories, result.options.seeds, result.baseline
    baseline = curve(reps, base, "scratch", ns, seeds)
    persistence = headline_of(result.persistence) if result.persistence else math.nan
    rows = []
    for model, start in dict.fromkeys((k[0], k[1]) for k in reps):
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
        measured = math.isfinite(eg.value) and not eg.extrapolated and not eg.bound
        eg_lo, eg_hi = interval(torch.tensor(egs, dtype=torch.float64)) if measured else (math.nan, math.nan)
        ag_lo, ag_hi = interval(torch.tensor(ags, dtype=torch.float64))
        rows.append({"model": model, "start": start, "efficiency_gain": eg.value, "efficiency_gain_lo": eg_lo,
                     "efficiency_gain_hi": eg_hi, "efficiency_gain_extrapolated": eg.extrapolated,
                     "efficiency_gain_bound": eg.bound, "efficiency_gain_text": eg.text(),
                     "accuracy_gain": ag, "accuracy_gain_lo": ag_lo, "accuracy_gain_hi": ag_hi,
                     "trajectories": ns[-1], "metric": "Poseidon's error (median rel. L1 per function, mean)",
                     "baseline_worse_than_persistence": bool(baseline[-1] > persistence)})
    return rows


def write_csv(path: Path, rows: list[dict[str, Any]], first: tuple[str, ...]) -> Path:
    from ..files import atomic_write

    columns = list(first) + sorted({k for r in rows for k in r} - set(first))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return atomic_write(path, buffer.getvalue().encode())


def _fmt(v) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3g}"


def machine_line() -> str:
    """The CPU model (or GPU), core count and torch version of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return (f"{cpu}, {os.cpu_count()} cores" + (f", GPU {gpu}" if gpu else ", no GPU") +
            f", {torch.get_num_threads()} torch thread(s), torch {torch.__version__}, {platform.system()}")


def protocol_lines(result) -> list[str]:
    o, first = result.options, next((r for r in result.cells if r.status == "done"), None)
    predicted_from = first.scores["predicted_from"] if first else "?"
    at = f"predicted frame {o.at_frame}" if o.at_frame else "the last predicted frame"
    functions = list(first.scores["per_function"]) if first else []
    lines = ["## Protocol", ""]
    for s in result.splits:
        lines.append(f"- **Data** `{Path(s.path).name}`: {s.trajectories} trajectories of {s.frames} frames: the "
                     f"last {s.test} for testing, the {s.validation} before them for validation (never trained on, "
                     f"the same for every cell), the first N of the other {s.pool} for training (nested: a smaller "
                     f"N's are the first of a larger N's).")
    lines += [
        f"- **Selection**: every cell evaluates its validation split at step 0 and every {o.eval_every} steps (a "
        f"checkpoint each) and keeps the weights with the lowest validation error (relative L2 over the rollout); "
        f"`kept` gives that step, `ran` the steps done (Poseidon keeps its best on validation).",
        f"- **Budget**: {o.steps} optimizer steps per cell, batch {o.batch_size}; the baseline "
        f"({result.baseline}, from scratch) up to {o.baseline_steps} steps, stopped after {o.patience} evaluations "
        f"without a lower validation error (Poseidon trains its baselines to convergence with early stopping). "
        f"Every model from its weights" + (" and from scratch." if o.scratch else "."),
        "- **Learning rate**: " + (f"{o.lr:g} for every cell (--lr)." if o.lr is not None else
                                   "each model's recommended fine-tuning lr from its weights, 1e-3 from scratch: "
                                   "the `lr` column."),
        f"- **Scores** on the test trajectories at each file's own grid, every model predicting the same frames (from "
        f"frame {predicted_from} on, each reading the window just before it), persistence (the last input frame "
        f"repeated) on the same frames. The headline is **Poseidon's error** (arXiv:2405.19101, Eq. (11), SM D.1): "
        f"at {at}, each function's relative L1 error (functions: {', '.join(functions) or '?'}), its median over "
        f"the test trajectories, then the mean over functions; AG and EG are of it. The other columns follow their "
        f"own protocols: The Well's VRMSE windows (the mean over trajectories, the_well 215f55d) and Walrus's "
        f"(the median; unverified, see docs/compare.md); rel. L1, rel. L2 and VRMSE pooled over every predicted frame "
        f"(medians). Intervals: 95 % bootstrap over test trajectories, paired across cells.",
        f"- **Machine**: {machine_line()}.", f"- **Reproduce**: `{result.command or 'opzoo compare ...'}`", ""]
    return lines


def markdown(result, rows, gains) -> str:
    names = ", ".join(result.models)
    lines = [f"# opzoo compare: {names} on {', '.join(Path(p).name for p in result.data)}", "",
             *protocol_lines(result), "## Scores", "",
             "| model | start | N | seed | status | Poseidon's error [95 %] | rel. L1 | rel. L2 | VRMSE The Well "
             "6:12 (mean) | VRMSE The Well 13:30 (mean) | VRMSE Walrus 1:20 (median) | VRMSE Walrus 21:60 (median) | "
             "AG | lr | kept | ran | |", "|" + "---|" * 17]
    notes: dict[str, str] = {}
    for r in rows:
        if r["status"] != "done":
            lines.append(f"| {r['model']} | {r['start']} | {r['trajectories']} | {r['seed']} | {r['status'][:300]} |"
                         + " |" * 12)
            continue
        for part in filter(None, (r.get("notes") or "").split("; ")):
            notes.setdefault(part.split(":")[0], part)
        flags = []
        if r.get("worse_than_persistence"):
            flags.append("worse than persistence")
        if r.get("baseline_worse_than_persistence") and r["model"] != result.baseline:
            flags.append("AG over a baseline worse than persistence")
        windows = [_fmt(r.get(w.name)) if w.name in r else "n/a" for w in WINDOWS[1:]]
        lines.append(f"| {r['model']} | {r['start']} | {r['trajectories']} | {r['seed']} | done | "
                     f"{_fmt(r.get(HEADLINE))} [{_fmt(r.get(HEADLINE + '_lo'))}, {_fmt(r.get(HEADLINE + '_hi'))}] | "
                     f"{_fmt(r.get('rel_l1'))} | {_fmt(r.get('rel_l2'))} | {' | '.join(windows)} | "
                     f"{_fmt(r.get('accuracy_gain'))} | {_fmt(r.get('lr'))} | {r.get('selected_step', '–')} | "
                     f"{r.get('steps_done', '–')} | {'; '.join(flags)} |")
    if result.persistence:
        p = result.persistence
        lines += ["", f"Persistence on the same frames: Poseidon's error {_fmt(headline_of(p))}, rel. L1 "
                      f"{_fmt(median(p['per_trajectory']['rel_l1']))}."]
    if notes:
        lines += ["", "n/a: " + "; ".join(notes.values()) + "."]
    lines += ["", "## Gains over the baseline (Poseidon's EG and AG, of Poseidon's error)", "",
              "| model | start | EG | EG interval | AG at the largest N | AG interval | |", "|---|---|---|---|---|---|---|"]
    for g in gains:
        measured = math.isfinite(g["efficiency_gain_lo"])
        flag = "over a baseline worse than persistence: the gain is inflated" if g["baseline_worse_than_persistence"] \
            else ""
        lines.append(f"| {g['model']} | {g['start']} | {g['efficiency_gain_text']} | "
                     + (f"[{_fmt(g['efficiency_gain_lo'])}, {_fmt(g['efficiency_gain_hi'])}]" if measured else "–")
                     + f" | {_fmt(g['accuracy_gain'])} | [{_fmt(g['accuracy_gain_lo'])}, "
                       f"{_fmt(g['accuracy_gain_hi'])}] | {flag} |")
    lines += metric_lines(result, rows)
    lines += cost_lines(result)
    lines += ["", "## How each model read the files (as its training run fitted them)", ""]
    for model in dict.fromkeys(r.cell.model for r in result.cells):
        cell = next((r for r in result.cells if r.cell.model == model and r.status == "done"), None)
        lines.append(f"**{model}**" + ("" if cell else ": no cell ran"))
        lines += [f"    {line}" for line in (cell.record.get("fit", []) if cell else [])]
        lines.append("")
    lines += ["## Each cell's command", "", "Each cell is this `opzoo finetune` run (`--plan FILE` writes them, one per "
              "line):", "", "<details><summary>commands</summary>", "", "```bash"]
    lines += [cell_command_text(r.cell, result) for r in result.cells]
    lines += ["```", "", "</details>", ""]
    return "\n".join(lines) + "\n"


def cell_command_text(cell, result) -> str:
    """The cell's command, or a comment saying why it cannot be written here (a model this machine cannot resolve)."""
    from ..errors import OpzooError
    from .compare_cells import cell_command, command_line

    try:
        return command_line(cell_command(cell, result.data, result.out, result.options))
    except OpzooError as e:
        return f"# {cell.key}: no command: {' '.join(str(e).split())[:200]}"


def metric_lines(result, rows) -> list[str]:
    """PDEBench's metrics and the plugins' (medians of pooled values as each metric defines them)."""
    names = list(dict.fromkeys(k for r in result.cells if r.status == "done" for k in r.scores.get("pdebench", {})))
    if not names:
        return []
    from ..evaluation.pdebench_metrics import plugin_metric_names

    added = plugin_metric_names({n: 0.0 for n in names})
    out = ["", "## PDEBench's metrics" + (f" and the plugins' ({', '.join(added)})" if added else ""), "",
           "| model | start | N | seed | " + " | ".join(names) + " |", "|---|---|---|---|" + "---|" * len(names)]
    for r in rows:
        if r["status"] == "done":
            out.append(f"| {r['model']} | {r['start']} | {r['trajectories']} | {r['seed']} | "
                       + " | ".join(_fmt(r.get(n)) for n in names) + " |")
    return out


def cost_lines(result) -> list[str]:
    out = ["", "## Cost per model", "", "| model | parameters | GFLOP per training step | a step's peak MiB "
           "(estimated: weights, AdamW, activations) | memory MiB a step adds at its peak (measured once, resident) | "
           "seconds per step (median of its cells, here) | disk MiB per cell |",
           "|---|---|---|---|---|---|---|"]
    total = 0.0
    for model, c in result.costs.items():
        measured = c.get("memory_mib_measured")
        out.append(f"| {model} | {c['parameters']:,} | {_fmt(c['gflop_per_step'])} | "
                   f"{_fmt(c.get('memory_mib_estimated'))} | {'n/a' if measured is None else _fmt(measured)} | {_fmt(c.get('seconds_per_step'))} | "
                   f"{_fmt(c.get('disk_mib'))} |")
        total += (c.get("disk_mib") or 0) * sum(1 for r in result.cells if r.cell.model == model and r.status == "done")
    out += ["", f"Disk: {total:.0f} MiB for the finished cells (each keeps its model, its last checkpoint and its best "
                f"one, with the optimizer state; delete `runs/*/**/checkpoints` of finished cells to keep only the "
                f"models)."]
    return out


def plot(result, rows, path: Path) -> Path:
    from matplotlib.ticker import NullFormatter

    from ..evaluation.plots import legend, pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.6, 4.6))
    groups = dict.fromkeys((r["model"], r["start"]) for r in rows if HEADLINE in r)
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
        ax.axhline(headline_of(result.persistence), color="gray", linestyle="--", label="persistence")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(result.options.trajectories), [str(n) for n in result.options.trajectories])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training trajectories N")
    ax.set_ylabel("Poseidon's error (test)")
    ax.set_title("error against the number of training trajectories (median rel. L1 at the final frame, mean over "
                 "functions)", fontsize=9)
    legend(ax, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    save_figure(plt, fig, path)
    return path


def write_report(result) -> list[Path]:
    """compare.csv, gains.csv, compare.md and (when a cell is done) compare.png; returns what was written."""
    from ..files import atomic_write

    out = result.out
    rows, reps = cell_table(result)
    gains = gains_table(result, reps)
    written = [write_csv(out / "compare.csv", rows, FIRST),
               write_csv(out / "gains.csv", gains, ("model", "start", "efficiency_gain", "accuracy_gain")),
               atomic_write(out / "compare.md", markdown(result, rows, gains).encode())]
    if any(HEADLINE in r for r in rows):
        written.append(plot(result, rows, out / "compare.png"))
    return written


def rollout_pictures(result) -> list[Path]:
    """One test trajectory rolled out by each model's cell at the largest N (seed 0, from its weights if it has
    them); returns the pictures written."""
    from ..evaluation.plots import plot_rollout_panels
    from ..evaluation.rollouts import rollout_trajectories
    from ..model_io.loading import load
    from .compare_cells import cell_config, safe_name, test_sources

    largest, written = result.options.trajectories[-1], []
    for model in dict.fromkeys(r.cell.model for r in result.cells):
        cells = [r for r in result.cells if r.cell.model == model and r.status == "done"
                 and r.cell.trajectories == largest and r.cell.seed == 0]
        if not cells:
            continue
        r = min(cells, key=lambda c: c.cell.start != "pretrained")
        net = load(str(Path(r.run_dir) / "model")).eval()
        sources, frame_shape, _ = test_sources(cell_config(r.cell, result.data, result.out, result.options), net)
        with torch.no_grad():
            first = r.scores["predicted_from"] - frame_shape.in_timesteps
            truth, pred, _ = next(rollout_trajectories(net, sources[0], frame_shape, result.options.horizon, 1,
                                                       first=first))
        horizon = truth.shape[-2]
        path = result.out / f"rollout-{safe_name(model)}.png"
        plot_rollout_panels(truth[0], pred[0], sorted({1, max(1, horizon // 2), horizon}), path,
                            title=f"{model} ({r.cell.start}, N={largest}): test trajectory 0")
        written.append(path)
    return written


__all__ = ["HEADLINE", "cell_table", "gains_table", "rollout_pictures", "write_report"]
