"""Issue 45's tracebacks and messages: a directory as data, a data file inside the run directory, a bad --channel, a
--plot directory, an unknown flag, the interrupt advice, the card's base-model line, a .npz of one array per field and
--fields."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from opzoo.cli import main
from opzoo.data import open_source

from .conftest import advection_trajectories, write_canonical


@pytest.fixture(scope="module")
def adv(tmp_path_factory):
    root = tmp_path_factory.mktemp("msgs")
    return root, write_canonical(root / "adv.h5", advection_trajectories(6, 32, 12, seed=2), ["a", "b"], "advection")


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_a_directory_is_no_data_file(adv, capsys):
    root, path = adv
    assert main(["data", "inspect", str(root) + "/"]) == 2  # raised IsADirectoryError
    assert "is a directory, not a data file; name the file(s) to read: adv.h5" in one_line(capsys)
    assert main(["finetune", "dpot-micro", "--data", str(root), "--out", str(root / "run")]) == 2
    err = one_line(capsys)  # said "does not exist (add a 'generate' entry)"
    assert "is a directory, not a data file" in err and "generate" not in err


def test_a_data_file_inside_the_run_directory_is_refused_before_anything_moves(tmp_path, capsys):
    """finetune --data DIR/b.h5 --out DIR --new moved the user's data file aside, then crashed."""
    data = write_canonical(tmp_path / "b.h5", advection_trajectories(4, 32, 12, seed=3), ["a", "b"], "advection")
    assert main(["finetune", "dpot-micro", "--data", str(data), "--out", str(tmp_path), "--new", "--steps", "1"]) == 2
    assert "lies inside the run directory" in one_line(capsys)
    assert data.is_file() and not list(tmp_path.glob("*.replaced-*"))


def test_a_bad_channel_is_refused_before_any_work(adv, tmp_path, capsys):
    """eval --channel 5 on a 2-field file crashed after printing its metrics, and wrote nothing."""
    root, path = adv
    assert main(["eval", "dpot-micro", "--data", str(path), "--channel", "5", "--out", str(tmp_path / "e")]) == 2
    assert "--channel 5: " in one_line(capsys) and not (tmp_path / "e" / "eval.json").exists()


def test_plot_into_a_directory_and_unknown_flags_name_the_command(adv, tmp_path, capsys):
    root, path = adv
    (tmp_path / "plots").mkdir()
    assert main(["rollout", "dpot-micro", "--data", str(path), "--index", "1", "--steps", "2",
                 "--plot", str(tmp_path / "plots")]) == 0  # wrote plots.png beside the directory
    assert (tmp_path / "plots" / "adv-1.png").is_file() and not (tmp_path / "plots.png").exists()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["eval", "dpot-micro", "--data", str(path), "--bogus"])
    assert "opzoo eval: error: unrecognized arguments: --bogus (see `opzoo eval --help`)" in capsys.readouterr().err


def test_an_interrupt_before_any_checkpoint_does_not_promise_a_resume(tmp_path):
    from opzoo.cli.training import _resume_advice

    args = argparse.Namespace(command="finetune", out=str(tmp_path / "run"))
    assert "starts it over" in _resume_advice(args)
    (tmp_path / "run" / "checkpoints" / "step-00000002").mkdir(parents=True)
    assert "resume from its last checkpoint" in _resume_advice(args)


def test_the_cards_base_model_line_holds_no_local_path(tmp_path):
    from opzoo.training.card import _portable

    line = "dpot-micro pretrained, from package opzoo-fourier 0.1.0: /home/me/opzoo/plugins/opzoo-fourier/" \
           "opzoo_fourier/pretrained/dpot-micro"
    assert _portable(line, "dpot-micro") == ("dpot-micro pretrained, from package opzoo-fourier 0.1.0: "
                                             "opzoo_fourier/pretrained/dpot-micro")


def test_a_npz_of_one_array_per_field_is_read_with_its_names_and_coordinates(tmp_path, capsys):
    """A .npz holding u, v, x, y, t was refused; plain arrays' channels could not be named (every plot said c0, c1)."""
    u = np.random.default_rng(0).random((3, 7, 16, 12)).astype(np.float32)  # [N, T, X, Y]
    v = u + 1
    np.savez(tmp_path / "uv.npz", u=u, v=v, x=np.linspace(0, 1, 16), y=np.linspace(0, 1, 12), t=np.arange(7.0))
    source = open_source(tmp_path / "uv.npz")
    assert source.fields == ["u", "v"] and source.info.shape == (3, 16, 12, 7, 2)
    np.testing.assert_array_equal(source.read(1)[..., 1], np.moveaxis(v[1], 0, -1))
    assert "coordinate arrays" in source.info.axis_note
    np.save(tmp_path / "plain.npy", np.stack([u, v], axis=-1))  # [N, T, X, Y, C]
    named = open_source(tmp_path / "plain.npy", layout="array:NTXYC", fields=["u", "v"])
    assert named.fields == ["u", "v"]
    assert main(["data", "inspect", str(tmp_path / "plain.npy"), "--layout", "array:NTXYC", "--fields", "u,v,w"]) == 2
    assert "--fields names 3 field(s)" in one_line(capsys)


def test_a_busy_machine_is_told_about_threads(monkeypatch):
    import os

    from opzoo.cli.training import thread_advice

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.5, 3.0, 2.0))
    assert "OMP_NUM_THREADS=1" in thread_advice() and "load 3.5 on 2 cores" in thread_advice()
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    assert thread_advice() is None
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(os, "getloadavg", lambda: (3.5, 3.0, 2.0))
    assert thread_advice() is None
