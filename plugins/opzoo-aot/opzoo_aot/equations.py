"""The AOT residual's equations (docs/models.md §3) as functions of tensors, read top to bottom::

    z      = RMSNorm(flatten(mean_S(X)))                              # [B, nD], no affine weight
    h_pre  = σ(α_pre · z φ_pre + b_pre) / Σ_i σ(...)_i                 # [B, n], on the simplex
    h_post = 2 σ(α_post · z φ_post + b_post)                           # [B, n]
    H_res  = SinkhornKnopp(exp(α_res · mat(z φ_res) + b_res), iters)   # [B, n, n], rows sum to 1
    u      = Σ_i h_pre[i] · X[:, i]                                    # the branch input [B, *S, D]
    X'[:, i] = Σ_j H_res[i, j] · X[:, j] + h_post[i] · branch(u)

``X`` is the stream state ``[B, n, *S, D]``. The coefficients are computed in the parameters'
dtype (the residual passes float64 where the device has it, else float32, outside autocast); the
stream maps run in the streams' dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["sinkhorn_knopp", "pool", "coefficients", "aggregate", "update", "mix", "feature_dots"]


def sinkhorn_knopp(logits: Tensor, iters: int) -> Tensor:
    """``[..., n, n] -> [..., n, n]``: normalize the columns, then the rows of ``exp(logits)``,
    ``iters`` times; rows sum to 1 (up to rounding), columns approximately.

    Iterated in log space: each half-step is ``L - logsumexp(L)`` (one ``log_softmax``), which
    never overflows or divides by an underflowed zero for finite logits. float32 at least."""
    log_m = logits if logits.dtype == torch.float64 else logits.float()
    for _ in range(iters):
        log_m = log_m.log_softmax(dim=-2)  # columns sum to 1
        log_m = log_m.log_softmax(dim=-1)  # rows sum to 1
    return log_m.exp()


def pool(X: Tensor) -> Tensor:
    """``X [B, *, *S, D] -> [B, *, D]``: the mean over the positions ``S`` (streams ``[B, n, *S, D]``
    or a branch output ``[B, 1, *S, D]``), float32 at least."""
    dtype = torch.promote_types(X.dtype, torch.float32)
    return X.flatten(2, -2).mean(dim=2, dtype=dtype)


def coefficients(pooled: Tensor, phi_pre: Tensor, phi_post: Tensor, phi_res: Tensor, b_pre: Tensor,
                 b_post: Tensor, b_res: Tensor, alpha_pre: Tensor, alpha_post: Tensor, alpha_res: Tensor,
                 eps: float, iters: int) -> tuple[Tensor, Tensor, Tensor]:
    """``pooled [B, n, D]`` and one sub-layer's parameters -> ``h_pre [B, n], h_post [B, n], H_res [B, n, n]``,
    in the parameters' dtype."""
    n = pooled.shape[1]
    z = F.rms_norm(pooled.to(phi_pre.dtype).flatten(1), (pooled.shape[1] * pooled.shape[2],), eps=eps)  # [B, nD]
    gate = torch.sigmoid(alpha_pre * (z @ phi_pre) + b_pre)
    h_pre = gate / gate.sum(dim=1, keepdim=True)
    h_post = 2.0 * torch.sigmoid(alpha_post * (z @ phi_post) + b_post)
    H_res = sinkhorn_knopp(alpha_res * (z @ phi_res).unflatten(1, (n, n)) + b_res, iters)
    return h_pre, h_post, H_res


def aggregate(weights: Tensor, X: Tensor) -> Tensor:
    """``weights [B, n], X [B, n, *S, D] -> Σ_i weights[:, i] · X[:, i]``, ``[B, *S, D]``."""
    return mix(weights.unsqueeze(1), X).squeeze(1)


def update(X: Tensor, H_res: Tensor, h_post: Tensor, y: Tensor) -> Tensor:
    """``X [B, n, *S, D], H_res [B, n, n], h_post [B, n], y [B, *S, D] -> X'``:
    ``X'[:, i] = Σ_j H_res[:, i, j] X[:, j] + h_post[:, i] · y``."""
    return mix(H_res, X, h_post, y)


