"""The peak resident memory of loading a checkpoint, over its weights' bytes (issue 69; docs/benchmarks.md, "Memory of a
load"): each family's largest preset, saved at full size from random weights (a stand-in file of the real size:
no network here), then loaded by opzoo.load in a fresh process whose peak resident memory (VmHWM, reset after the
imports) is read. opzoo builds a model about to be loaded with its parameters on the meta device and takes the
tensors read as its parameters (opzoo.model_io.weights): the bound is 1.3x the weights.

    .venv/bin/python benchmarks/bench_load_memory.py [--keep DIR] [NAME ...]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
LARGEST = ["dpot-h", "aot-pot-l", "nestor-s", "fno-3d", "gphyt-xl", "poseidon-l", "pdet-mc-l", "pdet-sc-l", "morph-l",
           "mpp-avit-l", "well-fno-post_neutron_star_merger", "well-tfno-post_neutron_star_merger",
           "well-unet-classic-MHD_64", "well-unet-convnext-MHD_64", "walrus"]
SAVE = r"""
import sys, torch, opzoo
from opzoo.evaluation.fit import neutral_statistics
name, out, upstream = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
torch.manual_seed(0)
model = opzoo.load(name, **(neutral_statistics(name, {}) or {}))
if not upstream:
    model.save_pretrained(out)
else:  # the file as the family's upstream writes it (the conformance suite's write_upstream), for its converter
    from pathlib import Path
    from opzoo.registry.registry import get_registry
    from tests.zoo import test_conformance
    family = get_registry().preset(name).family
    suite = next(c for c in vars(test_conformance).values() if isinstance(c, type) and getattr(c, "family", None)
                 == family and c.__name__.startswith("Test"))()
    Path(out).mkdir(parents=True)
    path = suite.write_upstream(model, Path(out) / "upstream", lambda state: None)
    if path is None:
        raise SystemExit(f"{family} has no upstream writer in tests/zoo/test_conformance.py")
    print(path)
"""
LOAD = r"""
import json, sys, torch, opzoo
from opzoo.evaluation.fit import neutral_statistics
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
stats = neutral_statistics(sys.argv[2], {}) or {}
with torch.device("meta"):  # its code imported and run once, at no memory: the peak below is the load's own
    opzoo.load(sys.argv[2], **stats)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
model = opzoo.load(sys.argv[1]) if sys.argv[3] == "0" else opzoo.load(sys.argv[2], checkpoint_path=sys.argv[1], **stats)
weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
print(json.dumps({"before": before, "peak": status("VmHWM"), "after": status("VmRSS"), "weights": weights}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*", default=LARGEST)
    parser.add_argument("--only", action="store_true", help="rewrite only these rows of the kept table")
    parser.add_argument("--upstream", action="store_true",
                        help="load the upstream's file through the family's converter (checkpoint_path=)")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rows = []
    for name in args.names:
        label = f"{name} (upstream's file, converted)" if args.upstream else name
        directory = Path(tempfile.mkdtemp(prefix="opzoo-load-"))
        try:
            flag = "1" if args.upstream else "0"
            saved = subprocess.run([sys.executable, "-c", SAVE, name, str(directory / "repo"), flag],
                                   capture_output=True, text=True, env={**env, "PYTHONPATH": str(ROOT)})
            if saved.returncode:
                rows.append({"model": label, "error": saved.stderr.strip().splitlines()[-1][:200]})
                continue
            target = saved.stdout.strip().splitlines()[-1] if args.upstream else str(directory / "repo")
            # the model's code imported and run once on meta, then the load: the peak over the resident memory before
            # it; also with glibc's mmap threshold fixed, so that freed heap memory goes back to the system
            numbers = {}
            for run, extra in (("default", {}), ("mmap_threshold", {"MALLOC_MMAP_THRESHOLD_": "131072"})):
                loaded = subprocess.run([sys.executable, "-c", LOAD, target, name, flag],
                                        capture_output=True, text=True, env={**env, **extra})
                if loaded.returncode:
                    raise RuntimeError(loaded.stderr.strip().splitlines()[-1][:200])
                numbers[run] = json.loads(loaded.stdout.strip().splitlines()[-1])
            m = numbers["default"]
            rows.append({"model": label, "weights_mib": m["weights"] / 2**20,
                         "load_peak_mib": (m["peak"] - m["before"]) / 2**20,
                         "ratio": (m["peak"] - m["before"]) / m["weights"],
                         "ratio_mmap_threshold": (numbers["mmap_threshold"]["peak"] - numbers["mmap_threshold"]["before"])
                         / m["weights"]})
        except RuntimeError as e:
            rows.append({"model": label, "error": str(e)})
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        print(rows[-1], flush=True)
    kept_file = RESULTS / "load_memory.json"
    kept = {r["model"]: r for r in (json.loads(kept_file.read_text()) if kept_file.exists() and args.only else [])}
    kept.update({r["model"]: r for r in rows})
    rows = list(kept.values())
    RESULTS.mkdir(exist_ok=True)
    kept_file.write_text(json.dumps(rows, indent=1))
    lines = ["| model | weights MiB | peak resident memory of the load, MiB | over the weights | over the weights, "
             "MALLOC_MMAP_THRESHOLD_=131072 |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | not measured: {r['error']} | | | |" if "error" in r else
                     f"| {r['model']} | {r['weights_mib']:.0f} | {r['load_peak_mib']:.0f} | {r['ratio']:.2f} | "
                     f"{r['ratio_mmap_threshold']:.2f} |")
    (RESULTS / "load_memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
