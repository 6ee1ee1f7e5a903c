"""Plugin discovery with pluggy, and the process-wide registry built from it (docs/architecture.md, Plugins).

Plugins are found through entry points in the group ``opzoo``. One that fails to import or to
register becomes a warning naming its distribution and the error; the others still load.
``OPZOO_PLUGINS`` (comma-separated distribution names; empty means none) restricts loading.
``OPZOO_STRICT_PLUGINS=1`` makes a plugin that fails to load an error instead of a warning.

The core's own components (:mod:`opzoo.host.builtins`) are one more plugin, registered first under the
name ``opzoo``. ``opzoo/__init__`` makes this host the source of :func:`opzoo.registry.registry.get_registry`,
so the backbones find their components without importing this module back.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
import os
import threading
import warnings
from typing import Any

import pluggy

from ..contracts import hookspecs
from ..errors import OpzooError, RegistryConflictError
from ..registry.registry import Registry, set_live_registry
from . import builtins

ENTRY_POINT_GROUP = "opzoo"
ENV_PLUGINS = "OPZOO_PLUGINS"
# set (not "0"): a plugin that fails to load is an error, not a warning (a plugin author's tests; docs/plugins.md)
STRICT_ENV = "OPZOO_STRICT_PLUGINS"
CORE_NAME = "opzoo"


class PluginLoadWarning(UserWarning):
    """A plugin that could not be imported or failed while registering."""


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """A plugin distribution: ``error`` is None when it loaded."""

    name: str
    distribution: str
    version: str
    error: str | None = None


class PluginHost:
    """The pluggy manager, the plugins it loaded or failed to load, and the registry they filled."""

    def __init__(self, allowed: set[str] | None = None, entry_points: list[md.EntryPoint] | None = None):
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.loaded: list[PluginInfo] = []
        self.failed: list[PluginInfo] = []
        self._owner: dict[int, str] = {}
        self._allowed = allowed
        self._entry_points = entry_points
        self._register(builtins, CORE_NAME, name=CORE_NAME)
        self._discover()
        self.registry = Registry()
        self._fill(self.registry)

    def _register(self, plugin: Any, owner: str, name: str | None = None) -> None:
        self.pm.register(plugin, name=name)
        self._owner[id(plugin)] = owner

    def _discover(self) -> None:
        eps = self._entry_points
        if eps is None:
            eps = list(md.entry_points(group=ENTRY_POINT_GROUP))
        for ep in eps:
            dist = ep.dist.name if ep.dist is not None else ep.value.split(":")[0].split(".")[0]
            version = ep.dist.version if ep.dist is not None else "?"
            if self._allowed is not None and dist not in self._allowed:
                continue
            if self.pm.get_plugin(ep.name) is not None:
                continue
            try:
                plugin = ep.load()
                self._register(plugin, dist, name=ep.name)
            except (Exception, SystemExit) as e:  # a broken plugin (even one calling sys.exit) must not take the others down
                self._fail(ep.name, dist, version, f"import failed: {type(e).__name__}: {e}")
                continue
            self.loaded.append(PluginInfo(ep.name, dist, version))

    def _fail(self, name: str, dist: str, version: str, error: str) -> None:
        self.failed.append(PluginInfo(name, dist, version, error))
        if os.environ.get(STRICT_ENV, "") not in ("", "0"):  # a plugin author's tests: a failure stops them
            raise OpzooError(f"opzoo plugin {dist!r} {version} ({name}) was not loaded: {error} ({STRICT_ENV} is set)")
        warnings.warn(f"opzoo plugin {dist!r} {version} ({name}) was not loaded: {error}", PluginLoadWarning,
                      stacklevel=4)

    def _fill(self, registry: Registry) -> None:
        """Run every plugin's component hooks, then every plugin's model hooks."""
        for hook_name in ("opzoo_register_components", "opzoo_register_models"):
            hook = getattr(self.pm.hook, hook_name)
            for impl in hook.get_hookimpls():  # registration order: the core first
                owner = self._owner.get(id(impl.plugin), impl.plugin_name)
                if owner != CORE_NAME and owner in {f.distribution for f in self.failed}:
                    continue
                kwargs = {"registry": registry}
                with registry.owned_by(owner):
                    try:
                        impl.function(**{a: kwargs[a] for a in impl.argnames})
                    except RegistryConflictError as e:
                        if owner == CORE_NAME or not e.owners or e.owners[0] != CORE_NAME:
                            raise  # two plugins want one name: the user chooses (uninstall one, OPZOO_PLUGINS)
                        registry.forget(owner)  # a plugin taking the core's own name or suffix: it alone is left out
                        self._drop(owner, str(e))
                    except (Exception, SystemExit) as e:
                        if owner == CORE_NAME:
                            raise
                        registry.forget(owner)
                        self._drop(owner, f"{hook_name} raised {type(e).__name__}: {e}")

    def add_commands(self, subparsers: Any, taken: dict[str, str] | None = None) -> None:
        """Run every loaded plugin's ``opzoo_register_commands`` on ``opzoo``'s sub-parsers.

        ``taken`` maps the command names that already exist to their owner (default: every name
        in ``subparsers``, owned by the core). A plugin taking a name already taken is a
        :class:`RegistryConflictError` naming both; any other error in its hook is a warning, and
        the commands it added before failing are removed.
        """
        owners = dict(taken) if taken is not None else {n: CORE_NAME for n in subparsers.choices}
        for impl in self.pm.hook.opzoo_register_commands.get_hookimpls():
            owner = self._owner.get(id(impl.plugin), impl.plugin_name)
            adder = _CommandAdder(subparsers, owners, owner)
            try:
                impl.function(subparsers=adder)
            except RegistryConflictError:
                raise
            except (Exception, SystemExit) as e:
                adder.remove_added()
                warnings.warn(f"opzoo plugin {owner!r}: opzoo_register_commands raised {type(e).__name__}: {e}",
                              PluginLoadWarning, stacklevel=2)

    def _drop(self, dist: str, error: str) -> None:
        info = next(p for p in self.loaded if p.distribution == dist)
        self.loaded.remove(info)
        self._fail(info.name, dist, info.version, error)


class _CommandAdder:
    """What a plugin's ``opzoo_register_commands`` receives: ``add_parser`` of ``opzoo``'s
    sub-parsers, refusing a name (or alias) that another owner already has."""

    def __init__(self, subparsers: Any, owners: dict[str, str], owner: str):
        self._subparsers = subparsers
        self._owners = owners
        self._owner = owner
        self._added: list[str] = []

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        for key in (name, *kwargs.get("aliases", ())):
            if key in self._owners:
                raise RegistryConflictError(
                    f"command {key!r} is registered by both {self._owners[key]!r} and {self._owner!r}; "
                    f"uninstall one of them or restrict loading with OPZOO_PLUGINS"
                )
        parser = self._subparsers.add_parser(name, **kwargs)
        for key in (name, *kwargs.get("aliases", ())):
            self._owners[key] = self._owner
            self._added.append(key)
        return parser

    def remove_added(self) -> None:
        for key in self._added:
            self._subparsers.choices.pop(key, None)
            self._owners.pop(key, None)
        names = set(self._added)
        self._subparsers._choices_actions[:] = [a for a in self._subparsers._choices_actions if a.dest not in names]


_lock = threading.Lock()
_host: PluginHost | None = None
_filling: int | None = None  # the thread that is creating the host (its plugins' hooks are running)


def allowed_from_env() -> set[str] | None:
    value = os.environ.get(ENV_PLUGINS)
    if value is None:
        return None
    return {n.strip() for n in value.split(",") if n.strip()}


def get_plugin_host() -> PluginHost:
    """The process-wide PluginHost, created (and plugins loaded) on first use."""
    global _host, _filling
    if _filling == threading.get_ident():  # a hook asking for the registry it is filling would wait for itself
        from ..errors import OpzooError

        raise OpzooError("opzoo.get_registry() was called while the plugins register (from a hook, or "
                         "from code a hook runs, such as a family's card_fields): use the registry the hook receives, "
                         "or the plugin's own tables")
    with _lock:
        if _host is None:
            _filling = threading.get_ident()
            try:
                _host = PluginHost(allowed=allowed_from_env())
            finally:
                _filling = None
            set_live_registry(_host.registry)
        return _host


def reset_plugins() -> None:
    """Forget loaded plugins; the next use discovers them again (e.g. after pip install)."""
    global _host
    with _lock:
        _host = None
        set_live_registry(None)


__all__ = ["PluginHost", "PluginInfo", "PluginLoadWarning", "get_plugin_host", "reset_plugins",
           "allowed_from_env"]
