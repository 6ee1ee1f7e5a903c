"""``opzoo benchmark`` (timm's ``benchmark.py``): what each preset costs at its pretrained shape, and how fast it runs
beside the upstream code it reimplements.

Per preset: parameters; FLOPs of a forward and of a training step (forward + backward); the activations a training
step keeps for backward; an H100 bf16 time from a per-op roofline (an estimate: no GPU here); and, for the presets
that fit this machine, the CPU time of an inference and of a training step (forward, MSE loss, backward, Adam),
interleaved with every upstream implementation a plugin registered for its backbone (``registry.register_upstream``)
on the same input. One CSV row per preset and a Markdown table beside it.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import statistics
from pathlib import Path
from typing import Any, Sequence

from ..errors import OpzooError, UpstreamUnavailable
from ..model_io.example_input import input_grid


@dataclasses.dataclass
class BenchmarkRow:
    model: str
    resolution: str = ""
    batch: int = 0
    params: int = 0
    gflops_infer: float = math.nan
    gflops_train: float = math.nan
    activation_mib: float = math.nan  # kept for backward by a training step, float32
    step_mib_est: float = math.nan  # a full training step's peak (AdamW), opzoo.training.memory's estimate
    h100_bf16_ms_infer_est: float = math.nan
    h100_bf16_ms_train_est: float = math.nan
    cpu_ms_infer: float = math.nan
    cpu_ms_train: float = math.nan
    upstream: str = ""
    upstream_params: int = 0
    upstream_cpu_ms_infer: float = math.nan
    upstream_cpu_ms_train: float = math.nan
    ratio_infer: float = math.nan  # opzoo / upstream, median of same-round ratios
    ratio_train: float = math.nan
    note: str = ""


COLUMNS = tuple(f.name for f in dataclasses.fields(BenchmarkRow))


def training_loss(model, out, target):
    import torch.nn.functional as F

    loss = F.mse_loss(out, target)
    return loss + model.aux_loss() if hasattr(model, "aux_loss") else loss


def count_costs(model, x) -> tuple[Any, Any, int]:
    """``(forward OpCosts, training-step OpCosts, activation bytes)`` of ``model`` on ``x`` (meta or real)."""
    import torch

    from ..training.memory import saved_activation_bytes
    from .measure import OpCosts

    model.eval()
    with OpCosts() as infer, torch.no_grad():
        out = model(x)
    model.train()
    target = torch.zeros_like(out)
    with OpCosts() as train:
        training_loss(model, model(x), target).backward()
    model.zero_grad(set_to_none=True)
    activations = saved_activation_bytes(lambda: model(x), model.parameters())
    return infer, train, activations


def _ram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def measure_preset(name: str, *, model_kwargs: dict, resolution: Sequence[int] | None, batch: int, repeats: int,
                   max_gflop: float, with_upstream: bool) -> BenchmarkRow:
    import torch

    from ..evaluation.fit import neutral_statistics
    from ..model_io.loading import load
    from ..registry.registry import get_registry
    from .measure import ADAM_BYTES_PER_PARAM, H100_BF16

    notes: list[str] = []
    known = get_registry().get("backbone", get_registry().preset(name).backbone).config_class.__dataclass_fields__
    if set(model_kwargs) - set(known):
        notes.append(f"--model-kwargs {', '.join(sorted(set(model_kwargs) - set(known)))}: not fields of this model")
        model_kwargs = {k: v for k, v in model_kwargs.items() if k in known}
    neutral = neutral_statistics(name, model_kwargs)
    if neutral:  # the cost does not depend on the values the statistics take
        notes.append("normalization statistics set to mean 0, std 1 (random inputs)")
        model_kwargs = {**model_kwargs, **neutral}
    with torch.device("meta"):
        meta = load(name, **model_kwargs)
    grid, note = input_grid(meta, resolution)
    notes += [note] if note else []
    bound = getattr(meta.config, "img_size", None)  # a grid the weights are tied to (a position table)
    if resolution and bound is not None and list(bound) != list(grid) and "img_size" not in model_kwargs:
        model_kwargs = {**model_kwargs, "img_size": list(grid)}  # the network fine-tuning at that grid would adapt
        notes.append(f"img_size {list(bound)} -> {list(grid)}, as fine-tuning at that grid adapts it")
        with torch.device("meta"):
            meta = load(name, **model_kwargs)
    c = meta.config
    shape = (batch, *grid, c.in_timesteps, c.in_channels)
    row = BenchmarkRow(name, "x".join(map(str, grid)), batch, sum(p.numel() for p in meta.parameters()))
    costs = None
    try:
        costs = count_costs(meta, torch.empty(shape, device="meta"))
    except (RuntimeError, NotImplementedError):  # data-dependent ops (MoE dispatch): counted on real tensors below
        pass
    fits_memory = row.params * 16 < _ram_bytes() // 4
    if costs is None and fits_memory:
        torch.manual_seed(0)
        costs = count_costs(load(name, **model_kwargs), torch.randn(shape))
    if costs is not None:
        infer, train, activations = costs
        row.gflops_infer, row.gflops_train = infer.flops / 1e9, train.flops / 1e9
        row.activation_mib = activations / 2**20
        try:
            from ..training.memory import estimate_step_memory

            row.step_mib_est = estimate_step_memory(meta, shape).total / 2**20
        except (RuntimeError, NotImplementedError):  # data-dependent ops on meta: the column stays empty
            pass
        row.h100_bf16_ms_infer_est = infer.roofline_seconds(H100_BF16) * 1e3
        row.h100_bf16_ms_train_est = train.roofline_seconds(H100_BF16, ADAM_BYTES_PER_PARAM * row.params) * 1e3
        fits_memory = row.params * 16 + 2 * activations < _ram_bytes() // 2
    if not fits_memory:
        notes.append("not timed: does not fit half of this machine's memory")
    elif costs is None:
        notes.append("FLOPs not counted")
    elif row.gflops_train > max_gflop:
        notes.append(f"not timed: {row.gflops_train:.0f} GFLOP per training step > --max-gflop {max_gflop:g}")
    else:
        time_preset(row, name, model_kwargs, shape, repeats, with_upstream, notes, get_registry())
    row.note = "; ".join(notes)
    return row


def time_preset(row: BenchmarkRow, name: str, model_kwargs: dict, shape, repeats: int, with_upstream: bool,
                notes: list[str], registry) -> None:
    import torch

    from ..model_io.loading import load
    from .measure import OpCosts, interleaved_medians, median_ratio

    torch.manual_seed(0)
    model = load(name, **model_kwargs)
    x = torch.randn(shape)
    runs = {"opzoo": step_runs(model, x, lambda y: y)}
    upstream = None
    if with_upstream:
        for upstream_name, build in registry.upstreams_for(registry.preset(name).backbone):
            try:
                upstream = build(model, x)
                break
            except UpstreamUnavailable as e:
                notes.append(f"{upstream_name}: {e}")
    if upstream is not None:
        ux = upstream.inputs(x).contiguous()
        runs["upstream"] = step_runs(upstream.module, ux, upstream.outputs)
        row.upstream = upstream.label
        row.upstream_params = sum(p.numel() for p in upstream.module.parameters())
        with OpCosts() as theirs, torch.no_grad():
            upstream.module.eval()(ux)
        if theirs.flops and not math.isclose(theirs.flops / 1e9, row.gflops_infer, rel_tol=0.05):
            notes.append(f"upstream forward {theirs.flops / 1e9:.3g} GFLOP")
    for kind in ("infer", "train"):
        times = interleaved_medians({k: r[kind] for k, r in runs.items()}, repeats)
        setattr(row, f"cpu_ms_{kind}", statistics.median(times["opzoo"]) * 1e3)
        if "upstream" in times:
            setattr(row, f"upstream_cpu_ms_{kind}", statistics.median(times["upstream"]) * 1e3)
            setattr(row, f"ratio_{kind}", median_ratio(times["opzoo"], times["upstream"]))


def step_runs(module, x, outputs) -> dict:
    """``{"infer": fn, "train": fn}``: an eval-mode no-grad forward, and a train-mode forward, MSE loss on a fixed
    random target, backward and Adam step."""
    import torch

    module.eval()
    with torch.no_grad():
        target = torch.randn_like(outputs(module(x)))
    opt = torch.optim.Adam(module.parameters(), lr=1e-6)

    def infer() -> None:
        module.eval()
        with torch.no_grad():
            module(x)

    def train() -> None:
        module.train()
        loss = training_loss(module, outputs(module(x)), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return {"infer": infer, "train": train}


def write_tables(rows: list[BenchmarkRow], out: Path, header: str) -> Path:
    """The CSV at ``out`` and a Markdown table at ``out`` with suffix ``.md`` (returned)."""
    from ..files import atomic_write, atomic_writer

    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(out) as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.4g}" if isinstance(v, float) and not math.isnan(v) else
                                 "" if isinstance(v, float) else v) for k, v in dataclasses.asdict(row).items()})
    md = out.with_suffix(".md")
    atomic_write(md, header + "\n\n" + markdown_table(rows) + "\n")
    return md


def _fmt(v: float, digits: int = 3) -> str:
    return "" if math.isnan(v) else f"{v:.{digits}g}"


def markdown_table(rows: list[BenchmarkRow]) -> str:
    lines = ["| model | grid | batch | params | GFLOP fwd | GFLOP train | activations MiB | CPU ms fwd | CPU ms train "
             "| upstream | upstream ms train | opzoo/upstream train (fwd) | H100 bf16 ms train (estimate) | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "" if math.isnan(r.ratio_train) else f"{r.ratio_train:.2f} ({_fmt(r.ratio_infer)})"
        lines.append(f"| {r.model} | {r.resolution} | {r.batch} | {r.params / 1e6:.2f}M | {_fmt(r.gflops_infer)} | "
                     f"{_fmt(r.gflops_train)} | {_fmt(r.activation_mib)} | {_fmt(r.cpu_ms_infer)} | "
                     f"{_fmt(r.cpu_ms_train)} | {r.upstream} | {_fmt(r.upstream_cpu_ms_train)} | {ratio} | "
                     f"{_fmt(r.h100_bf16_ms_train_est)} | {r.note} |")
    return "\n".join(lines)


def benchmark(patterns: Sequence[str], *, out: Path, model_kwargs: dict | None = None,
              resolution: Sequence[int] | None = None, batch: int = 2, repeats: int = 5, max_gflop: float = 100.0,
              threads: int | None = None, with_upstream: bool = True) -> list[BenchmarkRow]:
    """Benchmark the presets matching ``patterns``; rows of presets that fail say why, and the run goes on."""
    import platform

    import torch
    from tqdm import tqdm

    from ..model_io.builder import list_models

    if threads:
        torch.set_num_threads(threads)
    names: list[str] = []
    for pattern in patterns:
        found = list_models(pattern)
        if not found:
            raise OpzooError(f"no preset matches {pattern!r} (`opzoo list`)")
        names += found
    rows = []
    for name in tqdm(list(dict.fromkeys(names)), desc="benchmark", unit="model"):
        try:
            rows.append(measure_preset(name, model_kwargs=dict(model_kwargs or {}), resolution=resolution,
                                       batch=batch, repeats=repeats, max_gflop=max_gflop,
                                       with_upstream=with_upstream))
        except (OpzooError, RuntimeError, ValueError) as e:
            rows.append(BenchmarkRow(name, batch=batch, note=f"failed: {type(e).__name__}: {e}".splitlines()[0]))
    header = (f"opzoo benchmark, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
              f"{platform.processor() or platform.machine()}; CPU times are medians of {repeats} interleaved rounds; "
              f"H100 times are per-op roofline estimates, not measurements")
    md = write_tables(rows, out, header)
    print(header + "\n\n" + markdown_table(rows))
    print(f"\nwrote {out} and {md}")
    return rows
