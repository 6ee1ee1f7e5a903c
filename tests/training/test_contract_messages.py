"""The data contract's messages (issue 74, "Messages"): each met while trying, each one line with a way forward that
works; and ``opzoo fit --finetune`` (item 9), which shows the block ``opzoo finetune`` prints before a run."""

from __future__ import annotations

import types
import warnings

import h5py
import numpy as np
import pytest

from opzoo.cli import main
from opzoo.registry.contract import parse_field_map


def write(path, frames: int = 12, fields=("u", "v"), rest: int | None = None, boundary: str | None = None):
    data = (1.0 + 0.1 * np.random.default_rng(0).standard_normal((4, 32, 32, frames, len(fields)))).astype(np.float32)
    if rest is not None:
        data[..., rest] = 0.5  # a field at rest
    with h5py.File(path, "w") as f:
        f["data"] = data
        f.attrs["fields"] = list(fields)
        if boundary:
            f.attrs["boundary"] = boundary
    return str(path)


def test_a_field_map_reads_spaces_and_refuses_empty_pairs_and_padding():
    assert parse_field_map("u = velocity_x, v=velocity_y") == {"u": "velocity_x", "v": "velocity_y"}
    with pytest.raises(ValueError, match=r"u:velocity_x is not FILE_FIELD=MODEL_FIELD") as e:
        parse_field_map("u:velocity_x")
    assert "None" not in str(e.value)
    for text in ("u=velocity_x,,", "u=velocity_x,", ",u=velocity_x"):
        with pytest.raises(ValueError, match="an empty pair"):
            parse_field_map(text)
    with pytest.raises(ValueError, match="not read as padding.*by position"):
        parse_field_map("v=<pad>")


def test_a_field_map_onto_a_field_the_model_lacks_names_it(tmp_path, capsys):
    code = main(["fit", "gphyt-s", "--no-pretrained", "--data", write(tmp_path / "f.h5"), "--field-map",
                 "u=vorticity"])
    err = capsys.readouterr().err
    assert code == 2 and "--field-map u=vorticity: gphyt-s has no field vorticity (it reads " in err
    assert "read u as one of those" in err and err.count("\n") == 1


