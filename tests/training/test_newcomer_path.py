"""The newcomer's path (issue 27) through the real CLI with the shipped ``dpot-micro`` weights: weights by
default with a header line, ``eval --split``, the persistence baseline, the fine-tuned model's own card,
progress lines, and load-time adaptation of the published weights."""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import pytest
import torch

import opzoo
from opzoo.cli import main

from .conftest import heat_trajectories, write_canonical

L2 = re.compile(r"l2 full ([0-9.eE+-]+) \(persistence ([0-9.eE+-]+)\) over (\d+) trajectories")


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    """The user's own data: 10 trajectories of a 1-field PDE dpot-micro never saw, 32x32, 13 frames."""
    path = tmp_path_factory.mktemp("user") / "heat.h5"
    return write_canonical(path, heat_trajectories(10, 32, 13, seed=3, nu=0.01), ["T"], "heat")


def run_eval(capsys, user_file, out, *extra):
    assert main(["eval", "dpot-micro", "--data", str(user_file), "--out", str(out), "--plot-steps", "1", *extra]) == 0
    text = capsys.readouterr().out
    m = L2.search(text)
    assert m, text
    return text, float(m.group(1)), float(m.group(2)), int(m.group(3))


def test_eval_loads_the_published_weights_by_default_and_says_so(capsys, user_file, tmp_path):
    default, l2_default, base, n = run_eval(capsys, user_file, tmp_path / "a")
    assert default.splitlines()[0].startswith("weights: dpot-micro pretrained, from package opzoo-fourier")
    explicit, l2_explicit, _, _ = run_eval(capsys, user_file, tmp_path / "b", "--pretrained")
    random, l2_random, base_random, _ = run_eval(capsys, user_file, tmp_path / "c", "--no-pretrained")
    assert l2_default == l2_explicit
    assert l2_random != l2_default
    assert random.splitlines()[0] == "weights: dpot-micro random init (--no-pretrained)"
    assert base_random == base and n == 10  # the persistence baseline does not depend on the weights


