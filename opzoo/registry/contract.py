"""A family's data contract: what it takes from the user's file, said once in its table (docs/data-contract.md).

A :class:`DataContract` states, for the weights of one family and the code that trained them:

- the fields it knows by name (``fields``; None: it reads channels by position), in its units;
- how each of its upstream training sets was read into those fields (:class:`TrainingSet`: a field as another field
  of the file or an expression of them, the grid transposed), so that a file laid out like one of them is fed as
  upstream fed it;
- what fills a field a file lacks (``absent``), and what a rollout feeds back in it;
- how a file of other fields is taken (``other_fields``: the channel-shaped tensors adapted, as upstream fine-tunes;
  padded; any count; a subset of the fields it names, each into its own slot (MPP's state slots); or refused);
- its normalization (:class:`Normalization`) and where it breaks;
- the grids it runs and how data is resampled to them, and the boundary it assumes.

The one fit (:func:`opzoo.evaluation.fit.fit_data`) reads it and decides, for a model and a file, each of these, says
the decisions in one block, and records them. Nothing here imports torch or numpy.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal, Mapping, Optional, Union

from ..contracts.channels import PAD  # a channel with no field: padding, filled with the model's pad value

OtherFields = Literal["adapt", "pad", "any", "subset", "refuse"]
NormalizationKind = Literal["per-sample", "constants", "training-split", "none"]

_NAME = r"[A-Za-z_][A-Za-z0-9_.:\-]*"
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_EXPRESSION = re.compile(rf"^\s*(?:(?P<number>{_NUMBER})|(?P<func>log10)\(\s*(?P<fa>{_NAME})\s*\)|(?P<neg>-)?\s*"
                         rf"(?P<a>{_NAME})(?:\s*(?P<op>[-+*/])\s*(?:(?P<b>{_NAME})|(?P<c>{_NUMBER})))?)\s*$")


@dataclasses.dataclass(frozen=True)
class Expression:
    """One model field computed from a file's fields: ``a``, ``-a``, ``a op b``, ``a op number``, ``log10(a)`` or a
    number (``op`` one of ``+ - * /``). ``text`` is how it was written (said to the user)."""

    text: str
    a: Optional[str] = None
    op: Optional[str] = None
    b: Optional[str] = None
    number: Optional[float] = None
    negate: bool = False
    func: Optional[str] = None  # "log10": the base-10 logarithm of ``a`` (Walrus's astrophysical sets)

    @property
    def names(self) -> tuple[str, ...]:
        """The file's fields it reads."""
        return tuple(n for n in (self.a, self.b) if n is not None)

    @property
    def constant(self) -> bool:
        return self.a is None


def parse_expression(text: str, where: str = "expression") -> Expression:
    """``"momentum_x / density"`` -> :class:`Expression`; ValueError naming ``where`` for anything else."""
    m = _EXPRESSION.match(str(text))
    if m is None or (m["neg"] and m["op"]):
        raise ValueError(f"{where}: {text!r} is not a field, -field, a number, log10(field), or 'field OP field|number' "
                         f"with OP one of + - * /")
    if m["func"]:
        return Expression(str(text).strip(), a=m["fa"], func=m["func"])
    if m["number"] is not None:
        return Expression(str(text).strip(), number=float(m["number"]))
    return Expression(str(text).strip(), a=m["a"], op=m["op"], b=m["b"],
                      number=float(m["c"]) if m["c"] is not None else None, negate=bool(m["neg"]))


