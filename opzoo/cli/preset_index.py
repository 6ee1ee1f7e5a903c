"""A cache of what ``opzoo list`` and ``opzoo info NAME`` print, so that they answer without importing
torch or any plugin.

Presets are registered by code (plugins' hooks), so the index is made by running that code once: the
plugin host fills the registry, every preset is built on the ``meta`` device, and its info document
(``opzoo info --json``) is stored in ``<cache>/opzoo/preset-index-<key>.json``. The ``key`` hashes
everything that could change the answer, read without importing anything:

- opzoo's version and every source file of the installed opzoo package (path, size, mtime), whatever its folder;
- ``OPZOO_PLUGINS``;
- every ``opzoo`` entry point (name, value, distribution and version) and, for each, the files of its
  top-level package (path, size, mtime), so an edited editable install is a new key;
- the distributions installed beside them (the names of the ``*.dist-info`` entries on ``sys.path``), so that a
  plugin's dependency installed, removed or upgraded is a new key. A dependency edited in place is not seen:
  ``OPZOO_NO_INDEX=1`` answers from the code itself.

A changed key is a new file, never a stale answer; a run whose plugins failed to load writes no index
(their warnings are printed by the slow path as usual). The index is data from a cache directory and is read as
untrusted: a regular file only, of bounded size, whose schema and content digest are checked; a bad one is
discarded with one warning and rebuilt. Indexes of other keys (another plugin set) are kept, the most recent
``KEEP`` of them. ``OPZOO_NO_INDEX=1`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import stat
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

from .._version import __version__

ENV_OFF = "OPZOO_NO_INDEX"
ENV_DIR = "OPZOO_CACHE_DIR"
SUFFIXES = (".py", ".json", ".md", ".yaml", ".safetensors", ".toml")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the whole opzoo package, not this module's folder
MAX_BYTES = 32 << 20  # an index of every preset is about 1 MB
KEEP = 8  # indexes of other keys kept (plugin sets used in turn do not evict each other)
SCHEMA = 2


class PresetIndexWarning(UserWarning):
    """The preset index on disk was unreadable or damaged; it is rebuilt."""


def cache_dir() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opzoo"


def _tree_stamp(root: Path, h) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(SUFFIXES):
                st = os.stat(os.path.join(dirpath, name))
                h.update(f"{os.path.relpath(os.path.join(dirpath, name), root)}:{st.st_size}:{st.st_mtime_ns};".encode())


def _module_files(module: str, h) -> None:
    """Stamp the files of top-level module ``module`` (its package directory, or its one file), found
    without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        h.update(f"{module}: not found;".encode())
    elif spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            _tree_stamp(Path(location), h)
    elif spec.origin and os.path.isfile(spec.origin):
        st = os.stat(spec.origin)
        h.update(f"{spec.origin}:{st.st_size}:{st.st_mtime_ns};".encode())


def _installed_distributions(h) -> None:
    for entry in sys.path:
        try:
            names = sorted(n for n in os.listdir(entry or ".") if n.endswith((".dist-info", ".egg-info", ".egg-link")))
        except OSError:
            continue
        h.update(f"{entry}:{','.join(names)};".encode())


def index_key() -> str:
    h = hashlib.sha256(f"opzoo {__version__}; schema {SCHEMA}; plugins={os.environ.get('OPZOO_PLUGINS')!r};".encode())
    _tree_stamp(PACKAGE_ROOT, h)
    for ep in sorted(md.entry_points(group="opzoo"), key=lambda e: (e.name, e.value)):
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "?"
        h.update(f"ep {ep.name}={ep.value} ({dist});".encode())
        _module_files(ep.value.split(":")[0].split(".")[0], h)
    _installed_distributions(h)
    return h.hexdigest()[:24]


def _path(key: str) -> Path:
    return cache_dir() / f"preset-index-{key}.json"


def _digest(presets: Any, aliases: Any) -> str:
    return hashlib.sha256(json.dumps([presets, aliases], sort_keys=True).encode()).hexdigest()


_PRESET_FIELDS = {"name": str, "aliases": list, "backbone": str, "plugin": str, "pretrained_cfg": dict,
                  "parameters": int, "config": dict}


