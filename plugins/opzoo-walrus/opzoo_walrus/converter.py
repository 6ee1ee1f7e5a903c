"""The ``walrus`` converter: Walrus's published ``walrus.pt`` (or a checkpoint of upstream's trainer, coalesced into
one file) -> opzoo ``walrus`` weights.

Upstream's trainer saves ``torch.distributed.checkpoint`` directories of ``{"app": {"model", "optimizer"}}``
(PolymathicAI/walrus_steering ``walrus_steering/walrus_steering/trainer/checkpoints.py`` @ e963fad, ``AppState``) and reads a coalesced one from a
single torch file (``CheckPointLoader.load``: ``checkpoint["app"]["model"]``); the published ``walrus.pt`` (Hugging Face
polymathic-ai/walrus @ f8fd578, 5,145,064,530 bytes) is read so by upstream's notebook (``torch.load(...)["app"]
["model"]``, PolymathicAI/walrus ``demo_notebooks/walrus_example_1_RunningWalrus.ipynb`` @ 3cd747c). opzoo reads it with
``torch.load(weights_only=True)`` (nothing in it runs), takes ``["app"]["model"]`` alone (an optimizer's state beside
it is never read into the model), and checks every name and shape against the network the tensors build. The sizes
are in the tensors: the width from the stem's second convolution, the heads from the per-head LayerNorm, the depth from
the blocks, the inner width from the stem's first convolution, the slots from its input columns. Which field a slot
holds is not in the file: a file of 67 slots holds the published map (:data:`opzoo_walrus.fields.FIELD_INDEX_MAP`);
another count needs ``field_names``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

import opzoo
from opzoo import kit

from .backbone import DEFAULT_FIELDS
from .fields import FIELD_INDEX_MAP

FORK = "PolymathicAI/walrus_steering"
FORK_AT = "e963fad"
UPSTREAM = "PolymathicAI/walrus"
HUB_REPO = "polymathic-ai/walrus"
HUB_REVISION = "f8fd578e7d8a15d2e510d32d5952b9eddc37548c"  # the notebook's download of extended_config.yaml
WEIGHTS_FILE = "walrus.pt"

# what any Walrus file's training is known to be (the published row adds its own: family.pretrained_cfg)
ANY_FILE_CFG = {"in_timesteps": 6, "finetune_lr": 2e-4,
                "finetune_lr_source": "the published training's AdamW learning rate (extended_config.yaml "
                                      "optimizer.lr 0.0002, weight decay 1e-4, eps 1e-10)"}


def at(path: str, commit: str = FORK_AT, repo: str = FORK) -> str:
    return f"{repo} {path} @ {commit}"


def read_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """The model's state of a Walrus file; nothing is executed."""
    payload = opzoo.safe_torch_load(path)
    if isinstance(payload, Mapping) and isinstance(payload.get("app"), Mapping):
        return dict(kit.tensors_under(payload["app"], "model", f"{path} ['app']", "Walrus",
                                      "upstream's trainer (coalesced torch.distributed.checkpoint)"))
    if isinstance(payload, Mapping) and payload and all(isinstance(v, torch.Tensor) for v in payload.values()):
        return dict(payload)  # a bare state dict, as CheckPointLoader's model.load_state_dict takes
    return dict(kit.tensors_under(payload, "app", str(path), "Walrus",
                                  "upstream's trainer ({'app': {'model': ...}})"))


