"""DPOT's per-time-step patch embedding, with a channels-last fast path for its first conv."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .norm_act import make_activation


def conv_nd(spatial_dims: int) -> type[nn.Module]:
    return nn.Conv2d if spatial_dims == 2 else nn.Conv3d


def conv_transpose_nd(spatial_dims: int) -> type[nn.Module]:
    return nn.ConvTranspose2d if spatial_dims == 2 else nn.ConvTranspose3d


class PatchEmbed(nn.Module):
    """Per-time-step patchify: ``[N, in_chans, *S] -> [N, dim, *S/p]``.

    ``proj`` = Conv(k=p, stride p) -> act -> Conv(1x1). DPOT feeds it the data channels and the grid
    (``in_chans = C_in + d + 1``) with ``hidden = C_out*p + 3``.
    """

    def __init__(self, in_chans: int, hidden: int, dim: int, patch_size: int, spatial_dims: int, act: str = "gelu"):
        super().__init__()
        conv = conv_nd(spatial_dims)
        self.proj = nn.Sequential(
            conv(in_chans, hidden, kernel_size=patch_size, stride=patch_size),
            make_activation(act),
            conv(hidden, dim, kernel_size=1, stride=1),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x)

    def hidden_channels_last(self, x: Tensor) -> Tensor:
        """``act(Conv_p(x))`` on channels-last frames: ``[B, *S, T, C_in+d+1] -> [B, *S/p, T, hidden]``.

        A conv with kernel = stride = p is one GEMM over non-overlapping patches: one layout copy
        of the input instead of the conv's im2col and its slow weight-gradient kernel.
        """
        conv, act = self.proj[0], self.proj[1]
        p = conv.kernel_size[0]
        d = x.ndim - 3
        b, *sizes, t, c = x.shape
        split = [n for s in sizes for n in (s // p, p)]
        x = x.reshape(b, *split, t, c)
        # [B, (n_i, p)..., T, C] -> [B, n_1.., T, C, p..]: the conv weight's (C, p, .., p) order
        order = [0, *range(1, 2 * d, 2), 2 * d + 1, 2 * d + 2, *range(2, 2 * d + 1, 2)]
        patches = x.permute(order).flatten(-(d + 1))                            # [B, *S/p, T, C p^d]
        return act(F.linear(patches, conv.weight.flatten(1), conv.bias))


__all__ = ["PatchEmbed", "conv_nd", "conv_transpose_nd"]
