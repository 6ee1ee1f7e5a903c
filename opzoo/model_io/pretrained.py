"""A preset's published weights and foreign checkpoints: fetched (the Hub cache, a directory, a package), converted by
a registered converter, checked by the preset's load checks on the real files, loaded strictly; ``opzoo convert``'s
repo, ``pretrained_cfg_overlay`` and ``checkpoint_path``, and the one line that says which weights run."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
from importlib.resources import as_file
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from ..config import CONFIG_NAME, read_config
from ..errors import CheckpointError, ConfigError, HubError, OpzooError, OpzooNotice, WeightsError
from ..registry.provenance import PretrainedArtifacts, refuse_failed, run_checks, snapshot_revision
from ..registry.registry import Preset, PretrainedSource, get_registry
from .builder import build_model
from .converters import ConvertedCheckpoint
from .hub import hub_download
from .reference import ModelReference, model_reference
from .repo_dir import WEIGHTS_NAME, check_repo_dir
from .saving import write_model_repo
from .weights import load_state_dict_strict, read_state_dict

if TYPE_CHECKING:
    from torch import nn


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
    if source.download_page is not None:
        raise HubError(download_refusal(source, preset))
    if source.repo_id is not None:
        names = [source.filename or WEIGHTS_NAME, *source.extra_files]
        local_copy = None
        name = preset or "PRESET"
        if source.converter is not None:  # foreign files: not an opzoo repo, so not local-dir:
            local_copy = (f"convert a local copy with `opzoo convert {source.converter} FILE OUT` and use OUT as the "
                          f"model (or in Python opzoo.load('{name}', pretrained=True, pretrained_cfg_overlay="
                          f"{{'directory': 'PATH'}}) with {' and '.join(names)} under PATH), or pass --no-pretrained "
                          f"for {name}'s architecture with random weights")
        yield hub_download(source.repo_id, filename, source.revision, companions=names, local_copy=local_copy,
                           **({"local_files_only": True} if local_files_only else {}))
        return
    resource = source.directory.joinpath(filename)
    if not resource.is_file():
        raise HubError(directory_refusal(source.directory, filename))
    with as_file(resource) as path:
        yield Path(path)


def download_refusal(source: PretrainedSource, preset: str | None = None) -> str:
    """Why weights published on a download page are not loaded by name, and the three ways to use the file."""
    name = preset or "PRESET"
    return (f"{name}'s weights are not on the Hugging Face Hub: they are the file {source.filename} of "
            f"{source.download_page}, which opzoo does not download; download it by hand, then "
            f"opzoo.load({name!r}, checkpoint_path=FILE), or `opzoo convert {source.converter} FILE OUT` and use OUT, "
            f"or check it with `opzoo verify {name} --file FILE`")


def directory_refusal(directory, filename: str) -> str:
    """Why ``filename`` is not found under a weights directory, and what to name instead."""
    where = Path(str(directory))
    sub = Path(filename).parts[:-1]
    if not where.exists():
        return (f"pretrained weights {filename!r}: the directory {directory} does not exist (moved, or a package "
                f"installed without its weights)")
    if sub and where.name == sub[-1] and (where / Path(filename).name).is_file():
        return (f"{directory} is the subfolder {sub[-1]!r} of the repo: name the directory that holds it "
                f"({where.parent}), where {filename} is")
    return f"{directory} has no {filename}: name the directory that holds the Hub repo's layout ({filename} under it)"


@contextlib.contextmanager
def pretrained_files(source: PretrainedSource, local_files_only: bool = False, preset: str | None = None
                     ) -> Iterator[dict[str, Path]]:
    """Local paths of the weights file (first) and of ``source.extra_files``, by name. A Hub repo without the weights
    file (at the revision, or in the cache offline) is read through its first ``fallback_filenames`` it has; when none
    is there, the error is the first file's."""
    with contextlib.ExitStack() as stack:
        weights, first_error = None, None
        for name in (source.filename or WEIGHTS_NAME, *source.fallback_filenames):
            try:
                weights = (name, stack.enter_context(pretrained_file(source, name, local_files_only, preset)))
                break
            except HubError as e:
                first_error = first_error or e
        if weights is None:
            raise first_error
        yield {weights[0]: weights[1], **{name: stack.enter_context(pretrained_file(source, name, local_files_only,
                                                                                     preset))
                                          for name in source.extra_files}}


