"""PNG plots of rollouts: ground truth / prediction / error panels, and error versus step."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(plt, fig, path: str | os.PathLike, dpi: int = 90) -> Path:
    """Write ``fig`` to ``path`` (its format from the suffix) whole, never through a link planted there, and close it."""
    import io

    from ..files import atomic_write

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lstrip(".") or "png", dpi=dpi)
    plt.close(fig)
    atomic_write(path, buffer.getvalue())
    return path


def field2d(frame: torch.Tensor) -> np.ndarray:
    """A 2-D view of one spatial frame ``[*S]``: itself in 2-D, the middle slice in 3-D."""
    a = frame.float().cpu().numpy()
    while a.ndim > 2:
        a = a[a.shape[0] // 2]
    return a


def plot_rollout_panels(truth: torch.Tensor, pred: torch.Tensor, steps: Sequence[int], path: str | os.PathLike,
                        channel: int = 0, title: str = "") -> Path:
    """Rows ground truth / prediction / |error| at rollout ``steps`` (1-based) of one trajectory.

    truth, pred: ``[*S, T, C]``. 1-D data is drawn as curves (truth and prediction overlaid).
    """
    plt = pyplot()
    horizon = truth.shape[-2]
    steps = [s for s in steps if 1 <= s <= horizon] or [horizon]
    ndim = truth.ndim - 2
    t, p = truth[..., channel], pred[..., channel]
    if ndim == 1:
        fig, axes = plt.subplots(2, len(steps), figsize=(max(3.2 * len(steps), 6.0), 5), squeeze=False)
        for j, s in enumerate(steps):
            axes[0, j].plot(t[:, s - 1].cpu(), label="ground truth")
            axes[0, j].plot(p[:, s - 1].cpu(), "--", label="prediction")
            axes[0, j].set_title(f"step {s}")
            axes[1, j].plot((p[:, s - 1] - t[:, s - 1]).abs().cpu(), color="C3")
            axes[1, j].set_title("|error|")
        legend(axes[0, 0], fontsize=7)
    else:
        fig, axes = plt.subplots(3, len(steps), figsize=(max(3.0 * len(steps), 6.0), 8.4), squeeze=False)
        lo, hi = float(t.min()), float(t.max())
        for j, s in enumerate(steps):
            gt, pr = field2d(t[..., s - 1]), field2d(p[..., s - 1])
            for row, (img, name, kw) in enumerate([(gt, "ground truth", dict(vmin=lo, vmax=hi)),
                                                   (pr, "prediction", dict(vmin=lo, vmax=hi)),
                                                   (np.abs(pr - gt), "|error|", dict(cmap="magma"))]):
                im = axes[row, j].imshow(img.T, origin="lower", **kw)
                axes[row, j].set_title(f"{name}, step {s}", fontsize=9)
                axes[row, j].set_xticks([]), axes[row, j].set_yticks([])
                fig.colorbar(im, ax=axes[row, j], fraction=0.046)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(plt, fig, path)


def legend(ax, **kwargs) -> None:
    """A legend of the labelled lines, or none (matplotlib warns on an axis without one)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def rollout_title(model: str, source, position: int, channel: int, names=None) -> str:
    """A rollout plot's title: model, dataset file, channel name (``names``: the channels shown, default the source's)
    and the trajectory's index *in the file* (``source``: the TrajectoryDataset subset the trajectory was read from,
    ``position`` its place there)."""
    names = source.channel_names if names is None else names
    cname = names[channel] if 0 <= channel < len(names) else f"padded channel {channel}"
    return (f"{model} on {Path(source.path).name}\nchannel {channel} ({cname}), "
            f"trajectory {source.indices[position]} of the file")


def plot_error_curves(curves: Mapping[str, Sequence[float]], path: str | os.PathLike, title: str = "",
                      persistence: Mapping[str, Sequence[float]] | None = None,
                      reference: Mapping[str, Sequence[float]] | None = None,
                      reference_label: str = "zero-shot", label: str = "model") -> Path:
    """Relative L2 error versus rollout step, one line per dataset (log scale); per dataset also the
    ``persistence`` baseline (dotted) and a ``reference`` model, e.g. zero-shot before fine-tuning (dashed)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for k, (name, curve) in enumerate(curves.items()):
        color = f"C{k % 10}"
        ax.plot(np.arange(1, len(curve) + 1), curve, marker=".", color=color, label=f"{name}: {label}")
        if reference and name in reference:
            ref = reference[name]
            ax.plot(np.arange(1, len(ref) + 1), ref, "--", color=color, alpha=0.8, label=f"{name}: {reference_label}")
        if persistence and name in persistence:
            base = persistence[name]
            ax.plot(np.arange(1, len(base) + 1), base, ":", color=color, alpha=0.8, label=f"{name}: persistence")
    ax.set_xlabel("rollout step")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("relative L2 error")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    legend(ax, fontsize=7)
    ax.set_title(title or "rollout error per step", fontsize=10)
    return save_figure(plt, fig, path)


def plot_loss(steps: Sequence[int], losses: Sequence[float], path: str | os.PathLike,
              evals: Mapping[str, tuple[Sequence[int], Sequence[float]]] | None = None, title: str = "") -> Path:
    """Training loss (and test l2 full per dataset at every evaluation, as markers) versus step."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(steps, losses, lw=0.8, label="train loss (relative L2 of one step, noised inputs)")
    for name, (s, v) in (evals or {}).items():
        ax.plot(s, v, marker="o", ls="-" if len(s) > 2 else "none", label=f"test l2 full (rollout): {name}")
    ax.set_xlabel("training step")
    ax.set_ylabel("relative L2 error")
    ax.set_title(title or "training loss and test error", fontsize=10)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    legend(ax, fontsize=8)
    return save_figure(plt, fig, path)


def plot_expert_load(loads: Mapping[str, Mapping[str, Sequence[float]]], path: str | os.PathLike,
                     title: str = "") -> Path:
    """Which inputs go where: one heat map per router (rows datasets, columns experts, share of the
    dataset's assignments, each row sums to 1; a router that got none of a dataset's inputs is grey).
    ``loads``: ``{dataset: {router name: [E]}}``."""
    plt = pyplot()
    datasets = list(loads)
    routers = list(next(iter(loads.values())))
    cols = min(4, len(routers))
    rows = -(-len(routers) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols + 1.2, (0.4 * len(datasets) + 1.1) * rows + 0.6),
                             squeeze=False, layout="constrained")
    for ax in axes.flat[len(routers):]:
        ax.axis("off")
    cmap = plt.get_cmap("viridis").with_extremes(bad="0.85")
    for n, (ax, router) in enumerate(zip(axes.flat, routers)):
        grid = np.array([loads[d][router] for d in datasets], dtype=float)
        grid[grid.sum(1) == 0] = np.nan  # this router saw none of the dataset's inputs
        im = ax.imshow(grid, vmin=0, vmax=1, cmap=cmap, aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            ax.text(j, i, "-" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="k" if np.isnan(v) or v >= 0.6 else "w")
        ax.set_title(router, fontsize=8)
        ax.set_xticks(range(grid.shape[1]))
        ax.tick_params(labelsize=7)
        ax.set_yticks(range(len(datasets)))
        ax.set_yticklabels(datasets if n % cols == 0 else [], fontsize=7)
        if n // cols == rows - 1 or n + cols >= len(routers):
            ax.set_xlabel("expert", fontsize=8)
    fig.colorbar(im, ax=axes.ravel().tolist(), fraction=0.02, label="share of assignments")
    fig.suptitle(title or "expert load per dataset")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
