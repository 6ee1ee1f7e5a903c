"""Run directories that never lie: one run at a time, resumed only under the config it started with.

A run directory holds:

- ``.lock``            an OS-level lock (``fcntl.flock``) held by the run for its whole life, with the
                       holder's PID, host and start time; a second run on the directory fails at once
                       naming them. The kernel releases it on any exit, SIGKILL included.
- ``run_config.json``  the config the run was started with (written once, never overwritten).
- ``checkpoints/``     see :mod:`opzoo.training.checkpoint` (sha256-verified on resume).
- ``data_fingerprints.json``, ``base_weights.json``  the data files and the weights the run started from
                       (:func:`record_or_check_data`, :func:`record_or_check_base`).
- ``finished.json``    written last, when the run completed every step and exported its model.

Running again on a directory (:func:`plan_run`): an empty one starts fresh; one holding a run
resumes only when every run-defining key equals the started config (otherwise the changed keys
are listed, old -> new); a finished run says so and nothing is touched; ``--new`` (``fresh=True``)
first moves the old contents aside to ``<dir>.replaced-<time>`` (:func:`move_aside`). Keys in
:data:`HARMLESS_KEYS` may differ on resume (they change logging, evaluation or bookkeeping, never
the trained weights).
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import json
import os
import re
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import ConfigError
from ..files import atomic_write, read_json
from ..processes import process_alive
from .checkpoint import checkpoint_name, list_checkpoints, resumable_checkpoint

LOCK_NAME = ".lock"
CONFIG_NAME = "run_config.json"
FINISHED_NAME = "finished.json"

#: Config keys (fnmatch patterns over dotted paths) that may change between a run and its resume.
HARMLESS_KEYS = (
    "output_dir",                     # the directory was moved or is named another way
    "training.log_every",
    "training.eval_every",
    "training.num_workers",           # batches are a function of (seed, step), not of the loader
    "training.grad_checkpointing",    # the same losses and gradients, with less memory
    "training.max_memory",            # what the plan checks against, not what is trained
    "training.stop_deadline",         # how long a stop waits, not what is trained
    "training.expert_load_threshold",  # warnings only
    "training.expert_load_window",
    "checkpoint.every",
    "checkpoint.keep_last",
    "checkpoint.resume",
    "checkpoint.trust_unverified",
    "evaluation.*",
    "data.horizon",                   # evaluation only
    "data.max_test_trajectories",     # evaluation only
    "distributed.timeout_s",
    "distributed.backend",
    "distributed.find_unused_parameters",
)


class RunDirError(ConfigError):
    """A run directory that cannot be used as asked (busy, another config, no usable checkpoint)."""


class RunDirBusyError(RunDirError):
    """Another live process holds the run directory's lock."""


class RunDirMovedError(RunDirError):
    """The run directory was moved, removed or replaced while the run was going."""


class RunHome:
    """The run directory as the run took it: each write first checks that the path still names that directory (not
    moved away, removed or replaced), so that a run never writes by path into whatever now has the name."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir)
        st = os.stat(self.path)
        self.identity = (st.st_dev, st.st_ino)

    def holds(self) -> bool:
        """Whether the path still names the directory the run took."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.identity

    def check(self, before: str) -> None:
        if not self.holds():
            raise RunDirMovedError(f"{self.path}: the run directory was moved, removed or replaced while the run was "
                                   f"going; stopped before {before}, writing nothing at that path. To go on, run the "
                                   "same command with output_dir where the directory is now: it resumes from its "
                                   "last checkpoint")