def fetch_before_building(preset: Preset) -> None:
    """Fetch (or find in the cache) ``preset``'s published Hub files before its model is built, so that an offline
    load, a missing file or a refused download fails at once, not after building a model of billions of parameters
    (the load that follows reads them from the cache)."""
    if preset.pretrained is not None and (preset.pretrained.repo_id or preset.pretrained.download_page) is not None:
        with pretrained_files(preset.pretrained, preset=preset.name):
            pass


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
    try:
        return fn(Path(path), **options)
    except (OpzooError, MemoryError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - a malformed upstream file: one line naming it, not the converter's traceback
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise CheckpointError(f"{path}: the {converter!r} converter cannot read this checkpoint ({type(e).__name__}"
                              f"{': ' + first if first else ''}); is it one of the files that converter takes?") from None


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
        license_notice(preset)
        record = _shipped_training_record(preset.pretrained, next(iter(artifacts.files.values())))
        if record is not None:
            model.pretrained_cfg = {**getattr(model, "pretrained_cfg", {}), "training_data": record}
        if artifacts.revision is not None:  # "main (latest)" names no file: the commit read does
            model.pretrained_cfg = {**getattr(model, "pretrained_cfg", {}), WEIGHTS_COMMIT: artifacts.revision}


WEIGHTS_COMMIT = "weights_commit"  # pretrained_cfg: the Hub commit of the file a model's weights were read from


def with_commit(description: str, model: "nn.Module") -> str:
    """``description`` (:func:`resolve_weights`'s) with the Hub commit ``model``'s weights were read from, where it
    was read from the Hub: the file a revision like ``main`` named then, whatever it names later."""
    commit = (getattr(model, "pretrained_cfg", None) or {}).get(WEIGHTS_COMMIT)
    return f"{description}, commit {commit}" if commit and f"commit {commit}" not in description else description


class LicenseNotice(OpzooNotice):
    """Said once per process for each license that restricts the use of weights being loaded (non-commercial)."""


_NOTICED: set[str] = set()


def license_notice(preset: Preset) -> None:
    """Say once per process that ``preset``'s weights are for non-commercial use when its ``pretrained_cfg`` license
    is a non-commercial one (CC-BY-NC-*): the user decides at load time, not after reading a card."""
    import warnings

    license = str((preset.pretrained_cfg or {}).get("license") or "")
    if "-NC" not in license.upper() or license in _NOTICED:
        return
    _NOTICED.add(license)
    warnings.warn(f"{preset.name}: the weights are licensed {license}: non-commercial use only (said once per "
                  f"process; `opzoo info {preset.name}` gives the source)", LicenseNotice, stacklevel=3)


def _shipped_training_record(src: PretrainedSource, weights: Path) -> list | None:
    """The training record (``pretrained_cfg["training_data"]``) in the ``config.json`` beside weights that ship in a
    directory in opzoo's format (a package's micro weights): what those weights trained on, which the preset's table
    does not hold."""
    config = weights.with_name(CONFIG_NAME)
    if src.converter is not None or src.directory is None or not config.is_file():
        return None
    record = (read_config(config).get("pretrained_cfg") or {}).get("training_data")
    return record if isinstance(record, list) else None


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
            base.update(directory=None, download_page=None)
        if "directory" in source:  # a local copy of the repo: its fallback weights files are read there too
            base.update(repo_id=None, revision=None, download_page=None)
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
        from ..tensor_files import safetensors_names

        # opzoo's names (save_pretrained) load as they are; a published safetensors file in the preset's own format
        # (other names) goes through its converter. The names are read from the header: the file is read once
        names = safetensors_names(path, WeightsError)
        if src is None or src.converter is None or set(names) & set(model.state_dict()):
            load_state_dict_strict(model, read_state_dict(path), str(path))
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
    refuse_failed(preset.name, run_checks(src.checks, artifacts), weights=f"the weights in {path}")
    load_state_dict_strict(model, state_dict, where)


def convert_to_repo(converter: str, path: str | os.PathLike, out_dir: str | os.PathLike, *, force: bool = False,
                    **options: Any) -> Path:
    """Convert a foreign checkpoint and write an opzoo repo (config.json, model.safetensors, README.md).

    ``options`` go to the converter. The card is the converter's (``ConvertedCheckpoint.card``), else
    its preset's. ``out_dir`` may be new or hold an opzoo repo; a directory holding other files is refused before
    anything is read, unless ``force`` (:func:`opzoo.files.claim_output_dir`).
    """
    from ..files import claim_output_dir
    from .repo_dir import written_by_opzoo

    claim_output_dir(out_dir, written_by_opzoo, force=force, flag="OUT", what="the converted repo",
                     advice="pass --force to write the repo's config.json, model.safetensors and README.md beside them")
    converted = convert_file(converter, path, **options)
    preset = converted.preset
    model = build_model(converted.architecture, converted.model_args, f"{path} (converted by {converter!r})",
                        pretrained_cfg={**({"preset": preset} if preset else {}), **converted.pretrained_cfg},
                        preset_name=preset, weights_follow=True)
    load_state_dict_strict(model, converted.state_dict, f"{path} (converted by {converter!r})")
    return write_model_repo(model, out_dir, converted.card)


def source_description(source: PretrainedSource, owner: str | None = None) -> str:
    """Where weights come from, for headers and ``opzoo info``: the Hub repo, file and revision, or the
    package (with its version) they ship in."""
    if source.repo_id is not None:
        text = (f"{source.location.partition('@')[0]} file {source.filename or WEIGHTS_NAME}, "
                f"revision {source.revision or 'main (latest)'}")
    elif source.download_page is not None:
        text = (f"file {source.filename} of {source.download_page}, downloaded by hand (opzoo does not download it: "
                f"load it with checkpoint_path=FILE)")
    else:
        version = distribution_version(owner) if owner else None
        where = f"package {owner} {version}" if version else "directory"
        text = f"{where}: {source.directory}"
    return text + (f", converted by {source.converter!r}" if source.converter else "")


def distribution_version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except (PackageNotFoundError, ValueError):
        return None


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


__all__ = ["pretrained_file", "pretrained_files", "convert_file", "fetch_pretrained", "load_preset_weights", "overlaid",
           "load_checkpoint_file", "convert_to_repo", "source_description", "resolve_weights", "with_commit",
           "WEIGHTS_COMMIT"]
