"""The ``flerm`` optimizer hook: record a base model's function-space learning rates, or match them.

Run config::

    optimizer:
      hooks:
        - name: flerm
          args: {mode: record}                                  # base model: writes RUN_DIR/flerm/record.json
        - name: flerm
          args: {mode: match, base: runs/base}                  # scaled model: lr_ℓ = η0 · base_ℓ / current_ℓ

Schedule of measurements (``i`` is the 0-based iteration, records use ``step = i + 1``): after the
first update, ``warmup`` (40) probes on fresh batches ``0 … warmup−1`` of that step; then ``probes``
probes after every ``every``-th update (``i % every == 0``). One measurement is the mean of its probes'
statistics; measurements enter an EMA ``EMA <- (1 − β)·EMA + β·new`` (Algorithm 1, ``beta`` the weight
of the newest measurement). The warm-up measurement is used at step 1 only: the averages restart at
the first periodic measurement, because Adam's first update (sign-like, several times larger in
function space than later ones: x2-16 on the tracking MLP) would otherwise dominate every later
estimate (docs/flerm.md: measured against finite differences). Each probe uses the "lr = 1" update
``ΔW / lr_ℓ`` of the step (Alg. 1).

Matching reproduces the base's *actual* function-space lr ``base_ℓ · lr_ℓ^base`` per tensor: the
record stores, per measurement, the base lr ``η0 · schedule`` and each tensor's lr scale (its lr over
``η0 · schedule`` and over FLeRM's own multiplier: ``lr_scale`` of ``mup-fno`` and any other hook's
multipliers), and the multiplier is ``(base_ℓ · scale_ℓ^base) / (current_ℓ · scale_ℓ)``. A record made
at another base lr is refused (naming both) unless ``allow_other_base_lr: true``; then the run's own
lr is η0 of Eq. 19 (the base's lr = 1 values at this run's lr). Multipliers outside
``[min_multiplier, max_multiplier]`` are clamped and reported (log warning and ``clamped`` in the
record). In match mode the multiplier is set after each measurement (``match: periodic``) or only
after the warm-up (``match: once``, the paper's main experiments) and multiplies the scheduled lr from
the next update on. The first update runs at the plain lr (its ΔW is what the warm-up measures).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn

import opzoo
from opzoo.training import OptimizerHook, StepContext

from .estimator import COMPLEX_DIMS, KRONECKER, READOUT_BIAS, READOUT_WEIGHT, KroneckerEMA, z_statistics
from .probe import find_readout, probe_gradients, z_samples
from .record import FslrRecord, block_lists, map_base_values, write_record

MODES = ("record", "match")
SEED_SALT = 7_919
LR_RTOL = 1e-6
log = logging.getLogger("opzoo_mup.flerm")


class FlermHook(OptimizerHook):
    """FLeRM (Milsom et al. 2025) on the opzoo optimizer-hook interface; one parameter group per tensor."""

    def __init__(self, mode: str = "record", base: str | Sequence[str] | None = None, warmup: int = 40,
                 every: int = 100, probes: int = 4, beta: float = 1.0, readout: str | Sequence[str] | None = "auto",
                 match: str = "periodic", out: str | None = None, seed: int = 0,
                 complex_dim: str = "sum", min_multiplier: float = 1e-3, max_multiplier: float = 1e3,
                 allow_other_base_lr: bool = False):
        if mode not in MODES:
            raise opzoo.ConfigError(f"optimizer.hooks: flerm: mode must be one of {MODES}, got {mode!r}")
        if mode == "match" and not base:
            raise opzoo.ConfigError("optimizer.hooks: flerm: mode 'match' needs args.base (a record file or a run directory)")
        if match not in ("periodic", "once"):
            raise opzoo.ConfigError(f"optimizer.hooks: flerm: match must be 'periodic' or 'once', got {match!r}")
        for key, value, low in (("warmup", warmup, 1), ("every", every, 1), ("probes", probes, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise opzoo.ConfigError(f"optimizer.hooks: flerm: {key} must be an int >= {low}, got {value!r}")
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0.0 < beta <= 1.0:
            raise opzoo.ConfigError(f"optimizer.hooks: flerm: beta (the EMA weight of the newest measurement, "
                                    f"Algorithm 1) must be in (0, 1], got {beta!r}")
        if complex_dim not in COMPLEX_DIMS:
            raise opzoo.ConfigError(f"optimizer.hooks: flerm: complex_dim must be one of {COMPLEX_DIMS}, got {complex_dim!r}")
        if not 0 < min_multiplier <= 1 <= max_multiplier:
            raise opzoo.ConfigError("optimizer.hooks: flerm: need 0 < min_multiplier <= 1 <= max_multiplier")
        if not isinstance(allow_other_base_lr, bool):
            raise opzoo.ConfigError("optimizer.hooks: flerm: allow_other_base_lr must be true or false, "
                                    f"got {allow_other_base_lr!r}")
        self.mode, self.warmup, self.every, self.beta, self.match = mode, warmup, every, float(beta), match
        self.probes, self.allow_other_base_lr = probes, allow_other_base_lr
        self.readout_arg, self.out, self.seed, self.complex_dim = readout, out, seed, complex_dim
        self.clamp = (min_multiplier, max_multiplier)
        self.base_paths = [base] if isinstance(base, str) else list(base or [])
        self.base: FslrRecord | None = None
        self.names: list[str] = []
        self.lists: dict[str, int] = {}
        self.readout: list[str] | None = None
        self.emas: dict[str, KroneckerEMA] = {}
        self.multipliers: dict[str, float] = {}
        self.history: dict[str, Any] = {"steps": [], "fslr": {}, "multipliers": {}, "base_lr": [], "lr_scale": {},
                                        "clamped": []}
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
            if self.mode == "match":
                self._check_base_lr(ctx.step + 1, ctx.base_lr)
            params = dict(ctx.model.named_parameters())
            self._before = {n: params[n].detach().clone() for n in self.names}

    def _check_base_lr(self, step: int, lr: float) -> None:
        """Refuse (before the update) a record made at another base lr at the same step (Eq. 19's η0)."""
        recorded = self.base.base_lr_at(step)
        if recorded is None or self.allow_other_base_lr:
            return
        if not math.isclose(recorded, lr, rel_tol=LR_RTOL, abs_tol=0.0):
            raise opzoo.ConfigError(
                f"optimizer.hooks: flerm: the base record {self.base.source} was made at base lr {recorded:.6g} "
                f"(optimizer.lr x schedule at step {step}) but this run's base lr is {lr:.6g}; FLeRM records "
                "per lr (Eq. 19): record the base at this lr, or set allow_other_base_lr: true to apply the "
                "record's lr = 1 values at this run's lr")

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
        scales = dict(zip(self._group_names(ctx), (g.get("lr_scale", 1.0) for g in ctx.optimizer.param_groups)))
        deltas = {}
        for n in self.names:
            lr = lrs.get(n, 0.0)
            deltas[n] = (params[n].detach() - before[n]) / lr if lr > 0 else torch.zeros_like(before[n])
        del before
        # this tensor's lr relative to η0 · schedule, without FLeRM's own multiplier: mup-fno's lr_scale
        # and any other hook's multipliers (what matching must divide out and the record must carry)
        lr_scale = {n: (lrs[n] / (ctx.base_lr * self.multipliers.get(n, 1.0)) if ctx.base_lr > 0 else scales[n])
                    for n in self.names}
        first = not self.emas
        rules = self._rules(ctx, ctx.fresh_batch(0)) if first else {n: e.rule for n, e in self.emas.items()}
        if first or len(self.history["steps"]) == 1:  # the warm-up measurement is for step 1 only
            self.emas = {n: KroneckerEMA(rules[n], self.beta) for n in self.names}
        n_probes = self.warmup if first else self.probes
        sums: dict[str, Tensor] = {}
        was_training = ctx.model.training
        for k in range(n_probes):
            batch = ctx.fresh_batch(k)
            gen = torch.Generator().manual_seed(
                (self.seed * 1_000_003 + ctx.step * SEED_SALT + k * 104_729 + ctx.rank * 15_485_863) % (2**63 - 1))
            probe_gradients(ctx.model, ctx.forward, batch, gen)
            zs = z_samples(params, deltas, ctx.all_reduce_mean, ctx.world_size, self.complex_dim)
            for n in self.names:
                s = z_statistics(zs[n], rules[n]).cpu()
                sums[n] = s if k == 0 else sums[n] + s
            del zs
        for n in self.names:
            self.emas[n].update_statistics(sums[n] / n_probes)
        ctx.model.zero_grad(set_to_none=True)
        ctx.model.train(was_training)
        self._record(ctx, lr_scale)

    def _record(self, ctx: StepContext, lr_scale: Mapping[str, float]) -> None:
        step = ctx.step + 1
        current = {n: self.emas[n].value() for n in self.names}
        h = self.history
        h["steps"].append(step)
        h["base_lr"].append(ctx.base_lr)
        for n in self.names:
            h["fslr"].setdefault(n, []).append(current[n])
            h["lr_scale"].setdefault(n, []).append(lr_scale[n])
        if self.mode == "match":
            if self.match == "periodic" or not self.multipliers:
                self.multipliers = self._new_multipliers(step, current, lr_scale)
            for n in self.names:
                h["multipliers"].setdefault(n, []).append(self.multipliers[n])
        if ctx.rank == 0 and (self.out or ctx.run_dir is not None):
            self._write(Path(self.out) if self.out else Path(ctx.run_dir) / "flerm" / f"{self.mode}.json")

    def _new_multipliers(self, step: int, current: Mapping[str, float],
                         lr_scale: Mapping[str, float]) -> dict[str, float]:
        """``(base_ℓ · scale_ℓ^base) / (current_ℓ · scale_ℓ)``, clamped (and reported) to the configured range."""
        base = map_base_values(self.names, self.lists, self.base, step)
        base_scale = map_base_values(self.names, self.lists, self.base, step, "lr_scale")
        lo, hi = self.clamp
        out, clamped = {}, {}
        for n in self.names:
            if not (current[n] > 0 and base[n] > 0 and lr_scale[n] > 0):
                out[n] = 1.0  # a tensor the output does not depend on (current 0) keeps its lr
                continue
            raw = base[n] * base_scale[n] / (current[n] * lr_scale[n])
            out[n] = min(max(raw, lo), hi)
            if out[n] != raw:
                clamped[n] = raw
        if clamped:
            self.history["clamped"].append({"step": step, "raw": clamped})
            log.warning("flerm: step %d: %d lr multiplier(s) clamped to [%g, %g]: %s", step, len(clamped), lo, hi,
                        ", ".join(f"{n} {v:.3g}" for n, v in clamped.items()))
        return out

    def _write(self, path: Path) -> None:
        h = self.history
        doc = {"mode": self.mode, "steps": h["steps"], "fslr": h["fslr"], "base_lr": h["base_lr"],
               "lr_scale": h["lr_scale"], "block_lists": self.lists, "readout": self.readout or [],
               "settings": {"warmup": self.warmup, "every": self.every, "probes": self.probes, "beta": self.beta,
                            "match": self.match, "seed": self.seed, "complex_dim": self.complex_dim,
                            "base": self.base_paths, "allow_other_base_lr": self.allow_other_base_lr}}
        if self.mode == "match":
            doc["multipliers"] = h["multipliers"]
            doc["clamped"] = h["clamped"]
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
