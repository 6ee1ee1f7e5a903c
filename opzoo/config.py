"""ModelConfig: a typed dataclass that round-trips through ``config.json`` (docs/architecture.md, Where a pretrained load goes).

``config.json`` holds ``architecture`` (the registered backbone), ``opzoo_version``,
``model_args`` (the config's fields) and ``pretrained_cfg`` (facts about the weights).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Mapping

from ._version import __version__
from .errors import ConfigError

CONFIG_NAME = "config.json"


# model-config fields that count or size something: 0 or less cannot build a model
POSITIVE_FIELDS = frozenset({
    "in_channels", "out_channels", "in_timesteps", "out_timesteps", "width", "depth", "patch_size", "img_size",
    "resolution", "modes", "modes1", "modes2", "modes3", "hidden_channels", "lifting_channels",
    "projection_channels", "init_features", "stages", "blocks_per_stage", "blocks_at_neck", "heads",
    "out_layer_dim", "spatial_dims", "experts", "top_k", "image_size", "embed_dim", "window_size",
})
POSITIVE_FLOATS = frozenset({"mlp_ratio"})  # ratios: > 0


@dataclasses.dataclass
class ModelConfig:
    """Fields every backbone shares; each backbone subclasses this with its own."""

    in_channels: int = 4
    out_channels: int = 4
    in_timesteps: int = 10
    out_timesteps: int = 1
    # fields holding one entry per input channel (labels): reset to None when a model is adapted to another count
    per_channel_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_dict(cls, args: Mapping[str, Any], source: str = "model_args") -> "ModelConfig":
        """Build from a mapping, checking every key and type; ``source`` names where it came from. Counts and
        sizes (an int field named in ``POSITIVE_FIELDS``, or a list of them) must be >= 1."""
        if not isinstance(args, Mapping):
            raise ConfigError(f"{source}: expected an object of {cls.__name__} fields, got {type(args).__name__}")
        config = build_dataclass(cls, args, source)
        for f in dataclasses.fields(config):
            value = getattr(config, f.name)
            _check_size_field(f.name, value, f"{source}.{f.name}")
            if f.name.endswith("_args") and isinstance(value, Mapping):  # a component's arguments
                for k, v in value.items():
                    _check_size_field(k, v, f"{source}.{f.name}.{k}")
        config.validate(source)
        return config

    def validate(self, source: str = "model_args") -> None:
        """Checks beyond fields and types, run by :meth:`from_dict` (e.g. that named components exist and take
        their ``*_args``); ConfigError naming the field. A backbone's config overrides it."""

    def buffer_bytes(self) -> int:
        """Bytes of the tensors the model computes when it is built, beside its parameters (attention masks, position
        tables), where they grow with the config's sizes: the size check (:mod:`opzoo.model_io.size_check`) refuses
        a config whose buffers would not fit before anything is built. Default 0; a backbone whose buffers grow with
        a grid overrides it."""
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init}

    def replace(self, source: str = "override", **changes: Any) -> "ModelConfig":
        """A copy with ``changes`` applied, type-checked like ``from_dict``."""
        return type(self).from_dict({**self.to_dict(), **changes}, source=source)


MAX_INT = 2**31 - 1


def _check_size_field(name: str, value: Any, where: str) -> None:
    """Counts and sizes (:data:`POSITIVE_FIELDS`, ``n_*``, ``num_*``) must be >= 1; ratios > 0; every number
    finite."""
    values = value if isinstance(value, (list, tuple)) else [value]
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if any(isinstance(v, float) and not math.isfinite(v) for v in numbers):
        raise ConfigError(f"{where}: must be a finite number, got {value!r}")
    if (name in POSITIVE_FIELDS or name.startswith(("n_", "num_"))) and any(v < 1 for v in numbers):
        raise ConfigError(f"{where}: must be >= 1, got {value!r}")
    if any(isinstance(v, int) and abs(v) > MAX_INT for v in numbers):  # no tensor dimension or count is that large
        raise ConfigError(f"{where}: {value!r} is beyond any size a model can have (at most {MAX_INT})")
    if name in POSITIVE_FLOATS and any(v <= 0 for v in numbers):
        raise ConfigError(f"{where}: must be > 0, got {value!r}")


