"""Walrus's network in opzoo's own code (docs/models.md section 13): the ``IsotropicModel`` of McCabe et al., "Walrus: A
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

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .blocks import RMSGroupNorm, SpaceTimeSplitBlock

WALL, OPEN, PERIODIC = 0, 1, 2  # The Well's boundary codes (the_well.data.datasets.BoundaryCondition)
FLAG_SLOTS = (2, 0, 1)  # the slots of the interior, wall and open flag channels: bias_correction, closed, open
N_FLAGS = len(FLAG_SLOTS)
# tokens per axis and the (stride1, stride2) of each multiple of them: upstream's choose_kernel_size_deterministic
TOKENS_2D, TOKENS_3D = 32, 16
STRIDES = {1: (1, 1), 4: (2, 2), 8: (4, 2), 12: (6, 2), 16: (4, 4), 24: (6, 4), 32: (8, 4)}


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
