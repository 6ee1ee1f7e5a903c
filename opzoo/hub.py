"""Saving and loading opzoo repos: local directories and the Hugging Face Hub (DESIGN §5).

A repo is ``config.json`` + ``model.safetensors`` + ``README.md`` (the model card). Weights are
safetensors only; loads are strict and checked completely before any parameter changes.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from importlib.resources import as_file
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
from huggingface_hub import HfApi, constants, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from ._version import __version__
from .checksums import ChecksumError, sha256_file, verify_file
from .config import CONFIG_NAME, config_document, read_config, write_config
from .disk_full import disk_full_as_error
from .errors import HubError, WeightsError
from .interfaces import Backbone
from .model_card import render_card
from .plugins import get_registry
from .pretrained_cfg import schema_of, validate_pretrained_cfg
from .registry import PretrainedSource

WEIGHTS_NAME = "model.safetensors"
CARD_NAME = "README.md"


# ---- weights -------------------------------------------------------------------------------
def check_state_dict(model: torch.nn.Module, shapes: Mapping[str, tuple[int, ...]], source: str) -> None:
    """Raise WeightsError listing every missing, unexpected and mis-shaped tensor."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    misshaped = sorted(k for k in set(expected) & set(shapes) if tuple(shapes[k]) != expected[k])
    if missing or unexpected or misshaped:
        lines = [f"{source} does not match {type(model).__name__}:"]
        if missing:
            lines.append(f"  missing tensors ({len(missing)}): {', '.join(missing)}")
        if unexpected:
            lines.append(f"  unexpected tensors ({len(unexpected)}): {', '.join(unexpected)}")
        for k in misshaped:
            lines.append(f"  mis-shaped tensor {k}: file {list(shapes[k])}, model {list(expected[k])}")
        raise WeightsError("\n".join(lines))


