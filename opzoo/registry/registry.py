"""The registry of components and presets that plugins fill through their hooks (docs/architecture.md, Plugins).

Kinds of component: ``mixer``, ``feedforward``, ``residual``, ``block``, ``backbone``,
``optimizer_hook``, ``converter``, ``upstream``, ``reader`` (a layout of trajectory files) and ``metric`` (a score of a
rollout), each looked up by the name a config, a command or a file's layout gives.
Routers are not a kind: the block or feed-forward that routes builds its :class:`opzoo.Router` itself.
Every entry remembers the distribution that registered it, so that two plugins claiming one name is
an error naming both.

:func:`get_registry` is the process-wide registry. It is filled by the plugin host
(:mod:`opzoo.host.plugins`) on first use; this module does not import the host, so that a backbone can
look up its components here without importing the plugin machinery that imports the backbones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template
from typing import Any, Callable, Iterator, Mapping

from ..errors import RegistryConflictError, UnknownNameError
from .contract import DataContract
from .family import CheckpointFamily
from .metric import Metric
from .provenance import Fact, PretrainedCheck, Result

HF_HUB_PREFIX = "hf-hub:"  # a model reference to the Hub (parsed in opzoo.model_io.reference)
LOCAL_DIR_PREFIX = "local-dir:"  # a model reference to a directory

HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".mat")  # HDF5 files: a reader is chosen by their content (detect)
COMPONENT_KINDS = ("mixer", "feedforward", "residual", "block", "backbone", "optimizer_hook", "converter", "upstream",
                   "reader", "metric")


@dataclasses.dataclass(frozen=True)
class PretrainedSource:
    """Where a preset's weights live: a Hub repo (``repo_id``) or a directory (``directory``).

    With ``converter=None`` the files are an opzoo repo's (``model.safetensors``, or ``filename``);
    otherwise ``filename`` is a foreign checkpoint turned into opzoo weights by the named converter,
    called with ``converter_options`` as keyword arguments (e.g. the data set a checkpoint was trained on).
    ``directory`` is a local path or a package resource (``importlib.resources.files(pkg) / "dir"``),
    for weights that ship inside a plugin; :meth:`package` builds one. Both kinds are resolved to
    local files by :func:`opzoo.model_io.pretrained.pretrained_files` and then loaded by the same code.

    ``download_page`` is the third kind: weights published where opzoo cannot download them (a Google Drive folder
    that upstream's README links), as file ``filename`` there. A user downloads the file by hand and loads it with
    ``checkpoint_path=FILE`` (through ``converter`` and the ``checks``); ``pretrained=True`` alone is refused with
    a line that says where the file is and how to load it.

    ``extra_files`` are other files of the repo that the converter or the checks read (e.g. the
    foreign ``config.json``); they are fetched with the weights, into the same snapshot. ``fallback_filenames`` are
    weights files read instead, in order, when a Hub repo (at the revision) or a directory has no ``filename`` (e.g. a
    pickled ``pytorch_model.bin`` before a repo gained ``model.safetensors``; the converter reads either). ``checks``
    (:class:`opzoo.PretrainedCheck`) run on the fetched files and tensors before a model is returned:
    weights that fail one are refused (``opzoo verify`` runs them all and prints a table).
    """

    repo_id: str | None = None
    filename: str | None = None
    revision: str | None = None
    converter: str | None = None
    directory: Traversable | Path | None = None
    converter_options: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    extra_files: tuple[str, ...] = ()
    checks: tuple[PretrainedCheck, ...] = dataclasses.field(default=(), hash=False)
    fallback_filenames: tuple[str, ...] = ()
    download_page: str | None = None

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.repo_id, self.directory, self.download_page)) != 1:
            raise ValueError("PretrainedSource: give exactly one of repo_id (a Hub repo), directory or download_page "
                             "(a page to download the file from by hand)")
        if self.download_page is not None and (self.filename is None or self.converter is None):
            raise ValueError("PretrainedSource: a download_page source names its file (filename) and the converter "
                             "that reads it")
        if self.directory is not None and self.revision is not None:
            raise ValueError("PretrainedSource: revision applies to Hub repos only, not to a directory")
        if isinstance(self.directory, str):
            object.__setattr__(self, "directory", Path(self.directory))
        object.__setattr__(self, "extra_files", tuple(self.extra_files))
        object.__setattr__(self, "fallback_filenames", tuple(self.fallback_filenames))
        object.__setattr__(self, "checks", tuple(self.checks))
        for check in self.checks:
            if not isinstance(check, PretrainedCheck):
                raise TypeError(f"PretrainedSource.checks: expected opzoo.PretrainedCheck, got {type(check).__name__}")

    @classmethod
    def package(cls, package: str, path: str, **kwargs: Any) -> "PretrainedSource":
        """Weights shipped inside Python package ``package`` under ``path`` (e.g. ``"pretrained/x"``)."""
        from importlib.resources import files

        return cls(directory=files(package).joinpath(*path.split("/")), **kwargs)

    @property
    def location(self) -> str:
        """Where the weights are, for messages: ``hf-hub:org/repo[@rev]``, the directory, or the download page."""
        if self.repo_id is not None:
            return f"{HF_HUB_PREFIX}{self.repo_id}{'@' + self.revision if self.revision else ''}"
        if self.download_page is not None:
            return self.download_page
        return str(self.directory)


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named model: a backbone, its config args, optional weights and a model card."""

    name: str
    backbone: str
    args: Mapping[str, Any]
    pretrained: PretrainedSource | None = None
    card: Traversable | Path | None = None
    pretrained_cfg: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    owner: str = "?"
    provenance: tuple[Fact, ...] = ()  # where each fact about the preset and its weights comes from
    results: tuple[Result, ...] = ()  # measured numbers, for the card's model-index
    family: str | None = None  # the CheckpointFamily whose row it is
    card_fields: Mapping[str, str] = dataclasses.field(default_factory=dict)  # its family's card filled for the row
    contract: DataContract | None = None  # what it takes from the user's data (its family's, or its backbone's)

    def card_template(self) -> str | None:
        """The text of its card template (its family's template filled for its row), or None without a card."""
        if self.card is None:
            return None
        text = self.card.read_text(encoding="utf-8")
        return Template(text).safe_substitute(self.card_fields) if self.card_fields else text


@dataclasses.dataclass(frozen=True)
class UpstreamEntry:
    backbone: str  # the registered backbone whose models it computes
    build: Callable  # build(model, x) -> opzoo.Upstream


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    obj: Any
    owner: str


class Registry:
    """Name -> component for each kind, and name -> Preset (with aliases)."""

    def __init__(self) -> None:
        self._components: dict[str, dict[str, Entry]] = {k: {} for k in COMPONENT_KINDS}
        self._presets: dict[str, Preset] = {}
        self._aliases: dict[str, str] = {}
        self._families: dict[str, tuple[CheckpointFamily, str]] = {}
        self._contracts: dict[str, DataContract] = {}  # backbone name -> the data contract of its models
        self._owner = "opzoo"

    @contextlib.contextmanager
    def owned_by(self, owner: str) -> Iterator["Registry"]:
        """Attribute registrations made inside the block to distribution ``owner``."""
        previous, self._owner = self._owner, owner
        try:
            yield self
        finally:
            self._owner = previous

    # ---- components -------------------------------------------------------------------------
    def register(self, kind: str, name: str, obj: Any) -> Any:
        if kind not in self._components:
            raise ValueError(f"unknown component kind {kind!r}; kinds: {', '.join(COMPONENT_KINDS)}")
        table = self._components[kind]
        if name in table:
            self._conflict(f"{kind} {name!r}", table[name].owner)
        table[name] = Entry(name, obj, self._owner)
        return obj

    def register_mixer(self, name: str, cls: type) -> type:
        """``cls(dim, **mixer_args)`` is a :class:`opzoo.Mixer`."""
        return self.register("mixer", name, cls)

    def register_residual(self, name: str, cls: type) -> type:
        """``cls(dim, index=k, **residual_args)`` is a :class:`opzoo.Residual`."""
        return self.register("residual", name, cls)

    def register_feedforward(self, name: str, cls: type) -> type:
        """``cls(dim, hidden_dim=..., act=..., **feedforward_args)`` is a :class:`opzoo.FeedForward`."""
        return self.register("feedforward", name, cls)

    def register_block(self, name: str, cls: type) -> type:
        """``cls(config, index=i, **block_args)`` is a :class:`opzoo.Block` of the POT backbone."""
        return self.register("block", name, cls)

    def register_backbone(self, name: str, cls: type, contract: DataContract | None = None) -> type:
        """``cls(config)`` is a :class:`opzoo.Backbone`; ``cls.config_class`` its ModelConfig. ``contract``: what its
        models take from a user's data (:class:`opzoo.DataContract`), for a model no preset's contract covers (a saved
        fine-tune names its architecture); a checkpoint family's contract is its backbone's when it has none."""
        self.register("backbone", name, cls)
        if contract is not None:
            self._set_contract(name, contract)
        return cls

    def _set_contract(self, backbone: str, contract: DataContract) -> None:
        if not isinstance(contract, DataContract):
            raise TypeError(f"backbone {backbone!r}: contract must be opzoo.DataContract, got {type(contract).__name__}")
        self._contracts[backbone] = contract

    def contract(self, backbone: str, preset: str | None = None) -> DataContract | None:
        """The data contract of a model of ``backbone`` (``preset``: the preset it was loaded as, or started from):
        the preset's, else the backbone's, else None (the fit derives one from the backbone class)."""
        if preset is not None and self.has_preset(preset):
            found = self.preset(preset)
            if found.backbone == backbone and found.contract is not None:
                return found.contract
        return self._contracts.get(backbone)

    def register_optimizer_hook(self, name: str, obj: Any) -> Any:
        return self.register("optimizer_hook", name, obj)

    def register_converter(self, name: str, fn: Callable) -> Callable:
        """``fn(path, **options) -> ConvertedCheckpoint`` turns a foreign checkpoint into opzoo weights."""
        return self.register("converter", name, fn)

    def register_upstream(self, name: str, *, backbone: str, build: Callable) -> Callable:
        """``build(model, x) -> opzoo.Upstream``: upstream code computing the network of a ``backbone`` model on
        input ``x`` ``[B, *S, T_in, C]``, timed side by side by ``opzoo benchmark``; it raises
        :class:`opzoo.UpstreamUnavailable` to say why it cannot."""
        self.register("upstream", name, UpstreamEntry(backbone, build))
        return build

    def register_reader(self, cls: type) -> type:
        """``cls``, an :class:`opzoo.data.TrajectorySource` subclass, reads files of its ``layout`` (the name
        ``--layout`` takes); ``expects`` says in one line what such a file holds. Detection tries the readers in the
        order they were registered (the core's first): a file whose name ends in one of ``cls.suffixes`` is this
        reader's; otherwise an HDF5 file is the first whose ``cls.detect(h5_file)`` is true (``cls.doubt`` may refuse
        to guess)."""
        layout = getattr(cls, "layout", None)
        if not isinstance(cls, type) or not isinstance(layout, str) or not layout or ":" in layout:
            raise TypeError(f"register_reader: expected a TrajectorySource subclass with a layout name (no ':'), got "
                            f"{cls!r}")
        for attr in ("detect", "doubt"):
            if not callable(getattr(cls, attr, None)):
                raise TypeError(f"register_reader({cls.__name__}): it has no {attr}() (subclass "
                                f"opzoo.data.TrajectorySource)")
        suffixes = getattr(cls, "suffixes", ())
        if not isinstance(suffixes, tuple) or not all(isinstance(x, str) and x.startswith(".") for x in suffixes):
            raise TypeError(f"register_reader({cls.__name__}): suffixes must be a tuple of '.ext' strings")
        for suffix in suffixes:  # a file's name must not name two readers, nor take HDF5 files from detection
            if suffix.lower() in HDF5_SUFFIXES:
                raise RegistryConflictError(f"reader {layout!r} of {self._owner} claims {suffix} files, which are "
                                            f"HDF5 and told apart by their content: leave suffixes empty and give it "
                                            f"a detect(h5_file)", ("opzoo", self._owner))
            for other in self._components["reader"].values():
                if suffix.lower() in (x.lower() for x in getattr(other.obj, "suffixes", ())):
                    self._conflict(f"reader {layout!r}: the suffix {suffix} (reader {other.name!r})", other.owner)
        return self.register("reader", layout, cls)

    def readers(self) -> dict[str, type]:
        """Layout name -> reader class, in detection order (registration order: the core's first)."""
        return {name: entry.obj for name, entry in self._components["reader"].items()}

    def register_metric(self, metric: Metric) -> Metric:
        """``metric`` (:class:`opzoo.Metric`) is scored by ``eval``, ``validate``, ``finetune`` and every evaluation
        beside PDEBench's set, with its bootstrap interval and paired difference from persistence."""
        if not isinstance(metric, Metric):
            raise TypeError(f"register_metric: expected opzoo.Metric, got {type(metric).__name__}")
        return self.register("metric", metric.name, metric)

    def metrics(self) -> list[Metric]:
        """Every registered metric, in registration order (PDEBench's set first)."""
        return [entry.obj for entry in self._components["metric"].values()]

    def upstreams_for(self, backbone: str) -> list[tuple[str, Callable]]:
        """``(name, build)`` of the upstream implementations registered for ``backbone``."""
        return [(n, e.obj.build) for n, e in sorted(self._components["upstream"].items()) if e.obj.backbone == backbone]

    def get(self, kind: str, name: str) -> Any:
        table = self._components[kind]
        if name not in table:
            raise UnknownNameError(kind.replace("_", " "), name, table)
        return table[name].obj

    def owner(self, kind: str, name: str) -> str:
        self.get(kind, name)
        return self._components[kind][name].owner

    def names(self, kind: str) -> list[str]:
        return sorted(self._components[kind])

    def backbone_name(self, cls: type) -> str:
        """The registered name of a backbone class (for ``config.json``'s ``architecture``)."""
        return self.backbone_entry(cls).name

    def backbone_entry(self, cls: type):
        """The registration of a backbone class (its ``name`` and the ``owner`` distribution)."""
        for entry in self._components["backbone"].values():
            if entry.obj is cls:
                return entry
        raise UnknownNameError("backbone class", cls.__qualname__, self._components["backbone"])

    # ---- presets ----------------------------------------------------------------------------
    def register_model(
        self,
        name: str,
        *,
        backbone: str,
        args: Mapping[str, Any] | None = None,
        pretrained: PretrainedSource | None = None,
        card: Traversable | Path | str | None = None,
        pretrained_cfg: Mapping[str, Any] | None = None,
        aliases: tuple[str, ...] | list[str] = (),
        provenance: tuple[Fact, ...] | list[Fact] = (),
        results: tuple[Result, ...] | list[Result] = (),
        family: str | None = None,
        card_fields: Mapping[str, str] | None = None,
        contract: DataContract | None = None,
    ) -> Preset:
        """Register preset ``name``: ``backbone`` built with ``args``; ``card`` is its model card;
        ``provenance`` the :class:`opzoo.Fact` rows saying where each fact about it comes from; ``results`` the
        :class:`opzoo.Result` numbers its card's ``model-index`` carries (measured by opzoo, or reported upstream);
        ``contract`` what it takes from a user's data (:class:`opzoo.DataContract`; default: its backbone's)."""
        if contract is not None and not isinstance(contract, DataContract):
            raise TypeError(f"model {name!r}: contract must be opzoo.DataContract, got {type(contract).__name__}")
        for result in results:
            if not isinstance(result, Result):
                raise TypeError(f"model {name!r}: results must be opzoo.Result, got {type(result).__name__}")
        for fact in provenance:
            if not isinstance(fact, Fact):
                raise TypeError(f"model {name!r}: provenance rows must be opzoo.Fact, got {type(fact).__name__}")
        for key in (name, *aliases):
            if key in self._presets or key in self._aliases:
                holder = self._presets.get(key) or self._presets[self._aliases[key]]
                self._conflict(f"model {key!r}", holder.owner)
        preset = Preset(
            name=name,
            backbone=backbone,
            args=dict(args or {}),
            pretrained=pretrained,
            card=Path(card) if isinstance(card, str) else card,
            pretrained_cfg=dict(pretrained_cfg or {}),
            aliases=tuple(aliases),
            owner=self._owner,
            provenance=tuple(provenance),
            results=tuple(results),
            family=family,
            card_fields=dict(card_fields or {}),
            contract=contract if contract is not None else self._contracts.get(backbone),
        )
        self._presets[name] = preset
        for alias in aliases:
            self._aliases[alias] = name
        return preset

    def register_family(self, family: CheckpointFamily) -> list[Preset]:
        """Register one preset per row of ``family`` (:class:`opzoo.CheckpointFamily`), each derived from the row by
        the family's rules; all or none: a row that fails leaves no preset of the family behind."""
        if not isinstance(family, CheckpointFamily):
            raise TypeError(f"register_family: expected opzoo.CheckpointFamily, got {type(family).__name__}")
        if family.name in self._families:
            self._conflict(f"checkpoint family {family.name!r}", self._families[family.name][1])
        registered: list[Preset] = []
        try:
            for v in family.variants:
                repo_id = v.repo_id or family.repo_id
                page = None if repo_id is not None else family.download_page
                shipped = family.rule("directory", v) if repo_id is None and page is None else None
                pretrained = None if repo_id is None and page is None and shipped is None else PretrainedSource(
                    repo_id, v.weights, revision=None if shipped is not None else v.revision or family.revision,
                    converter=family.converter, download_page=page, directory=shipped,
                    converter_options={**family.converter_options, **v.converter_options},
                    extra_files=(*family.rule("extra_files", v), *v.extra_files),
                    checks=tuple(family.rule("checks", v)), fallback_filenames=tuple(family.fallback_filenames))
                registered.append(self.register_model(
                    v.name, backbone=family.backbone, args=family.model_args(v), pretrained=pretrained,
                    card=family.card, pretrained_cfg=family.rule("pretrained_cfg", v), aliases=v.aliases,
                    provenance=tuple(family.rule("provenance", v)), results=tuple(family.rule("results", v)),
                    family=family.name, card_fields=family.card_fields_of(v), contract=family.contract))
        except BaseException:
            for preset in registered:
                self._presets.pop(preset.name, None)
                for alias in preset.aliases:
                    self._aliases.pop(alias, None)
            raise
        self._families[family.name] = (family, self._owner)
        if family.contract is not None and family.backbone not in self._contracts:
            self._set_contract(family.backbone, family.contract)
        return registered

    def family(self, name: str) -> CheckpointFamily:
        """The registered :class:`opzoo.CheckpointFamily` ``name``."""
        if name not in self._families:
            raise UnknownNameError("checkpoint family", name, self._families)
        return self._families[name][0]

    def families(self) -> list[str]:
        return sorted(self._families)

    def matching_preset(self, backbone: str, args: Mapping[str, Any]) -> Preset | None:
        """The preset of ``backbone`` whose config equals the one ``args`` build (a converted checkpoint's args), if
        any: the first by name."""
        config_class = self.get("backbone", backbone).config_class
        want = config_class.from_dict(dict(args), source="converted checkpoint")
        for name in sorted(self._presets):
            preset = self._presets[name]
            if preset.backbone == backbone and config_class.from_dict(dict(preset.args), source=name) == want:
                return preset
        return None

    def preset(self, name: str) -> Preset:
        name = self._aliases.get(name, name)
        if name not in self._presets:
            raise UnknownNameError("model", name, [*self._presets, *self._aliases])
        return self._presets[name]

    def has_preset(self, name: str) -> bool:
        return name in self._presets or name in self._aliases

    def list_models(self, pattern: str = "*", include_aliases: bool = False) -> list[str]:
        names = list(self._presets)
        if include_aliases:
            names += list(self._aliases)
        matched = {n for n in names if fnmatch.fnmatchcase(n, pattern)}
        # an alias matching the pattern brings in its preset
        matched |= {self._aliases[a] for a in self._aliases if fnmatch.fnmatchcase(a, pattern)}
        return sorted(matched)

    def forget(self, owner: str) -> None:
        """Remove everything ``owner`` registered (a plugin that failed half-way leaves nothing)."""
        for table in self._components.values():
            for name in [n for n, e in table.items() if e.owner == owner]:
                del table[name]
        for name in [n for n, p in self._presets.items() if p.owner == owner]:
            del self._presets[name]
        self._families = {n: (f, o) for n, (f, o) in self._families.items() if o != owner}
        self._aliases = {a: n for a, n in self._aliases.items() if n in self._presets}
        self._contracts = {b: c for b, c in self._contracts.items() if b in self._components["backbone"]}

    def _conflict(self, what: str, first_owner: str) -> None:
        raise RegistryConflictError(
            f"{what} is registered by both {first_owner!r} and {self._owner!r}; "
            f"uninstall one of them or restrict loading with OPZOO_PLUGINS", (first_owner, self._owner)
        )


# ---- the process-wide registry ----------------------------------------------------------------
_source: Callable[[], Registry] | None = None


def set_registry_source(source: Callable[[], Registry]) -> None:
    """Make ``source()`` the process-wide registry (``opzoo/__init__`` installs the plugin host's registry, loaded on first use)."""
    global _source
    _source = source


_live: Registry | None = None


def set_live_registry(registry: Registry | None) -> None:
    """Record the registry of the process's running plugin host (None when it is reset): the plugin host calls it."""
    global _live
    _live = registry


def live_registry() -> Registry | None:
    """The process-wide registry if its plugin host is already running (a notebook, a test, a command that loaded
    the plugins), else None; nothing is loaded by asking."""
    return _live


def get_registry() -> Registry:
    """The process-wide registry, with the core's and every loaded plugin's registrations."""
    if _source is None:
        raise RuntimeError("opzoo's plugin host is not set up; import opzoo (not a submodule alone) first")
    return _source()
