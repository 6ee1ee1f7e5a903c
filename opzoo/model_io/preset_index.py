"""A cache of what ``opzoo list`` and ``opzoo info NAME`` print, so that they answer without importing
torch or any plugin.

Presets are registered by code (plugins' hooks), so the index is made by running that code once: the
plugin host fills the registry, every preset is built on the ``meta`` device, and its info document
(``opzoo info --json``) is stored in ``<cache>/opzoo/preset-index-<key>.json``. The ``key`` hashes
everything that could change the answer, read without importing anything:

- opzoo's version and the source files of the opzoo package (path, size, mtime);
- ``OPZOO_PLUGINS``;
- every ``opzoo`` entry point (name, value, distribution and version) and, for each, the files of its
  top-level package (path, size, mtime), so an edited editable install is a new key.

A changed key is a new file, never a stale answer; a run whose plugins failed to load writes no index
(their warnings are printed by the slow path as usual). ``OPZOO_NO_INDEX=1`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
from pathlib import Path
from typing import Any, Callable

from .._version import __version__

ENV_OFF = "OPZOO_NO_INDEX"
ENV_DIR = "OPZOO_CACHE_DIR"
SUFFIXES = (".py", ".json", ".md", ".yaml", ".safetensors", ".toml")


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


def index_key() -> str:
    h = hashlib.sha256(f"opzoo {__version__}; plugins={os.environ.get('OPZOO_PLUGINS')!r};".encode())
    _tree_stamp(Path(__file__).parent, h)
    for ep in sorted(md.entry_points(group="opzoo"), key=lambda e: (e.name, e.value)):
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "?"
        h.update(f"ep {ep.name}={ep.value} ({dist});".encode())
        _module_files(ep.value.split(":")[0].split(".")[0], h)
    return h.hexdigest()[:24]


def _path(key: str) -> Path:
    return cache_dir() / f"preset-index-{key}.json"


def read_index() -> dict[str, Any] | None:
    """The index for the installed code, or None (off, not built yet, or unreadable)."""
    if os.environ.get(ENV_OFF):
        return None
    try:
        key = index_key()
        doc = json.loads(_path(key).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("key") == key else None


def build_index(preset_document: Callable[[str, dict], dict[str, Any]]) -> dict[str, Any] | None:
    """Fill the registry, document every preset with ``preset_document(name, {})`` (what ``opzoo info
    --json`` prints) and store the index; None when a plugin failed to load (nothing is stored then)."""
    from ..host.plugins import get_plugin_host

    key = index_key()
    host = get_plugin_host()
    if host.failed:
        return None
    registry = host.registry
    names = registry.list_models()
    doc = {"key": key, "opzoo": __version__,
           "presets": {n: preset_document(n, {}) for n in names},
           "aliases": {a: registry.preset(a).name for a in registry.list_models(include_aliases=True) if a not in names}}
    if os.environ.get(ENV_OFF):
        return doc
    try:
        path = _path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
        for old in path.parent.glob("preset-index-*.json"):  # earlier keys are never read again
            if old != path:
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


__all__ = ["read_index", "build_index", "index_key", "list_from_index", "cache_dir"]
