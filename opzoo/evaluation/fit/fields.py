"""Fields: how a model reads each file's fields: by name (after ``--field-map`` and as upstream read its training
set), into its named state slots, adapted to the file's own, or by position (:func:`plan_fields`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from torch import nn

from ...data import TrajectoryDataset
from ...data.errors import DataFormatError
from ...errors import ConfigError
from ...registry.contract import PAD, DataContract, Expression, TrainingSet, parse_expression, parse_field_map
from .contract import contract_of, model_fields, model_name, pad_value_of


@dataclass
class FieldPlan:
    """How one file's fields are read: ``mode`` ``named`` (the model's fields by name), ``adapt`` (the file's own
    fields, the model's channels adapted to them), ``subset`` (the file's fields that the model has a slot for, each
    into its slot) or ``position`` (the file's channels in order)."""

    mode: str
    steps: list[tuple[str, Any]] | None = None  # (name, Expression or fill value) per channel read
    transpose: bool = False
    training_set: TrainingSet | None = None
    lines: list[str] = field(default_factory=list)
    new_slots: list[str] = field(default_factory=list)  # mode ``subset``: fields the model gains a slot for

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.steps or []]


def recognised_training_set(contract: DataContract, src: TrajectoryDataset, asked: str | None,
                            flag: str = "--training-set") -> tuple[TrainingSet | None, str]:
    """``(training set, how it was chosen)``: the one ``asked`` (``none``: none), else the one the file names itself
    (The Well's ``dataset_name``), else None."""
    if asked is not None:
        if asked.lower() == "none":
            return None, ""
        if not contract.training_sets:
            raise ConfigError(f"{flag} {asked}: the {contract.name} contract records no training sets of its upstream")
        try:
            return contract.training_set(asked), f"{flag} {asked}"
        except KeyError as e:
            raise ConfigError(f"{flag}: {e.args[0]}") from None
    info = src.source.info
    if info.layout == "the-well" and info.pde:
        for t in contract.training_sets:
            if t.name == info.pde:
                return t, f"the file names itself {t.name!r} (its dataset_name; {flag} none reads it by name)"
    return None, ""


def plan_fields(model: nn.Module, contract: DataContract, src: TrajectoryDataset, field_map: Mapping[str, str],
                training_set: str | None, may_adapt: bool, name: str | None = None) -> FieldPlan:
    """How ``model`` (called ``name``) reads ``src``'s fields (see the module doc); ConfigError naming the flag that
    fits a file the model cannot read honestly."""
    name, path = name or model_name(model), src.path
    have = src.source.own_fields
    unknown = [f for f in field_map if f not in have]
    if unknown:
        raise ConfigError(f"{path}: --field-map names {', '.join(unknown)}, which the file does not have (it has "
                          f"{', '.join(have)})")
    if contract.other_fields == "subset":
        return plan_subset(model, contract, src, field_map, training_set, may_adapt, name)
    fields = model_fields(model, contract)
    if fields is None:
        if field_map:
            raise ConfigError(f"{path}: --field-map renames fields, but {name} reads its channels by position (it names "
                              f"no fields); leave --field-map out")
        if training_set not in (None, "none"):
            raise ConfigError(f"{path}: --training-set {training_set}: {name} reads its channels by position and "
                              f"records no training sets; leave it out")
        return FieldPlan("position", lines=[f"fields: by position: the file's {', '.join(have)} as channels "
                                            f"0-{len(have) - 1} of {name}" if len(have) > 1 else
                                            f"fields: by position: the file's {have[0]} as channel 0 of {name}"])
    adapting = may_adapt and contract.other_fields == "adapt"
    strange = [(f, m) for f, m in field_map.items() if m not in fields]
    if strange and not adapting:  # u=vorticity for a model without vorticity
        f, m = strange[0]
        raise ConfigError(f"{path}: --field-map {f}={m}: {name} has no field {m} (it reads "
                          f"{', '.join(x for x in fields if x != PAD)}): read {f} as one of those" + ("; or fine-tune on the file's own fields "
                                                                          "(opzoo finetune adapts the channel-shaped "
                                                                          "tensors)" if contract.other_fields == "adapt"
                                                                          else ""))
    renamed = {f: field_map.get(f, f) for f in have}  # file name -> the name the model reads it by
    by_model: dict[str, str] = {}
    for f, m in renamed.items():
        if m in by_model:  # --field-map velocity_x=density on a file with its own density
            mapped, own = (f, by_model[m]) if f in field_map else (by_model[m], f)
            raise ConfigError(f"{path}: --field-map {mapped}={m} reads {mapped} as {name}'s {m}, but the file has its "
                              f"own {own}, which would then be read as {m} too: map that one elsewhere as well "
                              f"({own}=OTHER), or read {mapped} as another of {name}'s fields")
        by_model[m] = f
    ts, how = recognised_training_set(contract, src, training_set)
    steps, lines, taken, filled, lacking = [], [], set(), [], []
    for m in fields:
        if ts is not None and m in ts.fields:
            expr = parse_expression(ts.fields[m], f"training set {ts.name}: {m}")
            steps.append((m, expr))
            taken.update(expr.names)
        elif m in by_model:
            steps.append((m, Expression(by_model[m], a=by_model[m])))
            taken.add(by_model[m])
        elif m == PAD:
            steps.append((m, pad_value_of(model, contract)))
        elif contract.fill(m) is not None:
            steps.append((m, float(contract.fill(m))))
            filled.append(m)
        else:
            lacking.append(m)
    from_file = [m for m, how_ in steps if isinstance(how_, Expression)]
    if from_file and not lacking:
        if ts is not None:
            lines.append(f"fields: read as {name}'s upstream read its training set {ts.name} ({how}; "
                         f"{ts.source}): {ts.words()}" + (f"; {ts.note}" if ts.note else ""))
        renames = [f"{f} as {m}" for f, m in renamed.items() if f != m]
        lines.append(f"fields: {', '.join(from_file)} from the file" + (f" (--field-map: {', '.join(renames)})"
                                                                         if renames else "")
                     + (", by name" if not ts and not renames else ""))
        if filled:
            values = sorted({contract.fill(m) for m in filled})
            fills = (f"{values[0]:g}" if len(values) == 1 else
                     ", ".join(f"{m} as {contract.fill(m):g}" for m in filled))
            lines.append(f"fields: {', '.join(filled)} absent: read as {fills} ({contract.absent_source}); left out "
                         f"of the loss and the scores, refilled in a rollout")
        unread = [f for f in have if f not in taken]
        if unread:
            lines.append(f"fields: not read: {', '.join(unread)} ({name} has no such field"
                         + (f"; {ts.name}'s map skips them" if ts else "") + ")")
        return FieldPlan("named", steps, bool(ts and ts.transpose), ts, lines)
    file_names = [renamed[f] for f in have]
    why = (f"{name} reads {', '.join(fields)}; the file has {', '.join(have)}"
           + (f" (lacking {', '.join(lacking)}, which nothing fills)" if lacking and from_file else ""))
    if adapting:
        return FieldPlan("adapt", [(renamed[f], Expression(f, a=f)) for f in have], lines=[
            f"fields: {why}: the file's {', '.join(file_names)} replace them; {name}'s channel-shaped tensors are "
            f"adapted to them, as its upstream fine-tunes on other fields ({contract.other_fields_source}); "
            f"--field-map FILE=MODEL reads a file field as one of {name}'s instead"])
    adapt_hint = ("; or fine-tune on the file's own fields (opzoo finetune adapts the channel-shaped tensors; "
                  "opzoo fit --finetune shows how)"
                  if contract.other_fields == "adapt" and not may_adapt else "")
    raise ConfigError(f"{path}: {why}: read the file's fields as {name}'s with --field-map FILE=MODEL,... (FILE one "
                      f"of {', '.join(have)}; MODEL one of {', '.join(f for f in fields if f != PAD)}){adapt_hint}")


