"""Reading a safetensors file's tensors: the one reader of the format (opzoo's own files and an upstream's), each tensor
read straight from the file into memory torch allocates, 64-byte aligned. No torch at import."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .errors import CheckpointError

if TYPE_CHECKING:
    import torch

ALIGNMENT = 64  # bytes: what torch's CPU allocator gives, and what its kernels' results are reproducible at


def aligned(t):
    """``t``, or a copy of it in memory torch allocated when its data is not ``ALIGNMENT``-aligned (safetensors reads
    each tensor where malloc puts it): a float32 matmul's result depends on its operands' alignment (the vectorized
    kernel's order of summation), so a model must compute on its loaded weights what it computed before saving."""
    return t if t.device.type != "cpu" or t.data_ptr() % ALIGNMENT == 0 else t.clone()


def read_safetensors(path: str | os.PathLike, error: type[Exception] = CheckpointError) -> dict[str, "torch.Tensor"]:
    """The tensors of a safetensors file, each read straight from the file into memory torch allocates (aligned:
    :func:`aligned`), one after another: a load holds the file's bytes once, never mapped beside a copy (a mapped
    file's pages count in the resident memory as much as the copy does). The header is checked by safetensors'
    own reader first (``error``, naming the file, when it is not a safetensors file).

    Every load of opzoo reads a safetensors file with it, and a converter of a family reads upstream's with it too
    (``opzoo.kit.read_safetensors``): one reader of the format."""
    import json
    import sys

    import torch
    from safetensors import SafetensorError, safe_open

    from .files import check_regular

    dtypes = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool, "C64": torch.complex64, "C128": torch.complex128}

    try:
        check_regular(path)  # a FIFO or /dev/zero in a damaged cache would hang or fill the memory
        with safe_open(str(path), framework="pt") as f:  # safetensors validates the header and the offsets
            names = list(f.keys())
        with open(path, "rb") as raw:
            size = int.from_bytes(raw.read(8), "little")
            header = json.loads(raw.read(size))
            start = 8 + size
            tensors = {}
            for name in names:
                entry = header[name]
                dtype = dtypes.get(entry["dtype"])
                begin, end = entry["data_offsets"]
                if dtype is None or sys.byteorder != "little":  # a kind this reader does not know: safetensors'
                    with safe_open(str(path), framework="pt") as f:
                        tensors[name] = aligned(f.get_tensor(name))
                    continue
                data = torch.empty(end - begin, dtype=torch.uint8)
                raw.seek(start + begin)
                if raw.readinto(memoryview(data.numpy())) != end - begin:
                    raise OSError(f"tensor {name} is cut short")
                tensors[name] = data.view(dtype).reshape(entry["shape"])
            return tensors
    except (SafetensorError, OSError, ValueError, KeyError) as e:
        raise error(f"{path}: not a readable safetensors file ({e})") from None


def safetensors_names(path: str | os.PathLike, error: type[Exception] = CheckpointError) -> list[str]:
    """The tensor names of a safetensors file, from its header alone (nothing else is read)."""
    from safetensors import SafetensorError, safe_open

    from .files import check_regular

    try:
        check_regular(path)
        with safe_open(str(path), framework="pt") as f:
            return list(f.keys())
    except (SafetensorError, OSError) as e:
        raise error(f"{path}: not a readable safetensors file ({e})") from None


__all__ = ["read_safetensors", "safetensors_names", "aligned", "ALIGNMENT"]
