"""A caching pool in Python for the large CPU buffers of the AOT residual's PyTorch path.

On CPU a large tensor from PyTorch's allocator is fresh memory from the operating system whenever
glibc has handed the last one back, and the kernel zeroes every page of it on first touch: a
[8, 5, 131072] float32 buffer took ~4000 page faults here, and filling it 13.6 ms against 1.5 ms
for a reused one. The C kernels keep their freed buffers in a pool of their own (cpu_kernels); this
is the same idea without a compiler, for the PyTorch path on CPU (machines without a compiler,
bf16 streams, ``OPZOO_AOT_CPU_KERNELS=0``). CUDA needs none: its caching allocator does this.

Each buffer is a numpy array handed to PyTorch with :func:`torch.from_numpy` (a 64-byte aligned
view of it), whose storage holds a reference to the array for as long as any tensor uses it. A
buffer is free again exactly when the pool's own reference is the only one left, so there is
nothing to return: :meth:`empty` takes the first free buffer of the requested size.
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np
import torch

__all__ = ["BufferPool"]


def _refcount_when_free() -> int:
    """The references to a buffer that only the pool holds, seen the way :meth:`BufferPool._free_buffers`
    looks (the list, the comprehension's variable, getrefcount's argument)."""
    probe = [np.empty(0)]
    return [sys.getrefcount(b) for b in probe][0]


_FREE_REFCOUNT = _refcount_when_free()
ALIGNMENT = 64


def _size(buffer: np.ndarray) -> int:
    """The bytes a buffer serves (without its alignment slack)."""
    return buffer.nbytes - ALIGNMENT


class BufferPool:
    """``empty(dtype, shape) -> Tensor``: an uninitialized contiguous CPU tensor whose memory is
    reused once every tensor on it is gone. Keeps at most ``limit_bytes`` of buffers (in use or
    free); past that, requests come from PyTorch's allocator."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self._buffers: list[np.ndarray] = []
        self._lock = threading.Lock()

    def empty(self, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        nbytes = math.prod(shape) * dtype.itemsize
        with self._lock:
            buffer = next((b for b in self._free_buffers() if _size(b) == nbytes), None)
            if buffer is None:
                if self._held_bytes() + nbytes > self.limit_bytes:
                    self._release_free()
                if self._held_bytes() + nbytes > self.limit_bytes:
                    return torch.empty(shape, dtype=dtype)
                buffer = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
                self._buffers.append(buffer)
            offset = -buffer.ctypes.data % ALIGNMENT  # numpy aligns to 16 bytes; vector loads like 64
            return torch.from_numpy(buffer[offset:offset + nbytes]).view(dtype).view(shape)

    def cached_bytes(self) -> int:
        """Bytes of free buffers kept for reuse."""
        with self._lock:
            return sum(map(_size, self._free_buffers()))

    def empty_cache(self) -> int:
        """Release every free buffer; returns the bytes released."""
        with self._lock:
            return self._release_free()

    def _free_buffers(self):
        return [b for b in self._buffers if sys.getrefcount(b) <= _FREE_REFCOUNT]

    def _held_bytes(self) -> int:
        return sum(map(_size, self._buffers))

    def _release_free(self) -> int:
        free = {id(b) for b in self._free_buffers()}
        released = sum(_size(b) for b in self._buffers if id(b) in free)
        self._buffers = [b for b in self._buffers if id(b) not in free]
        return released