def plan_subset(model: nn.Module, contract: DataContract, src: TrajectoryDataset, field_map: Mapping[str, str],
                training_set: str | None, may_adapt: bool, name: str) -> FieldPlan:
    """A model that reads any subset of its named slots (``other_fields="subset"``): each of the file's fields into
    the slot of its name (after ``--field-map``, or as upstream read its training set); a field of no slot gains one
    in training (as upstream fine-tunes), is left unread otherwise; a file of no known field is refused."""
    path, have = src.path, src.source.own_fields
    slots = list(getattr(model.config, contract.subset_config[1]))
    ts, how = recognised_training_set(contract, src, training_set)
    steps: list[tuple[str, Any]] = []
    lines, taken = [], set()
    if ts is not None:
        for slot, text in ts.fields.items():
            expr = parse_expression(text, f"training set {ts.name}: {slot}")
            lacking = [n for n in expr.names if n not in have]
            if lacking:
                raise ConfigError(f"{path}: read as {ts.name} ({how}), {slot} := {text}, but the file has no "
                                  f"{', '.join(lacking)} (it has {', '.join(have)})")
            steps.append((slot, expr))
            taken.update(expr.names)
        lines.append(f"fields: read as {name}'s upstream read its training set {ts.name} ({how}; {ts.source}): "
                     f"{ts.words()}" + (f"; {ts.note}" if ts.note else ""))
    unread, new = [], []
    for f in have:
        if f in taken:
            continue
        slot = field_map.get(f, f)
        if slot in (s for s, _ in steps):
            raise ConfigError(f"{path}: two of the file's fields go to {name}'s slot {slot}; map one elsewhere with "
                              f"--field-map")
        if slot in slots or may_adapt:
            steps.append((slot, Expression(f, a=f)))
            if slot not in slots:
                new.append(slot)
        else:
            unread.append(f)
    if not steps:
        raise ConfigError(f"{path}: none of the file's fields ({', '.join(have)}) is one of {name}'s state slots "
                          f"({', '.join(slots)}): read them as its slots with --field-map FILE=SLOT,..., or as one of "
                          f"its training sets with --training-set NAME ("
                          f"{', '.join(t.name for t in contract.training_sets) or 'none recorded'}), or fine-tune on "
                          f"them (opzoo finetune gives each field a new slot, {contract.other_fields_source})")
    renames = [f"{f} as {field_map[f]}" for f in have if f in field_map and f not in taken]
    known = [s for s, _ in steps if s not in new]
    if known:
        lines.append(f"fields: {', '.join(f'{s} (slot {slots.index(s)})' for s in known)} from the file"
                     + (f" (--field-map: {', '.join(renames)})" if renames else ", by name" if not ts else ""))
    taking = slot_takers(contract, slots, new)
    if taking:
        lines.append(f"fields: {', '.join(f'{f} takes the unused slot {s} (slot {slots.index(s)})' for f, s in taking.items())}"
                     f": the slot's weights kept, never trained on data ({contract.unused_slots_source})")
    grown = [f for f in new if f not in taking]
    if grown:
        lines.append(f"fields: {', '.join(grown)}: no slot of {name}'s" + (" free" if taking else "") + "; each gains a "
                     f"new slot, freshly initialized, as its upstream fine-tunes on new fields "
                     f"({contract.other_fields_source})")
    if unread:
        lines.append(f"fields: not read: {', '.join(unread)} ({name} has no slot of that name; --field-map "
                     f"FILE=SLOT reads one as a slot, fine-tuning gives it one of its own)")
    return FieldPlan("subset", steps, bool(ts and ts.transpose), ts, lines, new)