def test_eval_split_test_scores_the_held_out_trajectories_of_training(capsys, user_file, tmp_path):
    text, l2, base, n = run_eval(capsys, user_file, tmp_path, "--split", "test", "--test-fraction", "0.2")
    assert n == 2 and "test split: trajectories 8-9 of 10" in text  # training's rule: the last 20 % of the file
    _, _, _, n_train = run_eval(capsys, user_file, tmp_path / "tr", "--split", "train", "--test-fraction", "0.2")
    assert n_train == 8
    with open(tmp_path / "eval_per_step.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and all(float(r["persistence_l2"]) > 0 for r in rows)  # 13 frames - T_in 10
    with open(tmp_path / "eval.csv") as f:
        (row,) = csv.DictReader(f)
    assert float(row["l2_full"]) == pytest.approx(l2, rel=1e-3)
    assert float(row["persistence_l2_full"]) == pytest.approx(base, rel=1e-3)
    assert (tmp_path / "error-vs-step.png").stat().st_size > 0


BUSY = "note: the machine is busy"  # thread_advice's line, printed or not with the machine's load


def test_finetune_writes_its_own_card_and_reports_progress(capsys, user_file, tmp_path):
    out = tmp_path / "run"
    argv = ["finetune", "dpot-micro", "--data", str(user_file), "--out", str(out), "--steps", "4",
            "--batch-size", "2", "--test-fraction", "0.2", "--set", "training.log_every=2"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if not line.startswith(BUSY)]
    assert lines[0].startswith("weights: dpot-micro pretrained, from package opzoo-fourier")
    assert lines[1] == "lr: 0.001 (recommended in dpot-micro's pretrained_cfg (finetune_lr))"
    assert re.search(r"^step 2/4  loss [0-9.e+-]+  lr [0-9.e+-]+  [0-9.]+ steps/s  ETA ", text, re.M)  # not a tty
    card = (out / "model" / "README.md").read_text()
    front, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert "base_model: dpot-micro" in front and "base_model_relation: finetune" in front
    assert "synthetic suite" not in card  # not the preset's card
    for section in ("## Base model", "## Data", "## Training", "## Evaluation on the test split", "## Command"):
        assert section in body
    from opzoo.data.fingerprint import content_hash

    name = user_file.name  # a card is published: file names and content hashes, no local path
    assert f"`{name}` — train: trajectories 0–7 of `{name}` ({content_hash(user_file)}); test: trajectories 8–9" in body
    assert str(user_file.parent) not in card
    assert "- steps: 4" in body and "- max lr (one-cycle): 0.001" in body
    rows = [line for line in body.splitlines() if line.startswith("| heat |")]
    assert [r.split("|")[3].strip() for r in rows] == ["1 step(s)", "full (3 steps)"]  # horizon 5 > the rollout
    zero, tuned, base = (float(x) for x in rows[-1].split("|")[4:7])
    assert zero > 0 and tuned > 0 and base > 0
    # the fine-tuned number is in the Hub's model-index too, measured by opzoo on the held-out split
    import yaml

    index = yaml.safe_load(front)["model-index"][0]["results"]
    assert len(index) == 1 and index[0]["dataset"]["name"] == "heat"
    assert index[0]["metrics"][0]["type"] == "l2_full" and "source" not in index[0]
    assert index[0]["metrics"][0]["value"] == pytest.approx(tuned, rel=1e-2)
    assert "held-out" in index[0]["dataset"]["split"]
    typed = [Path(a).name if Path(a).exists() and "/" in a else a for a in argv]  # the command as given, not sys.argv
    assert f"## Command\n\n```bash\n{shlex.join(['opzoo', *typed])}\n```" in body
    assert (out / "loss.png").is_file()


def test_finetune_from_scratch_is_labelled_so(capsys, user_file, tmp_path):
    out = tmp_path / "scratch"
    assert main(["finetune", "dpot-micro", "--no-pretrained", "--data", str(user_file), "--out", str(out),
                 "--steps", "2", "--batch-size", "2", "--test-fraction", "0.2", "--set", "evaluation.plots=false"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith(BUSY)]
    assert lines[0] == "weights: dpot-micro random init (--no-pretrained)"
    assert lines[1] == ("lr: 0.001 (opzoo's max lr for random init (DPOT's pretraining recipe, docs/training.md), not "
                        "necessarily dpot-micro's own (`opzoo info dpot-micro`); --lr sets another)")
    card = (out / "model" / "README.md").read_text()
    assert "base_model" not in card and "trained from scratch" in card and "at step 0 (random init)" in card
    assert not list(out.rglob("*.png"))  # evaluation.plots=false: no picture at all, loss.png included


def test_load_adapts_the_published_weights_to_new_shapes():
    pre = opzoo.load("dpot-micro", pretrained=True)
    model = opzoo.load("dpot-micro", pretrained=True, in_channels=3, img_size=[64, 64], in_timesteps=6).eval()
    c = model.config
    assert (c.in_channels, c.out_channels, c.in_timesteps, list(c.img_size)) == (3, 3, 6, [64, 64])
    with torch.no_grad():
        y = model(torch.randn(2, 64, 64, 6, 3))
    assert y.shape == (2, 64, 64, 1, 3)
    old, new = pre.state_dict(), model.state_dict()
    assert torch.equal(new["blocks.0.norm1.weight"], old["blocks.0.norm1.weight"])  # unchanged tensors copied
    assert torch.equal(new["out_head.4.weight"][:2], old["out_head.4.weight"])  # the old channels' output rows
    assert torch.equal(new["time_agg.w"], old["time_agg.w"][-6:])  # the newest frames keep their weights
    assert new["pos_embed"].shape[-2:] == (16, 16) and old["pos_embed"].shape[-2:] == (8, 8)  # interpolated
    assert any("pos_embed" in line and "interpolated" in line for line in model.adaptation)
    cfg = model.pretrained_cfg  # the shape facts describe the adapted model, not the pretrained one
    assert (cfg["channels"], cfg["in_timesteps"], cfg["resolution"]) == (3, 6, [64, 64])
    assert pre.pretrained_cfg["channels"] == 2 and "adapted_from" in cfg


def test_a_mismatch_that_cannot_be_adapted_says_what_can():
    with pytest.raises(opzoo.WeightsError, match=r"only in_channels, out_channels, in_timesteps, img_size adapt"):
        opzoo.load("dpot-micro", pretrained=True, width=64)


def test_timm_names():
    assert "dpot-micro" in opzoo.list_models("dpot-*", pretrained=True)
    assert "nestor-s" in opzoo.list_models("nestor-*") and not opzoo.list_models("nestor-*", pretrained=True)
    assert opzoo.create_model("dpot-micro").preset_name == "dpot-micro"
    with pytest.raises(opzoo.UnknownNameError, match="dpot-micro"):
        opzoo.create_model("dpot-mirco")


def test_opzoo_list_pretrained(capsys):
    assert main(["list", "--pretrained", "dpot-*"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split() == ["preset", "weights", "here", "license"]
    rows = {line.split()[0]: line for line in lines}
    assert list(rows) == opzoo.list_models("dpot-*", pretrained=True)
    # where the weights are (the micro ones ship: offline), and their license, or that none is stated
    assert "shipped (offline)  MIT (opzoo's own weights" in rows["dpot-micro"]
    assert "download  " in rows["dpot-s"] and rows["dpot-s"].endswith("license not stated")
    assert main(["list", "--pretrained", "nestor-*"]) == 0
    assert capsys.readouterr().out.strip() == "no models with published weights match 'nestor-*'"


def test_rollout_runs_the_published_weights_by_default_and_titles_its_plot(capsys, user_file, tmp_path):
    png = tmp_path / "r.png"
    assert main(["rollout", "dpot-micro", "--data", str(user_file), "--index", "7", "--plot", str(png),
                 "--plot-steps", "1"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("weights: dpot-micro pretrained, from package opzoo-fourier")
    assert "rolled out 3 steps from trajectory 7" in out and png.stat().st_size > 0


def test_a_card_for_a_saved_repo_names_it_as_the_base(capsys, user_file, tmp_path):
    """A run config naming a saved repo (model.pretrained left false) still fine-tunes its weights."""
    from opzoo.training import Trainer, finetune_config

    base = opzoo.load("dpot-micro", pretrained=True).save_pretrained(tmp_path / "base")
    cfg = finetune_config(str(base), [str(user_file)], str(tmp_path / "run"), steps=1, batch_size=2,
                          test_fraction=0.2, pretrained=False, overrides={"evaluation.plots": False})
    Trainer(cfg, show_progress=False).fit()
    card = (tmp_path / "run" / "model" / "README.md").read_text()
    # the front matter names the published model the lineage starts from (a folder's name means nothing on the Hub);
    # the text names the saved repo it was fine-tuned from
    assert "base_model: dpot-micro\n" in card and "(a saved opzoo repo)" in card and str(tmp_path) not in card
    assert "- max lr (one-cycle): 0.001" in card  # the finetune_lr the saved config.json records
