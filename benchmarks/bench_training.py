"""Training-loop overhead and checkpoint cost, measured side by side in one run.

A: a bare PyTorch loop (forward, masked relative L2, backward, clip, AdamW step) on batches held in memory.
B: ``opzoo.training.Trainer`` on the same model, batch size and data (read lazily from HDF5, with
   denoising noise, per-step seeded sampling, per-step logging and the non-finite check).
The two alternate in blocks (A B A B ...) so that drifting machine load hits both alike; one
intra-op thread each. Reports the median seconds per step of each and the ratio B/A, then the
median time to write and to read back a checkpoint.
Usage: ``python benchmarks/bench_training.py [--steps 15] [--rounds 3] [--width 96]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch

import opzoo
from opzoo.training import Trainer, parse_run_config, read_log, relative_l2_loss
from opzoo.training import checkpoint as ckpt


def model_args(width: int) -> dict:
    return {"in_channels": 2, "out_channels": 2, "in_timesteps": 10, "img_size": [32, 32], "patch_size": 4,
            "width": width, "depth": 4, "out_layer_dim": 32, "mixer": "fourier-attention", "mixer_args": {"n_blocks": 4, "modes": 8}}


def write_data(path: Path, n: int = 16, res: int = 32, steps: int = 20) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.linspace(0, 1, res, endpoint=False)
    X, Y = np.meshgrid(x, x, indexing="ij")
    t = np.arange(steps) * 0.05
    data = np.zeros((n, res, res, steps, 2), np.float32)
    for i in range(n):
        for c in range(2):
            k = rng.integers(1, 4, size=2)
            data[i, ..., c] = (np.cos(2 * np.pi * (k[0] * X + k[1] * Y))[..., None] * np.exp(-t * (k @ k))) + 2.0
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data)
    return data


def bare_loop(data: np.ndarray, width: int, steps: int, batch: int) -> list[float]:
    torch.manual_seed(0)
    model = opzoo.create_model("pot", **model_args(width))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.9), weight_decay=1e-6)
    d = torch.from_numpy(data)
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(batch, 2, dtype=torch.bool)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        idx = torch.randint(0, d.shape[0], (batch,), generator=g)
        t = int(torch.randint(0, d.shape[-2] - 10, (1,), generator=g))
        x, y = d[idx, :, :, t:t + 10], d[idx, :, :, t + 10:t + 11]
        opt.zero_grad(set_to_none=True)
        loss = relative_l2_loss(model(x), y, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        float(loss.detach())
        times.append(time.perf_counter() - t0)
    return times


def trainer_loop(path: Path, out: Path, width: int, steps: int, batch: int) -> tuple[list[float], Trainer]:
    doc = {"output_dir": str(out), "model": {"name": "pot", "args": model_args(width)},
           "data": {"datasets": [{"path": str(path), "test_fraction": 0.125}], "max_test_trajectories": 1, "horizon": 1},
           "optimizer": {"lr": 1e-4}, "training": {"steps": steps, "batch_size": batch, "log_every": 1000},
           "checkpoint": {"every": None}, "evaluation": {"plots": False}}
    trainer = Trainer(parse_run_config(doc), show_progress=False)
    trainer.fit()
    cumulative = [r["time"] for r in read_log(out / "log.jsonl")]
    return [b - a for a, b in zip([0.0] + cumulative[:-1], cumulative)], trainer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15, help="steps per block")
    parser.add_argument("--rounds", type=int, default=3, help="A/B block pairs")
    parser.add_argument("--width", type=int, default=96)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device cpu")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = write_data(tmp / "data.h5")
        warm = 2
        a, b = [], []
        for r in range(args.rounds):
            a += bare_loop(data, args.width, args.steps, args.batch)[warm:]
            times, trainer = trainer_loop(tmp / "data.h5", tmp / f"run{r}", args.width, args.steps, args.batch)
            b += times[warm:]
        ma, mb = statistics.median(a), statistics.median(b)
        n_params = sum(p.numel() for p in trainer.model.parameters())
        print(f"micro POT width {args.width}: {n_params:,} parameters, batch {args.batch}, "
              f"{args.rounds} x {args.steps} steps each")
        print(f"  bare PyTorch loop: median {ma * 1e3:.1f} ms/step")
        print(f"  opzoo Trainer:     median {mb * 1e3:.1f} ms/step")
        print(f"  ratio Trainer / bare: {mb / ma:.3f}")
        writes, reads = [], []
        for i in range(5):
            t0 = time.perf_counter()
            trainer._save(1000 + i)
            writes.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ckpt.read_checkpoint(ckpt.list_checkpoints(trainer.ckpt_dir)[-1])
            reads.append(time.perf_counter() - t0)
        size = sum(f.stat().st_size for f in ckpt.list_checkpoints(trainer.ckpt_dir)[-1].iterdir())
        print(f"  checkpoint ({size / 1e6:.2f} MB): write median {statistics.median(writes) * 1e3:.1f} ms, "
              f"read median {statistics.median(reads) * 1e3:.1f} ms")
        print(json.dumps({"bare_ms": ma * 1e3, "trainer_ms": mb * 1e3, "ratio": mb / ma,
                          "ckpt_write_ms": statistics.median(writes) * 1e3, "ckpt_read_ms": statistics.median(reads) * 1e3}))


if __name__ == "__main__":
    main()
