"""Issue 69: the one estimator of a training step's peak (opzoo.training.memory) against the peak measured while the
step runs, for every micro preset, with and without gradient checkpointing (the benchmark's table has the largest
presets: docs/benchmarks.md, "Memory of a training step")."""

import pytest
import torch

import opzoo
from opzoo.model_io.example_input import input_grid
from opzoo.training.memory import PeakTensorMemory, estimate_step_memory, measured_step_peak, tensor_bytes
from opzoo.training.memory_plan import meta_copy

MICRO = sorted(n for n in opzoo.list_models() if n.endswith("-micro"))


def test_the_measured_peak_counts_the_tensors_alive_at_once():
    """Hand-checked: a 2-layer MLP's forward keeps its hidden and output tensors; a view or an in-place op allocates
    nothing; a freed tensor leaves the count; a tensor autograd saved stays in it."""
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    with torch.no_grad(), PeakTensorMemory(base=100) as mode:  # no graph keeps h alive
        h = net[0](x)
        assert mode.now == 100 + 4 * 5 * 16
        v = h.view(-1).mul_(2)  # a view, then in place: no new storage
        y = net[1](h)
        assert mode.now == 100 + 4 * (5 * 16 + 5 * 4)
        del h, v
        assert mode.now == 100 + 4 * 5 * 4
    assert mode.peak == 100 + 4 * (5 * 16 + 5 * 4) and y.shape == (5, 4)
    assert tensor_bytes([x, x.view(-1), net[0].weight]) == 4 * (5 * 8 + 16 * 8)
    with PeakTensorMemory() as mode:
        h = net[0](x)
        y = net[1](h)  # saves h for the gradient of net[1].weight
        del h
        assert mode.now == 4 * (5 * 16 + 5 * 4)


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
@pytest.mark.parametrize("name", MICRO)
def test_the_estimate_is_within_a_quarter_of_the_measured_peak(name, checkpointing):
    torch.manual_seed(0)
    model = opzoo.load(name)
    grid, _ = input_grid(model, None)
    shape = (2, *grid, model.config.in_timesteps, model.config.in_channels)
    estimate = estimate_step_memory(meta_copy(model), shape, grad_checkpointing=checkpointing).total
    model.set_grad_checkpointing(checkpointing)
    measured = measured_step_peak(model, shape)
    assert 0.75 <= estimate / measured <= 1.25, f"{name}: estimated {estimate:,} B, measured {measured:,} B"
