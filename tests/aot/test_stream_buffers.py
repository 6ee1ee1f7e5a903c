"""The PyTorch path's stream buffers: operands formed without copying the streams, exact when a
state is consumed twice, and the Python buffer pool behind them on CPU."""

from __future__ import annotations

import copy

import pytest
import torch
from opzoo_aot import AOTResidual, AOTStreams, cpu_kernels
from opzoo_aot import stream_ops
from opzoo_aot.buffer_pool import BufferPool

from .test_cpu_kernels import aot_network, assert_matches_float64, forward_backward, use_path


class StackCounter:
    """Counts how ``stream_ops._stack`` formed each ``[y; streams]`` / ``[G; g_u]`` operand."""

    def __init__(self, monkeypatch):
        self.in_place = self.copied = 0
        stack = stream_ops._Slot.stack

        def counting(block, row):
            stacked = stack(block, row)
            if stacked is None:
                self.copied += 1
            else:
                self.in_place += 1
            return stacked

        monkeypatch.setattr(stream_ops._Slot, "stack", staticmethod(counting))


@pytest.mark.parametrize("batch", [1, 2])
def test_pytorch_path_forms_every_operand_in_place_in_a_network(monkeypatch, batch):
    """Forward: every pending y lands in the free row before the streams; backward: every g_u in
    the free row after the stream gradient. Branch inputs are contiguous [B, *S, D] tensors. At
    batch 1 too, where views may give the size-1 batch dimension any stride."""
    use_path(monkeypatch, "torch")
    model, x = aot_network(depth=3), torch.randn(batch, 8, 8, 3, 2)
    inputs = []
    for module in model.modules():
        if isinstance(module, AOTResidual):
            forward = module.forward

            def recording(state, branch, forward=forward):
                return forward(state, lambda u: (inputs.append(u), branch(u))[1])

            monkeypatch.setattr(module, "forward", recording)
    counter = StackCounter(monkeypatch)
    forward_backward(model, x)
    sublayers = len(inputs)
    assert sublayers >= 3 and all(u.is_contiguous() for u in inputs)
    # a pending update in every sub-layer but the first and in the readout; as many g_u rows back
    assert counter.in_place == 2 * sublayers and counter.copied == 0


class TwoConsumers(torch.nn.Module):
    """One AOT state consumed by two sub-layers: its pending row and its stream gradient each have
    two users, so the second consumer and the summed gradient take the copying path."""

    def __init__(self, dim=16, n=4):
        super().__init__()
        self.streams = AOTStreams(dim, n)
        self.sub = torch.nn.ModuleList(torch.nn.ModuleDict({"residual": AOTResidual(dim, index=i, n=n)})
                                       for i in range(3))
        self.mixer = torch.nn.Linear(dim, dim)

    def forward(self, x):
        branch = lambda u: torch.tanh(self.mixer(u))  # noqa: E731
        first, second, third = (m["residual"] for m in self.sub)
        state = first(self.streams.expand(x), branch)
        return self.streams.collapse(second(state, branch)) + 2 * self.streams.collapse(third(state, branch))


def test_a_state_consumed_twice_matches_float64(monkeypatch):
    use_path(monkeypatch, "torch")
    torch.manual_seed(0)
    model = TwoConsumers()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".residual" in name:
                p.add_(0.2 * torch.randn(p.shape))
    x = torch.randn(2, 64, 32, 16)  # S·D = 32768 features per stream
    reference = forward_backward(copy.deepcopy(model).double(), x.double())
    counter = StackCounter(monkeypatch)
    result = forward_backward(model, x)
    assert counter.copied == 2 and counter.in_place >= 2  # both copying fallbacks were exercised
    assert_matches_float64(result, reference)


def test_expand_lays_the_streams_out_with_a_free_row(monkeypatch):
    use_path(monkeypatch, "torch")
    x = torch.randn(3, 5, 7, requires_grad=True)
    streams = stream_ops.expand_streams(x.reshape(3, -1), 4)
    torch.testing.assert_close(streams, x.reshape(3, 1, -1).expand(3, 4, 35))
    stacked = stream_ops._Slot.stack(streams, torch.full((3, 35), 2.0))
    assert stacked is not None and stacked.shape == (3, 5, 35)
    assert (stacked[:, 0] == 2).all() and torch.equal(stacked[:, 1:], streams)
    assert stream_ops._Slot.stack(streams, torch.zeros(3, 35)) is None  # filled once
    (streams * torch.arange(4.0).view(1, 4, 1)).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 6.0))


# ---- the Python buffer pool -----------------------------------------------------------------------
def test_pool_reuses_a_buffer_once_no_tensor_uses_it():
    pool = BufferPool(1 << 30)
    a = pool.empty(torch.float32, (2, 3, 50_000))
    assert a.shape == (2, 3, 50_000) and a.dtype == torch.float32 and a.is_contiguous() and a.data_ptr() % 64 == 0
    address = a.data_ptr()
    view = a[:, 1]
    alias = a.new_empty(0).set_(a.untyped_storage(), 0, (10,), (1,))  # shares the storage, not a view
    del a
    assert pool.cached_bytes() == 0
    assert pool.empty(torch.float32, (2, 3, 50_000)).data_ptr() != address  # still in use
    del view, alias
    assert pool.cached_bytes() == 2 * 2 * 3 * 50_000 * 4  # both buffers are free now
    b = pool.empty(torch.float32, (6, 50_000))  # the same size in another shape: the first buffer
    assert b.data_ptr() == address and pool.cached_bytes() == 2 * 3 * 50_000 * 4
    assert pool.empty(torch.bfloat16, (4, 50_000)).dtype == torch.bfloat16
    del b
    assert pool.empty_cache() > 0 and pool.cached_bytes() == 0