@dataclasses.dataclass(frozen=True)
class TrainingSet:
    """How upstream read one of its training sets into the model's fields.

    ``name`` is upstream's name for it; a file is read this way when it names itself so (The Well's root attribute
    ``dataset_name``) or when the user says so (``--training-set NAME``). ``fields`` maps a model field to an
    expression of the file's fields (``{"density": "buoyancy"}``, ``{"velocity_x": "momentum_x / density"}``,
    ``{"pressure": "pressure - 2.513"}``); a model field it does not map is read by its own name. ``transpose``: the
    file's two spatial axes were swapped (H <-> W) before anything else. ``mean``: per model field, the normalization
    mean upstream used for this set instead of the family's (Poseidon's mean pressure). ``periodic``: the boundary
    upstream ran this set with, for a model with a ``periodic`` flag (MPP's ``bcs``): a file read as the set that
    states no boundary of its own is taken as that (None: upstream does not say). ``source``: where upstream does it
    (path @ commit)."""

    name: str
    fields: Mapping[str, str] = dataclasses.field(default_factory=dict)
    transpose: bool = False
    mean: Mapping[str, float] = dataclasses.field(default_factory=dict)
    source: str = ""
    note: str = ""  # what is unverified or differs from upstream, said with the map
    periodic: Optional[bool] = None

    def __post_init__(self) -> None:
        for target, text in self.fields.items():
            parse_expression(text, f"training set {self.name!r}: field {target!r}")

    def words(self) -> str:
        """``density := buoyancy; grid transposed`` (how the map is said)."""
        parts = ["grid transposed (H <-> W)"] if self.transpose else []
        parts += [f"{t} := {e}" for t, e in self.fields.items()]
        parts += [f"{f}'s normalization mean {v:g}" for f, v in self.mean.items()]
        if self.periodic is not None:
            parts.append(f"trained {'periodic' if self.periodic else 'not periodic'}")
        return "; ".join(parts) or "every field by its own name"


@dataclasses.dataclass(frozen=True)
class Normalization:
    """How the family's weights expect their fields normalized.

    ``kind``:

    - ``per-sample``: the model standardizes each sample itself (DPOT's ``normalize``, MORPH's RevIN): nothing to fit;
    - ``constants``: the pretraining data's constants, held in the model's config (``config``: the names of its mean
      and std per channel); a field without one (a new field after the channels were adapted) gets its training
      split's statistics;
    - ``training-split``: each field z-scored by its statistics over the training split (as upstream z-scored each
      dataset by its own statistics): the fit computes them and the model carries them in ``config``;
    - ``none``: the model takes the fields as they are.

    ``by_config``: the kind a value of the model config's field ``switch`` (default ``normalization``) selects instead
    (``{"instance": "per-sample"}``), said in the words of ``alternatives``. ``config=None`` with ``constants``: the
    model holds its constants in its own layout and the fit only says so. ``dataset_mean``: fields whose mean upstream took per dataset (Poseidon's
    pressure): a training set's ``mean`` where the file is one, else its training split's mean, with the constant std.
    A std below ``min_std`` is raised to it (a constant field: its deviation is 0 whatever the scale)."""

    kind: NormalizationKind
    words: str
    breaks: str = ""
    source: str = ""
    config: Optional[tuple[str, str]] = None
    by_config: Mapping[str, NormalizationKind] = dataclasses.field(default_factory=dict)
    switch: str = "normalization"
    alternatives: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dataset_mean: tuple[str, ...] = ()
    min_std: float = 1e-12

    def __post_init__(self) -> None:
        kinds = {self.kind, *self.by_config.values()}
        if "training-split" in kinds and self.config is None:
            raise ValueError("normalization: training-split statistics need config=(mean field, std field), the model "
                             "config fields that hold them")
        missing = sorted(set(self.by_config.values()) - {self.kind} - set(self.alternatives))
        if missing:
            raise ValueError(f"normalization: say in alternatives what {', '.join(missing)} computes")


