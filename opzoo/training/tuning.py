"""What a fine-tune trains (``training.tune``, ``opzoo finetune --tune``; docs/training.md, "What a fine-tune
trains"):

- ``full``: every parameter;
- ``head``: the model's :meth:`opzoo.Backbone.head_parameters` (input and output projections, position table, time
  aggregation, norms), the rest frozen;
- ``lora[:RANK]``: low-rank adapters (Hugging Face's ``peft``, ``LoraConfig(r=RANK, lora_alpha=RANK)``, rank 8 by
  default) on the model's :meth:`opzoo.Backbone.lora_targets`, the rest frozen.

Whatever the mode, the tensors the run adapted to its data (new channels, another ``T_in`` or grid: the tensors whose
shape changed, and those the backbone's ``io_layout`` names for the change) are trainable: they hold new rows that
no pretraining trained. A LoRA model is saved merged (:func:`merged_model`: plain weights, loadable without
``peft``), its adapter beside it (:func:`save_adapter`, peft's own files).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Iterable

import torch
from torch import nn

from ..errors import ConfigError

MODES = ("full", "head", "lora")
DEFAULT_RANK = 8
ADAPTER_NAME = "default"  # peft's name of a model's one adapter
_SPEC = re.compile(r"^(full|head|lora)(?::(\d+))?$")


@dataclasses.dataclass(frozen=True)
class TuneSpec:
    mode: str = "full"
    rank: int | None = None

    def __str__(self) -> str:
        return f"lora:{self.rank}" if self.mode == "lora" else self.mode


def parse_tune(text: str, where: str = "training.tune") -> TuneSpec:
    """``full``, ``head``, ``lora`` or ``lora:RANK`` as a :class:`TuneSpec`; a ConfigError naming ``where`` else."""
    m = _SPEC.match(str(text).strip())
    if not m or (m.group(2) is not None and m.group(1) != "lora"):
        raise ConfigError(f"{where}: {text!r} is not one of full, head, lora or lora:RANK (e.g. lora:8)")
    if m.group(1) != "lora":
        return TuneSpec(m.group(1))
    rank = int(m.group(2)) if m.group(2) is not None else DEFAULT_RANK
    if rank < 1:
        raise ConfigError(f"{where}: a LoRA rank is at least 1, got {rank}")
    return TuneSpec("lora", rank)


@dataclasses.dataclass
class Tuning:
    """What a run trains: the spec, the trainable and total parameter counts, the LoRA targets, the adapted tensors."""

    spec: TuneSpec
    trainable: int
    total: int
    targets: list[str] = dataclasses.field(default_factory=list)
    adapted: list[str] = dataclasses.field(default_factory=list)
    frozen_spectral: int = 0  # parameters of spectral layers left frozen

    def line(self) -> str:
        share = 100.0 * self.trainable / max(1, self.total)
        what = {"full": "every parameter", "head": "the head (input and output projections, norms, time aggregation)",
                "lora": f"LoRA rank {self.spec.rank} on {len(self.targets)} linear/convolution layers (peft)"}
        extra = [f"{len(self.adapted)} tensor(s) adapted to the data always trained"] if self.adapted and \
            self.spec.mode != "full" else []
        if self.frozen_spectral and self.spec.mode != "full":
            extra.append(f"{self.frozen_spectral:,} spectral weights frozen")
        return (f"tune {self.spec}: {self.trainable:,} of {self.total:,} parameters trainable ({share:.3g}%), "
                f"{what[self.spec.mode]}" + (f"; {'; '.join(extra)}" if extra else ""))

    def record(self) -> dict:
        return {"mode": self.spec.mode, **({"rank": self.spec.rank} if self.spec.rank else {}),
                "trainable_parameters": self.trainable, "parameters": self.total,
                **({"lora_targets": len(self.targets)} if self.targets else {}),
                **({"adapted_tensors": list(self.adapted)} if self.adapted else {})}


def adapted_tensors(before: nn.Module, after: nn.Module) -> list[str]:
    """The parameters of ``after`` that the fit adapted from ``before``: new, or of another shape, and those the
    backbone's ``io_layout`` names for a change of config (whose rows may be new at the same shape)."""
    old = {n: p.shape for n, p in before.named_parameters()}
    names = {n for n, p in after.named_parameters() if old.get(n) != p.shape}
    layout = getattr(type(after), "io_layout", None)
    if after is not before and callable(layout) and before.config != after.config:
        try:
            named = layout(before.config, after.config) or {}
        except Exception:  # a layout that cannot say: the shapes above still hold
            named = {}
        params = dict(after.named_parameters())
        names |= {n for n in named if n in params}
    return sorted(names)


