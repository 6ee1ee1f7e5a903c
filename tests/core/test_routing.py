"""opzoo.contracts.routing is generic over any Router: group-weighted aux loss, expert counts, the recorder, copies."""

import copy

import pytest
import torch
from torch import nn

import opzoo
from opzoo.contracts.routing import ExpertLoadRecorder, aux_losses, expert_counts, expert_loads, weighted_aux_loss


class FixedRouter(opzoo.Router):
    """Sends every group to expert ``target``; its 'loss' is ``scale * mean(x)`` (anything differentiable)."""

    def __init__(self, num_experts, target, group, weight, scale):
        super().__init__()
        self.num_experts, self.target, self.aux_group, self.aux_weight, self.scale = num_experts, target, group, weight, scale

    def forward(self, x):
        g = x.reshape(-1, x.shape[-1]).shape[0]
        idx = torch.full((g, 1), self.target)
        self.last_aux_loss = self.scale * x.mean()
        self.last_counts = torch.bincount(idx.view(-1), minlength=self.num_experts).float()
        return opzoo.Routing(torch.ones(g, 1), idx, self.last_aux_loss)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = FixedRouter(3, 0, "image", 0.5, 1.0)
        self.b = FixedRouter(2, 1, "token", 0.1, 2.0)
        self.c = FixedRouter(2, 0, "token", 0.3, 4.0)
        self.idle = FixedRouter(4, 0, "token", 9.0, 1.0)  # never runs

    def forward(self, x):
        self.a(x.mean(1))
        self.b(x)
        self.c(x)
        return x


def test_aux_losses_are_group_means_and_the_total_is_weighted():
    net, x = Net(), torch.full((2, 3, 5), 2.0)
    net(x)
    parts = aux_losses(net)
    assert {k: v.item() for k, v in parts.items()} == {"image": 2.0, "token": 6.0}  # token: mean(2*2, 4*2)
    assert weighted_aux_loss(net).item() == pytest.approx(0.5 * 2.0 + (0.1 * 4.0 + 0.3 * 8.0) / 2)
    counts = expert_counts(net)
    assert counts["a"].tolist() == [2, 0, 0] and counts["b"].tolist() == [0, 6] and counts["idle"].tolist() == [0] * 4
    assert expert_loads(net)["c"].tolist() == [1.0, 0.0]
    net.b.reset()
    assert aux_losses(net)["token"].item() == 8.0  # a router that did not run contributes nothing


def test_backbone_aux_loss_uses_the_weighted_groups():
    model = opzoo.load("simple-op")
    model.extra = Net()
    model.extra(torch.ones(1, 2, 3))
    assert model.aux_loss().item() == pytest.approx(0.5 + (0.1 * 2 + 0.3 * 4) / 2)


def test_recorder_sums_every_forward_and_copies_forget_the_last_forward():
    net = Net()
    with ExpertLoadRecorder(net) as rec:
        net(torch.ones(2, 3, 5))
        net(torch.ones(1, 3, 5))
    assert rec.counts["b"].tolist() == [0, 9] and rec.loads()["a"] == [1.0, 0.0, 0.0]
    assert rec.loads()["idle"] == [0.0] * 4
    net(torch.ones(1, 3, 5, requires_grad=True))
    clone = copy.deepcopy(net)  # the last forward's graph tensors are not copied
    assert clone.b.last_aux_loss is None and net.b.last_aux_loss is not None
