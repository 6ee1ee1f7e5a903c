"""The family kit: what every plugin that brings a published checkpoint family needs and would otherwise write again
(issue 57; docs/adding-a-family.md walks through MORPH, which is built on it).

- :class:`Renames`: a converter's table of upstream tensor names -> opzoo's, and :func:`strip_prefix` for the
  ``module.`` of DDP;
- :func:`tensors_under`: the state dict inside a checkpoint upstream saved as a dict, or why not;
- :func:`tensor_shape`: a tensor's shape read from a state dict, or the error that names the file and the tensor;
- :func:`import_from_checkout`: upstream's code from a checkout named by an environment variable, for the parity tests
  and ``opzoo benchmark``;
- :func:`check_field_statistics`: a config's per-channel ``field_mean`` / ``field_std``, checked one way;
- :func:`file_args_agree`: the load check "the file builds the preset's network", with the advice that loads it;
- :class:`FamilyPlugin`: the registration as a declaration, so that a family's entry point is its table.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import types
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..contracts.hookspecs import hookimpl
from ..errors import CheckpointError, ConfigError, UpstreamUnavailable
from ..tensor_files import read_safetensors  # a converter reads upstream's safetensors files with it
from .family import CheckpointFamily
from .provenance import CheckFailed, PretrainedArtifacts, PretrainedCheck


class Renames:
    """Upstream tensor names -> opzoo's, as an ordered table of ``(pattern, template)``: the first pattern that matches
    the whole name wins; ``template`` is a ``re`` expansion (``r"net.blocks.\\1.fc1.\\2"``), a function of the match
    (returning a name, or None for a tensor opzoo leaves out on purpose), or None (left out)."""

    def __init__(self, rules: Iterable[tuple[str, str | Callable[[re.Match], str | None] | None]]):
        self.rules = [(re.compile(pattern), template) for pattern, template in rules]
        self._tables: tuple | None = None

    @classmethod
    def tables(cls, names: Mapping[str, str], blocks: tuple[str, str, Mapping[str, str]] | None = None,
               left_out: Iterable[str] = ()) -> "Renames":
        """The common case, from name tables: ``names`` (upstream -> opzoo, whole names), ``blocks`` (``(upstream
        prefix, opzoo prefix, {upstream suffix: opzoo suffix})``: ``f"{prefix}.{i}.{suffix}"`` for every block
        ``i``) and names ``left_out`` on purpose. Such a table has an :meth:`inverse`."""
        rules: list = [(re.escape(k), v) for k, v in names.items()]
        if blocks is not None:
            theirs, ours, table = blocks
            part = "|".join(map(re.escape, table))
            rules.append((rf"{re.escape(theirs)}\.(\d+)\.({part})", lambda m: f"{ours}.{m[1]}.{table[m[2]]}"))
        rules += [(re.escape(k), None) for k in left_out]
        renames = cls(rules)
        renames._tables = (dict(names), blocks)
        return renames

    def inverse(self) -> "Renames":
        """opzoo's names -> upstream's (for running upstream's network on opzoo's weights, or writing its file); for
        a table built by :meth:`tables`."""
        if self._tables is None:
            raise TypeError("only Renames.tables(...) can be inverted; write the inverse rules")
        names, blocks = self._tables
        inverse_blocks = None if blocks is None else (blocks[1], blocks[0], {v: k for k, v in blocks[2].items()})
        return Renames.tables({v: k for k, v in names.items()}, inverse_blocks)

    def name(self, name: str) -> str | None:
        """The opzoo name of ``name``; None when a rule leaves it out; KeyError when no rule knows it."""
        for pattern, template in self.rules:
            m = pattern.fullmatch(name)
            if m is not None:
                if template is None:
                    return None
                return template(m) if callable(template) else m.expand(template)
        raise KeyError(name)

    def get(self, name: str) -> str | None:
        """The opzoo name of ``name``, or None when no rule knows it or a rule leaves it out."""
        try:
            return self.name(name)
        except KeyError:
            return None

    def apply(self, state_dict: Mapping[str, Any], where: str, family: str) -> dict[str, Any]:
        """``state_dict`` under opzoo's names; a tensor no rule knows is refused, naming the first few."""
        out, unknown = {}, []
        for k, v in state_dict.items():
            try:
                name = self.name(k)
            except KeyError:
                unknown.append(k)
                continue
            if name is not None:
                out[name] = v
        if unknown:
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            raise CheckpointError(f"{where}: tensors that are not {family}'s: {', '.join(unknown[:5])}{more}")
        return out


