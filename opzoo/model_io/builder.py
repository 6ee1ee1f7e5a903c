"""The one place a model is built (docs/architecture.md): by backbone name, by preset, from a saved repo or
from a converted foreign checkpoint; and the registry-aware halves of saving and uploading.

Every path ends in :func:`build_model` (a registered backbone class and a checked config). The
files themselves are :mod:`opzoo.model_io.hub`'s job; this module names the architecture, finds a preset's
card and weights, and runs converters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import tempfile
from importlib.resources import as_file
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from ..config import CONFIG_NAME, config_document, read_config
from ..errors import ConfigError, HubError, WeightsError
from ..host.provenance import PretrainedArtifacts, Result, refuse_failed, run_checks, snapshot_revision
from ..host.registry import Preset, PretrainedSource, get_registry
from .adapt import SHAPE_FIELDS, adapt_model
from .converters import ConvertedCheckpoint
from .hub import (
    WEIGHTS_NAME,
    check_repo_dir,
    hub_download,
    hub_repo_files,
    load_state_dict_strict,
    load_weights,
    open_repo,
    read_repo_retrying,
    read_state_dict,
    upload_folder,
    write_repo,
)
from .model_card import render_card
from .pretrained_cfg import schema_of, validate_pretrained_cfg
from .reference import ModelReference, model_reference, parse_model_reference

if TYPE_CHECKING:
    import torch
    from torch import nn



# ---- building ----------------------------------------------------------------------------------
def build_model(backbone: str, args: Mapping[str, Any], source: str, overrides: Mapping[str, Any] | None = None,
                pretrained_cfg: Mapping[str, Any] | None = None, preset_name: str | None = None,
                override_source: str = "override", pretrained_cfg_source: str | None = None) -> "nn.Module":
    """Registered backbone ``backbone`` built from config fields ``args`` (random weights).

    ``overrides`` replace fields afterwards (type-checked the same way); ``source`` and
    ``override_source`` name where each came from in errors. ``pretrained_cfg`` is checked against
    the backbone's schema (``pretrained_cfg_class``, errors naming ``pretrained_cfg_source``) and
    recorded on the model with ``preset_name``. A config that would need far more memory than the
    machine has is refused before anything is allocated (:mod:`opzoo.model_io.size_check`; the override
    ``allow_oversize=True`` builds it anyway), and one the backbone cannot be built from is a
    ConfigError naming ``source``, not a traceback from inside the model.
    """
    overrides = dict(overrides or {})
    allow_oversize = bool(overrides.pop("allow_oversize", False))
    cls = get_registry().get("backbone", backbone)
    config = cls.config_class.from_dict(args, source=source)
    if overrides:
        config = config.replace(source=override_source, **overrides)
    pretrained_cfg = validate_pretrained_cfg(pretrained_cfg or {}, pretrained_cfg_source or f"{source}: pretrained_cfg",
                                             schema_of(cls))
    from .size_check import build_within_memory

    where = override_source if overrides else source
    try:
        model = build_within_memory(cls, config, where, allow_oversize)
    except (ZeroDivisionError, ValueError, OverflowError, IndexError, RuntimeError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{where}: {backbone} cannot be built from this config ({type(e).__name__}: "
                          f"{' '.join(str(e).split())})") from None
    model.pretrained_cfg = pretrained_cfg
    model.preset_name = preset_name
    return model


def list_models(pattern: str = "*", pretrained: bool = False, include_aliases: bool = False) -> list[str]:
    """Registered preset names matching the fnmatch ``pattern`` (an alias brings in its preset), as
    ``timm.list_models``; ``pretrained=True`` keeps only presets with published weights."""
    registry = get_registry()
    names = registry.list_models(pattern, include_aliases=include_aliases)
    if pretrained:
        names = [n for n in names if registry.preset(n).pretrained is not None]
    return names


def create_model(name: "str | ModelReference", pretrained: bool = False, **args: Any) -> "nn.Module":
    """timm's name for :func:`load` (the same grammar, the same model): a preset, ``hf-hub:``/``local-dir:``
    reference or saved directory (``args`` are config overrides), or a registered *backbone* name built from config
    fields ``args`` with random weights, e.g. ``create_model("pot", width=64, ...)``."""
    return load(name, pretrained=pretrained, **args)


def build_backbone(ref: ModelReference, pretrained: bool, args: dict[str, Any]) -> "nn.Module":
    """A registered backbone ``ref`` built from config fields ``args``, random weights (it has no published ones)."""
    if pretrained:
        raise HubError(f"{ref.given!r} is a bare backbone and has no weights; name a preset "
                       f"(opzoo.list_models(pretrained=True)) or a saved repo")
    oversize = {"allow_oversize": args.pop("allow_oversize")} if "allow_oversize" in args else {}
    return build_model(ref.given, args, f"{ref.given} config", oversize or None)


def build_preset(preset: Preset, overrides: Mapping[str, Any] | None = None) -> "nn.Module":
    """Preset ``preset`` with config ``overrides`` (random weights)."""
    return build_model(preset.backbone, preset.args, f"preset {preset.name}", overrides,
                       {"preset": preset.name, **preset.pretrained_cfg}, preset.name, f"override of {preset.name}",
                       f"preset {preset.name}: pretrained_cfg")


# ---- weights of presets and foreign checkpoints ----------------------------------------------------
@contextlib.contextmanager
def pretrained_file(source: PretrainedSource, filename: str | None = None, local_files_only: bool = False,
                    preset: str | None = None) -> Iterator[Path]:
    """A local path to file ``filename`` (default ``source.filename`` or model.safetensors) of ``source``.

    A Hub source is fetched with :func:`opzoo.model_io.hub.hub_download` (cache, offline mode and errors as usual;
    ``local_files_only``: from the cache alone; the error names every file the source reads, and for ``preset``'s
    foreign files how to load a local copy of them); a directory source (a local path or a package resource,
    possibly inside a zip) is used in place.
    """
    filename = filename or source.filename or WEIGHTS_NAME
    if source.repo_id is not None:
        names = [source.filename or WEIGHTS_NAME, *source.extra_files]
        local_copy = None
        if source.converter is not None:  # foreign files: not an opzoo repo, so not local-dir:
            local_copy = (f"load a local copy of {' and '.join(names)} (that layout, under a directory PATH) with "
                          f"opzoo.load('{preset or 'PRESET'}', pretrained=True, pretrained_cfg_overlay="
                          f"{{'directory': 'PATH'}})")
        yield hub_download(source.repo_id, filename, source.revision, companions=names, local_copy=local_copy,
                           **({"local_files_only": True} if local_files_only else {}))
        return
    resource = source.directory.joinpath(filename)
    if not resource.is_file():
        raise HubError(f"pretrained weights {filename!r} are missing from {source.directory} "
                       f"(the package was installed without its weights, or the directory moved)")
    with as_file(resource) as path:
        yield Path(path)


@contextlib.contextmanager
def pretrained_files(source: PretrainedSource, local_files_only: bool = False, preset: str | None = None
                     ) -> Iterator[dict[str, Path]]:
    """Local paths of the weights file (first) and of ``source.extra_files``, by name."""
    names = [source.filename or WEIGHTS_NAME, *source.extra_files]
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(pretrained_file(source, name, local_files_only, preset)) for name in names}


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


@contextlib.contextmanager
def fetch_pretrained(preset: Preset, model_config: Any, local_files_only: bool = False
                     ) -> Iterator[tuple[PretrainedArtifacts, str]]:
    """``(artifacts, where)``: ``preset``'s published files, fetched (or found in the cache; ``local_files_only``:
    from the cache alone), with the tensors they hold in opzoo's names (converted when they are foreign), for a
    model of config ``model_config``; ``where`` names them in messages. Runs no check."""
    src = preset.pretrained
    if src is None:
        raise HubError(
            f"preset {preset.name!r} has no published weights; use pretrained=False to train it from "
            f"scratch, or opzoo.from_pretrained(REPO_OR_DIR) for weights you have"
        )
    with pretrained_files(src, local_files_only, preset.name) as files:
        path = next(iter(files.values()))
        if src.converter is None:
            state_dict, where = read_state_dict(path), str(path)
        else:
            state_dict = convert_file(src.converter, path, **src.converter_options).state_dict
            where = f"{path} (converted by {src.converter!r})"
        yield PretrainedArtifacts(preset.name, files, state_dict, model_config, snapshot_revision(path)), where


def load_preset_weights(model: "nn.Module", preset: Preset) -> None:
    """Load ``preset``'s published weights into ``model`` (converted first when they are foreign), after
    its source's checks pass on the real files (:class:`opzoo.PretrainedCheck`); nothing changes otherwise."""
    with fetch_pretrained(preset, model.config) as (artifacts, where):
        # the checks first: where an assumption fails they say which and what to do, before a bare shape error
        refuse_failed(preset.name, run_checks(preset.pretrained.checks, artifacts))
        load_state_dict_strict(model, artifacts.state_dict, where)