def _schema_problem(doc: Any, key: str) -> str | None:
    """What is wrong with an index document read from disk (None: it is one this code wrote for ``key``)."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    if doc.get("key") != key:
        return "another key"
    presets, aliases = doc.get("presets"), doc.get("aliases")
    if not isinstance(presets, dict) or not isinstance(aliases, dict):
        return "no presets/aliases tables"
    if doc.get("digest") != _digest(presets, aliases):
        return "its content does not match its digest (edited or damaged)"
    for name, info in presets.items():
        if not isinstance(info, dict) or info.get("name") != name:
            return f"preset {name!r} is malformed"
        for field, kind in _PRESET_FIELDS.items():
            if not isinstance(info.get(field), kind):
                return f"preset {name!r} has no valid {field!r}"
        if info.get("pretrained") is not None and not isinstance(info["pretrained"], dict):
            return f"preset {name!r} has no valid 'pretrained'"
    for alias, target in aliases.items():
        if target not in presets:
            return f"alias {alias!r} names no preset"
    return None


def _read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` when it is a regular file of at most MAX_BYTES (not a link, FIFO or device)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(f"cannot be opened as a regular file ({e.strerror or e})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
        os.close(fd)
        raise ValueError("is not a regular file" if not stat.S_ISREG(st.st_mode) else
                         f"is {st.st_size} bytes, more than an index can be ({MAX_BYTES})")
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_BYTES + 1)


def _discard(path: Path, why: str) -> None:
    warnings.warn(f"opzoo: the preset index {path} {why}; it is discarded and rebuilt", PresetIndexWarning,
                  stacklevel=3)
    try:
        path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    except OSError:
        pass


def read_index() -> dict[str, Any] | None:
    """The index for the installed code, or None (off, not built yet, or unreadable: then discarded with a
    warning, and the caller rebuilds it)."""
    if os.environ.get(ENV_OFF):
        return None
    key = index_key()
    path = _path(key)
    try:
        raw = _read_regular(path)
        if raw is None:
            return None
        doc = json.loads(raw)
    except RecursionError:
        _discard(path, "is nested too deeply")
        return None
    except (ValueError, UnicodeDecodeError) as e:
        _discard(path, str(e) if isinstance(e, ValueError) and str(e).startswith(("is ", "cannot")) else
                 "is not valid JSON")
        return None
    problem = _schema_problem(doc, key)
    if problem is not None:
        _discard(path, f"is not an index of the installed code ({problem})")
        return None
    return doc


def build_index(preset_document: Callable[[str, dict], dict[str, Any]],
                announce: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """Fill the registry, document every preset with ``preset_document(name, {})`` (what ``opzoo info
    --json`` prints) and store the index; None when a plugin failed to load (nothing is stored then).
    ``announce`` is told, once, that the index is being built (it takes a while: every plugin is imported)."""
    from ..files import atomic_write, clean_dead_temporaries
    from ..host.plugins import get_plugin_host

    key = index_key()
    if announce is not None:
        announce(f"opzoo: indexing the installed presets once (every plugin is imported; up to a minute); "
                 f"later `opzoo list`/`info` answer at once from {cache_dir()}")
    host = get_plugin_host()
    if host.failed:
        return None
    registry = host.registry
    names = registry.list_models()
    presets = {n: preset_document(n, {}) for n in names}
    aliases = {a: registry.preset(a).name for a in registry.list_models(include_aliases=True) if a not in names}
    doc = {"key": key, "schema": SCHEMA, "opzoo": __version__, "presets": presets, "aliases": aliases,
           "digest": _digest(json.loads(json.dumps(presets)), aliases)}
    if os.environ.get(ENV_OFF):
        return doc
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        clean_dead_temporaries(path.parent)
        atomic_write(path, json.dumps(doc))
        others = sorted((p for p in path.parent.glob("preset-index-*.json") if p != path),
                        key=lambda p: p.lstat().st_mtime, reverse=True)
        for old in others[KEEP - 1:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
    return doc


def list_from_index(doc: dict[str, Any], pattern: str, pretrained: bool, aliases: bool) -> list[str]:
    """``opzoo list``'s answer from the index (the registry's rule: an alias matching brings in its preset)."""
    import fnmatch

    presets, alias_map = doc["presets"], doc["aliases"]
    names = {n for n in presets if fnmatch.fnmatchcase(n, pattern)}
    names |= {target for a, target in alias_map.items() if fnmatch.fnmatchcase(a, pattern)}
    if aliases:
        names |= {a for a in alias_map if fnmatch.fnmatchcase(a, pattern)}
    if pretrained:
        names = {n for n in names if presets[alias_map.get(n, n)]["pretrained"] is not None}
    return sorted(names)


__all__ = ["read_index", "build_index", "index_key", "list_from_index", "cache_dir", "PresetIndexWarning"]
