"""Fine-tuning a saved model on data with other channels and resolution; rollout evaluation and its outputs."""

import csv
import json
import re

import numpy as np
import pytest
import torch

import opzoo
from opzoo.data import FrameShape, TrajectoryDataset
from opzoo.data.transforms import resize
from opzoo.evaluation.rollouts import evaluate_dataset
from opzoo.training import Trainer, finetune_config, parse_run_config

from ..hub_cache import place_in_hf_cache
from .conftest import advection_trajectories, heat_trajectories, run_document, tiny_pot_args, write_canonical


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory, datasets):
    """A tiny POT pretrained on the 2-channel 16x16 mixture, saved as an opzoo repo."""
    out = tmp_path_factory.mktemp("pre") / "run"
    doc = run_document(out, datasets, model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 20, "batch_size": 4}, optimizer={"lr": 3e-3}, checkpoint={"every": None})
    result = Trainer(parse_run_config(doc), show_progress=False).fit()
    return result.model_dir


def test_exported_model_records_its_data(pretrained_dir):
    cfg = json.loads((pretrained_dir / "config.json").read_text())
    assert cfg["pretrained_cfg"]["resolution"] == [16, 16]
    assert cfg["pretrained_cfg"]["channels"] == 2 and cfg["pretrained_cfg"]["datasets"] == ["heat", "advection"]


def test_finetune_on_other_channels_and_resolution(tmp_path, pretrained_dir):
    # the user's data: 1 channel (model has 2) at 24x24 (model pretrained at 16x16), other viscosity
    user = write_canonical(tmp_path / "user.h5", heat_trajectories(12, 24, 12, seed=5, nu=0.01), ["T"], "heat")
    cfg = finetune_config(str(pretrained_dir), [str(user)], str(tmp_path / "ft"), steps=30, batch_size=4, lr=2e-3,
                          test_fraction=0.25, overrides={"training.eval_every": 30, "evaluation.plots": False})
    trainer = Trainer(cfg, show_progress=False)
    assert trainer.data.frame_shape.resolution == (16, 16) and trainer.data.frame_shape.channels == 2
    sample = trainer.data.train[0]
    assert sample["x"].shape == (16, 16, 4, 2) and sample["mask"].tolist() == [True, False]
    assert torch.all(sample["x"][..., 1] == 1.0)  # the padded channel holds the constant 1
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    loaded = opzoo.from_pretrained(pretrained_dir)
    assert all(torch.equal(before[n], p) for n, p in loaded.named_parameters())  # starts from the pretrained weights
    result = trainer.fit()
    start, end = result.evals[0][0].l2_full, result.evals[30][0].l2_full
    assert end < start, (start, end)
    assert (tmp_path / "ft" / "model" / "model.safetensors").is_file()


def test_finetune_adapts_a_model_to_more_channels_another_resolution_and_t_in(tmp_path, pretrained_dir):
    """3-field data at 24x24 with T_in 6 for a 2-channel 16x16 T_in-4 model: the layers are adapted
    (copy what matches, initialize the rest), the run reports zero-shot and fine-tuned errors."""
    data = advection_trajectories(12, 24, 12, seed=4)
    data = np.concatenate([data, data[..., :1] * 0.5], axis=-1)  # a third field
    f = write_canonical(tmp_path / "wide.h5", data, ["a", "b", "c"], "advection")
    cfg = finetune_config(str(pretrained_dir), [str(f)], str(tmp_path / "ft"), steps=12, batch_size=4, lr=2e-3,
                          resolution=[24, 24], in_timesteps=6, test_fraction=0.25,
                          overrides={"evaluation.plots": False})
    trainer = Trainer(cfg, show_progress=False)
    mc = trainer.model.config
    assert (mc.in_channels, mc.out_channels, mc.in_timesteps, tuple(mc.img_size)) == (3, 3, 6, (24, 24))
    assert trainer.data.frame_shape.resolution == (24, 24) and trainer.data.frame_shape.channels == 3
    pre = opzoo.from_pretrained(pretrained_dir).state_dict()
    now = trainer.model.state_dict()
    # copied: the blocks; the newest 4 of the 6 time-aggregation rows; the old channels' input and output weights
    assert torch.equal(now["blocks.0.norm1.weight"], pre["blocks.0.norm1.weight"])
    assert torch.equal(now["time_agg.w"][2:], pre["time_agg.w"])
    assert torch.equal(now["patch_embed.proj.0.weight"][:pre["patch_embed.proj.0.weight"].shape[0], :2],
                       pre["patch_embed.proj.0.weight"][:, :2])
    assert torch.equal(now["out_head.4.weight"][:2], pre["out_head.4.weight"])
    result = trainer.fit()
    assert sorted(result.evals) == [0, 3, 6, 9, 12]  # zero-shot, points in between (loss.png), fine-tuned
    assert result.evals[12][0].l2_full < result.evals[0][0].l2_full
    saved = json.loads((tmp_path / "ft" / "model" / "config.json").read_text())
    assert saved["model_args"]["in_channels"] == 3 and saved["pretrained_cfg"]["resolution"] == [24, 24]
    assert opzoo.from_pretrained(tmp_path / "ft" / "model").config.in_timesteps == 6