def overlaid(preset: Preset, overlay: Mapping[str, Any]) -> tuple[Preset, str | None]:
    """``preset`` with ``overlay`` applied (timm's ``pretrained_cfg_overlay``): keys of ``PretrainedSource`` replace
    the source's (``repo_id`` and ``directory`` replace each other), ``file`` is returned apart (a local weights
    file: ``checkpoint_path``), every other key goes into ``pretrained_cfg`` (checked where the model is built)."""
    if not isinstance(overlay, Mapping):
        raise ConfigError(f"pretrained_cfg_overlay: expected a dict, got {type(overlay).__name__}")
    overlay = dict(overlay)
    file = overlay.pop("file", None)
    source_keys = {f.name for f in dataclasses.fields(PretrainedSource)} - {"checks", "extra_files"}
    source = {k: overlay.pop(k) for k in list(overlay) if k in source_keys}
    if source:
        if preset.pretrained is None and not ({"repo_id", "directory"} & set(source)):
            raise ConfigError(f"pretrained_cfg_overlay: preset {preset.name!r} publishes no weights; give 'repo_id' "
                              f"or 'directory' (or 'file') to say where they are")
        base = {f.name: getattr(preset.pretrained, f.name) for f in dataclasses.fields(PretrainedSource)} \
            if preset.pretrained is not None else {}
        if "repo_id" in source:
            base.pop("directory", None)
        if "directory" in source:
            base.update(repo_id=None, revision=None)
        try:
            new = PretrainedSource(**{**base, **source})
        except (TypeError, ValueError) as e:
            raise ConfigError(f"pretrained_cfg_overlay: {e}") from None
        preset = dataclasses.replace(preset, pretrained=new)
    if overlay:
        preset = dataclasses.replace(preset, pretrained_cfg={**preset.pretrained_cfg, **overlay})
    return preset, file


