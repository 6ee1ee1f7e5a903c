"""Readers for trajectory files, with layout auto-detection.

``open_source(path)`` returns a :class:`TrajectorySource` for any supported layout:

=================  ========================================================================
layout             what it reads
=================  ========================================================================
canonical          opzoo / DPOT processed: ``data`` ``[N, *S, T, C]``
the-well           The Well: ``t0_fields/*`` ``[N, T, *S]``, ``t1_fields/*`` ``[N, T, *S, D]``, ...
pdebench-groups    PDEBench SWE / diffusion-reaction: ``'0000/data'`` ``[T, *S, C]``
pdebench-cfd       PDEBench CFD: ``density``, ``pressure``, ``Vx``, ``Vy`` each ``[N, T, *S]``
pdebench-tensor    PDEBench 1-D and Darcy: ``tensor`` ``[N, T, *S]``
fno-mat            FNO NS MATLAB v7.3: ``u`` ``[T, Y, X, N]`` on disk
array[:<axes>]     ``.npy`` / ``.npz`` / tensor-only ``.pt``: one array ``[N, *S, T, C]`` (or ``<axes>``)
=================  ========================================================================

Detection never guesses: a file that only *might* be in a layout (the FNO layout read from a lone key
``u`` in a file that is not a ``.mat``) is refused with the candidate layouts and how to name one.

These are the core's readers (:data:`LAYOUTS`); a plugin adds its own with ``registry.register_reader(cls)``, and
detection and ``--layout`` go through every registered reader (:func:`registered_readers`), the core's first.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py

from opzoo.data.errors import DataFormatError, UnknownLayoutError, describe_shape
from opzoo.data.readers.arrays import SUFFIXES as ARRAY_SUFFIXES
from opzoo.data.readers.arrays import ArraySource
from opzoo.data.readers.base import SourceInfo, TrajectorySource, open_h5
from opzoo.data.readers.canonical import CanonicalSource
from opzoo.data.readers.fno_mat import FNOMatSource
from opzoo.data.readers.pdebench import PDEBenchCFDSource, PDEBenchGroupsSource, PDEBenchTensorSource
from opzoo.data.readers.the_well import TheWellSource
from opzoo.registry.registry import HDF5_SUFFIXES

#: The core's layouts in detection order (the first whose ``detect`` matches wins), registered first by the core.
LAYOUTS: dict[str, type[TrajectorySource]] = {
    cls.layout: cls
    for cls in (
        TheWellSource,
        CanonicalSource,
        PDEBenchGroupsSource,
        PDEBenchCFDSource,
        PDEBenchTensorSource,
        FNOMatSource,
        ArraySource,
    )
}

LAYOUT_OPTION = ("name the layout: `--layout NAME` on the command line (opzoo data inspect, eval, rollout, "
                 "finetune), `layout: NAME` in a run config's dataset, or open_source(path, layout=NAME)")


def registered_readers() -> dict[str, type[TrajectorySource]]:
    """Layout name -> reader, in detection order: the registry's (the core's :data:`LAYOUTS`, then the plugins'), or
    the core's alone when no plugin host runs."""
    from opzoo.registry.registry import get_registry, live_registry

    registry = live_registry()
    if registry is None:
        try:
            registry = get_registry()
        except RuntimeError:
            return dict(LAYOUTS)
    return registry.readers() or dict(LAYOUTS)


def detect_layout(path: str | os.PathLike) -> str:
    """Name of the layout a file is in; UnknownLayoutError listing what was found otherwise."""
    path = os.fspath(path)
    readers = registered_readers()
    if os.path.isdir(path):
        for name, cls in readers.items():
            if getattr(cls, "reads_directories", False) and _asked(cls.claims_directory, name, path):
                return name
        raise DataFormatError(directory_refusal(path))
    for name, cls in readers.items():  # a format of its own, told by the file's name (.npy, a plugin's .xyz)
        if cls.suffixes and path.lower().endswith(tuple(x.lower() for x in cls.suffixes)):
            return name
    with open_h5(path) as f:
        for name, cls in readers.items():
            if cls.suffixes:
                continue
            found = _asked(cls.detect, name, f)
            if found is None or not found:
                continue
            doubt = _asked(cls.doubt, name, f, path)
            if doubt:
                raise UnknownLayoutError(describe_ambiguous(path, f, name, doubt, readers))
            return name
        raise UnknownLayoutError(describe_unknown(path, f, readers))


def _asked(hook, layout: str, *args):
    """A reader's ``detect``/``doubt`` answer; a plugin's is asked under its deadline, and one that raises or does not
    answer is left out of detection (None), said once, naming its package: one broken reader does not stop the
    others from reading their files."""
    from opzoo.registry.plugin_calls import PluginCallError, call_plugin, is_plugins, plugin_label

    if not is_plugins("reader", layout):
        return hook(*args)
    try:
        return call_plugin(hook, *args, what=plugin_label("reader", layout))
    except PluginCallError as e:
        import logging

        if str(e) not in _SAID:
            _SAID.add(str(e))
            logging.getLogger("opzoo").warning(f"left out of layout detection: {e}")
        return None


_SAID: set[str] = set()


