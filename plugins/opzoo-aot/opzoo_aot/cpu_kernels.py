"""Builds and loads the AOT residual's CPU kernels (``csrc/aot_kernels.c``).

The kernels are plain C with OpenMP, compiled on first use with the system C compiler (``$CC``,
default ``cc``) into a per-user cache, the way ``torch.compile`` builds its CPU code, and loaded
with :mod:`ctypes`. The build takes about a second; its cache key covers the sources, the
compiler command and this CPU's instruction set, and a build is written under a temporary name
and renamed, so concurrent processes (DDP ranks) never load a half-written library.

Where no compiler works, the AOT residual runs its PyTorch implementation instead and warns once.
``OPZOO_AOT_CPU_KERNELS=0`` turns the kernels off; ``OPZOO_CACHE_DIR`` moves the cache
(default ``$XDG_CACHE_HOME/opzoo`` or ``~/.cache/opzoo``).

The large stream buffers on CPU come from a caching pool (:func:`pooled_empty`): freed buffers are
kept for reuse instead of going back to the operating system, which would hand them out again as
fresh pages to be zeroed on first touch. With the kernels loaded it is theirs (in C); otherwise,
for the PyTorch path, a pool in Python (:mod:`opzoo_aot.buffer_pool`). ``OPZOO_AOT_POOL_MB`` caps
what a pool keeps (default 1024; 0 turns pooling off) and :func:`empty_cache` releases it.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shlex
import subprocess
import tempfile
import warnings
from importlib import resources
from pathlib import Path

import torch

from .buffer_pool import BufferPool

__all__ = ["ENV_KERNELS", "KernelBuildError", "build_library", "cache_dir", "kernels", "kernels_enabled",
           "pooled_empty", "empty_cache", "cached_bytes"]

ENV_KERNELS = "OPZOO_AOT_CPU_KERNELS"
NMAX = 16  # the largest number of streams the kernels take (NMAX in csrc/aot_kernels.c)
SOURCES = ("aot_kernels.c", "aot_kernels_impl.h")
FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-std=c11", "-pthread")
OPENMP = ("-fopenmp",)

_p, _i64, _int, _f64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
# argument types of each kernel (identical for the _f32 and _f64 variants)
SIGNATURES = {
    "aot_streams_forward": ([_i64] * 3 + [_p] * 7 + [_int], _int),
    "aot_streams_backward": ([_i64] * 3 + [_p] * 12 + [_int], _int),
    "aot_carry_forward": ([_i64] * 4 + [_p] * 6, _int),
    "aot_carry_backward": ([_i64] * 4 + [_p] * 9, _int),
    "aot_coefficients_forward": ([_i64] * 4 + [_f64] + [_p] * 17, None),
    "aot_coefficients_backward": ([_i64] * 4 + [_p] * 26, _int),
}


class KernelBuildError(RuntimeError):
    """The C compiler is missing or failed; the message carries its command and output."""


def cache_dir() -> Path:
    """``$OPZOO_CACHE_DIR/aot-kernels``, else under ``$XDG_CACHE_HOME``, ``~/.cache`` or the temp dir."""
    root = os.environ.get("OPZOO_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME")
        if not base:
            try:
                base = str(Path.home() / ".cache")
            except RuntimeError:  # no home directory (some containers)
                base = tempfile.gettempdir()
        root = str(Path(base) / "opzoo")
    return Path(root) / "aot-kernels"


def _cpu_signature() -> str:
    """The instruction set ``-march=native`` compiles for: a library built on one CPU model must
    not be loaded on another that shares the cache (a cluster's home directory)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build_library(directory: Path | None = None, compiler: str | None = None) -> Path:
    """Compile the kernels (once per cache key) and return the shared library's path.

    Raises KernelBuildError naming the compiler command and its output when no build succeeds.
    """
    compiler_cmd = shlex.split(compiler or os.environ.get("CC") or "cc")
    source_dir = resources.files("opzoo_aot") / "csrc"
    sources = {name: (source_dir / name).read_bytes() for name in SOURCES}
    key = hashlib.sha256()
    for name, text in sorted(sources.items()):
        key.update(name.encode() + b"\0" + text + b"\0")
    key.update(repr((compiler_cmd, FLAGS, OPENMP, _cpu_signature(), platform.machine())).encode())
    target_dir = (directory or cache_dir()) / key.hexdigest()[:24]
    target = target_dir / "libaot_kernels.so"
    if target.is_file():
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    errors = []
    with tempfile.TemporaryDirectory(prefix="build-", dir=target_dir) as build:
        for name, text in sources.items():
            (Path(build) / name).write_bytes(text)
        for extra in (OPENMP, ()):  # without OpenMP the kernels run on one thread
            out = Path(build) / "libaot_kernels.so"
            cmd = [*compiler_cmd, *FLAGS, *extra, str(Path(build) / SOURCES[0]), "-o", str(out), "-lm"]
            try:
                result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as err:
                errors.append(f"$ {shlex.join(cmd)}\n{err}")
                continue
            if result.returncode == 0:
                os.replace(out, target)  # atomic: other processes see all of it or nothing
                return target
            errors.append(f"$ {shlex.join(cmd)}\n{result.stderr.strip()[-2000:]}")
    raise KernelBuildError("could not build the AOT CPU kernels:\n" + "\n".join(errors))


def kernels_enabled() -> bool:
    return os.environ.get(ENV_KERNELS, "").strip() != "0"


@functools.lru_cache(maxsize=None)
def _load() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(str(build_library()))
    except (KernelBuildError, OSError) as err:
        warnings.warn(
            f"opzoo-aot: the CPU kernels are unavailable, so the AOT residual runs its slower PyTorch "
            f"implementation on CPU ({err}). Set {ENV_KERNELS}=0 to silence this.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    if lib.aot_kernels_nmax() != NMAX:  # a library from other sources: the cache key should prevent it
        warnings.warn(f"opzoo-aot: the CPU kernel library at {build_library()} does not match this version; "
                      f"using the PyTorch implementation", RuntimeWarning, stacklevel=3)
        return None
    for name, (argtypes, restype) in SIGNATURES.items():
        for suffix in ("_f32", "_f64"):
            fn = getattr(lib, name + suffix)
            fn.argtypes, fn.restype = argtypes, restype
    lib.aot_pool_tensor.argtypes, lib.aot_pool_tensor.restype = [_int, ctypes.POINTER(_i64), _int], _p
    lib.aot_pool_empty.argtypes, lib.aot_pool_empty.restype = [], ctypes.c_size_t
    lib.aot_pool_cached_bytes.argtypes, lib.aot_pool_cached_bytes.restype = [], ctypes.c_size_t
    lib.aot_pool_set_limit.argtypes, lib.aot_pool_set_limit.restype = [ctypes.c_size_t], None
    lib.aot_pool_set_limit(_pool_limit_mb() << 20)
    return lib


def kernels() -> ctypes.CDLL | None:
    """The loaded kernel library, or None when turned off or unbuildable (built on first call)."""
    return _load() if kernels_enabled() else None


class Kernels:
    """The forward and backward functions of one kernel family for one dtype."""

    __slots__ = ("forward", "backward")

    def __init__(self, lib: ctypes.CDLL, family: str, suffix: str):
        self.forward = getattr(lib, f"aot_{family}_forward{suffix}")
        self.backward = getattr(lib, f"aot_{family}_backward{suffix}")


@functools.lru_cache(maxsize=None)
def _family(family: str, dtype) -> Kernels | None:
    suffix = {torch.float32: "_f32", torch.float64: "_f64"}.get(dtype)
    lib = _load()
    return None if suffix is None or lib is None else Kernels(lib, family, suffix)


def _kernel(family: str, n: int, first, tensors) -> Kernels | None:
    """The kernels for these tensors when they take them (CPU, one float dtype, ``n <= NMAX``, not
    under torch.compile), else None: the caller runs its PyTorch implementation."""
    if first.device.type != "cpu" or n > NMAX or not kernels_enabled() or torch.compiler.is_compiling():
        return None
    dtype = first.dtype
    for t in tensors:
        if t is not None and (t.dtype != dtype or t.device.type != "cpu"):
            return None
    return _family(family, dtype)


def stream_kernel(streams, others) -> Kernels | None:
    return _kernel("streams", streams.shape[1], streams, others)


def coefficient_kernel(pooled, params) -> Kernels | None:
    return _kernel("coefficients", pooled.shape[1], pooled, params)


class SubLayerKernels:
    """The three kernel families one fused sub-layer node uses (float32)."""

    __slots__ = ("streams", "coefficients", "carry")

    def __init__(self, streams: Kernels, coefficients: Kernels, carry: Kernels):
        self.streams, self.coefficients, self.carry = streams, coefficients, carry


@functools.lru_cache(maxsize=None)
def _sublayer_kernels() -> SubLayerKernels | None:
    families = [_family(name, torch.float32) for name in ("streams", "coefficients", "carry")]
    return None if None in families else SubLayerKernels(*families)


def sublayer_kernels(streams, others) -> SubLayerKernels | None:
    """The kernels for a fused sub-layer when every tensor is a float32 CPU tensor, else None."""
    if streams.dtype != torch.float32 or _kernel("streams", streams.shape[1], streams, others) is None:
        return None
    return _sublayer_kernels()


def ptr(tensor) -> int | None:
    """The data pointer of a contiguous tensor, None for None."""
    return None if tensor is None else tensor.data_ptr()


def check_status(status: int, what: str) -> None:
    """Kernels return 1 when their workspace allocation failed."""
    if status:
        raise MemoryError(f"opzoo-aot: the {what} kernel could not allocate its workspace")


ENV_POOL = "OPZOO_AOT_POOL_MB"
POOL_MIN_BYTES = 1 << 18  # smaller tensors come from PyTorch's allocator as usual
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.argtypes, _capsule_new.restype = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p], ctypes.py_object


def _pool_limit_mb() -> int:
    value = os.environ.get(ENV_POOL, "1024").strip()
    try:
        limit = int(value)
    except ValueError:
        raise ValueError(f"{ENV_POOL}={value!r}: expected a whole number of MiB (0 turns the pool off)") from None
    if limit < 0:
        raise ValueError(f"{ENV_POOL}={value!r}: expected a whole number of MiB >= 0")
    return limit


@functools.lru_cache(maxsize=None)
def _python_pool() -> BufferPool | None:
    limit = _pool_limit_mb() << 20
    return BufferPool(limit) if limit else None


def pooled_empty(like, *shape: int):
    """An uninitialized contiguous tensor of ``like``'s dtype and device. On CPU, when it is large,
    from the kernels' pool when they are loaded, else from the Python pool; otherwise from
    PyTorch's allocator."""
    if like.device.type != "cpu" or math.prod(shape) * like.element_size() < POOL_MIN_BYTES:
        return like.new_empty(shape)
    bits = {torch.float32: 32, torch.float64: 64}.get(like.dtype)
    lib = _load() if kernels_enabled() else None
    if lib is None or bits is None:
        pool = _python_pool()
        return pool.empty(like.dtype, shape) if pool is not None else like.new_empty(shape)
    managed = lib.aot_pool_tensor(len(shape), (_i64 * len(shape))(*shape), bits)
    if not managed:
        raise MemoryError(f"opzoo-aot: could not allocate a {list(shape)} buffer")
    return torch.from_dlpack(_capsule_new(managed, b"dltensor", None))


def _pools():
    """(the kernels' library or None, the Python pool or None), without loading or creating either."""
    lib = _load() if _load.cache_info().currsize else None
    pool = _python_pool() if _python_pool.cache_info().currsize else None
    return lib, pool


def empty_cache() -> int:
    """Release every free buffer the pools keep; returns the bytes released."""
    lib, pool = _pools()
    return (int(lib.aot_pool_empty()) if lib else 0) + (pool.empty_cache() if pool else 0)


def cached_bytes() -> int:
    """Bytes of free buffers the pools keep for reuse."""
    lib, pool = _pools()
    return (int(lib.aot_pool_cached_bytes()) if lib else 0) + (pool.cached_bytes() if pool else 0)