def tensors_under(payload: Any, key: str, where: str, family: str, saved_by: str) -> Mapping[str, Any]:
    """``payload[key]``, the state dict of a checkpoint upstream saved as a dict (``torch.save({key: state, ...})``),
    or a one-line refusal: not such a dict (naming the keys it has), or not a non-empty dict of tensors there.
    ``saved_by`` says who writes such files (``"upstream's Trainer"``)."""
    import torch

    if not isinstance(payload, Mapping) or key not in payload:
        got = (f"a dict with keys {', '.join(map(str, list(payload)[:6]))}" if isinstance(payload, Mapping)
               else type(payload).__name__)
        raise CheckpointError(f"{where}: not a {family} checkpoint: expected a dict with {key!r} (as {saved_by} "
                              f"saves), got {got}")
    state = payload[key]
    if not isinstance(state, Mapping) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{where}: {key!r} is not a non-empty dict of tensors")
    return state


def strip_prefix(state_dict: Mapping[str, Any], prefix: str, where: str) -> dict[str, Any]:
    """``state_dict`` without ``prefix`` (``"module."``, which DDP and DataParallel add) when every name has it; a file
    where only some names have it is refused."""
    prefixed = [str(k).startswith(prefix) for k in state_dict]
    if any(prefixed) and not all(prefixed):
        raise CheckpointError(f"{where}: some tensor names have the {prefix!r} prefix and some do not")
    return {(k[len(prefix):] if all(prefixed) else k): v for k, v in state_dict.items()}


def tensor_shape(state_dict: Mapping[str, Any], key: str, where: str, family: str,
                 ndim: int | None = None) -> tuple[int, ...]:
    """The shape of tensor ``key`` of the file ``where``; a missing tensor, or one of another rank, is refused."""
    if key not in state_dict:
        raise CheckpointError(f"{where}: tensor {key!r} is missing: not a {family} network")
    shape = tuple(state_dict[key].shape)
    if ndim is not None and len(shape) != ndim:
        raise CheckpointError(f"{where}: {key!r} has shape {list(shape)}, expected {ndim} dims")
    return shape


def check_field_statistics(config: Any, source: str, zero_std: bool = False) -> None:
    """A config's ``field_mean`` and ``field_std`` (the statistics a backbone standardizes each input channel by):
    both or neither, one value per input channel, every std above 0 (or at least 0 with ``zero_std``, for a network
    that adds its own epsilon); ConfigError naming the field otherwise."""
    mean, std = config.field_mean, config.field_std
    if (mean is None) != (std is None):
        raise ConfigError(f"{source}: give field_mean and field_std together (or neither)")
    for key, values in (("field_mean", mean), ("field_std", std)):
        if values is not None and len(values) != config.in_channels:
            raise ConfigError(f"{source}.{key}: one value per channel ({config.in_channels}), got {len(values)}")
    if std is not None and (min(std) < 0 if zero_std else min(std) <= 0):
        raise ConfigError(f"{source}.field_std: every value must be {'>=' if zero_std else '>'} 0, got {list(std)}")


def import_from_checkout(env: str, module: str, *, family: str, url: str, marker: str, repo: str | os.PathLike |
                         None = None, at: str = "", root: str = "", package_init: bool = True) -> Any:
    """The module ``module`` of upstream's code, from the checkout ``repo`` (default: the environment variable
    ``env``), or :class:`opzoo.UpstreamUnavailable` saying what to set. ``marker``, a file of the checkout, tells a
    checkout of the right layout; the checkout's root (or its subdirectory ``root``, where the package lies) is on
    ``sys.path`` only while importing. ``package_init=False``: the top package's ``__init__`` is not run (one that
    imports upstream's whole training stack: its data pipeline, hydra, wandb), only the modules ``module`` needs."""
    repo = repo if repo is not None else os.environ.get(env)
    where = f" at {at}" if at else ""
    if not repo:
        raise UpstreamUnavailable(f"{family}'s code is not on the package index: set {env} to a checkout of {url}"
                                  f"{where}")
    if not (Path(repo) / marker).is_file():
        raise UpstreamUnavailable(f"{env}={repo}: {marker} does not exist (a checkout of {url}{where} is needed)")
    root = Path(repo) / root
    top = module.partition(".")[0]
    if not package_init and top not in sys.modules:
        package = types.ModuleType(top)
        package.__path__ = [str(root / top)]
        sys.modules[top] = package
    loaded = sys.modules.get(top)
    if loaded is not None and all(Path(p).resolve() != (root / top).resolve() for p in getattr(loaded, "__path__", [])):
        raise UpstreamUnavailable(f"another package named {top!r} is already imported ({loaded}); run in a fresh "
                                  "process")
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UpstreamUnavailable(f"{env}={repo}: importing {family}'s network failed ({e})") from None
    finally:
        sys.path.remove(str(root))


