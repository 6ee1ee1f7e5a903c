"""PDE-Transformer as upstream runs it (issue 43): the training grid, zero padding and the zeroing of padded channels in
a rollout, per-sample labels, the data's own grid and boundary when fine-tuning, and the rough edges of loading the Hub
tree from disk. Upstream's behaviour is written out below as direct loops over its steps, cited at
tum-pbs/pde-transformer 850e09d."""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest
import torch
from huggingface_hub import constants

import opzoo
from opzoo.cli import main

from .conftest import SMALL
from .test_pdet_plugin import REPO, SEPARATE_ARGS, SMALL_ARGS, use_cache

TINY = {**SMALL_ARGS, "depth": [1, 1, 1, 1, 1]}


@pytest.mark.parametrize("name", ["pdet-mc-s", "pdet-sc-s"])
def test_both_networks_record_their_256_training_grid(name):
    """pdet-mc was recorded at its config's sample_size 128; the APE-2D files are 256x256 and read as stored
    (simulation.py low_res, multi_task_norm.yaml downsample_factor 1)."""
    preset = opzoo.get_registry().preset(name)
    assert preset.pretrained_cfg["resolution"] == [256, 256]
    grid = next(f for f in preset.provenance if f.topic == "training grid")
    assert "256x256" in grid.value and "simulation.py" in grid.source and "850e09d" in grid.source


def test_mixed_rollout_zero_pads_and_zeroes_the_padded_channel_as_upstream():
    """A one-field PDE under a 2-channel network: upstream pads the second channel with zeros (multi_module.py) and,
    in its rollout, multiplies each prediction by Fields > 0 before feeding it back (train_supervised.py predict,
    postprocess_output). opzoo padded with 1.0 and fed the padded channel's prediction back."""
    from opzoo.data import FrameShape

    torch.manual_seed(0)
    model = opzoo.load("pdet-mc-s", **TINY).eval()
    assert model.channel_pad_value == 0.0
    one_field = torch.randn(16, 16, 3, 1)  # [X, Y, T, C=1]
    frames, mask = FrameShape((16, 16), 2, 1, pad_value=model.channel_pad_value).frames(one_field)
    assert mask.tolist() == [True, False] and bool((frames[..., 1] == 0).all())
    with torch.no_grad():
        ours = model.rollout(frames[None, :, :, :1], 3, channel_mask=mask)
        # upstream, step by step: x0 = model(previous); x0 = x0 * (Fields > 0); fed back
        previous, theirs = frames[None, :, :, :1], []
        fields = torch.tensor([1.0, 0.0])
        for _ in range(3):
            x0 = model(previous) * fields
            theirs.append(x0)
            previous = x0
    torch.testing.assert_close(ours, torch.cat(theirs, dim=-2))  # the window slicing lays memory out otherwise
    assert bool((ours[..., 1] == 0).all())
    with torch.no_grad():  # without the mask the padded channel's prediction is fed back: another rollout
        assert not torch.equal(model.rollout(frames[None, :, :, :1], 3)[..., 0], ours[..., 0])


def test_separate_rollout_feeds_back_channels_of_type_zero_as_zeros_and_keeps_their_prediction():
    """Upstream's Supervised.predict: frames.append(x0[:, :, -1]) keeps every prediction; then 'set to zero where
    channel_id is zero' before the next step."""
    torch.manual_seed(0)
    model = opzoo.load("pdet-sc-s", **{**SEPARATE_ARGS, "depth": [1, 1, 1, 1, 1], "in_channels": 2,
                                       "out_channels": 2, "channel_types": [3, 0]}).eval()
    x = torch.randn(1, 16, 16, 1, 2)
    with torch.no_grad():
        ours = model.rollout(x, 3)
        previous, theirs = x, []
        for _ in range(3):
            x0 = model(previous)
            theirs.append(x0)
            previous = x0 * torch.tensor([1.0, 0.0])
    torch.testing.assert_close(ours, torch.cat(theirs, dim=-2))  # the window slicing lays memory out otherwise
    assert not bool((ours[..., 1] == 0).all())  # the prediction itself is kept