def load_checkpoint_file(model: "nn.Module", preset: Preset, path: Path) -> None:
    """``path``'s weights into ``model`` (timm's ``checkpoint_path``): opzoo's safetensors as they are, a file in the
    preset's published format through its converter and its load checks. Strict; nothing loads otherwise."""
    if not path.is_file():
        raise HubError(f"checkpoint_path: {path} is not a file")
    src = preset.pretrained
    if path.suffix == ".safetensors":
        state_dict = read_state_dict(path)
        # opzoo's names (save_pretrained) load as they are; a published safetensors file in the preset's own format
        # (other names) goes through its converter
        if src is None or src.converter is None or set(state_dict) & set(model.state_dict()):
            load_state_dict_strict(model, state_dict, str(path))
            return
    if src is None or src.converter is None:
        raise ConfigError(f"checkpoint_path: {path} is not a .safetensors file, and preset {preset.name!r} has no "
                          f"converter for another format; save the weights with opzoo (save_pretrained) first")
    files = {src.filename or path.name: path}
    for extra in src.extra_files:  # read beside the weights, as in the published layout
        beside = path.parent / PurePosixPath(extra).name
        if not beside.is_file():
            raise ConfigError(f"checkpoint_path: {preset.name}'s weights are read with {PurePosixPath(extra).name} "
                              f"beside them ({beside} is missing); put it there, or pass pretrained_cfg_overlay="
                              f"{{'directory': DIR}} for a directory holding {src.filename or WEIGHTS_NAME} and "
                              f"{', '.join(src.extra_files)}")
        files[extra] = beside
    where = f"{path} (converted by {src.converter!r})"
    state_dict = convert_file(src.converter, path, **src.converter_options).state_dict
    artifacts = PretrainedArtifacts(preset.name, files, state_dict, model.config, None)
    refuse_failed(preset.name, run_checks(src.checks, artifacts))
    load_state_dict_strict(model, state_dict, where)


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
def save_pretrained(model: "nn.Module", save_directory: str | os.PathLike, card: str | None = None,
                    results: Sequence[Result] = ()) -> Path:
    """Write config.json, model.safetensors and README.md (model card template ``card``, default the
    preset's card, filled in; ``results``, numbers measured on these weights, as its ``model-index``) into
    ``save_directory``; a failure leaves any earlier repo there as it was."""
    return _write_model_repo(model, save_directory, card, results)


