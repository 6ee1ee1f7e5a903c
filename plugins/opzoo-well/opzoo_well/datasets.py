"""The layout of The Well's datasets that have published checkpoints, and their normalization stats.

Each entry is copied from PolymathicAI/the_well, ``datasets/<name>/<name>.yaml`` (the dataset
metadata: ``n_spatial_dims``, ``spatial_resolution``, ``field_names`` by tensor order,
``constant_field_names``). The stats (``stats.yaml`` of the same repo) ship in ``stats/`` with their
source in each file's first line.

Channel order is The Well's (``WellDataset._postprocess_data``): tensor order 0, 1, 2 and, inside an
order, the fields in the order listed; a vector field contributes one channel per axis
(``velocity_x``, ``velocity_y``) and a rank-2 field one per pair of axes, row-major (``D_xx``, ``D_xy``,
``D_yx``, ``D_yy``). Constant (time-invariant) fields are kept apart in the same order.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from importlib.resources import files
from typing import Any

import yaml

import opzoo

STATS_DIR = files("opzoo_well") / "stats"
# a commit of refs/pull/44/head (not on main, whose a86893c holds the same values rounded to 5 significant digits)
STATS_SOURCE = ("PolymathicAI/the_well datasets/{name}/stats.yaml @ 75c6b4948fda27d78fee7ac418fbb00711791784 "
                "(refs/pull/44/head; main's a86893c rounds them to 5 digits)")
MIN_DENOM = 1e-4  # The Well's ZScoreNormalization(min_denom=1e-4): stds are clipped below at this


@dataclasses.dataclass(frozen=True)
class WellField:
    """A (possibly tensor-valued) field: its name in ``stats.yaml``, tensor order and component names."""

    name: str
    order: int
    components: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class WellDataset:
    """One dataset of The Well as its checkpoints saw it."""

    name: str
    n_spatial_dims: int
    resolution: tuple[int, ...]
    fields: tuple[WellField, ...]
    constant_fields: tuple[WellField, ...] = ()

    @property
    def channels(self) -> list[str]:
        """Names of the time-varying channels, in The Well's order."""
        return [c for f in self.fields for c in f.components]

    @property
    def constant_channels(self) -> list[str]:
        return [c for f in self.constant_fields for c in f.components]


def _field(name: str, order: int, axes: str) -> WellField:
    comps = tuple(f"{name}_{''.join(ix)}" for ix in itertools.product(axes, repeat=order)) if order else (name,)
    return WellField(name, order, comps)


def _scalars(*names: str) -> tuple[WellField, ...]:
    return tuple(_field(n, 0, "") for n in names)


def _vector(name: str, axes) -> WellField:
    """A vector field whose components carry the axis names ``axes`` (e.g. ``("r", "theta", "phi")``)."""
    return WellField(name, 1, tuple(f"{name}_{a}" for a in axes))


XY, XYZ = ("x", "y"), ("x", "y", "z")
DATASETS: dict[str, WellDataset] = {d.name: d for d in (
    WellDataset("acoustic_scattering_maze", 2, (256, 256), (*_scalars("pressure"), _vector("velocity", XY)),
                _scalars("density", "speed_of_sound")),
    WellDataset("active_matter", 2, (256, 256),
                (*_scalars("concentration"), _vector("velocity", XY), _field("D", 2, "xy"), _field("E", 2, "xy"))),
    WellDataset("convective_envelope_rsg", 3, (256, 128, 256),
                (*_scalars("density", "energy", "pressure"), _vector("velocity", ("r", "theta", "phi")))),
    WellDataset("gray_scott_reaction_diffusion", 2, (128, 128), _scalars("A", "B")),
    WellDataset("helmholtz_staircase", 2, (1024, 256), _scalars("pressure_re", "pressure_im"), _scalars("mask")),
    WellDataset("MHD_64", 3, (64, 64, 64),
                (*_scalars("density"), _vector("magnetic_field", XYZ), _vector("velocity", XYZ))),
    WellDataset("planetswe", 2, (256, 512), (*_scalars("height"), _vector("velocity", ("theta", "phi")))),
    WellDataset("post_neutron_star_merger", 3, (192, 128, 66),
                (*_scalars("density", "internal_energy", "pressure", "temperature", "electron_fraction", "entropy"),
                 _vector("magnetic_field", ("log_r", "theta", "phi")), _vector("velocity", ("log_r", "theta", "phi")))),
    WellDataset("rayleigh_benard", 2, (512, 128), (*_scalars("buoyancy", "pressure"), _vector("velocity", XY))),
    WellDataset("rayleigh_taylor_instability", 3, (128, 128, 128), (*_scalars("density"), _vector("velocity", XYZ))),
    WellDataset("shear_flow", 2, (256, 512), (*_scalars("tracer", "pressure"), _vector("velocity", XY))),
    WellDataset("supernova_explosion_64", 3, (64, 64, 64),
                (*_scalars("density", "pressure", "temperature"), _vector("velocity", XYZ))),
    WellDataset("turbulence_gravity_cooling", 3, (64, 64, 64),
                (*_scalars("density", "pressure", "temperature"), _vector("velocity", XYZ))),
    WellDataset("turbulent_radiative_layer_2D", 2, (128, 384),
                (*_scalars("density", "pressure"), _vector("velocity", XY))),
    WellDataset("viscoelastic_instability", 2, (512, 512),
                (*_scalars("pressure", "c_zz"), _vector("velocity", XY), _field("C", 2, "xy"))),
)}


