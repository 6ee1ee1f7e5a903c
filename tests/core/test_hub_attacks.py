"""References mean one thing and the network is bounded (issue 34: F11, F12, F13, D13, D14, D17)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest
import torch
from huggingface_hub import constants

import opzoo
from opzoo.cli import main

from .subprocess_utils import run_python


class SilentEndpoint:
    """A loopback listener that accepts connections and never answers. It records how long the client held each
    connection (accepted until the client closed it): the wait itself, apart from starting an interpreter or
    building anything."""

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.held: list[float] = []  # seconds each closed connection was held by the client
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            thread = threading.Thread(target=self._hold, args=(conn, time.monotonic()), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _hold(self, conn: socket.socket, accepted: float):
        conn.settimeout(0.2)
        with conn:
            while not self.stop.is_set():
                try:
                    if not conn.recv(65536):  # the client closed it
                        self.held.append(time.monotonic() - accepted)
                        return
                except TimeoutError:
                    continue
                except OSError:
                    self.held.append(time.monotonic() - accepted)
                    return

    def close(self):
        self.stop.set()
        for thread in self.threads:
            thread.join()
        self.server.close()


@pytest.fixture
def silent_endpoint():
    endpoint = SilentEndpoint()
    yield endpoint
    endpoint.close()


@pytest.mark.slow
def test_an_unresponsive_hub_fails_a_load_and_a_push_within_the_wait(silent_endpoint, tmp_path):
    """F13: an uncached load failed only after 398 s; push still hung at 1200 s. The bound is on the wait itself,
    as the endpoint saw it: every connection closed by the client, each held at most about OPZOO_HUB_WAIT=1 s
    (measured: two held 1.0 s and two held < 1 ms, 2.0 s in all); 20 s allows ten times that, and the defect held
    them for minutes."""
    opzoo.load("simple-op").save_pretrained(tmp_path / "repo")
    env = {"HF_ENDPOINT": silent_endpoint.url, "OPZOO_HUB_WAIT": "1", "HF_HUB_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "0"}
    code = ("import sys, opzoo; from opzoo.cli import main\n"
            "a = main(['info', 'hf-hub:me/model'])\n"
            f"c = main(['push', {str(tmp_path / 'repo')!r}, 'me/model'])\n"
            "print(a, c)")
    done = run_python(code, env=env, timeout=120)
    assert done.stdout.split() == ["2", "2"], done.stderr
    assert "no HTTP answer within" in done.stderr and len(done.stderr.strip().splitlines()) == 2
    held = list(silent_endpoint.held)
    assert held and sum(held) < 20, held


def test_hf_hub_always_means_the_hub(tmp_path, monkeypatch):
    """F12: hf-hub:me/my-model@v1.0 loaded a local ./me/my-model, ignoring the revision."""
    opzoo.load("simple-op").save_pretrained(tmp_path / "me" / "my-model")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(opzoo.HubError, match=r"of me/my-model@v1.0 is not in the Hugging Face cache"):
        opzoo.load("hf-hub:me/my-model@v1.0")
    with pytest.raises(opzoo.HubError, match="hf-hub: needs a repo id"):
        opzoo.load("hf-hub:")
    with pytest.raises(opzoo.HubError, match="an empty revision"):
        opzoo.load("hf-hub:me/my-model@")
    assert opzoo.load("local-dir:me/my-model").config.to_dict()  # the directory, said so
    assert opzoo.load("me/my-model").config.to_dict()  # an existing directory


@pytest.mark.parametrize("name", ["hf-hub:../etc", "hf-hub:me/módel", "hf-hub:a/b/c", "hf-hub:.."])
def test_malformed_hub_ids_are_one_line(name, capsys):
    """D17: `opzoo info hf-hub:../etc` and non-ASCII ids ended in tracebacks."""
    assert main(["info", name]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is not a Hub repo id" in err


@pytest.mark.slow
def test_a_load_racing_a_save_returns_one_model_or_the_other(tmp_path):
    """F11: loads while save_pretrained alternated two models returned the other model's weights."""
    torch.manual_seed(0)
    a = opzoo.load("simple-op")
    b = opzoo.load("simple-op")
    repo = tmp_path / "repo"
    a.save_pretrained(repo)
    signatures = {float(m.state_dict()[k].sum()) for m in (a, b) for k in ["head.weight"]}
    writer = ("import sys, time, torch, opzoo\n"
              "torch.manual_seed(0); a = opzoo.load('simple-op'); b = opzoo.load('simple-op')\n"
              "end = time.monotonic() + 2\n"
              "while time.monotonic() < end:\n"
              "    a.save_pretrained(sys.argv[1]); b.save_pretrained(sys.argv[1])\n")
    proc = subprocess.Popen([sys.executable, "-c", writer, str(repo)])
    loads, seen = 0, set()
    try:
        end = time.monotonic() + 2
        while time.monotonic() < end:
            m = opzoo.load(str(repo))
            seen.add(float(m.state_dict()["head.weight"].sum()))
            loads += 1
    finally:
        proc.wait()
    assert loads > 20 and seen <= signatures, (loads, seen, signatures)


def test_killed_saves_are_cleaned_and_files_get_the_umask(tmp_path):
    """D13 (0600 files) and D14 (temp files of killed saves never cleaned)."""
    repo = tmp_path / "repo"
    leftover = tmp_path / f".repo.opzoo-tmp-save-999999@{socket.gethostname()}"  # a dead writer's
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"x" * 1000)
    old = os.umask(0o022)
    try:
        opzoo.load("simple-op").save_pretrained(repo)
    finally:
        os.umask(old)
    assert not leftover.exists()
    for name in ("model.safetensors", "config.json", "README.md"):
        assert stat.S_IMODE((repo / name).stat().st_mode) == 0o644, name
