"""The one place a model is built (DESIGN §4, §5): by backbone name, by preset, from a saved repo or
from a converted foreign checkpoint; and the registry-aware halves of saving and uploading.

Every path ends in :func:`build_model` (a registered backbone class and a checked config). The
files themselves are :mod:`opzoo.hub`'s job; this module names the architecture, finds a preset's
card and weights, and runs converters.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import tempfile
from importlib.resources import as_file
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from .checkpoints import ConvertedCheckpoint
from .config import config_document, read_config
from .errors import ConfigError, HubError
from .hub import (WEIGHTS_NAME, hub_download, load_state_dict_strict, load_weights, repo_files, upload_folder,
                  verify_weights, write_repo)
from .model_card import render_card
from .pretrained_cfg import schema_of, validate_pretrained_cfg
from .registry import Preset, PretrainedSource, get_registry

if TYPE_CHECKING:
    import torch

    from .interfaces import Backbone

HF_HUB_PREFIX = "hf-hub:"
LOCAL_DIR_PREFIX = "local-dir:"


# ---- building ----------------------------------------------------------------------------------
def build_model(backbone: str, args: Mapping[str, Any], source: str, overrides: Mapping[str, Any] | None = None,
                pretrained_cfg: Mapping[str, Any] | None = None, preset_name: str | None = None,
                override_source: str = "override", pretrained_cfg_source: str | None = None) -> "Backbone":
    """Registered backbone ``backbone`` built from config fields ``args`` (random weights).

    ``overrides`` replace fields afterwards (type-checked the same way); ``source`` and
    ``override_source`` name where each came from in errors. ``pretrained_cfg`` is checked against
    the backbone's schema (``pretrained_cfg_class``, errors naming ``pretrained_cfg_source``) and
    recorded on the model with ``preset_name``.
    """
    cls = get_registry().get("backbone", backbone)
    config = cls.config_class.from_dict(args, source=source)
    if overrides:
        config = config.replace(source=override_source, **overrides)
    pretrained_cfg = validate_pretrained_cfg(pretrained_cfg or {}, pretrained_cfg_source or f"{source}: pretrained_cfg",
                                             schema_of(cls))
    model = cls(config)
    model.pretrained_cfg = pretrained_cfg
    model.preset_name = preset_name
    return model


def list_models(pattern: str = "*", include_aliases: bool = False) -> list[str]:
    """Registered preset names matching the fnmatch ``pattern`` (an alias brings in its preset)."""
    return get_registry().list_models(pattern, include_aliases=include_aliases)


def create_model(backbone: str, **args: Any) -> "Backbone":
    """Build registered backbone ``backbone`` from config fields ``args`` (random weights)."""
    return build_model(backbone, args, f"{backbone} config")


def build_preset(preset: Preset, overrides: Mapping[str, Any] | None = None) -> "Backbone":
    """Preset ``preset`` with config ``overrides`` (random weights)."""
    return build_model(preset.backbone, preset.args, f"preset {preset.name}", overrides,
                       {"preset": preset.name, **preset.pretrained_cfg}, preset.name, f"override of {preset.name}",
                       f"preset {preset.name}: pretrained_cfg")


# ---- weights of presets and foreign checkpoints ----------------------------------------------------
@contextlib.contextmanager
def pretrained_file(source: PretrainedSource, filename: str | None = None) -> Iterator[Path]:
    """A local path to file ``filename`` (default ``source.filename`` or model.safetensors) of ``source``.

    A Hub source is fetched with :func:`opzoo.hub.hub_download` (cache, offline mode and errors as
    usual); a directory source (a local path or a package resource, possibly inside a zip) is used in place.
    """
    filename = filename or source.filename or WEIGHTS_NAME
    if source.repo_id is not None:
        yield hub_download(source.repo_id, filename, source.revision)
        return
    resource = source.directory.joinpath(filename)
    if not resource.is_file():
        raise HubError(f"pretrained weights {filename!r} are missing from {source.directory} "
                       f"(the package was installed without its weights, or the directory moved)")
    with as_file(resource) as path:
        yield Path(path)


def convert_file(converter: str, path: str | os.PathLike, **options: Any) -> ConvertedCheckpoint:
    """Run registered converter ``converter`` on foreign checkpoint ``path``; ``options`` are its keyword
    arguments (a preset's ``PretrainedSource.converter_options``, or ``opzoo convert``'s flags)."""
    fn = get_registry().get("converter", converter)
    accepted = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise ConfigError(
                f"converter {converter!r} takes no option(s) {', '.join(map(repr, unknown))}"
                f"{'; it takes ' + ', '.join(map(repr, list(accepted)[1:])) if len(accepted) > 1 else ''}"
            )
    return fn(Path(path), **options)


def load_preset_weights(model: "Backbone", preset: Preset) -> None:
    """Load ``preset``'s published weights into ``model`` (converted first when they are foreign)."""
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