def test_finetune_one_field_model_on_two_field_data_at_another_resolution(tmp_path, datasets):
    """A model pretrained on 1 field at 16x16, fine-tuned on the 2-field 24x24 advection file at 24x24."""
    torch.manual_seed(1)
    one = opzoo.create_model("pot", **tiny_pot_args(channels=1))
    repo = one.save_pretrained(tmp_path / "one-field")
    cfg = finetune_config(str(repo), [str(datasets["advection"])], str(tmp_path / "ft"), steps=8, batch_size=4,
                          lr=2e-3, resolution=[24, 24], test_fraction=0.25, overrides={"evaluation.plots": False})
    trainer = Trainer(cfg, show_progress=False)
    assert (trainer.model.config.in_channels, tuple(trainer.model.config.img_size)) == (2, (24, 24))
    sample = trainer.data.train[0]
    assert sample["x"].shape == (24, 24, 4, 2) and sample["mask"].tolist() == [True, True]
    result = trainer.fit()
    assert sorted(result.evals) == [0, 2, 4, 6, 8] and all(np.isfinite(r.l2_full) for r in result.evals[8])


def test_finetune_cli_reports_zero_shot_and_fine_tuned(tmp_path, pretrained_dir, capsys):
    from opzoo.cli import main

    user = write_canonical(tmp_path / "one.h5", heat_trajectories(8, 16, 10, seed=3), ["T"], "heat")
    assert main(["finetune", str(pretrained_dir), "--data", str(user), "--out", str(tmp_path / "ft"), "--steps", "4",
                 "--batch-size", "2", "--test-fraction", "0.25", "--set", "evaluation.plots=false"]) == 0
    out = capsys.readouterr().out
    assert "test l2 one (zero-shot -> fine-tuned; persistence):" in out
    for label in ("horizon 1", "horizon 5", r"full rollout \(6 steps\)"):
        assert re.search(label + r": [0-9.]+ -> [0-9.]+ \([+-][0-9.]+ %\); persistence [0-9.]+", out), out


def test_finetune_refuses_data_of_another_spatial_dimension(tmp_path, pretrained_dir):
    f = write_canonical(tmp_path / "line.h5", np.ones((4, 64, 12, 1), dtype=np.float32), ["u"], "burgers")
    cfg = finetune_config(str(pretrained_dir), [str(f)], str(tmp_path / "ft"), steps=2)
    with pytest.raises(opzoo.ConfigError) as err:
        Trainer(cfg)
    msg = str(err.value)
    assert "line.h5" in msg and "1-D data shaped [N=4, X=64, T=12, C=1]" in msg and "2-D model" in msg
    assert "[N, X, Y, T, C] with T_in=4, C=2" in msg
    assert not (tmp_path / "ft").exists()


def test_finetune_refuses_a_resolution_the_patches_do_not_tile(tmp_path, pretrained_dir, datasets):
    cfg = finetune_config(str(pretrained_dir), [str(datasets["heat"])], str(tmp_path / "ft"), steps=2, resolution=[18, 18])
    with pytest.raises(opzoo.ConfigError, match=r"data.resolution: \[18, 18\] is not divisible by the model's patch_size 4"):
        Trainer(cfg)
    assert not (tmp_path / "ft").exists()


