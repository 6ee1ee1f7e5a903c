"""``opzoo demo``: a small end-to-end run of the core's built-in model.

Trajectories of the 2D heat equation on the periodic unit square are computed exactly in Fourier
space; ``simple-op`` learns the next frame from the last four, is saved and loaded back as an opzoo
repo, and rolls out; the result is printed and plotted.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .factory import load
from .hub import from_pretrained
from .training.plots import plot_rollout_panels


def heat_trajectories(n: int, res: int, steps: int, kappa: float = 0.02, dt: float = 0.05,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """Exact solutions ``[n, res, res, steps, 1]`` from random initial data on wavenumbers |k| <= 2."""
    x = torch.arange(res, dtype=torch.float64) / res
    xx, yy = torch.meshgrid(x, x, indexing="ij")
    out = torch.zeros(n, res, res, steps, 1, dtype=torch.float64)
    t = torch.arange(steps, dtype=torch.float64) * dt
    for kx in range(0, 3):
        for ky in range(-2, 3):
            if (kx, ky) <= (0, 0):
                continue
            phase = 2 * math.pi * (kx * xx + ky * yy)
            a, b = torch.randn(2, n, 1, 1, 1, generator=generator, dtype=torch.float64)
            decay = torch.exp(-kappa * 4 * math.pi**2 * (kx**2 + ky**2) * t)
            out[..., 0] += (a * torch.cos(phase)[None, ..., None] + b * torch.sin(phase)[None, ..., None]) * decay
    return out.float()


def relative_l2(pred: torch.Tensor, true: torch.Tensor) -> float:
    return (torch.linalg.vector_norm(pred - true) / torch.linalg.vector_norm(true)).item()


def run_demo(out_dir: str | Path = "demo_out", steps: int = 200, seed: int = 0) -> int:
    out_dir = Path(out_dir)
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    train, test = heat_trajectories(64, 16, 16, generator=g), heat_trajectories(8, 16, 16, generator=g)
    model = load("simple-op")
    t_in = model.config.in_timesteps
    windows = torch.cat([train[..., i:i + t_in + 1, :] for i in range(train.shape[-2] - t_in)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    print(f"opzoo demo: training simple-op ({sum(p.numel() for p in model.parameters()):,} parameters) "
          f"on exact 2D heat-equation trajectories")
    bar = tqdm(range(steps), desc="train", unit="step")
    for _ in bar:
        batch = windows[torch.randint(len(windows), (8,), generator=g)]
        pred = model(batch[..., :t_in, :])
        loss = (torch.linalg.vector_norm(pred - batch[..., t_in:, :], dim=(1, 2, 3))
                / torch.linalg.vector_norm(batch[..., t_in:, :], dim=(1, 2, 3))).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        bar.set_postfix(loss=f"{loss.item():.4f}")

    model.eval()
    repo = model.save_pretrained(out_dir / "simple-op-heat")
    reloaded = from_pretrained(repo)
    horizon = test.shape[-2] - t_in
    with torch.no_grad():
        rollout = reloaded.rollout(test[..., :t_in, :], steps=horizon)
        same = torch.equal(rollout, model.rollout(test[..., :t_in, :], steps=horizon))
    error = relative_l2(rollout, test[..., t_in:, :])
    print(f"saved to {repo}; reloaded model identical: {same}")
    print(f"rollout over {horizon} steps: relative L2 error {error:.4f}")
    plot = plot_rollout_panels(test[0, ..., t_in:, :], rollout[0], [1, horizon], out_dir / "demo_rollout.png",
                               title="simple-op on the 2D heat equation")
    print(f"plot: {plot}")
    return 0 if same else 1
