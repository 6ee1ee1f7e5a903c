"""SIGTERM and SIGINT end a run cleanly: the step in progress finishes, a checkpoint is written, and
the run stops with one line saying how to resume. A second signal interrupts at once. The graceful stop has a
deadline (``training.stop_deadline``, seconds): a scheduler that sends one SIGTERM before its kill gets either the
checkpoint or, when the step in progress (or the save) does not end in time, one line saying there is none newer
than the last, and the process ends (a checkpoint cut short is never taken: it is written under a temporary name).
The deadline starts when the signal arrives, even while the main thread is inside one long C++ call (one huge op, a
collective whose peer is gone): Python runs a signal handler only between bytecodes, so the signal's byte on the
interpreter's wakeup fd (:func:`signal.set_wakeup_fd`) starts it from a watcher thread."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable

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

    def __init__(self, deadline: float | None = None, last_checkpoint: Callable[[], object] | None = None) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self.deadline = deadline
        self._last_checkpoint = last_checkpoint or (lambda: None)
        self._done = threading.Event()
        self._deadline_started = threading.Lock()
        self._received: int | None = None  # the first signal, as the wakeup fd or the handler saw it
        self._wakeup: tuple | None = None  # (read end, write end) of the wakeup fd's socket pair
        self._watcher: threading.Thread | None = None
        self._deadline_thread: threading.Thread | None = None

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
        self.signum = signum
        self._start_deadline(signum)

    def _start_deadline(self, signum: int) -> None:
        if self.deadline is None or not self._deadline_started.acquire(blocking=False):
            return
        self._received = signum
        self._deadline_thread = threading.Thread(target=self._watch, name="opzoo-stop-deadline", daemon=True)
        self._deadline_thread.start()

    def _watch_wakeup_fd(self, read_end) -> None:
        """Start the deadline on the first SIGTERM/SIGINT byte the interpreter writes to its wakeup fd."""
        ours = {int(s) for s in self.SIGNALS}
        with read_end:
            while True:
                try:
                    data = read_end.recv(64)
                except OSError:
                    return
                if not data:  # the write end closed: the run is over
                    return
                for byte in data:
                    if byte in ours:
                        self._start_deadline(byte)
                        return

    def _watch(self) -> None:
        """After ``deadline`` seconds without the stop done: say so in one line and end the process."""
        if self._done.wait(self.deadline):
            return
        last = self._last_checkpoint()
        last = None if last in (None, "none") else last
        resume = (f"the last one is {last}: re-run the same command to resume from it" if last else
                  "no checkpoint was written yet, so re-running the same command starts it over")
        name = signal.Signals(self.signum or self._received or signal.SIGTERM).name
        print(f"{name}: the step in progress did not end within the stop deadline ({self.deadline:g} s, "
              f"training.stop_deadline): stopped without a new checkpoint; {resume}", file=sys.stderr, flush=True)
        os._exit(128 + (self.signum or self._received or signal.SIGTERM))

    def stopped(self) -> None:
        """The graceful stop is done (its checkpoint written): the deadline no longer applies."""
        self._done.set()

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
            if self.deadline is not None:
                self._watch_signals_in_c_calls()
        return self

    def _watch_signals_in_c_calls(self) -> None:
        import socket

        read_end, write_end = socket.socketpair()
        write_end.setblocking(False)
        previous = signal.set_wakeup_fd(write_end.fileno(), warn_on_full_buffer=False)
        if previous != -1:  # another owner's (an event loop): theirs stays; the deadline starts from the handler
            signal.set_wakeup_fd(previous)
            read_end.close(), write_end.close()
            return
        self._wakeup = (read_end, write_end)
        self._watcher = threading.Thread(target=self._watch_wakeup_fd, args=(read_end,), name="opzoo-stop-signals",
                                         daemon=True)
        self._watcher.start()

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._wakeup is not None:
            signal.set_wakeup_fd(-1)
            read_end, write_end = self._wakeup
            write_end.close()  # the watcher's recv returns b"": it ends
            self._wakeup = None
        # wait for both threads to be gone: a thread still ending when the interpreter finalizes drops its target (a
        # bound method, holding the run's state and its tensors) without the GIL it can no longer take, and the
        # process aborts ("terminate called without an active exception", exit 134) after the run finished
        for thread in (self._watcher, self._deadline_thread):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=5.0)
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""
