"""The parts of a POT backbone: the components its config names (block, mixer, feed-forward, residual),
built from the registry with their arguments checked.

A :class:`~opzoo.PotConfig` is data; :class:`PotParts` is the small builder each block receives. A component
declares the arguments it takes (its ``*_args``) either as an ``args_class`` dataclass (typed, with defaults and
an optional ``check(where)``), as a backbone declares its ``config_class``, or by its constructor's signature.
Either way an unknown key is a ConfigError naming it and the known ones, raised where the config is built.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any, Mapping

from torch import nn

from ..config import build_dataclass, coerce_value
from ..contracts.interfaces import Block, FeedForward, Mixer, Residual
from ..errors import ConfigError
from ..layers.norm_act import ChannelsLastGroupNorm, make_activation
from ..registry.registry import get_registry

# what the builder itself passes to each kind of component (not part of its *_args): one positional
# argument (the parts for a block, the width for the others) and these keywords
SUPPLIED = {"block": ("index",), "mixer": (), "feedforward": ("hidden_dim", "act"), "residual": ("index",)}


def component_args(kind: str, name: str, cls: Any, args: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``args`` (a config's ``{kind}_args``) checked against what component ``cls`` (registered as ``name``)
    takes: its ``args_class`` fields (typed and checked), else its constructor's keyword parameters (typed
    where annotated). Returns the arguments to pass. Raises ConfigError naming ``where`` and the key."""
    if not isinstance(args, Mapping):
        raise ConfigError(f"{where}: expected an object of the {kind} {name!r}'s arguments, got {type(args).__name__}")
    declared = getattr(cls, "args_class", None)
    if declared is not None:
        built = build_dataclass(declared, args, where)
        if hasattr(built, "check"):
            built.check(where)
        return {f.name: getattr(built, f.name) for f in dataclasses.fields(built) if f.name in args}
    params = _keyword_parameters(cls, SUPPLIED.get(kind, ()))
    if params is None:  # the constructor takes **kwargs: it checks its own
        return dict(args)
    unknown = sorted(set(args) - set(params))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} for the {kind} {name!r} "
                          f"({cls.__name__}); known keys: {', '.join(params) or 'none'}")
    missing = [k for k, p in params.items() if p.default is inspect.Parameter.empty and k not in args]
    if missing:
        raise ConfigError(f"{where}: the {kind} {name!r} ({cls.__name__}) needs {', '.join(map(repr, missing))}")
    hints = _hints(cls)
    return {k: coerce_value(v, hints[k], f"{where}.{k}") if k in hints else v for k, v in args.items()}


def _keyword_parameters(cls: Any, supplied: tuple[str, ...]) -> dict[str, inspect.Parameter] | None:
    init = cls.__init__ if isinstance(cls, type) else cls
    params = list(inspect.signature(init).parameters.values())
    params = params[2:] if isinstance(cls, type) else params[1:]  # self, the positional argument
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name: p for p in params if p.name not in supplied
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}


def _hints(cls: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls.__init__ if isinstance(cls, type) else cls)
    except Exception:  # an annotation that does not resolve at run time: the keys are still checked
        return {}


def check_component_args(config: Any, where: str = "model_args") -> None:
    """Every component a POT config names exists and takes its ``*_args`` (ConfigError naming the field)."""
    registry = get_registry()
    for kind in ("block", "mixer", "feedforward", "residual"):
        name = getattr(config, kind)
        component_args(kind, name, registry.get(kind, name), getattr(config, f"{kind}_args"), f"{where}.{kind}_args")


class PotParts:
    """Builds the components ``config`` (a :class:`~opzoo.PotConfig`) names; each block gets one as its first
    argument. The config's fields read through it (``parts.width``); ``parts.config`` is the config itself."""

    def __init__(self, config: Any):
        self.config = config

    def __getattr__(self, name: str) -> Any:
        if name == "config":  # not set yet (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.config, name)

    def _build(self, kind: str, *args: Any, **supplied: Any):
        name = getattr(self.config, kind)
        cls = get_registry().get(kind, name)
        extra = component_args(kind, name, cls, getattr(self.config, f"{kind}_args"), f"{kind}_args")
        return cls(*args, **supplied, **extra)

    def make_block(self, index: int) -> Block:
        """Block ``index``: ``registry block(parts, index=index, **block_args)``."""
        return self._build("block", self, index=index)

    def make_mixer(self) -> Mixer:
        """``registry mixer(width, **mixer_args)``: ``[B, *S, D] -> [B, *S, D]``."""
        return self._build("mixer", self.config.width)

    def make_feedforward(self) -> FeedForward:
        """``registry feedforward(width, hidden_dim=int(width * mlp_ratio), act=act, **feedforward_args)``."""
        c = self.config
        return self._build("feedforward", c.width, hidden_dim=int(c.width * c.mlp_ratio), act=c.act)

    def make_residual(self, index: int) -> Residual:
        """Sub-layer ``index``'s residual: ``registry residual(width, index=index, **residual_args)``."""
        return self._build("residual", self.config.width, index=index)

    def make_norm(self) -> nn.Module:
        """The blocks' GroupNorm(norm_groups, width) over channels-last tokens."""
        return ChannelsLastGroupNorm(self.config.norm_groups, self.config.width)

    def make_activation(self) -> nn.Module:
        return make_activation(self.config.act)


__all__ = ["PotParts", "component_args", "check_component_args"]
