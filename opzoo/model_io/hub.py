"""The files of an opzoo repo, on disk and on the Hugging Face Hub (docs/architecture.md, Where a pretrained load goes).

A repo is ``config.json`` + ``model.safetensors`` + ``README.md`` (the model card). Weights are
safetensors only; loads are strict and checked completely before any parameter changes. Functions
here take the model as an argument and know no registry: :mod:`opzoo.model_io.builder` names the
architecture, finds the card and builds the model (``opzoo.save_pretrained``, ``opzoo.from_pretrained``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

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

from .._version import __version__
from ..config import CONFIG_NAME, read_config, write_config
from ..disk_full import disk_full_as_error
from ..errors import HubError, WeightsError
from ..files import TMP_MARK, clean_dead_temporaries, temporary_name
from .checksums import sha256_file

WEIGHTS_NAME = "model.safetensors"
CARD_NAME = "README.md"
SHOWN = 8  # tensors named per kind in a mismatch message


# ---- weights -------------------------------------------------------------------------------
def check_state_dict(model: torch.nn.Module, shapes: Mapping[str, tuple[int, ...]], source: str) -> None:
    """Raise WeightsError listing every missing, unexpected and mis-shaped tensor."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    misshaped = sorted(k for k in set(expected) & set(shapes) if tuple(shapes[k]) != expected[k])
    if missing or unexpected or misshaped:
        def some(names: list[str]) -> str:
            return ", ".join(names[:SHOWN]) + (f", and {len(names) - SHOWN} more" if len(names) > SHOWN else "")

        lines = [f"{source} does not match {type(model).__name__}:"]
        if missing:
            lines.append(f"  missing tensors ({len(missing)}): {some(missing)}")
        if unexpected:
            lines.append(f"  unexpected tensors ({len(unexpected)}): {some(unexpected)}")
        for k in misshaped[:SHOWN]:
            lines.append(f"  mis-shaped tensor {k}: file {list(shapes[k])}, model {list(expected[k])}")
        if len(misshaped) > SHOWN:
            lines.append(f"  and {len(misshaped) - SHOWN} more mis-shaped tensors")
        raise WeightsError("\n".join(lines))