def apply_tuning(model: nn.Module, spec: TuneSpec, adapted: Iterable[str] = ()) -> Tuning:
    """Freeze what ``spec`` does not train, inject LoRA adapters (in place, with peft) for ``lora``; ``adapted``: the
    parameter names that stay trainable whatever the mode. Returns what is trained."""
    adapted = sorted(adapted)
    spectral = _spectral_parameters(model)
    targets: list[str] = []
    if spec.mode == "head":
        wanted = set(model.head_parameters()) | set(adapted)
        for name, p in model.named_parameters():
            p.requires_grad_(name in wanted)
    elif spec.mode == "lora":
        targets = model.lora_targets()
        if not targets:
            raise ConfigError(f"{type(model).__name__} declares no LoRA targets (no linear layer or convolution in its "
                              f"blocks): fine-tune it with --tune head or --tune full")
        peft = _peft()
        config = peft.LoraConfig(r=spec.rank, lora_alpha=spec.rank, lora_dropout=0.0, target_modules=targets)
        peft.LoraModel(model, config, ADAPTER_NAME)  # injects the adapters into model and freezes the rest
        params = dict(model.named_parameters())
        for name in adapted:
            (params[name] if name in params else params[_base_name(name, params)]).requires_grad_(True)
    total = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for n, p in model.named_parameters() if n in spectral and not p.requires_grad)
    return Tuning(spec, trainable, total, targets, adapted if spec.mode != "full" else [], frozen)


def _base_name(name: str, params: dict) -> str:
    """A parameter's name once peft wrapped its layer (``x.weight`` -> ``x.base_layer.weight``)."""
    head, _, leaf = name.rpartition(".")
    wrapped = f"{head}.base_layer.{leaf}"
    if wrapped not in params:
        raise ConfigError(f"tune: the adapted tensor {name!r} is not a parameter of the model")
    return wrapped


def _spectral_parameters(model: nn.Module) -> set[str]:
    from ..contracts.spectral import find_spectral_weights

    try:
        return {w.name for w in find_spectral_weights(model)}
    except Exception:  # a model without spatial_dims: no spectral weights to count
        return set()


def _peft():
    try:
        import peft
    except ImportError:
        raise ConfigError("--tune lora needs Hugging Face's peft: pip install 'opzoo[lora]' (or pip install peft)") \
            from None
    return peft


def has_adapters(model: nn.Module) -> bool:
    return any("lora_" in n for n, _ in model.named_parameters())


def merged_model(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every LoRA adapter merged into its layer (peft's own ``merge``: ``W + B A · alpha / r``)
    and the layer put back in its place: plain weights that load and run without ``peft``. ``model`` is left as it
    is (the copy holds its weights a second time while it is saved)."""
    import copy

    peft = _peft()
    tuner = peft.tuners.tuners_utils.BaseTunerLayer
    plain = copy.deepcopy(model)
    with torch.no_grad():
        for module in plain.modules():  # outer first: an attention's merge merges its inner projection too
            if isinstance(module, tuner) and not module.merged:
                module.merge(safe_merge=True)
    while True:  # each adapted layer put back as its base layer, outer first (names change as they go)
        found = next(((n, m) for n, m in plain.named_modules() if isinstance(m, tuner)), None)
        if found is None:
            break
        parent_name, _, child = found[0].rpartition(".")
        setattr(plain.get_submodule(parent_name) if parent_name else plain, child, found[1].get_base_layer())
    left = [n for n, _ in plain.named_parameters() if "lora_" in n]
    if left:
        raise ConfigError(f"tune lora: the adapters of {', '.join(left[:3])} could not be merged into plain weights")
    return plain


def save_adapter(model: nn.Module, directory: Path, tuning: Tuning) -> Path:
    """peft's files of ``model``'s adapter in ``directory`` (``adapter_config.json``, ``adapter_model.safetensors``,
    the names ``PeftModel.save_pretrained`` writes), written atomically; what it was trained on is the merged
    model's card."""
    from safetensors.torch import save

    from ..files import atomic_write

    peft = _peft()
    directory.mkdir(parents=True, exist_ok=True)
    state = peft.get_peft_model_state_dict(model, adapter_name=ADAPTER_NAME)
    tensors = {f"base_model.model.{k}": v.detach().contiguous().cpu() for k, v in state.items()}
    config = peft.LoraConfig(r=tuning.spec.rank, lora_alpha=tuning.spec.rank, lora_dropout=0.0,
                             target_modules=tuning.targets).to_dict()
    config = {k: (sorted(v) if isinstance(v, set) else v) for k, v in config.items()}
    atomic_write(directory / "adapter_model.safetensors", save(tensors, metadata={"format": "pt"}))
    atomic_write(directory / "adapter_config.json", json.dumps(config, indent=2, sort_keys=True, default=str).encode())
    return directory


__all__ = ["TuneSpec", "Tuning", "parse_tune", "apply_tuning", "adapted_tensors", "merged_model",
           "save_adapter", "has_adapters", "MODES", "DEFAULT_RANK"]