def to_opzoo_names(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """opzoo holds upstream's network under ``net.`` with upstream's own names."""
    return {f"net.{k}": v for k, v in sd.items()}


def sizes_of(sd: Mapping[str, torch.Tensor], where: str) -> dict[str, Any]:
    """The network's sizes read from its tensors (opzoo names)."""
    def shape(key: str, ndim: int) -> tuple[int, ...]:
        return kit.tensor_shape(sd, key, where, "Walrus", ndim)

    inner, n_states = shape("net.embed.2.proj1.weight", 5)[:2]
    hidden = shape("net.embed.2.proj2.weight", 5)[0]
    head = shape("net.blocks.0.space_mixing.q_norm.weight", 1)[0]
    buckets, heads = shape("net.blocks.0.time_mixing.rel_pos_bias.relative_attention_bias.weight", 2)
    norm_mismatch = shape("net.embed.2.norm1.weight", 1)[0] != inner
    depth = len({k.split(".")[2] for k in sd if k.startswith("net.blocks.")})
    if 0 in (inner, hidden, head, heads) or head * heads != hidden or buckets != 32 or norm_mismatch:
        raise opzoo.CheckpointError(f"{where}: the tensor shapes do not form a Walrus network (stem {n_states} -> "
                                    f"{inner} -> {hidden}, {heads} heads of {head}, {buckets} time buckets)")
    return {"hidden": hidden, "heads": heads, "depth": depth, "inner": inner, "n_states": n_states}


def model_args(sd: Mapping[str, torch.Tensor], where: str,
               field_names: Sequence[str] | str | None = None) -> dict[str, Any]:
    """The ``walrus`` config of a state dict (opzoo names). No tensor holds the norms' groups, and they only reshape
    (each channel is normalized over the grid alone): the published 16 where they divide the widths."""
    sizes = sizes_of(sd, where)
    groups = math.gcd(16, sizes["inner"], sizes["hidden"])
    n = sizes.pop("n_states")
    if field_names is None:
        if n != len(FIELD_INDEX_MAP):
            raise opzoo.CheckpointError(
                f"{where}: {n} slots, not the published {len(FIELD_INDEX_MAP)} (a file fine-tuned with new fields): "
                f"the file does not say which field each slot holds; name them with field_names (opzoo convert walrus "
                f"FILE OUT --option field_names=closed_boundary,open_boundary,bias_correction,...)")
        field_names = FIELD_INDEX_MAP
    field_names = tuple(field_names.split(",") if isinstance(field_names, str) else field_names)
    if len(field_names) != n:
        raise opzoo.CheckpointError(f"{where}: {len(field_names)} field_names for the file's {n} slots")
    args = {**sizes, "groups": groups, "field_names": field_names}
    if all(f in field_names for f in DEFAULT_FIELDS):
        return args
    return {**args, "fields": field_names[3:4], "in_channels": 1, "out_channels": 1}


def convert_walrus(path, field_names: Sequence[str] | str | None = None) -> opzoo.ConvertedCheckpoint:
    """Registered as converter ``walrus``: a Walrus checkpoint -> :class:`opzoo.ConvertedCheckpoint`."""
    path = Path(path)
    sd = to_opzoo_names(read_checkpoint(path))
    args = model_args(sd, str(path), field_names)
    match = opzoo.get_registry().matching_preset("walrus", args)
    cfg = dict(match.pretrained_cfg) if match is not None else dict(ANY_FILE_CFG)
    cfg["source"] = f"Walrus checkpoint {path} (converted by opzoo's 'walrus' converter)"
    return opzoo.ConvertedCheckpoint(architecture="walrus", model_args=args, state_dict=sd, pretrained_cfg=cfg,
                                     preset=match.name if match is not None else None)


def file_args(artifacts: opzoo.PretrainedArtifacts) -> dict[str, Any]:
    """The sizes the file's tensors build (the load check, :func:`opzoo.kit.file_args_agree`)."""
    sizes = sizes_of(artifacts.state_dict, artifacts.preset)
    n = sizes.pop("n_states")
    names = tuple(artifacts.model_config.field_names)
    return {**sizes, **({} if n == len(names) else {"field_names": names[:n] if n < len(names) else
                                                     names + tuple(f"slot.{i}" for i in range(len(names), n))})}


def upstream_state(model) -> dict[str, torch.Tensor]:
    """``model``'s weights in upstream's names (the published checkpoint's)."""
    return {k[len("net."):]: v for k, v in model.state_dict().items()}
