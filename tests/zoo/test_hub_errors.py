"""Hub errors are one line, offline or not, name the exact file and the command that fetches it, and
come within a bounded wait (issue 27). No network is needed: the Hub endpoint is pointed at a closed
local port, or HF_HUB_OFFLINE is set."""

from __future__ import annotations

import time

import pytest
from huggingface_hub import constants

import opzoo
from opzoo.cli import main


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OPZOO_HUB_WAIT", "1")
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)  # the endpoint itself is what must not answer


def test_an_uncached_file_without_network_fails_fast_in_one_line(no_hub, monkeypatch):
    """The bound is on the wait itself: the time spent trying to reach the Hub (measured 1.0 s, OPZOO_HUB_WAIT=1), not
    building the model around it; 10 s allows ten times that, and huggingface_hub's own retries take about 30 s."""
    from opzoo.model_io import hub

    waits, probe = [], hub.hub_unreachable

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return probe(*args, **kwargs)
        finally:
            waits.append(time.perf_counter() - t0)

    monkeypatch.setattr(hub, "hub_unreachable", timed)
    with pytest.raises(opzoo.HubError) as info:
        opzoo.load("dpot-s", pretrained=True)
    assert len(waits) == 1 and waits[0] < 10, waits
    message = str(info.value)
    assert "\n" not in message
    assert "model_S.pth of hzk17/DPOT" in message and "`hf download hzk17/DPOT model_S.pth`" in message
    assert "could not be reached" in message and "OPZOO_HUB_WAIT" in message
    assert "HF_HUB_OFFLINE" not in message  # it was not set: no advice to unset it


def test_offline_mode_says_so_in_one_line(no_hub, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(opzoo.HubError) as info:
        opzoo.load("dpot-s", pretrained=True)
    message = str(info.value)
    assert "\n" not in message and "HF_HUB_OFFLINE=1 is set" in message
    assert "`hf download hzk17/DPOT model_S.pth`" in message


@pytest.mark.parametrize("offline", [False, True])
def test_push_without_network_is_one_line(no_hub, monkeypatch, tmp_path, capsys, offline):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    repo = opzoo.load("dpot-micro", pretrained=True).save_pretrained(tmp_path / "repo")
    assert main(["push", str(repo), "me/my-model"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"opzoo push: error: uploading {repo} to Hub repo me/my-model")
    assert f"`opzoo push {repo} me/my-model`" in err


def test_behind_a_proxy_the_proxy_is_what_must_answer(monkeypatch):
    import socket

    from opzoo.model_io.hub import hub_unreachable

    monkeypatch.setattr(constants, "ENDPOINT", "https://127.0.0.1:9")  # not reachable directly
    for var in ("no_proxy", "NO_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    import threading

    with socket.socket() as proxy:  # a proxy that answers (here: refusing the tunnel)
        proxy.bind(("127.0.0.1", 0))
        proxy.listen()

        def answer():
            for _ in range(2):  # the TCP probe, then the HTTP one
                conn, _ = proxy.accept()
                if conn.recv(4096):
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                conn.close()

        threading.Thread(target=answer, daemon=True).start()
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.getsockname()[1]}")
        assert hub_unreachable(wait=1) is None
    with socket.socket() as silent:  # a proxy that accepts and never answers is no way to the Hub
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{silent.getsockname()[1]}")
        assert "no HTTP answer within" in hub_unreachable(wait=1)
    monkeypatch.delenv("HTTPS_PROXY")
    assert "127.0.0.1:9" in hub_unreachable(wait=1)
