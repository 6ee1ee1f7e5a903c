"""Records what GPhyT's upstream feeds its network from files laid out like three of The Well's datasets it trained on,
for tests/gphyt/test_training_sets.py (opzoo's fit of the same files must feed the same numbers).

Upstream rewrote each dataset before training with ``gphyt/data/preprocess.py`` (its last version is 6324976; it was
deleted in e687cce, before 4374116 published the weights), then computed each dataset's ``stats.yaml`` over its
training files (``gphyt/data/normalize.py``) and read windows with ``PhysicsDataset`` (``use_normalization: true``, as
the published runs' config). This runs that code, in a process of its own and without importing opzoo:

    git clone https://github.com/FloWsnr/General-Physics-Transformer GPhyT && git -C GPhyT checkout 4374116
    OPZOO_GPHYT_REPO=GPhyT OMP_NUM_THREADS=1 python tests/gphyt/record_training_sets.py [OUT_DIR]

(``preprocess.py`` is read from the checkout's history with ``git show 6324976:gphyt/data/preprocess.py``; The Well's
``WellDataset``, which ``normalize.py`` imports, comes from the_well installed beside.) It writes
``training_sets.json`` into tests/gphyt/data/ (or OUT_DIR): per dataset, the statistics upstream computed and its
network input ``x [T=4, H=256, W=128, C=5]`` of the first window of the first trajectory, at 256 fixed positions and
as per-channel means and standard deviations.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PREPROCESS_COMMIT = "6324976"
FIELDS = {"t0_fields": ["pressure", "density", "temperature"], "t1_fields": ["velocity"]}
N_POSITIONS = 256


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def positions(shape: tuple[int, ...], n: int = N_POSITIONS) -> list[list[int]]:
    """Fixed positions ``[t, h, w, c]`` (the same on every machine: numpy's PCG64 is platform-independent)."""
    rng = np.random.default_rng(1234)
    return np.stack([rng.integers(0, s, n) for s in shape], axis=1).tolist()


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def main() -> None:
    repo = Path(os.environ["OPZOO_GPHYT_REPO"]).resolve()
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("data")
    here = Path(__file__).parent
    files = load_module("training_set_files", here / "training_set_files.py")
    sys.path.insert(0, str(repo))
    import torch
    from gphyt.data.normalize import compute_statistics
    from gphyt.data.phys_dataset import PhysicsDataset

    record = {"upstream": {"repo": "FloWsnr/General-Physics-Transformer", "commit": git(repo, "rev-parse", "HEAD").strip(),
                           "preprocess": f"gphyt/data/preprocess.py @ {PREPROCESS_COMMIT}",
                           "torch": torch.__version__},
              "window": {"trajectory": 0, "start": 0, "frames": 4}, "datasets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = git(repo, "show", f"{PREPROCESS_COMMIT}:gphyt/data/preprocess.py")
        (tmp / "gphyt_preprocess.py").write_text(source)
        preprocess = load_module("gphyt_preprocess", tmp / "gphyt_preprocess.py")
        for name in files.LAYOUTS:
            raw = files.write(tmp / "raw" / f"{name}.hdf5", name)
            train = tmp / name / "data" / "train"
            train.mkdir(parents=True)
            preprocess.process_hdf5(raw, train / f"{name}_0.hdf5", **preprocess.settings[name])
            compute_statistics(train, tmp / name / "data" / "stats.yaml")
            import yaml

            stats = yaml.safe_load((tmp / name / "data" / "stats.yaml").read_text())
            ds = PhysicsDataset(data_dir=train, n_steps_input=4, n_steps_output=1, use_normalization=True,
                                dt_stride=1, include_field_names=FIELDS, flip_x=0.0, flip_y=0.0)
            x, _ = ds[0]
            x = x.double().numpy()  # [T, H, W, C]
            where = positions(x.shape)
            record["datasets"][name] = {
                "stats": {"mean": stats["mean"], "std": stats["std"]},
                "shape": list(x.shape),
                "positions": where,
                "values": [float(x[tuple(p)]) for p in where],
                "channel_mean": x.mean(axis=(0, 1, 2)).tolist(),
                "channel_std": x.std(axis=(0, 1, 2)).tolist(),
            }
    out.mkdir(parents=True, exist_ok=True)
    (out / "training_sets.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out / 'training_sets.json'}")


if __name__ == "__main__":
    main()
