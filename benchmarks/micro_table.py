"""docs/micro.md's table of every micro architecture: held-out l2 full per dataset of the micro suite (mean over the 12
test trajectories, with a 95 % bootstrap interval over them), parameters and FLOPs of one training step (batch 16 at
32x32, counted by ``opzoo benchmark``'s counter), from the weights each plugin ships.

The models read windows of 1 to 10 frames, so each one's ``eval.json`` (written by its training run) scores another
set of frames. This table scores all of them on the same frames: frames 10 to the end of every test trajectory, each
model reading the window just before frame 10 (as ``opzoo compare`` does), persistence on the same frames.

    python benchmarks/micro_table.py     # needs data/micro-mix/ (any configs/micro/*.yaml run generates it)
"""

from __future__ import annotations

from pathlib import Path

import torch

import opzoo
from opzoo.benchmark.compare import score_model
from opzoo.benchmark.compare_report import interval
from opzoo.benchmark.presets import count_costs
from opzoo.data import TrajectoryDataset, split_trajectories
from opzoo.evaluation.fit import fit_data
from opzoo.evaluation.l2 import l2_full
from opzoo.micro import MICRO_SUITE

MICRO_PRESETS = ("dpot-micro", "aot-pot-micro", "poseidon-micro", "gphyt-micro", "morph-micro", "pdet-mc-micro")
BATCH, BOOTSTRAPS, PREDICTED_FROM = 16, 1000, 10
DATA = Path("data/micro-mix")


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """The mean of ``values`` and its 95 % bootstrap interval (1000 draws, seed 0)."""
    x = torch.tensor(values, dtype=torch.float64)
    idx = torch.randint(0, len(x), (BOOTSTRAPS, len(x)), generator=torch.Generator().manual_seed(0))
    return float(x.mean()), *interval(x[idx].mean(dim=1))


def test_split(ds: str) -> TrajectoryDataset:
    return split_trajectories(TrajectoryDataset(str(DATA / f"{ds}.h5")), 0.1)[1]


def same_frames(model, ds: str) -> list[float]:
    """l2 full per test trajectory of ``ds``, predicting frames PREDICTED_FROM.. from the window just before them."""
    fitted = fit_data(model, [test_split(ds)], name=getattr(model, "preset_name", None))
    return score_model(fitted.model, fitted.sources, fitted.frame_shape, None, 12, PREDICTED_FROM)["per_trajectory"][
        "rel_l2"]


def row(name: str) -> dict:
    model = opzoo.load(name, pretrained=True)
    c = model.config
    _, train, _ = count_costs(model, torch.randn(BATCH, 32, 32, c.in_timesteps, c.in_channels))
    model.eval()
    return {"name": name, "parameters": sum(p.numel() for p in model.parameters()), "in_timesteps": c.in_timesteps,
            "gflop": train.flops / 1e9, "l2": {ds: mean_interval(same_frames(model, ds)) for ds in MICRO_SUITE}}


def persistence() -> dict[str, float]:
    out = {}
    for ds in MICRO_SUITE:
        u = test_split(ds)
        values = []
        for i in range(len(u)):
            x = torch.as_tensor(u[i]).double()  # [*S, T, C]
            pred = x[..., PREDICTED_FROM - 1:PREDICTED_FROM, :].expand_as(x[..., PREDICTED_FROM:, :])
            values.append(float(l2_full(pred[None], x[None, ..., PREDICTED_FROM:, :], torch.ones(x.shape[-1], dtype=torch.bool))))
        out[ds] = sum(values) / len(values)
    return out


def markdown(rows: list[dict]) -> str:
    head = "| preset | parameters | T_in | GFLOP / step | " + " | ".join(MICRO_SUITE) + " | mean |"
    lines = [head, "|" + "---|" * (5 + len(MICRO_SUITE))]
    for r in rows:
        cells = [f"{m:.4f} [{lo:.4f}, {hi:.4f}]" for m, lo, hi in r["l2"].values()]
        mean = sum(m for m, _, _ in r["l2"].values()) / len(MICRO_SUITE)
        lines.append(f"| `{r['name']}` | {r['parameters']:,} | {r['in_timesteps']} | {r['gflop']:.2f} | "
                     + " | ".join(cells) + f" | {mean:.4f} |")
    p = persistence()
    lines.append("| persistence | | | | " + " | ".join(f"{p[ds]:.4f}" for ds in MICRO_SUITE)
                 + f" | {sum(p.values()) / len(p):.4f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    torch.manual_seed(0)
    print(markdown([row(n) for n in MICRO_PRESETS]))
