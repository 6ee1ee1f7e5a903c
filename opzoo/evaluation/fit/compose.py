"""The fit itself (:func:`fit_data`): each decision made by its own module, in order: the number of spatial
dimensions, fields (:mod:`.fields`), channels (:mod:`.channels`), normalization (:mod:`.normalization`), boundary
(:mod:`.boundary`), one rebuild of the model with every change, then the grid (:mod:`.grid`); each a line of the
block."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from torch import nn

from ...data import FrameShape, TrajectoryDataset
from ...errors import ConfigError
from ...registry.contract import DataContract, Expression
from ..shape_check import check_resolution
from .boundary import boundary_plan
from .channels import plan_channels
from .contract import contract_of, model_fields, model_name
from .fields import FieldPlan, apply_plan, field_map_of, fitted_names, per_file_lines, plan_fields
from .grid import GridChoice, choose_grid, frame_shape
from .normalization import normalization


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


def fit_data(model: nn.Module, sources: list[TrajectoryDataset], resolution=None, flag: str = "--resolution",
             grid_from: list[TrajectoryDataset] | None = None, channels: int | None = None,
             adapt_channels: bool = True, *, field_map: "str | Mapping[str, str] | None" = None,
             training_set: str | None = None, train: bool = False, targets: Mapping[str, Any] | None = None,
             stats_from: list[TrajectoryDataset] | None = None, seed: int = 0,
             progress: bool | None = None, name: str | None = None, keep_boundary: bool = False) -> FittedData:
    """Fit ``sources`` to ``model`` (see :mod:`opzoo.evaluation.fit`) and return the fitted model, frames and block.

    ``grid_from``: the files that choose the grid (default all; a run: its training splits); ``resolution`` names one
    (``flag`` says where from). ``channels``: the frames' channel count (default the model's). ``adapt_channels``: a
    model that takes any channel count is brought to the files' own. ``train``: a training run, which may adapt the
    model's channel-shaped tensors to other fields; ``targets``: the run's other shape changes for
    :func:`opzoo.model_io.adapt.adapt_model` (``in_timesteps``, ``img_size``, ``periodic``, labels per channel), made
    in the same rebuild. ``stats_from``: the trajectories a normalization's statistics come from (default: each file's
    training part by training's rule). ``name``: how the block names the model (default its preset's).
    ``keep_boundary``: the user set the model's ``periodic`` flag or its per-axis ``boundaries``
    (``model.args``, ``--model-args``): it is kept where the data state another boundary (said); otherwise the flag follows the data (:func:`boundary_plan`). A
    file that does not fit is a ConfigError naming the flag that fits it."""
    from ...model_io.adapt import adapt_model

    contract = contract_of(model)
    name = name or model_name(model)
    check_dimensions(model, contract, sources, name)
    targets = dict(targets or {})
    may_adapt = train and adapt_channels
    forced = targets.pop("in_channels", None)
    plans = field_plans(model, contract, sources, field_map, training_set, may_adapt, name, forced)
    lines = [line for _, p in plans for line in per_file_lines(p.lines, p, plans)]
    changes, subset_config, channel_lines = plan_channels(model, contract, plans, name, forced, adapt_channels,
                                                          may_adapt)
    lines += channel_lines
    config, norm_lines, norm_record = normalization(model, contract, plans, changes, stats_from, progress, name)
    config = {**config, **subset_config}
    c = model.config
    key = "boundaries" if hasattr(c, "boundaries") else "periodic"
    user = targets[key] if key in targets else getattr(c, key, None) if keep_boundary else None
    boundary, boundary_words = boundary_plan(model, contract, plans, user, name, train, may_adapt)
    targets.update(boundary)
    channel_map = field_correspondence(model, contract, plans)
    adapted = model
    if changes or targets or config or channel_map is not None:
        adapted = adapt_model(model, seed=seed, config=config, channel_map=channel_map, **changes, **targets)
        if adapted is not model:
            adapted.eval() if not model.training else adapted.train()
            lines += adaptation_lines(model, adapted, plans, channel_map, name)
    names = fitted_names(model, plans, adapted)
    if adapted is not model:  # the adapted model says what it reads (the one given is left as it was)
        modes = {p.mode for _, p in plans}
        named = {"fields": names} if names and ("in_channels" in changes or modes & {"adapt", "subset"}) else {}
        adapted.pretrained_cfg = {**adapted.pretrained_cfg, **named,
                                  **({"normalization": norm_record} if norm_record else {})}
    grid = choose_grid(adapted, grid_from or sources, resolution, flag)
    where = flag if resolution else f"{sources[0].path} ({'the run' if train else 'the model'}'s resolution)"
    check_resolution(adapted, grid.resolution, where, flag)  # every command refuses a grid the model cannot run alike
    shape = frame_shape(adapted, grid.resolution, channels, contract)
    check_first_windows(adapted, sources, shape)
    lines.append(grid.line(sources, training=train, mode=shape.resample, source=contract.resample_source))
    lines.append(boundary_words)
    lines += norm_lines
    drawn = adapted.random_inference() if hasattr(adapted, "random_inference") else ""
    if drawn:
        lines.append(f"inference: {drawn}")
    record = {"model": name, "contract": contract.name, "files": [s.path for s in dict.fromkeys(
        s for s, _ in plans)], "fields": names, "training_sets": sorted(
        {p.training_set.name for _, p in plans if p.training_set}), "grid": list(grid.resolution),
        "resample": shape.resample, "pad_value": shape.pad_value, "lines": lines}
    if norm_record:
        record["normalization"] = norm_record
    return FittedData(adapted, shape, grid, sources, lines, record)


FIRST_WINDOWS = 4  # trajectories per file whose first input window the model's check_window sees


def check_first_windows(model: nn.Module, sources: list[TrajectoryDataset], shape: FrameShape) -> None:
    """The model's own refusal of input values (:meth:`opzoo.Backbone.check_window`) on the first input window of each
    file's first :data:`FIRST_WINDOWS` trajectories, as the model will read them; nothing is read for a model that
    takes any values."""
    import torch

    from ...contracts.interfaces import Backbone

    check = getattr(type(model), "check_window", None)
    if check is None or check is Backbone.check_window:
        return
    t_in = model.config.in_timesteps
    for src in dict.fromkeys(sources):
        if src.n_steps < t_in or not len(src):
            continue  # too short to run: said by the command that runs it
        windows = [src.frames(i, shape, 0, t_in)[0] for i in range(min(len(src), FIRST_WINDOWS))]
        try:
            model.check_window(torch.stack(windows).to(next(model.parameters()).dtype))
        except ConfigError as e:
            raise ConfigError(f"{src.path}: {e}") from None


def field_correspondence(model: nn.Module, contract: DataContract, plans) -> list[int | None] | None:
    """For a model that names its fields, adapted to a file's own (``adapt``): the pretrained channel each new one
    keeps, by field name (None: a field it did not have); None otherwise (channels by position)."""
    old = model_fields(model, contract)
    adapting = [p for _, p in plans if p.mode == "adapt"]
    if old is None or not adapting:
        return None
    mapping = [old.index(n) if n in old else None for n in adapting[0].names]
    return None if mapping == list(range(len(old))) else mapping


def adaptation_lines(model: nn.Module, adapted: nn.Module, plans, channel_map, name: str) -> list[str]:
    """What the adaptation did to the channel-shaped tensors, as the adapted model records it
    (:func:`opzoo.model_io.adapt.adapt_model`: ``adaptation_by``, ``adaptation_fills``): which weights each of the
    files' fields is read through (its own, by name; another field's, by position), and how the weights of a new
    channel start, tensor by tensor."""
    fills = getattr(adapted, "adaptation_fills", {}) or {}
    if (adapted.config.in_channels == model.config.in_channels and channel_map is None) or \
            any(p.mode == "subset" for _, p in plans):  # state slots: the channels' line says which slot is whose
        return []
    names = fitted_names(model, plans, adapted) or [f"channel {i}" for i in range(adapted.config.in_channels)]
    old = model_fields(model) or [f"channel {i}" for i in range(model.config.in_channels)]
    by_name = getattr(adapted, "adaptation_by", "position") == "name"
    keeps = getattr(adapted, "adaptation_keeps", True)
    source = [None if not keeps else channel_map[i] if by_name else (i if i < len(old) else None)
              for i in range(len(names))]
    parts = []
    own = [n for n, j in zip(names, source) if j is not None and old[j] == n]
    through = [f"{n} through {old[j]}'s" for n, j in zip(names, source) if j is not None and old[j] != n]
    new = [n for n, j in zip(names, source) if j is None]
    if own:
        parts.append(f"{', '.join(own)} keep{'s' if len(own) == 1 else ''} {'its' if len(own) == 1 else 'their'} own "
                     f"weights ({'by field name' if by_name else 'by position'})")
    if through:
        parts.append(f"read by position: {', '.join(through)} weights ({name}'s layout keeps the weights of a channel "
                     f"by its position, whatever it is named)")
    zero = sorted(t for t, f in fills.items() if f == "zero")
    init = sorted(t for t, f in fills.items() if f == "init")
    if new:
        starts = ([f"in {', '.join(zero)} their slices start at zero (the pretrained function is unchanged on the "
                   f"other channels)"] if zero else []) + ([f"in {', '.join(init)} freshly initialized"] if init else [])
        parts.append(f"{', '.join(new)} {'is' if len(new) == 1 else 'are'} new to {name}: "
                     + ("; ".join(starts) if starts else f"no tensor of {name} changes shape"))
    dropped = [n for j, n in enumerate(old) if j not in source and not n.startswith("channel ")]
    if dropped:
        parts.append(f"{', '.join(dropped)} of {name}'s pretraining {'is' if len(dropped) == 1 else 'are'} dropped")
    return [f"channels: {'; '.join(parts)}"] if parts else []


def check_dimensions(model: nn.Module, contract: DataContract, sources: list[TrajectoryDataset], name: str) -> None:
    """A file of another number of spatial dimensions than the model's is refused, naming both shapes."""
    dims = getattr(model.config, "spatial_dims", None)
    for src in sources:
        if dims is not None and len(src.spatial) != dims and dims in (1, 2, 3):
            c = model.config
            shape = ", ".join([f"N={src.shape[0]}", *(f"{a}={n}" for a, n in zip("XYZ", src.spatial)),
                               f"T={src.n_steps}", f"C={src.channels}"])
            d = len(src.spatial)
            other = (f"{name} runs {d}-D data when built so: --model-args spatial_dims={d} (model.args in a run, "
                     f"opzoo.load(..., spatial_dims={d}))" if d in contract.spatial_dims else f"use a {d}-D model")
            raise ConfigError(f"{src.path}: {d}-D data shaped [{shape}], but {name} is a {dims}-D "
                              f"model that takes [N, {', '.join('XYZ'[:dims])}, T, C] with T_in={c.in_timesteps}, "
                              f"C={c.in_channels}; no adaptation changes the number of spatial dimensions: check the "
                              f"file's axis order (--layout array:<axes>) or {other}")
        if dims is None and len(src.spatial) not in contract.spatial_dims:
            takes = " or ".join(f"{d}-D" for d in contract.spatial_dims)
            raise ConfigError(f"{src.path}: {len(src.spatial)}-D data, but {name} takes {takes} data; no adaptation "
                              f"changes the number of spatial dimensions: check the file's axis order (--layout "
                              f"array:<axes>) or use a {len(src.spatial)}-D model")


