"""How much memory a config would take, estimated before anything is allocated, so that a typo
(``depth: 1000000000``, ``width: 100000``, ``img_size: 1000000``) is a one-line refusal naming the
field, not minutes of allocation ending in an out-of-memory kill.

The estimate builds the model on the ``meta`` device (no memory) and counts its parameters; when the
config has a ``depth`` (or ``n_layers``) above 2, it builds depths 1 and 2 and extrapolates linearly, so
that a huge depth costs nothing to estimate. Training needs about 16 bytes a parameter (float32 weights,
gradients and two Adam moments). A config is refused when that exceeds this machine's memory ten times
over (orders of magnitude, not a tight budget): ``allow_oversize=True`` (``model.allow_oversize`` in a run
config, ``OPZOO_ALLOW_OVERSIZE=1``) builds it anyway.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Sequence

from ..errors import ConfigError

BYTES_PER_PARAMETER = 16
MARGIN = 10.0
ENV_ALLOW = "OPZOO_ALLOW_OVERSIZE"
DEPTH_FIELDS = ("depth", "n_layers")
META_SHALLOW = 64  # on meta, a model no deeper than this is built once and counted: its build is its own estimate


def machine_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def available_memory() -> int:
    """The memory a new allocation can have now (Linux's MemAvailable), else the machine's."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return machine_memory()


def _count(cls: type, config: Any) -> int:
    import torch

    with torch.device("meta"):
        model = cls(config)
    return sum(p.numel() for p in model.parameters())


def estimated_parameters(cls: type, config: Any) -> tuple[int, str | None]:
    """``(parameters, the depth field extrapolated along or None)``; a function of the class and the config's fields
    alone, so each is estimated once per process (a fine-tune, a compare or a test suite builds the same config many
    times, and the estimate's builds cost about as much as the model's own)."""
    import json

    try:
        key = (cls, json.dumps(config.to_dict(), sort_keys=True, default=repr))
    except (AttributeError, TypeError, ValueError):  # not one of opzoo's configs: estimated every time
        return _estimate(cls, config)
    if key not in _ESTIMATES:
        if len(_ESTIMATES) >= 512:
            _ESTIMATES.clear()
        _ESTIMATES[key] = _estimate(cls, config)
    return _ESTIMATES[key]


_ESTIMATES: dict[tuple[type, str], tuple[int, str | None]] = {}


def _estimate(cls: type, config: Any) -> tuple[int, str | None]:
    for field in DEPTH_FIELDS:
        depth = getattr(config, field, None)
        if isinstance(depth, int) and depth > 2:
            one = _count(cls, dataclasses.replace(config, **{field: 1}))
            two = _count(cls, dataclasses.replace(config, **{field: 2}))
            return one + (depth - 1) * (two - one), field
    return _count(cls, config), None


def build_within_memory(cls: type, config: Any, where: str, allow_oversize: bool = False) -> Any:
    """``cls(config)``, refused first (ConfigError naming ``where``) when it would need far more memory than the
    machine has. On the ``meta`` device nothing is allocated, so a config no deeper than ``META_SHALLOW`` is built
    once and its own parameters are counted (the estimate would build it a second time)."""
    import torch

    counted = torch.get_default_device().type == "meta" and all(
        not isinstance(getattr(config, f, None), int) or getattr(config, f) <= META_SHALLOW for f in DEPTH_FIELDS)
    if not counted:
        check_size(cls, config, where, allow_oversize, allocating=torch.get_default_device().type == "cpu")
        return cls(config)
    try:
        model = cls(config)
    except (OverflowError, MemoryError) as e:
        raise _overflow(config, where, e) from None
    check_size(cls, config, where, allow_oversize, params=sum(p.numel() for p in model.parameters()))
    return model


def _sizes(config: Any) -> str:
    """``width=.., depth=..``: the fields that size a model, as its config holds them."""
    return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(config).items()
                     if k in ("width", "depth", "n_layers", "hidden_channels", "mlp_ratio", "img_size", "modes",
                              "image_size", "patch_size", "window_size") and v is not None)