# ---- the lock ------------------------------------------------------------------------------------
class RunDirLock:
    """An exclusive, non-blocking ``fcntl.flock`` on the run directory itself, released on close or exit.

    The lock is held on the directory's own file descriptor, so deleting ``<run_dir>/.lock`` (which only
    records the holder: PID, host, start, command) cannot free it for a second run. ``.lock`` is opened
    without following symbolic links: a planted link is refused, never written through.
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None  # the holder record
        self._dir_fd: int | None = None  # what the lock is held on

    def _open_record(self, flags: int) -> int:
        try:
            return os.open(self.path, flags | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise RunDirError(f"{self.path} is a symbolic link (to {os.readlink(self.path)}); opzoo does not write "
                                  f"through it. Remove it, or choose another output_dir") from None
            raise

    def acquire(self) -> None:
        """Take the lock or raise RunDirBusyError naming the holder's PID and host. Creates the
        directory if needed; an existing lock file is not modified (see :meth:`record_holder`)."""
        import fcntl

        if self.run_dir.is_symlink() and not self.run_dir.exists():
            raise RunDirError(f"{self.run_dir} is a symbolic link to {os.readlink(self.run_dir)}, which does not exist; "
                              f"create that directory, or choose another output_dir")
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise RunDirError(f"{self.run_dir} is a file, not a directory; choose another output_dir")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):
            os.close(dir_fd)
            holder = {}
            if self.path.is_file() and not self.path.is_symlink():
                fd = self._open_record(os.O_RDONLY)
                holder = _read_holder(fd)
                os.close(fd)
            raise RunDirBusyError(
                f"{self.run_dir} is in use by another run: {describe_holder(holder)}; wait for it to end, "
                f"stop it, or choose another output_dir") from None
        try:
            fd = self._open_record(os.O_RDWR | os.O_CREAT)
        except BaseException:
            os.close(dir_fd)
            raise
        try:  # the record is locked too, as opzoo before 0.1.1 locked only it
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):
            holder = _read_holder(fd)
            os.close(fd)
            os.close(dir_fd)
            raise RunDirBusyError(
                f"{self.run_dir} is in use by another run: {describe_holder(holder)}; wait for it to end, "
                f"stop it, or choose another output_dir") from None
        self._fd, self._dir_fd = fd, dir_fd

    def record_holder(self) -> None:
        """Write this process's PID, host, start time and command into the lock file."""
        if self._fd is None:
            raise RuntimeError("record_holder() before acquire()")
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "command": " ".join(sys.argv)}
        data = (json.dumps(info) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def release(self) -> None:
        if self._dir_fd is not None:
            import fcntl

            fcntl.flock(self._dir_fd, fcntl.LOCK_UN)
            os.close(self._dir_fd)
            self._dir_fd = None
        if self._fd is not None:
            import fcntl

            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunDirLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}


def describe_holder(holder: Mapping[str, Any]) -> str:
    if not holder.get("pid"):
        return "a process that is starting (PID not yet recorded)"
    if holder.get("host") == socket.gethostname() and not process_alive(int(holder["pid"])):
        return f"a process that is starting (the lock file still names PID {holder['pid']}, which has ended)"
    text = f"PID {holder['pid']} on host {holder.get('host', '?')}"
    if holder.get("started"):
        text += f", started {holder['started']}"
    if holder.get("command"):
        text += f" ({holder['command']})"
    return text


# ---- comparing configs -------------------------------------------------------------------------
_ABSENT = "(absent)"


def flatten_config(doc: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted leaves of a config mapping: ``{"optimizer.lr": 1e-3, "data.datasets[0].path": ...}``
    (lists of mappings by index, other lists as whole values)."""
    out: dict[str, Any] = {}
    if isinstance(doc, Mapping):
        for k, v in doc.items():
            out.update(flatten_config(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(doc, (list, tuple)) and doc and all(isinstance(v, Mapping) for v in doc):
        for i, v in enumerate(doc):
            out.update(flatten_config(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = list(doc) if isinstance(doc, tuple) else doc
    return out


def is_harmless(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in HARMLESS_KEYS)


_DATA_PATH = re.compile(r"^data\.datasets\[\d+\]\.(path|test_path)$")


def with_resolved_paths(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with its data files' paths made absolute and resolved, as ``run_config.json`` records
    them: the same file reached from another folder (``../x.h5``) is then the same path."""
    doc = json.loads(json.dumps(config))
    for spec in doc.get("data", {}).get("datasets", []) or []:
        for key in ("path", "test_path"):
            if spec.get(key):
                spec[key] = str(Path(spec[key]).expanduser().resolve())
    return doc


def config_changes(started: Mapping[str, Any], current: Mapping[str, Any],
                   defaults: Mapping[str, Any] | None = None) -> list[tuple[str, Any, Any]]:
    """``(key, old, new)`` for every leaf that differs. A key the started config lacks (added by a
    newer opzoo) counts as its default value from ``defaults`` (a flattened default config). Data
    files are compared as files (:func:`opzoo.data.fingerprint.same_file`: resolved path, else content
    hash), not as text."""
    from ..data.fingerprint import same_file

    old, new = flatten_config(started), flatten_config(current)
    defaults = defaults or {}
    changes = []
    for key in sorted(set(old) | set(new)):
        a = old.get(key, defaults.get(key, _ABSENT))
        b = new.get(key, _ABSENT)
        if a != b and not (key not in old and b is None):
            if _DATA_PATH.match(key) and isinstance(a, str) and isinstance(b, str) and same_file(a, b):
                continue
            changes.append((key, a, b))
    return changes


def format_changes(changes: list[tuple[str, Any, Any]]) -> str:
    return "; ".join(f"{k}: {json.dumps(a) if a is not _ABSENT else a} -> {json.dumps(b) if b is not _ABSENT else b}"
                     for k, a, b in changes)


# ---- what to do with a directory ---------------------------------------------------------------
@dataclasses.dataclass
class RunPlan:
    """What :func:`plan_run` decided: ``fresh`` (start at step 0), ``resume`` or ``finished``."""

    action: str
    start: int = 0
    checkpoint: Path | None = None
    files: dict[str, Any] | None = None
    harmless: list[tuple[str, Any, Any]] = dataclasses.field(default_factory=list)
    restart: bool = False  # a started run without any checkpoint yet: it starts again at step 0


def contents(run_dir: Path) -> list[str]:
    """Names in ``run_dir`` other than its lock file (empty if it does not exist)."""
    if not run_dir.is_dir():
        return []
    return sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_NAME)