def test_rollout_metrics_match_direct_loop(pretrained_dir, datasets):
    model = opzoo.from_pretrained(pretrained_dir)
    src = TrajectoryDataset(str(datasets["advection"]), indices=[20, 21])
    frame_shape = FrameShape((16, 16), 2, 4, 1)
    r = evaluate_dataset(model, "advection", src, frame_shape, horizon=6)
    assert r.horizon == 6 and r.n_trajectories == 2 and len(r.per_step) == 6
    assert r.grid == [24, 24] and r.model_grid == [16, 16]  # scored at the file's grid
    fulls, curves = [], []
    for i in range(2):
        truth = src.read(i)[..., 4:10, :].float()  # the file's own grid, untouched
        frames, _ = frame_shape.frames(src.read(i))  # the model's grid
        window = frames[None, ..., :4, :]
        preds = []
        with torch.no_grad():
            for _ in range(6):  # explicit auto-regressive loop
                nxt = model(window)
                preds.append(nxt)
                window = torch.cat([window[..., 1:, :], nxt], dim=-2)
        pred = resize(torch.cat(preds, dim=-2)[0], (24, 24))  # the prediction brought back to the file's grid
        fulls.append(np.mean([float((pred[..., c] - truth[..., c]).norm() / truth[..., c].norm()) for c in range(2)]))
        curves.append([np.mean([float((pred[..., t, c] - truth[..., t, c]).norm() / truth[..., t, c].norm())
                                for c in range(2)]) for t in range(6)])
    assert r.l2_full == pytest.approx(np.mean(fulls), rel=1e-4)
    assert r.per_step == pytest.approx(np.mean(curves, axis=0).tolist(), rel=1e-4)


