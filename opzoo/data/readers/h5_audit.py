"""What an HDF5 file must not do before opzoo reads it: reach outside itself, or serve fill values.

HDF5 can make a dataset read another file (external links, virtual datasets, external raw storage) and
returns its fill value (zeros) for storage that was never written or lies past the end of a truncated
file, without an error. Every file opzoo opens is walked once (metadata only) and refused, naming the
dataset and the target, when:

- a link is external, or a soft link dangles or loops;
- a dataset is virtual, or keeps its raw data in external files;
- a dataset's declared values are not all stored: contiguous storage not allocated or reaching past the
  end of the file; chunks missing (fewer allocated than its shape needs) or past the end of the file.

:func:`check_data_dataset` adds what a dataset read as trajectories must be: real numbers (not complex,
strings or objects) and not empty.
"""

from __future__ import annotations

import math
import os

import h5py

from opzoo.data.errors import DataFormatError

INSIDE = "opzoo reads only what is stored inside the file; copy the data into it (h5py: f2[name] = f1[name][()])"


def audit_file(f: h5py.File, path: str) -> None:
    """Walk every link and dataset of ``f``; DataFormatError naming the first one that reaches outside the
    file or would read fill values."""
    size = os.path.getsize(path)
    seen: set = set()

    def walk(group: h5py.Group, prefix: str) -> None:
        for name in group:
            full = f"{prefix}/{name}" if prefix else name
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                raise DataFormatError(f"{path}: '{full}' is an external link to {link.filename}:{link.path}; {INSIDE}")
            try:
                obj = group.get(name)
            except (KeyError, RuntimeError, OSError, ValueError) as e:
                raise DataFormatError(f"{path}: link '{full}' cannot be resolved ({e}); repair or remove it") from None
            if obj is None:
                target = link.path if isinstance(link, h5py.SoftLink) else "?"
                raise DataFormatError(f"{path}: soft link '{full}' points to '{target}', which does not exist")
            info = h5py.h5o.get_info(obj.id)
            key = getattr(info, "token", None) or getattr(info, "addr", None) or id(obj)
            if isinstance(obj, h5py.Group):
                if key in seen:
                    if isinstance(link, h5py.SoftLink):
                        raise DataFormatError(f"{path}: soft link '{full}' -> '{link.path}' makes a loop")
                    continue
                seen.add(key)
                walk(obj, full)
            elif isinstance(obj, h5py.Dataset) and key not in seen:
                seen.add(key)
                _check_storage(obj, full, path, size)

    walk(f, "")


def _check_storage(ds: h5py.Dataset, name: str, path: str, file_size: int) -> None:
    if ds.is_virtual:
        sources = ", ".join(f"{s.file_name}:{s.dset_name}" for s in ds.virtual_sources()[:3])
        raise DataFormatError(f"{path}: dataset '{name}' is virtual (its values live in {sources}); {INSIDE}")
    plist = ds.id.get_create_plist()
    if plist.get_external_count():
        target = plist.get_external(0)[0]
        target = target.decode() if isinstance(target, bytes) else target
        raise DataFormatError(f"{path}: dataset '{name}' keeps its raw data in the external file {target}; {INSIDE}")
    if ds.size == 0 or ds.dtype.kind in "OSUV":
        return  # nothing stored to check (and not numeric: check_data_dataset refuses it if it is read)
    layout = plist.get_layout()
    if layout == h5py.h5d.CONTIGUOUS:
        offset = ds.id.get_offset()
        if offset is None:
            raise DataFormatError(f"{path}: dataset '{name}' declares {describe(ds)} but stores none of them (its "
                                  f"storage was never written: reading would return fill values)")
        if offset + ds.id.get_storage_size() > file_size:
            raise DataFormatError(f"{path}: dataset '{name}' ({describe(ds)}) reaches past the end of the file "
                                  f"({file_size} bytes): the file is truncated")
    elif layout == h5py.h5d.CHUNKED:
        expected = math.prod(-(-n // c) for n, c in zip(ds.shape, ds.chunks))
        found = ds.id.get_num_chunks()
        if found < expected:
            raise DataFormatError(f"{path}: dataset '{name}' ({describe(ds)}) has {found} of its {expected} chunks "
                                  f"stored: reading the others would return fill values (a truncated or unfinished file)")
        end = [0]

        def track(info) -> None:
            end[0] = max(end[0], info.byte_offset + info.size)

        ds.id.chunk_iter(track)
        if end[0] > file_size:
            raise DataFormatError(f"{path}: dataset '{name}' has chunks past the end of the file ({file_size} bytes): "
                                  f"the file is truncated")


def describe(ds: h5py.Dataset) -> str:
    return f"{list(ds.shape)} {ds.dtype} values"


def check_data_dataset(ds: h5py.Dataset, name: str, path: str) -> None:
    """A dataset read as trajectories: real numbers and not empty."""
    kind = ds.dtype.kind
    if kind == "c":
        raise DataFormatError(f"{path}: dataset '{name}' holds complex values; opzoo reads real fields: store the real "
                              f"and imaginary parts as two fields (e.g. u_re and u_im)")
    if kind not in "fiub" or h5py.check_string_dtype(ds.dtype) is not None:
        raise DataFormatError(f"{path}: dataset '{name}' holds {ds.dtype} values, not numbers; it cannot be read as "
                              f"trajectories")
    if ds.size == 0:
        raise DataFormatError(f"{path}: dataset '{name}' has shape {list(ds.shape)}: an axis of size 0 holds no data")


__all__ = ["audit_file", "check_data_dataset"]