def test_pool_limit_falls_back_to_pytorch_allocations():
    pool = BufferPool(1_000_000)
    kept = pool.empty(torch.float32, (200_000,))  # 800 kB: kept
    extra = pool.empty(torch.float32, (200_000,))  # would pass the limit: an ordinary tensor
    del extra
    assert pool.cached_bytes() == 0
    del kept
    assert pool.cached_bytes() == 800_000
    again = pool.empty(torch.float32, (100_000, 2))
    assert pool.cached_bytes() == 0 and again.numel() == 200_000


def test_pytorch_path_buffers_come_from_the_python_pool(monkeypatch):
    use_path(monkeypatch, "torch")
    cpu_kernels.empty_cache()
    big = cpu_kernels.pooled_empty(torch.zeros(1), 4, 2, 65_536)
    del big
    assert cpu_kernels.cached_bytes() == 4 * 2 * 65_536 * 4
    assert cpu_kernels.empty_cache() == 4 * 2 * 65_536 * 4
    small = cpu_kernels.pooled_empty(torch.zeros(1), 10)  # small tensors: PyTorch's allocator
    del small
    assert cpu_kernels.cached_bytes() == 0


def test_bf16_buffers_come_from_the_python_pool_and_other_devices_bypass_it():
    """bf16 (which the C pool does not take) is pooled in Python with or without the kernels; a
    tensor on another device comes from that device's allocator."""
    cpu_kernels.empty_cache()
    big = cpu_kernels.pooled_empty(torch.zeros(1, dtype=torch.bfloat16), 2, 65_536)
    assert big.dtype == torch.bfloat16 and big.shape == (2, 65_536)
    del big
    assert cpu_kernels.cached_bytes() == 2 * 65_536 * 2
    on_meta = cpu_kernels.pooled_empty(torch.zeros(1, device="meta"), 4, 1 << 20)
    assert on_meta.device.type == "meta" and cpu_kernels.cached_bytes() == 2 * 65_536 * 2
    cpu_kernels.empty_cache()


# ---- a pending branch output: one node for the stream map's row and the carried summary -----------
def test_pending_update_gradient_into_the_stream_map_row_and_into_a_foreign_gradient(monkeypatch):
    """``y``'s gradient is the map's ``g_y`` row plus the summary's broadcast ``g_mean / S``: added in
    place into the row :class:`_MixStreams` allocated, out of place into any other incoming gradient
    (which must stay as it was)."""
    use_path(monkeypatch, "torch")
    torch.manual_seed(0)
    b, s, d, n = 2, 6, 4, 3
    y = torch.randn(b, s, d, requires_grad=True)
    streams, H, h_post, h = torch.randn(b, n, s * d), torch.rand(b, n, n), torch.rand(b, n), torch.rand(b, n)
    v = torch.randn(b, d)

    # the stream map consumes the row (its g_y row gets the summary's gradient in place); against float64
    flat, mean = stream_ops.pending_update(y, torch.float32, torch.float32)
    current, u = stream_ops.combine_streams_torch(streams, flat, H, h_post, h)
    weights = torch.linspace(-1, 1, current.numel()).view_as(current)
    ((current * weights).sum() + u.square().sum() + (mean * v).sum()).backward()
    y64 = y.detach().double().requires_grad_()
    current64 = torch.einsum("bij,bjf->bif", H.double(), streams.double()) + h_post.double()[..., None] * y64.reshape(b, 1, -1)
    u64 = (h.double()[..., None] * current64).sum(1)
    ((current64 * weights.double()).sum() + u64.square().sum() + (y64.mean(1) * v.double()).sum()).backward()
    torch.testing.assert_close(y.grad.double(), y64.grad, rtol=1e-6, atol=1e-6 * y64.grad.abs().max().item())

    # a foreign consumer: its gradient tensor is read, not written
    y.grad = None
    seen = []
    flat, mean = stream_ops.pending_update(y, torch.float32, torch.float32)
    flat.register_hook(lambda g: seen.append(g))
    w = torch.randn(b, s * d)
    ((flat * w).sum() + (mean * v).sum()).backward()
    torch.testing.assert_close(seen[0], w)
    torch.testing.assert_close(y.grad, w.view(b, s, d) + v.unsqueeze(1) / s)


def test_pending_update_keeps_a_bf16_branch_output_apart_from_float32_streams(monkeypatch):
    use_path(monkeypatch, "torch")
    y = torch.randn(2, 5, 3, dtype=torch.bfloat16, requires_grad=True)
    flat, mean = stream_ops.pending_update(y, torch.float32, torch.float32)
    assert flat.dtype == mean.dtype == torch.float32 and flat.shape == (2, 15)
    torch.testing.assert_close(mean, y.detach().float().mean(1))
    (flat.sum() + mean.sum()).backward()
    assert y.grad.dtype == torch.bfloat16
    torch.testing.assert_close(y.grad.float(), torch.full((2, 5, 3), 1 + 1 / 5), rtol=0, atol=1e-2)
