"""Walrus's vocabulary of fields: the published checkpoint's 67 slots, and how upstream embeds 2-D data in 3-D.

``FIELD_INDEX_MAP`` is ``data.field_index_map_override`` of the published ``extended_config.yaml`` (Hugging Face
polymathic-ai/walrus @ f8fd578, printed whole by PolymathicAI/walrus ``demo_notebooks/walrus_example_1_RunningWalrus
.ipynb`` @ 3cd747c): slot ``i`` is the field named ``FIELD_INDEX_MAP[i]``. The first three are not fields of any file:
they are the boundary flags the network appends (``closed_boundary``: a wall's padding, ``open_boundary``: an open
side's, ``bias_correction``: inside). Names are The Well's (``flatten_field_names``: a vector's components
``<name>_x``, a tensor's ``<name>_xy``), after upstream's per-dataset transforms (``zeros_like_density`` for the acoustic
sets' density, ``log10_density`` / ``log10_temperature`` for the astrophysical ones).
"""

from __future__ import annotations

from typing import Sequence

FIELD_INDEX_MAP = (
    "closed_boundary", "open_boundary", "bias_correction", "pressure", "velocity_x", "velocity_y", "velocity_z",
    "zeros_like_density", "speed_of_sound", "concentration",
    "D_xx", "D_xy", "D_xz", "D_yx", "D_yy", "D_yz", "D_zx", "D_zy", "D_zz",
    "E_xx", "E_xy", "E_xz", "E_yx", "E_yy", "E_yz", "E_zx", "E_zy", "E_zz",
    "density", "energy", "velocity_r", "velocity_theta", "velocity_phi", "momentum_x", "momentum_y", "momentum_z",
    "pressure_re", "pressure_im", "mask", "magnetic_field_x", "magnetic_field_y", "magnetic_field_z", "A", "B",
    "height", "internal_energy", "temperature", "electron_fraction", "entropy", "magnetic_field_log_r",
    "magnetic_field_theta", "magnetic_field_phi", "velocity_log_r", "buoyancy", "tracer", "log10_density",
    "log10_temperature", "c_zz", "C_xx", "C_xy", "C_xz", "C_yx", "C_yy", "C_yz", "C_zx", "C_zy", "C_zz",
)
BOUNDARY_SLOTS = FIELD_INDEX_MAP[:3]
AXES = "xyz"


def component(name: str) -> tuple[str, str] | None:
    """``("velocity", "x")`` for a Cartesian component name (``_x``, ``_yz``), else None."""
    base, _, tail = name.rpartition("_")
    if base and 1 <= len(tail) <= 2 and all(a in AXES for a in tail):
        return base, tail
    return None


def inflated(fields: Sequence[str], vocabulary: Sequence[str]) -> tuple[str, ...]:
    """The components 2-D data lacks in 3-D, in upstream's order (its ``InflatedWellDataset``: every vector and tensor
    field of 2-D Cartesian data padded to three axes with zeros, ``velocity_z`` beside ``velocity_x, velocity_y``):
    for each field with components among ``fields``, its components over ``x, y, z`` not in ``fields`` and in the
    vocabulary."""
    present = set(fields)
    out: list[str] = []
    for name in fields:
        parts = component(name)
        if parts is None:
            continue
        base, tail = parts
        combos = [a for a in AXES] if len(tail) == 1 else [a + b for a in AXES for b in AXES]
        for c in combos:
            full = f"{base}_{c}"
            if full not in present and full not in out and full in vocabulary:
                out.append(full)
    return tuple(out)