def slot_takers(contract: DataContract, slots: list[str], new: list[str]) -> dict[str, str]:
    """``{new field: the unused slot it takes}``: a subset model's new fields, in order, into the contract's unused
    slots still in its vocabulary (``unused_slots``); the rest gain slots of their own."""
    free = [s for s in contract.unused_slots if s in slots]
    return dict(zip(new, free))


def slot_vocabulary(contract: DataContract, slots: list[str], new: list[str]) -> tuple[str, ...]:
    """A subset model's vocabulary after fine-tuning gives ``new`` fields slots: the unused ones renamed, then new slots
    appended (:func:`slot_takers`)."""
    taking = slot_takers(contract, slots, new)
    by_slot = {s: f for f, s in taking.items()}
    return tuple([by_slot.get(s, s) for s in slots] + [f for f in new if f not in taking])


def apply_plan(src: TrajectoryDataset, plan: FieldPlan) -> None:
    """Have ``src`` (and every subset sharing its file) read its fields as ``plan`` says."""
    if plan.mode in ("named", "adapt", "subset"):
        try:
            src.source.map_fields(plan.steps, plan.transpose)
        except DataFormatError as e:
            raise ConfigError(str(e)) from None


def one_field_set(plans, modes: set[str], mode: str, advice: str) -> list[str]:
    """The one set of fields every file's plan (all of ``mode``) reads, or a ConfigError naming each file's."""
    names = {tuple(p.names) for _, p in plans}
    if len(names) > 1 or modes != {mode}:
        raise ConfigError("the files hold different fields (" + "; ".join(
            f"{s.path}: {', '.join(s.source.own_fields)}" for s, _ in plans) + f"): {advice}")
    return list(next(iter(names)))


def field_map_of(value) -> dict[str, str]:
    try:
        return parse_field_map(value)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def per_file_lines(lines: list[str], plan: FieldPlan, plans) -> list[str]:
    """A file's field lines, named by the file when several files are fitted."""
    files = {id(s.source): s for s, _ in plans}
    if len(files) < 2:
        return lines
    src = next(s for s, p in plans if p is plan)
    return [line.replace("fields: ", f"fields ({src.path}): ", 1) for line in lines]


def fitted_names(model: nn.Module, plans, adapted: nn.Module) -> list[str] | None:
    """The field each of the fitted model's channels reads (``<pad>`` for padding), or None when a position model's
    files name their channels differently."""
    first = plans[0][1]
    if first.mode in ("named", "adapt", "subset"):
        return first.names
    names = {tuple(s.channel_names) for s, _ in plans}
    if len(names) > 1:
        return None
    own = list(next(iter(names)))
    if own == [f"c{i}" for i in range(len(own))]:  # a file that names no channel: the reader's placeholders
        return None
    return own + [PAD] * (adapted.config.in_channels - len(own))


def select_model_fields(model: nn.Module, sources: list[TrajectoryDataset]) -> list[str]:
    """The field lines of the fit of ``sources`` to ``model`` (a model that names its fields reads each file's by
    name, a field the file lacks filled as its contract says, or refused)."""
    plans = []
    contract = contract_of(model)
    for src in sources:
        plan = plan_fields(model, contract, src, {}, None, False)
        apply_plan(src, plan)
        plans.append(plan)
    return [line for p in plans if p.mode == "named" for line in p.lines if "absent" in line]


__all__ = ["FieldPlan", "apply_plan", "field_map_of", "fitted_names", "one_field_set", "per_file_lines", "plan_fields",
           "plan_subset", "recognised_training_set", "select_model_fields"]
