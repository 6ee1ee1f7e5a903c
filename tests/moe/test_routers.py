"""Routers: the eq. 14 balance loss by hand, gradients to the gate, top-k renormalization (eq. 7)."""

import pytest
import torch

from opzoo import ConfigError
from opzoo_moe import ImageRouter, TokenRouter, balance_loss


def test_balance_loss_is_one_for_perfectly_balanced_routing():
    # every expert gets the same share of the G*k assignments -> L = sum_i p_i = 1 whatever P is
    probs = torch.softmax(torch.randn(8, 4, dtype=torch.float64), -1)
    top1 = torch.tensor([[0], [1], [2], [3], [0], [1], [2], [3]])
    assert balance_loss(probs, top1, 4)[0].item() == pytest.approx(1.0, abs=1e-15)
    top2 = torch.tensor([[0, 1], [2, 3], [1, 0], [3, 2]])
    assert balance_loss(probs[:4], top2, 4)[0].item() == pytest.approx(1.0, abs=1e-15)
    uniform = torch.full((6, 3), 1 / 3, dtype=torch.float64)  # uniform P with any routing -> 1 too
    assert balance_loss(uniform, torch.zeros(6, 1, dtype=torch.long), 3)[0].item() == pytest.approx(1.0, abs=1e-15)


def test_balance_loss_matches_hand_computation_for_unbalanced_routing():
    # 4 groups, E = 2, top-1: all to expert 0. p = mean rows = (0.7, 0.3); f = (1, 0) -> L = 2 * 0.7 = 1.4
    probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.7, 0.3], [0.6, 0.4]], dtype=torch.float64)
    loss, counts = balance_loss(probs, torch.zeros(4, 1, dtype=torch.long), 2)
    assert loss.item() == pytest.approx(1.4, abs=1e-15)
    assert counts.tolist() == [4.0, 0.0]
    # E = 3, top-2 over 2 groups: choices {0,1} and {0,2} -> n = (2, 1, 1), f = (1/2, 1/4, 1/4)
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.4, 0.1, 0.5]], dtype=torch.float64)
    idx = torch.tensor([[0, 1], [2, 0]])
    p = (0.45, 0.2, 0.35)
    expected = 3 * (p[0] * 0.5 + p[1] * 0.25 + p[2] * 0.25)  # = 1.3875
    assert balance_loss(probs, idx, 3)[0].item() == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("k", [1, 2])
def test_router_weights_are_renormalized_top_k_of_the_softmax(k):
    torch.manual_seed(0)
    router = TokenRouter(8, 4, top_k=k)
    x = torch.randn(3, 5, 8)
    r = router(x)
    probs = torch.softmax(router.gate(x.reshape(-1, 8)), -1)
    top, idx = probs.topk(k, -1)
    assert torch.equal(r.indices, idx)
    torch.testing.assert_close(r.weights, top / top.sum(-1, keepdim=True))  # eq. 7
    torch.testing.assert_close(r.weights.sum(-1), torch.ones(15, dtype=r.weights.dtype))
    assert r.weights.shape == (15, k) and router.last_counts.sum().item() == 15 * k
    assert router.last_load.sum().item() == pytest.approx(1.0)


def test_image_router_pools_over_space():
    torch.manual_seed(0)
    router = ImageRouter(6, 3, top_k=1)
    x = torch.randn(4, 5, 7, 6)
    r = router(x)
    expect = torch.softmax(router.gate(x.mean((1, 2))), -1).argmax(-1)
    assert torch.equal(r.indices[:, 0], expect) and r.indices.shape == (4, 1)
    assert torch.equal(r.weights, torch.ones(4, 1))  # top-1 renormalized is exactly 1 (eq. 7)
    assert router.aux_group == "image"


@pytest.mark.parametrize("k", [1, 2])
def test_gradients_reach_the_router_weights(k):
    torch.manual_seed(0)
    router = TokenRouter(8, 4, top_k=k)
    r = router(torch.randn(20, 8))
    # through the balance loss (also for top-1, whose renormalized weight is constant 1)
    r.aux_loss.backward(retain_graph=True)
    assert router.gate.weight.grad is not None and router.gate.weight.grad.abs().sum() > 0
    if k == 2:  # and through the routing weights
        router.gate.weight.grad = None
        (r.weights[:, 0] * torch.arange(20.0)).sum().backward()
        assert router.gate.weight.grad.abs().sum() > 0


def test_noise_acts_in_training_only_and_temperature_always():
    torch.manual_seed(0)
    router = TokenRouter(8, 4, top_k=1, noise_std=5.0, temperature=2.0)
    x = torch.randn(64, 8)
    router.eval()
    a, b = router(x), router(x)
    assert torch.equal(a.indices, b.indices)
    probs = torch.softmax(router.gate(x) / 2.0, -1)
    torch.testing.assert_close(router(x).aux_loss, balance_loss(probs, probs.argmax(-1, keepdim=True), 4)[0])
    router.train()
    assert not torch.equal(router(x).indices, router(x).indices)  # noisy choices


def test_bad_router_arguments_are_named():
    with pytest.raises(ConfigError, match="top_k"):
        TokenRouter(8, 2, top_k=3)
    with pytest.raises(ConfigError, match="temperature"):
        TokenRouter(8, 2, temperature=0.0)
