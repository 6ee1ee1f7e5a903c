"""A finished run's model: saved as an opzoo repo (EMA weights when on) with the facts of its data and a
model card that says what it was trained on, how, and how it scores."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from torch import nn

from ..errors import OpzooError
from ..evaluation.rollouts import DatasetResult
from ..model_io.pretrained import WEIGHTS_COMMIT
from ..registry.provenance import Result
from .build import RunData
from .config import RunConfig
from .distributed import DistEnv, full_state_dict
from .ema import EMA, ema_weights

if TYPE_CHECKING:
    from .tuning import Tuning


def run_results(final: Sequence[DatasetResult]) -> list[Result]:
    """The run's final test errors as the card's ``model-index`` rows (measured by opzoo, on the held-out split)."""
    return [Result(r.name, "l2_full", r.l2_full, "opzoo", split="test (held-out trajectories of the run's file)",
                   metric_name="relative L2 over the whole rollout") for r in final]


def export_model(model: nn.Module, ema: EMA | None, cfg: RunConfig, data: RunData, out: Path, card: str,
                 results: Sequence[Result] = (), selection: dict | None = None, tuning: "Tuning | None" = None,
                 adapter_dir: Path | None = None) -> Path:
    """Save ``model`` (with ``ema``'s weights swapped in) to ``out`` with its data facts in ``pretrained_cfg`` and
    ``results`` in its card's ``model-index``; ``selection``: which step's weights these are (validation); ``tuning``:
    what was trained, recorded in ``config.json``. A model with LoRA adapters is saved merged (plain weights, no peft
    needed to load it), its adapter as peft's files in ``adapter_dir``."""
    from ..evaluation.splits import training_record
    from ..model_io.saving import save_pretrained
    from .tuning import has_adapters, merged_model, save_adapter
    shape = data.frame_shape
    base = dict(getattr(model, "pretrained_cfg", {}) or {})
    from ..data import TrajectoryDataset

    trains = [TrajectoryDataset(part.source, indices=[int(i) for i in part.samples]) for part in data.train.datasets]
    validations = dict(data.validation)
    record = training_record(cfg.data.datasets, trains,
                             [te for _, te in data.test], base=base if cfg.model.pretrained or base.get("training_data")
                             else None, base_id=cfg.model.reference.lineage_id,
                             validations=[validations.get(d.name) for d in cfg.data.datasets])
    base.pop(WEIGHTS_COMMIT, None)  # the base's file, not this model's: the card names it with the base
    with ema_weights(model, ema) as trained:
        model = merged_model(trained) if has_adapters(trained) else trained
        if adapter_dir is not None and tuning is not None and model is not trained:
            save_adapter(trained, adapter_dir, tuning)
        started = cfg.model.pretrained or cfg.model.reference.saved
        model.pretrained_cfg = {**base, "resolution": list(shape.resolution),
                                "channels": shape.channels, "in_timesteps": shape.in_timesteps,
                                "datasets": data.train.names,
                                "trained_steps": selection["steps_done"] if selection else cfg.training.steps,
                                **({"selection": {k: v for k, v in selection.items() if k != "history"}}
                                   if selection else {}),
                                "training_data": record, "data_fit": list(data.fit or []),
                                **({"fields": list(data.fields)} if data.fields else {}),
                                **({"base_model": cfg.model.reference.lineage_id} if started else {}),
                                **({"tuning": tuning.record()} if tuning is not None else {})}
        if not started:
            model.pretrained_cfg.pop("base_model", None)
        return Path(save_pretrained(model, out, card=card, results=results, model_name=index_name(cfg, started)))


def index_name(cfg: RunConfig, started: bool) -> str:
    """The name a card's ``model-index`` files this run's results under: what it started from, how, and on which
    files (``dpot-micro fine-tuned on ns.h5``); a saved run's model is named by its run folder."""
    given = Path(cfg.model.reference.given)
    base = given.parent.name if cfg.model.reference.saved and given.name == "model" else given.name
    how = "fine-tuned" if started else "trained from scratch"
    return f"{base} {how} on " + ", ".join(Path(d.path).name for d in cfg.data.datasets)


def unsharded_copy(wrapped: nn.Module, model: nn.Module, env: DistEnv) -> nn.Module | None:
    """An FSDP run's weights gathered (every rank calls this) into an unsharded copy of ``model`` (rank 0)."""
    weights = full_state_dict(wrapped, env, "fsdp")
    if not env.is_main:
        return None
    copy = type(model)(model.config)
    copy.load_state_dict(weights)
    copy.preset_name = getattr(model, "preset_name", None)
    copy.pretrained_cfg = dict(getattr(model, "pretrained_cfg", {}))
    return copy


def base_weights(cfg: RunConfig, model: nn.Module) -> str:
    """Which weights the run starts from, as its card names them: the preset's or repo's description
    (:func:`opzoo.model_io.pretrained.resolve_weights`) with the Hub commit ``model`` (as loaded) was read from."""
    from ..model_io.pretrained import resolve_weights, with_commit

    name = cfg.model.reference
    try:  # a saved repo always brings its weights, whatever model.pretrained says
        pretrained, base = resolve_weights(name, True if name.saved else cfg.model.pretrained)
    except OpzooError:  # a bare backbone name
        return f"backbone {name}, random init"
    return with_commit(base, model) if pretrained and name.kind in ("preset", "hub") else base


def run_model_card(cfg: RunConfig, data: RunData, from_scratch: bool, zero_shot: Sequence[DatasetResult] | None,
                   final: Sequence[DatasetResult], command: str | None, base: str, selection: dict | None = None,
                   tuning: str | None = None) -> str:
    """The run's model card: base model (``base``: :func:`base_weights`, as the run recorded it when it started), data
    and splits, steps and lr, test errors, command."""
    from .card import run_card

    name = cfg.model.reference
    shape = data.frame_shape
    datasets = [(tr.source, te) for tr, (_, te) in zip(data.train.datasets, data.test)]
    return run_card(model_name=name, from_scratch=from_scratch, base_weights=base, datasets=datasets,
                    steps=cfg.training.steps, lr=cfg.optimizer.lr, batch_size=cfg.training.batch_size, seed=cfg.seed,
                    zero_shot=zero_shot, final=final or [], command=command, resolution=shape.resolution,
                    channels=shape.channels, in_timesteps=shape.in_timesteps, fit=data.fit or (), selection=selection,
                    tuning=tuning)
