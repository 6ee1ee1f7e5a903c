"""The stream operations of an AOT sub-layer: one map for the update and the aggregation, and the
pooled summary carried through the update.

``streams [B, n, F]`` (``F = S·D``) with an update pending (``y [B, F]``, ``H [B, n, n]``,
``h_post [B, n]``) and aggregation weights ``h [B, n]``::

    current = H streams + h_post ⊗ y          (streams itself when H is None; then y is None)
    u       = Σ_i h[:, i] current[:, i]

``combine_streams`` returns ``(current, u)``: applying the last sub-layer's update and aggregating
for the next branch is one pass over the streams, because ``u = (H^T h)·streams + (h·h_post) y``
needs no pass over ``current``. The same map with ``h = softmax(g)`` is the gated readout. On CPU
(float32/float64, ``n <= 16``) a C kernel (csrc/aot_kernels_impl.h) computes both in one pass and
the whole backward in one more; elsewhere the equations run as PyTorch ops.

The PyTorch path (CUDA, bf16, machines without a compiler) writes the map as one small matrix per
sample, ``[current; u] = M [y; streams]`` with ``M = [[h_post, H], [h·h_post, (H^T h)^T]]``, so the
forward is one batched GEMM over the streams and the backward one more (``g_Z = M^T g_out``) plus
one float64-accurate reduction (``g_M = g_out Z^T``), from which the coefficients' gradients follow
by hand: one autograd node per map. The operands ``[y; streams]`` and
``[G; g_u]`` are formed without copying the streams: every stream buffer is allocated ``[rows, B, F]``
with a free row beside the streams (or their gradient), and the pending row is written there
(:class:`_Slot`). About 34 stream-sized passes per sub-layer, against ~75 for the same equations
as separate PyTorch ops; on CPU the buffers come from a pool (``cpu_kernels.pooled_empty``).
Under ``torch.compile`` (the CUDA default) the same products are traced on the rows as they are
(:func:`_mix_rows`, :func:`_row_dots`), which inductor fuses into single passes.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import cpu_kernels

__all__ = ["combine_streams", "combine_streams_torch", "expand_streams", "carry_pooled", "carry_mean",
           "pending_update", "pool_streams", "stream_dots"]


DOT_CHUNK = 1024  # features per float32 partial dot product (a few BLAS register blocks)


def stream_dots(a: Tensor, b: Tensor) -> Tensor:
    """``a [B, p, F], b [B, q, F] -> [B, p, q]`` float64: ``Σ_f a[:, i, f] b[:, j, f]``, accurate to
    float32 rounding of the products, the way the C kernels reduce.

    Why not ``a @ b^T``: a float32 GEMM over ``F`` (65536 and more) accumulates each entry with an
    error of a few 1e-6 of ``|a||b|``. The gradients of ``H_res``, ``h_pre`` and the readout weights
    are such dot products with the streams, and when the streams are close to one another (the
    usual state: they start as copies and a residual keeps them close) every entry of a row is
    nearly the same large number. The Sinkhorn backward and the simplex/softmax backward remove that
    common part exactly (rows of ``H_res`` and the weights sum to 1), so what remains, the whole
    gradient, is 100-1000x smaller than the entries and inherits their absolute error: ~1e-3
    relative (issue 11). Here each chunk of :data:`DOT_CHUNK` features is one small float32 GEMM
    (one strided batched call per sample, no copies) and the chunks are summed in float64.
    """
    if torch.compiler.is_compiling():
        return _row_dots(a.unbind(1), b.unbind(1))
    a, b = (t if t.stride(-1) == 1 else t.contiguous() for t in (a, b))
    f = a.shape[-1]
    chunks, main = f // DOT_CHUNK, (f // DOT_CHUNK) * DOT_CHUNK
    bs, p, q = a.shape[0], a.shape[1], b.shape[1]
    if chunks > 1 and main == f and a.stride(0) == b.stride(0) == f:
        # the samples of a stream buffer [R, B, F] lie end to end: one call over [B·chunks, p, K]
        ak = a.unflatten(-1, (chunks, DOT_CHUNK)).transpose(1, 2).flatten(0, 1)
        bk = b.unflatten(-1, (chunks, DOT_CHUNK)).permute(0, 2, 3, 1).flatten(0, 1)
        return torch.bmm(ak, bk).view(bs, chunks, p, q).sum(1, dtype=torch.float64)
    out = torch.zeros(bs, p, q, dtype=torch.float64, device=a.device)
    if chunks > 1:
        for k in range(a.shape[0]):  # per sample: [chunks, p, K] @ [chunks, K, q], strided views
            ak = a[k, :, :main].unflatten(-1, (chunks, DOT_CHUNK)).transpose(0, 1)
            bk = b[k, :, :main].unflatten(-1, (chunks, DOT_CHUNK)).permute(1, 2, 0)
            out[k] = torch.bmm(ak, bk).sum(0, dtype=torch.float64)
        if main < f:
            out += torch.bmm(a[:, :, main:], b[:, :, main:].transpose(1, 2)).double()
    else:
        out += torch.bmm(a, b.transpose(1, 2)).double()
    return out


def _row_dots(a_rows, b_rows) -> Tensor:
    """``p`` rows and ``q`` rows ``[B, F]`` -> ``[B, p, q]`` float64, ``Σ_f a_i b_j``: the form
    torch.compile traces. A float32 product is exact in float64, so the only rounding is float64
    summation; the ``p·q`` reductions share their inputs, and inductor fuses them into passes that
    read each row once (one broadcast ``[B, p, q, F]`` product would read every row ``p`` or ``q`` times)."""
    return torch.stack([torch.stack([(a.double() * b.double()).sum(-1) for b in b_rows], dim=-1) for a in a_rows],
                       dim=1)


def _mix_rows(M: Tensor, rows, dtype: torch.dtype) -> Tensor:
    """``M [B, r, k]`` and ``k`` rows ``[B, F]`` -> ``[B, r, F]`` in ``dtype``: ``out[:, i] =
    Σ_j M[:, i, j] rows[j]``, accumulated in at least float32. The form torch.compile traces:
    broadcast products that inductor fuses into one pass reading every row once and writing every
    output row, with no concatenated operand (``[y; streams]``, ``[G; g_u]``) and no GEMM with ``K = k``."""
    compute = torch.promote_types(dtype, torch.float32)
    M = M.to(compute)
    outputs = []
    for i in range(M.shape[1]):
        acc = M[:, i, :1] * rows[0].to(compute)
        for j in range(1, len(rows)):
            acc = acc + M[:, i, j:j + 1] * rows[j].to(compute)
        outputs.append(acc.to(dtype))
    return torch.stack(outputs, dim=1)


SLOT_ATTRIBUTE = "_opzoo_aot_slot"
OWNED_GRADIENT = "_opzoo_aot_owned_gradient"  # marks a gradient row that only its consumer holds


def _rows(buffer: Tensor, first: int, count: int | None) -> Tensor:
    """Rows ``first .. first+count-1`` of a stream buffer ``[R, B, F]`` as ``[B, count, F]`` (``[B, F]``,
    contiguous, when ``count`` is None): the same memory, but a tensor of its own rather than a view,
    so writing one row of a buffer does not count as modifying the others (autograd's saved-tensor
    check follows a base tensor and all its views together)."""
    r, b, f = buffer.shape
    size, stride = ((b, f), (f, 1)) if count is None else ((b, count, f), (f, b * f, 1))
    return buffer.new_empty(0).set_(buffer.untyped_storage(), buffer.storage_offset() + first * b * f, size, stride)


def _layout(t: Tensor) -> tuple:
    """Where ``t``'s elements are: its address, shape and the strides of its dimensions longer than 1
    (a dimension of size 1 has no meaningful stride: ``reshape`` and ``view`` may give it any)."""
    return t.data_ptr(), tuple(t.shape), tuple(st for st, size in zip(t.stride(), t.shape) if size > 1)


class _Slot:
    """A free row of a stream buffer next to a block of ``n`` rows that some tensor holds: the row
    before the streams (for the next sub-layer's pending ``y``) or after a stream gradient (for the
    previous sub-layer's ``g_u``). Filling it makes ``[row; block]`` or ``[block; row]`` one
    ``[B, n+1, F]`` operand without copying the block. Attached to the block's tensor, and found
    from any view of it through ``_base``."""

    __slots__ = ("block", "row", "stacked", "filled")

    def __init__(self, buffer: Tensor, block_first: int, n: int, row: int):
        _, b, f = buffer.shape
        self.block = _layout(_rows(buffer, block_first, n))
        self.row = _rows(buffer, row, None)
        self.stacked = _rows(buffer, min(row, block_first), n + 1)
        self.filled = False

    @staticmethod
    def attach(tensor: Tensor, slot: "_Slot") -> Tensor:
        setattr(tensor, SLOT_ATTRIBUTE, slot)
        return tensor

    @staticmethod
    def stack(block: Tensor, row: Tensor) -> Tensor | None:
        """The stacked operand with ``row`` written into the slot next to ``block``, or None when
        ``block`` has no free slot: not laid out by this module, or already filled (a state consumed
        twice; the first consumer's saved operand must stay as it is)."""
        owner = block if block._base is None else block._base
        slot = getattr(owner, SLOT_ATTRIBUTE, None)
        if slot is None or slot.filled or _layout(block) != slot.block:
            return None
        slot.row.copy_(row)
        slot.filled = True
        return slot.stacked


def _alias(t: Tensor) -> Tensor:
    """``t``'s memory as a tensor of its own (not a view), keeping the free row beside it."""
    alias = t.new_empty(0).set_(t.untyped_storage(), t.storage_offset(), t.shape, t.stride())
    slot = getattr(t if t._base is None else t._base, SLOT_ATTRIBUTE, None)
    return alias if slot is None else _Slot.attach(alias, slot)


def _stack(block: Tensor, row: Tensor, row_first: bool) -> Tensor:
    """``[row; block]`` (``row_first``) or ``[block; row]`` as one ``[B, n+1, F]`` tensor."""
    stacked = None if torch.compiler.is_compiling() else _Slot.stack(block, row)
    if stacked is None:
        parts = [row.unsqueeze(1), block] if row_first else [block, row.unsqueeze(1)]
        stacked = torch.cat(parts, dim=1)
    return stacked


def _stream_buffer(like: Tensor, b: int, rows: int, f: int) -> Tensor:
    """An uninitialized ``[rows, B, F]`` buffer (pooled on CPU): row-major by stream, so that one
    row of all samples (a branch input, a branch output's gradient) is a contiguous ``[B, F]``."""
    return cpu_kernels.pooled_empty(like, rows, b, f)


class _MixStreams(torch.autograd.Function):
    """``out = M Z`` per sample: ``Z [B, k, F]`` the inputs (``[y; streams]``, or the streams when
    no update is pending), ``M [B, r, k]`` the mixing matrix of ``H, h_post, h``
    (:func:`_mixing_matrix`), the outputs ``[current; u]`` (the first ``n_current`` rows are the
    updated streams, a last row the branch input). One GEMM each way::

        g_Z = M^T g_out            g_M = g_out Z^T   (stream_dots: float64 from float32 chunks)

    and ``g_M`` to the coefficients' gradients by hand (:func:`_mixing_matrix_backward`), so a
    sub-layer's map is one autograd node however ``M`` is made of them.

    Outputs live in buffers with a free row beside them (:class:`_Slot`): before the updated
    streams for the next sub-layer's ``y``, after the stream gradient for the previous sub-layer's
    ``g_u``, so each side's operand is formed by writing one row. Under ``torch.compile`` (the
    CUDA default) the same products are written on the rows as they are (:func:`_mix_rows`,
    :func:`_row_dots`), which inductor fuses into one pass forward and one or two backward: no
    stacked operand, no GEMM with ``K = n + 1``.
    """

    @staticmethod
    def forward(ctx, streams, y, H, h_post, h, n_current, identity):
        b, n, f = streams.shape
        coefficients = [None if t is None else t.double() for t in (H, h_post, h)]
        M = _mixing_matrix(*coefficients, y is not None, n_current > 0)
        r = M.shape[1]
        current = u = None
        compiling = torch.compiler.is_compiling()
        # the operands: [y; streams] stacked in place (eager), or the streams and y as they are
        Z = streams if y is None or compiling else _stack(streams, y, row_first=True)
        y_saved = y if compiling and y is not None else streams.new_empty(0)
        if compiling:
            # every output a tensor (an empty one for a missing output): dynamo's rewritten backward
            # takes every incoming gradient as a tensor
            out = _mix_rows(M, _operand_rows(streams, y), streams.dtype)  # [B, r, F]
            current = out[:, :n_current] if n_current else streams.new_empty(0)
            u = out[:, n_current] if r > n_current else streams.new_empty(0)
        elif identity:  # current is the streams: the same memory, an output of its own
            current = _alias(streams)
            buffer = _stream_buffer(streams, b, 1, f)
            torch.bmm(M[:, n:].to(Z.dtype), Z, out=_rows(buffer, 0, 1))
            u = _rows(buffer, 0, None)
        else:
            lead = 1 if n_current else 0  # the free row for the next sub-layer's y
            buffer = _stream_buffer(streams, b, lead + r, f)
            torch.bmm(M.to(Z.dtype), Z, out=_rows(buffer, lead, r))
            if n_current:
                current = _Slot.attach(_rows(buffer, 1, n_current), _Slot(buffer, 1, n_current, row=0))
            if r > n_current:
                u = _rows(buffer, lead + n_current, None)
        ctx.save_for_backward(Z, y_saved, M, *[torch.empty(0) if t is None else t for t in coefficients])
        ctx.dtypes = [None if t is None else t.dtype for t in (H, h_post, h)]  # None: not given
        ctx.n, ctx.n_current, ctx.has_y = n, n_current, y is not None
        return current, u

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_current, grad_u):
        Z, y, M, *coefficients = ctx.saved_tensors
        H, h_post, h = (None if dtype is None else t for t, dtype in zip(coefficients, ctx.dtypes))
        n, n_current = ctx.n, ctx.n_current
        r, k = M.shape[1:]
        if torch.compiler.is_compiling():
            return _MixStreams._traced_backward(ctx, Z, y if ctx.has_y else None, M, (H, h_post, h), grad_current,
                                                grad_u)
        b, _, f = Z.shape
        if not n_current:
            g_out = grad_u.unsqueeze(1)
        elif r == n_current:
            g_out = grad_current
        else:
            g_out = _stack(grad_current, grad_u, row_first=False)
        if g_out.stride(-1) != 1:
            g_out = g_out.contiguous()
        g_streams = g_y = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            # rows [g_y; g_streams] and a free row after them for the previous sub-layer's g_u
            buffer = _stream_buffer(g_out, b, k + 1, f)
            torch.bmm(M.transpose(1, 2).to(g_out.dtype), g_out, out=_rows(buffer, 0, k))
            g_streams = _Slot.attach(_rows(buffer, k - n, n), _Slot(buffer, k - n, n, row=k))
            if k > n:  # its own row, so the carried summary's gradient may be added in place
                g_y = _rows(buffer, 0, None)
                setattr(g_y, OWNED_GRADIENT, True)
        g_M = stream_dots(g_out, Z) if any(ctx.needs_input_grad[2:5]) else None
        return _MixStreams._coefficient_grads(ctx, g_M, H, h_post, h, g_streams, g_y)

    @staticmethod
    def _traced_backward(ctx, streams, y, M, coefficients, grad_current, grad_u):
        """The backward as torch.compile traces it: the same products on the rows as they are,
        ``g_Z = M^T g_out`` as one fused pass and ``g_M`` as fused float64 reductions."""
        n, n_current, r = ctx.n, ctx.n_current, M.shape[1]
        g_rows = (list(grad_current.unbind(1)) if n_current else []) + ([grad_u] if r > n_current else [])
        g_streams = g_y = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            g_Z = _mix_rows(M.transpose(1, 2), g_rows, streams.dtype)
            g_streams, g_y = g_Z[:, -n:], (g_Z[:, 0] if y is not None else None)
        g_M = _row_dots(g_rows, _operand_rows(streams, y)) if any(ctx.needs_input_grad[2:5]) else None
        return _MixStreams._coefficient_grads(ctx, g_M, *coefficients, g_streams, g_y)

    @staticmethod
    def _coefficient_grads(ctx, g_M, H, h_post, h, g_streams, g_y):
        grads = [None, None, None]
        if g_M is not None:
            grads = _mixing_matrix_backward(g_M, H, h_post, h, ctx.has_y, ctx.n_current)
        grads = [None if g is None or not need else g.to(ctx.dtypes[i])
                 for i, (g, need) in enumerate(zip(grads, ctx.needs_input_grad[2:5]))]
        return g_streams, g_y, *grads, None, None


def _operand_rows(streams: Tensor, y: Tensor | None) -> list[Tensor]:
    """The rows ``[y; X_0 .. X_{n-1}]`` (``[B, F]`` each) of the map's operand, without stacking them."""
    return ([] if y is None else [y]) + list(streams.unbind(1))


def _mixing_matrix(H: Tensor | None, h_post: Tensor | None, h: Tensor | None, has_y: bool,
                   need_current: bool) -> Tensor:
    """``M [B, r, k]`` (columns ``[y, X_0 .. X_{n-1}]``, or the streams alone without ``y``; rows
    the updated streams when ``need_current``, then ``u`` when ``h`` is given)::

        current = [h_post | H] [y; X]          u = [h·h_post | (H^T h)^T] [y; X]

    In the coefficients' dtype (float64 in :class:`_MixStreams`, so that the small products of the
    backward add no rounding before the one to the parameters' dtype)."""
    rows = []
    if need_current:
        rows.append(torch.cat([h_post.unsqueeze(-1), H], dim=2) if has_y else H)
    if h is not None:
        h_row = h.unsqueeze(1)  # [B, 1, n]
        a = h_row if H is None else torch.bmm(h_row, H)  # (H^T h)^T
        if has_y:
            a = torch.cat([torch.bmm(h_row, h_post.unsqueeze(-1)), a], dim=2)  # [h·h_post | a]
        rows.append(a)
    return rows[0] if len(rows) == 1 else torch.cat(rows, dim=1)


def _mixing_matrix_backward(g_M: Tensor, H: Tensor | None, h_post: Tensor | None, h: Tensor | None,
                            has_y: bool, n_current: int) -> list[Tensor | None]:
    """``g_M [B, r, k] -> [g_H, g_h_post, g_h]`` of :func:`_mixing_matrix` (None where the input is
    None), in ``g_M``'s dtype::

        g_H = g_M[cur, X] + h ⊗ g_a        g_h = H g_a + h_post g_c        g_h_post = g_M[cur, y] + h g_c

    with ``g_a = g_M[u, X]`` (the row ``(H^T h)^T``) and ``g_c = g_M[u, y]`` (the entry ``h·h_post``)."""
    first = 1 if has_y else 0  # the first stream column
    g_H = g_h_post = g_h = None
    if n_current:
        g_H = g_M[:, :n_current, first:]
        if has_y:
            g_h_post = g_M[:, :n_current, 0]
    if h is not None:
        g_a = g_M[:, n_current, first:]  # [B, n]
        if H is None:
            g_h = g_a
        else:
            outer = h.unsqueeze(-1) * g_a.unsqueeze(1)
            g_H = outer if g_H is None else g_H + outer
            g_h = torch.bmm(H, g_a.unsqueeze(-1)).squeeze(-1)
        if has_y:
            g_c = g_M[:, n_current, :1]  # [B, 1]
            g_h = g_h + h_post * g_c
            g_h_post = h * g_c if g_h_post is None else g_h_post + h * g_c
    return [g_H, g_h_post, g_h]


def combine_streams_torch(streams: Tensor, y: Tensor | None, H: Tensor | None, h_post: Tensor | None,
                          h: Tensor | None, need_current: bool = True) -> tuple[Tensor | None, Tensor | None]:
    """The map in PyTorch ops (:class:`_MixStreams`): one ``[r, k]`` mixing matrix per sample, one
    GEMM each way over the streams, accurate reductions in the backward."""
    if H is None and y is not None:
        raise ValueError("combine_streams: y without H (a pending update needs its mixing matrix)")
    if H is None and h is None:
        return (streams if need_current else None), None
    b, n = streams.shape[:2]
    # the identity map with an aggregation (a sub-layer without a pending update): the streams are
    # passed through as an output of the same node, so their gradient arrives there with g_u and
    # autograd does not sum two stream-sized gradients
    identity = H is None and need_current and not torch.compiler.is_compiling()
    if identity:
        H = torch.eye(n, dtype=h.dtype, device=h.device).expand(b, n, n)
    n_current = n if need_current and H is not None else 0
    if not n_current and H is not None and h is None:
        return None, None  # neither output asked for
    current, u = _MixStreams.apply(streams, y, H, h_post if y is not None else None, h, n_current, identity)
    if H is None and need_current and not identity:
        current = streams  # the map is the identity: the caller's tensor, with its autograd history
    return (current if need_current else None), (u if h is not None else None)


def expand_streams(x: Tensor, n: int) -> Tensor:
    """``x [B, F] -> [B, n, F]``: n copies, differentiable. For the PyTorch path they are laid out
    with a free row before them (:class:`_MixStreams` with ``M = 1``), so the first pending update
    needs no copy of the streams either; the C kernels and torch.compile take a contiguous tensor."""
    b, f = x.shape
    if torch.compiler.is_compiling() or cpu_kernels.stream_kernel(x.unsqueeze(1), ()) is not None:
        return x.unsqueeze(1).expand(b, n, f).contiguous()
    ones = torch.ones(b, n, 1, dtype=torch.float64, device=x.device)  # H: [B, n, 1], every row x
    return _MixStreams.apply(x.unsqueeze(1), None, ones, None, None, n, False)[0]


def _contiguous(*tensors):
    return [None if t is None else t.contiguous() for t in tensors]


def run_streams(kernel, streams: Tensor, y: Tensor | None, H: Tensor | None, h_post: Tensor | None,
                h: Tensor | None, need_current: bool) -> tuple[Tensor | None, Tensor | None]:
    """``aot_streams_forward`` on contiguous inputs: ``(current or None, u or None)``."""
    b, n, f = streams.shape
    current = cpu_kernels.pooled_empty(streams, b, n, f) if H is not None and need_current else None
    u = cpu_kernels.pooled_empty(streams, b, f) if h is not None else None
    p = cpu_kernels.ptr
    status = kernel.forward(b, n, f, p(streams), p(y), p(H), p(h_post), p(h), p(current), p(u), torch.get_num_threads())
    cpu_kernels.check_status(status, "stream")
    return current, u


def run_streams_backward(kernel, streams: Tensor, y: Tensor | None, H: Tensor | None, h_post: Tensor | None,
                         h: Tensor | None, grad_current: Tensor | None, grad_u: Tensor | None,
                         need: tuple[bool, ...]) -> tuple[Tensor | None, ...]:
    """``aot_streams_backward``: ``(g_streams, g_y, g_H, g_h_post, g_h)``, each None unless ``need``
    asks for it and the input exists."""
    b, n, f = streams.shape
    new = streams.new_empty
    # contiguous copies stay referenced until the kernel returns
    grad_current, grad_u = _contiguous(grad_current, grad_u)
    g_streams = cpu_kernels.pooled_empty(streams, b, n, f) if need[0] else None
    g_y = cpu_kernels.pooled_empty(streams, b, f) if need[1] and y is not None else None
    g_H = new(b, n, n) if need[2] and H is not None else None
    g_h_post = new(b, n) if need[3] and h_post is not None else None
    g_h = new(b, n) if need[4] and h is not None else None
    p = cpu_kernels.ptr
    status = kernel.backward(b, n, f, p(streams), p(y), p(H), p(h_post), p(h), p(grad_current), p(grad_u),
                             p(g_streams), p(g_y), p(g_H), p(g_h_post), p(g_h), torch.get_num_threads())
    cpu_kernels.check_status(status, "stream")
    if g_h_post is not None and y is None:
        g_h_post.zero_()  # h_post scales y, which was None
    return g_streams, g_y, g_H, g_h_post, g_h


class _CombineStreamsCPU(torch.autograd.Function):
    """The map through ``aot_streams_forward/backward`` (csrc/aot_kernels_impl.h)."""

    @staticmethod
    def forward(ctx, streams, y, H, h_post, h, need_current, kernel):
        inputs = _contiguous(streams, y, H, h_post, h)
        ctx.save_for_backward(*inputs)
        ctx.kernel = kernel
        return run_streams(kernel, *inputs, need_current)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_current, grad_u):
        grads = run_streams_backward(ctx.kernel, *ctx.saved_tensors, grad_current, grad_u, ctx.needs_input_grad)
        return (*grads, None, None)


