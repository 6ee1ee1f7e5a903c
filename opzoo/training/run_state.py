"""A run's checkpointed state: model, optimizer, EMA, hooks and RNGs written to and restored from
:mod:`opzoo.training.checkpoint` files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import torch
from torch import Tensor, nn

from . import checkpoint as ckpt
from . import run_dir as rundir
from .distributed import DistEnv, barrier, full_state_dict
from .ema import EMA
from .hooks import OptimizerHook, split_hook_state


@dataclass
class RunState:
    """What a checkpoint holds of a run, and where it goes."""

    ckpt_dir: Path
    config: Mapping  # the run config as a dict (recorded in each checkpoint)
    env: DistEnv
    model: nn.Module  # unwrapped
    wrapped: nn.Module  # DDP/FSDP wrapper (or the model)
    optimizer: torch.optim.Optimizer
    ema: EMA | None
    hooks: Sequence[OptimizerHook]
    strategy: str  # distributed.strategy
    keep_last: int | None = None

    def save(self, step: int, protect: set[int] | frozenset[int] = frozenset()) -> Path | None:
        """Checkpoint ``step`` (collective: every rank gathers; rank 0 writes), keeping those of ``protect`` from
        pruning. Returns its path on rank 0."""
        opt_state = ckpt.optimizer_to_flat(self.optimizer)
        weights = full_state_dict(self.wrapped, self.env, self.strategy)
        path = None
        if self.env.is_main:
            extra: dict[str, Tensor] = {}
            hook_plain = []
            if self.ema is not None:
                extra.update({f"ema/{k}": v.detach().cpu() for k, v in self.ema.state_dict().items()})
            for i, hook in enumerate(self.hooks):
                tensors, plain = split_hook_state(hook.state_dict(), f"hook{i}/")
                extra.update(tensors)
                hook_plain.append(plain)
            state = {"hooks": hook_plain, "world_size": self.env.world_size,
                     "config": rundir.with_resolved_paths(self.config)}
            path = ckpt.write_checkpoint(self.ckpt_dir, step, model_state=weights, optimizer_state=opt_state,
                                         state=state, extra=extra, keep_last=self.keep_last,
                                         protect=protect)
        barrier(self.env)
        return path

    def restore(self, path: Path, files: Mapping) -> int:
        """Load a verified checkpoint (``ckpt.read_checkpoint``'s files) into the model, optimizer, EMA,
        hooks and RNGs; returns its step."""
        from ..model_io.weights import load_state_dict_strict

        weights = files["model.safetensors"]
        if self.strategy == "fsdp" and self.env.enabled:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            set_model_state_dict(self.model, weights, options=StateDictOptions(full_state_dict=True))
        else:
            load_state_dict_strict(self.model, weights, str(path / "model.safetensors"))
        state = files["state.json"]
        ckpt.optimizer_from_flat(self.optimizer, files["optimizer.safetensors"], state["param_groups"], str(path))
        extra = files["extra.safetensors"]
        if self.ema is not None:
            self.ema.load_state_dict({k[4:]: v for k, v in extra.items() if k.startswith("ema/")})
        for i, hook in enumerate(self.hooks):
            prefix = f"hook{i}/"
            tensors = {k[len(prefix):]: v for k, v in extra.items() if k.startswith(prefix)}
            hook.load_state_dict({**state["hooks"][i], **tensors})
        ckpt.set_rng_state(extra, state["rng"])
        return int(state["step"])

    def last_checkpoint(self) -> str:
        kept = ckpt.list_checkpoints(self.ckpt_dir)
        return str(kept[-1]) if kept else "none"
