"""The Hugging Face Hub: whether it answers (within ``$OPZOO_HUB_WAIT``), downloads into its cache with errors that say
what to do, a repo's files by id, and uploads (docs/architecture.md, Where a pretrained load goes). The files of a
repo on disk are :mod:`opzoo.model_io.repo_dir`'s; reading weights into a model, :mod:`opzoo.model_io.weights`'."""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path
from typing import Any, Sequence

import httpx2
from huggingface_hub import HfApi, constants, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from ..config import CONFIG_NAME, read_config
from ..errors import HubError
from . import hub_deadlines
from .hub_deadlines import HUB_WAIT_ENV, HubStalled, hub_operation, hub_wait
from .repo_dir import WEIGHTS_NAME, check_repo_dir

_REPO_ID = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def hub_unreachable(wait: float | None = None) -> str | None:
    """Why the Hub's endpoint cannot be reached (None when it answers): TCP connects retried for at most
    ``wait`` seconds (:func:`hub_wait`), instead of huggingface_hub's own retries (about 30 s). Behind a
    proxy (``HTTPS_PROXY``, ``NO_PROXY`` respected) the proxy is what must answer."""
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


def _fetch_command(repo_id: str, filename: str, revision: str | None) -> str:
    return f"hf download {repo_id} {filename}{' --revision ' + revision if revision else ''}"


def _cached(repo_id: str, filename: str, revision: str | None, cache_dir) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(repo_id, filename, revision=revision, cache_dir=cache_dir)
    return Path(cached) if isinstance(cached, str) else None


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
        if _cached(repo_id, filename, revision, kwargs.get("cache_dir")) is None:
            reason = hub_unreachable()
            if reason is not None:
                raise HubError(f"{missing} and the Hub could not be reached ({reason}, tried for "
                               f"{hub_wait():g} s; {HUB_WAIT_ENV} sets how long); {fetch}")
    hub_deadlines.install()
    try:
        with hub_operation():
            return Path(hf_hub_download(repo_id, filename, revision=revision, etag_timeout=max(hub_wait(), 0.1),
                                        **kwargs))
    except HubStalled as e:
        cached = _cached(repo_id, filename, revision, kwargs.get("cache_dir"))
        if cached is not None:  # as huggingface_hub does when the Hub times out: the cached file
            return cached
        raise HubStalled(f"{missing} and {e} ({HUB_WAIT_ENV} sets how long); run the command again, or {fetch}") from None
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
    hub_deadlines.install()
    api = HfApi(token=token)
    try:
        with hub_operation():
            api.create_repo(repo_id, private=private, exist_ok=True)
            return api.upload_folder(repo_id=repo_id, folder_path=str(folder), **kwargs)
    except HubStalled as e:
        raise HubStalled(f"{what}: {e} ({HUB_WAIT_ENV} sets how long); run `opzoo push {folder} {repo_id}` again") \
            from None
    except HfHubHTTPError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        login = " (log in with `hf auth login`, with write access to the repo)" if "401" in first or "403" in first else ""
        raise HubError(f"{what}: {first}{login}") from None
    except (OSError, httpx2.TransportError) as e:  # the connection dropped or stalled half-way
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


__all__ = ["hub_repo_files", "check_repo_id", "push_folder_to_hub", "upload_folder", "hub_download", "hub_unreachable",
           "hub_wait"]