def directory_refusal(path: str | os.PathLike) -> str:
    """Why a directory is not read as data, naming the files in it that could be, and the readers of directories."""
    readers = registered_readers()
    suffixes = DATA_SUFFIXES + tuple(x.lower() for cls in readers.values() for x in cls.suffixes)
    readable = sorted(p.name for p in Path(path).iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    listed = ", ".join(readable[:8]) + (f" and {len(readable) - 8} more" if len(readable) > 8 else "")
    of_directories = [name for name, cls in readers.items() if getattr(cls, "reads_directories", False)]
    return (f"{os.fspath(path)} is a directory, not a data file; name the file(s) to read"
            + (f": {listed} (several can follow one --data)" if readable else " (it holds no "
               f"{'/'.join(sorted(set(suffixes)))} file)")
            + (f"; no reader of a directory claims it (layouts that read one: {', '.join(of_directories)}; name one "
               f"with --layout)"
               if of_directories else ""))


def directory_layout(path: str | os.PathLike, layout: str | None = None) -> str:
    """The layout that reads the directory ``path``: ``layout`` when its reader reads directories, else the first
    reader that claims it; DataFormatError (:func:`directory_refusal`) otherwise."""
    if layout is None:
        return detect_layout(path)
    cls = registered_readers().get(layout.partition(":")[0])
    if cls is None or not getattr(cls, "reads_directories", False):
        raise DataFormatError(f"{directory_refusal(path)}. The {layout} layout reads a file, not a directory")
    return layout


DATA_SUFFIXES = (*HDF5_SUFFIXES, *ARRAY_SUFFIXES)  # the core's (a directory's refusal adds plugins')


def open_source(path: str | os.PathLike, layout: str | None = None, **options) -> TrajectorySource:
    """Open ``path`` lazily as ``N`` trajectories ``[*S, T, C]``.

    ``layout`` forces one layout (a registered reader's, :func:`registered_readers`); by default it is detected.
    ``options`` go to the reader (``check_finite``, and ``prepend_initial`` for ``fno-mat``).
    """
    if os.path.isdir(path):
        layout = directory_layout(path, layout)
    if layout is None:
        layout = detect_layout(path)
    fields = options.pop("fields", None)
    if layout.partition(":")[0] == ArraySource.layout:
        return ArraySource(path, order=layout, fields=fields, **options)
    if fields and layout.partition(":")[0] == CanonicalSource.layout:
        options["fields"] = fields  # a canonical file that names no channel: --fields names them
    elif fields:
        raise DataFormatError(f"{os.fspath(path)}: --fields names the channels of a plain array (.npy/.npz/.pt); a "
                              f"{layout} file names its own")
    name, _, order = layout.partition(":")
    readers = registered_readers()
    if name not in readers or (order and not getattr(readers[name], "takes_order", False)):
        ordered = [n for n, cls in readers.items() if getattr(cls, "takes_order", False) and n != ArraySource.layout]
        raise UnknownLayoutError(f"unknown layout {layout!r}; known layouts: {', '.join(readers)} (array also as "
                                 f"'array:<axes>', e.g. 'array:NTXYC'; an axis order also for "
                                 f"{', '.join(ordered)}, e.g. '{ordered[0]}:NXYT')")
    return readers[name](path, order=order, **options) if order else readers[name](path, **options)


def describe_ambiguous(path: str, f: h5py.File, name: str, doubt: str,
                       readers: dict[str, type[TrajectorySource]] | None = None) -> str:
    """The error for a file that fits layout ``name`` only by a generic key (``doubt`` says why)."""
    found = "; ".join(f"'{k}' {describe_shape(f[k].shape)}" if isinstance(f[k], h5py.Dataset) else f"'{k}' group"
                      for k in list(f.keys())[:8])
    lines = [f"{path}: the layout cannot be told from the file ({found}): {doubt}.",
             "  candidate layouts:"]
    lines += [f"    {n}: {cls.expects}" for n, cls in (readers or LAYOUTS).items() if n == name]
    lines += ["    canonical: rewrite the file as 'data' [N, *S, T, C] (opzoo data convert), or save the array as "
              ".npy and read it with layout 'array' / 'array:<axes>' (e.g. 'array:TXYNC')"]
    lines.append(f"  {LAYOUT_OPTION}, e.g. --layout {name}")
    return "\n".join(lines)


def describe_unknown(path: str, f: h5py.File, readers: dict[str, type[TrajectorySource]] | None = None) -> str:
    """The error text for a file in no known layout: what it holds and what each layout expects."""
    found = []
    for key in list(f.keys())[:20]:
        item = f[key]
        if isinstance(item, h5py.Dataset):
            found.append(f"'{key}' dataset {describe_shape(item.shape)} {item.dtype}")
        else:
            found.append(f"'{key}' group with keys {list(item.keys())[:8]}")
    if len(f.keys()) > 20:
        found.append(f"... {len(f.keys()) - 20} more")
    lines = [
        f"{path}: not in any known layout.",
        f"  found: {'; '.join(found) if found else 'no keys'}; root attributes {sorted(f.attrs.keys())}",
        "  expected one of:",
    ]
    lines += [f"    {name}: {cls.expects}" for name, cls in (readers or LAYOUTS).items()]
    return "\n".join(lines)


__all__ = [
    "LAYOUTS",
    "DataFormatError",
    "SourceInfo",
    "TrajectorySource",
    "detect_layout",
    "open_source",
    "CanonicalSource",
    "TheWellSource",
    "PDEBenchGroupsSource",
    "PDEBenchCFDSource",
    "PDEBenchTensorSource",
    "FNOMatSource",
    "ArraySource",
    "LAYOUT_OPTION",
    "registered_readers",
    "directory_layout",
]
