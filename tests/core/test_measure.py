"""opzoo benchmark's counters against hand counts: FLOPs (complex products, FFTs, grouped convolutions' backward),
bytes, the activations kept for backward, and the same counts on meta tensors."""

from __future__ import annotations

import math

import torch

from opzoo.benchmark.measure import OpCosts, Roofline, interleaved_medians, median_ratio
from opzoo.training.memory import saved_activation_bytes


def test_a_complex_product_counts_four_real_multiply_adds():
    a = torch.randn(2, 3, 5, dtype=torch.cfloat)
    w = torch.randn(3, 4, 5, dtype=torch.cfloat)
    with OpCosts() as c:
        torch.einsum("bix,iox->box", a, w)
    assert c.flops == 8 * 2 * 3 * 4 * 5
    with OpCosts() as real:
        torch.einsum("bix,iox->box", a.real, w.real)
    assert real.flops == 2 * 2 * 3 * 4 * 5


def test_fft_flops_follow_5_n_log2_n():
    x = torch.randn(4, 16, 32)
    with OpCosts() as c:
        xf = torch.fft.rfft2(x)
    # the real axis (32) at 2.5 N log2 N per transform, then the complex axis (16) on the [4, 16, 17] half spectrum
    assert c.flops == int(2.5 * x.numel() * 5 + 5 * (4 * 16 * 17) * 4)
    with OpCosts() as c:
        torch.fft.fft(xf, dim=1)
    assert c.flops == int(5 * xf.numel() * 4)
    with OpCosts() as c:
        torch.fft.irfft2(xf, s=(16, 32))
    assert c.flops == int(5 * xf.numel() * 4 + 2.5 * x.numel() * 5)


def test_a_convolutions_backward_costs_one_forward_per_gradient_grouped_or_not():
    for groups in (1, 8):
        conv = torch.nn.Conv2d(8, 16, 3, padding=1, groups=groups)
        x = torch.randn(2, 8, 10, 12, requires_grad=True)
        with OpCosts() as c:
            conv(x).sum().backward()
        forward = 2 * 2 * 10 * 12 * conv.weight.numel()
        assert c.flops == 3 * forward  # forward, grad input, grad weight
    up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)
    with OpCosts() as c:
        up(x).sum().backward()
    assert c.flops == 3 * 2 * 2 * 10 * 12 * up.weight.numel()  # a transposed one runs over its input grid


def test_bytes_views_and_the_roofline():
    x = torch.randn(64, 32)
    with OpCosts() as c:
        y = x.t()  # a view moves nothing
        z = y @ x  # [32, 64] @ [64, 32]
    assert len(c.ops) == 1
    assert c.bytes == 2 * (x.numel() * 2 + z.numel())  # bf16 sizes: two inputs and the output
    device = Roofline("test", flops_per_s=1e9, bytes_per_s=1e6)
    assert math.isclose(c.roofline_seconds(device), max(c.flops / 1e9, c.bytes / 1e6))
    assert math.isclose(c.roofline_seconds(device, extra_bytes=10**6), c.roofline_seconds(device) + 1.0)


def test_saved_activations_are_counted_once_and_without_the_parameters():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    # Linear 1 keeps x; GELU keeps its input (Linear 1's output); Linear 2 keeps GELU's output. Weights: not counted.
    assert saved_activation_bytes(lambda: net(x), net.parameters()) == 4 * (5 * 8 + 5 * 16 + 5 * 16)
    with torch.device("meta"):
        meta = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
        xm = torch.empty(5, 8)
        assert saved_activation_bytes(lambda: meta(xm), meta.parameters()) == 4 * (5 * 8 + 5 * 16 + 5 * 16)
        with OpCosts() as c:
            meta(xm).sum().backward()
    with OpCosts() as real:
        net(x).sum().backward()
    assert c.flops == real.flops > 0 and c.bytes == real.bytes


def test_attention_on_meta_keeps_what_a_cpus_attention_keeps():
    """The meta device's scaled_dot_product_attention would keep the [B, heads, L, L] matrix (its math path); the
    estimate keeps what the CPU's kernel keeps: the fused one's output and log-sum-exp, and the math path where the CPU
    takes it too (dropout, a mask that needs a gradient)."""
    import torch.nn.functional as F

    def saved(device: str, dims: int = 4, **kwargs) -> int:
        g = torch.Generator().manual_seed(0)
        shape = (2, 4, 128, 16)[4 - dims:]
        q = torch.randn(shape, generator=g).to(device).requires_grad_()
        if "attn_mask" in kwargs:
            kwargs["attn_mask"] = kwargs["attn_mask"].to(device).requires_grad_(kwargs.pop("learned", False))
        return saved_activation_bytes(lambda: F.scaled_dot_product_attention(q * 1, q * 2, q * 3, **kwargs), [q])

    mask = torch.randn(1, 4, 128, 128)
    for kwargs in ({}, {"is_causal": True}, {"attn_mask": mask}, {"attn_mask": mask, "learned": True},
                   {"dropout_p": 0.1}):
        assert saved("meta", **dict(kwargs)) == saved("cpu", **dict(kwargs)), kwargs
    assert saved("meta", dims=3) == saved("cpu", dims=3)
    assert saved("meta") < saved("meta", dropout_p=0.1)  # the fused kernel keeps no [L, L] matrix


def test_interleaved_rounds_rotate_and_ratios_pair_rounds():
    calls = []
    times = interleaved_medians({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]
    assert [len(v) for v in times.values()] == [3, 3]
    assert median_ratio([1.0, 4.0, 9.0], [1.0, 2.0, 3.0]) == 2.0
