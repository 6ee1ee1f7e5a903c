"""Reader for the FNO Navier–Stokes files (MATLAB v7.3, which is HDF5).

MATLAB writes arrays column-major, so h5py sees every axis reversed: the MATLAB variable
``u`` ``[N, X, Y, T]`` is the HDF5 dataset ``u`` shaped ``[T, Y, X, N]``; ``a`` ``[N, X, Y]``
(the initial vorticity) is ``[Y, X, N]``; ``t`` ``[1, T]`` is ``[T, 1]``.
"""

from __future__ import annotations

import h5py
import numpy as np

from opzoo.data.errors import describe_shape
from opzoo.data.readers.base import SourceInfo, TrajectorySource, dt_from_times

U_SHAPE = "[T, Y, X, N] on disk (MATLAB [N, X, Y, T]; 1-3 spatial dims)"


def _has_matlab_header(path: str) -> bool:
    """MATLAB v7.3 files start with a user block reading 'MATLAB 7.3 MAT-file'."""
    with open(path, "rb") as raw:
        return raw.read(6) == b"MATLAB"


class FNOMatSource(TrajectorySource):
    """FNO NS ``.mat`` v7.3 file: one channel ``u`` (vorticity) at the recorded times ``t``.

    With ``prepend_initial=True`` the initial condition ``a`` becomes frame 0 (time 0).
    """

    layout = "fno-mat"
    expects = f"dataset 'u' {U_SHAPE}; optional 'a' [Y, X, N] and 't' [T, 1]"

    def __init__(self, path, check_finite: bool = True, prepend_initial: bool = False):
        self.prepend_initial = prepend_initial
        super().__init__(path, check_finite=check_finite)

    @classmethod
    def detect(cls, f: h5py.File) -> bool:
        return "u" in f and isinstance(f["u"], h5py.Dataset)

    @classmethod
    def doubt(cls, f: h5py.File, path: str) -> str | None:
        """A key named ``u`` is common; without a ``.mat`` name or FNO's ``a``/``t`` keys it proves nothing."""
        if path.lower().endswith(".mat") or "a" in f or "t" in f or _has_matlab_header(path):
            return None
        u = f["u"]
        steps, *spatial_reversed, n = u.shape
        reading = ", ".join(f"{a}={s}" for a, s in zip("XYZ", reversed(spatial_reversed)))
        return (f"its key 'u' {describe_shape(u.shape)} fits fno-mat only by name (no .mat suffix, no 'a' or 't' key); "
                f"read as fno-mat it would be N={n}, {reading}, T={steps}, C=1")

    def _validate(self, f: h5py.File) -> SourceInfo:
        u = self._require(f, "u", (3, 4, 5), U_SHAPE)
        steps, *spatial_reversed, n = u.shape
        spatial = tuple(reversed(spatial_reversed))
        times = None
        if "t" in f:
            times = np.asarray(f["t"][()], dtype=np.float64).ravel()
            if len(times) != steps:
                raise self._fail(f"key 't' has {len(times)} entries; key 'u' {list(u.shape)} has T = {steps}")
        if self.prepend_initial:
            expected = (*spatial_reversed, n)
            a = self._require(f, "a", u.ndim - 1, "[Y, X, N] on disk (MATLAB [N, X, Y])")
            if a.shape != expected:
                raise self._fail(f"key 'a' has shape {list(a.shape)}; expected {list(expected)} to match 'u'")
            if times is not None:
                times = np.concatenate([[0.0], times])
            steps += 1
        return SourceInfo(
            layout=self.layout,
            n_samples=n,
            spatial_shape=spatial,
            n_steps=steps,
            fields=["u"],
            dt=dt_from_times(times),
            times=times,
            pde="navier-stokes-vorticity",
            attrs=dict(f.attrs),
        )

    def _key_of(self, sample: int) -> str:
        return "u"

    def _read(self, f: h5py.File, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        offset = 1 if self.prepend_initial else 0
        parts = []
        if t_start < offset:
            parts.append(f["a"][..., sample][None])  # [1, *S_reversed]
        u_start, u_stop = max(t_start - offset, 0), t_stop - offset
        if u_stop > u_start:
            parts.append(f["u"][u_start:u_stop, ..., sample])  # [t, *S_reversed]
        frames = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
        n_spatial = frames.ndim - 1
        # [t, *reversed(S)] -> [*S, t]
        return np.transpose(frames, (*range(n_spatial, 0, -1), 0))[..., None]
