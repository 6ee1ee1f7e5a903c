"""``pretrained_cfg``: the typed facts about a model's weights, stored in ``config.json`` (docs/architecture.md, Where a pretrained load goes).

It is validated like ``model_args``: unknown keys and wrong types or values are refused with a
message naming the file and the key. A backbone whose weights carry more facts declares its own
schema by setting ``pretrained_cfg_class`` to a subclass of :class:`PretrainedCfg`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Union

from ..config import build_dataclass
from ..errors import ConfigError


@dataclasses.dataclass
class PretrainedCfg:
    """What the weights were trained on and how inputs must look. Every field is optional."""

    preset: Optional[str] = None  # the preset these weights belong to
    channels: Optional[int] = None  # physical channels of the training data
    resolution: Optional[list[int]] = None  # spatial grid the weights were trained at
    in_timesteps: Optional[int] = None  # T_in of the training windows
    fields: Optional[list[str]] = None  # channel names, in order
    time_varying_fields: Optional[list[str]] = None  # those of ``fields`` that evolve (the rest are constant)
    datasets: Optional[list[str]] = None  # names of the training datasets
    normalization: Optional[Union[str, dict[str, Any]]] = None  # how inputs were normalized (text or facts)
    trained_steps: Optional[int] = None
    source: Optional[str] = None  # where the weights came from (e.g. an official checkpoint)
    adapted_from: Optional[str] = None  # the shapes of the model these weights were adapted from
    license: Optional[str] = None
    # the max lr `opzoo finetune` uses by default for these weights, and where that value comes from
    finetune_lr: Optional[float] = None
    finetune_lr_source: Optional[str] = None
    # how the upstream scored these weights on its test split, for `opzoo eval --windows all`: the protocol in
    # words (with its source) and the batch size whose batch means it averages
    test_protocol: Optional[str] = None
    test_batch_size: Optional[int] = None
    # the files a trained model and its ancestors saw, each {"file": name, "content_hash": ..., "trajectories": N,
    # "train"/"test": [first, last], {"indices": [...]}, "all" or None, "train_hashes"/"test_hashes": one content hash
    # per trajectory, "by": the base model that trained on it (absent: this model)}, so that `opzoo eval` scores
    # held-out data only (opzoo.evaluation.splits)
    training_data: Optional[list[dict[str, Any]]] = None
    # the model a run fine-tuned these weights from (a preset, a Hub repo id, or a local model's last two path parts)
    base_model: Optional[str] = None
    # the fit of the run's data to the model (evaluation.fit: fields, channels, grid, boundary, normalization), a line
    # per decision, as the run printed it
    data_fit: Optional[list[str]] = None
    # which step's weights a run kept (opzoo.training.selection): {"rule", "step", "validation_l2", "steps_done",
    # "steps", "early_stopped", "patience"}
    selection: Optional[dict[str, Any]] = None
    # what a fine-tune trained (opzoo.training.tuning.Tuning.record): {"mode": full|head|lora, "rank",
    # "trainable_parameters", "parameters", "lora_targets", "adapted_tensors"}
    tuning: Optional[dict[str, Any]] = None
    # the Hub commit these weights were read from (opzoo.model_io.pretrained records it when it loads them)
    weights_commit: Optional[str] = None


def _check_values(cfg: PretrainedCfg, where: str) -> None:
    for key in ("channels", "in_timesteps", "test_batch_size"):
        value = getattr(cfg, key, None)
        if value is not None and value < 1:
            raise ConfigError(f"{where}.{key}: must be >= 1, got {value}")
    if getattr(cfg, "trained_steps", None) is not None and cfg.trained_steps < 0:
        raise ConfigError(f"{where}.trained_steps: must be >= 0, got {cfg.trained_steps}")
    res = getattr(cfg, "resolution", None)
    if res is not None and (not 1 <= len(res) <= 3 or any(r < 1 for r in res)):
        raise ConfigError(f"{where}.resolution: 1 to 3 positive sizes, got {res}")
    fields, channels = getattr(cfg, "fields", None), getattr(cfg, "channels", None)
    if fields is not None and channels is not None and len(fields) != channels:
        raise ConfigError(f"{where}.fields: {len(fields)} names for channels={channels}")
    lr = getattr(cfg, "finetune_lr", None)
    if lr is not None and not 0 < lr < 1:
        raise ConfigError(f"{where}.finetune_lr: a learning rate in (0, 1), got {lr}")
    varying = getattr(cfg, "time_varying_fields", None)
    if varying is not None and fields is not None and set(varying) - set(fields):
        raise ConfigError(f"{where}.time_varying_fields: {sorted(set(varying) - set(fields))} are not in fields "
                          f"{fields}")


def validate_pretrained_cfg(document: Any, where: str = "pretrained_cfg",
                            schema: type[PretrainedCfg] = PretrainedCfg) -> dict[str, Any]:
    """Check a ``pretrained_cfg`` mapping against ``schema``; returns it as a plain dict (the keys it
    had, values as given). Raises ConfigError naming ``where`` and the key."""
    if not isinstance(document, Mapping):
        raise ConfigError(f"{where}: must be an object, got {type(document).__name__}")
    cfg = build_dataclass(schema, document, where)
    _check_values(cfg, where)
    return {k: document[k] for k in document}


def schema_of(backbone_cls: type) -> type[PretrainedCfg]:
    schema = getattr(backbone_cls, "pretrained_cfg_class", PretrainedCfg)
    if not (isinstance(schema, type) and issubclass(schema, PretrainedCfg)):
        raise ConfigError(f"{backbone_cls.__name__}.pretrained_cfg_class must subclass opzoo PretrainedCfg")
    return schema


__all__ = ["PretrainedCfg", "validate_pretrained_cfg", "schema_of"]