def read_started_config(run_dir: Path) -> dict[str, Any] | None:
    """The config the run in ``run_dir`` was started with: ``run_config.json`` or, for a directory of an
    older opzoo that had none, the config recorded in its newest checkpoint."""
    path = run_dir / CONFIG_NAME
    if path.is_file() or path.is_symlink():
        doc = read_json(path, "a run's started config", follow_links=False, error=RunDirError)
        if not isinstance(doc, dict):
            raise RunDirError(f"{path}: expected a JSON object")
        return doc
    for ckpt in reversed(list_checkpoints(run_dir / "checkpoints")):
        try:
            return read_json(ckpt / "state.json", "a checkpoint's state", follow_links=False).get("config")
        except (ConfigError, AttributeError):
            continue
    return None


def is_finished(run_dir: Path, steps: int) -> bool:
    """``finished.json`` says the run of ``steps`` steps is done (every step, or ``steps_done`` of them when it stopped
    early on validation) and its final checkpoint is still there."""
    try:
        marker = read_json(run_dir / FINISHED_NAME, "a run's finished marker", follow_links=False)
    except ConfigError:
        return False
    if not isinstance(marker, dict) or marker.get("step") != steps:
        return False
    done = marker.get("steps_done", steps)
    return isinstance(done, int) and 0 <= done <= steps and (run_dir / "checkpoints" / checkpoint_name(done)).is_dir()


def finished_steps(run_dir: Path, steps: int) -> int:
    """The steps a finished run did: all ``steps``, or fewer when it stopped early on validation."""
    try:
        marker = read_json(run_dir / FINISHED_NAME, "a run's finished marker", follow_links=False)
    except ConfigError:
        return steps
    done = marker.get("steps_done", steps) if isinstance(marker, dict) else steps
    return done if isinstance(done, int) else steps


