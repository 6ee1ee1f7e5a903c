"""The one fit of data files to a model, for training, ``eval``, ``rollout``, ``validate`` and ``compare`` alike
(docs/data-contract.md).

:func:`fit_data` reads the model's data contract (:func:`contract_of`, an :class:`opzoo.DataContract`) and decides,
for the model and the files:

- **fields**: a model that names its fields reads each file's by name (after the user's ``--field-map`` renames, and
  as upstream read its training set when the file is one of them, ``--training-set``: field expressions, a transposed
  grid); a field the file lacks is filled as the contract says, or the file is refused naming the flag that fits it;
  a model that reads channels by position takes them in the file's order;
- **channels**: kept, padded (left out of the loss and the scores, refilled in a rollout), or (training only) the
  channel-shaped tensors adapted to the file's fields, as the family's upstream fine-tunes;
- **grid**: the one asked for, else the one the backbone asks for given the data, else the pretrained grid, else the
  first file's, and how data is resampled to it;
- **boundary**: what the files state and what the model assumes;
- **normalization**: as the contract says: inside the model, by constants, or by statistics of the training split that
  the fit computes and the model then carries.

Each decision is one line of :attr:`FittedData.lines`, the block every command prints and every run records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from torch import nn

from ..data import FrameShape, TrajectoryDataset
from ..data.errors import DataFormatError
from ..errors import ConfigError
from ..registry.contract import (
    PAD,
    DataContract,
    Expression,
    Normalization,
    TrainingSet,
    parse_expression,
    parse_field_map,
)


@dataclass
class FittedData:
    """Data files fitted to a model (:func:`fit_data`)."""

    model: nn.Module  # adapted where the fit says (channels, statistics), else the model given
    frame_shape: FrameShape  # the frames the model runs on: its grid, channels, steps, pad value and resampling
    grid: "GridChoice"  # the grid and why
    sources: list[TrajectoryDataset]  # the files as the model reads them (fields mapped)
    lines: list[str] = field(default_factory=list)  # the fit block: one line per decision
    record: dict[str, Any] = field(default_factory=dict)  # the decisions as data, recorded in runs and cards

    @property
    def fields(self) -> list[str]:  # the block's field lines (before 0.2: the lines about filled fields)
        return [line for line in self.lines if line.lstrip().startswith("fields")]


# ---- the contract of a model -------------------------------------------------------------------------------------


def model_name(model: nn.Module) -> str:
    return getattr(model, "preset_name", None) or type(model).__name__


def contract_of(model: nn.Module) -> DataContract:
    """The data contract of ``model``: its preset's (the one it was loaded as or started from), else its backbone's,
    else one derived from the backbone class's attributes (``channel_pad_value``, ``takes_any_channel_count``,
    ``missing_field_value``), for a third-party backbone that declares none."""
    from ..registry.registry import get_registry

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
    reads channels by position."""
    channels = getattr(model.config, "in_channels", None)
    fields = list((getattr(model, "pretrained_cfg", None) or {}).get("fields") or [])
    if fields:
        return fields if len(fields) == channels else None
    own = (contract or contract_of(model)).fields
    return list(own) if own and len(own) == channels else None


def pad_value_of(model: nn.Module, contract: DataContract) -> float:
    return float(contract.pad_value if contract.pad_value is not None else getattr(model, "channel_pad_value", 1.0))


