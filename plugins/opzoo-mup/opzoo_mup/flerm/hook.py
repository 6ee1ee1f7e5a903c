"""The ``flerm`` optimizer hook: record a base model's function-space learning rates, or match them.

Run config::

    optimizer:
      hooks:
        - name: flerm
          args: {mode: record}                                  # base model: writes RUN_DIR/flerm/record.json
        - name: flerm
          args: {mode: match, base: runs/base}                  # scaled model: lr_ℓ = η0 · base_ℓ / current_ℓ

Schedule of measurements (``i`` is the 0-based iteration, records use ``step = i + 1``): after the
first update, ``warmup`` (40) estimates on fresh batches ``0 … warmup−1`` of that step warm the EMAs
up; then one estimate after every ``every``-th update (``i % every == 0``). Each estimate uses the
"lr = 1" update ``ΔW / lr_ℓ`` of the step (Alg. 1), so the EMAs see a consistent lr whatever the
schedule. In match mode the multiplier ``base_ℓ(step) / current_ℓ`` is set after each measurement
(``match: periodic``) or only after the warm-up (``match: once``, the paper's main experiments) and
multiplies the scheduled lr from the next update on: it is a relative multiplier, composing with any
schedule and other hooks. The first update runs at the plain lr (its ΔW is what the warm-up measures).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn

import opzoo
from opzoo.training import OptimizerHook, StepContext

from .estimator import COMPLEX_DIMS, KRONECKER, READOUT_BIAS, READOUT_WEIGHT, KroneckerEMA
from .probe import find_readout, probe_gradients, z_samples
from .record import FslrRecord, block_lists, map_base_values, write_record

MODES = ("record", "match")
SEED_SALT = 7_919


class FlermHook(OptimizerHook):
    """FLeRM (Milsom et al. 2025) on the opzoo optimizer-hook interface; one parameter group per tensor."""

    def __init__(self, mode: str = "record", base: str | Sequence[str] | None = None, warmup: int = 40,
                 every: int = 100, beta: float = 0.9, readout: str | Sequence[str] | None = "auto",
                 match: str = "periodic", out: str | None = None, seed: int = 0,
                 complex_dim: str = "sum", min_multiplier: float = 1e-3, max_multiplier: float = 1e3):
        if mode not in MODES:
            raise opzoo.ConfigError(f"optimizer.hooks: flerm: mode must be one of {MODES}, got {mode!r}")
        if mode == "match" and not base:
            raise opzoo.ConfigError("optimizer.hooks: flerm: mode 'match' needs args.base (a record file or a run directory)")
        if match not in ("periodic", "once"):
            raise opzoo.ConfigError(f"optimizer.hooks: flerm: match must be 'periodic' or 'once', got {match!r}")
        for key, value, low in (("warmup", warmup, 1), ("every", every, 1)):
            if not isinstance(value, int) or value < low:
                raise opzoo.ConfigError(f"optimizer.hooks: flerm: {key} must be an int >= {low}, got {value!r}")
        if not 0.0 <= beta < 1.0:
            raise opzoo.ConfigError(f"optimizer.hooks: flerm: beta must be in [0, 1), got {beta!r}")
        if complex_dim not in COMPLEX_DIMS:
            raise opzoo.ConfigError(f"optimizer.hooks: flerm: complex_dim must be one of {COMPLEX_DIMS}, got {complex_dim!r}")
        if not 0 < min_multiplier <= 1 <= max_multiplier:
            raise opzoo.ConfigError("optimizer.hooks: flerm: need 0 < min_multiplier <= 1 <= max_multiplier")
        self.mode, self.warmup, self.every, self.beta, self.match = mode, warmup, every, beta, match
        self.readout_arg, self.out, self.seed, self.complex_dim = readout, out, seed, complex_dim
        self.clamp = (min_multiplier, max_multiplier)
        self.base_paths = [base] if isinstance(base, str) else list(base or [])
        self.base: FslrRecord | None = None
        self.names: list[str] = []
        self.lists: dict[str, int] = {}
        self.readout: list[str] | None = None
        self.emas: dict[str, KroneckerEMA] = {}
        self.multipliers: dict[str, float] = {}
        self.history: dict[str, Any] = {"steps": [], "fslr": {}, "multipliers": {}, "base_lr": []}
        self._before: dict[str, Tensor] | None = None

    # ---- setup ----------------------------------------------------------------------------------
    def param_groups(self, model: nn.Module, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        params = dict(model.named_parameters())
        out = []
        for g in groups:
            rest = {k: v for k, v in g.items() if k not in ("params", "names")}
            for name in g["names"]:
                out.append({**rest, "params": [params[name]], "names": [name]})
        self.names = [g["names"][0] for g in out]
        self.lists = block_lists(model)
        if self.mode == "match":
            self.base = FslrRecord.mean([FslrRecord.load(p) for p in self.base_paths])
            map_base_values(self.names, self.lists, self.base, self.base.steps[0])  # fails now, naming what is unmapped
        return out

    def _rules(self, ctx: StepContext, batch: Mapping[str, Tensor]) -> dict[str, str]:
        if self.readout is None:
            if self.readout_arg == "auto":
                self.readout = find_readout(ctx.model, ctx.forward, batch["x"])
            elif self.readout_arg in (None, "none", False):
                self.readout = []
            else:
                self.readout = [self.readout_arg] if isinstance(self.readout_arg, str) else list(self.readout_arg)
                unknown = [n for n in self.readout if n not in self.names]
                if unknown:
                    raise opzoo.ConfigError(f"optimizer.hooks: flerm: readout names {unknown} are not trainable parameters")
        rules = {n: KRONECKER for n in self.names}
        for n in self.readout:
            rules[n] = READOUT_WEIGHT if n.endswith("weight") or not n.endswith("bias") else READOUT_BIAS
        return rules

    def _measuring(self, step: int) -> bool:
        return step == 0 or step % self.every == 0

    def _group_names(self, ctx: StepContext) -> list[str]:
        names = []
        for g in ctx.optimizer.param_groups:
            if len(g["names"]) != 1:
                raise opzoo.ConfigError("optimizer.hooks: flerm needs one parameter group per tensor, but a hook "
                                        f"listed after it merged {len(g['names'])} tensors into one group "
                                        f"({', '.join(g['names'][:3])}, ...); list flerm after that hook")
            names.append(g["names"][0])
        return names

    # ---- per step -------------------------------------------------------------------------------
    def before_optimizer_step(self, ctx: StepContext) -> None:
        if self._measuring(ctx.step):
            self._group_names(ctx)  # fails before the update when a later hook merged groups
            params = dict(ctx.model.named_parameters())
            self._before = {n: params[n].detach().clone() for n in self.names}

    def lr_multipliers(self, ctx: StepContext) -> list[float] | None:
        if self.mode != "match" or not self.multipliers:
            return None
        return [self.multipliers.get(n, 1.0) for n in self._group_names(ctx)]

    def after_optimizer_step(self, ctx: StepContext) -> None:
        if self._before is None:
            return
        before, self._before = self._before, None
        params = dict(ctx.model.named_parameters())
        lrs = dict(zip(self._group_names(ctx), (g["lr"] for g in ctx.optimizer.param_groups)))
        deltas = {}
        for n in self.names:
            lr = lrs.get(n, 0.0)
            deltas[n] = (params[n].detach() - before[n]) / lr if lr > 0 else torch.zeros_like(before[n])
        del before
        first = not self.emas
        n_samples = self.warmup if first else 1
        rules = self._rules(ctx, ctx.fresh_batch(0)) if first else None
        if first:
            self.emas = {n: KroneckerEMA(rules[n], self.beta) for n in self.names}
        was_training = ctx.model.training
        for k in range(n_samples):
            batch = ctx.fresh_batch(k)
            gen = torch.Generator().manual_seed(
                (self.seed * 1_000_003 + ctx.step * SEED_SALT + k * 104_729 + ctx.rank * 15_485_863) % (2**63 - 1))
            probe_gradients(ctx.model, ctx.forward, batch, gen)
            zs = z_samples(params, deltas, ctx.all_reduce_mean, ctx.world_size, self.complex_dim)
            for n in self.names:
                self.emas[n].update(zs[n])
            del zs
        ctx.model.zero_grad(set_to_none=True)
        ctx.model.train(was_training)
        self._record(ctx)

    def _record(self, ctx: StepContext) -> None:
        step = ctx.step + 1
        current = {n: self.emas[n].value() for n in self.names}
        h = self.history
        h["steps"].append(step)
        h["base_lr"].append(ctx.base_lr)
        for n in self.names:
            h["fslr"].setdefault(n, []).append(current[n])
        if self.mode == "match":
            if self.match == "periodic" or not self.multipliers:
                base = map_base_values(self.names, self.lists, self.base, step)
                lo, hi = self.clamp
                # a tensor the output does not depend on (current 0) keeps its lr
                self.multipliers = {n: (min(max(base[n] / current[n], lo), hi) if current[n] > 0 and base[n] > 0 else 1.0)
                                    for n in self.names}
            for n in self.names:
                h["multipliers"].setdefault(n, []).append(self.multipliers[n])
        if ctx.rank == 0 and (self.out or ctx.run_dir is not None):
            self._write(Path(self.out) if self.out else Path(ctx.run_dir) / "flerm" / f"{self.mode}.json")

    def _write(self, path: Path) -> None:
        h = self.history
        doc = {"mode": self.mode, "steps": h["steps"], "fslr": h["fslr"], "base_lr": h["base_lr"],
               "block_lists": self.lists, "readout": self.readout or [],
               "settings": {"warmup": self.warmup, "every": self.every, "beta": self.beta, "match": self.match,
                            "seed": self.seed, "complex_dim": self.complex_dim, "base": self.base_paths}}
        if self.mode == "match":
            doc["multipliers"] = h["multipliers"]
        write_record(path, doc)

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"history": self.history, "multipliers": self.multipliers,
                                 "readout": self.readout, "counts": {n: e.count for n, e in self.emas.items()},
                                 "rules": {n: e.rule for n, e in self.emas.items()}}
        for n, e in self.emas.items():
            state[f"ema/{n}"] = e.state()[0]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.history = state["history"]
        self.multipliers = dict(state["multipliers"])
        self.readout = state["readout"]
        self.emas = {}
        for n, count in state["counts"].items():
            e = KroneckerEMA(state["rules"][n], self.beta)
            e.load(state[f"ema/{n}"], count)
            self.emas[n] = e
