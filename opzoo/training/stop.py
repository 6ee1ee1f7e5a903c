"""SIGTERM and SIGINT end a run cleanly: the step in progress finishes, a checkpoint is written, and
the run stops with one line saying how to resume. A second signal interrupts at once."""

from __future__ import annotations

import signal
import threading

from ..errors import OpzooError


class RunStopped(OpzooError):
    """The run was stopped by a signal after a checkpoint; ``exit_code`` is 128 + the signal number."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


class StopSignals:
    """Context manager: while active, SIGTERM/SIGINT set :attr:`signum` (the loop polls it); a second
    one raises KeyboardInterrupt. Does nothing outside the main thread (signals go there only)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
        self.signum = signum

    def requested(self, env=None, device=None) -> bool:
        """Some rank got SIGTERM/SIGINT (agreed across ``env``'s ranks: collective; no device work with one
        process)."""
        if env is None or env.world_size == 1:
            return self.signum is not None
        import torch

        from .distributed import all_reduce_max

        flag = torch.tensor([float(self.signum is not None)], device=device)
        return bool(all_reduce_max(flag, env)[0] > 0)

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""