@dataclasses.dataclass(frozen=True)
class DataContract:
    """What a family takes from the user's data (see the module doc). ``source`` columns cite upstream's code."""

    name: str
    normalization: Normalization
    fields: Optional[tuple[str, ...]] = None
    units: str = "the pretraining data's units"
    training_sets: tuple[TrainingSet, ...] = ()
    absent: Optional[Mapping[str, float]] = None
    absent_source: str = ""
    pad_value: Optional[float] = None  # a channel-by-position model: what fills the channels a file lacks
    pad_source: str = ""
    other_fields: OtherFields = "refuse"
    other_fields_source: str = ""
    rollout_note: str = ""  # a rollout refills padded and absent channels (one rule): how that relates to upstream
    grid: str = "its pretrained grid; other grids are resampled to it and predictions back"
    resample: Literal["bilinear", "bicubic"] = "bilinear"
    resample_source: str = ""
    boundary: str = "not stated by upstream"
    # a model with a ``periodic`` flag: where the flag follows the boundary the data state. "always": its weights were
    # trained on both, the flag given with each dataset (MPP's bcs); "fine-tuning": trained with one flag, which
    # evaluation keeps (another runs the weights as they were never trained), while fine-tuning follows the data
    boundary_follows_data: Literal["always", "fine-tuning"] = "fine-tuning"
    spatial_dims: tuple[int, ...] = (2,)
    # other_fields="subset": the model config's fields that name each channel's field and the fields it has (its
    # vocabulary of slots, which fine-tuning on a new field extends), e.g. ("fields", "state_names")
    subset_config: Optional[tuple[str, str]] = None
    # other_fields="subset": slots of the vocabulary its pretraining never used, in order; a new field takes the first
    # free one (the slot renamed, its weights kept) before the vocabulary grows, as its upstream numbers a new
    # dataset's fields after the used ones (MPP's unused.10, unused.11)
    unused_slots: tuple[str, ...] = ()
    unused_slots_source: str = ""

    def __post_init__(self) -> None:
        if (self.other_fields == "subset") != (self.subset_config is not None):
            raise ValueError(f"data contract {self.name!r}: other_fields='subset' and subset_config go together (the "
                             f"config fields naming each channel's slot and the slots)")
        object.__setattr__(self, "training_sets", tuple(self.training_sets))
        if self.fields is not None:
            object.__setattr__(self, "fields", tuple(self.fields))
        names = [t.name for t in self.training_sets]
        if len(set(names)) != len(names):
            raise ValueError(f"data contract {self.name!r}: a training set appears twice")
        if self.fields is not None:
            for t in self.training_sets:
                unknown = sorted(set(t.fields) - set(self.fields))
                if unknown:
                    raise ValueError(f"data contract {self.name!r}: training set {t.name!r} maps {unknown}, which are "
                                     f"not among its fields {list(self.fields)}")
        if self.absent and self.fields is not None and set(self.absent) - set(self.fields):
            raise ValueError(f"data contract {self.name!r}: absent names {sorted(set(self.absent) - set(self.fields))}, "
                             f"not among its fields")

    def training_set(self, name: str) -> TrainingSet:
        for t in self.training_sets:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.training_sets) or "none"
        raise KeyError(f"{name!r} is none of the training sets the {self.name} contract knows ({known})")

    def summary(self, args: Optional[Mapping[str, Any]] = None) -> list[str]:
        """The contract as ``opzoo info`` says it: a line per decision; ``args`` (a preset's config arguments) say
        which normalization the preset runs where its config's switch selects another (``by_config``)."""
        n = self.normalization
        lines = [f"fields: {', '.join(self.fields) if self.fields else 'by position'} ({self.units})"]
        if self.training_sets:
            lines.append("training sets: " + "; ".join(f"{t.name}: {t.words()}" for t in self.training_sets))
        if self.absent:
            lines.append("absent fields: " + ", ".join(f"{k} as {v:g}" for k, v in self.absent.items())
                         + (f" ({self.absent_source})" if self.absent_source else ""))
        if self.pad_value is not None:
            lines.append(f"fewer channels: padded with {self.pad_value:g}" + (f" ({self.pad_source})"
                                                                              if self.pad_source else ""))
        lines.append(f"other fields: {self.other_fields}" + (f" ({self.other_fields_source})"
                                                             if self.other_fields_source else ""))
        mode = (args or {}).get(n.switch)
        kind = n.by_config.get(str(mode), n.kind) if mode is not None else n.kind
        if kind == n.kind:
            lines.append(f"normalization: {n.kind}: {n.words}" + (f"; breaks: {n.breaks}" if n.breaks else ""))
        else:
            words = n.alternatives.get(kind, "")
            lines.append(f"normalization: {kind}: {words}" if f"{n.switch}=" in words else
                         f"normalization: {kind} ({n.switch}={mode!r})" + (f": {words}" if words else ""))
        dims = ", ".join(f"{d}-D" for d in self.spatial_dims)
        lines.append(f"grid: {dims}; {self.grid}; resampled {self.resample}")
        lines.append(f"boundary: {self.boundary}")
        return lines

    def fill(self, field: str) -> Optional[float]:
        """What fills ``field`` when a file lacks it (None: it cannot be absent)."""
        return None if self.absent is None else self.absent.get(field)