def field_plans(model: nn.Module, contract: DataContract, sources: list[TrajectoryDataset], field_map, training_set,
                may_adapt: bool, name: str, forced: int | None) -> list[tuple[TrajectoryDataset, FieldPlan]]:
    """Each file's field plan (:func:`.fields.plan_fields`), applied to it (once per open file); ``field_map`` and
    ``training_set``: one for every file, or a list of one per source."""
    fmaps = [field_map_of(m) for m in (field_map if isinstance(field_map, (list, tuple)) else
                                        [field_map] * len(sources))]
    sets = list(training_set) if isinstance(training_set, (list, tuple)) else [training_set] * len(sources)
    plans, seen = [], set()
    for src, fmap, tset in zip(sources, fmaps, sets):
        if id(src.source) in seen:
            continue
        plan = plan_fields(model, contract, src, fmap, tset, may_adapt, name)
        if forced is not None and plan.mode == "named" and forced != len(plan.steps):
            plan = FieldPlan("adapt", [(f, Expression(f, a=f)) for f in src.source.own_fields], lines=[
                f"fields: the file's own ({', '.join(src.source.own_fields)}): model.args.in_channels={forced}"])
        seen.add(id(src.source))
        apply_plan(src, plan)
        plans.append((src, plan))
    return plans


__all__ = ["FittedData", "check_dimensions", "field_plans", "fit_data"]
