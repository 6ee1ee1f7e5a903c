"""Training checkpoints: a directory per step, written to a temp dir and renamed (atomic), keep-last-k.

Layout of ``<run>/checkpoints/step-00000100/``:

- ``model.safetensors``      the model weights (unwrapped names)
- ``optimizer.safetensors``  optimizer state tensors as ``state/<param name>/<key>``
- ``extra.safetensors``      RNG states, EMA weights (``ema/<name>``), hook tensors (``hook<i>/<key>``)
- ``state.json``             step, optimizer param-group settings, hook JSON state, python/numpy RNG, run info
- ``checksums.json``         the sha256 of each file above, written last (atomically)

No pickle anywhere. A ``step-*`` directory exists only once complete (``os.rename`` of the finished
temp dir), so killing a run at any moment leaves the previous checkpoints readable. Reading one
verifies its checksums first: a file damaged after it was written is named and the checkpoint is
skipped (:func:`resumable_checkpoint` falls back to the previous good one).

A checkpoint is written into a temporary directory named by :func:`opzoo.files.temporary_name` (its writer's PID and
host in the name): only its writer removes it, or a later run on the same host once that process is gone
(:func:`opzoo.files.clean_dead_temporaries`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..disk_full import disk_full_as_error
from ..errors import OpzooError
from ..files import new_file_mode, read_json, temporary_name
from ..model_io.checksums import ChecksumError, read_checksums, verify_checksums, write_checksums

PREFIX = "step-"
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
CHECKSUMS = "checksums.json"


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


GROUPING_HINT = ("the run's config groups parameters differently from the run that saved it (optimizer."
                 "filter_bias_and_norm, optimizer.layer_decay or an optimizer hook); a run started before "
                 "filter_bias_and_norm existed (default true now) had one group: set `optimizer.filter_bias_and_norm: "
                 "false` in its config to resume it")


def optimizer_from_flat(optimizer: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor], groups: list[dict[str, Any]], where: str) -> None:
    if len(groups) != len(optimizer.param_groups):
        raise CheckpointReadError(f"{where}: {len(groups)} parameter groups saved, the optimizer has "
                                  f"{len(optimizer.param_groups)}: {GROUPING_HINT}")
    for saved, group in zip(groups, optimizer.param_groups):
        if saved["names"] != group["names"]:
            raise CheckpointReadError(f"{where}: parameter groups hold different parameters than this run's: "
                                      f"{GROUPING_HINT}")
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
                     state: dict[str, Any], extra: dict[str, torch.Tensor], keep_last: int,
                     protect: Iterable[int] = ()) -> Path:
    """Write checkpoint ``step`` atomically, then delete all but the newest ``keep_last`` and those of the steps in
    ``protect`` (a run's best on validation).

    ``optimizer_state`` is :func:`optimizer_to_flat`'s result (gathered on every rank under FSDP).
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    tmp = temporary_name(final)
    kept = list_checkpoints(root)
    advice = (f"the previous checkpoint {kept[-1]} is intact" if kept else "no earlier checkpoint exists") + \
        "; free space and re-run the same command to resume"
    try:
        with disk_full_as_error(f"checkpoint of step {step}", advice) as writing:
            tmp.mkdir()
            writing.path = tmp / "model.safetensors"
            save_file({k: v.detach().cpu().contiguous() for k, v in model_state.items()}, str(writing.path))
            sleep = _test_sleep(step)
            if sleep > 0:
                (tmp / "WRITING").write_text(str(os.getpid()))
                time.sleep(sleep)
                (tmp / "WRITING").unlink()
            opt_tensors, groups = optimizer_state
            writing.path = tmp / "optimizer.safetensors"
            save_file(opt_tensors, str(writing.path))
            rng_tensors, rng_plain = rng_state()
            writing.path = tmp / "extra.safetensors"
            save_file({**rng_tensors, **extra}, str(writing.path))
            writing.path = tmp / "state.json"
            writing.path.write_text(json.dumps({**state, "step": step, "param_groups": groups, "rng": rng_plain}))
            new_file_mode(*(tmp / name for name in FILES))  # safetensors writes 0600; every other file is 0644
            for name in FILES:
                writing.path = tmp / name
                _fsync_file(tmp / name)
            writing.path = tmp / CHECKSUMS
            write_checksums(tmp, FILES, CHECKSUMS)  # last: its presence means every file is complete
            _fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # ours (this pid): nothing half-written stays behind
        raise
    if final.exists():  # re-writing the same step (e.g. after a resume): move the old one aside first
        _remove(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    kept_steps = {checkpoint_name(s) for s in protect}
    for old in list_checkpoints(root)[:-keep_last]:
        if old.name not in kept_steps:
            _remove(old)
    return final


def _remove(path: Path) -> None:
    """Rename away first, so a kill during deletion never leaves a partial ``step-*`` directory."""
    doomed = temporary_name(path, "delete")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def read_checkpoint(path: str | os.PathLike, trust_unverified: bool = False) -> dict[str, Any]:
    """Verify a checkpoint's checksums, then read every file; raises CheckpointReadError naming the
    file at fault. A checkpoint without ``checksums.json`` is refused (it was cut off while being
    written, or comes from an opzoo before 0.1) unless ``trust_unverified``, then read with a warning."""
    path = Path(path)
    record = path / CHECKSUMS
    if not record.is_file() and not trust_unverified:
        raise CheckpointReadError(
            f"{path}: no {CHECKSUMS}. opzoo writes it last, once every other file is complete and synced, so this "
            f"checkpoint was cut off while being written or comes from an opzoo before 0.1, and its files cannot be "
            f"verified; to resume from it anyway: --set checkpoint.trust_unverified=true")
    if record.is_file():
        try:
            sums = read_checksums(record)
            missing = [n for n in FILES if n not in sums]
            if missing:
                raise CheckpointReadError(f"{record}: no checksum for {', '.join(missing)}")
            verify_checksums(path, sums)
        except ChecksumError as e:
            raise CheckpointReadError(str(e)) from None
    else:
        warnings.warn(f"{path}: no {CHECKSUMS}; its files are not verified (checkpoint.trust_unverified)", stacklevel=2)
    out: dict[str, Any] = {}
    for name in FILES:
        f = path / name
        if not f.is_file():
            raise CheckpointReadError(f"{f}: missing")
        try:
            out[name] = (read_json(f, "a checkpoint's state", follow_links=False, error=CheckpointReadError)
                         if name.endswith(".json") else load_file(str(f)))
        except (SafetensorError, OSError) as e:
            raise CheckpointReadError(f"{f}: unreadable ({e})") from None
    return out


def resumable_checkpoint(directory: str | os.PathLike,
                         trust_unverified: bool = False) -> tuple[Path | None, dict[str, Any] | None, list[str]]:
    """The newest checkpoint that verifies and reads: ``(path, files, failures)``; each checkpoint
    skipped on the way is warned about, naming the file at fault and the one used instead.
    ``(None, None, failures)`` when there is none good (``failures`` empty: no checkpoints at all)."""
    failures: list[str] = []
    for path in reversed(list_checkpoints(directory)):
        try:
            files = read_checkpoint(path, trust_unverified)
        except CheckpointReadError as e:
            failures.append(str(e))
            continue
        for failure in failures:
            warnings.warn(f"skipping checkpoint: {failure}; using the previous good one, {path}", stacklevel=2)
        return path, files, failures
    return None, None, failures


def latest_checkpoint(directory: str | os.PathLike) -> tuple[Path, dict[str, Any]] | None:
    """The newest readable checkpoint (falling back to older ones with a warning), or None."""
    path, files, _ = resumable_checkpoint(directory)
    return None if path is None else (path, files)