def load_state_dict_strict(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """Check names and shapes first, so a bad state dict changes nothing; then load."""
    check_state_dict(model, {k: tuple(v.shape) for k, v in state_dict.items()}, source)
    bad = [k for k, v in state_dict.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise WeightsError(f"{source}: non-finite values in {', '.join(sorted(bad))}")
    model.load_state_dict(state_dict, strict=True)


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file (WeightsError naming the file when it is not one)."""
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise WeightsError(f"{path}: not a readable safetensors file ({e})") from None


def load_weights(model: torch.nn.Module, path: str | os.PathLike, shown_as: str | os.PathLike | None = None,
                 verify=None) -> None:
    """Load a safetensors file strictly into ``model``: names and shapes from its header first (nothing
    else is read from a file that does not fit), then ``verify()`` (e.g. its checksum, which reads every
    byte), then the tensors. ``shown_as`` names it in messages."""
    path, where = Path(path), str(shown_as or path)
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError) as e:
        raise WeightsError(f"{where}: not a readable safetensors file ({e})") from None
    check_state_dict(model, shapes, where)
    if verify is not None:
        verify()
    load_state_dict_strict(model, load_file(str(path)), where)


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


# ---- save ----------------------------------------------------------------------------------------
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


def _only_repo_files(directory: Path) -> bool:
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
            save_file(_unshared_state_dict(model), str(staging / WEIGHTS_NAME),
                      metadata={"format": "pt", "opzoo_version": __version__})
            document["checksums"] = {WEIGHTS_NAME: sha256_file(staging / WEIGHTS_NAME)}
            writing.path = directory / CONFIG_NAME
            write_config(staging / CONFIG_NAME, document)
            writing.path = directory / CARD_NAME
            (staging / CARD_NAME).write_text(card)
            mask = os.umask(0)
            os.umask(mask)
            for name in REPO_FILES:  # safetensors writes 0600: a colleague must be able to read the repo
                os.chmod(staging / name, 0o666 & ~mask)
            writing.path = directory
            if not directory.exists():
                os.rename(staging, directory)
            elif directory.is_dir() and _only_repo_files(directory):
                old = temporary_name(directory, "old")
                os.rename(directory, old)
                os.rename(staging, directory)
                shutil.rmtree(old, ignore_errors=True)
            else:
                for name in REPO_FILES:
                    writing.path = directory / name
                    os.replace(staging / name, directory / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


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
        expected = self.document.get("checksums", {}).get(WEIGHTS_NAME)
        if expected is None:
            return
        actual = _sha256_fd(self._wf)
        if actual != expected:
            if _replaced(self.config_path, self._cf) or _replaced(self.weights_path, self._wf):
                raise RepoChanged()
            raise WeightsError(f"{self.weights_path}: sha256 {actual[:16]}... does not match the recorded "
                               f"{expected[:16]}... (the file was changed or damaged after it was written); "
                               f"re-download or re-save the repo")


@contextlib.contextmanager
def open_repo(config_path: Path, weights_path: Path) -> Iterator[OpenRepo]:
    """Open both files of a repo once and parse the config from what was opened (see :class:`OpenRepo`).
    A file gone between the renames of a concurrent :func:`write_repo` raises RepoChanged."""
    try:
        with open(config_path, "rb") as cf, open(weights_path, "rb") as wf:
            document = read_config(config_path, cf.read())
            stable = Path(f"/proc/self/fd/{wf.fileno()}")
            yield OpenRepo(config_path, weights_path, document, stable if stable.exists() else Path(weights_path),
                           cf, wf)
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


def _sha256_fd(f) -> str:
    import hashlib

    h = hashlib.sha256()
    f.seek(0)
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    f.seek(0)
    return h.hexdigest()


def _replaced(path: Path, f) -> bool:
    """Whether ``path`` now names another file than the open ``f`` (a save replaced it)."""
    try:
        return os.stat(path).st_ino != os.fstat(f.fileno()).st_ino
    except FileNotFoundError:
        return True


# ---- load ------------------------------------------------------------------------------------
_REPO_ID = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


HUB_WAIT_ENV = "OPZOO_HUB_WAIT"  # seconds opzoo waits for the Hub to answer before it gives up (default 3)
DEFAULT_HUB_WAIT = 3.0


def hub_wait() -> float:
    """How long to keep trying to reach the Hub: ``$OPZOO_HUB_WAIT`` seconds (default 3)."""
    value = os.environ.get(HUB_WAIT_ENV, "")
    try:
        return max(0.0, float(value)) if value else DEFAULT_HUB_WAIT
    except ValueError:
        raise HubError(f"{HUB_WAIT_ENV}={value!r} is not a number of seconds") from None


def hub_unreachable(wait: float | None = None) -> str | None:
    """Why the Hub's endpoint cannot be reached (None when it answers): TCP connects retried for at most
    ``wait`` seconds (:func:`hub_wait`), instead of huggingface_hub's own retries (about 30 s). Behind a
    proxy (``HTTPS_PROXY``, ``NO_PROXY`` respected) the proxy is what must answer."""
    import time
    import urllib.request
    from urllib.parse import urlsplit

    url = urlsplit(constants.ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or host, p.port or (443 if p.scheme == "https" else 80)
    deadline = time.monotonic() + (hub_wait() if wait is None else wait)
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.5, deadline - time.monotonic())):
                break
        except OSError as e:
            reason = f"{host}:{port}: {e.strerror or e}"
        if time.monotonic() + 0.5 >= deadline:
            return reason
        time.sleep(0.5)
    return _http_silent(constants.ENDPOINT, max(0.5, deadline - time.monotonic()))


def _http_silent(endpoint: str, timeout: float) -> str | None:
    """Why the endpoint, which accepts connections, gives no HTTP answer within ``timeout`` seconds (None:
    it answered, whatever the status). A server that accepts and never answers would otherwise hold
    huggingface_hub's requests and retries for minutes."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(endpoint.rstrip("/") + "/api/models?limit=1", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # an HTTP answer (401, 404, 5xx...): the server is there
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        if "Tunnel connection failed" in str(reason):
            return None  # a proxy answered (and refused the tunnel): the Hub call will say why
        return f"{endpoint}: no HTTP answer within {timeout:.1f} s ({reason})"


def bounded_hub_session() -> None:
    """Give huggingface_hub's shared HTTP client timeouts (it has none by default): a connection must open
    within :func:`hub_wait` seconds and a read must not stall for more than ``READ_TIMEOUT``."""
    global _BOUNDED
    if _BOUNDED:
        return
    try:  # huggingface_hub >= 1.0 (httpx); older releases use requests with their own timeouts
        import httpx2
        from huggingface_hub import set_client_factory
        from huggingface_hub.utils._http import default_client_factory
    except ImportError:
        _BOUNDED = True
        return

    def factory():
        client = default_client_factory()
        client.timeout = httpx2.Timeout(READ_TIMEOUT, connect=max(hub_wait(), 1.0))
        return client

    set_client_factory(factory)
    _BOUNDED = True


def _transport_errors() -> type:
    try:
        import httpx2
    except ImportError:
        return OSError
    return httpx2.TransportError


_BOUNDED = False
READ_TIMEOUT = 60.0  # seconds a Hub read may stall before it fails


def _fetch_command(repo_id: str, filename: str, revision: str | None) -> str:
    return f"hf download {repo_id} {filename}{' --revision ' + revision if revision else ''}"


def hub_download(repo_id: str, filename: str, revision: str | None = None, *, companions: Sequence[str] = (),
                 local_copy: str | None = None, **kwargs: Any) -> Path:
    """``hf_hub_download`` with one-line errors that name the file and the command that fetches it; when
    the file is not cached and the Hub cannot be reached, it fails within :func:`hub_wait` seconds.
    ``companions``: other files of the repo read with it (the command fetches them too); ``local_copy``: how to
    load a local copy instead (default: loading a local opzoo repo by its directory)."""
    where = f"{repo_id}{'@' + revision if revision else ''}"
    missing = (f"{filename} of {where} is not in the Hugging Face cache ({constants.HF_HUB_CACHE})")
    files = " ".join(dict.fromkeys([filename, *companions]))
    local_copy = local_copy or "load a local copy of the repo with opzoo.load(DIRECTORY)"
    fetch = (f"fetch {'them' if companions else 'it'} on a machine with network with "
             f"`{_fetch_command(repo_id, files, revision)}` (into the same cache), or {local_copy}")
    offline = constants.is_offline_mode()
    if not offline and not kwargs.get("local_files_only"):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(repo_id, filename, revision=revision, cache_dir=kwargs.get("cache_dir"))
        if not isinstance(cached, str):
            reason = hub_unreachable()
            if reason is not None:
                raise HubError(f"{missing} and the Hub could not be reached ({reason}, tried for "
                               f"{hub_wait():g} s; {HUB_WAIT_ENV} sets how long); {fetch}")
    bounded_hub_session()
    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision, etag_timeout=max(hub_wait(), 1.0), **kwargs))
    except LocalEntryNotFoundError:
        reason = ("HF_HUB_OFFLINE=1 is set" if offline else "only the cache was asked (local_files_only)"
                  if kwargs.get("local_files_only") else "the Hub could not be reached")
        raise HubError(f"{missing} and {reason}; {fetch}") from None
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