def test_eval_and_rollout_commands_write_results_and_plots(tmp_path, pretrained_dir, datasets, capsys):
    from opzoo.cli import main

    out = tmp_path / "ev"
    code = main(["eval", str(pretrained_dir), "--data", str(datasets["heat"]), str(datasets["advection"]),
                   "--out", str(out), "--horizon", "5", "--max-trajectories", "3", "--plot-steps", "1", "5"])
    assert code == 0
    summary = json.loads((out / "eval.json").read_text())
    assert set(summary["datasets"]) == {"heat", "advection"}
    assert len(summary["datasets"]["heat"]["per_step"]) == 5
    rows = list(csv.DictReader(open(out / "eval.csv")))
    assert [r["dataset"] for r in rows] == ["heat", "advection"]
    assert float(rows[0]["l2_full"]) == pytest.approx(summary["datasets"]["heat"]["l2_full"], rel=1e-6)
    assert len(list(csv.DictReader(open(out / "eval_per_step.csv")))) == 10
    for png in ("error-vs-step.png", "heat-panels.png", "advection-panels.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot = tmp_path / "roll.png"
    capsys.readouterr()
    code = main(["rollout", str(pretrained_dir), "--data", str(datasets["heat"]), "--index", "2", "--steps", "6",
                 "--plot", str(plot), "--save", str(tmp_path / "pred.safetensors")])
    assert code == 0
    assert "l2 full over the 6 steps" in capsys.readouterr().out and plot.read_bytes()[:4] == b"\x89PNG"
    assert main(["rollout", str(pretrained_dir), "--data", str(datasets["heat"]), "--index", "99"]) == 2
    assert "--index 99 out of range; the file has 24 trajectories" in capsys.readouterr().err
    from safetensors.torch import load_file

    # the file's one field (the model's second channel is padding: not a field of the file, not saved)
    assert load_file(str(tmp_path / "pred.safetensors"))["prediction"].shape == (16, 16, 6, 1)


def test_finetune_preset_with_pretrained_weights_from_the_hub_cache(tmp_path, pretrained_dir, monkeypatch):
    """``finetune PRESET`` loads the preset's published weights (``opzoo.load(name, pretrained=True)``),
    here from a Hugging Face cache in offline mode: the same code path as a download, without network."""
    from huggingface_hub import constants

    from opzoo.cli import main

    cfg = json.loads((pretrained_dir / "config.json").read_text())
    place_in_hf_cache(tmp_path / "hub", "opzoo-test/micro", {"model.safetensors": pretrained_dir / "model.safetensors"})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    registry = opzoo.get_registry()
    with registry.owned_by("tests"):
        registry.register_model("test-micro-pot", backbone="pot", args=cfg["model_args"],
                                pretrained=opzoo.PretrainedSource("opzoo-test/micro", "model.safetensors"),
                                pretrained_cfg={"resolution": [16, 16]})
    try:
        user = write_canonical(tmp_path / "user.h5", heat_trajectories(8, 20, 10, seed=9), ["T"], "heat")
        out = tmp_path / "ft"
        assert main(["finetune", "test-micro-pot", "--data", str(user), "--out", str(out), "--steps", "3",
                     "--batch-size", "2", "--test-fraction", "0.25", "--set", "evaluation.plots=false"]) == 0
        assert (out / "model" / "model.safetensors").is_file()
        # the fine-tuning run starts from the published weights
        trainer = Trainer(finetune_config("test-micro-pot", [str(user)], str(tmp_path / "ft2"), steps=1))
        reference = opzoo.from_pretrained(pretrained_dir).state_dict()
        assert all(torch.equal(v, reference[k]) for k, v in trainer.model.state_dict().items())
        assert trainer.data.frame_shape.resolution == (16, 16)  # the preset's pretraining resolution, not the file's 20x20
        assert json.loads((out / "model" / "config.json").read_text())["pretrained_cfg"]["preset"] == "test-micro-pot"
    finally:
        registry.forget("tests")


def test_a_finetune_parses_its_model_reference_once(tmp_path, pretrained_dir, monkeypatch, capsys):
    """Issue 44: a model reference is a value, parsed where it enters (the command line) and carried in the run config;
    one `opzoo finetune` parses it once, not eleven times from eight places."""
    from opzoo.cli import main
    from opzoo.model_io import loading, reference

    calls = []
    parse = reference.parse_model_reference

    def counted(name, *args, **kwargs):
        import traceback
        calls.append(str(name) + " <- " + " < ".join(f"{f.name}:{f.lineno}" for f in traceback.extract_stack()[-4:-1]))
        return parse(name, *args, **kwargs)

    for module in (reference, loading):  # every module that holds the function by name
        monkeypatch.setattr(module, "parse_model_reference", counted)
    user = write_canonical(tmp_path / "one.h5", heat_trajectories(8, 16, 10, seed=3), ["T"], "heat")
    assert main(["finetune", str(pretrained_dir), "--data", str(user), "--out", str(tmp_path / "ft"), "--steps", "2",
                 "--batch-size", "2", "--test-fraction", "0.25", "--set", "evaluation.plots=false"]) == 0
    assert len(calls) == 1 and calls[0].startswith(str(pretrained_dir)), "\n".join(calls)
    card = (tmp_path / "ft" / "model" / "README.md").read_text()
    assert "base_model" in card


def test_the_eval_and_rollout_commands_are_library_calls(tmp_path, pretrained_dir, capsys):
    """Issue 44: command modules only parse arguments and call the library: opzoo.evaluation.evaluate_files and
    rollout_trajectory do what `opzoo eval` and `opzoo rollout` do, with the same results and report lines."""
    from safetensors import safe_open

    from opzoo.cli import main
    from opzoo.evaluation import evaluate_files, rollout_trajectory

    user = write_canonical(tmp_path / "one.h5", heat_trajectories(4, 16, 8, seed=5), ["T"], "heat")
    assert main(["eval", str(pretrained_dir), "--data", str(user), "--out", str(tmp_path / "cli"), "--horizon", "3"]) == 0
    cli_lines = capsys.readouterr().out.splitlines()
    lines = []
    model = opzoo.load(str(pretrained_dir))
    assert evaluate_files(model, str(pretrained_dir), [str(user)], tmp_path / "lib", horizon=3, say=lines.append) == 0
    assert lines == [line.replace(str(tmp_path / "cli"), str(tmp_path / "lib")) for line in cli_lines[1:]]  # no weights line
    assert (json.loads((tmp_path / "lib" / "eval.json").read_text())
            == json.loads((tmp_path / "cli" / "eval.json").read_text()))
    assert main(["rollout", str(pretrained_dir), "--data", str(user), "--index", "1", "--steps", "3",
                 "--save", str(tmp_path / "cli.safetensors")]) == 0
    capsys.readouterr()
    assert rollout_trajectory(model, str(pretrained_dir), str(user), index=1, steps=3,
                              save=str(tmp_path / "lib.safetensors"), say=lines.append) == 0
    with safe_open(str(tmp_path / "cli.safetensors"), "pt") as a, safe_open(str(tmp_path / "lib.safetensors"), "pt") as b:
        assert torch.equal(a.get_tensor("prediction"), b.get_tensor("prediction")) and a.metadata() == b.metadata()