def mix(A: Tensor, X: Tensor, b: Tensor | None = None, y: Tensor | None = None) -> Tensor:
    """``A [B, r, n], X [B, n, *S, D] (, b [B, r], y [B, *S, D]) -> A X (+ b ⊗ y)``, ``[B, r, *S, D]``:
    the stream maps, with accurate gradients of the coefficients ``A`` and ``b``."""
    return _Mix.apply(A, X, b, y)


class _Mix(torch.autograd.Function):
    """``A X + b ⊗ y`` (a ``bmm``, then ``b ⊗ y`` added in place) whose backward reduces
    ``g_A = G X^T`` and ``g_b = G y`` over the features with float64 accumulation
    (:func:`feature_dots`).

    Why not autograd's float32 ``bmm``: the streams stay close to one another, so each row of
    ``g_A`` holds nearly equal large dot products, and the Sinkhorn / simplex / softmax backward
    (rows of ``H_res``, ``h_pre`` and the readout weights sum to 1) subtracts their common part,
    leaving a gradient 100-1000x smaller than the entries. A float32 GEMM over F = 65536 features
    gets the entries to ~3e-6 and these gradients to ~4e-4 (``benchmarks/aot_accuracy.py``,
    docs/accuracy.md); with the float64 accumulation, ~1e-5. The stream gradients are allocated
    whole (not views of a flat result), so autograd adds the two a stream receives in place."""

    @staticmethod
    def forward(ctx, A: Tensor, X: Tensor, b: Tensor | None, y: Tensor | None) -> Tensor:
        ctx.save_for_backward(A, X, b, y)
        out = torch.bmm(A, X.flatten(2))
        if y is not None:
            out.addcmul_(b.unsqueeze(2), y.flatten(1).unsqueeze(1))
        return out.view(A.shape[:2] + X.shape[2:])

    @staticmethod
    def backward(ctx, G: Tensor):
        A, X, b, y = ctx.saved_tensors
        need_A, need_X, need_b, need_y = ctx.needs_input_grad
        G = G.flatten(2)
        g_A = feature_dots(G, X.flatten(2)).to(A.dtype) if need_A else None
        g_b = feature_dots(G, y.flatten(1).unsqueeze(1)).squeeze(2).to(b.dtype) if need_b else None
        g_X = g_y = None
        if need_X:
            g_X = G.new_empty(X.shape)
            torch.bmm(A.transpose(1, 2), G, out=g_X.view(G.shape[0], X.shape[1], -1))
        if need_y:
            g_y = G.new_empty(y.shape)
            torch.bmm(b.unsqueeze(1), G, out=g_y.view(G.shape[0], 1, -1))
        return g_A, g_X, g_b, g_y


FEATURE_CHUNK = 1024  # features per float32 partial dot product


def feature_dots(a: Tensor, b: Tensor) -> Tensor:
    """``a [B, p, F], b [B, q, F] -> [B, p, q]`` float64: ``Σ_f a[:, i, f] b[:, j, f]``.

    Eager: float32 (or the inputs' dtype) products summed over chunks of :data:`FEATURE_CHUNK`
    features by one batched GEMM per sample (strided views, no copies), the chunks summed in
    float64. Compiled: the products in float64, which inductor fuses into one reduction."""
    if torch.compiler.is_compiling() or a.shape[-1] < 2 * FEATURE_CHUNK:
        return (a.double().unsqueeze(2) * b.double().unsqueeze(1)).sum(-1)
    a, b = a.contiguous(), b.contiguous()
    main = a.shape[-1] - a.shape[-1] % FEATURE_CHUNK
    out = torch.bmm(a[..., main:], b[..., main:].transpose(1, 2)).double()
    for s in range(a.shape[0]):
        chunks_a = a[s, :, :main].unflatten(-1, (-1, FEATURE_CHUNK)).transpose(0, 1)  # [C, p, K]
        chunks_b = b[s, :, :main].unflatten(-1, (-1, FEATURE_CHUNK)).permute(1, 2, 0)  # [C, K, q]
        out[s] += torch.bmm(chunks_a, chunks_b).sum(0, dtype=torch.float64)
    return out