def file_args_agree(family: str, read_args: Callable[[PretrainedArtifacts], dict[str, Any]],
                    shown: Iterable[str] = (), name: str = "the file's network is the preset's") -> PretrainedCheck:
    """A load check: the config the file builds (``read_args(artifacts)``: from its tensors, and from what it records)
    equals the model's, or the load is refused naming each difference, and the preset that is the file's network if
    one is (``opzoo.load(THAT, checkpoint_path=FILE)``), else the overrides that load it. ``shown``: the arguments its
    line of success names."""
    shown = tuple(shown)

    def run(artifacts: PretrainedArtifacts) -> str:
        c = artifacts.model_config
        try:
            args = read_args(artifacts)
        except CheckpointError as e:
            raise CheckFailed(" ".join(str(e).split())) from None
        mismatched = {k: (v, getattr(c, k)) for k, v in args.items() if _plain(getattr(c, k)) != _plain(v)}
        if mismatched:
            detail = ", ".join(f"{k}: file {_plain(a)!r}, model {_plain(b)!r}" for k, (a, b) in mismatched.items())
            other = _preset_of(artifacts.preset, args)
            advice = (f"it is {other}'s network: load it as {other} (opzoo.load({other!r}, checkpoint_path=FILE))"
                      if other else "load it with opzoo.load(..., " + ", ".join(
                          f"{k}={_plain(a)!r}" for k, (a, _) in mismatched.items()) + ") or, on the command line, "
                      "--model-args " + " ".join(_cli_pair(k, a) for k, (a, _) in mismatched.items()))
            raise CheckFailed(f"the file holds another {family} network ({detail}); {advice} if that is what you want")
        return "the file builds this network (" + ", ".join(f"{k}={_plain(args[k])}" for k in shown if k in args) + ")"

    return PretrainedCheck(name, run)


def _cli_pair(key: str, value: Any) -> str:
    """``key=value`` as ``--model-args`` reads it back (a string bare, anything else JSON), quoted for a shell."""
    import json
    import shlex

    return shlex.quote(f"{key}={value if isinstance(value, str) else json.dumps(_plain(value), separators=(',', ':'))}")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _preset_of(preset: str, args: Mapping[str, Any]) -> str | None:
    """Another preset of ``preset``'s family whose arguments are ``args``, if one is."""
    from .registry import get_registry

    registry = get_registry()
    family = registry.preset(preset).family
    if not family:
        return None
    for variant in registry.family(family).variants:
        other = registry.preset(variant.name)
        if variant.name != preset and all(_plain(other.args.get(k, v)) == _plain(v) for k, v in args.items()):
            return variant.name
    return None


class FamilyPlugin:
    """A plugin as a declaration: its backbones, converters, upstreams and checkpoint families, registered by opzoo's
    hooks. A family plugin's entry point names this object (``morph = "opzoo_morph.family:PLUGIN"``).

    ``backbones``: name -> ``opzoo.Backbone`` class (or ``(class, DataContract)``); ``converters``: name -> converter;
    ``upstreams``: name -> ``(backbone, build)`` (``opzoo benchmark``'s upstream beside opzoo's); ``models``: presets
    outside the families, each the keywords of ``registry.register_model`` (``opzoo.micro.micro_preset`` gives a
    family's ``*-micro`` preset so)."""

    def __init__(self, *families: CheckpointFamily, backbones: Mapping[str, Any] = (), converters: Mapping[str, Any]
                 = (), upstreams: Mapping[str, tuple[str, Callable]] = (), models: Sequence[Mapping[str, Any]] = ()):
        self.families, self.backbones, self.models = families, dict(backbones), [dict(m) for m in models]
        self.converters, self.upstreams = dict(converters), dict(upstreams)

    @hookimpl
    def opzoo_register_components(self, registry) -> None:
        for name, backbone in self.backbones.items():
            cls, contract = backbone if isinstance(backbone, tuple) else (backbone, None)
            registry.register_backbone(name, cls, contract=contract)
        for name, converter in self.converters.items():
            registry.register_converter(name, converter)
        for name, (backbone, build) in self.upstreams.items():
            registry.register_upstream(name, backbone=backbone, build=build)

    @hookimpl
    def opzoo_register_models(self, registry) -> None:
        for family in self.families:
            registry.register_family(family)
        for model in self.models:
            registry.register_model(**model)

    def __repr__(self) -> str:
        return f"FamilyPlugin({', '.join(f.name for f in self.families)})"


__all__ = ["read_safetensors", "FamilyPlugin", "Renames", "check_field_statistics", "file_args_agree", "import_from_checkout", "strip_prefix", "tensor_shape", "tensors_under"]
