"""Everything issue 16 asks of a GPU, in one run, written as one Markdown report.

1. Checks on the device (pytest with ``OPZOO_TEST_DEVICE``): ``torch.compile(fullgraph=True)`` of
   every preset against float64 eager, and bf16 autocast training steps against float32 (the MoE
   presets with their routing held to float32's).
2. Parity: opzoo dpot-* against the official DPOT code with the same weights, on the device.
3. bf16 training throughput: opzoo dpot-s under bf16 autocast against the official code in float32.
4. The benchmarks of docs/benchmarks.md: opzoo vs the official DPOT code (dpot-ti, dpot-s,
   aot-pot-t at batch 1 and 8), aot-pot-t vs dpot-ti at batch 1 (its AOT residuals compiled,
   CUDA's default, and eager), opzoo FNO vs neuraloperator (when installed), the MoE presets vs
   dpot-ti (when registered).

    benchmarks/gpu_report.sh                                   # on a GPU: report in gpu_report.md
    python benchmarks/gpu_report.py --device cpu --quick --out /tmp/report.md   # tiny sizes, any machine

``--quick`` runs the same steps at tiny sizes (32x32 inputs, 2 rounds, a few presets in the checks)
so the script itself is tested on CPU (tests/zoo/test_gpu_report.py). The exit status is 1 when a
check failed; the report is written either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

import opzoo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_aot  # noqa: E402
import bench_dpot_official  # noqa: E402
import bench_fourier  # noqa: E402

CHECK_FILES = ["tests/zoo/test_compile_presets.py", "tests/zoo/test_bf16_presets.py"]
# the full report also runs, on the device: the MoE presets' bf16 steps
EXTRA_CHECKS = [("tests/moe/test_bf16.py", {}, None)]


@dataclasses.dataclass
class Settings:
    """Sizes of one report: the full one for a GPU, or ``quick`` tiny ones."""

    device: torch.device
    quick: bool
    rounds: int
    warmup: int
    size: int
    batches: tuple[int, ...]
    official_presets: tuple[str, ...]
    throughput_preset: str
    throughput_batch: int
    check_filter: str | None  # pytest -k expression, None: every test of CHECK_FILES
    clock: Callable[[], float]
    command: str

    @classmethod
    def make(cls, device: torch.device, quick: bool, rounds: int | None, command: str) -> "Settings":
        clock = time.process_time if device.type == "cpu" else time.perf_counter
        if quick:
            return cls(device, True, rounds or 2, 1, 32, (1, 2), ("dpot-ti", "aot-pot-t"), "dpot-ti", 2,
                       "simple-op and not inductor", clock, command)
        return cls(device, False, rounds or 15, 3, 128, (1, 8), ("dpot-ti", "dpot-s", "aot-pot-t"), "dpot-s", 8,
                   None, clock, command)


# ---- the parts --------------------------------------------------------------------------------
def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(s: Settings) -> list[str]:
    dev = torch.cuda.get_device_name(s.device) if s.device.type == "cuda" else f"CPU ({cpu_name()}, {os.cpu_count()} cores)"
    return [
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- device: {dev}",
        f"- torch {torch.__version__}, CUDA {torch.version.cuda or '-'}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, {torch.get_num_threads()} CPU threads",
        f"- clock: {'process CPU time' if s.clock is time.process_time else 'wall (CUDA synchronized)'}; "
        f"{s.rounds} interleaved rounds after {s.warmup} warm-up; medians" + (" (quick: tiny sizes)" if s.quick else ""),
        f"- command: `{s.command}`",
    ]


def run_checks(s: Settings, with_slow: bool = False) -> tuple[list[str], bool]:
    """pytest over CHECK_FILES on the device: a table row per file with pytest's summary. The full
    report runs the slow checks too except those marked ``inductor`` (so: every preset through
    ``aot_eager``, inductor for dpot-ti and fno-2d); ``with_slow`` adds those (inductor for every preset)."""
    rows, ok = ["| check | result |", "|---|---|"], True
    checks = [(path, {}, s.check_filter) for path in CHECK_FILES] + ([] if s.quick else EXTRA_CHECKS)
    for path, extra_env, selection in checks:
        env = {**os.environ, "OPZOO_TEST_DEVICE": s.device.type, **extra_env}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path]
        if selection:
            cmd += ["-k", selection]
        marks = "slow or not slow" if with_slow or s.quick else "not inductor"  # the representatives are slow-marked
        if marks:
            cmd += ["-m", marks]
        result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        summary = pytest_summary(result.stdout)
        passed = result.returncode == 0
        ok &= passed
        shown = ("".join(f"{k}={v} " for k, v in extra_env.items()) + f"pytest {path}"
                 + (f" -k '{selection}'" if selection else "") + (f" -m '{marks}'" if marks else ""))
        rows.append(f"| `{shown}` | {'ok' if passed else '**FAILED**'}: {summary} |")
    return rows, ok


def pytest_summary(stdout: str) -> str:
    """pytest's last summary line (``3 passed, 1 skipped in 4.2s``), or its last line."""
    lines = [ln.strip("= ") for ln in stdout.strip().splitlines() if ln.strip()]
    for line in reversed(lines):
        if re.search(r"\b(passed|failed|error|no tests ran)\b", line):
            return line
    return lines[-1] if lines else "no output"


