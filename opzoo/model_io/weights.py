"""Weights: reading a safetensors file and loading it into a model strictly, every name and shape checked before any
parameter changes (a mismatch names the tensors at fault).

A model about to receive its weights is built on the ``meta`` device (:func:`build_for_weights`: wholly, or its
parameters alone where it computes other tensors; no random initialization, no memory), and the tensors read are then
its parameters (``load_state_dict(assign=True)``): a load holds the weights once, not a random copy beside them
(docs/benchmarks.md, "Memory of a load")."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Mapping

import torch
from safetensors import SafetensorError, safe_open

from ..errors import WeightsError
from ..files import check_regular
from ..tensor_files import aligned

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


@contextlib.contextmanager
def parameters_on_meta():
    """Inside, every parameter a module registers is moved to the ``meta`` device as it is registered (one tensor at a
    time, so nothing of the size of the model is ever allocated, and its random initialization costs nothing);
    buffers are built as the model builds them (its tables, masks and grids). For a model whose weights are loaded
    next by :func:`load_state_dict_strict`, which makes the tensors read its parameters."""
    original = torch.nn.Module.register_parameter

    def register(self, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.detach().to("meta"), requires_grad=param.requires_grad)
        original(self, name, param)

    torch.nn.Module.register_parameter = register
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original


def build_for_weights(build):
    """``build()`` for a model whose weights are loaded next, allocating as little as it can: entirely on the ``meta``
    device when nothing but its parameters and persistent buffers (which the file holds) is left without values;
    else with its parameters alone on meta (:func:`parameters_on_meta`), its other tensors (tables, masks, grids it
    computes) built as usual. A build that cannot run on meta (it reads a value) is the second kind too."""
    try:
        with torch.device("meta"):
            model = build()
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        model = None
    if model is not None and not _unloaded_meta_tensors(model):
        return model
    with parameters_on_meta():
        return build()


def _unloaded_meta_tensors(model: torch.nn.Module) -> list[str]:
    """The meta tensors of ``model`` that no weights file fills: non-persistent buffers, and tensors kept as plain
    attributes (a scale, a table not registered)."""
    persistent = set(model.state_dict(keep_vars=True))
    left = [n for n, b in model.named_buffers() if b.is_meta and n not in persistent]
    registered = {id(t) for t in [*model.parameters(), *model.buffers()]}
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            values = value if isinstance(value, (list, tuple)) else value.values() if isinstance(value, dict) else \
                [value]
            for v in values:
                if isinstance(v, torch.Tensor) and v.is_meta and id(v) not in registered:
                    left.append(f"{prefix}.{key}" if prefix else key)
    return left


def has_meta_parameters(model: torch.nn.Module) -> bool:
    return any(p.is_meta for p in model.parameters())


def load_state_dict_strict(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """Check names, shapes and kinds of number first, so a bad state dict changes nothing; then load. A model built
    with :func:`parameters_on_meta` takes the tensors themselves as its parameters (cast to its own dtypes and
    aligned, in ``state_dict`` itself when it is a dict: its entries become the model's tensors; shared parameters
    stay shared); any other is copied into."""
    check_state_dict(model, {k: tuple(v.shape) for k, v in state_dict.items()}, source)
    check_dtypes(model, state_dict, source)
    check_finite(state_dict, source)
    if not has_meta_parameters(model):
        model.load_state_dict(state_dict, strict=True)
        return
    own = model.state_dict(keep_vars=True)
    # each tensor replaced in the mapping as it is cast or aligned, so that the one it replaces is freed at once: the
    # weights are held once, plus one tensor (a converter's torch.load gives unaligned storages)
    cast = state_dict if isinstance(state_dict, dict) else dict(state_dict)
    for k in list(cast):
        cast[k] = aligned(cast[k].to(own[k].dtype))
    shared: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        shared.setdefault(id(param), []).append(name)
    model.load_state_dict(cast, strict=True, assign=True)
    for names in (n for n in shared.values() if len(n) > 1):  # one parameter under several names: tied again
        first = model.get_parameter(names[0])
        for name in names[1:]:
            owner, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(owner) if owner else model, leaf, first)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta] + \
        _unloaded_meta_tensors(model)
    if left:
        raise WeightsError(f"{source}: {type(model).__name__} holds tensors no file fills ({', '.join(left[:SHOWN])}): "
                           f"built on the meta device, they have no values")


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


FINITE_CHUNK = 1 << 16  # elements checked at a time: the check's temporaries stay small beside the weights


def _finite(t: torch.Tensor) -> bool:
    flat = t.detach().reshape(-1)
    return all(bool(torch.isfinite(piece).all()) for piece in flat.split(FINITE_CHUNK))


def check_finite(state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """WeightsError naming every tensor of ``state_dict`` that holds NaN or Inf (no load takes such weights)."""
    bad = [k for k, v in state_dict.items() if v.is_floating_point() and not _finite(v)]
    if bad:
        shown = ", ".join(sorted(bad)[:SHOWN]) + (f" and {len(bad) - SHOWN} more" if len(bad) > SHOWN else "")
        raise WeightsError(f"{source}: non-finite values in {shown}")


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, read straight into aligned memory (:func:`opzoo.tensor_files.read_safetensors`;
    WeightsError naming the file when it is not a safetensors file)."""
    from ..tensor_files import read_safetensors

    return read_safetensors(path, WeightsError)


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
    load_state_dict_strict(model, read_state_dict(path), where)


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


__all__ = ["parameters_on_meta", "build_for_weights", "has_meta_parameters", "check_state_dict", "check_finite", "load_state_dict_strict", "read_state_dict", "load_weights", "unshared_state_dict"]
