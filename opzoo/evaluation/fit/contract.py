"""The fit's first question: which data contract a model has (its preset's, its backbone's, or one derived from its
class), which fields it reads by name, and its pad value."""

from __future__ import annotations

from torch import nn

from ...registry.contract import DataContract, Normalization


def model_name(model: nn.Module) -> str:
    return getattr(model, "preset_name", None) or type(model).__name__


def contract_of(model: nn.Module) -> DataContract:
    """The data contract of ``model``: its preset's (the one it was loaded as or started from), else its backbone's,
    else one derived from the backbone class's attributes (``channel_pad_value``, ``takes_any_channel_count``,
    ``missing_field_value``), for a third-party backbone that declares none."""
    from ...registry.registry import get_registry

    registry = get_registry()
    try:
        backbone = registry.backbone_name(type(model))
    except Exception:  # a model class no plugin registered (a test's, a user's module)
        backbone = None
    preset = getattr(model, "preset_name", None) or (getattr(model, "pretrained_cfg", None) or {}).get("preset")
    found = registry.contract(backbone, preset) if backbone is not None else None
    return found if found is not None else derived_contract(model)


def derived_contract(model: nn.Module) -> DataContract:
    """What a backbone without a declared contract takes, from its class's attributes."""
    fill = getattr(model, "missing_field_value", None)
    fields = list((getattr(model, "pretrained_cfg", None) or {}).get("fields") or [])
    return DataContract(
        name=type(model).__name__,
        normalization=Normalization("none", "the model takes the fields as given (its backbone declares no data "
                                            "contract)"),
        absent={f: float(fill) for f in fields} if fill is not None and fields else None,
        pad_value=float(getattr(model, "channel_pad_value", 1.0)),
        other_fields="any" if getattr(model, "takes_any_channel_count", False) else "adapt",
        spatial_dims=(1, 2, 3))


def model_fields(model: nn.Module, contract: DataContract | None = None) -> list[str] | None:
    """The fields a model reads by name, one per input channel: its ``pretrained_cfg['fields']``, else its contract's
    fields when it has that many channels (a converted upstream checkpoint reads upstream's fields), or None: it
    reads channels by position. A model of a family that reads by position stays so through a chain of fine-tunes,
    although each fine-tune records what its channels held (:func:`reads_by_name`)."""
    contract = contract or contract_of(model)
    if not reads_by_name(model, contract):
        return None
    channels = getattr(model.config, "in_channels", None)
    fields = list((getattr(model, "pretrained_cfg", None) or {}).get("fields") or [])
    if fields:
        return fields if len(fields) == channels else None
    own = contract.fields
    return list(own) if own and len(own) == channels else None


def reads_by_name(model: nn.Module, contract: DataContract) -> bool:
    """Whether ``model``'s family matches fields by name: its contract names fields, or the preset it was loaded as
    or started from names its own (The Well's presets, each its dataset's); a model of no known preset goes by what
    its record says."""
    from ...registry.registry import get_registry

    if contract.fields:
        return True
    cfg = getattr(model, "pretrained_cfg", None) or {}
    preset = getattr(model, "preset_name", None) or cfg.get("preset")
    registry = get_registry()
    if preset and registry.has_preset(preset):
        return bool(registry.preset(preset).pretrained_cfg.get("fields"))
    return bool(cfg.get("fields"))


def pad_value_of(model: nn.Module, contract: DataContract) -> float:
    return float(contract.pad_value if contract.pad_value is not None else getattr(model, "channel_pad_value", 1.0))


__all__ = ["contract_of", "derived_contract", "model_fields", "model_name", "pad_value_of", "reads_by_name"]
