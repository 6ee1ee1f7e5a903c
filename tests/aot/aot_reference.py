"""A direct-loop float64 transcription of DESIGN §6.3, the reference the AOT code is tested against."""

from __future__ import annotations

import math

import torch


def sinkhorn_loops(logits: torch.Tensor, iters: int) -> torch.Tensor:
    """``exp(logits) [n, n]``; normalize columns then rows, ``iters`` times, with explicit loops."""
    n = logits.shape[0]
    m = [[math.exp(float(logits[i, j])) for j in range(n)] for i in range(n)]
    for _ in range(iters):
        for j in range(n):
            col = sum(m[i][j] for i in range(n))
            for i in range(n):
                m[i][j] /= col
        for i in range(n):
            row = sum(m[i])
            m[i] = [v / row for v in m[i]]
    return torch.tensor(m, dtype=torch.float64)


def sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


def aot_coefficients(residual, state: torch.Tensor):
    """``h_pre [B, n], h_post [B, n], H_res [B, n, n]`` of one AOT residual for the streams
    ``state [B, n, *S, D]``, element by element."""
    p = {k: v.detach().double() for k, v in residual.named_parameters()}
    n, d = residual.n, residual.dim
    x = state.detach().double().flatten(2, -2)  # [B, n, S, D]
    B, S = x.shape[0], x.shape[2]
    f64 = dict(dtype=torch.float64)
    h_pre, h_post, H_res = torch.zeros(B, n, **f64), torch.zeros(B, n, **f64), torch.zeros(B, n, n, **f64)
    for b in range(B):
        flat = [sum(float(x[b, i, s, c]) for s in range(S)) / S for i in range(n) for c in range(d)]
        rms = math.sqrt(sum(v * v for v in flat) / len(flat) + residual.eps)
        z = [v / rms for v in flat]

        def proj(phi, col):
            return sum(z[k] * float(phi[k, col]) for k in range(n * d))

        pre = [float(p["alpha_pre"]) * proj(p["phi_pre"], i) + float(p["b_pre"][i]) for i in range(n)]
        post = [float(p["alpha_post"]) * proj(p["phi_post"], i) + float(p["b_post"][i]) for i in range(n)]
        res = torch.tensor(
            [[float(p["alpha_res"]) * proj(p["phi_res"], i * n + j) + float(p["b_res"][i, j]) for j in range(n)]
             for i in range(n)],
            dtype=torch.float64,
        )
        total = sum(sigmoid(v) for v in pre)
        h_pre[b] = torch.tensor([sigmoid(v) / total for v in pre])
        h_post[b] = torch.tensor([2 * sigmoid(v) for v in post])
        H_res[b] = sinkhorn_loops(res, residual.sinkhorn_iters)
    return h_pre, h_post, H_res


def aot_forward(residual, state: torch.Tensor, branch):
    """``X'[:, i] = Σ_j H_res[i, j] X[:, j] + h_post[i] · branch(Σ_i h_pre[i] X[:, i])`` with loops over i, j."""
    h_pre, h_post, H_res = aot_coefficients(residual, state)
    x = state.detach().double()
    B, n = x.shape[:2]
    out = torch.zeros_like(x)
    for b in range(B):
        u = sum(h_pre[b, i] * x[b, i] for i in range(n))
        y = branch(u[None].float()).double()[0]
        for i in range(n):
            out[b, i] = sum(H_res[b, i, j] * x[b, j] for j in range(n)) + h_post[b, i] * y
    return out