def plan_run(run_dir: str | os.PathLike, config: Mapping[str, Any], defaults: Mapping[str, Any],
             allow_resume: bool = True) -> RunPlan:
    """Decide (reading only) how a run with ``config`` (``RunConfig.to_dict()``) uses ``run_dir``.

    Raises RunDirError naming each changed key, or the checkpoint files that failed verification.
    """
    run_dir = Path(run_dir)
    found = contents(run_dir)
    if not found:
        return RunPlan("fresh")
    new_hint = f"pass --new to move the old contents aside (to {run_dir}.replaced-<time>), or choose another output_dir"
    started = read_started_config(run_dir)
    if started is None:
        shown = ", ".join(found[:8]) + (", ..." if len(found) > 8 else "")
        raise RunDirError(f"{run_dir} is not empty and holds no opzoo run (it has {shown}); {new_hint}")
    changes = config_changes(started, config, defaults)
    defining = [c for c in changes if not is_harmless(c[0])]
    if defining:
        raise RunDirError(
            f"{run_dir} holds a run started with another config; it resumes only under the config it was "
            f"started with ({run_dir / CONFIG_NAME}). Changed: {format_changes(defining)}. "
            f"Restore these values to resume, or {new_hint}")
    steps = config["training"]["steps"]
    if is_finished(run_dir, steps):
        return RunPlan("finished", start=steps)
    if not allow_resume:
        raise RunDirError(f"{run_dir} holds a run and checkpoint.resume is false; {new_hint}")
    harmless = [c for c in changes if is_harmless(c[0]) and c[0] != "output_dir"]
    trust = bool(config.get("checkpoint", {}).get("trust_unverified"))
    path, files, failures = resumable_checkpoint(run_dir / "checkpoints", trust_unverified=trust)
    if path is None and failures:
        raise RunDirError(f"{run_dir}: no checkpoint passes verification ({'; '.join(failures)}); "
                          f"nothing to resume from: {new_hint}")
    if path is None:
        return RunPlan("fresh", harmless=harmless, restart=True)
    recorded = files["state.json"].get("config")
    if recorded is not None:  # what the checkpoint itself says it was trained under
        edited = [c for c in config_changes(recorded, started, defaults) if not is_harmless(c[0])]
        if edited:
            raise RunDirError(
                f"{run_dir / CONFIG_NAME} disagrees with what checkpoint {path.name} records it was trained under "
                f"({format_changes(edited)}, checkpoint -> run_config.json): the file was edited after the run "
                f"started. Restore it to resume, or {new_hint}")
    return RunPlan("resume", start=int(files["state.json"]["step"]), checkpoint=path, files=files, harmless=harmless)


def move_aside(run_dir: str | os.PathLike) -> Path | None:
    """Move everything in ``run_dir`` except its lock into a new sibling ``<name>.replaced-<time>``
    (never deleting); returns it, or None when there was nothing to move."""
    from ..files import move_aside as move_contents

    return move_contents(run_dir, keep=(LOCK_NAME,))


# ---- the data a run trains on ----------------------------------------------------------------------
DATA_NAME = "data_fingerprints.json"


def record_or_check_data(run_dir: Path, plan: RunPlan, sources) -> None:
    """A fresh run records its data files' fingerprints (``data_fingerprints.json``,
    :func:`opzoo.data.fingerprint.file_fingerprint` of each opened source, every trajectory's values hash included);
    a resume refuses when a file's content, size, shape, fields or any trajectory's values changed since, naming the
    file and what changed: a trajectory trained on must never move into the test split. A resume whose record is
    gone is refused too: nothing would show that the files are those its checkpoints trained on."""
    from ..data.fingerprint import file_fingerprint, fingerprint_changes

    current, seen = [], set()
    for src in sources:
        if src.path not in seen:
            seen.add(src.path)
            current.append(file_fingerprint(src.path, src))
    path = Path(run_dir) / DATA_NAME
    if plan.action == "resume" and not path.is_file():
        raise RunDirError(f"{path} is gone: it records the data files this run trained on, and without it nothing "
                          f"shows that the files now are those its checkpoints saw. Restore it, or pass --new to "
                          f"start the run again")
    if plan.action == "resume":
        recorded = read_data_record(path)
        for now in current:
            before = recorded.get(now["path"])
            changes = fingerprint_changes(before, now) if before else ["not a file of this run when it started"]
            if changes:
                raise RunDirError(
                    f"{now['path']} changed since this run started ({'; '.join(changes)}): resuming would train and "
                    f"test on other data than the checkpoints saw. Restore the file, or pass --new to start again")
    elif plan.action == "fresh" or not path.is_file():
        write_json_atomic(path, current)


BASE_NAME = "base_weights.json"
BASE_LIMIT = 64 * 2**10  # bytes: the record holds one line naming the weights


