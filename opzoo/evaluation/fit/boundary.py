"""The boundary: what the files state (or the training set a file is read as) and what the model runs with
(:func:`boundary_plan`)."""

from __future__ import annotations

from torch import nn

from ...errors import ConfigError
from ...registry.contract import DataContract
from .contract import model_name


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
    if hasattr(model.config, "boundaries"):
        return axis_boundary_plan(model, contract, plans, user, name, train, adapt)
    stated = stated_boundaries(plans)
    words = "; ".join(f"{w} ({path})" for path, (_, w) in stated.items())  # "periodic (ns.h5)"
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
        f"boundary: periodic={periodic} for {name}, as the data states: {words}; {name} was periodic={current} "
        f"(periodic={str(current).lower()} in its model args keeps it: --model-args, model.args in a run)")


def stated_axis_boundaries(plans, dims: int) -> dict[str, tuple[tuple[str, ...], str]]:
    """``{file: (per-axis boundaries, how known)}`` for every file that states its boundary per axis (The Well's
    ``boundary_conditions``), or periodic on every axis (its own words, or the training set it is read as)."""
    stated: dict[str, tuple[tuple[str, ...], str]] = {}
    for src, plan in plans:
        axes = src.axis_boundaries
        if axes is not None and len(axes) == dims:
            stated[src.path] = (tuple(axes), "its boundary_conditions")
            continue
        periodic, words = stated_boundaries([(src, plan)]).get(src.path, (None, ""))
        if periodic:
            stated[src.path] = (("periodic",) * dims, words)
    return stated


def axis_boundary_plan(model: nn.Module, contract: DataContract, plans, user, name: str, train: bool,
                       adapt: bool) -> tuple[dict[str, tuple[str, ...]], str]:
    """:func:`boundary_plan` for a model that takes each axis's boundary (``config.boundaries``: periodic, wall, open,
    or before/after as ``wall/open``; None: periodic on every axis; Walrus's ``bcs``): the same rules over the per-axis
    boundaries the files state (:func:`stated_axis_boundaries`)."""
    c = model.config
    mine = c.boundaries if user is None else user
    current = tuple(mine) if mine is not None else ("periodic",) * int(c.spatial_dims)
    shown = ",".join(current)
    stated = stated_axis_boundaries(plans, len(current))
    words = "; ".join(f"{','.join(b)} ({path}, {how})" for path, (b, how) in stated.items())
    kinds = {b for b, _ in stated.values()}
    unstated = [src.path for src, _ in plans if src.path not in stated]
    silent = (f"; {', '.join(unstated)} state{'s' if len(unstated) == 1 else ''} no boundary per axis: "
              f"{name} runs {'it' if len(unstated) == 1 else 'them'} with its own" if unstated else "")
    if user is not None:
        differ = kinds - {current}
        return {}, (f"boundary: boundaries={shown} as the model args set them" + (
            f", although the data states {words}" if differ else f" (the files state {words or 'none per axis'})"))
    if not (adapt if train else contract.boundary_follows_data == "always"):
        differ = f"; {name}'s weights were trained with them, so evaluation keeps them" if kinds - {current} else ""
        return {}, (f"boundary: the files state {words or 'none per axis'}; {name} runs with boundaries={shown}"
                    f"{differ}{silent}")
    if len(kinds) > 1:
        raise ConfigError(f"the data files state different boundaries ({words}): {name} runs one boundary per axis; "
                          f"give it files of one boundary, or set it yourself (--model-args boundaries=...)")
    if not kinds or kinds == {current}:
        return {}, (f"boundary: the files state {words or 'none per axis'}; {name} runs with boundaries={shown}"
                    f"{silent} (--model-args boundaries=periodic,wall,... sets them)")
    boundaries = kinds.pop()
    return {"boundaries": boundaries}, (
        f"boundary: boundaries={','.join(boundaries)} for {name}, as the data states: {words}; {name} had "
        f"boundaries={shown}{silent}")


__all__ = ["axis_boundary_plan", "boundary_plan", "stated_axis_boundaries", "stated_boundaries"]
