"""A full disk while writing a data file (issue 49, Degraded: "a full disk during `data generate` gives an h5py
traceback"; it then crashed at exit, rc 139, and left its temporary file). Real processes on a real small tmpfs."""

from __future__ import annotations

import re
import subprocess
import sys

from ..small_disk import small_disk


def test_data_generate_without_room_is_refused_before_solving(tmp_path, capsys):
    from opzoo.cli import main

    with small_disk(tmp_path / "disk", "512k") as disk:
        out = disk / "b.h5"
        assert main(["data", "generate", "burgers", "--n", "1024", "--res", "128", "--out", str(out), "--quiet"]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.endswith(f"opzoo data generate: error: not enough space to write {out}: 1024 trajectories of [128, 11, 1] float32 "
                             "need 5.5 MiB, 0.5 MiB free there; nothing was written: free space or write elsewhere"), line
        assert list(disk.iterdir()) == []


def test_a_disk_that_fills_while_writing_is_one_error_and_leaves_nothing(tmp_path):
    """The room is there when the writer starts; another file then takes it. The append that no longer fits fails
    with DiskFullError, the temporary file is removed, and the interpreter exits normally (it crashed in HDF5's
    close)."""
    with small_disk(tmp_path / "disk", "512k") as disk:
        code = f"""
import numpy as np, os
from opzoo.data import CanonicalWriter
from opzoo.disk_full import DiskFullError
out = {str(disk / 'b.h5')!r}
try:
    with CanonicalWriter(out, 8, (64, 64), 4, ["u"]) as writer:
        writer.append(np.ones((1, 64, 64, 4, 1), np.float32))
        other = os.open({str(disk / 'other')!r}, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(other, b"x" * 4096)
        except OSError:
            os.close(other)
        writer.append(np.ones((7, 64, 64, 4, 1), np.float32))
except DiskFullError as e:
    print(e)
"""
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.returncode, done.stderr)
        line = done.stdout.strip()
        assert re.fullmatch(rf"disk full writing {re.escape(str(disk / 'b.h5'))} \(trajectories 1-7 of 8; [\d.]+ MiB free "
                            r"there\): nothing was saved and the temporary file is removed; free space or write "
                            r"elsewhere", line), (line, done.stderr)
        assert sorted(p.name for p in disk.iterdir()) == ["other"]
