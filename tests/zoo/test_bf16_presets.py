"""bf16 autocast training steps for every DPOT, AOT-POT, FNO and core preset at small dims (issue 16).

Each preset trains three AdamW steps from the same weights on the same batch, once in float32 and
once under ``torch.autocast(dtype=torch.bfloat16)`` (CPU autocast here, CUDA under
``OPZOO_TEST_DEVICE=cuda``): every loss and gradient must be finite, and the bf16 run must stay
close to the float32 one.

Tolerances, from bf16's unit roundoff ``u = 2^-9 ~ 2e-3``: autocast rounds the inputs of every
matmul, convolution and FFT-adjacent linear map to bf16, so each such op carries a relative error of
a few ``u`` (the float32 accumulation adds nothing comparable). Along the longest path of these
small models (patch embedding, time aggregation, a block's mixer and MLP, the head: <= 8 ops
forward, as many backward) that compounds to ~8-16 ``u`` ~ 2-3e-2 in the worst case. So the
prediction of every step must agree to 5e-2 in relative L2 norm (so must the MSE loss, whose
relative change is at most about twice that of the prediction's), and the first step's gradient
(all parameters as one vector) to cosine similarity >= 0.99, i.e. a relative error of <= ~0.14 in
its direction. Measured: 0.3-1.2e-2 for the predictions, cosine >= 0.9996. A wrong dtype path (a
float16 overflow, a bf16 reduction over thousands of terms) misses these by far.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

import opzoo

from .small_presets import all_presets, device_under_test, small_input, small_model

RTOL = 5e-2
MIN_GRAD_COSINE = 0.99
STEPS = 3
# the MoE plugin's presets run the same check in tests/moe/test_bf16.py, with the routing of the
# bf16 run held to the float32 run's choices: routing is discrete, and a bf16 rounding may
# legitimately send a token to another expert, which no smooth tolerance bounds
BF16_PRESETS = [n for n in all_presets() if opzoo.get_registry().preset(n).owner != "opzoo-moe"]


def as_real(t: torch.Tensor) -> torch.Tensor:
    """Complex tensors (FNO's spectral weights) as their real and imaginary parts."""
    return torch.view_as_real(t) if t.is_complex() else t


def train(name: str, bf16: bool, context=contextlib.nullcontext) -> tuple[list[torch.Tensor], list[float], torch.Tensor]:
    """Predictions and losses of ``STEPS`` AdamW steps, and the flattened gradient of the first step;
    the steps run inside ``context(model)``."""
    device = device_under_test()
    model = small_model(name).to(device)
    x, y = (t.to(device) for t in small_input(model))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with context(model):
        return _steps(name, model, optimizer, x, y, bf16)


def _steps(name, model, optimizer, x, y, bf16):
    device = x.device
    outputs, losses, first_grad = [], [], None
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
        # bf16 from the last matmul, or float32 where the output is de-normalized (normalize=True)
        assert out.dtype in ((torch.bfloat16, torch.float32) if bf16 else (torch.float32,)), (name, out.dtype)
        outputs.append(out.detach().float())
        loss = F.mse_loss(out.float(), y)
        loss.backward()
        grads = [as_real(p.grad).flatten().float() for p in model.parameters() if p.grad is not None]
        assert all(torch.isfinite(g).all() for g in grads), (name, "bf16" if bf16 else "float32", "gradient")
        if first_grad is None:
            first_grad = torch.cat(grads)
        losses.append(loss.item())
        optimizer.step()
    return outputs, losses, first_grad


def _cpu_bf16_depthwise_conv3d(name: str) -> bool:
    """A 3-D CNextU-Net (opzoo-well) on CPU: torch 2.15's CPU bf16 depthwise ``Conv3d`` weight gradient
    comes out wrong (30-40 % off, dominating the gradient) in the first run after a different 3-D
    convolution ran in the process, and right when repeated; the float32 path and the predictions are
    unaffected. Reproduce: the bf16 step of well-unet-classic-MHD_64, then of well-unet-convnext-MHD_64,
    twice (only ``decoder.1.blocks.*.dwconv.weight`` gradients differ)."""
    preset = opzoo.get_registry().preset(name)
    return (device_under_test().type == "cpu" and preset.backbone == "well-unet-convnext"
            and preset.args.get("spatial_dims") == 3)


def _cpu_bf16_conv3d(name: str) -> bool:
    """A 3-D U-Net (opzoo-well) on CPU: torch's CPU bf16 3-D convolution backward gives non-finite or
    wrong gradients now and then on some CPUs (seen 2026-11-24 on a 2-core AMD EPYC with torch 2.14.1:
    well-unet-classic-MHD_64 had a non-finite or orthogonal bf16 gradient in about one run in five,
    the same order passing on rerun). The Well's own ``UNetClassic`` does the same there (1 of 15 bf16
    steps non-finite), so the fault is torch's kernel, not opzoo's network; the float32 path, the
    predictions and the GPU run are unaffected, and are still checked on GPU (``OPZOO_TEST_DEVICE=cuda``)."""
    preset = opzoo.get_registry().preset(name)
    return (device_under_test().type == "cpu" and preset.backbone.startswith("well-unet")
            and preset.args.get("spatial_dims") == 3)


@pytest.mark.slow
@pytest.mark.parametrize("name", BF16_PRESETS)
def test_bf16_autocast_training_steps_are_finite_and_close_to_float32(name):
    if _cpu_bf16_depthwise_conv3d(name):
        pytest.skip("torch CPU bf16 depthwise Conv3d weight gradient depends on what ran before; see "
                    "_cpu_bf16_depthwise_conv3d")
    if _cpu_bf16_conv3d(name):
        pytest.skip("torch CPU bf16 Conv3d backward is intermittently non-finite on some CPUs (The Well's own "
                    "UNetClassic too); see _cpu_bf16_conv3d")
    assert_bf16_close_to_float32(name, train(name, bf16=False), train(name, bf16=True))


def assert_bf16_close_to_float32(name, float32_run, bf16_run):
    """The checks above on the results of :func:`train` in float32 and under bf16 autocast."""
    (want_outputs, want_losses, want_grad), (got_outputs, got_losses, got_grad) = float32_run, bf16_run
    assert all(map(torch.isfinite, map(torch.tensor, got_losses))), (name, got_losses)
    for step in range(STEPS):
        got, want = got_outputs[step], want_outputs[step]
        assert torch.isfinite(got).all(), (name, step)
        assert ((got - want).norm() / want.norm()).item() <= RTOL, (name, step, "prediction")
        assert abs(got_losses[step] - want_losses[step]) <= RTOL * abs(want_losses[step]), (name, step, "loss")
    cosine = F.cosine_similarity(got_grad, want_grad, dim=0).item()
    assert cosine >= MIN_GRAD_COSINE, (name, cosine)


def test_bf16_autocast_runs_in_bf16():
    """The check above is not vacuous: under autocast a POT's latent really is bf16 (the matmuls
    run in bf16), and its output differs from float32 by more than float32 rounding."""
    model = small_model("dpot-ti").to(device_under_test())
    x, _ = (t.to(device_under_test()) for t in small_input(model))
    seen = []
    hook = model.blocks[0].mlp.fc1.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    with torch.no_grad():
        want = model(x)
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            got = model(x)
    hook.remove()
    assert seen == [torch.float32, torch.bfloat16]
    assert 1e-4 < ((got.float() - want).norm() / want.norm()).item() < RTOL
