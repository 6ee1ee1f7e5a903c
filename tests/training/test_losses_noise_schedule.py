"""The loss, metrics, denoising noise and schedules against direct loops and torch's reference."""

import math

import pytest
import torch

from opzoo.evaluation import l2_full, l2_per_step
from opzoo.training import (
    add_denoising_noise,
    denoising_noise,
    one_cycle_factor,
    relative_l2_loss,
)


def loop_relative_l2(pred, target, mask):
    """DESIGN §8 with explicit loops: per sample/channel ‖ŷ−y‖/(‖y‖+1e-8), mean over valid channels, then batch."""
    B, C = pred.shape[0], pred.shape[-1]
    per_sample = []
    for b in range(B):
        vals = []
        for c in range(C):
            if not mask[b, c]:
                continue
            d = (pred[b, ..., c] - target[b, ..., c]).double()
            y = target[b, ..., c].double()
            vals.append(math.sqrt(float((d * d).sum())) / (math.sqrt(float((y * y).sum())) + 1e-8))
        per_sample.append(sum(vals) / len(vals))
    return sum(per_sample) / B


def test_relative_l2_matches_loops_with_mask():
    g = torch.Generator().manual_seed(0)
    pred, target = torch.randn(3, 5, 6, 2, 4, generator=g), torch.randn(3, 5, 6, 2, 4, generator=g)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 1, 0]], dtype=torch.bool)
    got = float(relative_l2_loss(pred, target, mask))
    assert got == pytest.approx(loop_relative_l2(pred, target, mask), rel=1e-6)
    # padded channels do not count: changing them changes nothing
    pred2 = pred.clone()
    pred2[1, ..., 1] += 100.0
    assert float(relative_l2_loss(pred2, target, mask)) == pytest.approx(got, rel=1e-7)


def test_relative_l2_hand_case():
    target = torch.tensor([3.0, 4.0]).reshape(1, 2, 1, 1)  # ‖y‖ = 5
    pred = torch.tensor([3.0, 1.0]).reshape(1, 2, 1, 1)  # ‖ŷ−y‖ = 3
    assert float(relative_l2_loss(pred, target, torch.ones(1, dtype=torch.bool))) == pytest.approx(3 / (5 + 1e-8))


def test_l2_full_and_per_step():
    g = torch.Generator().manual_seed(1)
    pred, target = torch.randn(2, 4, 4, 3, 2, generator=g), torch.randn(2, 4, 4, 3, 2, generator=g)
    mask = torch.tensor([True, False])
    full = l2_full(pred, target, mask)
    for n in range(2):
        d, y = pred[n, ..., 0] - target[n, ..., 0], target[n, ..., 0]
        assert float(full[n]) == pytest.approx(float(d.norm() / (y.norm() + 1e-8)), rel=1e-6)
    curve = l2_per_step(pred, target, mask)
    assert curve.shape == (2, 3)
    d, y = pred[1, :, :, 2, 0] - target[1, :, :, 2, 0], target[1, :, :, 2, 0]
    assert float(curve[1, 2]) == pytest.approx(float(d.norm() / (y.norm() + 1e-8)), rel=1e-6)


def test_denoising_noise_scale_per_sample_and_channel():
    x = torch.zeros(2, 8, 8, 3, 2)
    x[0, ..., 0], x[0, ..., 1], x[1, ..., 0], x[1, ..., 1] = 1.0, 10.0, 100.0, 0.0
    z = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    noise = denoising_noise(x, 5e-4, z=z)
    for b in range(2):
        for c in range(2):
            norm = x[b, ..., c].norm()
            assert torch.allclose(noise[b, ..., c], 5e-4 * norm * z[b, ..., c], rtol=1e-6, atol=0)
    assert torch.all(noise[1, ..., 1] == 0)  # a zero channel gets no noise
    # the relative size of the noise is ε·sqrt(numel) in expectation: ‖noise‖/‖x‖ ≈ ε·sqrt(8·8·3)
    big = torch.randn(64, 16, 16, 4, 1, generator=torch.Generator().manual_seed(2))
    n = denoising_noise(big, 1e-2, torch.Generator().manual_seed(3))
    ratio = n.square().sum((1, 2, 3)).sqrt() / big.square().sum((1, 2, 3)).sqrt()
    assert float(ratio.mean()) == pytest.approx(1e-2 * math.sqrt(16 * 16 * 4), rel=0.02)
    assert add_denoising_noise(x, 0.0) is x


@pytest.mark.parametrize("total,pct", [(100, 0.2), (37, 0.3), (1000, 0.2)])
def test_one_cycle_matches_torch(total, pct):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=total, pct_start=pct, div_factor=1e4,
                                                final_div_factor=1e4, cycle_momentum=False)
    for step in range(total):
        assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * one_cycle_factor(step, total, pct, 1e4, 1e4), rel=1e-9, abs=1e-15)
        opt.step()
        sched.step()
