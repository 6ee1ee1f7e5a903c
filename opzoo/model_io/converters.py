"""Foreign checkpoints: safe unpickling-free loading and what a converter returns.

A converter, registered with ``registry.register_converter(name, fn)``, is a callable
``fn(path, **options) -> ConvertedCheckpoint`` that reads a foreign checkpoint (e.g. the official
DPOT ``.pth``) and returns opzoo weights with the architecture and config they fit; the builder
(:func:`opzoo.model_io.pretrained.convert_to_repo`, ``opzoo.load(..., pretrained=True)``) runs it.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, Iterable

import torch

from ..errors import CheckpointError


@dataclasses.dataclass
class ConvertedCheckpoint:
    architecture: str
    model_args: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    pretrained_cfg: dict[str, Any] = dataclasses.field(default_factory=dict)
    preset: str | None = None
    card: str | None = None  # a model card template (opzoo.model_io.model_card) for the repo; default: the preset's


def safe_torch_load(path: str | os.PathLike, allow: Iterable[type] = (), placeholders: bool = False,
                    mapped: bool = False) -> Any:
    """``torch.load(weights_only=True)`` with only the classes in ``allow`` added to the allow-list.

    Never falls back to full unpickling: a file that needs anything else is refused with a
    CheckpointError, and none of its code runs. ``placeholders``: an object of any other class (a ruamel
    ``ScalarFloat`` in an optimizer's state) is read as an :class:`Placeholder` holding its data, its class never
    imported; a name the file would call (how a pickle runs code) is still refused. A caller that asks for them reads
    what it needs (tensors) and checks it. A zip checkpoint's records are checked first (each one's CRC-32,
    reading the file once), and the tensors are read whole, not memory-mapped: torch's reader then checks that each
    record holds as many bytes as its tensor needs (a memory-mapped load reads a short record's missing bytes from
    whatever follows it in the file). ``mapped``: the tensors of a zip checkpoint memory-mapped instead, for a caller
    that reads what the file records beside them (a config) and their shapes, never their values (a load check of a
    file whose tensors are already held: reading them again would hold the weights twice).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: {'not a regular file (a FIFO, device or directory)' if path.exists() else 'no such checkpoint file'}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: an empty file (0 bytes), not a checkpoint; download or copy it again")
    with open(path, "rb") as f:
        head = f.read(2)
    zipped = zipfile.is_zipfile(path)
    if not zipped and head == b"PK":  # a zip's first record, but no central directory at its end
        raise CheckpointError(f"{path}: a zip archive cut short ({path.stat().st_size:,} bytes, its end is missing): the "
                              f"download or copy was interrupted; download or copy it again")
    if not zipped and head[:1] != b"\x80":  # neither torch's zip format nor a pickle (protocol 2+ starts 0x80)
        raise CheckpointError(f"{path}: not a PyTorch checkpoint (neither a zip archive nor a pickle: it starts "
                              f"with {head!r}); is it the weights file?")
    if zipped:
        try:
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
                folders = sorted({name.split("/", 1)[0] if "/" in name else "" for name in archive.namelist()})
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise CheckpointError(f"{path}: a damaged checkpoint archive ({e}); download or copy it again") from None
        if len(folders) != 1 or not folders[0]:  # torch.save writes every record under one folder
            shown = ", ".join(repr(f or "(no folder)") for f in folders[:4])
            raise CheckpointError(f"{path}: a zip archive whose records lie in {len(folders)} top folders ({shown}), "
                                  f"where torch.save writes one: records were added to or removed from the "
                                  f"checkpoint; download or copy it again")
        if bad is not None:
            raise CheckpointError(f"{path}: the record {bad} does not match its checksum (CRC-32): the file is damaged; "
                                  f"download or copy it again")
    stand_ins = placeholder_classes(path) if placeholders and zipped else []
    try:
        with torch.serialization.safe_globals([*allow, *stand_ins]):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mapped and zipped)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - whatever torch's reader raises on a hostile or damaged file: one line
        raise CheckpointError(refusal(path, e)) from None


class Placeholder:
    """An object a checkpoint holds, of a class opzoo never imports: what the file gave to build it (``args``, and
    ``state``), kept as data. The class is a stand-in named as the file names it (``placeholder_classes``); building
    one by calling it, which is how a pickle runs code, is refused."""

    def __new__(cls, *args: Any) -> "Placeholder":  # a pickle's NEWOBJ: cls.__new__(cls, *args), no call
        obj = object.__new__(cls)
        obj.args, obj.state = args, None
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # only a call of the class (a pickle's REDUCE) runs this
        raise PlaceholderCalled(f"the file calls {type(self).__module__}.{type(self).__qualname__}")

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __repr__(self) -> str:
        return f"<placeholder for {type(self).__module__}.{type(self).__qualname__}{self.args!r}>"


class PlaceholderCalled(pickle.UnpicklingError):
    """A checkpoint calls a name opzoo does not know (a pickle running code): refused."""


def placeholder_classes(path: Path) -> list:
    """A :class:`Placeholder` subclass for each class a zip checkpoint names outside torch's weights-only allow-list,
    as ``(class, "module.name")``; found by reading the pickle's opcodes (nothing is executed). Empty on a torch
    without ``get_unsafe_globals_in_checkpoint`` (the file is then refused as before)."""
    unsafe = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if unsafe is None:
        return []
    out = []
    for full in unsafe(str(path)):
        module, _, name = full.rpartition(".")
        stand_in = type(name, (Placeholder,), {"__module__": module, "__qualname__": name})
        out.append((stand_in, full))
    return out


def refusal(path: Path, e: BaseException) -> str:
    """Why a weights-only load refused ``path``, in one line of opzoo's own words (torch's text advises turning the
    protection off, which opzoo never does)."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    found = re.search(r"GLOBAL ([\w.]+)", text) or re.search(r"Unsupported (?:global|operand)[^:]*: ([^\s.]+(?:\.\w+)*)",
                                                              text)
    called = re.search(r"the file calls ([\w.]+)", text)
    if called:
        return (f"{path}: calls {called.group(1)} while it is read (how a pickle runs code): refused, and nothing of "
                f"it ran; opzoo reads tensors, numbers, strings and containers, never code")
    if isinstance(e, pickle.UnpicklingError) or "Weights only load failed" in text:
        what = f" ({found.group(1)})" if found else ""
        return (f"{path}: holds Python objects{what} that a weights-only load refuses: opzoo reads tensors, numbers, "
                f"strings and containers, never code; ask for a tensors-only file (safetensors, or torch.save of a "
                f"state_dict)")
    if isinstance(e, EOFError) or "EOF" in text or "truncated" in text.lower():
        return f"{path}: the checkpoint ends early (truncated); download or copy it again"
    if "does not match expected size" in text:  # a record shorter (or longer) than its tensor
        return f"{path}: a tensor's record does not hold its tensor's bytes ({text.splitlines()[0][:160]}): the file is " \
               f"damaged or was edited; download or copy it again"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(e).__name__)
    return f"{path}: not a readable PyTorch checkpoint ({first[:200]}); download or copy it again"


__all__ = ["ConvertedCheckpoint", "safe_torch_load", "Placeholder"]
