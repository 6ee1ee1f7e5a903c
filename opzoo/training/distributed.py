"""DDP / FSDP glue: process-group setup from torchrun's environment, wrapping, rank-0 helpers."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..errors import ConfigError


@dataclass
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(backend: str = "auto", device: torch.device | None = None, timeout_s: float = 600.0) -> DistEnv:
    """Join the process group torchrun describes (``RANK``/``WORLD_SIZE``); a no-op without it.

    ``backend="auto"`` picks nccl for CUDA devices and gloo otherwise. ``timeout_s`` bounds every
    collective: a rank that stopped fails the others after that long (torch's default is 30 min).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistEnv()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if dist.is_initialized():
        return DistEnv(rank, world, local, False)
    if backend == "auto":
        backend = "nccl" if device is not None and device.type == "cuda" else "gloo"
    if device is not None and device.type == "cuda":
        torch.cuda.set_device(local)
    from datetime import timedelta

    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    return DistEnv(rank, world, local, True)


def shutdown(env: DistEnv, finished: bool = False) -> None:
    """Destroys the process group this process made. ``finished`` (every rank ends normally): first waits for every
    rank to get past its last collective, since a rank destroying its gloo group while a peer's work is in flight
    aborts the peer at exit ("terminate called without an active exception"); after a failure it does not wait."""
    if env.initialized_here and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


def barrier(env: DistEnv) -> None:
    if env.enabled:
        dist.barrier()


def all_reduce_mean(t: torch.Tensor, env: DistEnv) -> torch.Tensor:
    if not env.enabled:
        return t
    t = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t / env.world_size


def all_reduce_max(t: torch.Tensor, env: DistEnv) -> torch.Tensor:
    if not env.enabled:
        return t
    t = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t


def _owned_output(module: nn.Module, args, output):
    """A module's output tensors that are views (a permute, an index, a reshape of a strided tensor) replaced by
    tensors of their own. FSDP2 hooks the outputs of each module it wraps to all-gather before backward; an in-place
    op on a view would drop that hook, and FSDP2 warns about every view on every step. The copy is of the output
    only, a small tensor beside the activations."""
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) and t._base is not None else t, output)


def wrap_model(model: nn.Module, env: DistEnv, strategy: str, device: torch.device,
               find_unused_parameters: bool = True) -> nn.Module:
    """DDP (default) or FSDP2 (``fully_shard``, for the large presets) around ``model``."""
    if not env.enabled:
        return model
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for module in [*getattr(model, "blocks", []), model]:
            module.register_forward_hook(_owned_output)  # before fully_shard's own hook, which must see it
            fully_shard(module)
        return model
    ids = [device.index if device.index is not None else env.local_rank] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused_parameters)


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def full_state_dict(model: nn.Module, env: DistEnv, strategy: str) -> dict[str, torch.Tensor]:
    """The unsharded, unwrapped state dict on CPU (gathered for FSDP; every rank must call it)."""
    if env.enabled and strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.detach().cpu() for k, v in unwrap(model).state_dict().items()}


def pick_device(name: str, env: DistEnv) -> torch.device:
    """``training.device``: ``auto`` is this rank's GPU when there is one, else the CPU."""
    if name == "auto":
        return torch.device(f"cuda:{env.local_rank}" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"training.device {name!r}: not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"training.device {name!r}: a run trains on cpu or cuda (auto picks), not {device.type}")
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            raise ConfigError(f"training.device {name!r}: this machine has no CUDA device; use auto or cpu")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"training.device {name!r}: this machine has {count} CUDA device(s), cuda:0 to "
                              f"cuda:{count - 1}")
    return device


def start_process(section, device: str, deterministic: bool) -> tuple[DistEnv, torch.device]:
    """This process's rank (torch.distributed initialised from torchrun's environment, per the run config's
    ``distributed`` ``section``) and device (``training.device``); ``deterministic`` algorithms if asked."""
    env = init_distributed(section.backend, pick_device(device, DistEnv()), timeout_s=section.timeout_s)
    device = pick_device(device, env)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = False
    return env, device