def check_repo_id(repo_id: str) -> None:
    """HubError unless ``repo_id`` is a Hub repo id ``org/name`` (ASCII letters, digits, ``-_.``; no ``..``)."""
    if not _REPO_ID.match(repo_id) or ".." in repo_id or not repo_id.isascii():
        raise HubError(f"{repo_id!r} is not a Hub repo id: expected 'org/name' with ASCII letters, digits, '-', '_' "
                       f"and '.' (no '..')")


def hub_repo_files(repo_id: str, revision: str | None = None, **kwargs: Any) -> tuple[Path, Path]:
    """Local paths of ``(config.json, model.safetensors)`` of Hub repo ``repo_id``, from the Hugging Face
    cache or downloaded into it; never a local directory, whatever the current directory holds."""
    check_repo_id(repo_id)
    config_path = hub_download(repo_id, CONFIG_NAME, revision, **kwargs)
    return config_path, hub_download(repo_id, WEIGHTS_NAME, revision, **kwargs)


def check_repo_dir(path: Path) -> None:
    """HubError when directory ``path`` is not an opzoo repo, pointing at the one inside a run directory."""
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if not (path / name).is_file() and not (wait_for_save(path) and (path / name).is_file()):
            inner = path / "model"
            hint = (f"; it looks like a training run directory: its model is {inner}"
                    if (inner / CONFIG_NAME).is_file() else _foreign_hint(path))
            raise HubError(f"{path} is not an opzoo repo: it has no {name}{hint}")


