"""Channels: kept, padded (left out of the loss and the scores, refilled in a rollout), or (training only) the
model's channel-shaped tensors adapted to the files' fields, as the family's upstream fine-tunes
(:func:`plan_channels`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...errors import ConfigError
from ...registry.contract import DataContract
from .contract import pad_value_of
from .fields import one_field_set, slot_takers, slot_vocabulary


def plan_channels(model: nn.Module, contract: DataContract, plans, name: str, forced: int | None,
                  adapt_channels: bool, may_adapt: bool) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """``(changes, slot config, lines)``: the channel counts ``model`` is adapted to for the files' field ``plans``
    (``forced``: the count the run's args set; ``adapt_channels``: a model that takes any count is brought to the
    files'; ``may_adapt``: a training run, which may adapt channel-shaped tensors), the state slots a ``subset``
    model gains, and the block's channel lines; a ConfigError naming the flag that fits files it cannot take."""
    modes = {p.mode for _, p in plans}
    changes: dict[str, Any] = {}
    subset_config: dict[str, Any] = {}
    lines: list[str] = []
    c = model.config
    if modes == {"named"}:
        lines.append(f"channels: {name}'s {c.in_channels}, by name")
    if "subset" in modes:
        fields = one_field_set(plans, modes, "subset", f"{name} runs on one set of state slots at a time; map them "
                                                       "onto one with --field-map, or give files of the same fields")
        per_channel, vocabulary = contract.subset_config
        slots = list(getattr(c, vocabulary))
        new_slots = [f for f in fields if f not in slots]
        changes.update(in_channels=len(fields), out_channels=len(fields), **{per_channel: tuple(fields)})
        taken = len(slot_takers(contract, slots, new_slots))
        grown = len(new_slots) - taken
        if new_slots:
            subset_config[vocabulary] = slot_vocabulary(contract, slots, new_slots)
        lines.append(f"channels: {len(fields)}, each field in its own state slot of {name}'s {len(slots)}"
                     + (f"; {taken} unused slot(s) taken" if taken else "")
                     + (f"; {grown} new slot(s): the slot-shaped tensors adapted ({contract.other_fields_source})"
                        if grown else ""))
    if "adapt" in modes:
        new_fields = one_field_set(plans, modes, "adapt", f"fine-tuning adapts {name} to one set of fields; map them "
                                                          "onto one with --field-map, or fine-tune on files of the "
                                                          "same fields")
        changes.update(in_channels=len(new_fields), out_channels=len(new_fields))
        lines.append(f"channels: {c.in_channels} -> {len(new_fields)} ({', '.join(new_fields)}): the channel-shaped "
                     f"tensors adapted ({contract.other_fields_source})")
    elif modes == {"position"}:
        wanted = max(s.channels for s, _ in plans)
        if forced is not None:
            wanted = forced
        if contract.other_fields == "any" and adapt_channels and wanted != c.in_channels:
            changes.update(in_channels=wanted, out_channels=wanted)
            why = contract.other_fields_source or "no tensor depends on it"
            lines.append(f"channels: {name} takes any number of channels ({why}): run at the files' {wanted}")
        elif wanted > c.in_channels:
            if not may_adapt or contract.other_fields not in ("adapt", "pad"):
                worst = max((s for s, _ in plans), key=lambda s: s.channels)
                raise ConfigError(f"{worst.path}: {worst.channels} channels, more than {name}'s {c.in_channels}: "
                                  + ("fine-tune it on them (opzoo finetune adapts its input and output layers; opzoo fit --finetune "
                                     "shows how)"
                                     if contract.other_fields in ("adapt", "pad") else
                                     f"{name} cannot take more channels ({contract.other_fields_source})"))
            changes.update(in_channels=wanted, out_channels=wanted)
            lines.append(f"channels: {c.in_channels} -> {wanted}: the input and output layers adapted")
        elif wanted < c.in_channels:
            if contract.pad_value is None and contract.other_fields == "adapt" and may_adapt:
                changes.update(in_channels=wanted, out_channels=wanted)
                lines.append(f"channels: {c.in_channels} -> {wanted}: {name} pads no channel "
                             f"({contract.other_fields_source}); its channel-shaped tensors adapted to the file's")
            elif contract.pad_value is None:
                raise ConfigError(f"{plans[0][0].path}: {wanted} channel(s), fewer than {name}'s {c.in_channels}, "
                                  f"and {name} pads none (its upstream never did); fine-tune it on them (opzoo "
                                  f"finetune adapts its channels; opzoo fit --finetune shows how)" + (", or name its fields with --field-map"
                                                                      if contract.fields else ""))
            else:
                pad = pad_value_of(model, contract)
                note = f"; {contract.rollout_note}" if contract.rollout_note else ""
                why = contract.pad_source or "its pad value"
                lines.append(f"channels: {wanted} of {name}'s {c.in_channels} from the files; the other "
                             f"{c.in_channels - wanted} padded with {pad:g} ({why}): left out of the loss and the "
                             f"scores, refilled with {pad:g} in a rollout{note}")
        else:
            lines.append(f"channels: {name}'s {c.in_channels}, the files' own count")
    if forced is not None and "in_channels" not in changes and forced != c.in_channels:
        changes.update(in_channels=forced, out_channels=forced)
    if "in_channels" in changes and c.in_channels != c.out_channels:
        raise ConfigError(f"{name} maps {c.in_channels} -> {c.out_channels} channels: it cannot be adapted to the "
                          f"files' {changes['in_channels']}")
    return changes, subset_config, lines


__all__ = ["plan_channels"]