# ---- fields ------------------------------------------------------------------------------------------------------


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
    renamed = {f: field_map.get(f, f) for f in have}  # file name -> the name the model reads it by
    by_model = {m: f for f, m in renamed.items()}
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
    if may_adapt and contract.other_fields == "adapt":
        return FieldPlan("adapt", [(renamed[f], Expression(f, a=f)) for f in have], lines=[
            f"fields: {why}: the file's {', '.join(file_names)} replace them; {name}'s channel-shaped tensors are "
            f"adapted to them, as its upstream fine-tunes on other fields ({contract.other_fields_source}); "
            f"--field-map FILE=MODEL reads a file field as one of {name}'s instead"])
    adapt_hint = ("; or fine-tune on the file's own fields (opzoo finetune adapts the channel-shaped tensors)"
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
    if new:
        lines.append(f"fields: {', '.join(new)}: no slot of {name}'s; each gains a new slot, freshly initialized, "
                     f"as its upstream fine-tunes on new fields ({contract.other_fields_source})")
    if unread:
        lines.append(f"fields: not read: {', '.join(unread)} ({name} has no slot of that name; --field-map "
                     f"FILE=SLOT reads one as a slot, fine-tuning gives it one of its own)")
    return FieldPlan("subset", steps, bool(ts and ts.transpose), ts, lines, new)


def apply_plan(src: TrajectoryDataset, plan: FieldPlan) -> None:
    """Have ``src`` (and every subset sharing its file) read its fields as ``plan`` says."""
    if plan.mode in ("named", "adapt", "subset"):
        try:
            src.source.map_fields(plan.steps, plan.transpose)
        except DataFormatError as e:
            raise ConfigError(str(e)) from None


# ---- the fit -----------------------------------------------------------------------------------------------------


def fit_data(model: nn.Module, sources: list[TrajectoryDataset], resolution=None, flag: str = "--resolution",
             grid_from: list[TrajectoryDataset] | None = None, channels: int | None = None,
             adapt_channels: bool = True, *, field_map: "str | Mapping[str, str] | None" = None,
             training_set: str | None = None, train: bool = False, targets: Mapping[str, Any] | None = None,
             stats_from: list[TrajectoryDataset] | None = None, seed: int = 0,
             progress: bool | None = None, name: str | None = None, keep_boundary: bool = False) -> FittedData:
    """Fit ``sources`` to ``model`` (see the module doc) and return the fitted model, frames and the block.

    ``grid_from``: the files that choose the grid (default all; a run: its training splits); ``resolution`` names one
    (``flag`` says where from). ``channels``: the frames' channel count (default the model's). ``adapt_channels``: a
    model that takes any channel count is brought to the files' own. ``train``: a training run, which may adapt the
    model's channel-shaped tensors to other fields; ``targets``: the run's other shape changes for
    :func:`opzoo.model_io.adapt.adapt_model` (``in_timesteps``, ``img_size``, ``periodic``, labels per channel), made
    in the same rebuild. ``stats_from``: the trajectories a normalization's statistics come from (default: each file's
    training part by training's rule). ``name``: how the block names the model (default its preset's).
    ``keep_boundary``: the user set the model's ``periodic`` flag (``model.args.periodic``, ``--model-args``): it is
    kept where the data state another boundary (said); otherwise the flag follows the data (:func:`boundary_plan`). A
    file that does not fit is a ConfigError naming the flag that fits it."""
    from ..model_io.adapt import adapt_model

    contract = contract_of(model)
    per_source = isinstance(field_map, (list, tuple))
    fmaps = [_field_map(m) for m in (field_map if per_source else [field_map] * len(sources))]
    sets = list(training_set) if isinstance(training_set, (list, tuple)) else [training_set] * len(sources)
    name = name or model_name(model)
    targets = dict(targets or {})
    dims = getattr(model.config, "spatial_dims", None)
    for src in sources:
        if dims is not None and len(src.spatial) != dims and dims in (1, 2, 3):
            c = model.config
            shape = ", ".join([f"N={src.shape[0]}", *(f"{a}={n}" for a, n in zip("XYZ", src.spatial)),
                               f"T={src.n_steps}", f"C={src.channels}"])
            raise ConfigError(f"{src.path}: {len(src.spatial)}-D data shaped [{shape}], but {name} is a {dims}-D "
                              f"model that takes [N, {', '.join('XYZ'[:dims])}, T, C] with T_in={c.in_timesteps}, "
                              f"C={c.in_channels}; no adaptation changes the number of spatial dimensions: check the "
                              f"file's axis order (--layout array:<axes>) or use a {len(src.spatial)}-D model")
        if dims is None and len(src.spatial) not in contract.spatial_dims:
            takes = " or ".join(f"{d}-D" for d in contract.spatial_dims)
            raise ConfigError(f"{src.path}: {len(src.spatial)}-D data, but {name} takes {takes} data; no adaptation "
                              f"changes the number of spatial dimensions: check the file's axis order (--layout "
                              f"array:<axes>) or use a {len(src.spatial)}-D model")
    may_adapt = train and adapt_channels
    forced = targets.pop("in_channels", None)
    plans, seen = [], {}
    for src, fmap, tset in zip(sources, fmaps, sets):
        key = id(src.source)
        if key not in seen:
            plan = plan_fields(model, contract, src, fmap, tset, may_adapt, name)
            if forced is not None and plan.mode == "named" and forced != len(plan.steps):
                plan = FieldPlan("adapt", [(f, Expression(f, a=f)) for f in src.source.own_fields], lines=[
                    f"fields: the file's own ({', '.join(src.source.own_fields)}): model.args.in_channels={forced}"])
            seen[key] = plan
            apply_plan(src, plan)
            plans.append((src, plan))
    modes = {p.mode for _, p in plans}
    lines = [line for _, p in plans for line in _per_file(p.lines, p, plans)]
    changes: dict[str, Any] = {}
    c = model.config
    subset_config: dict[str, Any] = {}
    if modes == {"named"}:
        lines.append(f"channels: {name}'s {c.in_channels}, by name")
    if "subset" in modes:
        fields = one_field_set(plans, modes, "subset", f"{name} runs on one set of state slots at a time; map them "
                                                       "onto one with --field-map, or give files of the same fields")
        per_channel, vocabulary = contract.subset_config
        slots = list(getattr(c, vocabulary))
        new_slots = [f for f in fields if f not in slots]
        changes.update(in_channels=len(fields), out_channels=len(fields), **{per_channel: tuple(fields)})
        if new_slots:
            subset_config[vocabulary] = tuple(slots + new_slots)
        lines.append(f"channels: {len(fields)}, each field in its own state slot of {name}'s {len(slots)}"
                     + (f"; {len(new_slots)} new slot(s): the slot-shaped tensors adapted "
                        f"({contract.other_fields_source})" if new_slots else ""))
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
                                  + ("fine-tune it on them (opzoo finetune adapts its input and output layers)"
                                     if contract.other_fields in ("adapt", "pad") else
                                     f"{name} cannot take more channels ({contract.other_fields_source})"))
            changes.update(in_channels=wanted, out_channels=wanted)
            lines.append(f"channels: {c.in_channels} -> {wanted}: the input and output layers adapted (what matches "
                         f"copied, new channels initialized)")
        elif wanted < c.in_channels:
            if contract.pad_value is None and contract.other_fields == "adapt" and may_adapt:
                changes.update(in_channels=wanted, out_channels=wanted)
                lines.append(f"channels: {c.in_channels} -> {wanted}: {name} pads no channel "
                             f"({contract.other_fields_source}); its channel-shaped tensors adapted to the file's")
            elif contract.pad_value is None:
                raise ConfigError(f"{plans[0][0].path}: {wanted} channel(s), fewer than {name}'s {c.in_channels}, "
                                  f"and {name} pads none (its upstream never did); fine-tune it on them (opzoo "
                                  f"finetune adapts its channels)" + (", or name its fields with --field-map"
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
    config, norm_lines, norm_record = normalization(model, contract, plans, changes, stats_from, progress, name)
    config = {**config, **subset_config}
    user = targets["periodic"] if "periodic" in targets else getattr(c, "periodic", None) if keep_boundary else None
    boundary, boundary_words = boundary_plan(model, contract, plans, user, name, train, may_adapt)
    targets.update(boundary)
    adapted = model
    if changes or targets or config:
        adapted = adapt_model(model, seed=seed, config=config, **changes, **targets)
        if adapted is not model:
            adapted.eval() if not model.training else adapted.train()
    fitted_names = _fitted_names(model, plans, adapted)
    if adapted is not model:  # the adapted model says what it reads (the one given is left as it was)
        named = {"fields": fitted_names} if fitted_names and ("in_channels" in changes or modes & {"adapt", "subset"}) \
            else {}
        adapted.pretrained_cfg = {**adapted.pretrained_cfg, **named,
                                  **({"normalization": norm_record} if norm_record else {})}
    grid = choose_grid(adapted, grid_from or sources, resolution, flag)
    shape = frame_shape(adapted, grid.resolution, channels, contract)
    lines.append(grid.line(sources, training=train, mode=shape.resample, source=contract.resample_source))
    lines.append(boundary_words)
    lines += norm_lines
    record = {"model": name, "contract": contract.name, "files": [s.path for s in dict.fromkeys(
        s for s, _ in plans)], "fields": fitted_names, "training_sets": sorted(
        {p.training_set.name for _, p in plans if p.training_set}), "grid": list(grid.resolution),
        "resample": shape.resample, "pad_value": shape.pad_value, "lines": lines}
    if norm_record:
        record["normalization"] = norm_record
    return FittedData(adapted, shape, grid, sources, lines, record)


def one_field_set(plans, modes: set[str], mode: str, advice: str) -> list[str]:
    """The one set of fields every file's plan (all of ``mode``) reads, or a ConfigError naming each file's."""
    names = {tuple(p.names) for _, p in plans}
    if len(names) > 1 or modes != {mode}:
        raise ConfigError("the files hold different fields (" + "; ".join(
            f"{s.path}: {', '.join(s.source.own_fields)}" for s, _ in plans) + f"): {advice}")
    return list(next(iter(names)))


def _field_map(value) -> dict[str, str]:
    try:
        return parse_field_map(value)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _per_file(lines: list[str], plan: FieldPlan, plans) -> list[str]:
    """A file's field lines, named by the file when several files are fitted."""
    files = {id(s.source): s for s, _ in plans}
    if len(files) < 2:
        return lines
    src = next(s for s, p in plans if p is plan)
    return [line.replace("fields: ", f"fields ({src.path}): ", 1) for line in lines]


def _fitted_names(model: nn.Module, plans, adapted: nn.Module) -> list[str] | None:
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


# ---- normalization -----------------------------------------------------------------------------------------------


def normalization_kind(model: nn.Module, norm: Normalization) -> str:
    """The contract's kind for this model's config (``normalization="instance"`` is per-sample, ...)."""
    mode = getattr(model.config, norm.switch, None)
    return norm.by_config.get(str(mode), norm.kind) if mode is not None else norm.kind


def normalization(model: nn.Module, contract: DataContract, plans, changes: Mapping[str, Any],
                  stats_from: list[TrajectoryDataset] | None, progress,
                  name: str | None = None) -> tuple[dict, list[str], dict]:
    """``(config changes, lines, record)``: the contract's normalization for the fitted fields; statistics of the
    training split computed where the contract (or a field without a constant) asks for them."""
    norm = contract.normalization
    kind = normalization_kind(model, norm)
    if kind in ("per-sample", "none") or norm.config is None:
        line = f"normalization: {norm.words if kind == norm.kind else norm.alternatives.get(kind, kind)}"
        return {}, [line + (f" ({norm.source})" if norm.source and kind == norm.kind else "")
                    + (f"; breaks: {norm.breaks}" if norm.breaks and kind == norm.kind else "")], {}
    names = _fitted_names(model, plans, model) or [f"channel {i}" for i in range(model.config.in_channels)]
    if "in_channels" in changes and len(names) != changes["in_channels"]:
        names = names[:changes["in_channels"]] + [PAD] * max(0, changes["in_channels"] - len(names))
    mean_key, std_key = norm.config
    ts = next((p.training_set for _, p in plans if p.training_set), None)
    kept_mean, kept_std, why = _carried(model, norm, kind, mean_key, std_key, names, name or model_name(model))
    mean, std, where = [None] * len(names), [None] * len(names), [""] * len(names)
    c = model.config
    # a model that reads channels by position keeps its constants by position (a channel added gets its statistics)
    kept = getattr(c, mean_key, None) or () if kind == "constants" and model_fields(model) is None else ()
    by_position = len(kept) if len(kept) == len(getattr(c, std_key, None) or ()) else 0
    for i, n in enumerate(names):
        if i < by_position:
            mean[i], std[i] = float(getattr(c, mean_key)[i]), float(getattr(c, std_key)[i])
            where[i] = f"{name or model_name(model)}'s pretraining constants, by position"
        elif n in kept_mean and n not in norm.dataset_mean:
            mean[i], std[i], where[i] = kept_mean[n], kept_std[n], why
        elif n in norm.dataset_mean and ts is not None and n in ts.mean and n in kept_std:
            mean[i], std[i], where[i] = ts.mean[n], kept_std[n], f"{ts.name}'s mean ({ts.source}), {why}'s std"
    todo = [i for i, m in enumerate(mean) if m is None]
    record: dict[str, Any] = {"fields": names, "kind": kind}
    lines = []
    if todo:
        parts = stats_from if stats_from is not None else training_parts(plans)
        m_all, s_all = field_statistics(parts, progress)
        span = describe_parts(parts)
        for i in todo:
            n = names[i]
            if n == PAD or i >= len(m_all):  # padding: its value, and no spread
                mean[i], std[i], where[i] = pad_value_of(model, contract), 0.0, "padding"
            elif n in norm.dataset_mean and n in kept_std:
                mean[i], std[i], where[i] = float(m_all[i]), kept_std[n], f"the mean of {span}, as upstream took " \
                                                                          f"{n}'s per dataset; {why}'s std"
            else:
                mean[i], std[i], where[i] = float(m_all[i]), float(s_all[i]), span
        record["from"] = span
    floor = norm.min_std
    std = [s if s >= floor else floor for s in std]
    record.update(mean=mean, std=std)
    groups: dict[str, list[int]] = {}
    for i, w in enumerate(where):
        groups.setdefault(w, []).append(i)
    how = norm.words if kind == norm.kind else norm.alternatives.get(kind, kind)
    lines.append(f"normalization: {how} ({norm.source})" + (f"; breaks: {norm.breaks}" if norm.breaks else ""))
    for w, idx in groups.items():
        lines.append(f"normalization: {', '.join(names[i] for i in idx)}: mean "
                     f"{_values([mean[i] for i in idx])}, std {_values([std[i] for i in idx])} ({w})")
    config = {mean_key: tuple(mean), std_key: tuple(std)}
    return config, lines, record


def _carried(model: nn.Module, norm: Normalization, kind: str, mean_key: str, std_key: str,
             names: list[str], name: str) -> tuple[dict, dict, str]:
    """The statistics the model carries, by field: its config's constants (a ``constants`` contract), or those a fit
    recorded with it (``pretrained_cfg['normalization']``, for the same fields)."""
    c = model.config
    mean, std = getattr(c, mean_key, None), getattr(c, std_key, None)
    own = model_fields(model)
    if not mean or not std or own is None or len(mean) != len(own):
        return {}, {}, ""
    recorded = (getattr(model, "pretrained_cfg", None) or {}).get("normalization")
    if isinstance(recorded, Mapping) and recorded.get("fields") == own:
        why = f"recorded with {name}: {recorded.get('from') or 'its training split'}"
    elif kind == "constants":
        why = f"{name}'s pretraining constants"
    else:
        return {}, {}, ""
    return dict(zip(own, map(float, mean))), dict(zip(own, map(float, std))), why


def _values(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


def training_parts(plans) -> list[TrajectoryDataset]:
    """Each file's training part by training's rule (all but the last tenth), where statistics come from when the
    caller names none (a zero-shot evaluation)."""
    from ..data.datasets import split_trajectories

    parts = []
    for src, _ in plans:
        whole = TrajectoryDataset(src.source)
        parts.append(split_trajectories(whole, 0.1)[0] if len(whole) > 1 else whole)
    return parts


def describe_parts(parts: Sequence[TrajectoryDataset]) -> str:
    from pathlib import Path

    out = []
    for p in parts:
        idx = p.indices
        span = (f"trajectory {idx[0]}" if len(idx) == 1 else f"trajectories {idx[0]}-{idx[-1]}"
                if idx == list(range(idx[0], idx[-1] + 1)) else f"{len(idx)} trajectories")
        out.append(f"{span} of {Path(p.path).name}")
    return "statistics of " + ", ".join(out) + " (the training split)"


def field_statistics(parts: Sequence[TrajectoryDataset], progress: bool | None = None):
    """Per channel, the mean and the (population) standard deviation over every trajectory, frame and grid point of
    ``parts`` (float64; non-finite values left out), as upstream statistics files are computed."""
    import numpy as np
    from tqdm.auto import tqdm

    total = s1 = s2 = None
    todo = [(p, i) for p in parts for i in range(len(p))]
    for p, i in tqdm(todo, desc="normalization statistics", unit="trajectory", disable=progress is False or None
                     if progress is None else not progress, leave=False):
        x = p.read(i).numpy().astype(np.float64).reshape(-1, p.channels)
        ok = np.isfinite(x)
        x = np.where(ok, x, 0.0)
        n, a, b = ok.sum(0), x.sum(0), (x * x).sum(0)
        total, s1, s2 = (n, a, b) if total is None else (total + n, s1 + a, s2 + b)
    if total is None:
        raise ConfigError("normalization statistics: no training trajectory to compute them from")
    mean = s1 / np.maximum(total, 1)
    var = np.maximum(s2 / np.maximum(total, 1) - mean * mean, 0.0)
    return mean, np.sqrt(var)


def neutral_statistics(name: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Config overrides giving preset ``name`` (with ``overrides``) mean 0 and std 1 for every channel where its
    contract's normalization wants statistics of the data and it has none: for work that runs the network on random
    tensors (``opzoo benchmark``, shape and speed tests), whose cost does not depend on the values. Empty otherwise."""
    from ..registry.registry import get_registry

    registry = get_registry()
    preset = registry.preset(name)
    contract = preset.contract or registry.contract(preset.backbone)
    norm = contract.normalization if contract is not None else None
    if norm is None or norm.config is None:
        return {}
    args = {**registry.get("backbone", preset.backbone).config_class().to_dict(), **preset.args, **(overrides or {})}
    mode = args.get(norm.switch)
    kind = norm.by_config.get(str(mode), norm.kind) if mode is not None else norm.kind
    mean_key, std_key = norm.config
    if kind != "training-split" or args.get(mean_key):
        return {}
    channels = int(args.get("in_channels", 1))
    return {mean_key: [0.0] * channels, std_key: [1.0] * channels}


# ---- grid and boundary -------------------------------------------------------------------------------------------


def stated_boundaries(plans) -> dict[str, tuple[bool | None, str]]:
    """``{file: (periodic or None, its words)}`` for every file that states a boundary: its own metadata, else the
    training set it is read as (:attr:`opzoo.TrainingSet.periodic`)."""
    stated: dict[str, tuple[bool | None, str]] = {}
    for src, plan in plans:
        t = plan.training_set
        if src.boundary:
            stated[src.path] = (src.periodic, src.boundary)
        elif t is not None and t.periodic is not None:
            stated[src.path] = (t.periodic, f"read as {t.name}, which upstream ran "
                                            f"{'periodic' if t.periodic else 'not periodic'}")
    return stated


def boundary_plan(model: nn.Module, contract: DataContract, plans, user: bool | None = None,
                  name: str | None = None, train: bool = False, adapt: bool = True) -> tuple[dict[str, bool], str]:
    """``(changes, line)``: the boundary ``model`` runs the files with, and the block's line saying it. A model with a
    ``periodic`` flag follows what the files state (:func:`stated_boundaries`: periodic on every axis, or not) in a run
    that adapts it to its data (``train`` and ``adapt``: fine-tuning), and in evaluation where its contract says its
    weights were trained on both (``boundary_follows_data="always"``: MPP, whose upstream gives each dataset's flag
    with the data); otherwise it keeps its flag, said: evaluation runs the weights as they were trained, and a run that
    does not adapt the model (pretraining) trains it with its own. The user's flag (``user``) is kept, a disagreement
    said; files that state different boundaries are refused where the flag would follow them (one model runs one
    boundary). Any other model assumes its contract's boundary, said beside the files'."""
    name = name or model_name(model)
    stated = stated_boundaries(plans)
    words = "; ".join(f"{path}: {w}" for path, (_, w) in stated.items())
    if not hasattr(model.config, "periodic"):
        files = "; ".join(sorted({w for _, w in stated.values()})) or "none"
        return {}, f"boundary: the files state {files}; {name} assumes {contract.boundary}"
    current = bool(model.config.periodic if user is None else user)
    kinds = {p for p, _ in stated.values() if p is not None}
    if user is not None:
        differ = kinds - {current}
        return {}, (f"boundary: periodic={current} as the model args set it" + (
            f", although the data states {words}" if differ else f" (the files state {words or 'none'})"))
    if not (adapt if train else contract.boundary_follows_data == "always"):
        why = ("a run that does not adapt the model (model.adapt: false) trains it with its own flag; "
               "model.args.periodic sets another" if train else
               f"{name}'s weights were trained with it, so evaluation keeps it (fine-tuning follows the files; "
               f"--model-args periodic={str(not current).lower()} runs the other)")
        differ = f"; {why}" if kinds - {current} else ""
        return {}, (f"boundary: the files state {words or 'none'}; {name} runs with periodic={current}{differ} "
                    f"({contract.boundary})")
    if len(kinds) > 1:
        raise ConfigError(f"the data files state different boundaries ({words}): {name} runs one boundary; give it "
                          f"files of one boundary, or set it yourself (model.args.periodic in a run, --model-args "
                          f"periodic=true|false)")
    if not kinds or kinds == {current}:
        return {}, f"boundary: the files state {words or 'none'}; {name} runs with periodic={current} ({contract.boundary})"
    periodic = kinds.pop()
    return {"periodic": periodic}, (
        f"boundary: periodic={periodic} for {name}, as the data states ({words}; {name} was periodic={current}; "
        f"periodic={str(current).lower()} in its model args keeps it: --model-args, model.args in a run)")


def model_resolution(model: nn.Module) -> tuple[int, ...] | None:
    """The resolution a model was pretrained at (``pretrained_cfg['resolution']``), if it says."""
    res = getattr(model, "pretrained_cfg", {}).get("resolution")
    if res is None:
        img = getattr(model.config, "img_size", None)
        dims = getattr(model.config, "spatial_dims", 2)
        if isinstance(img, int):
            res = [img] * dims
        elif isinstance(img, (list, tuple)):
            res = list(img)
    return tuple(int(r) for r in res) if res else None


@dataclass
class GridChoice:
    """The grid a model runs data at, and why (said to the user before any data is resampled)."""

    resolution: tuple[int, ...]
    why: str
    resampled: bool  # some file is not at ``resolution``: it is interpolated

    def line(self, sources: list[TrajectoryDataset], training: bool = False, mode: str = "bilinear",
             source: str = "") -> str:
        """What a command says before it reads data (``mode``: how it is resampled, ``source``: whose way that is)."""
        grids = sorted({tuple(s.spatial) for s in sources})
        text = "x".join(map(str, self.resolution))
        if not self.resampled:
            return f"grid: {text}, the data's own ({self.why})"
        files = ", ".join("x".join(map(str, g)) for g in grids)
        how = f"{mode}{', ' + source if source else ''}"
        trains = "training frames are resampled to it; " if training else ""
        return (f"grid: the model runs at {text} ({self.why}); {trains}inputs are resampled to it ({how}) and "
                f"predictions back: scores are computed at the file's own grid ({files})")


def choose_grid(model: nn.Module, sources: list[TrajectoryDataset], resolution=None, flag: str = "--resolution") \
        -> GridChoice:
    """The one rule for the grid data is brought to: ``resolution`` when the user names one (``flag``); else what
    the backbone asks for given the first file's grid (:meth:`opzoo.Backbone.grid_for`: a model without a
    resolution-bound embedding keeps the data's own); else the model's pretrained grid; else the first file's."""
    first = tuple(sources[0].spatial)
    if resolution:
        grid, why = tuple(int(r) for r in resolution), f"{flag}"
    else:
        grid, why = (model.grid_for(first) if hasattr(model, "grid_for") else (None, ""))
        if grid is None:
            pretrained = model_resolution(model)
            if pretrained:
                patch = getattr(model.config, "patch_size", 1)
                patch = list(patch)[-len(first):] if isinstance(patch, (list, tuple)) else [patch] * len(first)
                own = [-(-n // p) * p for n, p in zip(first, patch)]  # the file's grid, in whole patches
                said = "the file's own" if tuple(own) == first else "the file's own, in whole patches"
                grid, why = pretrained, (f"the model's pretrained grid; {flag} {' '.join(map(str, own))} runs it at "
                                         f"{said}" if len(pretrained) == len(first) and tuple(own) != pretrained else
                                         "the model's pretrained grid")
            else:
                grid, why = first, "the first file's"
    return GridChoice(tuple(grid), why, any(tuple(s.spatial) != tuple(grid) for s in sources))


def frame_shape(model: nn.Module, resolution: tuple[int, ...], channels: int | None = None,
                contract: DataContract | None = None) -> FrameShape:
    """The frames ``model`` takes at ``resolution``: its channels (padded with its contract's pad value) and how data
    is resampled to it."""
    c, contract = model.config, contract or contract_of(model)
    return FrameShape(tuple(resolution), channels or c.in_channels, c.in_timesteps, c.out_timesteps,
                      pad_value_of(model, contract), contract.resample)


# ---- files -------------------------------------------------------------------------------------------------------


def array_order_lines(paths, layout: str | None) -> list[str]:
    """A plain array carries no axis names: how each of ``paths`` is read, and how to read it otherwise (a line each)."""
    from ..data.readers.arrays import SUFFIXES

    lines = []
    for path in paths:
        if str(path).lower().endswith(SUFFIXES) and (layout or "array").partition(":")[0] == "array":
            src = open_trajectories(path, layout)
            axes = ["N", *"XYZ"[:len(src.spatial)], "T", "C"]
            how = src.source.info.axis_note or ("--layout " + layout if layout else "the canonical order")
            lines.append(f"data: {path} read as [{', '.join(axes)}] = {list(src.source.shape)} ({how}; another: "
                         f"--layout array:<axes>)")
    return lines


def fit_files(model: nn.Module, paths, resolution=None, layout: str | None = None, fields: list[str] | None = None,
              say: Callable[[str], None] = print, *, field_map=None, training_set: str | None = None,
              test_fraction: float | None = None, name: str | None = None,
              keep_boundary: bool = False) -> tuple[nn.Module, FrameShape, list[TrajectoryDataset]]:
    """``(model, frame shape, sources)``: the files ``paths`` opened and fitted to ``model`` (:func:`fit_data`); how a
    plain array is read and the fit block are said first (``say``: a line at a time). Statistics a normalization needs
    come from each file's training part by training's rule (``test_fraction``, default 0.1). ``keep_boundary``: the
    user set the model's ``periodic`` flag (:func:`fit_data`)."""
    fitted = fit_files_block(model, paths, resolution, layout, fields, say, field_map=field_map,
                             training_set=training_set, test_fraction=test_fraction, name=name,
                             keep_boundary=keep_boundary)
    return fitted.model, fitted.frame_shape, fitted.sources


def fit_files_block(model: nn.Module, paths, resolution=None, layout: str | None = None,
                    fields: list[str] | None = None, say: Callable[[str], None] = print, *, field_map=None,
                    training_set: str | None = None, test_fraction: float | None = None,
                    name: str | None = None, keep_boundary: bool = False) -> FittedData:
    """:func:`fit_files`, returning the whole :class:`FittedData` (its block and record too)."""
    from ..data.datasets import split_trajectories

    for line in array_order_lines(paths, layout):
        say(line)
    sources = [open_trajectories(p, layout, fields) for p in paths]
    parts = None
    if test_fraction is not None:
        parts = []
        for s in sources:
            try:
                parts.append(split_trajectories(s, test_fraction)[0])
            except DataFormatError as e:
                raise ConfigError(str(e)) from None
    fitted = fit_data(model, sources, resolution, field_map=field_map, training_set=training_set, stats_from=parts,
                      name=name, keep_boundary=keep_boundary)
    say_block(fitted, say)
    return fitted


def say_block(fitted: FittedData, say: Callable[[str], None] = print) -> None:
    """The fit block: a header line and one line per decision."""
    files = ", ".join(dict.fromkeys(s.path for s in fitted.sources))
    say(f"fit of {fitted.record.get('model')} to {files} (docs/data-contract.md):")
    for line in fitted.lines:
        say("  " + line)


def with_file_channels(model: nn.Module, sources: list[TrajectoryDataset]) -> nn.Module:
    """A model that takes any number of channels (its contract's ``other_fields="any"``) at the files' own count."""
    return fit_data(model, sources).model


def open_trajectories(path: str, layout: str | None = None, fields: list[str] | None = None) -> TrajectoryDataset:
    """A file's trajectories (``fields``: the names of a plain array's channels), or a ConfigError naming the file (a
    run's data is part of its config)."""
    try:
        return TrajectoryDataset(path, layout, fields=fields)
    except (DataFormatError, ValueError, OSError) as e:
        text = str(e) or type(e).__name__
        raise ConfigError(text if text.startswith(str(path)) else f"{path}: {text}") from None


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