FieldMapValue = Union[str, Mapping[str, str]]


MAX_FIELD_MAP = 1024  # pairs in one --field-map or run config's field_map (a file with more fields is not a PDE's)


def parse_field_map(text: "str | Mapping[str, str] | None", where: str = "--field-map") -> dict[str, str]:
    """``"u=velocity_x,v=velocity_y"`` (or a mapping) -> ``{"u": "velocity_x", "v": "velocity_y"}``: the file's name
    on the left, the model's on the right. ValueError naming ``where`` for a malformed pair, a name given twice, or more
    than :data:`MAX_FIELD_MAP` pairs (checked in time linear in the pairs)."""
    if not text:
        return {}
    if isinstance(text, Mapping):
        if len(text) > MAX_FIELD_MAP:
            raise ValueError(f"{where}: {len(text)} pairs, more than {MAX_FIELD_MAP}")
        pairs = [(k, v, f"{k}={v}") for k, v in text.items()]
    else:
        text = str(text)
        if len(text) > 64 * MAX_FIELD_MAP:
            raise ValueError(f"{where}: {len(text)} characters, more than a map of {MAX_FIELD_MAP} pairs takes")
        text = re.sub(r"\s*=\s*", "=", text.strip())  # "u = velocity_x" is one pair
        if re.search(r"(^|,)\s*(,|$)", text):
            raise ValueError(f"{where}: {text!r} has an empty pair (a comma with no FILE_FIELD=MODEL_FIELD on one "
                             f"side): give pairs separated by single commas, e.g. u=velocity_x,v=velocity_y")
        parts = [p for p in re.split(r"[,\s]+", text) if p]
        if len(parts) > MAX_FIELD_MAP:
            raise ValueError(f"{where}: {len(parts)} pairs, more than {MAX_FIELD_MAP}")
        pairs = [(*p.split("=", 1), p) if "=" in p else (p, None, p) for p in parts]
    out: dict[str, str] = {}
    targets: set[str] = set()
    for file_name, model_name, given in pairs:
        if model_name == PAD:
            raise ValueError(f"{where}: {given}: a file's field is not read as padding; a model with a padded channel "
                             f"reads channels by position (the file's fields fill its channels in order): leave "
                             f"{where} out")
        if not file_name or not model_name or not re.fullmatch(_NAME, str(file_name)) \
                or not re.fullmatch(_NAME, str(model_name)):
            raise ValueError(f"{where}: {given!s} is not FILE_FIELD=MODEL_FIELD (e.g. u=velocity_x,v=velocity_y)")
        if file_name in out or model_name in targets:
            raise ValueError(f"{where}: {file_name if file_name in out else model_name} is mapped twice")
        out[str(file_name)] = str(model_name)
        targets.add(str(model_name))
    return out


__all__ = ["DataContract", "TrainingSet", "Normalization", "Expression", "parse_expression", "parse_field_map", "PAD"]