def official_comparison(s: Settings) -> tuple[list[str], list[str]]:
    """opzoo vs the official DPOT code: (parity rows, timing rows)."""
    parity = ["| preset | batch | max abs. difference / max abs. output | tolerance |", "|---|---|---|---|"]
    timing = ["| opzoo preset | official model | batch | official ms | opzoo ms | opzoo / official (ratio of medians) "
              "| median per-round ratio |", "|---|---|---|---|---|---|---|"]
    for name in s.official_presets:
        for batch in s.batches:
            r = bench_dpot_official.compare(name, batch, s.device, s.rounds, s.warmup, s.clock, s.size)
            if r["max_rel_diff"] is not None:
                parity.append(f"| {name} | {batch} | {r['max_rel_diff']:.1e} | {bench_dpot_official.PARITY_TOL:.0e} |")
            timing.append(f"| {name} | {r['official_of']} | {batch} | {r['official'] * 1e3:.1f} | {r['opzoo'] * 1e3:.1f} "
                          f"| {r['ratio_of_medians']:.3f} | {r['median_ratio']:.3f} |")
    return parity, timing


def side_by_side(s: Settings, models: dict[str, torch.nn.Module], batch: int, size: int,
                 autocast: dict[str, bool] | None = None, aot_compile: dict[str, bool] | None = None) -> dict[str, list[float]]:
    """Seconds per training step (forward + backward, MSE) of each model, interleaved; ``aot_compile``
    sets the AOT residuals' ``compile`` switch of some of them (the others: ``"auto"``)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, size, size, 10, 4, generator=g).to(s.device)
    target = torch.randn(batch, size, size, 1, 4, generator=g).to(s.device)
    autocast, aot_compile = autocast or {}, aot_compile or {}

    def step(name: str, model: torch.nn.Module) -> Callable[[], None]:
        def run() -> None:
            bench_aot.set_aot_compile(model, aot_compile.get(name, "auto"))
            model.zero_grad(set_to_none=True)
            with torch.autocast(s.device.type, dtype=torch.bfloat16, enabled=autocast.get(name, False)):
                out = model(x)
            F.mse_loss(out.float(), target).backward()
        return run

    bench_aot.clock = s.clock
    fns = {name: step(name, m) for name, m in models.items()}
    return bench_aot.side_by_side(f"batch {batch}", fns, s.device, s.rounds, s.warmup)


def ratio_rows(times: dict[str, list[float]], baseline: str, batch: int) -> list[str]:
    base = times[baseline]
    rows = []
    for name, t in times.items():
        ratio = statistics.median(t) / statistics.median(base)
        per_round = statistics.median(a / b for a, b in zip(t, base))
        rows.append(f"| {name} | {batch} | {statistics.median(t) * 1e3:.1f} | {ratio:.3f} | {per_round:.3f} |")
    return rows


RATIO_HEADER = ["| model | batch | ms / step (median) | ratio to {base} (of medians) | median per-round ratio |",
                "|---|---|---|---|---|"]


def ratio_table(base: str) -> list[str]:
    return [RATIO_HEADER[0].format(base=base), RATIO_HEADER[1]]


def aot_vs_dpot(s: Settings) -> list[str]:
    torch.manual_seed(0)
    models = {name: opzoo.load(name).to(s.device) for name in ("dpot-ti", "aot-pot-t")}
    # the same aot-pot-t with its AOT residuals eager too (CUDA's default compiles them)
    models[EAGER_AOT] = models["aot-pot-t"]
    times = side_by_side(s, models, 1, s.size, aot_compile={EAGER_AOT: False})
    return ratio_table("dpot-ti") + ratio_rows(times, "dpot-ti", 1)


EAGER_AOT = "aot-pot-t, eager PyTorch path"


class OfficialModel(torch.nn.Module):
    """The official DPOT computation (tests/fourier/reference_dpot.py) on its state dict, as a module."""

    def __init__(self, weights: dict[str, torch.Tensor]):
        super().__init__()
        self.weights = torch.nn.ParameterDict({k.replace(".", "/"): torch.nn.Parameter(v.detach()) for k, v in weights.items()})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sd = {k.replace("/", "."): v for k, v in self.weights.items()}
        return bench_dpot_official.dpot_forward_official(sd, x, modes=32, patch=8, t_out=1)[0]


def bf16_throughput(s: Settings) -> list[str]:
    """opzoo under bf16 autocast vs the official code in float32: samples per second of training."""
    name, batch = s.throughput_preset, s.throughput_batch
    official = bench_dpot_official.official_weights(name, s.device, size=s.size)
    opzoo_model = bench_dpot_official.opzoo_model(name, official, s.device, s.size)
    models = {f"official {name}, float32": OfficialModel(official).to(s.device),
              f"opzoo {name}, float32": opzoo_model, f"opzoo {name}, bf16 autocast": opzoo_model}
    times = side_by_side(s, models, batch, s.size, autocast={f"opzoo {name}, bf16 autocast": True})
    base = statistics.median(times[f"official {name}, float32"])
    rows = ["| run | batch | ms / step (median) | samples / s | throughput / official float32 |", "|---|---|---|---|---|"]
    for label, t in times.items():
        med = statistics.median(t)
        rows.append(f"| {label} | {batch} | {med * 1e3:.1f} | {batch / med:.1f} | {base / med:.2f}x |")
    return rows


def fno_vs_neuralop(s: Settings) -> list[str]:
    try:
        import neuralop  # noqa: F401
    except ImportError:
        return ["neuraloperator is not installed here (`pip install neuraloperator`): not measured."]
    bench_fourier.clock = s.clock
    batch, n, width, modes = (2, 16, 16, 4) if s.quick else (8, 64, 64, 16)
    result = bench_fourier.bench_fno_vs_neuralop(s.device, s.rounds, batch=batch, n=n, width=width, modes=modes, depth=4)
    rows = [f"width {width}, {modes} modes per corner, 4 layers, {n}x{n}, batch {batch}; Adam step included.", "",
            "| model | parameters | ms / step (median) | opzoo / this (median per-round ratio) |", "|---|---|---|---|"]
    for label, (med, params, ratio) in result.items():
        rows.append(f"| {label} | {params:,} | {med * 1e3:.1f} | {ratio:.3f} |")
    return rows


def moe_vs_dpot(s: Settings) -> list[str]:
    names = [n for n in ("nestor-ti", "aot-moe-pot-t") if n in opzoo.list_models()]
    if not names:
        return ["No MoE preset is registered (opzoo-moe not installed): not measured."]
    torch.manual_seed(0)
    models = {name: opzoo.load(name).to(s.device) for name in ("dpot-ti", *names)}
    batch, size = (2, s.size) if s.quick else (8, 64)
    return ratio_table("dpot-ti") + ratio_rows(side_by_side(s, models, batch, size), "dpot-ti", batch)


# ---- the report -------------------------------------------------------------------------------
def build_report(s: Settings, skip_checks: bool = False, slow_checks: bool = False) -> tuple[str, bool]:
    """The Markdown report and whether every check passed."""
    out = ["# opzoo GPU report (issue 16)", "", *environment(s), ""]
    ok = True
    out += ["## Checks on the device", ""]
    if skip_checks:
        out += ["Skipped (`--skip-checks`).", ""]
    else:
        rows, ok = run_checks(s, with_slow=slow_checks)
        out += rows + [""]
    parity, timing = official_comparison(s)
    out += ["## Parity: opzoo dpot vs the official DPOT code, same weights", "", *parity, "",
            "## opzoo vs the official DPOT code: forward + backward per training step", "",
            f"{s.size}x{s.size}, T_in 10, 4 channels, MSE loss; aot-pot-t is timed against the official DPOT-Ti.", "",
            *timing, "",
            "## bf16 training throughput (opzoo bf16 autocast vs the official code in float32)", "",
            *bf16_throughput(s), "",
            "## aot-pot-t vs dpot-ti at batch 1", "", *aot_vs_dpot(s), "",
            "## opzoo FNO vs neuraloperator", "", *fno_vs_neuralop(s), "",
            "## MoE presets vs dpot-ti", "", *moe_vs_dpot(s), ""]
    return "\n".join(out), ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: test the script on any machine")
    parser.add_argument("--rounds", type=int, help="interleaved timing rounds (default 15; 2 with --quick)")
    parser.add_argument("--out", default="gpu_report.md", help="where to write the Markdown report")
    parser.add_argument("--skip-checks", action="store_true", help="leave out the pytest checks")
    parser.add_argument("--slow-checks", action="store_true",
                        help="the slow checks too: inductor for every preset (minutes of compiling per preset)")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available; use --device cpu (with --quick to test the script)")
    if device.type == "cpu":
        torch.set_num_threads(1)  # process CPU time of one thread: the work each side does
    settings = Settings.make(device, args.quick, args.rounds, " ".join(["benchmarks/gpu_report.py", *argv]))
    report, ok = build_report(settings, skip_checks=args.skip_checks, slow_checks=args.slow_checks)
    Path(args.out).write_text(report)
    print(report)
    print(f"\nreport written to {args.out}" + ("" if ok else " (some checks FAILED)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
