"""A checkpoint family declared as one table, as a timm model file declares its ``default_cfgs``.

A :class:`CheckpointFamily` is the rows of a family (:class:`Variant`: a preset name, its sizes, where its weights
are, and the row's own facts in ``data``) and the rules that turn a row into a preset: its load checks, provenance
facts, ``pretrained_cfg``, reported results and card fields. ``registry.register_family(family)`` registers one preset
per row. Adding a checkpoint to a family (a new size, a new dataset) is adding a row: nothing else changes.

A rule is a function of the :class:`Variant` (or a constant for every row). The card is one template for the whole
family: its ``$field`` placeholders are filled per row from ``card_fields(variant)`` when the preset is registered;
``${name}``, ``${architecture}``, ``${parameters}`` and ``${config}`` are left for the card's rendering on save.

Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar, Union

from ..errors import ConfigError
from .contract import DataContract
from .provenance import Fact, PretrainedCheck, Result

SAVE_TIME_FIELDS = ("name", "architecture", "parameters", "config")  # filled by opzoo.model_io.model_card on save

T = TypeVar("T")
PerVariant = Union[T, Callable[["Variant"], T]]


@dataclasses.dataclass(frozen=True)
class Variant:
    """One checkpoint of a family: a row of its table.

    ``args`` are the model's config args on top of the family's; ``weights`` is the weights file in the family's
    repo (``repo_id``/``revision`` override the family's); ``extra_files`` are other files of the repo the converter
    or checks read; ``data`` holds the row's own facts (a size's name, a reported number, a Hub subfolder) that the
    family's rules read."""

    name: str
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    weights: str | None = None
    repo_id: str | None = None
    revision: str | None = None
    extra_files: tuple[str, ...] = ()
    converter_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_files", tuple(self.extra_files))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        count = self.data.get("params")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            # the conformance suite holds every preset to its count: a string ("7M") would be printed, never checked
            raise ConfigError(f"variant {self.name!r}: data['params'] is the exact parameter count as an int (e.g. "
                              f"30130; format it in card_fields), got {count!r}")

    def __getitem__(self, key: str) -> Any:
        """``variant["size"]``: the row's own fact ``key`` (an error naming the row when it has none)."""
        try:
            return self.data[key]
        except KeyError:
            raise KeyError(f"variant {self.name!r} has no {key!r} in its data (it has {', '.join(self.data) or 'none'})"
                           ) from None


@dataclasses.dataclass(frozen=True)
class CheckpointFamily:
    """The checkpoints of one network published together, as one table: ``variants`` and the rules that derive each
    row's preset. Every rule is a value for all rows or a function of the :class:`Variant`.

    ``backbone`` builds every row, with ``args`` updated by the row's; ``repo_id``/``revision``/``converter`` say
    where and in which format the weights are published (``repo_id=None`` and no row's ``repo_id``: no weights, unless
    ``download_page`` names where each row's file, ``Variant.weights``, is downloaded by hand, or ``directory`` where
    the family ships it, in its package);
    ``card`` is the family's card template (a file), filled per row with ``card_fields``; ``contract`` what the
    family's weights take from a user's data (:class:`opzoo.DataContract`), said and applied by the one fit."""

    name: str
    backbone: str
    variants: tuple[Variant, ...]
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    repo_id: str | None = None
    revision: str | None = None
    converter: str | None = None
    converter_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    extra_files: PerVariant[Sequence[str]] = ()
    fallback_filenames: Sequence[str] = ()  # weights files read instead when a row's is not in its Hub repo
    checks: PerVariant[Sequence[PretrainedCheck]] = ()
    provenance: PerVariant[Sequence[Fact]] = ()
    results: PerVariant[Sequence[Result]] = ()
    pretrained_cfg: PerVariant[Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    card: Traversable | Path | None = None
    card_fields: PerVariant[Mapping[str, str]] = dataclasses.field(default_factory=dict)
    contract: DataContract | None = None  # what every row takes from a user's data (docs/data-contract.md)
    download_page: str | None = None  # weights not on the Hub: the page users download each row's file from by hand
    # weights the family ships itself: the directory (a package resource, ``files(pkg) / "weights"``, or a path; or a
    # function of the row) holding each row's file, ``Variant.weights``, in the family's own format (its converter)
    directory: PerVariant[Traversable | Path | None] = None

    def __post_init__(self) -> None:
        if self.directory is not None and (self.repo_id is not None or self.download_page is not None):
            raise ValueError(f"checkpoint family {self.name!r}: give one of repo_id (the Hub), download_page (a page "
                             f"to download from by hand) and directory (files the family ships itself)")
        if self.contract is not None and not isinstance(self.contract, DataContract):
            raise TypeError(f"checkpoint family {self.name!r}: contract must be opzoo.DataContract, got "
                            f"{type(self.contract).__name__}")
        variants = tuple(self.variants)
        object.__setattr__(self, "variants", variants)
        if not variants:
            raise ValueError(f"checkpoint family {self.name!r}: no variants")
        seen: set[str] = set()
        for v in variants:
            if not isinstance(v, Variant):
                raise TypeError(f"checkpoint family {self.name!r}: variants must be opzoo.Variant, got "
                                f"{type(v).__name__}")
            if v.name in seen:
                raise ValueError(f"checkpoint family {self.name!r}: variant {v.name!r} appears twice")
            seen.add(v.name)

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name or name in v.aliases:
                return v
        raise KeyError(f"checkpoint family {self.name!r} has no variant {name!r} "
                       f"(it has {', '.join(v.name for v in self.variants)})")

    def rule(self, field: str, variant: Variant) -> Any:
        """Rule ``field`` (``checks``, ``provenance``, ...) applied to ``variant``."""
        value = getattr(self, field)
        return value(variant) if callable(value) else value

    def model_args(self, variant: Variant) -> dict[str, Any]:
        return {**self.args, **variant.args}

    def card_fields_of(self, variant: Variant) -> dict[str, str]:
        fields = {k: str(v) for k, v in dict(self.rule("card_fields", variant)).items()}
        clash = sorted(set(fields) & set(SAVE_TIME_FIELDS))
        if clash:
            raise ValueError(f"checkpoint family {self.name!r}: card field(s) {', '.join(clash)} are filled on save "
                             f"by opzoo; name them otherwise")
        return fields