def convert_to_repo(converter: str, path: str | os.PathLike, out_dir: str | os.PathLike, **options: Any) -> Path:
    """Convert a foreign checkpoint and write an opzoo repo (config.json, model.safetensors, README.md).

    ``options`` go to the converter. The card is the converter's (``ConvertedCheckpoint.card``), else
    its preset's.
    """
    converted = convert_file(converter, path, **options)
    preset = converted.preset
    model = build_model(converted.architecture, converted.model_args, f"{path} (converted by {converter!r})",
                        pretrained_cfg={**({"preset": preset} if preset else {}), **converted.pretrained_cfg},
                        preset_name=preset)
    load_state_dict_strict(model, converted.state_dict, f"{path} (converted by {converter!r})")
    return _write_model_repo(model, out_dir, converted.card)


# ---- saved repos ---------------------------------------------------------------------------------
def save_pretrained(model: "Backbone", save_directory: str | os.PathLike) -> Path:
    """Write config.json, model.safetensors and README.md (the preset's model card, filled in) into
    ``save_directory``; a failure leaves any earlier repo there as it was."""
    return _write_model_repo(model, save_directory)


def _write_model_repo(model: "Backbone", save_directory: str | os.PathLike, card: str | None = None) -> Path:
    """:func:`save_pretrained` with card template ``card`` (default: the model's preset's card, if any)."""
    registry = get_registry()
    architecture = registry.backbone_name(type(model))
    validate_pretrained_cfg(model.pretrained_cfg or {}, f"{type(model).__name__}.pretrained_cfg",
                            schema_of(type(model)))
    name = getattr(model, "preset_name", None)
    if card is None and name and registry.has_preset(name) and registry.preset(name).card is not None:
        card = registry.preset(name).card.read_text(encoding="utf-8")
    document = config_document(architecture, model.config, model.pretrained_cfg)
    return write_repo(model, save_directory, document, render_card(model, architecture, card))


def push_to_hub(
    model: "Backbone", repo_id: str, *, token: str | None = None, private: bool | None = None,
    revision: str | None = None, commit_message: str = "Upload opzoo model", create_pr: bool = False,
):
    """Save ``model`` to a temporary directory and upload it as one commit with huggingface_hub."""
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(model, tmp)
        return upload_folder(tmp, repo_id, token=token, private=private, revision=revision,
                             commit_message=commit_message, create_pr=create_pr)


def from_pretrained(
    repo_or_dir: str | os.PathLike, revision: str | None = None, *, device: "str | torch.device | None" = None,
    **overrides: Any,
) -> "Backbone":
    """Load an opzoo repo from a local directory or the Hub (``revision``: branch, tag or commit).

    ``overrides`` replace config fields (the weights must still fit). Extra keyword arguments of
    ``hf_hub_download`` (``cache_dir``, ``token``, ``force_download``) may be given as overrides
    named ``hub_<arg>``.
    """
    hub_kwargs = {k[4:]: overrides.pop(k) for k in list(overrides) if k.startswith("hub_")}
    config_path, weights_path = repo_files(repo_or_dir, revision, **hub_kwargs)
    document = read_config(config_path)
    pretrained_cfg = document["pretrained_cfg"]
    model = build_model(document["architecture"], document["model_args"], f"{config_path}: model_args", overrides,
                        pretrained_cfg, pretrained_cfg.get("preset"),
                        pretrained_cfg_source=f"{config_path}: pretrained_cfg")
    verify_weights(document, weights_path)
    load_weights(model, weights_path)
    if device is not None:
        model.to(device)
    return model.eval()


# ---- by name -------------------------------------------------------------------------------------
def is_saved_model_reference(name: str | os.PathLike) -> bool:
    """Whether :func:`load` reads ``name`` as a saved model (``hf-hub:``, ``local-dir:`` or an existing
    directory that is not also a preset name) rather than a registered preset."""
    name = str(name)
    if name.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        return True
    return not get_registry().has_preset(name) and Path(name).is_dir()


def load(name: str | os.PathLike, pretrained: bool = False, **overrides: Any) -> "Backbone":
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


__all__ = [
    "build_model", "create_model", "build_preset", "list_models", "load", "from_pretrained", "save_pretrained",
    "push_to_hub", "convert_file", "convert_to_repo", "load_preset_weights", "pretrained_file",
    "is_saved_model_reference",
]