def combine_streams(streams: Tensor, y: Tensor | None = None, H: Tensor | None = None,
                    h_post: Tensor | None = None, h: Tensor | None = None,
                    need_current: bool = True) -> tuple[Tensor | None, Tensor | None]:
    """``(current [B, n, F] or None, u [B, F] or None)``; all inputs in one dtype (see the module doc)."""
    if H is None and y is not None:
        raise ValueError("combine_streams: y without H (a pending update needs its mixing matrix)")
    kernel = cpu_kernels.stream_kernel(streams, (y, H, h_post, h))
    if kernel is None:
        return combine_streams_torch(streams, y, H, h_post, h, need_current)
    current, u = _CombineStreamsCPU.apply(streams, y, H, h_post, h, need_current, kernel)
    return (streams if H is None and need_current else current), u


class _MeanOverPositions(torch.autograd.Function):
    """``y [B, S, D] -> [B, D]``: the mean over positions in ``dtype``. Its gradient is returned as
    a broadcast view (``g / S`` expanded over ``S``), not a materialized ``[B, S, D]`` tensor: it
    is added to the branch output's other gradient anyway, and that sum reads it for free."""

    @staticmethod
    def forward(ctx, y, dtype):
        ctx.y_shape, ctx.y_dtype = y.shape, y.dtype
        return y.mean(dim=1, dtype=dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        b, s, d = ctx.y_shape
        return (grad / s).to(ctx.y_dtype).unsqueeze(1).expand(b, s, d), None


class _PendingUpdate(torch.autograd.Function):
    """``y [B, S, D] -> (y [B, S·D] in dtype, mean_S(y) [B, D] in mean_dtype)``: both uses of a
    pending branch output, the next stream map's row and the carried summary, as one node. Their
    gradients then meet here, and the summary's (a broadcast ``[B, D]``) is added in place into
    the map's ``g_y`` row, which :class:`_MixStreams` allocated for it; two consumers of ``y``
    would make autograd add them into a fresh ``[B, S, D]`` tensor."""

    @staticmethod
    def forward(ctx, y, dtype, mean_dtype):
        b, s, d = y.shape
        ctx.y_shape, ctx.y_dtype = y.shape, y.dtype
        if y.dtype == dtype and y.is_contiguous():
            flat = y.new_empty(0).set_(y.untyped_storage(), y.storage_offset(), (b, s * d), (s * d, 1))
        else:
            flat = y.reshape(b, s * d).to(dtype, copy=True)
        return flat, y.mean(dim=1, dtype=mean_dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_flat, grad_mean):
        b, s, d = ctx.y_shape
        if grad_mean is None:
            return grad_flat.view(b, s, d).to(ctx.y_dtype), None, None
        spread = (grad_mean / s).unsqueeze(1)  # [B, 1, D]
        if grad_flat is None:
            return spread.to(ctx.y_dtype).expand(b, s, d), None, None
        grad = grad_flat.view(b, s, d)
        if getattr(grad_flat, OWNED_GRADIENT, False) and grad_flat.dtype == ctx.y_dtype:
            return grad.add_(spread.to(grad.dtype)), None, None
        return (grad + spread.to(grad.dtype)).to(ctx.y_dtype), None, None


def pending_update(y: Tensor, dtype: torch.dtype, mean_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``y [B, S, D] -> (y [B, S·D] in dtype, its mean over positions [B, D] in mean_dtype)``, for a
    sub-layer that applies the previous one's update (:class:`_PendingUpdate`)."""
    if torch.compiler.is_compiling():
        return y.reshape(y.shape[0], -1).to(dtype), y.mean(dim=1, dtype=mean_dtype)
    return _PendingUpdate.apply(y, dtype, mean_dtype)


def carry_mean(y_mean: Tensor, H: Tensor, h_post: Tensor, pooled: Tensor) -> Tensor:
    """``mean_S(H X + h_post y) = H mean_S(X) + h_post mean_S(y)``: ``y_mean [B, D], H [B, n, n],
    h_post [B, n], pooled [B, n, D] -> [B, n, D]``."""
    return torch.baddbmm(h_post.unsqueeze(-1) * y_mean.unsqueeze(1), H, pooled)


def carry_pooled(y: Tensor, H: Tensor, h_post: Tensor, pooled: Tensor) -> Tensor:
    """The spatial mean of the updated streams from the old one: ``y [B, S, D], H [B, n, n],
    h_post [B, n], pooled [B, n, D] -> [B, n, D]`` in ``pooled``'s dtype, exact by linearity
    (:func:`carry_mean`). The CPU kernels' path fuses it; this is the PyTorch form."""
    if torch.compiler.is_compiling():
        y_mean = y.mean(dim=1, dtype=pooled.dtype)  # [B, D]
    else:
        y_mean = _MeanOverPositions.apply(y, pooled.dtype)
    return carry_mean(y_mean, H, h_post, pooled)


def pool_streams(streams: Tensor, dim: int) -> Tensor:
    """``[B, n, S·D] -> [B, n, D]``: float32 mean over the spatial positions of width ``dim``."""
    b, n, f = streams.shape
    return streams.view(b, n, f // dim, dim).mean(dim=2, dtype=torch.float32)