def model_card(model: "nn.Module", card: str | None = None, results: Sequence[Result] = ()) -> str:
    """The README.md :func:`save_pretrained` writes for ``model``: card template ``card`` (default: its preset's
    card, if any), filled in, with ``results`` as the ``model-index``."""
    registry = get_registry()
    architecture = registry.backbone_name(type(model))
    name = getattr(model, "preset_name", None)
    if card is None and name and registry.has_preset(name):
        card = registry.preset(name).card_template()
    return render_card(model, architecture, card, results)


def _write_model_repo(model: "nn.Module", save_directory: str | os.PathLike, card: str | None = None,
                      results: Sequence[Result] = ()) -> Path:
    """:func:`save_pretrained` with card template ``card`` (default: the model's preset's card, if any)."""
    architecture = get_registry().backbone_name(type(model))
    validate_pretrained_cfg(model.pretrained_cfg or {}, f"{type(model).__name__}.pretrained_cfg",
                            schema_of(type(model)))
    document = config_document(architecture, model.config, model.pretrained_cfg)
    return write_repo(model, save_directory, document, model_card(model, card, results))


def push_to_hub(
    model: "nn.Module", repo_id: str, *, token: str | None = None, private: bool | None = None,
    revision: str | None = None, commit_message: str = "Upload opzoo model", create_pr: bool = False,
):
    """Save ``model`` to a temporary directory and upload it as one commit with huggingface_hub."""
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(model, tmp)
        return upload_folder(tmp, repo_id, token=token, private=private, revision=revision,
                             commit_message=commit_message, create_pr=create_pr)


