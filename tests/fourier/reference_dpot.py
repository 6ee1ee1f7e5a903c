"""An independent, straight-line DPOT forward written from DESIGN §6.1/§6.2 on the *official*
state dict (channels-first, official names), and a writer of official-layout checkpoints.

Nothing here calls opzoo's modules: it is the yardstick the opzoo model is checked against, and
the "official" side of ``benchmarks/bench_dpot_official.py``. For that benchmark it performs the
same operations, in the same order and memory layouts, as the official DPOTNet (HaoZhongkai/DPOT,
``models/dpot.py``), not only the same function: materialized coordinate grids concatenated to
the input, a ``(b t) c x y`` copy for channels-first patch convolutions, the time aggregation as
``einsum('tij,...ti->...j', w, z * cos(t gamma))`` on the permuted view, channels-first
GroupNorms and 1x1-conv MLPs, and AFNO2D's Fourier attention: four zero-filled buffers of the
whole rfft spectrum written on the kept corner by eight real einsums, ``stack`` + ``view_as_complex``,
``irfft2``, and the skip added in channels-last order before permuting back.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F


def official_state_dict(*, width, depth, n_blocks, mlp_ratio, out_layer_dim, patch, img, c_in, c_out,
                        t_in, t_out, n_cls, generator, prefix="") -> dict[str, torch.Tensor]:
    """Random tensors with the names and shapes of DPOTNet's state dict (19 + 12*depth keys)."""
    g = generator

    def r(*shape, scale=0.2):
        return scale * torch.randn(*shape, generator=g)

    d, bs, hidden = width, width // n_blocks, c_out * patch + 3
    sd = {
        "pos_embed": r(1, d, img // patch, img // patch, scale=0.02),
        "patch_embed.proj.0.weight": r(hidden, c_in + 3, patch, patch),
        "patch_embed.proj.0.bias": r(hidden),
        "patch_embed.proj.2.weight": r(d, hidden, 1, 1),
        "patch_embed.proj.2.bias": r(d),
        "time_agg_layer.w": r(t_in, d, d, scale=1 / (t_in * d**0.5)),
        "time_agg_layer.gamma": 2 ** torch.linspace(-10, 10, d).unsqueeze(0) * (1 + 0.1 * torch.rand(1, d, generator=g)),
        "cls_head.0.weight": r(d, d), "cls_head.0.bias": r(d),
        "cls_head.2.weight": r(d, d), "cls_head.2.bias": r(d),
        "cls_head.4.weight": r(n_cls, d), "cls_head.4.bias": r(n_cls),
        "out_layer.0.weight": r(d, out_layer_dim, patch, patch), "out_layer.0.bias": r(out_layer_dim),
        "out_layer.2.weight": r(out_layer_dim, out_layer_dim, 1, 1), "out_layer.2.bias": r(out_layer_dim),
        "out_layer.4.weight": r(c_out * t_out, out_layer_dim, 1, 1), "out_layer.4.bias": r(c_out * t_out),
    }
    rd = int(d * mlp_ratio)
    for i in range(depth):
        sd.update({
            f"blocks.{i}.norm1.weight": 1 + r(d), f"blocks.{i}.norm1.bias": r(d),
            f"blocks.{i}.norm2.weight": 1 + r(d), f"blocks.{i}.norm2.bias": r(d),
            f"blocks.{i}.filter.w1": r(2, n_blocks, bs, bs), f"blocks.{i}.filter.b1": r(2, n_blocks, bs),
            f"blocks.{i}.filter.w2": r(2, n_blocks, bs, bs), f"blocks.{i}.filter.b2": r(2, n_blocks, bs),
            f"blocks.{i}.mlp.0.weight": r(rd, d, 1, 1), f"blocks.{i}.mlp.0.bias": r(rd),
            f"blocks.{i}.mlp.2.weight": r(d, rd, 1, 1), f"blocks.{i}.mlp.2.bias": r(d),
        })
    return {prefix + k: v for k, v in sd.items()}


def write_official_checkpoint(path, sd, **args) -> None:
    """The layout of the hzk17/DPOT files: {'args': Namespace, 'model': sd, 'optimizer': {...}}."""
    torch.save({"args": argparse.Namespace(**args), "model": sd,
                "optimizer": {"state": {}, "param_groups": [{"lr": 1e-3}]}}, path)


def afno_official(z, w1, b1, w2, b2, modes):
    """AFNO2D(channel_first=True) of the official code on ``z [B, D, H, W]``: the Fourier attention
    of DESIGN §6.2 *plus its input* (the official filter adds ``x_orig`` itself), ``[B, D, H, W]``
    as a permuted view of a channels-last result."""
    b, d, h, w = z.shape
    nb = w1.shape[1]
    z_cl = z.permute(0, 2, 3, 1)                                   # the skip, a channels-last view
    x = torch.fft.rfft2(z_cl, dim=(1, 2), norm="ortho")
    x = x.reshape(b, x.shape[1], x.shape[2], nb, d // nb)
    # zero-filled buffers over the whole spectrum; only the kept corner is written
    o1r, o1i = (torch.zeros(x.shape, dtype=z.dtype, device=z.device) for _ in range(2))
    o2r, o2i = (torch.zeros(x.shape, dtype=z.dtype, device=z.device) for _ in range(2))
    k = modes
    e = "...bi,bio->...bo"
    o1r[:, :k, :k] = F.gelu(torch.einsum(e, x[:, :k, :k].real, w1[0]) - torch.einsum(e, x[:, :k, :k].imag, w1[1]) + b1[0])
    o1i[:, :k, :k] = F.gelu(torch.einsum(e, x[:, :k, :k].imag, w1[0]) + torch.einsum(e, x[:, :k, :k].real, w1[1]) + b1[1])
    o2r[:, :k, :k] = torch.einsum(e, o1r[:, :k, :k], w2[0]) - torch.einsum(e, o1i[:, :k, :k], w2[1]) + b2[0]
    o2i[:, :k, :k] = torch.einsum(e, o1i[:, :k, :k], w2[0]) + torch.einsum(e, o1r[:, :k, :k], w2[1]) + b2[1]
    o2 = torch.view_as_complex(torch.stack([o2r, o2i], dim=-1)).reshape(b, x.shape[1], x.shape[2], d)
    out = torch.fft.irfft2(o2, s=(h, w), dim=(1, 2), norm="ortho")
    return (out + z_cl).permute(0, 3, 1, 2)


def _grid(b, sizes, axis, like):
    """The official ``get_grid_3d`` channel of ``axis``: ``linspace(0, 1)`` along it, materialized ``[B, X, Y, T, 1]``."""
    shape = [1, 1, 1, 1, 1]
    shape[axis + 1] = sizes[axis]
    reps = [b, *sizes, 1]
    reps[axis + 1] = 1
    return torch.linspace(0, 1, sizes[axis], dtype=like.dtype).reshape(shape).to(like.device).repeat(reps)


def dpot_forward_official(sd, x, *, modes, patch, t_out, groups=8):
    """``x [B, X, Y, T, C] -> ([B, X, Y, T_out, C_out], cls logits)`` from the official state dict."""
    b, nx, ny, t, c = x.shape
    grid = torch.cat([_grid(b, (nx, ny, t), axis, x) for axis in range(3)], dim=-1)
    x = torch.cat([x, grid], dim=-1).contiguous()
    z = x.permute(0, 3, 4, 1, 2).reshape(b * t, c + 3, nx, ny)                 # (b t) c x y
    z = F.conv2d(z, sd["patch_embed.proj.0.weight"], sd["patch_embed.proj.0.bias"], stride=patch)
    z = F.conv2d(F.gelu(z), sd["patch_embed.proj.2.weight"], sd["patch_embed.proj.2.bias"])
    z = z + sd["pos_embed"]
    d = z.shape[1]
    z = z.reshape(b, t, d, nx // patch, ny // patch).permute(0, 3, 4, 1, 2)    # b x y t d
    tt = torch.linspace(0, 1, t, dtype=x.dtype).unsqueeze(-1).to(x.device)
    z = torch.einsum("tij,...ti->...j", sd["time_agg_layer.w"], z * torch.cos(tt @ sd["time_agg_layer.gamma"]))
    z = z.permute(0, 3, 1, 2)                                                  # b d x y
    depth = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    for i in range(depth):
        p = f"blocks.{i}."
        u = F.group_norm(z, groups, sd[p + "norm1.weight"], sd[p + "norm1.bias"])
        u = afno_official(u, sd[p + "filter.w1"], sd[p + "filter.b1"], sd[p + "filter.w2"], sd[p + "filter.b2"], modes)
        u = F.group_norm(u, groups, sd[p + "norm2.weight"], sd[p + "norm2.bias"])
        u = F.conv2d(F.gelu(F.conv2d(u, sd[p + "mlp.0.weight"], sd[p + "mlp.0.bias"])), sd[p + "mlp.2.weight"], sd[p + "mlp.2.bias"])
        z = z + u
    h = z.mean(dim=(2, 3))
    h = F.gelu(F.linear(h, sd["cls_head.0.weight"], sd["cls_head.0.bias"]))
    h = F.gelu(F.linear(h, sd["cls_head.2.weight"], sd["cls_head.2.bias"]))
    cls = F.linear(h, sd["cls_head.4.weight"], sd["cls_head.4.bias"])
    y = F.gelu(F.conv_transpose2d(z, sd["out_layer.0.weight"], sd["out_layer.0.bias"], stride=patch))
    y = F.gelu(F.conv2d(y, sd["out_layer.2.weight"], sd["out_layer.2.bias"]))
    y = F.conv2d(y, sd["out_layer.4.weight"], sd["out_layer.4.bias"]).permute(0, 2, 3, 1)
    return y.reshape(b, nx, ny, t_out, -1).contiguous(), cls
