"""The POT embedding with the time aggregation folded into the patch embedding (issue 16).

``PotBackbone.embed_aggregated(x)`` must be ``time_agg(embed(x))`` (the per-step latent, then
DPOT's time aggregation), values and gradients, and ``fold_time_weights`` must be the two
products it documents, with its hand-written backward equal to autograd's.
"""

from __future__ import annotations

import pytest
import torch

import opzoo
from opzoo.layers.time_agg import fold_time_weights


def small_pot(spatial_dims: int, time_agg: str) -> opzoo.Backbone:
    torch.manual_seed(0)
    return opzoo.load("dpot-ti", width=16, depth=1, spatial_dims=spatial_dims, img_size=[8] * spatial_dims,
                      patch_size=4, out_layer_dim=4, time_agg=time_agg,
                      mixer="fourier-attention", mixer_args={"n_blocks": 2, "modes": 2}).double()


def per_step_embedding(model, x: torch.Tensor) -> torch.Tensor:
    """``[B, *S, T, C] -> [B, *S/p, T, D]``: each time step embedded on its own (grid channels, patch embedding,
    positions), the direct definition that ``PotBackbone.embed_aggregated`` folds with the time aggregation."""
    from opzoo.layers.grid import append_grid

    d, b, t = model.config.spatial_dims, x.shape[0], x.shape[-2]
    x = append_grid(x).movedim(-2, 1).movedim(-1, 2).flatten(0, 1)  # [(B T), C+d+1, *S]
    z = model.patch_embed(x)                                         # [(B T), D, *S/p]
    z = z + model.position_embedding(tuple(z.shape[2:]))
    return z.unflatten(0, (b, t)).movedim(2, -1).movedim(1, d + 1)   # [B, *S/p, T, D]


@pytest.mark.parametrize("spatial_dims", [2, 3])
@pytest.mark.parametrize("time_agg", ["exp_mlp", "mlp"])
def test_embed_aggregated_is_time_aggregation_of_the_per_step_embedding(spatial_dims, time_agg):
    model = small_pot(spatial_dims, time_agg)
    # 16 = 2 x the pos-embed grid: the interpolated position embedding takes part as well
    x = torch.randn(2, *[16] * spatial_dims, 10, 4, dtype=torch.float64)
    params = [p for p in model.parameters()]

    def grads(fn):
        out = fn()
        weight = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(1))
        return out, torch.autograd.grad((out * weight).sum(), params, allow_unused=True)

    got, got_grads = grads(lambda: model.embed_aggregated(x))
    want, want_grads = grads(lambda: model.time_agg(per_step_embedding(model, x)))
    assert got.shape == (2, *[4] * spatial_dims, 16)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for p, g, w in zip(params, got_grads, want_grads):
        if w is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_fold_time_weights_values_and_gradients():
    g = torch.Generator().manual_seed(0)
    proj = torch.randn(5, 7, dtype=torch.float64, generator=g).requires_grad_()
    cos = torch.randn(3, 7, dtype=torch.float64, generator=g).requires_grad_()
    w = torch.randn(3, 7, 7, dtype=torch.float64, generator=g).requires_grad_()
    mixed, summed = fold_time_weights(proj, cos, w)
    for t in range(3):
        torch.testing.assert_close(mixed[t], proj @ torch.diag(cos[t]) @ w[t])
    torch.testing.assert_close(summed, sum(torch.diag(cos[t]) @ w[t] for t in range(3)))
    assert torch.autograd.gradcheck(fold_time_weights, (proj, cos, w))
    # only one of the two outputs used: the other's gradient is absent, not garbage
    assert torch.autograd.gradcheck(lambda *a: fold_time_weights(*a)[0], (proj, cos, w))
    assert torch.autograd.gradcheck(lambda *a: fold_time_weights(*a)[1], (proj, cos, w))