def _foreign_hint(path: Path) -> str:
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


def upload_folder(folder: str | os.PathLike, repo_id: str, *, token: str | None = None, private: bool | None = None,
                  **kwargs: Any):
    """Create Hub repo ``repo_id`` if needed and upload ``folder`` as one commit (``kwargs``: ``revision``,
    ``commit_message``, ``create_pr``...). Failures are one-line HubErrors (offline within :func:`hub_wait`)."""
    from huggingface_hub.errors import HfHubHTTPError

    what = f"uploading {folder} to Hub repo {repo_id}"
    if constants.is_offline_mode():
        raise HubError(f"{what}: HF_HUB_OFFLINE=1 is set; unset it on a machine with network and run "
                       f"`opzoo push {folder} {repo_id}` again")
    reason = hub_unreachable()
    if reason is not None:
        raise HubError(f"{what}: the Hub could not be reached ({reason}, tried for {hub_wait():g} s); run "
                       f"`opzoo push {folder} {repo_id}` again on a machine with network")
    bounded_hub_session()
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        return api.upload_folder(repo_id=repo_id, folder_path=str(folder), **kwargs)
    except HfHubHTTPError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        login = " (log in with `hf auth login`, with write access to the repo)" if "401" in first or "403" in first else ""
        raise HubError(f"{what}: {first}{login}") from None
    except (OSError, _transport_errors()) as e:  # the connection dropped or stalled half-way
        raise HubError(f"{what}: the connection failed or stalled ({type(e).__name__}: {e}); run "
                       f"`opzoo push {folder} {repo_id}` again") from None


def push_folder_to_hub(folder: str | os.PathLike, repo_id: str, **kwargs: Any):
    """Upload an opzoo repo directory that is already on disk (``opzoo push DIR REPO_ID``)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise HubError(f"{folder}: no such directory")
    check_repo_dir(folder)
    read_config(folder / CONFIG_NAME)  # refuse to upload what opzoo could not load back
    return upload_folder(folder, repo_id, **kwargs)


__all__ = [
    "write_repo", "wait_for_save", "hub_repo_files", "check_repo_id", "read_state_dict", "open_repo", "read_repo_retrying", "RepoChanged", "clean_dead_saves", "push_folder_to_hub", "upload_folder", "load_weights",
    "load_state_dict_strict", "check_state_dict", "hub_download", "hub_unreachable", "hub_wait", "WEIGHTS_NAME",
    "CARD_NAME",
]
