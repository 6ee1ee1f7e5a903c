"""Scores at the data's own grid (issue 45): a model that runs at another grid gets its input resampled to it and its
prediction resampled back, and the comparison is made on the file's grid, as PDEBench and The Well make it. Before,
Gray-Scott (48^2) and a wave (64^2) were scored at dpot-micro's 32^2 and nothing said so."""

from __future__ import annotations

import json

import numpy as np
import torch
from safetensors import safe_open

import opzoo
from opzoo.cli import main
from opzoo.data import FrameShape, TrajectoryDataset
from opzoo.data.transforms import resize_batch
from opzoo.evaluation.l2 import l2_full
from opzoo.evaluation.rollouts import evaluate_dataset, with_persistence

from .conftest import advection_trajectories, write_canonical


def test_eval_scores_at_the_files_grid_and_says_so(tmp_path, capsys):
    data = advection_trajectories(6, 48, 14, seed=0)
    path = write_canonical(tmp_path / "adv48.h5", data, ["u", "v"], "advection")  # [N, 48, 48, T, 2]
    torch.manual_seed(0)
    model = opzoo.load("dpot-micro", pretrained=True)  # runs at its pretrained 32x32
    source = TrajectoryDataset(str(path))
    shape = FrameShape((32, 32), 2, model.config.in_timesteps, 1)
    result = evaluate_dataset(model, "adv48", source, shape, horizon=4, batch_size=6)
    assert result.grid == [48, 48] and result.model_grid == [32, 32]
    # by hand: the truth untouched at 48^2; the input resampled to 32^2, the prediction back to 48^2
    t_in = model.config.in_timesteps
    frames = torch.stack([source.read(i, 0, t_in + 4) for i in range(6)]).float()
    with torch.no_grad():
        pred = resize_batch(model.rollout(resize_batch(frames[..., :t_in, :], (32, 32)), 4), (48, 48))
    want = l2_full(pred, frames[..., t_in:, :], torch.ones(2, dtype=torch.bool))
    np.testing.assert_allclose(result.l2_full_per_trajectory, want.tolist(), rtol=1e-5)
    with_persistence(result, source, shape, horizon=4, batch_size=6)  # the last input frame, never resampled
    last = frames[..., t_in - 1:t_in, :].expand(-1, -1, -1, 4, -1)
    np.testing.assert_allclose(result.persistence.l2_full, float(l2_full(last, frames[..., t_in:, :],
                                                                        torch.ones(2, dtype=torch.bool)).mean()),
                               rtol=1e-6)

    assert main(["eval", "dpot-micro", "--data", str(path), "--horizon", "4", "--out", str(tmp_path / "eval")]) == 0
    out = capsys.readouterr().out
    assert "grid: the model runs at 32x32" in out and "scores are computed at the file's own grid (48x48)" in out
    doc = json.loads((tmp_path / "eval" / "eval.json").read_text())["datasets"]["adv48"]
    assert doc["grid"] == [48, 48] and doc["model_grid"] == [32, 32]

    save = tmp_path / "pred.safetensors"
    assert main(["rollout", "dpot-micro", "--data", str(path), "--index", "2", "--steps", "3", "--save", str(save)]) == 0
    assert "at its grid 48x48 (the model ran at 32x32)" in capsys.readouterr().out
    with safe_open(str(save), "pt") as f:
        assert f.get_tensor("prediction").shape == (48, 48, 3, 2)
        meta = f.metadata()
    assert meta["grid"] == "48x48" and meta["model_grid"] == "32x32" and meta["channels"] == "u,v"
