"""Foreign checkpoints: safe unpickling-free loading and registered converters.

A converter, registered with ``registry.register_converter(name, fn)``, is a callable
``fn(path, **options) -> ConvertedCheckpoint`` that reads a foreign checkpoint (e.g. the official DPOT
``.pth``) and returns opzoo weights with the architecture and config they fit.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from .errors import CheckpointError


@dataclasses.dataclass
class ConvertedCheckpoint:
    architecture: str
    model_args: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    pretrained_cfg: dict[str, Any] = dataclasses.field(default_factory=dict)
    preset: str | None = None
    card: str | None = None  # a model card template (opzoo.model_card) for the repo; default: the preset's


def safe_torch_load(path: str | os.PathLike, allow: Iterable[type] = ()) -> Any:
    """``torch.load(weights_only=True)`` with only the classes in ``allow`` added to the allow-list.

    Never falls back to full unpickling: a file that needs anything else is refused with a
    CheckpointError, and none of its code runs.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        with torch.serialization.safe_globals(list(allow)):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: refused or unreadable as a weights-only checkpoint: {e}") from None


def convert_file(converter: str, path: str | os.PathLike, **options: Any) -> ConvertedCheckpoint:
    """Run registered converter ``converter`` on ``path``; ``options`` are its keyword arguments."""
    from .plugins import get_registry

    return get_registry().get("converter", converter)(Path(path), **options)


def convert_to_repo(converter: str, path: str | os.PathLike, out_dir: str | os.PathLike, **options: Any) -> Path:
    """Convert a foreign checkpoint and write an opzoo repo (config.json, model.safetensors, README.md)."""
    from .factory import create_model
    from .hub import load_state_dict_strict, save_pretrained

    converted = convert_file(converter, path, **options)
    model = create_model(converted.architecture, **converted.model_args)
    load_state_dict_strict(model, converted.state_dict, f"{path} (converted by {converter!r})")
    model.preset_name = converted.preset
    if converted.card is not None:
        model.card_template = converted.card
    model.pretrained_cfg = {**({"preset": converted.preset} if converted.preset else {}), **converted.pretrained_cfg}
    return save_pretrained(model, out_dir)


def strip_prefix(state_dict: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Remove ``prefix`` (e.g. DDP's ``module.``) from every key that has it."""
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state_dict.items()}


__all__ = ["ConvertedCheckpoint", "safe_torch_load", "convert_file", "convert_to_repo", "strip_prefix"]