def from_pretrained(
    repo_or_dir: "str | os.PathLike | ModelReference", revision: str | None = None, *,
    device: "str | torch.device | None" = None, **overrides: Any,
) -> "nn.Module":
    """Load a saved opzoo repo from a local directory or the Hub (``revision``: branch, tag or commit), in eval mode.

    The grammar is :func:`load`'s (``hf-hub:org/name[@rev]``, ``local-dir:PATH``, a directory, a preset), with one
    documented difference, huggingface_hub's convention: a bare ``org/name`` that is neither a preset nor a directory
    is a Hub repo (``load`` asks for ``hf-hub:`` there). A preset name loads its published weights, as
    ``load(name, pretrained=True)``. ``overrides`` replace config fields (the weights must still fit). Extra keyword
    arguments of ``hf_hub_download`` (``cache_dir``, ``token``, ``force_download``) may be given as overrides named
    ``hub_<arg>``.
    """
    ref = repo_or_dir if isinstance(repo_or_dir, ModelReference) else parse_model_reference(
        Path(repo_or_dir) if isinstance(repo_or_dir, Path) else repo_or_dir, backbones=False, bare_repo_ids=True)
    if ref.kind == "preset":
        if revision is not None:
            raise ConfigError(f"from_pretrained({ref.given!r}, revision={revision!r}): revision applies to Hub repos; "
                              f"for a preset's weights pass pretrained_cfg_overlay={{'revision': ...}} to opzoo.load")
        model = load(ref, pretrained=True, **overrides)
        return model.to(device) if device is not None else model
    if ref.kind == "hub":
        if revision is not None and ref.revision is not None and revision != ref.revision:
            raise ConfigError(f"{ref.given!r} names revision {ref.revision!r} and revision={revision!r} another; "
                              "give one")
        hub_kwargs = {k[4:]: overrides.pop(k) for k in list(overrides) if k.startswith("hub_")}
        config_path, weights_path = hub_repo_files(ref.repo_id, revision or ref.revision, **hub_kwargs)
    else:
        check_repo_dir(ref.path)
        config_path, weights_path = ref.path / CONFIG_NAME, ref.path / WEIGHTS_NAME
    return _from_files(config_path, weights_path, device, overrides)


def _from_files(config_path: Path, weights_path: Path, device, overrides: Mapping[str, Any]) -> "nn.Module":
    def read() -> "nn.Module":  # one consistent read: the config and the weights of the same save
        with open_repo(config_path, weights_path) as repo:
            pretrained_cfg = repo.document["pretrained_cfg"]
            built = build_model(repo.document["architecture"], repo.document["model_args"],
                                f"{config_path}: model_args", overrides, pretrained_cfg, pretrained_cfg.get("preset"),
                                pretrained_cfg_source=f"{config_path}: pretrained_cfg")
            load_weights(built, repo.weights, shown_as=weights_path, verify=repo.verify)
            return built

    model = read_repo_retrying(read)
    if device is not None:
        model.to(device)
    return model.eval()


