"""The one place a model is built (docs/architecture.md): a registered backbone class and a checked config.

Every way to a model ends in :func:`build_model`: by backbone name, by preset (:func:`build_preset`), from a saved
repo (:mod:`opzoo.model_io.loading`) or from a converted foreign checkpoint (:mod:`opzoo.model_io.pretrained`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..errors import ConfigError, HubError
from ..registry.registry import Preset, get_registry
from .pretrained_cfg import schema_of, validate_pretrained_cfg
from .reference import ModelReference

if TYPE_CHECKING:
    from torch import nn



def build_model(backbone: str, args: Mapping[str, Any], source: str, overrides: Mapping[str, Any] | None = None,
                pretrained_cfg: Mapping[str, Any] | None = None, preset_name: str | None = None,
                override_source: str = "override", pretrained_cfg_source: str | None = None,
                weights_follow: bool = False) -> "nn.Module":
    """Registered backbone ``backbone`` built from config fields ``args`` (random weights).

    ``overrides`` replace fields afterwards (type-checked the same way); ``source`` and
    ``override_source`` name where each came from in errors. ``pretrained_cfg`` is checked against
    the backbone's schema (``pretrained_cfg_class``, errors naming ``pretrained_cfg_source``) and
    recorded on the model with ``preset_name``. A config that would need far more memory than the
    machine has is refused before anything is allocated (:mod:`opzoo.model_io.size_check`; the override
    ``allow_oversize=True`` builds it anyway), and one the backbone cannot be built from is a
    ConfigError naming ``source``, not a traceback from inside the model. ``weights_follow``: the caller loads weights
    into it next (:func:`opzoo.model_io.weights.load_state_dict_strict`): it is built on the ``meta`` device
    (:func:`opzoo.model_io.weights.build_for_weights`), so that the load holds its weights once.
    """
    overrides = dict(overrides or {})
    allow_oversize = bool(overrides.pop("allow_oversize", False))
    cls = get_registry().get("backbone", backbone)
    config = cls.config_class.from_dict(args, source=source)
    if overrides:
        config = config.replace(source=override_source, **overrides)
    pretrained_cfg = validate_pretrained_cfg(pretrained_cfg or {}, pretrained_cfg_source or f"{source}: pretrained_cfg",
                                             schema_of(cls))
    from .size_check import build_within_memory

    where = override_source if overrides else source
    from .weights import build_for_weights

    try:
        if weights_follow:
            model = build_for_weights(lambda: build_within_memory(cls, config, where, allow_oversize))
        else:
            model = build_within_memory(cls, config, where, allow_oversize)
    except (ZeroDivisionError, ValueError, OverflowError, IndexError, RuntimeError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{where}: {backbone} cannot be built from this config ({type(e).__name__}: "
                          f"{' '.join(str(e).split())})") from None
    model.pretrained_cfg = pretrained_cfg
    model.preset_name = preset_name
    return model


def list_models(pattern: str = "*", pretrained: bool = False, include_aliases: bool = False) -> list[str]:
    """Registered preset names matching the fnmatch ``pattern`` (an alias brings in its preset), as
    ``timm.list_models``; ``pretrained=True`` keeps only presets with published weights."""
    registry = get_registry()
    names = registry.list_models(pattern, include_aliases=include_aliases)
    if pretrained:
        names = [n for n in names if registry.preset(n).pretrained is not None]
    return names




def build_backbone(ref: ModelReference, pretrained: bool, args: dict[str, Any]) -> "nn.Module":
    """A registered backbone ``ref`` built from config fields ``args``, random weights (it has no published ones)."""
    if pretrained:
        raise HubError(f"{ref.given!r} is a bare backbone and has no weights; name a preset "
                       f"(opzoo.list_models(pretrained=True)) or a saved repo")
    oversize = {"allow_oversize": args.pop("allow_oversize")} if "allow_oversize" in args else {}
    return build_model(ref.given, args, f"{ref.given} config", oversize or None)


def build_preset(preset: Preset, overrides: Mapping[str, Any] | None = None, weights_follow: bool = False
                 ) -> "nn.Module":
    """Preset ``preset`` with config ``overrides`` (random weights; ``weights_follow``: parameters on meta, for a
    load next, see :func:`build_model`)."""
    return build_model(preset.backbone, preset.args, f"preset {preset.name}", overrides,
                       {"preset": preset.name, **preset.pretrained_cfg}, preset.name, f"override of {preset.name}",
                       f"preset {preset.name}: pretrained_cfg", weights_follow=weights_follow)
















__all__ = ["build_model", "build_backbone", "build_preset", "list_models"]
