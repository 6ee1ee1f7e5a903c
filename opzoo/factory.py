"""Building models by name: ``opzoo.load`` and ``opzoo.list_models`` (DESIGN §4)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .checkpoints import convert_file
from .errors import HubError
from .hub import from_pretrained, load_state_dict_strict, load_weights, pretrained_file
from .interfaces import Backbone
from .plugins import get_registry
from .registry import Preset

HF_HUB_PREFIX = "hf-hub:"
LOCAL_DIR_PREFIX = "local-dir:"


def list_models(pattern: str = "*", include_aliases: bool = False) -> list[str]:
    """Registered preset names matching the fnmatch ``pattern`` (an alias brings in its preset)."""
    return get_registry().list_models(pattern, include_aliases=include_aliases)


def create_model(backbone: str, **args: Any) -> Backbone:
    """Build registered backbone ``backbone`` from config fields ``args`` (random weights)."""
    cls = get_registry().get("backbone", backbone)
    return cls(cls.config_class.from_dict(args, source=f"{backbone} config"))


def build_preset(preset: Preset, overrides: dict[str, Any]) -> Backbone:
    cls = get_registry().get("backbone", preset.backbone)
    config = cls.config_class.from_dict(preset.args, source=f"preset {preset.name}")
    if overrides:
        config = config.replace(source=f"override of {preset.name}", **overrides)
    model = cls(config)
    model.preset_name = preset.name
    model.pretrained_cfg = {"preset": preset.name, **preset.pretrained_cfg}
    return model


def load_preset_weights(model: Backbone, preset: Preset) -> None:
    src = preset.pretrained
    if src is None:
        raise HubError(
            f"preset {preset.name!r} has no published weights; use pretrained=False to train it from "
            f"scratch, or opzoo.from_pretrained(REPO_OR_DIR) for weights you have"
        )
    with pretrained_file(src) as path:
        if src.converter is None:
            load_weights(model, path)
        else:
            converted = convert_file(src.converter, path, **src.converter_options)
            load_state_dict_strict(model, converted.state_dict, f"{path} (converted by {src.converter!r})")


def is_saved_model_reference(name: str | os.PathLike) -> bool:
    """Whether :func:`load` reads ``name`` as a saved model (``hf-hub:``, ``local-dir:`` or an existing
    directory that is not also a preset name) rather than a registered preset."""
    name = str(name)
    if name.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        return True
    return not get_registry().has_preset(name) and Path(name).is_dir()


def load(name: str | os.PathLike, pretrained: bool = False, **overrides: Any) -> Backbone:
    """A model by preset name, ``hf-hub:org/repo[@rev]``, ``local-dir:PATH`` or existing directory.

    ``pretrained=True`` loads a preset's published weights (converted on load when they are in a
    foreign format); ``overrides`` replace config fields, e.g. ``load("fno-2d", modes=24)``.
    """
    name = str(name)
    if name.startswith(HF_HUB_PREFIX):
        repo, _, revision = name[len(HF_HUB_PREFIX):].partition("@")
        return from_pretrained(repo, revision=revision or None, **overrides)
    if name.startswith(LOCAL_DIR_PREFIX):
        path = Path(name[len(LOCAL_DIR_PREFIX):]).expanduser()
        if not path.is_dir():
            raise HubError(f"local-dir: {path} is not a directory")
        return from_pretrained(path, **overrides)
    if is_saved_model_reference(name):
        return from_pretrained(name, **overrides)
    preset = get_registry().preset(name)
    model = build_preset(preset, overrides)
    if pretrained:
        load_preset_weights(model, preset)
    return model
