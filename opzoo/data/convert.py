"""Convert any readable file to the canonical layout (e.g. FNO ``.mat`` files, whose on-disk axis
order makes random window reads slow)."""

from __future__ import annotations

import os

from tqdm.auto import tqdm

from opzoo.data.canonical import CanonicalWriter
from opzoo.data.readers import open_source


def convert_to_canonical(
    src_path: str | os.PathLike,
    out_path: str | os.PathLike,
    layout: str | None = None,
    progress: bool = True,
    overwrite: bool = True,
    **options,
) -> str:
    """Copy every trajectory of ``src_path`` (any layout) into a canonical file, one at a time.

    Metadata carried over: fields, dt, frame times, coordinates, pde, params, and the source
    layout and path (attributes ``source_layout``, ``source_file``). ``options`` go to the reader.
    """
    with open_source(src_path, layout=layout, **options) as src:
        info = src.info
        dims = list(info.coords) if len(info.coords) == len(info.spatial_shape) else None
        with CanonicalWriter(
            out_path, info.n_samples, info.spatial_shape, info.n_steps, info.fields,
            pde=info.pde, params=info.params, dt=info.dt, times=info.times, spatial_dims=dims,
            coords=info.coords if dims else None, overwrite=overwrite,
            attrs={"source_layout": info.layout, "source_file": os.path.basename(src.path)},
        ) as writer:
            for i in tqdm(range(info.n_samples), unit="traj", desc="convert", disable=not progress):
                writer.append(src.read(i)[None])
    return os.fspath(out_path)