def build_dataclass(cls: type, args: Mapping[str, Any], where: str) -> Any:
    """``cls(**args)`` for a dataclass, checking every key and type (nested dataclasses too)."""
    if not isinstance(args, Mapping):
        raise ConfigError(f"{where}: expected an object of {cls.__name__} fields, got {type(args).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(args) - fields)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))} for {cls.__name__}; "
            f"known fields: {', '.join(sorted(fields))}"
        )
    required = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in args
                and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if required:
        raise ConfigError(f"{where}: missing required field(s) {', '.join(map(repr, required))}")
    return cls(**{k: coerce_value(v, hints[k], f"{where}.{k}" if where else k) for k, v in args.items()})


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _type_name(tp: Any) -> str:
    """A type as a message says it: ``int or null`` for ``Optional[int]`` (not "Optional")."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is not None:
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce_value(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against annotation ``tp`` (``where`` names it in errors).

    JSON lists become tuples where a tuple is declared, ints become floats where a float is, and
    mappings become dataclasses where a dataclass is.
    """
    origin, targs = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return build_dataclass(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        for option in targs:
            try:
                return coerce_value(value, option, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")
    if tp is type(None):
        if value is None:
            return None
    elif origin is typing.Literal:
        if value in targs:
            return value
        raise ConfigError(f"{where}: expected one of {list(targs)}, got {value!r}")
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                out = float(value)
            except OverflowError:
                raise ConfigError(f"{where}: {value} is too large for a float") from None
            if not math.isfinite(out):
                raise ConfigError(f"{where}: must be a finite number, got {value!r}")
            return out
    elif tp is str:
        if isinstance(value, str):
            return value
    elif origin in (tuple, list) or tp in (tuple, list):
        if isinstance(value, (list, tuple)):
            if origin is tuple and targs and targs[-1] is not Ellipsis:
                if len(targs) != len(value):
                    raise ConfigError(f"{where}: expected {len(targs)} items, got {len(value)}")
                items = [coerce_value(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(value, targs))]
            else:
                item_tp = targs[0] if targs else Any
                items = [coerce_value(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
            return tuple(items) if (origin or tp) is tuple else items
    elif origin is dict or tp is dict:
        if isinstance(value, Mapping):
            vt = targs[1] if targs else Any
            return {str(k): coerce_value(v, vt, f"{where}.{k}") for k, v in value.items()}
    else:
        raise TypeError(f"{where}: unsupported config annotation {tp!r}")
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")


def _major(version: str) -> int:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        raise ConfigError(f"opzoo_version {version!r} is not a version number") from None


def config_document(architecture: str, config: ModelConfig, pretrained_cfg: Mapping[str, Any] | None) -> dict:
    return {
        "architecture": architecture,
        "opzoo_version": __version__,
        "model_args": config.to_dict(),
        "pretrained_cfg": dict(pretrained_cfg or {}),
    }


def write_config(path: str | os.PathLike, document: Mapping[str, Any]) -> None:
    Path(path).write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")


def read_config(path: str | os.PathLike, text: str | bytes | None = None) -> dict[str, Any]:
    """Parse and check the envelope of a ``config.json`` (not yet the model_args types); ``text``: its
    contents, already read (e.g. through an open file descriptor)."""
    from .files import JSON_LIMIT, read_json

    path = Path(path)
    if text is None:
        doc = read_json(path, "an opzoo config.json")
    else:
        if len(text) > JSON_LIMIT:
            raise ConfigError(f"{path}: {len(text) / 2**20:.0f} MiB, larger than a config.json can be: not read")
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from None
        except RecursionError:
            raise ConfigError(f"{path}: JSON nested too deeply to be a config") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    required = {"architecture": str, "opzoo_version": str, "model_args": dict}
    for key, tp in required.items():
        if key not in doc:
            raise ConfigError(f"{path}: missing key {key!r} (an opzoo config.json has {', '.join(required)})")
        if not isinstance(doc[key], tp):
            raise ConfigError(f"{path}: key {key!r} must be {tp.__name__}, got {type(doc[key]).__name__}")
    unknown = sorted(set(doc) - {*required, "pretrained_cfg", "checksums"})
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))}")
    if _major(doc["opzoo_version"]) > _major(__version__):
        raise ConfigError(
            f"{path}: written by opzoo {doc['opzoo_version']}, a newer major version than this opzoo "
            f"{__version__}; upgrade with `pip install -U opzoo`"
        )
    doc.setdefault("pretrained_cfg", {})
    if not isinstance(doc["pretrained_cfg"], dict):
        raise ConfigError(f"{path}: key 'pretrained_cfg' must be an object")
    sums = doc.get("checksums", {})  # {file name: sha256 hex}, recorded by save_pretrained
    if not isinstance(sums, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in sums.items()):
        raise ConfigError(f"{path}: key 'checksums' must map file names to sha256 hex digests")
    return doc