def dataset(name: str) -> WellDataset:
    if name not in DATASETS:
        raise opzoo.UnknownNameError("The Well dataset", name, DATASETS)
    return DATASETS[name]


def read_stats(name: str) -> dict[str, Any]:
    """The shipped ``stats.yaml`` of dataset ``name`` (keys ``mean``, ``std``, ``mean_delta``, ...)."""
    resource = STATS_DIR / f"{name}.yaml"
    if not resource.is_file():
        raise opzoo.ConfigError(f"no normalization stats shipped for The Well dataset {name!r} ({resource})")
    # libyaml's parser where PyYAML has it (the same values: the constructors are PyYAML's own in both)
    return yaml.load(resource.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _flat(stats: dict[str, Any], key: str, fields: tuple[WellField, ...], name: str) -> list[float]:
    table = stats.get(key, {})
    out: list[float] = []
    for f in fields:
        if f.name not in table:
            raise opzoo.ConfigError(f"stats of The Well dataset {name!r}: '{key}/{f.name}' is missing")
        values = [float(v) for v in _flatten(table[f.name])]
        if len(values) != len(f.components):
            raise opzoo.ConfigError(f"stats of {name!r}: '{key}/{f.name}' has {len(values)} values, "
                                    f"expected {len(f.components)} ({', '.join(f.components)})")
        out += values
    return out


def _flatten(v: Any) -> list[Any]:
    return [x for item in v for x in _flatten(item)] if isinstance(v, list) else [v]


def normalization_args(name: str) -> dict[str, Any]:
    """The z-score statistics of ``name`` flattened to channels, as the backbone's config takes them.

    ``mean``/``std`` and ``mean_delta``/``std_delta`` per time-varying channel, ``constant_mean``/
    ``constant_std`` per constant channel (unclipped; the model clips stds at ``MIN_DENOM`` as The
    Well's ZScoreNormalization does).
    """
    return {k: list(v) for k, v in _normalization_args(name).items()}


@functools.lru_cache(maxsize=None)
def _normalization_args(name: str) -> dict[str, list[float]]:
    """:func:`normalization_args`, read once per dataset (every architecture's presets of it share the file)."""
    d, stats = dataset(name), read_stats(name)
    return {
        "mean": _flat(stats, "mean", d.fields, name),
        "std": _flat(stats, "std", d.fields, name),
        "mean_delta": _flat(stats, "mean_delta", d.fields, name),
        "std_delta": _flat(stats, "std_delta", d.fields, name),
        "constant_mean": _flat(stats, "mean", d.constant_fields, name),
        "constant_std": _flat(stats, "std", d.constant_fields, name),
    }


# The Well's test batch size per dataset (the_well/benchmark/configs/data/<dataset>.yaml @ v1.1.0, d5ea89f):
# its test score is a mean of batch means, so `opzoo eval --windows all` uses it to score the same way
TEST_BATCH_SIZE = {
    "acoustic_scattering_maze": 64, "active_matter": 64, "convective_envelope_rsg": 1, "gray_scott_reaction_diffusion": 256,
    "helmholtz_staircase": 24, "MHD_64": 2, "planetswe": 32, "post_neutron_star_merger": 1, "rayleigh_benard": 64,
    "rayleigh_taylor_instability": 2, "shear_flow": 32, "supernova_explosion_64": 2, "turbulence_gravity_cooling": 2,
    "turbulent_radiative_layer_2D": 64, "viscoelastic_instability": 32,
}