def load_state_dict_strict(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """Check names and shapes first, so a bad state dict changes nothing; then load."""
    check_state_dict(model, {k: tuple(v.shape) for k, v in state_dict.items()}, source)
    bad = [k for k, v in state_dict.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise WeightsError(f"{source}: non-finite values in {', '.join(sorted(bad))}")
    model.load_state_dict(state_dict, strict=True)


def load_weights(model: torch.nn.Module, path: str | os.PathLike) -> None:
    """Load a safetensors file strictly into ``model``."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError) as e:
        raise WeightsError(f"{path}: not a readable safetensors file ({e})") from None
    check_state_dict(model, shapes, str(path))
    load_state_dict_strict(model, load_file(str(path)), str(path))


def _unshared_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """State dict with contiguous tensors; tensors sharing storage are cloned (safetensors refuses them)."""
    seen: set[int] = set()
    out = {}
    for k, v in model.state_dict().items():
        v = v.detach().contiguous()
        ptr = v.untyped_storage().data_ptr()
        out[k] = v.clone() if ptr in seen else v
        seen.add(ptr)
    return out


# ---- save ------------------------------------------------------------------------------------
def save_pretrained(model: Backbone, save_directory: str | os.PathLike) -> Path:
    """Write config.json, model.safetensors and README.md into ``save_directory``.

    Files are written to temporary names first and renamed at the end, so a failure leaves any
    earlier repo in that directory as it was. ``config.json`` records the weights' sha256
    (``checksums``), verified by :func:`from_pretrained`.
    """
    directory = Path(save_directory)
    architecture = get_registry().backbone_name(type(model))
    validate_pretrained_cfg(model.pretrained_cfg or {}, f"{type(model).__name__}.pretrained_cfg", schema_of(type(model)))
    document = config_document(architecture, model.config, model.pretrained_cfg)
    card = render_card(model, architecture)
    staged: list[tuple[Path, Path]] = []
    try:
        with disk_full_as_error("saving the model", f"any earlier repo in {directory} is unchanged; free space and "
                                                     "save again") as writing:
            writing.path = directory
            directory.mkdir(parents=True, exist_ok=True)
            for name in (WEIGHTS_NAME, CONFIG_NAME, CARD_NAME):
                fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
                os.close(fd)
                staged.append((Path(tmp), directory / name))
            writing.path = directory / WEIGHTS_NAME
            save_file(_unshared_state_dict(model), str(staged[0][0]),
                      metadata={"format": "pt", "opzoo_version": __version__})
            document["checksums"] = {WEIGHTS_NAME: sha256_file(staged[0][0])}
            writing.path = directory / CONFIG_NAME
            write_config(staged[1][0], document)
            writing.path = directory / CARD_NAME
            staged[2][0].write_text(card)
            for tmp, final in staged:
                writing.path = final
                os.replace(tmp, final)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return directory


# ---- load ------------------------------------------------------------------------------------
_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def hub_download(repo_id: str, filename: str, revision: str | None = None, **kwargs: Any) -> Path:
    """``hf_hub_download`` with errors that say what to do, offline included."""
    where = f"{repo_id}{'@' + revision if revision else ''}"
    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision, **kwargs))
    except LocalEntryNotFoundError:
        offline = constants.is_offline_mode()
        reason = "the Hub is offline (HF_HUB_OFFLINE=1)" if offline else "the Hub could not be reached"
        raise HubError(
            f"{filename} of {where} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {reason}. "
            f"Fetch it on a machine with network with `hf download {repo_id}"
            f"{' --revision ' + revision if revision else ''}` (the same cache), or unset HF_HUB_OFFLINE; "
            f"a copy of the repo in a local directory loads with opzoo.load('local-dir:PATH')."
        ) from None
    except RepositoryNotFoundError:
        raise HubError(f"Hub repo {repo_id!r} not found (or private: log in with `hf auth login`)") from None
    except GatedRepoError:
        raise HubError(f"Hub repo {repo_id!r} is gated: accept its terms on the Hub and log in") from None
    except RevisionNotFoundError:
        raise HubError(f"Hub repo {repo_id!r} has no revision {revision!r}") from None
    except EntryNotFoundError:
        raise HubError(f"Hub repo {where} has no file {filename!r}") from None
    except HFValidationError as e:
        raise HubError(f"{repo_id!r} is not a valid Hub repo id ({e})") from None


@contextlib.contextmanager
def pretrained_file(source: PretrainedSource, filename: str | None = None) -> Iterator[Path]:
    """A local path to file ``filename`` (default ``source.filename`` or model.safetensors) of ``source``.

    A Hub source is fetched with :func:`hub_download` (cache, offline mode and errors as usual); a
    directory source (a local path or a package resource, possibly inside a zip) is used in place.
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


def _repo_files(repo_or_dir: str | os.PathLike, revision: str | None, **kwargs: Any) -> tuple[Path, Path]:
    path = Path(repo_or_dir)
    if path.is_dir():
        for name in (CONFIG_NAME, WEIGHTS_NAME):
            if not (path / name).is_file():
                raise HubError(f"{path} is not an opzoo repo: it has no {name}")
        return path / CONFIG_NAME, path / WEIGHTS_NAME
    repo_id = str(repo_or_dir)
    if not _REPO_ID.match(repo_id):
        raise HubError(f"{repo_id!r} is neither a local directory nor a Hub repo id of the form 'org/name'")
    config_path = hub_download(repo_id, CONFIG_NAME, revision, **kwargs)
    return config_path, hub_download(repo_id, WEIGHTS_NAME, revision, **kwargs)


def from_pretrained(
    repo_or_dir: str | os.PathLike, revision: str | None = None, *, device: str | torch.device | None = None,
    **overrides: Any,
) -> Backbone:
    """Load an opzoo repo from a local directory or the Hub (``revision``: branch, tag or commit).

    ``overrides`` replace config fields (the weights must still fit). Extra keyword arguments of
    ``hf_hub_download`` (``cache_dir``, ``token``, ``force_download``) may be given as overrides
    named ``hub_<arg>``.
    """
    hub_kwargs = {k[4:]: overrides.pop(k) for k in list(overrides) if k.startswith("hub_")}
    config_path, weights_path = _repo_files(repo_or_dir, revision, **hub_kwargs)
    document = read_config(config_path)
    backbone_cls = get_registry().get("backbone", document["architecture"])
    config = backbone_cls.config_class.from_dict(document["model_args"], source=f"{config_path}: model_args")
    if overrides:
        config = config.replace(source="override", **overrides)
    pretrained_cfg = validate_pretrained_cfg(document["pretrained_cfg"], f"{config_path}: pretrained_cfg",
                                             schema_of(backbone_cls))
    if WEIGHTS_NAME in document.get("checksums", {}):  # repos saved before checksums were recorded load too
        try:
            verify_file(weights_path, document["checksums"][WEIGHTS_NAME])
        except ChecksumError as e:
            raise WeightsError(f"{e}; re-download or re-save the repo") from None
    model = backbone_cls(config)
    load_weights(model, weights_path)
    model.pretrained_cfg = pretrained_cfg
    model.preset_name = document["pretrained_cfg"].get("preset")
    if device is not None:
        model.to(device)
    return model.eval()


def push_to_hub(
    model: Backbone, repo_id: str, *, token: str | None = None, private: bool | None = None,
    revision: str | None = None, commit_message: str = "Upload opzoo model", create_pr: bool = False,
):
    """Save ``model`` to a temporary directory and upload it as one commit with huggingface_hub."""
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained(model, tmp)
        api.create_repo(repo_id, private=private, exist_ok=True)
        return api.upload_folder(
            repo_id=repo_id, folder_path=tmp, revision=revision, commit_message=commit_message, create_pr=create_pr
        )


def push_folder_to_hub(folder: str | os.PathLike, repo_id: str, **kwargs: Any):
    """Upload an opzoo repo directory that is already on disk (``opzoo push DIR REPO_ID``)."""
    folder = Path(folder)
    read_config(folder / CONFIG_NAME)  # refuse to upload what opzoo could not load back
    if not (folder / WEIGHTS_NAME).is_file():
        raise HubError(f"{folder} has no {WEIGHTS_NAME}")
    api = HfApi(token=kwargs.pop("token", None))
    api.create_repo(repo_id, private=kwargs.pop("private", None), exist_ok=True)
    return api.upload_folder(repo_id=repo_id, folder_path=str(folder), **kwargs)


__all__ = [
    "save_pretrained", "from_pretrained", "push_to_hub", "push_folder_to_hub", "load_weights",
    "load_state_dict_strict", "check_state_dict", "hub_download", "pretrained_file",
]
