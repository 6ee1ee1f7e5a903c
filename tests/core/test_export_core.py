"""Issue 71, the core's part: the coordinate channels a traced graph computes (symbolic in the grid) are linspace's
to one rounding, and a core model exports to a torch.export program that matches it at another batch and grid."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import opzoo
from opzoo.layers.grid import append_grid


class _Grid(nn.Module):
    def forward(self, x):
        return append_grid(x)


@pytest.mark.parametrize("sizes", [(8,), (6, 10), (4, 6, 8)])
def test_traced_coordinates_are_linspaces_to_one_rounding(sizes):
    x = torch.zeros(1, *sizes, 3, 2)
    d = len(sizes)
    dims = {1 + i: 2 * torch.export.Dim(f"g{i}") for i in range(d)}
    program = torch.export.export(_Grid(), (x,), dynamic_shapes=({**dims},), strict=False).module()
    for grow in (0, 4):
        y = torch.zeros(1, *(n + grow for n in sizes), 3, 2)
        eager, traced = append_grid(y), program(y)
        assert traced.shape == eager.shape
        torch.testing.assert_close(traced, eager, rtol=0, atol=torch.finfo(torch.float32).eps)


def test_a_core_model_exports_as_pt2_with_its_check(tmp_path):
    torch.manual_seed(0)
    model = opzoo.load("simple-op")
    report = opzoo.export_model(model, tmp_path / "simple.pt2", "pt2")
    record = json.loads((tmp_path / "simple.pt2.json").read_text())
    assert record["format"] == "pt2" and record["dynamic"]["batch"] and len(record["checks"]) >= 2
    grid = [n + 2 * (report.dynamic["grid_step"] or 0) for n in report.checks[0].grid]
    x = torch.randn(5, *grid, model.config.in_timesteps, model.config.in_channels)
    program = torch.export.load(tmp_path / "simple.pt2").module()
    with torch.no_grad():
        torch.testing.assert_close(program(x), model.eval()(x), rtol=0, atol=1e-5)