# ---- by name -------------------------------------------------------------------------------------
def load(name: "str | os.PathLike | ModelReference", pretrained: bool = False, **overrides: Any) -> "nn.Module":
    """A model by preset name, ``hf-hub:org/repo[@rev]``, ``local-dir:PATH``, existing directory, or registered
    backbone name (random weights from config fields ``overrides``; :func:`create_model` is the same function).

    ``pretrained=True`` loads a preset's published weights (converted on load when they are in a
    foreign format, after the preset's load checks pass on them) and returns the model in eval mode,
    as :func:`from_pretrained` and a saved model do: ``y = model(x)`` is inference at once (BatchNorm
    uses its running statistics, dropout is off). Training code calls ``model.train()`` itself, as in
    PyTorch (opzoo's trainer does at every step). A preset built with random weights
    (``pretrained=False``) stays in training mode, like any new ``nn.Module`` and timm's ``create_model``.
    ``overrides`` replace config fields, e.g. ``load("fno-2d", modes=24)``. With
    ``pretrained=True`` the shape fields ``in_channels``, ``out_channels``, ``in_timesteps`` and
    ``img_size`` adapt the weights instead (:func:`adapt_loaded`), as timm's ``in_chans`` does.

    timm's two load arguments, with timm's meaning, for presets:

    - ``pretrained_cfg_overlay={...}``: replaces fields of where the preset's weights come from (its
      ``PretrainedSource``: ``repo_id``, ``revision``, ``filename``, ``directory``, ``converter``,
      ``converter_options``; ``file`` is timm's name for a local weights file, ``checkpoint_path``) and of its
      ``pretrained_cfg`` (``resolution``, ``datasets``, ...) for this load; the load checks still run.
    - ``checkpoint_path=FILE``: the preset's weights from a local file instead of its published ones: a
      ``.safetensors`` file in opzoo's names (e.g. from ``save_pretrained``), or a file in the preset's published
      format (converted by its converter, after its load checks). Returned in eval mode, as a pretrained load.
    """
    overlay = overrides.pop("pretrained_cfg_overlay", None)
    checkpoint_path = overrides.pop("checkpoint_path", None)
    ref = model_reference(name)
    if ref.kind == "backbone" and overlay is None and checkpoint_path is None:
        return build_backbone(ref, pretrained, overrides)
    if (overlay is not None or checkpoint_path is not None) and ref.kind != "preset":
        raise ConfigError(f"{name}: pretrained_cfg_overlay= and checkpoint_path= apply to presets; a saved model "
                          f"brings its own weights and pretrained_cfg")
    if ref.kind == "hub":  # always the Hub, never a local directory of the same name
        hub_kwargs = {k[4:]: overrides.pop(k) for k in list(overrides) if k.startswith("hub_")}
        config_path, weights_path = hub_repo_files(ref.repo_id, ref.revision, **hub_kwargs)
        return _from_files(config_path, weights_path, overrides.pop("device", None), overrides)
    if ref.kind == "dir":
        return from_pretrained(ref, **overrides)
    preset = get_registry().preset(ref.preset)
    if overlay is not None:
        preset, file = overlaid(preset, overlay)
        if file is not None:
            if checkpoint_path is not None:
                raise ConfigError(f"{preset.name}: pretrained_cfg_overlay['file'] and checkpoint_path= both name a "
                                  "weights file; give one")
            checkpoint_path = file
    if checkpoint_path is not None:
        if pretrained:
            raise ConfigError(f"{preset.name}: checkpoint_path= loads the weights from {checkpoint_path}; drop "
                              "pretrained=True (it would load the published weights first, for nothing)")
        shape = {k: overrides.pop(k) for k in SHAPE_FIELDS if k in overrides}
        model = build_preset(preset, overrides)
        load_checkpoint_file(model, preset, Path(checkpoint_path))
        return adapt_loaded(model, preset.name, shape).eval()
    if not pretrained:
        return build_preset(preset, overrides)
    shape = {k: overrides.pop(k) for k in SHAPE_FIELDS if k in overrides}
    if "in_channels" in shape:  # labels per channel name the adapted channels: applied with them
        labels = getattr(get_registry().get("backbone", preset.backbone).config_class, "per_channel_fields", ())
        shape |= {k: overrides.pop(k) for k in labels if k in overrides}
    model = build_preset(preset, overrides)
    try:
        load_preset_weights(model, preset)
    except WeightsError as e:
        if not overrides:
            raise
        raise WeightsError(f"the overrides {sorted(overrides)} change tensors the published weights of {preset.name} fix. "
                           f"With pretrained=True only {', '.join(SHAPE_FIELDS)} adapt the weights at load time; "
                           f"drop the other overrides, or load with pretrained=False. Details: {e}") from None
    return adapt_loaded(model, preset.name, shape).eval()


def adapt_loaded(model: "nn.Module", name: str, shape: Mapping[str, Any]) -> "nn.Module":
    """``model`` with its published weights brought to the shape fields ``shape`` (``in_channels``,
    ``out_channels``, ``in_timesteps``, ``img_size``) by :func:`opzoo.model_io.adapt.adapt_model`, as timm does for
    ``in_chans``: copy what matches, interpolate positional embeddings, initialize the rest.

    ``in_channels`` alone changes ``out_channels`` too when the model maps C -> C (an auto-regressive
    operator predicts the channels it reads)."""
    if not shape:
        return model
    c = model.config
    shape = dict(shape)
    if "in_channels" in shape and "out_channels" not in shape and c.in_channels == c.out_channels:
        shape["out_channels"] = shape["in_channels"]
    try:
        return adapt_model(model, **shape)
    except ConfigError as e:
        raise ConfigError(f"{name}: the published weights cannot be adapted to {shape}: {e}. What adapts at load "
                          f"time: {', '.join(SHAPE_FIELDS)} (with io_layout); other fields must match the weights, "
                          f"or load with pretrained=False") from None