def record_or_check_base(run_dir: Path, plan: RunPlan, base: str, say: Callable[[str], None] = print) -> str:
    """The weights the run started from, as its card names them (``base``: :func:`opzoo.training.export.base_weights`
    now). A fresh run records them (``base_weights.json``); a resume returns the recorded ones, and says so when the
    name now resolves to other weights (another Hub commit, a plugin's new weights): the run goes on from its
    checkpoint, which trained from the recorded ones, and its card names those. A run started before the record was
    kept records ``base`` now."""
    path = Path(run_dir) / BASE_NAME
    if (path.exists() or path.is_symlink()) and not (path.is_file() and not path.is_symlink()):
        kind = "a symbolic link" if path.is_symlink() else "a directory" if path.is_dir() else "not a regular file"
        raise RunDirError(f"{path}: {kind} where the run records the weights it started from; opzoo writes a file "
                          f"there: remove it, or pass --new to start the run again")
    if plan.action == "resume" and path.is_file():
        doc = read_json(path, "a run's base weights record", limit=BASE_LIMIT, follow_links=False, error=RunDirError)
        weights = doc.get("weights") if isinstance(doc, dict) else None
        damaged = not isinstance(weights, str) or set(doc) != {"weights"} or len(weights) > 4096 or \
            any(ord(c) < 32 for c in weights)
        if damaged or weights.split(" ", 1)[0] != base.split(" ", 1)[0]:
            raise RunDirError(f"{path}: not the record of the weights this run started from that it wrote ("
                              + ("it is damaged" if damaged else f"it names other weights than this run's model, "
                                 f"{base.split(' ', 1)[0]}") + "). Restore it, or pass --new to start the run again")
        if doc["weights"] != base:
            say(f"  the base weights are now {base}; this run started from {doc['weights']}: it goes on from its "
                f"checkpoint, trained from those, and its card names them")
        return doc["weights"]
    write_json_atomic(path, {"weights": base})
    return base


def read_data_record(path: Path) -> dict[str, dict[str, Any]]:
    """A run's ``data_fingerprints.json`` by file path, or a RunDirError saying it is damaged (cut short, another
    shape, a link in its place): what the run trained on cannot be told from it."""
    doc = read_json(path, "a run's data record", follow_links=False, error=RunDirError)
    if not isinstance(doc, list) or not all(isinstance(f, dict) and isinstance(f.get("path"), str) for f in doc):
        raise RunDirError(f"{path}: not the list of file records this run wrote (got a {type(doc).__name__}): it is "
                          f"damaged, so nothing shows which data the checkpoints trained on. Restore it, or pass --new "
                          f"to start the run again")
    return {f["path"]: f for f in doc}


def write_json_atomic(path: Path, doc: Any) -> None:
    atomic_write(path, json.dumps(doc, indent=2) + "\n")


def write_started_config(run_dir: Path, config: Mapping[str, Any]) -> None:
    write_json_atomic(run_dir / CONFIG_NAME, with_resolved_paths(config))


def mark_finished(run_dir: Path, steps: int, model_dir: Path | None, summary: Mapping[str, Any]) -> None:
    write_json_atomic(run_dir / FINISHED_NAME, {"step": steps, "model": str(model_dir) if model_dir else None,
                                                 "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **summary})


def clear_finished(run_dir: Path) -> None:
    (run_dir / FINISHED_NAME).unlink(missing_ok=True)


__all__ = ["RunDirLock", "RunDirError", "RunDirBusyError", "RunPlan", "plan_run", "move_aside", "HARMLESS_KEYS",
           "config_changes"]


def take_run_dir(run_dir: Path, config: Mapping[str, Any], defaults: Mapping[str, Any], *, is_main: bool,
                 new: bool, allow_resume: bool, sync, say) -> tuple[RunPlan, RunDirLock | None]:
    """Lock ``run_dir`` (rank 0: ``is_main``), move old contents aside for ``new``, and decide: fresh, resume
    (verified checkpoint) or finished. Refusals raise RunDirError naming what differs; the directory is then
    left as it was. ``sync()`` is a barrier across ranks; ``say(line)`` prints on rank 0. The caller releases
    the returned lock when the run ends."""
    from ..files import clean_dead_temporaries, temporaries

    lock = RunDirLock(run_dir) if is_main else None
    moved = None
    if lock is not None:
        lock.acquire()
    try:
        if lock is not None and new:
            moved = move_aside(run_dir)
        sync()
        plan = plan_run(run_dir, config, defaults, allow_resume=allow_resume or new)
        if plan.action == "finished":
            return plan, lock
        if lock is not None:
            # only now: a refused or finished run leaves the directory as it was, .lock included
            # (meanwhile a contender is told the recorded PID has ended, see describe_holder)
            lock.record_holder()
            if moved is not None:
                say(f"moved the previous contents of {run_dir} to {moved}")
            clean_dead_temporaries(run_dir / "checkpoints")
            for left in temporaries(run_dir / "checkpoints"):
                warnings.warn(f"{left}: a temporary directory of another process (PID@host in its name); "
                              "left in place", stacklevel=3)
            clear_finished(run_dir)
            if plan.action == "fresh":
                write_started_config(run_dir, config)
        sync()
        return plan, lock
    except BaseException:
        if lock is not None:
            lock.release()
        raise