def test_per_sample_labels_equal_one_model_per_label():
    """Upstream labels each sample with its PDE (get_input: physical_metadata['PDE'][:, 0]); a batch of mixed PDEs is
    one call. opzoo took one task_id per model."""
    torch.manual_seed(0)
    model = opzoo.load("pdet-mc-s", **TINY).eval().double()  # float64: a batch and one sample agree to rounding
    x = torch.randn(3, 16, 16, 1, 2, dtype=torch.float64)
    labels = torch.tensor([6, 15, 30])
    with torch.no_grad():
        batched = model(x, task_id=labels)
        rolled = model.rollout(x, 2, task_id=labels)
        for b, label in enumerate(labels.tolist()):
            single = opzoo.load("pdet-mc-s", **TINY, task_id=label).eval().double()
            single.load_state_dict(model.state_dict())
            torch.testing.assert_close(batched[b:b + 1], single(x[b:b + 1]), rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(rolled[b:b + 1], single.rollout(x[b:b + 1], 2), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="one label per sample"):
        model(x, task_id=torch.tensor([1, 2]))
    separate = opzoo.load("pdet-sc-s", **{**SEPARATE_ARGS, "depth": [1, 1, 1, 1, 1]}).eval().double()
    pde, types = torch.tensor([6, 15, 2]), torch.tensor([[1, 2], [4, 5], [0, 7]])
    with torch.no_grad():
        batched = separate(x, pde_type=pde, channel_types=types)
        for b in range(3):
            one = opzoo.load("pdet-sc-s", **{**SEPARATE_ARGS, "depth": [1, 1, 1, 1, 1], "pde_type": int(pde[b]),
                                             "channel_types": types[b].tolist()}).eval().double()
            one.load_state_dict(separate.state_dict())
            torch.testing.assert_close(batched[b:b + 1], one(x[b:b + 1]), rtol=1e-10, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("periodic, grid, expected", [(True, (48, 48), (48, 48)), (True, (30, 40), (32, 48)),
                                                      (False, (32, 32), (32, 32)), (False, (48, 48), (64, 64))])
def test_the_data_grid_is_kept_where_the_network_takes_it(periodic, grid, expected):
    """No resolution-bound embedding: the data's own grid, else on each axis the nearest larger one the patches (and,
    with walls, whole windows) allow. opzoo resampled every file to 128^2 (mc) or 256^2 (sc)."""
    with torch.device("meta"):
        model = opzoo.load("pdet-mc-s", periodic=periodic, normalization="none")  # PDE-S: patch 4, 2 down, window 8
    chosen, why = model.grid_for(grid)
    assert chosen == expected and why
    with torch.no_grad():  # the network takes it
        model(torch.zeros(1, *chosen, 1, 2, device="meta"))


def _one_field_file(path, n=6, res=32, steps=6, boundary=None, seed=0):
    """A canonical HDF5 file of one field (opzoo's writer's layout), its boundary stated in 'params' when given."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((n, res, res, steps, 1)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data)
        f.attrs["fields"] = ["u"]
        f.attrs["params"] = json.dumps({"boundary": boundary} if boundary else {})
    return path


@pytest.mark.slow
def test_fine_tuning_keeps_the_files_grid_channels_and_boundary_and_says_so(reference, monkeypatch, tmp_path, capsys):
    """The README path with pdet-sc-s on a one-field 32x32 file whose metadata says neumann: it runs at 32x32 with one
    channel and walls (periodic=False), and says each; model.args.periodic is the user's word."""
    use_cache(monkeypatch, tmp_path / "hub", "sc-s", reference / "separate-periodic")
    data = _one_field_file(tmp_path / "walls.h5", boundary="neumann (no flux)")
    sets = [f"model.args.{k}={json.dumps(v)}" for k, v in SEPARATE_ARGS.items()]
    assert main(["finetune", "pdet-sc-s", "--data", str(data), "--out", str(tmp_path / "run"), "--steps", "2",
                 "--batch-size", "2", "--test-fraction", "0.34", "--set", *sets, "evaluation.plots=false"]) == 0
    out = capsys.readouterr().out
    assert "grid: 32x32, the data's own (pdet-sc-s runs at any grid that suits its patches and windows)" in out
    assert "boundary: periodic=False for pdet-sc-s, as the data states" in out and "neumann" in out
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    args = saved["model_args"]
    assert (args["in_channels"], args["out_channels"], args["periodic"]) == (1, 1, False)
    # eval on the same file: the file's grid
    assert main(["eval", str(tmp_path / "run" / "model"), "--data", str(data), "--out", str(tmp_path / "eval")]) == 0
    assert "grid: 32x32, the data's own" in capsys.readouterr().out


def test_the_users_periodic_wins_over_the_file_and_the_disagreement_is_said(tmp_path, capsys):
    from opzoo.training import finetune_config
    from opzoo.training.build import build_run_model, fit_run_data, open_datasets

    data = _one_field_file(tmp_path / "walls.h5", boundary="neumann (no flux)")
    args = {f"model.args.{k}": v for k, v in SEPARATE_ARGS.items()}
    for user, expected in ((None, False), (True, True)):
        overrides = {**args, **({} if user is None else {"model.args.periodic": user})}
        cfg = finetune_config("pdet-sc-s", [str(data)], str(tmp_path / "run"), pretrained=False, overrides=overrides)
        fitted = fit_run_data(build_run_model(cfg.model), cfg, open_datasets(cfg))
        assert fitted.model.config.periodic is expected and fitted.model.config.in_channels == 1
        line = next(line for line in fitted.lines if line.startswith("boundary: "))
        assert "neumann" in line and (("periodic=True as the model args set it, although the data states" in line)
                                      if user else ("periodic=False for pdet-sc-s, as the data states" in line))
    # evaluation keeps the flag the weights were trained with (periodic=True: masked windows would run them as they
    # were never trained), says so, and runs the other when asked
    model = tmp_path / "sc"
    opzoo.load("pdet-sc-s", **SEPARATE_ARGS).save_pretrained(model)
    for extra, said in (([], f"{model} runs with periodic=True; {model}'s weights were trained with it, so evaluation "
                             f"keeps it (fine-tuning follows the files; --model-args periodic=false runs the other)"),
                        (["--model-args", "periodic=false"], "periodic=False as the model args set it (the files")):
        assert main(["fit", str(model), "--data", str(data), *extra]) == 0
        assert said in capsys.readouterr().out


def test_files_of_different_boundaries_are_refused_in_one_line(tmp_path, capsys):
    a = _one_field_file(tmp_path / "a.h5", boundary="periodic")
    b = _one_field_file(tmp_path / "b.h5", boundary="neumann")
    sets = [f"model.args.{k}={json.dumps(v)}" for k, v in SEPARATE_ARGS.items()]
    assert main(["finetune", "pdet-sc-s", "--no-pretrained", "--data", str(a), str(b), "--out", str(tmp_path / "run"),
                 "--steps", "1", "--set", *sets]) == 2
    err = capsys.readouterr().err
    assert "state different boundaries" in err and "model.args.periodic" in err and "\n" not in err.strip()


def test_a_run_that_does_not_adapt_the_model_trains_it_with_its_own_flag_on_files_of_any_boundary(tmp_path):
    """Pretraining (model.adapt: false) on a mixture of periodic and walled files: the model keeps its flag, as
    pdetransformer trains periodic on every dataset, and the block says so; only a fine-tune follows the files."""
    from opzoo.evaluation.fit import fit_data, open_trajectories

    a = _one_field_file(tmp_path / "a.h5", boundary="periodic")
    b = _one_field_file(tmp_path / "b.h5", boundary="neumann")
    model = opzoo.load("pdet-sc-s", **SEPARATE_ARGS, in_channels=1, out_channels=1)
    fitted = fit_data(model, [open_trajectories(str(a)), open_trajectories(str(b))], train=True,
                      adapt_channels=False)
    assert fitted.model.config.periodic is True
    line = next(line for line in fitted.lines if line.startswith("boundary: "))
    assert "runs with periodic=True; a run that does not adapt the model (model.adapt: false) trains it" in line


def test_channel_labels_for_the_adapted_channels_load_with_the_weights(reference, monkeypatch, tmp_path):
    """opzoo.load("pdet-sc-s", pretrained=True, in_channels=3, channel_types=[1, 2, 3]) was refused ("one field type
    per channel (2)"): the labels were checked before the channel count applied."""
    use_cache(monkeypatch, tmp_path / "hub", "sc-s", reference / "separate-periodic")
    model = opzoo.load("pdet-sc-s", pretrained=True, **SEPARATE_ARGS, in_channels=3, channel_types=[1, 2, 3])
    assert model.config.in_channels == 3 and model.config.channel_types == [1, 2, 3] and not model.training


def test_the_hub_tree_on_disk_loads_by_checkpoint_path_and_directory_overlay(reference, monkeypatch, tmp_path):
    """Given the Hub tree on disk (DIR/mc-s/{config.json, diffusion_pytorch_model.safetensors}): checkpoint_path= is
    converted (it was taken for opzoo's names), the directory overlay loads, and local-dir: (opzoo repos only) says
    what to do instead."""
    tree = tmp_path / "pde-transformer"
    shutil.copytree(reference / "periodic", tree / "mc-s")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    direct = opzoo.load("pdet-mc-s", checkpoint_path=tree / "mc-s" / "diffusion_pytorch_model.safetensors", **SMALL_ARGS)
    overlay = opzoo.load("pdet-mc-s", pretrained=True, pretrained_cfg_overlay={"directory": str(tree)}, **SMALL_ARGS)
    x = torch.randn(1, 32, 32, 1, 2)
    with torch.no_grad():
        assert torch.equal(direct(x), overlay(x))
    for where in (tree, tree / "mc-s"):
        with pytest.raises(opzoo.HubError, match="another project's checkpoint files.*opzoo convert.*pretrained_cfg_overlay"):
            opzoo.load(f"local-dir:{where}")
    # offline, the refusal names both files and what loads a local copy of them
    with pytest.raises(opzoo.HubError) as e:
        opzoo.load("pdet-mc-s", pretrained=True)
    msg = str(e.value)
    assert f"hf download {REPO} mc-s/diffusion_pytorch_model.safetensors mc-s/config.json" in msg
    assert "pretrained_cfg_overlay={'directory': 'PATH'}" in msg and "local-dir:" not in msg and "\n" not in msg


@pytest.mark.parametrize("preset, case, words", [
    ("pdet-mc-s", "separate-periodic", "is a separate-channel PDE-Transformer checkpoint.*load it with pdet-sc"),
    ("pdet-sc-s", "periodic", "is a mixed-channel PDE-Transformer checkpoint.*load it with pdet-mc"),
])
def test_files_of_the_other_network_are_refused_naming_the_preset_to_load(reference, monkeypatch, tmp_path, preset,
                                                                          case, words):
    """Separate-channel files under a mixed preset crashed the check (AttributeError num_timesteps); mixed files under
    a separate preset failed with 'missing tensors (258)'."""
    use_cache(monkeypatch, tmp_path / "hub", preset.split("-", 1)[1].replace("pdet-", ""), reference / case)
    with pytest.raises(opzoo.CheckFailed, match=words):
        opzoo.load(preset, pretrained=True, **SMALL_ARGS)


def test_provenance_cites_each_networks_own_files_and_the_unpinned_revision():
    registry = opzoo.get_registry()
    for name, other in (("pdet-sc-s", "mixed_channels"), ("pdet-mc-s", "separate_channels")):
        facts = registry.preset(name).provenance
        assert not [f.topic for f in facts if other in f.source], name
        revision = next(f for f in facts if f.topic == "Hub revision")
        assert not revision.verified and "not pinned" in revision.value
    assert "17 datasets of 10 PDEs" in registry.preset("pdet-mc-s").pretrained_cfg["datasets"][0]
    assert SMALL["hidden_size"] == 8  # the recorded checkpoints' size the tests load with