def source_description(source: PretrainedSource, owner: str | None = None) -> str:
    """Where weights come from, for headers and ``opzoo info``: the Hub repo, file and revision, or the
    package (with its version) they ship in."""
    if source.repo_id is not None:
        text = (f"{source.location.partition('@')[0]} file {source.filename or WEIGHTS_NAME}, "
                f"revision {source.revision or 'main (latest)'}")
    else:
        version = _distribution_version(owner) if owner else None
        where = f"package {owner} {version}" if version else "directory"
        text = f"{where}: {source.directory}"
    return text + (f", converted by {source.converter!r}" if source.converter else "")


def _distribution_version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except (PackageNotFoundError, ValueError):
        return None


def saved_pretrained_cfg(name: "str | ModelReference") -> dict:
    """The ``pretrained_cfg`` in a saved model's ``config.json`` (only that file is read or fetched)."""
    ref = model_reference(name, backbones=False)
    if ref.kind == "hub":
        return read_config(hub_download(ref.repo_id, CONFIG_NAME, ref.revision))["pretrained_cfg"]
    if ref.kind != "dir":
        raise HubError(f"{name} is a preset, not a saved model")
    return read_config(ref.path / CONFIG_NAME)["pretrained_cfg"]


def preset_named(name: "str | ModelReference") -> Preset:
    """The registered preset ``name`` (:func:`opzoo.model_io.reference.parse_model_reference`'s errors otherwise)."""
    ref = model_reference(name, backbones=False)
    if ref.kind != "preset":
        raise HubError(f"{name} is a saved model, not a preset")
    return get_registry().preset(ref.preset)


def resolve_weights(name: "str | ModelReference", pretrained: bool | None) -> tuple[bool, str]:
    """``(pretrained, description)`` for model ``name``: ``pretrained=None`` (the default of ``eval``,
    ``rollout``, ``finetune``) means a preset's published weights when it has some, else random init;
    ``description`` says which weights run (e.g. ``NAME pretrained, from hf-hub:...``; the CLI prints it
    after ``weights:``, a card names the base model with it)."""
    ref = model_reference(name, backbones=False)
    name = ref.given
    if ref.saved:
        if pretrained is False:
            raise ConfigError(f"--no-pretrained applies to presets; {name} is a saved model and always loads its weights")
        if ref.kind == "dir":
            check_repo_dir(ref.path)
        return True, f"{name} (a saved opzoo repo)"
    preset = get_registry().preset(ref.preset)
    if pretrained is None:
        pretrained = preset.pretrained is not None
    if pretrained:
        if preset.pretrained is None:
            raise HubError(f"preset {preset.name!r} has no published weights; drop --pretrained (or pass "
                           f"--no-pretrained) to run it from random init")
        return True, f"{preset.name} pretrained, from {source_description(preset.pretrained, preset.owner)}"
    why = "--no-pretrained" if preset.pretrained is not None else "this preset publishes no weights"
    return False, f"{preset.name} random init ({why})"


__all__ = [
    "source_description", "resolve_weights", "saved_pretrained_cfg", "adapt_loaded",
    "build_model", "create_model", "build_preset", "list_models", "load", "from_pretrained", "save_pretrained",
    "push_to_hub", "convert_file", "convert_to_repo", "load_preset_weights", "pretrained_file", "pretrained_files",
    "fetch_pretrained", "build_backbone",
]
