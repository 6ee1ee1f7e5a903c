"""bf16 autocast training steps for the MoE presets, with the routing held equal (issue 16).

The same check as tests/core/test_bf16_presets.py (three AdamW steps, finite losses and gradients,
predictions within 5e-2 relative L2 of float32, first gradient at cosine >= 0.99, tolerances
derived there). Routing is discrete: under bf16 a token whose two best experts are closer than
bf16's rounding of its features may legitimately go to the other one, and then no smooth
tolerance bounds the difference (and which tokens do depends on the CPU's bf16 matmul). So the
bf16 run makes every router choose the experts the float32 run chose at the same call, while
everything else, the routers' probabilities and weights included, is computed under autocast.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import opzoo
from opzoo_moe.routers import TopKRouter

from ..zoo.small_presets import all_presets
from ..zoo.test_bf16_presets import assert_bf16_close_to_float32, train

MOE_PRESETS = [n for n in all_presets() if opzoo.get_registry().preset(n).owner == "opzoo-moe"]


class HeldRouting:
    """``record(model)`` keeps every router call's chosen experts, in call order;
    ``replay(model)`` makes the routers choose them again (their probabilities computed afresh)."""

    def __init__(self):
        self.choices: list[torch.Tensor] = []
        self.replayed = 0
        self.differed = 0

    @contextlib.contextmanager
    def _patched(self, model, forward):
        routers = [m for m in model.modules() if isinstance(m, TopKRouter)]
        assert routers, "a MoE preset without routers"
        for router in routers:
            router.forward = forward.__get__(router)
        try:
            yield
        finally:
            for router in routers:
                del router.forward

    def record(self, model):
        held = self

        def forward(router, x):
            routing = TopKRouter.forward(router, x)
            held.choices.append(routing.indices.detach().clone())
            return routing

        return self._patched(model, forward)

    def replay(self, model):
        held = self

        def forward(router, x):
            probs = router.probabilities(x)
            chosen = held.choices[held.replayed]
            held.replayed += 1
            assert chosen.shape == (probs.shape[0], router.top_k)
            held.differed += int((probs.topk(router.top_k, dim=-1).indices != chosen).any())
            return router.route(probs, chosen)

        return self._patched(model, forward)


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_bf16_autocast_training_steps_with_held_routing(name):
    held = HeldRouting()
    float32_run = train(name, bf16=False, context=held.record)
    bf16_run = train(name, bf16=True, context=held.replay)
    assert held.replayed == len(held.choices) > 0  # every router call of the bf16 run was held
    assert_bf16_close_to_float32(name, float32_run, bf16_run)


def test_held_routing_replays_the_recorded_choices():
    """The replay routes exactly as recorded, even against the router's own preference."""
    torch.manual_seed(0)
    router = TopKRouter(8, num_experts=4, top_k=2)
    model = torch.nn.Sequential(router)
    x = torch.randn(5, 8)
    held = HeldRouting()
    with held.record(model):
        want = router(x)
    held.choices[0] = held.choices[0].flip(-1).roll(1, dims=0)  # other experts than the top 2
    with held.replay(model):
        got = router(x)
    assert torch.equal(got.indices, held.choices[0]) and held.differed == 1
    probs = router.probabilities(x).gather(-1, held.choices[0])
    torch.testing.assert_close(got.weights, probs / probs.sum(-1, keepdim=True))
    assert not torch.equal(got.indices, want.indices)
