"""A saved opzoo repo on disk (``config.json``, ``model.safetensors``, ``README.md``): written whole by swapping a staged
directory in, read consistently across a concurrent save (both files opened once), checked to be one."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
from safetensors.torch import save_file

from .._version import __version__
from ..config import CONFIG_NAME, read_config, write_config
from ..disk_full import disk_full_as_error
from ..errors import HubError, WeightsError
from ..files import (
    TMP_MARK,
    NotRegularFile,
    check_regular,
    clean_dead_temporaries,
    new_file_mode,
    open_regular,
    read_bounded,
    temporary_name,
)
from .checksums import sha256_file
from .weights import unshared_state_dict

WEIGHTS_NAME = "model.safetensors"


CARD_NAME = "README.md"


REPO_FILES = (WEIGHTS_NAME, CONFIG_NAME, CARD_NAME)


def clean_dead_saves(directory: Path) -> None:
    """Remove what killed saves of ``directory`` left (their temp directories and files), and only theirs:
    a live process's or another host's are left alone."""
    clean_dead_temporaries(directory.parent, target=directory.name)
    if directory.is_dir():
        clean_dead_temporaries(directory)


def wait_for_save(directory: Path, wait: float = 2.0) -> bool:
    """Whether ``directory`` exists, waiting up to ``wait`` seconds while a save is swapping it in (between
    :func:`write_repo`'s two renames the name is briefly free)."""
    deadline = time.monotonic() + wait
    while not directory.exists():
        if not any(directory.parent.glob(f".{directory.name}{TMP_MARK}old-*")) or time.monotonic() > deadline:
            return directory.exists()
        time.sleep(0.005)
    return True


def written_by_opzoo(path: Path) -> bool:
    """Whether ``path`` is a file of a repo opzoo saved: its card (front matter ``library_name: opzoo``), its
    ``config.json`` (architecture, model_args, opzoo_version) or its weights (``opzoo_version`` in their metadata).
    Read as untrusted: only a regular file, only its head."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        if path.name == CARD_NAME:
            return is_opzoo_card(path)
        if path.name == CONFIG_NAME:
            from ..files import read_json

            doc = read_json(path, "a config.json", limit=JSON_HEAD_LIMIT)
            return isinstance(doc, dict) and {"architecture", "model_args", "opzoo_version"} <= set(doc)
        if path.name == WEIGHTS_NAME:
            with open(path, "rb") as f:
                return "opzoo_version" in weights_metadata(f)
    except Exception:  # noqa: BLE001 - unreadable or not ours: not written by opzoo
        return False
    return False


JSON_HEAD_LIMIT = 128 * 2**20


def is_opzoo_card(path: Path) -> bool:
    """Whether ``path`` is a model card opzoo wrote (front matter ``library_name: opzoo``): only a regular file, only
    its head is read."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    front = head.split("---", 2)[1] if head.startswith("---") and head.count("---") >= 2 else ""
    return any(line.strip() == "library_name: opzoo" for line in front.splitlines())


def only_repo_files(directory: Path) -> bool:
    """Whether ``directory`` holds nothing but an opzoo repo's files (it can be replaced as a whole)."""
    return all(p.name in REPO_FILES or TMP_MARK in p.name for p in directory.iterdir())


def write_repo(model: torch.nn.Module, save_directory: str | os.PathLike, document: Mapping[str, Any], card: str) -> Path:
    """Write ``model``'s weights, the config ``document`` and the ``card`` text into ``save_directory``.

    Everything is written into a temporary sibling directory first. A directory that is new or holds
    only an earlier repo is then replaced as a whole (two renames), so that a concurrent reader sees the
    old repo or the new one, never a mix (:func:`read_repo` retries across the instant between the
    renames); one that holds other files too gets the three files renamed into it. Files get the
    user's umask. ``config.json`` records the weights' sha256 (``checksums``), verified on load. Temp
    files of killed saves are removed. A full disk is a one-line :class:`~opzoo.disk_full.DiskFullError`
    naming the file, with any earlier repo unchanged.
    """
    directory = Path(save_directory)
    document = dict(document)
    staging = temporary_name(directory, "save")
    try:
        with disk_full_as_error("saving the model", f"any earlier repo in {directory} is unchanged; free space and "
                                                     "save again") as writing:
            writing.path = directory
            directory.parent.mkdir(parents=True, exist_ok=True)
            clean_dead_saves(directory)
            staging.mkdir()
            writing.path = directory / WEIGHTS_NAME
            save_file(unshared_state_dict(model), str(staging / WEIGHTS_NAME),
                      metadata={"format": "pt", "opzoo_version": __version__,
                                RECORD_KEY: record_digest(document.get("pretrained_cfg"))})
            document["checksums"] = {WEIGHTS_NAME: sha256_file(staging / WEIGHTS_NAME)}
            writing.path = directory / CONFIG_NAME
            write_config(staging / CONFIG_NAME, document)
            writing.path = directory / CARD_NAME
            (staging / CARD_NAME).write_text(card)
            new_file_mode(*(staging / name for name in REPO_FILES))  # safetensors writes 0600
            writing.path = directory
            swap_in(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


SWAP_ATTEMPTS = 20
RECORD_KEY = "pretrained_cfg_sha256"  # the weights' metadata binds them to config.json's pretrained_cfg


def record_digest(pretrained_cfg: Any) -> str:
    """sha256 of a ``pretrained_cfg`` as canonical JSON: written into the weights' metadata at save, so that a
    training record removed or edited in config.json afterwards is caught on load (it decides which trajectories
    ``eval`` calls held-out)."""
    import hashlib
    import json

    text = json.dumps(pretrained_cfg or {}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def weights_metadata(f) -> dict[str, str]:
    """The ``__metadata__`` of an open safetensors file (its header only; ``{}`` when it has none or is not one)."""
    import json
    import struct

    f.seek(0)
    head = f.read(8)
    if len(head) < 8:
        return {}
    size = struct.unpack("<Q", head)[0]
    if size > 100 * 2**20:
        return {}
    try:
        header = json.loads(f.read(size))
    except (ValueError, UnicodeDecodeError):
        return {}
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return meta if isinstance(meta, dict) else {}


def swap_in(staging: Path, directory: Path) -> None:
    """Put the repo written in ``staging`` at ``directory``: renamed there when the name is free; swapped whole (two
    renames) for a directory holding only an earlier repo, or for a symbolic link at the name (the link is replaced,
    its target untouched); else its files renamed in one by one. Another save of the
    same directory can take the name between two renames: then the swap is tried again (the last save wins), and
    only after ``SWAP_ATTEMPTS`` races is the error raised."""
    for attempt in range(SWAP_ATTEMPTS):
        try:
            if not directory.exists() and not directory.is_symlink():
                os.rename(staging, directory)
            elif directory.is_symlink():  # a link planted at the name: replaced by the repo, never written through
                old = temporary_name(directory, "old")
                os.rename(directory, old)
                try:
                    os.rename(staging, directory)
                finally:
                    old.unlink()
            elif directory.is_dir() and only_repo_files(directory):
                old = temporary_name(directory, "old")
                os.rename(directory, old)
                try:
                    os.rename(staging, directory)
                finally:
                    if old.is_symlink():  # a save onto a link to a repo replaces the link, never its target
                        old.unlink()
                    else:
                        shutil.rmtree(old, ignore_errors=True)
            else:
                for name in REPO_FILES:
                    os.replace(staging / name, directory / name)
            return
        except OSError as e:  # another writer renamed the directory in or out between our two renames
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOENT) or attempt == SWAP_ATTEMPTS - 1:
                raise
            time.sleep(0.001 * (attempt + 1))


class RepoChanged(Exception):
    """The repo was replaced while it was being read (a concurrent save): read it again."""


@dataclasses.dataclass
class OpenRepo:
    """One read of a repo: ``config.json`` and the weights opened once; ``weights`` names the opened file
    (``/proc/self/fd/N`` where the system has it), so every later read sees the same bytes."""

    config_path: Path
    weights_path: Path
    document: dict[str, Any]
    weights: Path
    _cf: Any
    _wf: Any

    def verify(self) -> None:
        """The weights' sha256 against the one config.json records (a repo saved before checksums has none).
        A mismatch because a save replaced the files raises RepoChanged; otherwise it is a WeightsError."""
        recorded = weights_metadata(self._wf).get(RECORD_KEY)
        if recorded is not None and recorded != record_digest(self.document.get("pretrained_cfg")):
            if replaced_since_opened(self.config_path, self._cf) or replaced_since_opened(self.weights_path, self._wf):
                raise RepoChanged()
            raise WeightsError(f"{self.config_path}: its pretrained_cfg (the model's training record and facts) is not "
                               f"the one saved with {self.weights_path.name} (sha256 recorded in its metadata): it was "
                               f"edited or cut, and eval would call trajectories the model trained on held-out; "
                               f"restore config.json, or re-save the model")
        expected = self.document.get("checksums", {}).get(WEIGHTS_NAME)
        if expected is None:
            return
        actual = sha256_fd(self._wf)
        if actual != expected:
            if replaced_since_opened(self.config_path, self._cf) or replaced_since_opened(self.weights_path, self._wf):
                raise RepoChanged()
            raise WeightsError(f"{self.weights_path}: sha256 {actual[:16]}... does not match the recorded "
                               f"{expected[:16]}... (the file was changed or damaged after it was written); "
                               f"re-download or re-save the repo")


@contextlib.contextmanager
def open_repo(config_path: Path, weights_path: Path) -> Iterator[OpenRepo]:
    """Open both files of a repo once and parse the config from what was opened (see :class:`OpenRepo`).
    A file gone between the renames of a concurrent :func:`write_repo` raises RepoChanged."""
    try:
        with open_regular(config_path) as cf, open_regular(weights_path) as wf:
            document = read_config(config_path, read_bounded(cf, config_path, "an opzoo config.json"))
            stable = Path(f"/proc/self/fd/{wf.fileno()}")
            yield OpenRepo(config_path, weights_path, document, stable if stable.exists() else Path(weights_path),
                           cf, wf)
    except NotRegularFile as e:
        raise WeightsError(f"{e}: the repo (or its entry in the Hugging Face cache) is damaged; delete it and save or "
                           "download it again") from None
    except FileNotFoundError:
        if Path(config_path).parent.exists() and not wait_for_save(Path(config_path).parent, 0):
            raise
        raise RepoChanged() from None


def read_repo_retrying(read, attempts: int = 50):
    """``read()`` again while it raises RepoChanged (a save racing the read), a few ms apart."""
    for attempt in range(attempts):
        try:
            return read()
        except RepoChanged:
            if attempt == attempts - 1:
                raise WeightsError("the repo kept changing while it was being read (a save in a loop?); try "
                                   "again when it is done") from None
            time.sleep(0.01)


def sha256_fd(f) -> str:
    import hashlib

    h = hashlib.sha256()
    f.seek(0)
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    f.seek(0)
    return h.hexdigest()


def replaced_since_opened(path: Path, f) -> bool:
    """Whether ``path`` now names another file than the open ``f`` (a save replaced it)."""
    try:
        return os.stat(path).st_ino != os.fstat(f.fileno()).st_ino
    except FileNotFoundError:
        return True


def check_repo_dir(path: Path) -> None:
    """HubError when directory ``path`` is not an opzoo repo, pointing at the one inside a run directory."""
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if (path / name).exists() and not (path / name).is_file():  # a FIFO, a device, a directory: never read
            try:
                check_regular(path / name)
            except NotRegularFile as e:
                raise WeightsError(f"{e}: the repo (or its entry in the Hugging Face cache) is damaged; delete it "
                                   "and save or download it again") from None
        if not (path / name).is_file() and not (wait_for_save(path) and (path / name).is_file()):
            inner = path / "model"
            hint = (f"; it looks like a training run directory: its model is {inner}"
                    if (inner / CONFIG_NAME).is_file() else foreign_hint(path))
            raise HubError(f"{path} is not an opzoo repo: it has no {name}{hint}")


def foreign_hint(path: Path) -> str:
    """What to do with a directory of another project's checkpoint files (itself, or in its subfolders)."""
    suffixes = (".safetensors", ".pth", ".pt", ".bin", ".ckpt")
    try:
        found = sorted(p.relative_to(path).as_posix() for p in [*path.glob("*"), *path.glob("*/*")]
                       if p.is_file() and p.name.endswith(suffixes))[:4]
    except OSError:
        return ""
    if not found:
        return ""
    return (f"; it holds another project's checkpoint files ({', '.join(found)}): convert them with `opzoo convert "
            f"CONVERTER {path}/... OUT` (`opzoo convert --help`), or load them through their preset with "
            f"opzoo.load(PRESET, pretrained=True, pretrained_cfg_overlay={{'directory': '{path}'}}) (the directory "
            f"laid out as the preset's Hub repo: `opzoo info PRESET` names its files)")


__all__ = ["WEIGHTS_NAME", "CARD_NAME", "REPO_FILES", "write_repo", "wait_for_save", "clean_dead_saves", "open_repo",
           "read_repo_retrying", "RepoChanged", "OpenRepo", "check_repo_dir"]
