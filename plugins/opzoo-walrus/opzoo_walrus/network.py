"""Walrus's network in opzoo's own code (docs/models.md, "Walrus"): the ``IsotropicModel`` of McCabe et al., "Walrus: A
Cross-Domain Foundation Model for Continuum Dynamics" (arXiv 2511.15684), as the published checkpoint holds it
(PolymathicAI/walrus, the module tree its notebook prints; the parts neither fork holds from FhG-IISB/foundax's JAX
port: docs/models.md says which part rests on what).

``WalrusNet(x: [T, B, C, H, W, D], labels, boundaries, rolls) -> [T, B, C, H, W, D]``: for every input step (causal in
time) the normalized change to the next frame of ``C`` fields, each field the slot ``labels[c]`` of a shared vocabulary
of ``n_states`` slots (the first three slots are the boundary flags). 2-D data has ``D = 1``:

1. the grid padded for the strided stem (:func:`pad_plan`; constant padding on a wall or open axis, circular on a
   periodic one), three flag channels appended (interior, wall, open: which padding a voxel is), and, when jittered,
   the padded grid rolled by a random amount;
2. a two-convolution stem whose strides follow the grid (:func:`kernels_for`), its first kernel's input columns those
   of the fields' slots and the flags' (``[2, 0, 1]``), the fields' and the interior flag's rescaled by
   ``sqrt((n_states - 3) / C)``; a kernel axis over a singleton grid axis is summed;
3. ``depth`` blocks: causal attention over time at every token (T5 relative bias), then full attention over all the
   tokens of a frame (axial RoPE over the three axes) fused with a SwiGLU MLP; when jittered, the tokens are rolled by
   a random amount along every periodic axis before each block and rolled back after the last;
4. two transposed convolutions (the last one's output rows those of the fields' slots), periodic axes wrapped around;
   the padding cut off.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

WALL, OPEN, PERIODIC = 0, 1, 2  # The Well's boundary codes (the_well.data.datasets.BoundaryCondition)
FLAG_SLOTS = (2, 0, 1)  # the slots of the interior, wall and open flag channels: bias_correction, closed, open
N_FLAGS = len(FLAG_SLOTS)
# tokens per axis and the (stride1, stride2) of each multiple of them: upstream's choose_kernel_size_deterministic
TOKENS_2D, TOKENS_3D = 32, 16
STRIDES = {1: (1, 1), 4: (2, 2), 8: (4, 2), 12: (6, 2), 16: (4, 4), 24: (6, 4), 32: (8, 4)}
NORM_EPS = 1e-6  # RMSGroupNorm's stored (and printed) eps, which its forward never uses


def tokens_per_axis(grid: Sequence[int]) -> int:
    """32 tokens per axis when at most two axes are longer than 1, else 16."""
    return TOKENS_3D if sum(int(n != 1) for n in grid) == 3 else TOKENS_2D


def accepted_sizes(grid: Sequence[int]) -> list[int]:
    t = tokens_per_axis(grid)
    return [t * m for m in sorted(STRIDES)]


def kernels_for(grid: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """``(stride1, stride2)`` per axis of a ``[H, W, D]`` grid (1 on a singleton axis), or ValueError naming the sizes
    that run."""
    t = tokens_per_axis(grid)
    out = []
    for n in grid:
        if n == 1:
            out.append((1, 1))
        elif n % t or n // t not in STRIDES:
            sizes = ", ".join(str(s) for s in accepted_sizes(grid))
            raise ValueError(f"grid {list(grid)}: Walrus's stem takes {t} tokens per axis, so each axis is one of "
                             f"{sizes} (or 1)")
        else:
            out.append(STRIDES[n // t])
    return tuple(out)


def pad_plan(grid: Sequence[int], bcs: Sequence[Sequence[int]], kernels, base_kernels, jitter: bool):
    """``(constant, circular)`` padding per axis, each ``[(before, after)] * 3``: what makes the stem's strided
    convolutions give exactly ``n / (s1 s2)`` tokens (``(k1 + s1 (k2 - 1) - s1 s2) // 2`` per side), plus half the
    patch on a non-periodic axis when jittered (room to roll into). A periodic axis is padded circularly."""
    const, circ = [], []
    for n, bc, (s1, s2), (k1, k2) in zip(grid, bcs, kernels, base_kernels):
        if n == 1:
            const.append((0, 0))
            circ.append((0, 0))
            continue
        extra = (k1 + s1 * (k2 - 1) - s1 * s2) // 2
        if bc[0] == PERIODIC:
            const.append((0, 0))
            circ.append((extra, extra))
        else:
            p = extra + (s1 * s2 // 2 if jitter else 0)
            const.append((p, p))
            circ.append((0, 0))
    return const, circ


def _pad_args(pads) -> list[int]:
    """F.pad's order: the last axis first."""
    return [p for pair in reversed(pads) for p in pair]


def _crop(x: Tensor, pads) -> Tensor:
    """``x[..., H, W, D]`` without ``pads`` (``[(before, after)] * 3``)."""
    index = [slice(None)] * (x.ndim - 3) + [slice(b, x.shape[x.ndim - 3 + i] - a) for i, (b, a) in enumerate(pads)]
    return x[tuple(index)]


def boundary_flags(shape: Sequence[int], const, bcs, dtype, device) -> Tensor:
    """``[3, H, W, D]`` of the padded grid: 1 in channel 0 inside; in a non-periodic axis's constant padding, channel
    0 set to 0 and ``1 + code`` of that side's boundary raised by 1 (so a corner of two walls holds 2)."""
    flags = torch.zeros((N_FLAGS, *shape), dtype=dtype, device=device)
    flags[0] = 1.0
    for axis, ((before, after), bc) in enumerate(zip(const, bcs)):
        for side, width in ((0, before), (1, after)):
            if width == 0:
                continue
            index = [slice(None)] * 3
            index[axis] = slice(None, width) if side == 0 else slice(-width, None)
            flags[(1 + int(bc[side]), *index)] += 1.0
            flags[(0, *index)] = 0.0
    return flags


class RMSGroupNorm(nn.Module):
    """``[N, C, *S]``: each channel divided by its RMS over the grid, then scaled; no centring, no bias. Despite its
    name (and its ``groups``, which only reshape), upstream's ``F.rms_norm`` runs over the grid axes alone, with the
    dtype's epsilon (``eps`` is stored, printed, and never passed on)."""

    def __init__(self, groups: int, channels: int, eps: float = NORM_EPS):
        super().__init__()
        self.groups, self.eps = groups, eps
        self.weight = nn.Parameter(torch.ones(channels))

    def forward(self, x: Tensor) -> Tensor:
        y = F.rms_norm(x, x.shape[2:])
        return y * self.weight.reshape(1, -1, *([1] * (x.ndim - 2)))

    def extra_repr(self) -> str:
        return f"{self.groups}, {self.weight.numel()}, eps={self.eps}"


def _fold_singletons(weight: Tensor, grid: Sequence[int], strides: Sequence[int], reduce: str):
    """A 3-D kernel over a grid with singleton axes: those kernel axes summed (a convolution) or averaged (a
    transposed one), their stride 1."""
    strides = list(strides)
    for axis, n in enumerate(grid):
        if n == 1:
            dim = 2 + axis
            weight = weight.sum(dim, keepdim=True) if reduce == "sum" else weight.mean(dim, keepdim=True)
            strides[axis] = 1
    return weight, tuple(strides)


class Encoder(nn.Module):
    """``[N, C + 3, H, W, D] -> [N, hidden, h, w, d]`` (upstream's ``SpaceBagAdaptiveDVstrideEncoder``): two strided
    convolutions without bias, each followed by an RMS group norm and SiLU; the first one's input columns chosen by
    the channels' slots."""

    def __init__(self, n_states: int, inner: int, hidden: int, groups: int, base_kernels):
        super().__init__()
        self.base_kernels = tuple(tuple(k) for k in base_kernels)
        self.proj1 = nn.Conv3d(n_states, inner, tuple(k[0] for k in self.base_kernels), bias=False)
        self.norm1 = RMSGroupNorm(groups, inner)
        self.act = nn.SiLU()
        self.proj2 = nn.Conv3d(inner, hidden, tuple(k[1] for k in self.base_kernels), bias=False)
        self.norm2 = RMSGroupNorm(groups, hidden)

    def forward(self, x: Tensor, columns: Tensor, kernels) -> Tensor:
        w = self.proj1.weight[:, columns]
        scale = ((self.proj1.weight.shape[1] - N_FLAGS) / (w.shape[1] - N_FLAGS)) ** 0.5
        w = torch.cat([w[:, :-2] * scale, w[:, -2:]], dim=1)  # the fields and the interior flag rescaled
        w, s = _fold_singletons(w, x.shape[2:], [k[0] for k in kernels], "sum")
        x = self.act(self.norm1(F.conv3d(x, w, stride=s)))
        w, s = _fold_singletons(self.proj2.weight, x.shape[2:], [k[1] for k in kernels], "sum")
        return self.act(self.norm2(F.conv3d(x, w, stride=s)))


class Decoder(nn.Module):
    """``[N, hidden, h, w, d] -> [N, C, H', W', D']`` (upstream's ``AdaptiveDVstrideDecoder``): two transposed
    convolutions, an RMS group norm and SiLU between; the second one's output rows and bias those of the slots. On a
    periodic axis the input is wrapped by ``(k - s) // s`` and ``k - s`` cut from each side of the output."""

    def __init__(self, hidden: int, inner: int, n_states: int, groups: int, base_kernels):
        super().__init__()
        base_kernels = tuple(tuple(k) for k in base_kernels)
        self.proj1 = nn.ConvTranspose3d(hidden, inner, tuple(k[1] for k in base_kernels), bias=False)
        self.norm1 = RMSGroupNorm(groups, inner)
        self.act = nn.SiLU()
        self.proj2 = nn.ConvTranspose3d(inner, n_states, tuple(k[0] for k in base_kernels))

    @staticmethod
    def _up(x: Tensor, weight: Tensor, bias: Tensor | None, strides, periodic: Sequence[bool]) -> Tensor:
        weight, strides = _fold_singletons(weight, x.shape[2:], strides, "mean")
        wrap, cut = [], []
        for axis, (n, s) in enumerate(zip(x.shape[2:], strides)):
            k = weight.shape[2 + axis]
            if n != 1 and periodic[axis]:
                wrap.append(((k - s) // s,) * 2)
                cut.append((k - s,) * 2)
            else:
                wrap.append((0, 0))
                cut.append((0, 0))
        if any(sum(p) for p in wrap):
            x = F.pad(x, _pad_args(wrap), mode="circular")
        return _crop(F.conv_transpose3d(x, weight, bias, stride=strides), cut)

    def forward(self, x: Tensor, slots: Tensor, kernels, periodic: Sequence[bool]) -> Tensor:
        x = self.act(self.norm1(self._up(x, self.proj1.weight, None, [k[1] for k in kernels], periodic)))
        return self._up(x, self.proj2.weight[:, slots], self.proj2.bias[slots], [k[0] for k in kernels], periodic)


def drop_path(x: Tensor, p: float, training: bool) -> Tensor:
    """Stochastic depth over ``x``'s first axis (timm's ``DropPath``, as upstream)."""
    if p == 0.0 or not training:
        return x
    keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1.0 - p)
    return x * keep.div_(1.0 - p)


class AxialRotary(nn.Module):
    """lucidrains' rotary embedding as upstream's spatial attention uses it (``freqs_for="pixel"``,
    ``max_freq=256``): ``freqs`` = ``linspace(1, 128, dim/2) * pi`` (a buffer the checkpoint holds); each axis's
    positions ``linspace(-1, 1, n)``, in float32 as upstream makes them."""

    def __init__(self, dim: int, max_freq: float = 256.0):
        super().__init__()
        self.register_buffer("freqs", torch.linspace(1.0, max_freq / 2, dim // 2) * math.pi)

    def axial_angles(self, grid: Sequence[int]) -> Tensor:
        """``[H, W, D, 3 * dim]``: every axis's angles (each frequency twice, adjacent), axis after axis."""
        parts = []
        for axis, n in enumerate(grid):
            pos = torch.linspace(-1, 1, steps=n, device=self.freqs.device).to(self.freqs.dtype)
            ang = (pos[:, None] * self.freqs).repeat_interleave(2, dim=-1)
            shape = [1, 1, 1, ang.shape[-1]]
            shape[axis] = n
            parts.append(ang.reshape(shape).expand(*grid, ang.shape[-1]))
        return torch.cat(parts, dim=-1)


def rotate(t: Tensor, angles: Tensor) -> Tensor:
    """``t[..., c]`` with its first ``angles.shape[-1]`` channels rotated in adjacent pairs (RoPE), the rest kept."""
    r = angles.shape[-1]
    mid = t[..., :r]
    pairs = mid.unflatten(-1, (-1, 2))
    half = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return torch.cat((mid * angles.cos() + half * angles.sin(), t[..., r:]), dim=-1)


class SwiGLU(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        x, gate = x.chunk(2, dim=-1)
        return F.silu(gate) * x


class FullAttention(nn.Module):
    """``[N, hidden, H, W, D] -> same``: one RMS group norm (a group per head), one linear layer to the MLP's input
    and q, k, v; attention over every token of the frame (q, k LayerNormed per head, axial RoPE on the first
    three quarters of a head's channels); out = x + drop_path(attn_out(attention) + ff_out(SwiGLU(mlp)))."""

    def __init__(self, hidden: int, heads: int, mlp: int, drop_path: float):
        super().__init__()
        self.heads, self.mlp, self.drop_path = heads, mlp, drop_path
        head = hidden // heads
        self.norm1 = RMSGroupNorm(heads, hidden)
        self.fused_ff_qkv = nn.Linear(hidden, mlp + 3 * hidden)
        self.activation = SwiGLU()
        self.ff_out = nn.Linear(mlp // 2, hidden)
        self.attn_out = nn.Linear(hidden, hidden, bias=False)
        self.q_norm = nn.LayerNorm(head)
        self.k_norm = nn.LayerNorm(head)
        self.rotary_emb = AxialRotary(head // 4)

    def forward(self, x: Tensor) -> Tensor:
        n, c, *grid = x.shape
        h = self.norm1(x).permute(0, 2, 3, 4, 1)
        ff, q, k, v = self.fused_ff_qkv(h).split((self.mlp, c, c, c), dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).permute(0, 4, 1, 2, 3, 5) for t in (q, k, v))  # [N, he, *S, c]
        angles = self.rotary_emb.axial_angles(grid).to(x.dtype)
        q, k = rotate(self.q_norm(q), angles), rotate(self.k_norm(k), angles)
        att = F.scaled_dot_product_attention(q.flatten(2, 4), k.flatten(2, 4), v.flatten(2, 4))
        att = att.unflatten(2, grid).permute(0, 2, 3, 4, 1, 5).flatten(-2)  # [N, *S, hidden]
        y = drop_path(self.attn_out(att) + self.ff_out(self.activation(ff)), self.drop_path, self.training)
        return y.permute(0, 4, 1, 2, 3) + x


def relative_bucket(distance: Tensor, causal: bool, num_buckets: int = 32, max_distance: int = 32) -> Tensor:
    """T5's bucket of each relative position (``key - query``): a causal one uses every bucket for the past (the
    future is masked); a bidirectional one half per sign. Upstream passes no ``max_distance`` to its bucketing, so the
    bucket function's default 32 holds."""
    n = -distance
    if causal:
        bucket = torch.zeros_like(n)
        n = n.clamp_min(0)
    else:
        num_buckets //= 2
        bucket = (n < 0).long() * num_buckets
        n = n.abs()
    exact = num_buckets // 2
    log_bucket = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact)
                          * (num_buckets - exact)).long()
    log_bucket = torch.minimum(log_bucket, torch.full_like(log_bucket, num_buckets - 1))
    return bucket + torch.where(n < exact, n, log_bucket)


class RelativePositionBias(nn.Module):
    """``T -> [1, heads, T, T]``: a learned bias per head and bucket; causal: the future is ``-inf``."""

    def __init__(self, heads: int, causal: bool, num_buckets: int = 32):
        super().__init__()
        self.causal = causal
        self.relative_attention_bias = nn.Embedding(num_buckets, heads)

    def forward(self, length: int) -> Tensor:
        device = self.relative_attention_bias.weight.device
        positions = torch.arange(length, device=device)
        distance = positions[None, :] - positions[:, None]
        bias = self.relative_attention_bias(relative_bucket(distance, self.causal)).permute(2, 0, 1).unsqueeze(0)
        if self.causal:
            bias = bias.masked_fill(distance > 0, float("-inf"))
        return bias


class AxialTimeAttention(nn.Module):
    """``[T, B, hidden, H, W, D] -> same``: attention over time at every token (1x1x1 convolutions to q, k, v and
    out, q, k LayerNormed per head, T5 relative bias, causal); out = x + drop_path(out)."""

    def __init__(self, hidden: int, heads: int, causal: bool, drop_path: float):
        super().__init__()
        self.heads, self.drop_path = heads, drop_path
        head = hidden // heads
        self.norm1 = RMSGroupNorm(heads, hidden)
        self.input_head = nn.Conv3d(hidden, 3 * hidden, 1)
        self.output_head = nn.Conv3d(hidden, hidden, 1)
        self.qnorm = nn.LayerNorm(head)
        self.knorm = nn.LayerNorm(head)
        self.rel_pos_bias = RelativePositionBias(heads, causal)

    def forward(self, x: Tensor) -> Tensor:
        t, b, c, *grid = x.shape
        h = self.input_head(self.norm1(x.flatten(0, 1)))  # [T B, 3 hidden, *S], per head [q | k | v]
        h = h.reshape(t, b, self.heads, 3 * c // self.heads, -1).permute(1, 4, 2, 0, 3)  # [B, S, he, T, 3 c_h]
        q, k, v = h.chunk(3, dim=-1)
        bias = self.rel_pos_bias(t).to(x.dtype)
        y = F.scaled_dot_product_attention(self.qnorm(q), self.knorm(k), v, attn_mask=bias)
        y = y.permute(3, 0, 2, 4, 1).reshape(t * b, c, *grid)
        y = self.output_head(y).reshape(t, b, c, *grid)
        return drop_path(y, self.drop_path, self.training) + x


class SpaceTimeSplitBlock(nn.Module):
    """Time attention, then full spatial attention (``channel_mixing`` is the identity upstream: no tensors)."""

    def __init__(self, hidden: int, heads: int, mlp: int, causal: bool, drop_path: float):
        super().__init__()
        self.space_mixing = FullAttention(hidden, heads, mlp, drop_path)
        self.time_mixing = AxialTimeAttention(hidden, heads, causal, drop_path)

    def forward(self, x: Tensor) -> Tensor:
        x = self.time_mixing(x)
        return self.space_mixing(x.flatten(0, 1)).unflatten(0, x.shape[:2])


class WalrusNet(nn.Module):
    """Upstream's ``IsotropicModel`` with the published options (SpaceBag adaptive-stride stem, full spatial attention,
    axial causal time attention, RMS group norms); tensor names as its checkpoint's."""

    def __init__(self, n_states: int, hidden: int = 1408, heads: int = 16, depth: int = 40, inner: int = 352,
                 groups: int = 16, mlp: int | None = None, causal: bool = True, drop_path: float = 0.05,
                 base_kernels=((8, 4), (8, 4), (8, 4)), include_d: Sequence[int] = (2, 3)):
        super().__init__()
        self.causal = causal
        self.base_kernels = tuple(tuple(k) for k in base_kernels)
        mlp = 4 * hidden if mlp is None else mlp
        self.encoder_dummy = nn.Parameter(torch.ones(1))
        self.embed = nn.ModuleDict({str(d): Encoder(n_states, inner, hidden, groups, self.base_kernels)
                                    for d in include_d})
        rates = [drop_path * i / (depth - 1) for i in range(depth)] if depth > 1 else [0.0]  # np.linspace's
        self.blocks = nn.ModuleList(SpaceTimeSplitBlock(hidden, heads, mlp, causal, rates[i]) for i in range(depth))
        self.debed = nn.ModuleDict({str(d): Decoder(hidden, inner, n_states, groups, self.base_kernels)
                                    for d in include_d})

    @staticmethod
    def dim_key(grid: Sequence[int]) -> str:
        return str(sum(int(n != 1) for n in grid))

    def jitter_rolls(self, grid: Sequence[int], bcs, generator: torch.Generator | None = None) -> list[int]:
        """A random roll per axis of the padded grid (0 on a singleton axis): within the constant padding on a
        non-periodic axis (``-(p - 1) .. p - 1``), within half the axis on a periodic one."""
        kernels = kernels_for(grid)
        const, _ = pad_plan(grid, bcs, kernels, self.base_kernels, jitter=True)
        rolls = []
        for n, bc, (before, _after) in zip(grid, bcs, const):
            half = 0 if n == 1 else (n // 2 if bc[0] == PERIODIC else before)
            rolls.append(int(torch.randint(-(half - 1), half, (), generator=generator)) if half > 1 else 0)
        return rolls

    def block_rolls(self, tokens: Sequence[int], bcs, generator: torch.Generator | None = None) -> list[list[int]]:
        """Per block, a random roll of the tokens along every periodic axis (``0 .. n - 1``; 0 elsewhere)."""
        return [[int(torch.randint(0, n, (), generator=generator)) if bc[0] == PERIODIC else 0
                 for n, bc in zip(tokens, bcs)] for _ in self.blocks]

    def pad(self, x: Tensor, bcs, jitter: Sequence[int] | None) -> tuple[Tensor, tuple]:
        """``[T, B, C, H, W, D] -> ([T B, C + 3, H', W', D'], plan)``: padded for the stem, the flags appended, rolled by
        ``jitter`` (one roll per axis; None: no jitter and no room for it)."""
        grid = x.shape[3:]
        kernels = kernels_for(grid)
        const, circ = pad_plan(grid, bcs, kernels, self.base_kernels, jitter is not None)
        h = F.pad((x * self.encoder_dummy).flatten(0, 1), _pad_args(const))
        flags = boundary_flags(h.shape[2:], const, bcs, h.dtype, h.device)
        h = torch.cat([h, flags.expand(h.shape[0], *flags.shape)], dim=1)
        if jitter is not None:
            h = torch.roll(h, shifts=list(jitter), dims=(2, 3, 4))
        if any(sum(p) for p in circ):
            h = F.pad(h, _pad_args(circ), mode="circular")
        return h, (tuple(grid), kernels, const, circ, jitter)

    def encode(self, x: Tensor, labels: Tensor, bcs, jitter: Sequence[int] | None):
        """``[T, B, C, H, W, D] -> ([T, B, hidden, h, w, d], plan)``."""
        h, plan = self.pad(x, bcs, jitter)
        columns = torch.cat([labels, torch.tensor(FLAG_SLOTS, dtype=labels.dtype, device=labels.device)])
        h = self.embed[self.dim_key(plan[0])](h, columns, plan[1])
        return h.unflatten(0, x.shape[:2]), plan

    def decode(self, h: Tensor, labels: Tensor, bcs, plan) -> Tensor:
        """``[T', B, hidden, h, w, d] -> [T', B, C, H, W, D]``."""
        grid, kernels, const, circ, jitter = plan
        t = h.shape[0]
        periodic = [bc[0] == PERIODIC for bc in bcs]
        y = self.debed[self.dim_key(grid)](h.flatten(0, 1), labels, kernels, periodic)
        y = _crop(y, circ)
        if jitter is not None:
            y = torch.roll(y, shifts=[-r for r in jitter], dims=(2, 3, 4))
        return _crop(y, const).unflatten(0, (t, -1))

    def process(self, h: Tensor, bcs, rolls: Sequence[Sequence[int]] | None, run=None) -> Tensor:
        """The blocks over ``[T, B, hidden, h, w, d]``; ``rolls`` (one list per block) rolls the tokens before each
        block and the sum back after the last; ``run(block, h)`` runs a block (gradient checkpointing)."""
        total = [0, 0, 0]
        for i, block in enumerate(self.blocks):
            if rolls is not None and any(rolls[i]):
                h = torch.roll(h, shifts=list(rolls[i]), dims=(3, 4, 5))
                total = [a + r for a, r in zip(total, rolls[i])]
            h = block(h) if run is None else run(block, h)
        if any(total):
            h = torch.roll(h, shifts=[-r for r in total], dims=(3, 4, 5))
        return h

    def forward(self, x: Tensor, labels: Tensor, bcs, jitter: Sequence[int] | None = None,
                rolls: Sequence[Sequence[int]] | None = None) -> Tensor:
        h, plan = self.encode(x, labels, bcs, jitter)
        h = self.process(h, bcs, rolls)
        if not self.causal:
            h = h[-1:]
        return self.decode(h, labels, bcs, plan)


def parameter_count(n_states: int, hidden: int, heads: int, depth: int, inner: int, groups: int,
                    mlp: int | None = None, base_kernels=((8, 4), (8, 4), (8, 4)), include_d=(2, 3)) -> int:
    """The network's parameters, counted on the meta device."""
    with torch.device("meta"):
        net = WalrusNet(n_states, hidden, heads, depth, inner, groups, mlp, base_kernels=base_kernels,
                        include_d=include_d)
    return sum(p.numel() for p in net.parameters())
