"""Fine-tuning: a pretrained model on a user's HDF5 files whose shape may differ from its pretraining data.

The model is brought to the data where the data cannot be brought to the model (docs/training.md). Fields,
channels, grid, boundary and normalization are the one fit's (:func:`opzoo.evaluation.fit.fit_data`, as the family's
data contract says: docs/data-contract.md); besides:

- **another ``T_in``** (``in_timesteps``) or **another resolution** (``resolution``): the input and output layers are
  adapted by :func:`opzoo.model_io.adapt.adapt_model` — copy what matches, initialize the rest (timm's ``in_chans``
  habit);
- **space**: the grid is chosen by :func:`opzoo.training.build.choose_grid` and said: the data's own
  for a model that runs at any grid (:meth:`opzoo.Backbone.grid_for`), else the model's pretraining
  resolution (``pretrained_cfg['resolution']``), to which the data is interpolated (bilinear,
  align_corners=False);
- **boundary**: a model with a ``periodic`` flag follows what the files state, or the training set a file is read
  as (``model.args.periodic`` overrides it), and says so (:func:`opzoo.evaluation.fit.boundary_plan`, as every
  command that fits data);
- data of another spatial dimension (a 1-D file for a 2-D model) is an error naming the file and
  both shapes.

Every fine-tuning run evaluates on its test split at step 0 (zero-shot) and at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from torch import nn

from .build import OpenDataset, open_datasets
from .config import RunConfig, apply_overrides, parse_run_config

if TYPE_CHECKING:
    from ..model_io.reference import ModelReference

AXES = "XYZ"


FALLBACK_FINETUNE_LR = 1e-4  # a model that records no recommended fine-tuning lr
SCRATCH_LR = 1e-3  # the pretraining recipe's max lr (docs/training.md), for a run from random init
EVALS_PER_RUN = 5  # test-split evaluations during a fine-tuning run (plus step 0)


def recommended_lr(model: "str | ModelReference", pretrained: bool) -> tuple[float, str]:
    """``(lr, where it comes from)``: the ``finetune_lr`` recorded in the model's ``pretrained_cfg``
    (a preset's, or a saved repo's config.json), else opzoo's fallback; from scratch, the pretraining lr."""
    from ..model_io.loading import saved_pretrained_cfg
    from ..model_io.reference import model_reference
    from ..registry.registry import get_registry

    ref = model_reference(model)
    model = ref.given
    if not pretrained and not ref.saved:  # a saved repo always brings its weights
        return SCRATCH_LR, (f"opzoo's max lr for random init (DPOT's pretraining recipe, docs/training.md), not "
                            f"necessarily {model}'s own (`opzoo info {model}`); --lr sets another")
    cfg = saved_pretrained_cfg(ref) if ref.saved else get_registry().preset(ref.preset).pretrained_cfg
    lr = cfg.get("finetune_lr")
    if lr is None:
        return FALLBACK_FINETUNE_LR, f"opzoo's fallback: {model} records no finetune_lr in its pretrained_cfg"
    return float(lr), f"recommended in {model}'s pretrained_cfg (finetune_lr)"


def finetune_config(model: "str | ModelReference", data: Sequence[str], output_dir: str, *, steps: int = 500, batch_size: int = 8,
                    lr: float | None = None, resolution: Sequence[int] | None = None, in_timesteps: int | None = None,
                    test_fraction: float = 0.1, pretrained: bool = True, layout: str | None = None,
                    fields: Sequence[str] | None = None, field_map: "str | dict[str, str] | None" = None,
                    training_set: str | None = None, train_trajectories: int | None = None,
                    validation_fraction: float = 0.0, selection: str | None = None, early_stopping: int | None = None,
                    eval_every: int | None = None, seed: int = 0, tune: str = "full", max_memory: float | None = None,
                    overrides: dict[str, Any] | None = None) -> RunConfig:
    """A validated run config that fine-tunes ``model`` (preset, hf-hub:..., or a saved repo dir) on ``data``.

    Defaults follow the pretraining recipe with the model's recommended max lr (``lr=None``: see
    :func:`recommended_lr`) and no checkpoints in between; the test split is evaluated before
    training (zero-shot), ``EVALS_PER_RUN`` times during it and at the end. ``resolution`` and
    ``in_timesteps`` other than the model's adapt its layers (see the module doc); ``field_map`` and ``training_set``
    say how the files' fields are read as the model's (docs/data-contract.md). ``train_trajectories``: train on the
    first N of each file's training split; ``validation_fraction``: hold out that fraction before the test split for
    validation, which then selects the weights kept (``selection``, default ``"validation"`` with a validation split,
    else ``"last"``) and, with ``early_stopping`` (evaluations without improvement), stops the run; ``eval_every``:
    steps between evaluations (default: ``EVALS_PER_RUN`` in a run); ``tune``: what is trained (full, head,
    lora[:RANK]: :mod:`opzoo.training.tuning`); ``max_memory``: GiB a step may hold (:mod:`opzoo.training.memory_plan`).
    """
    from ..errors import ConfigError
    from ..registry.contract import parse_field_map

    try:
        field_map = parse_field_map(field_map)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    from ..model_io.reference import model_reference

    reference = model_reference(model)
    if lr is None:
        lr = recommended_lr(reference, pretrained)[0]
    document: dict[str, Any] = {
        "output_dir": output_dir,
        "model": {"name": reference.given, "pretrained": pretrained, "adapt": True,
                  "args": {} if in_timesteps is None else {"in_timesteps": int(in_timesteps)}},
        "seed": seed,
        "data": {"datasets": [{"path": p, "test_fraction": test_fraction, **({"layout": layout} if layout else {}),
                               **({"train_trajectories": train_trajectories} if train_trajectories else {}),
                               **({"validation_fraction": validation_fraction} if validation_fraction else {}),
                               **({"fields": list(fields)} if fields else {}),
                               **({"field_map": field_map} if field_map else {}),
                               **({"training_set": training_set} if training_set else {})}
                              for p in data],
                 "resolution": list(resolution) if resolution else None},
        "optimizer": {"lr": lr},
        "training": {"steps": steps, "batch_size": batch_size, "eval_every": eval_every or -(-steps // EVALS_PER_RUN),
                     "selection": selection or ("validation" if validation_fraction else "last"),
                     **({"early_stopping": early_stopping} if early_stopping else {}),
                     **({"tune": str(tune)} if tune != "full" else {}),
                     **({"max_memory": float(max_memory)} if max_memory is not None else {})},
        "checkpoint": {"every": None},
    }
    return parse_run_config(apply_overrides(document, overrides), source="finetune arguments", reference=reference)


def adapt_to_data(model: nn.Module, cfg: RunConfig, opened: list[OpenDataset] | None = None) -> nn.Module:
    """``model`` fitted to the run's data (:func:`opzoo.training.build.fit_run_data`: fields, channels,
    ``data.resolution``, shape fields in ``model.args``, the boundary, normalization statistics).

    ``opened``: the run's files as :func:`opzoo.training.build.open_datasets` opened them (opened here if
    not given). Raises ConfigError naming the file and the flag that fits it when the data cannot fit the model."""
    from .build import fit_run_data

    return fit_run_data(model, cfg, open_datasets(cfg) if opened is None else opened).model