def test_too_few_frames_names_the_input_window_flag(tmp_path, capsys):
    code = main(["finetune", "dpot-micro", "--data", write(tmp_path / "short.h5", frames=8), "--out",
                 str(tmp_path / "run"), "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "fewer than T_in + T_out = 10 + 1 = 11" in err and "--in-timesteps 7" in err
    assert main(["fit", "dpot-micro", "--data", str(tmp_path / "short.h5"), "--finetune", "--in-timesteps", "7"]) == 0


@pytest.mark.parametrize("preset", ["pdet-mc-micro", "gphyt-micro", "poseidon-micro"])
def test_a_micro_presets_channel_line_agrees_with_its_pad_value(preset, tmp_path, capsys):
    """pdet-mc-micro said "padded with 1 ... as pdetransformer zeroes", gphyt-micro and poseidon-micro told how
    upstream's published data held the channel, which their micro pretraining never saw."""
    assert main(["fit", preset, "--data", write(tmp_path / "one.h5", fields=("u",))]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("channels:"))
    assert "padded with 1" in line and "refilled with 1" in line
    assert "held" not in line and ("zeroes the padded channels" not in line)
    if preset == "pdet-mc-micro":  # what its network does to the padded channel is said, as it is done
        assert "its predictions of them are zeroed" in line and "the fill value is what is fed back" in line


def test_info_of_a_model_of_any_channel_count_says_no_padding(capsys):
    assert main(["info", "morph-micro"]) == 0
    assert "padded with" not in capsys.readouterr().out


def test_a_normalization_line_describes_what_the_model_uses(tmp_path, capsys):
    """MORPH in stats mode still advised stats mode; an adapted poseidon-t described pretraining constants it had
    dropped."""
    assert main(["fit", "morph-ti", "--no-pretrained", "--data", write(tmp_path / "f.h5"), "--model-args",
                 "normalization=stats"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "normalization:" in x]
    assert "training split" in lines[0] and "normalization='stats'" in lines[0] and "use normalization" not in lines[0]
    assert main(["fit", "poseidon-t", "--no-pretrained", "--data", write(tmp_path / "one.h5", fields=("u",)),
                 "--finetune"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "normalization:" in x]
    assert "every channel's are its training split's statistics" in lines[0] and "0.31" not in lines[0]


def test_a_license_notice_is_one_line_on_the_command_line(capsys):
    from opzoo.console import run_command
    from opzoo.model_io.pretrained import LicenseNotice

    def loads(args):
        warnings.warn("poseidon-t: the weights are licensed CC-BY-NC-4.0: non-commercial use only", LicenseNotice)
        warnings.warn("something else of a library", RuntimeWarning)
        return 0

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert run_command(types.SimpleNamespace(command="eval", func=loads)) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "note: poseidon-t: the weights are licensed CC-BY-NC-4.0: non-commercial use only"
    assert err[1].startswith("warning (RuntimeWarning, test_contract_messages.py:") and len(err) == 2


def test_weights_refused_are_not_first_announced(tmp_path, capsys):
    import opzoo

    opzoo.load("dpot-micro", pretrained=True).save_pretrained(tmp_path / "repo")
    with open(tmp_path / "repo" / "model.safetensors", "r+b") as f:
        f.seek(-8, 2)
        f.write(b"\x00\x00\xc0\x7f\x00\x00\xc0\x7f")  # NaNs in the last tensor
    data = write(tmp_path / "f.h5")
    for command in (["eval", str(tmp_path / "repo"), "--data", data, "--out", str(tmp_path / "e")],
                    ["finetune", str(tmp_path / "repo"), "--data", data, "--out", str(tmp_path / "r"), "--steps", "1"]):
        assert main(command) == 2
        out = capsys.readouterr()
        assert "weights:" not in out.out and "model.safetensors" in out.err


def test_fit_refuses_a_morph_field_at_rest_as_eval_does(tmp_path, capsys):
    data = write(tmp_path / "rest.h5", rest=1)
    refusals = []
    for command in (["fit", "morph-ti", "--no-pretrained", "--data", data],
                    ["eval", "morph-ti", "--no-pretrained", "--data", data, "--out", str(tmp_path / "e")]):
        assert main(command) == 2
        refusals.append(capsys.readouterr().err.split("error: ", 1)[1])
    assert refusals[0] == refusals[1] and "uniform over the input window" in refusals[0]
    assert main(["fit", "morph-ti", "--no-pretrained", "--data", data, "--model-args", "normalization=stats"]) == 0


def test_a_files_boundary_is_said_as_a_boundary_of_a_file(tmp_path, capsys):
    data = write(tmp_path / "p.h5", boundary="periodic")
    assert main(["fit", "pdet-mc-micro", "--data", data]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "boundary:" in x)
    assert f"the files state periodic ({data})" in line


def test_fit_finetune_prints_the_block_finetune_prints(tmp_path, capsys):
    """Item 9: a 3-field file is refused by fit ("fine-tune it on them"); fit --finetune shows the adapted block,
    line for line what finetune then prints, and a file finetune refuses is refused alike."""
    data = write(tmp_path / "three.h5", fields=("a", "b", "c"))
    assert main(["fit", "dpot-micro", "--data", data]) == 2
    assert "opzoo fit --finetune shows how" in capsys.readouterr().err
    assert main(["fit", "dpot-micro", "--data", data, "--finetune", "--batch-size", "2"]) == 0
    preview = capsys.readouterr().out.splitlines()
    assert main(["finetune", "dpot-micro", "--data", data, "--out", str(tmp_path / "run"), "--steps", "1",
                 "--batch-size", "2", "--set", "evaluation.plots=false"]) == 0
    ran = capsys.readouterr().out.splitlines()
    assert ran[:len(preview)] == preview and any("c is new to dpot-micro" in x for x in preview)
    assert not (tmp_path / "fit-preview").exists()
    assert main(["fit", "dpot-micro", "--data", data, "--in-timesteps", "5"]) == 2  # never ignored quietly
    assert "--in-timesteps: finetune's options" in capsys.readouterr().err
    short = write(tmp_path / "short.h5", frames=8)
    refusals = []
    for command in (["fit", "dpot-micro", "--data", short, "--finetune"],
                    ["finetune", "dpot-micro", "--data", short, "--out", str(tmp_path / "r2")]):
        assert main(command) == 2
        refusals.append(capsys.readouterr().err.split("error: ", 1)[1])
    assert refusals[0] == refusals[1]


def test_a_rollout_turning_non_finite_says_where(tmp_path):
    """Item 15: MPP at 32x32 reported nan over the full rollout with no reason; any model's rollout that overflows
    from finite inputs is now said, with its step and trajectory (MPP's cause is in its contract's breaks)."""
    import torch

    from opzoo.evaluation.fit import fit_data, open_trajectories
    from opzoo.evaluation.rollouts import NonFiniteRollout, rollout_trajectories

    class Overflows(torch.nn.Module):
        preset_name = "overflows"

        def rollout(self, x, steps, **_):
            out = x[..., -1:, :].repeat_interleave(steps, dim=-2).clone()
            out[1, ..., 2, 0] = float("inf")  # the second trajectory's third step
            return out

    src = open_trajectories(write(tmp_path / "f.h5", frames=16, fields=("u",)))
    shape = fit_data(__import__("opzoo").load("dpot-micro"), [src]).frame_shape
    with pytest.warns(NonFiniteRollout, match=r"overflows's rollout became non-finite at step 3 \(trajectory 1\) "
                                              r"from finite inputs"):
        batches = list(rollout_trajectories(Overflows(), src, shape, horizon=4))
    assert not torch.isfinite(batches[0][1]).all()
    mpp = __import__("opzoo").get_registry().contract("mpp-avit")
    assert "RMSInstanceNorm2d" in mpp.normalization.breaks
