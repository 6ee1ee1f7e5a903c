"""Saving and uploading a model: its repo (``config.json`` with the architecture's name and ``pretrained_cfg``, the
weights, the model card filled in from its preset's template) and one upload to the Hub."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..config import config_document
from ..registry.provenance import Result
from ..registry.registry import get_registry
from .hub import upload_folder
from .model_card import render_card
from .pretrained_cfg import schema_of, validate_pretrained_cfg
from .repo_dir import write_repo

if TYPE_CHECKING:
    from torch import nn


def save_pretrained(model: "nn.Module", save_directory: str | os.PathLike, card: str | None = None,
                    results: Sequence[Result] = (), model_name: str | None = None) -> Path:
    """Write config.json, model.safetensors and README.md (model card template ``card``, default the
    preset's card, filled in; ``results``, numbers measured on these weights, as its ``model-index`` under
    ``model_name``, default its preset's) into ``save_directory``; a failure leaves any earlier repo there as it
    was."""
    return write_model_repo(model, save_directory, card, results, model_name)


def model_card(model: "nn.Module", card: str | None = None, results: Sequence[Result] = (),
               model_name: str | None = None) -> str:
    """The README.md :func:`save_pretrained` writes for ``model``: card template ``card`` (default: its preset's
    card, if any), filled in, with ``results`` as the ``model-index`` (under ``model_name``)."""
    registry = get_registry()
    architecture = registry.backbone_name(type(model))
    name = getattr(model, "preset_name", None)
    if card is None and name and registry.has_preset(name):
        card = registry.preset(name).card_template()
    return render_card(model, architecture, card, results, model_name)


def write_model_repo(model: "nn.Module", save_directory: str | os.PathLike, card: str | None = None,
                      results: Sequence[Result] = (), model_name: str | None = None) -> Path:
    """:func:`save_pretrained` with card template ``card`` (default: the model's preset's card, if any)."""
    architecture = get_registry().backbone_name(type(model))
    validate_pretrained_cfg(model.pretrained_cfg or {}, f"{type(model).__name__}.pretrained_cfg",
                            schema_of(type(model)))
    document = config_document(architecture, model.config, model.pretrained_cfg)
    return write_repo(model, save_directory, document, model_card(model, card, results, model_name))


def push_to_hub(
    model: "nn.Module", repo_id: str, *, token: str | None = None, private: bool | None = None,
    revision: str | None = None, commit_message: str = "Upload opzoo model", create_pr: bool = False,
):
    """Save ``model`` to a temporary directory and upload it as one commit with huggingface_hub."""
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(model, tmp)
        return upload_folder(tmp, repo_id, token=token, private=private, revision=revision,
                             commit_message=commit_message, create_pr=create_pr)


__all__ = ["save_pretrained", "model_card", "write_model_repo", "push_to_hub"]
