"""What a model name refers to: the one parser of model references (timm's ``parse_model_name`` idea).

    hf-hub:org/name[@revision]   a repo on the Hugging Face Hub (never a local directory of that name)
    local-dir:PATH               a saved repo directory
    PATH                         an existing directory (a preset of the same name wins)
    NAME                         a registered preset or alias, or a registered backbone
    org/name                     with ``bare_repo_ids=True`` only (``opzoo.from_pretrained``, as huggingface_hub's
                                 ``from_pretrained``): a Hub repo when it is neither a preset nor a directory

A reference is parsed once, where it enters (``opzoo.load``, ``create_model``, the command line, a run config), and
carried from there as a :class:`ModelReference` value: every function that takes a model name also takes the parsed
value (:func:`model_reference` passes it through), and a run config carries it (``RunConfig.model.reference``). No
other module spells the prefixes.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Literal

from ..errors import HubError, UnknownNameError
from ..registry.registry import HF_HUB_PREFIX, LOCAL_DIR_PREFIX, get_registry


@dataclasses.dataclass(frozen=True)
class ModelReference:
    """A parsed model name: ``kind`` and what locates it."""

    kind: Literal["preset", "hub", "dir", "backbone"]
    given: str  # the name as given
    preset: str | None = None  # the canonical preset name (an alias resolved)
    repo_id: str | None = None
    revision: str | None = None
    path: Path | None = None

    @property
    def saved(self) -> bool:
        """A saved opzoo repo (on the Hub or on disk): it always brings its weights."""
        return self.kind in ("hub", "dir")

    @property
    def lineage_id(self) -> str:
        """How a training record names the model that trained on a file (``"by"``): the Hub repo id, the preset, or a
        local directory by its last two path parts (``run1/model``: no absolute path leaves the machine)."""
        if self.kind == "dir":
            return "/".join(self.path.resolve().parts[-2:])
        return self.base_model_id

    @property
    def base_model_id(self) -> str:
        """How a card's ``base_model`` names it: the Hub repo id, the preset, or a directory's name (no path)."""
        if self.kind == "hub":
            return self.repo_id
        if self.kind == "dir":
            return self.path.name
        return self.preset or self.given


def looks_like_path(name: str) -> bool:
    return os.sep in name or "/" in name or name.startswith((".", "~"))


def parse_hub(name: str) -> tuple[str, str | None]:
    """``hf-hub:org/name[@revision]`` -> ``(repo_id, revision)``; a HubError for an empty or malformed id."""
    from .hub import check_repo_id

    repo, at, revision = name[len(HF_HUB_PREFIX):].partition("@")
    if not repo:
        raise HubError(f"{name!r}: hf-hub: needs a repo id, e.g. hf-hub:org/name[@revision]")
    check_repo_id(repo)
    if at and not revision:
        raise HubError(f"{name!r}: an empty revision after '@'; give a branch, tag or commit, or leave '@' out")
    return repo, revision or None


def parse_model_reference(name: str | os.PathLike, backbones: bool = True, bare_repo_ids: bool = False
                          ) -> ModelReference:
    """What ``name`` refers to (see the module doc); ``backbones=False`` leaves bare backbone names out;
    ``bare_repo_ids=True`` reads ``org/name`` that is neither a preset nor a directory as a Hub repo.
    A HubError for a malformed Hub id, a missing ``local-dir:`` or a path that names nothing; an
    UnknownNameError (with the registered names) otherwise."""
    name = str(name)
    if name.startswith(HF_HUB_PREFIX):
        repo, revision = parse_hub(name)
        return ModelReference("hub", name, repo_id=repo, revision=revision)
    if name.startswith(LOCAL_DIR_PREFIX):
        path = Path(name[len(LOCAL_DIR_PREFIX):]).expanduser()
        if not path.is_dir():
            raise HubError(f"{LOCAL_DIR_PREFIX} {path} is not a directory")
        return ModelReference("dir", name, path=path)
    registry = get_registry()
    if registry.has_preset(name):
        return ModelReference("preset", name, preset=registry.preset(name).name)
    path = Path(name).expanduser()
    if path.is_dir():
        return ModelReference("dir", name, path=path)
    from .repo_dir import wait_for_save

    if wait_for_save(path):  # a save swapping the directory in right now
        return ModelReference("dir", name, path=path)
    if backbones and name in registry.names("backbone"):
        return ModelReference("backbone", name)
    if bare_repo_ids and not name.startswith((".", "~", "/")) and name.count("/") == 1:
        return parse_model_reference(HF_HUB_PREFIX + name)
    if looks_like_path(name):
        raise HubError(f"{name}: no such directory (a saved model is a directory holding config.json and "
                       f"model.safetensors; a Hub repo is named hf-hub:{name.lstrip('./~')}; a preset has no '/')")
    known = [*registry.list_models(include_aliases=True), *(registry.names("backbone") if backbones else [])]
    raise UnknownNameError("model or backbone" if backbones else "model", name, known)


def model_reference(name: "str | os.PathLike | ModelReference", backbones: bool = True) -> ModelReference:
    """``name`` parsed (:func:`parse_model_reference`), or ``name`` itself when it is already a parsed reference (with
    ``backbones=False``, a bare backbone is refused as the parser refuses it)."""
    if not isinstance(name, ModelReference):
        return parse_model_reference(name, backbones)
    if name.kind == "backbone" and not backbones:
        registry = get_registry()
        raise UnknownNameError("model", name.given, registry.list_models(include_aliases=True))
    return name


__all__ = ["ModelReference", "parse_model_reference", "model_reference", "parse_hub", "HF_HUB_PREFIX", "LOCAL_DIR_PREFIX"]
