"""Training checkpoints: a directory per step, written to a temp dir and renamed (atomic), keep-last-k.

Layout of ``<run>/checkpoints/step-00000100/``:

- ``model.safetensors``      the model weights (unwrapped names)
- ``optimizer.safetensors``  optimizer state tensors as ``state/<param name>/<key>``
- ``extra.safetensors``      RNG states, EMA weights (``ema/<name>``), hook tensors (``hook<i>/<key>``)
- ``state.json``             step, optimizer param-group settings, hook JSON state, python/numpy RNG, run info

No pickle anywhere. A ``step-*`` directory exists only once complete (``os.rename`` of the finished
temp dir), so killing a run at any moment leaves the previous checkpoints readable.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import OpzooError

PREFIX = "step-"
TMP_PREFIX = ".tmp-"
#: Test hook: ``SECONDS`` or ``STEP:SECONDS`` -- sleep after the weights are written, mid-checkpoint
#: (of every checkpoint, or only of step STEP), with a ``WRITING`` marker file, so a test can kill then.
SLEEP_ENV = "OPZOO_TEST_CHECKPOINT_SLEEP"


def _test_sleep(step: int) -> float:
    spec = os.environ.get(SLEEP_ENV, "")
    if not spec:
        return 0.0
    at, sep, seconds = spec.rpartition(":")
    if sep and int(at) != step:
        return 0.0
    return float(seconds)
FILES = ("model.safetensors", "optimizer.safetensors", "extra.safetensors", "state.json")


class CheckpointReadError(OpzooError):
    """A checkpoint directory that cannot be read back."""


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:08d}"


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """Complete checkpoints in ``directory``, oldest first."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [p for p in d.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX):].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX):]))


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {"rng/torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng/cuda{i}"] = s
    np_state = np.random.get_state()
    plain = {"python": _jsonable(random.getstate()),
             "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])]}
    return tensors, plain


def set_rng_state(tensors: Mapping[str, torch.Tensor], plain: Mapping[str, Any]) -> None:
    torch.set_rng_state(tensors["rng/torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng/cuda"))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    random.setstate(_tuplify(plain["python"]))
    n = plain["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), n[2], n[3], n[4]))


def _jsonable(x: Any) -> Any:
    return [_jsonable(v) for v in x] if isinstance(x, (list, tuple)) else x


def _tuplify(x: Any) -> Any:
    return tuple(_tuplify(v) for v in x) if isinstance(x, list) else x


def optimizer_to_flat(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """Optimizer state by parameter name: tensors ``state/<name>/<key>`` and JSON group settings."""
    tensors, groups = {}, []
    for group in optimizer.param_groups:
        names = group["names"]
        for name, p in zip(names, group["params"]):
            for key, value in optimizer.state.get(p, {}).items():
                t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
                if hasattr(t, "full_tensor"):  # an FSDP2 DTensor shard: gather (collective)
                    t = t.full_tensor()
                tensors[f"state/{name}/{key}"] = t.detach().cpu().contiguous()
        groups.append({k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items() if k != "params"})
    return tensors, groups


def optimizer_from_flat(optimizer: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor], groups: list[dict[str, Any]], where: str) -> None:
    if len(groups) != len(optimizer.param_groups):
        raise CheckpointReadError(f"{where}: {len(groups)} parameter groups saved, the optimizer has {len(optimizer.param_groups)}")
    for saved, group in zip(groups, optimizer.param_groups):
        if saved["names"] != group["names"]:
            raise CheckpointReadError(f"{where}: parameter groups hold different parameters than this run's")
    for saved, group in zip(groups, optimizer.param_groups):
        for k, v in saved.items():
            group[k] = tuple(v) if isinstance(group.get(k), tuple) else v
        for name, p in zip(group["names"], group["params"]):
            prefix = f"state/{name}/"
            state = {k[len(prefix):]: _like_param(v, p) for k, v in tensors.items() if k.startswith(prefix)}
            if state:
                if "step" in state and not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
                    state["step"] = state["step"].item()
                optimizer.state[p] = state


def _like_param(value: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """A saved full state tensor placed like parameter ``p`` (sharded again for an FSDP2 DTensor)."""
    if hasattr(p, "device_mesh") and value.shape == p.shape:
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(value.to(p.device_mesh.device_type), p.device_mesh, p.placements)
    return value.to(p.device)


def write_checkpoint(directory: str | os.PathLike, step: int, *, model_state: Mapping[str, torch.Tensor],
                     optimizer_state: tuple[dict[str, torch.Tensor], list[dict[str, Any]]],
                     state: dict[str, Any], extra: dict[str, torch.Tensor], keep_last: int) -> Path:
    """Write checkpoint ``step`` atomically, then delete all but the newest ``keep_last``.

    ``optimizer_state`` is :func:`optimizer_to_flat`'s result (gathered on every rank under FSDP).
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    tmp = root / f"{TMP_PREFIX}{checkpoint_name(step)}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_file({k: v.detach().cpu().contiguous() for k, v in model_state.items()}, str(tmp / "model.safetensors"))
    sleep = _test_sleep(step)
    if sleep > 0:
        (tmp / "WRITING").write_text(str(os.getpid()))
        time.sleep(sleep)
        (tmp / "WRITING").unlink()
    opt_tensors, groups = optimizer_state
    save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
    rng_tensors, rng_plain = rng_state()
    save_file({**rng_tensors, **extra}, str(tmp / "extra.safetensors"))
    (tmp / "state.json").write_text(json.dumps({**state, "step": step, "param_groups": groups, "rng": rng_plain}))
    for name in FILES:
        _fsync_file(tmp / name)
    _fsync_dir(tmp)
    if final.exists():  # re-writing the same step (e.g. after a resume): move the old one aside first
        _remove(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    for old in list_checkpoints(root)[:-keep_last]:
        _remove(old)
    return final


def _remove(path: Path) -> None:
    """Rename away first, so a kill during deletion never leaves a partial ``step-*`` directory."""
    doomed = path.with_name(f"{TMP_PREFIX}delete-{path.name}-{os.getpid()}")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def clean_temporaries(directory: str | os.PathLike) -> None:
    """Remove temp dirs left by killed writers."""
    d = Path(directory)
    if d.is_dir():
        for p in d.iterdir():
            if p.name.startswith(TMP_PREFIX):
                shutil.rmtree(p, ignore_errors=True)


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read every file of a checkpoint; raises CheckpointReadError naming the file at fault."""
    path = Path(path)
    out: dict[str, Any] = {}
    for name in FILES:
        f = path / name
        if not f.is_file():
            raise CheckpointReadError(f"{f}: missing")
        try:
            out[name] = json.loads(f.read_text()) if name.endswith(".json") else load_file(str(f))
        except (SafetensorError, OSError, json.JSONDecodeError) as e:
            raise CheckpointReadError(f"{f}: unreadable ({e})") from None
    return out


def latest_checkpoint(directory: str | os.PathLike) -> tuple[Path, dict[str, Any]] | None:
    """The newest readable checkpoint (falling back to older ones with a warning), or None."""
    import warnings

    for path in reversed(list_checkpoints(directory)):
        try:
            return path, read_checkpoint(path)
        except CheckpointReadError as e:
            warnings.warn(f"skipping unreadable checkpoint: {e}", stacklevel=2)
    return None
