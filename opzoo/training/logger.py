"""Run logs: one JSON object per line (always) and TensorBoard scalars (when installed). Rank 0 only.

``log.jsonl`` is strict JSON: a non-finite value (a diverged loss) is written as ``null``."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..files import atomic_write, strict_json


class RunLogger:
    """Appends records to ``<run>/log.jsonl``; mirrors numeric fields to TensorBoard if available.

    On resume from step ``s`` the log is truncated to the records of steps ``<= s``, so the log of a
    resumed run reads like the log of an uninterrupted one.
    """

    def __init__(self, run_dir: str | os.PathLike, enabled: bool = True, resume_step: int | None = None,
                 tensorboard: bool = True, home=None):
        self.enabled = enabled
        self.home = home  # a RunHome: each record first checks the run directory is still where the run took it
        self.path = Path(run_dir) / "log.jsonl"
        self._tb = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.is_file() and not self.path.is_symlink():
            kept = [line for line in self.path.read_text().splitlines() if _step_of(line) <= resume_step]
            atomic_write(self.path, "".join(line + "\n" for line in kept))  # replaces the name, never follows it
        elif self.path.is_symlink() or (resume_step is None and self.path.exists()):
            self.path.unlink()  # a link planted at the log's name is removed, its target left alone
        # appended to, never through a link (O_NOFOLLOW): a link planted after the truncation is refused
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        self._fh = os.fdopen(fd, "a")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard not installed
                pass
            else:
                self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))

    def log(self, record: dict[str, Any], flush: bool = False) -> None:
        if not self.enabled:
            return
        if self.home is not None:  # TensorBoard's writer reopens its file by path
            self.home.check(f"logging {record.get('kind', 'a record')} step {record.get('step')}")
        self._fh.write(json.dumps(strict_json(record), allow_nan=False) + "\n")
        if flush:
            self._fh.flush()
        if self._tb is not None and "step" in record:
            kind = record.get("kind", "train")
            for k, v in record.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step" and math.isfinite(v):
                    self._tb.add_scalar(f"{kind}/{k}", v, record["step"])

    def flush(self) -> None:
        if self.enabled:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            if self._tb is not None:
                self._tb.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.home is not None and not self.home.holds():  # moved away: the open log follows it, TensorBoard cannot
            self._fh.close()
            if self._tb is not None:
                try:
                    self._tb.close()
                except OSError:
                    pass
            return
        self.flush()
        self._fh.close()
        if self._tb is not None:
            self._tb.close()


def _step_of(line: str) -> float:
    try:
        return json.loads(line).get("step", -1)
    except json.JSONDecodeError:  # a line cut by a kill
        return math.inf


def read_log(path: str | os.PathLike, kind: str | None = "train") -> list[dict[str, Any]]:
    """Records of a ``log.jsonl`` (of one ``kind``, or all with ``kind=None``)."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if kind is None or rec.get("kind") == kind:
            out.append(rec)
    return out


def progress_line(step: int, total: int, start: int, loss: float, lr: float, elapsed: float) -> str:
    """The line printed every ``training.log_every`` steps when stdout is not a terminal (no bar)."""
    rate = (step - start) / elapsed if elapsed > 0 else float("nan")
    eta = (total - step) / rate if rate > 0 else float("nan")
    if not math.isfinite(eta):
        return f"step {step}/{total}  loss {loss:.4g}  lr {lr:.3g}  {rate:.2f} steps/s  ETA ?"
    m, s = divmod(int(round(eta)), 60)
    h, m = divmod(m, 60)
    return f"step {step}/{total}  loss {loss:.4g}  lr {lr:.3g}  {rate:.2f} steps/s  ETA " + \
        (f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}")
