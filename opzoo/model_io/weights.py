"""Weights: reading a safetensors file and loading it into a model strictly, every name and shape checked before any
parameter changes (a mismatch names the tensors at fault)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from ..errors import WeightsError
from ..files import check_regular

SHOWN = 8  # tensors named per kind in a mismatch message



class TensorMismatchError(WeightsError):
    """Tensors missing, extra or mis-shaped for the model (a config that does not fit the file), as opposed to a file
    whose tensors fit but hold what opzoo refuses (non-finite values, another kind of number)."""

def check_state_dict(model: torch.nn.Module, shapes: Mapping[str, tuple[int, ...]], source: str) -> None:
    """Raise WeightsError listing every missing, unexpected and mis-shaped tensor (one line)."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    misshaped = sorted(k for k in set(expected) & set(shapes) if tuple(shapes[k]) != expected[k])
    if missing or unexpected or misshaped:
        def some(names: list[str]) -> str:
            return ", ".join(names[:SHOWN]) + (f", and {len(names) - SHOWN} more" if len(names) > SHOWN else "")

        parts = []
        if missing:
            parts.append(f"missing tensors ({len(missing)}): {some(missing)}")
        if unexpected:
            parts.append(f"unexpected tensors ({len(unexpected)}): {some(unexpected)}")
        parts += [f"mis-shaped tensor {k}: file {list(shapes[k])}, model {list(expected[k])}" for k in misshaped[:SHOWN]]
        if len(misshaped) > SHOWN:
            parts.append(f"and {len(misshaped) - SHOWN} more mis-shaped tensors")
        raise TensorMismatchError(f"{source} does not match {type(model).__name__}: {'; '.join(parts)}")


def load_state_dict_strict(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """Check names, shapes and kinds of number first, so a bad state dict changes nothing; then load."""
    check_state_dict(model, {k: tuple(v.shape) for k, v in state_dict.items()}, source)
    check_dtypes(model, state_dict, source)
    check_finite(state_dict, source)
    model.load_state_dict(state_dict, strict=True)


def check_dtypes(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """The one dtype rule of every load (converted or opzoo's own): a tensor goes into a model tensor of its kind, a
    real floating tensor (float16, bfloat16, float32, float64) into a floating one, an integer one into an integer
    one; anything else (an int64, bool or complex weight, which no upstream file holds) is refused naming it, never
    cast in silence."""
    own = model.state_dict()
    bad = []
    for name, value in state_dict.items():
        target = own.get(name)
        if target is None:
            continue
        kind = (value.is_floating_point(), value.is_complex(), value.dtype == torch.bool)
        if kind != (target.is_floating_point(), target.is_complex(), target.dtype == torch.bool):
            bad.append(f"{name} ({str(value.dtype).removeprefix('torch.')}, the model's is "
                       f"{str(target.dtype).removeprefix('torch.')})")
    if bad:
        shown = ", ".join(bad[:SHOWN]) + (f" and {len(bad) - SHOWN} more" if len(bad) > SHOWN else "")
        raise WeightsError(f"{source}: tensors of another kind of number than the model's: {shown}; no upstream file "
                           f"holds such weights, and they are not cast")


def check_finite(state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """WeightsError naming every tensor of ``state_dict`` that holds NaN or Inf (no load takes such weights)."""
    bad = [k for k, v in state_dict.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        shown = ", ".join(sorted(bad)[:SHOWN]) + (f" and {len(bad) - SHOWN} more" if len(bad) > SHOWN else "")
        raise WeightsError(f"{source}: non-finite values in {shown}")


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file (WeightsError naming the file when it is not one)."""
    try:
        check_regular(path)  # a FIFO or /dev/zero in a damaged cache would hang or fill the memory
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise WeightsError(f"{path}: not a readable safetensors file ({e})") from None


def load_weights(model: torch.nn.Module, path: str | os.PathLike, shown_as: str | os.PathLike | None = None,
                 verify=None) -> None:
    """Load a safetensors file strictly into ``model``: names and shapes from its header first (nothing
    else is read from a file that does not fit), then ``verify()`` (e.g. its checksum, which reads every
    byte), then the tensors. ``shown_as`` names it in messages."""
    path, where = Path(path), str(shown_as or path)
    try:
        check_regular(path)
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError) as e:
        raise WeightsError(f"{where}: not a readable safetensors file ({e})") from None
    check_state_dict(model, shapes, where)
    if verify is not None:
        verify()
    load_state_dict_strict(model, load_file(str(path)), where)


def unshared_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """State dict with contiguous tensors; tensors sharing storage are cloned (safetensors refuses them)."""
    seen: set[int] = set()
    out = {}
    for k, v in model.state_dict().items():
        v = v.detach().contiguous()
        ptr = v.untyped_storage().data_ptr()
        out[k] = v.clone() if ptr in seen else v
        seen.add(ptr)
    return out


__all__ = ["check_state_dict", "check_finite", "load_state_dict_strict", "read_state_dict", "load_weights", "unshared_state_dict"]