def _overflow(config: Any, where: str, e: BaseException) -> ConfigError:
    return ConfigError(f"{where}: the sizes ({_sizes(config)}) overflow while building ({type(e).__name__}: {e}); "
                       f"check these fields")


def check_size(cls: type, config: Any, where: str, allow_oversize: bool = False, params: int | None = None,
               allocating: bool = False) -> None:
    """ConfigError naming the config when its estimated training memory exceeds the machine's ten times, or, when
    the build is ``allocating`` its weights in this machine's memory, when the weights alone (float32) exceed the
    memory available now: that build would end in the kernel's out-of-memory kill, with no message (``params``: the
    count of a model already built on meta, else estimated)."""
    if allow_oversize or os.environ.get(ENV_ALLOW):
        return
    sizes = _sizes(config)
    along = None
    buffers = config.buffer_bytes() if callable(getattr(config, "buffer_bytes", None)) else 0
    if buffers > machine_memory():
        raise ConfigError(
            f"{where}: the tensors it computes when built ({sizes or 'its sizes'}: attention masks, position tables) "
            f"take about {buffers / 2**30:.3g} GiB, more than this machine's {machine_memory() / 2**30:.0f} GiB; "
            f"check these fields, or build it anyway with allow_oversize=True (model.allow_oversize: true in a run "
            f"config, or {ENV_ALLOW}=1)")
    try:
        if params is None:
            params, along = estimated_parameters(cls, config)
    except ConfigError:
        raise
    except (OverflowError, MemoryError) as e:
        raise _overflow(config, where, e) from None
    except Exception:  # a model that cannot be built on meta: its own construction reports what is wrong
        return
    need, have = params * BYTES_PER_PARAMETER, machine_memory()
    weights, free = params * 4, available_memory() if allocating else None
    if free is not None and weights > free:
        raise ConfigError(
            f"{where}: about {params:.3g} parameters ({sizes}{'; extrapolated along ' + along if along else ''}) are "
            f"{weights / 2**30:.3g} GiB of float32 weights, more than the {free / 2**30:.3g} GiB this machine has "
            f"free now; check these fields, or build it anyway with allow_oversize=True (model.allow_oversize: true "
            f"in a run config, or {ENV_ALLOW}=1)")
    if need > MARGIN * have:
        raise ConfigError(
            f"{where}: about {params:.3g} parameters ({sizes}{'; extrapolated along ' + along if along else ''}) need "
            f"about {need / 2**30:.3g} GiB to train, {need / have:.0f}x this machine's {have / 2**30:.0f} GiB; check "
            f"these fields, or build it anyway with allow_oversize=True (model.allow_oversize: true in a run config, "
            f"or {ENV_ALLOW}=1)")


def check_batch_memory(batch: int, resolution: Sequence[int], frames: int, channels: int, where: str,
                       allow_oversize: bool = False) -> None:
    """ConfigError naming ``where`` when one batch of training data alone (``batch`` windows of ``frames`` frames,
    ``channels`` channels at ``resolution``, float32), a lower bound of what a step holds, exceeds this machine's
    memory ten times over (``training.batch_size: 1e8`` or ``data.resolution: [1e5, 1e5]`` is a typo, not a run)."""
    if allow_oversize or os.environ.get(ENV_ALLOW):
        return
    need = 4 * batch * frames * channels * math.prod(int(r) for r in resolution)
    have = machine_memory()
    if need > MARGIN * have:
        grid = "x".join(str(int(r)) for r in resolution)
        raise ConfigError(f"{where}: one batch of {batch} windows of {frames} frames x {channels} channel(s) at "
                          f"{grid} is {need / 2**30:.3g} GiB of data alone, {need / have:.0f}x this machine's "
                          f"{have / 2**30:.0f} GiB; lower training.batch_size or data.resolution, or run it anyway "
                          f"with model.allow_oversize: true (or {ENV_ALLOW}=1)")


__all__ = ["check_size", "check_batch_memory", "estimated_parameters", "machine_memory", "available_memory"]
