"""Exported files against eager PyTorch (issue 71, docs/export.md): one forward of each model in onnxruntime (CPU
provider, default graph optimizations) beside the eager model on the same input, at one thread and at all threads,
interleaved, medians and ratios; and each export form's time beside its eager layer (whether eager should use it).

    python benchmarks/bench_export.py [--repeats 15] [--models dpot-micro fno-2d ...] [--out benchmarks/results]

Writes export.csv and a Markdown table (export.md) into --out. Models are random init: time does not depend on the
weights, and random init needs no download.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from tqdm import tqdm

import opzoo
from opzoo.model_io.example_input import example_input, input_grid

# every micro preset, and a small published size per family (at its pretrained grid)
MODELS = ["dpot-micro", "aot-pot-micro", "poseidon-micro", "gphyt-micro", "morph-micro", "pdet-mc-micro",
          "dpot-ti", "fno-2d", "well-fno-shear_flow", "well-unet-classic-shear_flow", "poseidon-t", "gphyt-s", "morph-ti",
          "pdet-mc-s", "mpp-avit-ti"]


def interleaved(runs: dict, repeats: int) -> dict:
    """Median seconds of each callable, run in turn so that all see the same load."""
    for run in runs.values():
        run()  # warm-up
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def bench_model(name: str, repeats: int, threads: list[int]) -> list[dict]:
    import onnxruntime

    from opzoo.evaluation.fit import neutral_statistics

    torch.manual_seed(0)
    model = opzoo.load(name, **neutral_statistics(name)).eval()  # random init: statistics 0 and 1 where it needs some
    grid, _ = input_grid(model, None)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        t0 = time.perf_counter()
        report = opzoo.export_model(model, path, "onnx")
        export_s = time.perf_counter() - t0
        x = example_input(model, 1, grid, seed=3)
        for n in threads:
            torch.set_num_threads(n)
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = n
            # its workers otherwise spin after each run, taking the cores from the eager run timed next
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            feed = {session.get_inputs()[0].name: x.numpy()}

            def eager():
                with torch.no_grad():
                    model(x)

            medians = interleaved({"eager": eager, "ort": lambda: session.run(None, feed)}, repeats)
            rows.append({"model": name, "grid": "x".join(map(str, grid)),
                         "params": sum(p.numel() for p in model.parameters()), "threads": n,
                         "eager_ms": 1e3 * medians["eager"], "onnxruntime_ms": 1e3 * medians["ort"],
                         "ratio": medians["ort"] / medians["eager"], "export_s": export_s,
                         "dynamic_grid": report.dynamic["grid"], "rel_l2": max(c.rel_l2 for c in report.checks)})
    return rows


def bench_forms(repeats: int) -> list[dict]:
    """Forward + backward of each export form beside its layer (float32, one thread)."""
    from opzoo_fourier.fourier_attention import FourierAttention
    from opzoo_fourier.spectral_conv import SpectralConv

    torch.set_num_threads(1)
    cases = {
        "SpectralConv 2-D (64 ch, 16 modes, 64x64, batch 8)": (SpectralConv(64, 64, 16, 2), (8, 64, 64, 64)),
        "FourierAttention 2-D (dpot-ti: 512 ch, 8 heads, 32 modes, 16x16 latent, batch 4)":
            (FourierAttention(512, 8, 32), (4, 16, 16, 512)),
    }
    rows = []
    for label, (layer, shape) in cases.items():
        form = layer.export_form()
        x = torch.randn(shape, requires_grad=True)

        def step(module):
            return lambda: module(x).square().mean().backward()

        medians = interleaved({"layer": step(layer), "form": step(form)}, repeats)
        rows.append({"layer": label, "eager_ms": 1e3 * medians["layer"], "form_ms": 1e3 * medians["form"],
                     "ratio": medians["form"] / medians["layer"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--append", action="store_true", help="keep the other models' rows of --out's export.csv")
    args = parser.parse_args()
    threads = sorted({1, os.cpu_count() or 1})
    forms = bench_forms(args.repeats)
    rows = []
    if args.append and (args.out / "export.csv").is_file():  # re-measure some models, keep the others' rows
        with open(args.out / "export.csv") as f:
            kept = [row for row in csv.DictReader(f) if row["model"] not in args.models]
        rows = [{k: (v == "True" if k == "dynamic_grid" else (v if k in ("model", "grid") else float(v)))
                 for k, v in row.items()} for row in kept]
    for name in tqdm(args.models, desc="export and time"):
        try:
            rows += bench_model(name, args.repeats, threads)
        except opzoo.OpzooError as error:
            print(f"{name}: {error}")
        write(rows, forms, args)  # after each model: a long run leaves what it measured


def write(rows: list[dict], forms: list[dict], args) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    if rows:
        with open(args.out / "export.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    header = (f"{time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
              f"torch {torch.__version__}, onnxruntime {__import__('onnxruntime').__version__}, batch 1, median of "
              f"{args.repeats}")
    lines = [header, "", "| model | grid | params | threads | eager ms | onnxruntime ms | ort / eager | export s | "
             "dynamic grid |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['grid']} | {int(r['params']):,} | {int(r['threads'])} | {r['eager_ms']:.2f} | "
              f"{r['onnxruntime_ms']:.2f} | {r['ratio']:.2f} | {r['export_s']:.0f} | {'yes' if r['dynamic_grid'] else 'no'} |"
              for r in rows]
    lines += ["", "| layer (forward + backward, 1 thread) | eager ms | export form ms | form / eager |", "|---|---|---|---|"]
    lines += [f"| {r['layer']} | {r['eager_ms']:.2f} | {r['form_ms']:.2f} | {r['ratio']:.2f} |" for r in forms]
    (args.out / "export.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
