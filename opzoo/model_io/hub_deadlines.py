"""Deadlines on every HTTP request huggingface_hub makes for opzoo (docs/architecture.md, Where a pretrained load
goes): an answer within ``$OPZOO_HUB_WAIT``, a transfer that keeps moving, and no retry of a request that went
unanswered, so that a Hub which accepts connections and then stalls or trickles fails in one line.

With ``w`` = :func:`hub_wait` (3 s by default):

- a GET or HEAD must answer (its status line and headers) within ``w``; a POST or PUT within ``STALL_FACTOR * w``,
  since the Hub works before it answers a commit or an upload;
- a body, downloaded or uploaded, must move ``MIN_PROGRESS`` bytes (or end) every ``STALL_FACTOR * w`` seconds;
- inside :func:`hub_operation`, a request that went unanswered past its deadline is not sent again: huggingface_hub's
  retry of it fails at once with :class:`HubStalled`, which huggingface_hub does not retry. A stalled body is
  HubStalled too.

The way in is huggingface_hub's public ``set_client_factory`` and httpx's event hooks. Files served through hf_xet
(the Hub's Xet storage) do not go through this client; their bounds are hf_xet's own."""

from __future__ import annotations

import itertools
import os
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import httpx2

from ..errors import HubError

HUB_WAIT_ENV = "OPZOO_HUB_WAIT"  # seconds opzoo waits for the Hub to answer before it gives up (default 3)
DEFAULT_HUB_WAIT = 3.0


def hub_wait() -> float:
    """How long to keep trying to reach the Hub: ``$OPZOO_HUB_WAIT`` seconds (default 3)."""
    value = os.environ.get(HUB_WAIT_ENV, "")
    try:
        return max(0.0, float(value)) if value else DEFAULT_HUB_WAIT
    except ValueError:
        raise HubError(f"{HUB_WAIT_ENV}={value!r} is not a number of seconds") from None


STALL_FACTOR = 20  # a transfer stalls after STALL_FACTOR * OPZOO_HUB_WAIT seconds without MIN_PROGRESS bytes
MIN_PROGRESS = 64 * 1024  # bytes a transfer must move in each such interval (about 1 KiB/s by default)
_KEY = "opzoo_request"  # the request's key in its extensions, while it waits for its answer


class HubStalled(HubError):
    """A Hub request went unanswered, or its transfer stopped moving, past opzoo's deadline. Not an httpx error, so
    huggingface_hub does not retry it."""


class _Waiting:
    """The requests of the current :func:`hub_operation` that have not been answered yet."""

    def __init__(self):
        self.lock = threading.Lock()
        self.active = 0
        self.keys = itertools.count()
        self.pending: dict[int, tuple[float, float, str]] = {}  # key -> (deadline, limit, 'METHOD url')

    def start(self, request: str, limit: float) -> int | None:
        """Record a request about to be sent (None outside an operation); HubStalled when it is the retry of one that
        went unanswered past its deadline."""
        now = time.monotonic()
        with self.lock:
            if not self.active:
                return None
            for key, (deadline, late_limit, earlier) in list(self.pending.items()):
                if earlier == request and now > deadline:
                    del self.pending[key]
                    raise HubStalled(f"{_without_query(request)}: no answer from the Hub within {late_limit:g} s")
            key = next(self.keys)
            self.pending[key] = (now + limit, limit, request)
            return key

    def answered(self, key: int | None) -> None:
        with self.lock:
            self.pending.pop(key, None)


_WAITING = _Waiting()


@contextmanager
def hub_operation() -> Iterator[None]:
    """One opzoo call into huggingface_hub (a download, a push): within it, a request that went unanswered past its
    deadline is not retried."""
    with _WAITING.lock:
        _WAITING.active += 1
        if _WAITING.active == 1:
            _WAITING.pending.clear()
    try:
        yield
    finally:
        with _WAITING.lock:
            _WAITING.active -= 1
            if not _WAITING.active:
                _WAITING.pending.clear()


def _wait() -> float:
    return max(hub_wait(), 0.1)


def _request(request) -> str:
    return f"{request.method} {request.url}"


def _without_query(request: str) -> str:
    return request.split("?", 1)[0]


def on_request(request) -> None:
    """httpx request hook: the request's timeouts, and its place among the requests waiting for an answer."""
    wait = _wait()
    answer = wait if request.method in ("GET", "HEAD") else STALL_FACTOR * wait
    request.extensions[_KEY] = _WAITING.start(_request(request), answer)
    request.extensions["timeout"] = {"connect": wait, "read": answer, "write": STALL_FACTOR * wait, "pool": answer}


def on_response(response) -> None:
    """httpx response hook (the headers have arrived): the body's stall deadline."""
    request = response.request
    _WAITING.answered(request.extensions.pop(_KEY, None))
    limit = STALL_FACTOR * _wait()
    request.extensions["timeout"] = {**request.extensions.get("timeout", {}), "read": limit}
    response.stream = _MovingStream(response.stream, _without_query(_request(request)), limit)


class _MovingStream(httpx2.SyncByteStream):
    """A response body that must move MIN_PROGRESS bytes (or end) every ``limit`` seconds; a stall is HubStalled."""

    def __init__(self, inner, what: str, limit: float):
        self.inner, self.what, self.limit = inner, what, limit

    def _stalled(self, moved: int) -> HubStalled:
        return HubStalled(f"{self.what}: the Hub's answer stalled ({moved} bytes in the last {self.limit:g} s, "
                          f"fewer than {MIN_PROGRESS})")

    def __iter__(self) -> Iterator[bytes]:
        mark, moved = time.monotonic(), 0
        try:
            for chunk in self.inner:
                moved += len(chunk)
                now = time.monotonic()
                if moved >= MIN_PROGRESS:
                    mark, moved = now, 0
                elif now - mark > self.limit:
                    raise self._stalled(moved)
                yield chunk
        except httpx2.TimeoutException:
            raise self._stalled(moved) from None

    def close(self) -> None:
        self.inner.close()


_INSTALLED = False


def install() -> None:
    """Give huggingface_hub's shared client these deadlines (once per process; later clients it builds too)."""
    global _INSTALLED
    if _INSTALLED:
        return
    from huggingface_hub import set_client_factory
    from huggingface_hub.utils._http import default_client_factory

    def factory():
        client = default_client_factory()
        client.event_hooks["request"].append(on_request)
        client.event_hooks["response"].append(on_response)
        return client

    set_client_factory(factory)
    _INSTALLED = True


__all__ = ["HUB_WAIT_ENV", "hub_wait", "HubStalled", "hub_operation", "install", "MIN_PROGRESS", "STALL_FACTOR"]
