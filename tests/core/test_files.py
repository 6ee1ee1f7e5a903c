"""opzoo.files: the one atomic write (whole or not at all, never through a planted link, the umask's permissions) and
the one rule for the temporaries of dead writers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from opzoo.files import TMP_MARK, atomic_write, atomic_writer, clean_dead_temporaries, temporary_name


def test_a_write_is_whole_or_leaves_the_target_unchanged(tmp_path):
    target = tmp_path / "doc.json"
    atomic_write(target, "first")
    with pytest.raises(RuntimeError):
        with atomic_writer(target) as f:
            f.write("half")
            raise RuntimeError("the writer fails")
    assert target.read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]  # its temporary is gone
    atomic_write(target, b"\x00bytes", durable=True)
    assert target.read_bytes() == b"\x00bytes"


def test_a_link_planted_at_the_target_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / "doc").symlink_to(victim)
    atomic_write(tmp_path / "doc", "ours")
    assert victim.read_text() == "mine" and not (tmp_path / "doc").is_symlink()
    assert (tmp_path / "doc").read_text() == "ours"


def test_permissions_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "a", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o640


def test_only_a_dead_writer_on_this_host_loses_its_temporaries(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # that process has ended
    host = socket.gethostname()
    left = tmp_path / f".doc{TMP_MARK}new-{pid}@{host}-0a1b2c3d"
    mine = temporary_name(tmp_path / "doc")
    elsewhere = tmp_path / f".doc{TMP_MARK}new-{pid}@another-host-0a1b2c3d"
    stranger = tmp_path / ".doc.tmp-123"  # not one of opzoo's names
    for p in (left, mine, elsewhere, stranger):
        p.write_text("")
    assert clean_dead_temporaries(tmp_path, "doc") == [left]
    assert not left.exists() and mine.exists() and elsewhere.exists() and stranger.exists()
