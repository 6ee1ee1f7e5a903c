"""Start-up time of the ``opzoo`` command line and of ``import opzoo`` (issues 27 and 35).

Each command runs ``--repeats`` times in a fresh interpreter; the table gives the median, min and max
wall time next to the target the issues set (``--version``, ``--help``, ``list`` and ``info NAME`` < 1 s),
and which heavy modules each one imported. ``list`` and ``info`` answer from the preset index
(``opzoo.model_io.preset_index``): the first row times the one-off build of the index (a fresh cache directory),
the others run with it in place, as every run after the first one on a machine does. ``--before`` runs the same commands from another checkout's
interpreter (e.g. the commit before issue 27) for a side-by-side ratio.

    python benchmarks/bench_startup.py --repeats 7
    python benchmarks/bench_startup.py --repeats 7 --before /path/to/old/.venv/bin/python
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = [  # (label, python -c code or CLI argv, target seconds)
    ("opzoo --version", ["-m", "opzoo", "--version"], 1.0),
    ("opzoo --help", ["-m", "opzoo", "--help"], 1.0),
    ("opzoo eval --help", ["-m", "opzoo", "eval", "--help"], 1.0),
    ("opzoo list (first run: builds the preset index)", ["-m", "opzoo", "list"], None),
    ("opzoo list", ["-m", "opzoo", "list"], 1.0),
    ("opzoo info dpot-micro", ["-m", "opzoo", "info", "dpot-micro"], 1.0),
    ("import opzoo", ["-c", "import opzoo"], None),
    ("import opzoo; opzoo.list_models()", ["-c", "import opzoo; opzoo.list_models()"], None),
]
HEAVY = ("torch", "timm", "torchvision", "h5py", "huggingface_hub")
NEUTRAL_CWD = tempfile.gettempdir()  # not a checkout: `python -m opzoo` must import the installed opzoo


def heavy_modules(python: str, args: list[str]) -> str:
    """Which of HEAVY the command imported (run once more with an atexit probe)."""
    probe = ("import atexit, sys\n"
             f"atexit.register(lambda: sys.__stderr__.write('HEAVY ' + ','.join(m for m in {HEAVY!r} "
             "if m in sys.modules) + '\\n'))\n")
    if args[0] == "-m":
        code = probe + (f"import runpy; sys.argv = {['opzoo', *args[2:]]!r}; "
                        f"runpy.run_module({args[1]!r}, run_name='__main__')")
    else:
        code = probe + args[1]
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=NEUTRAL_CWD)
    line = next((x for x in out.stderr.splitlines() if x.startswith("HEAVY")), "HEAVY ?")
    return line[6:] or "none"


def time_once(python: str, args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([python, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=NEUTRAL_CWD)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--python", default=sys.executable, help="the interpreter with opzoo installed")
    ap.add_argument("--before", help="another interpreter (an older opzoo) to compare with")
    args = ap.parse_args()
    env_note = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores" if hasattr(os, "getloadavg") else ""
    print(f"# start-up, median of {args.repeats} fresh interpreters ({env_note})")
    head = "| command | median s | min s | max s | target |"
    if args.before:
        head += " before (median s) | speed-up |"
    print(head + " imports |")
    print("|---" * (head.count("|") - 1 + 1) + "|")
    cache = tempfile.mkdtemp(prefix="opzoo-bench-index-")
    os.environ["OPZOO_CACHE_DIR"] = cache
    time_once(args.python, ["-m", "opzoo", "list"])  # the index every later run finds
    for label, argv, target in CASES:
        cold = label.startswith("opzoo list (first run")
        times = []
        for _ in range(args.repeats):
            if cold:
                os.environ["OPZOO_CACHE_DIR"] = tempfile.mkdtemp(prefix="opzoo-bench-cold-")
            times.append(time_once(args.python, argv))
            os.environ["OPZOO_CACHE_DIR"] = cache
        med = statistics.median(times)
        ok = "" if target is None else (f"< {target:g} s " + ("met" if med < target else "MISSED"))
        row = f"| `{label}` | {med:.2f} | {min(times):.2f} | {max(times):.2f} | {ok} |"
        if args.before:
            before = statistics.median(time_once(args.before, argv) for _ in range(args.repeats))
            row += f" {before:.2f} | {before / med:.1f}x |"
        print(row + f" {heavy_modules(args.python, argv)} |")


if __name__ == "__main__":
    main()
