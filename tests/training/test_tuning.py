"""Issue 69: what a fine-tune trains (``--tune full|head|lora[:RANK]``) and the memory plan before its first step."""

import json
import re
import resource
import subprocess
import sys

import pytest
import torch

import opzoo
from opzoo.training.finetune import finetune_config
from opzoo.training.memory_plan import check_before_build, meta_copy, plan_memory
from opzoo.training.tuning import apply_tuning, parse_tune
from tests.training.conftest import run_cli

NO_PEFT = "import sys; sys.modules['peft'] = None\n"  # `import peft` raises ImportError in this process


def _input(seed=0):
    return torch.randn(2, 32, 32, 10, 2, generator=torch.Generator().manual_seed(seed))


def test_tune_specs_and_their_errors():
    assert str(parse_tune("full")) == "full" and str(parse_tune("head")) == "head"
    assert parse_tune("lora").rank == 8 and parse_tune("lora:4").rank == 4
    for bad in ("lora:0", "head:4", "lora:x", "all", ""):
        with pytest.raises(opzoo.ConfigError, match="training.tune"):
            parse_tune(bad)
    with pytest.raises(opzoo.ConfigError, match="training.tune: 'everything'"):
        finetune_config("dpot-micro", ["x.h5"], "out", tune="everything")


def test_lora_finetune_is_saved_merged_loads_without_peft_and_computes_the_adapted_model(tmp_path, datasets):
    """``opzoo finetune dpot-micro --tune lora:4`` for 2 steps: the trainable count is printed and recorded in
    config.json; the saved model loads where peft cannot be imported and computes what the base model with the saved
    adapter computes (peft's own PeftModel), to float32 rounding."""
    out = tmp_path / "run"
    result = run_cli("finetune", "dpot-micro", "--data", str(datasets["heat"]), "--out", str(out), "--steps", "2",
                     "--batch-size", "2", "--tune", "lora:4")
    assert result.returncode == 0, result.stderr
    said = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("tune lora:4: ")]
    assert len(said) == 1 and "parameters trainable" in said[0], result.stdout + result.stderr
    config = json.loads((out / "model" / "config.json").read_text())
    tuning = config["pretrained_cfg"]["tuning"]
    assert tuning["mode"] == "lora" and tuning["rank"] == 4
    assert f"{tuning['trainable_parameters']:,} of {tuning['parameters']:,}" in said[0]
    assert 0 < tuning["trainable_parameters"] < tuning["parameters"] / 10
    assert (out / "adapter" / "adapter_config.json").is_file()
    from opzoo.evaluation.splits import lineage_lines  # what `opzoo info` says of the saved model's lineage

    assert (f"  tuned:      lora rank 4: {tuning['trainable_parameters']:,} of {tuning['parameters']:,} parameters "
            "trained; the adapters merged into these weights") in lineage_lines(config["pretrained_cfg"])
    assert "- what was trained: tune lora:4: " in (out / "model" / "README.md").read_text()

    x = _input()
    torch.save(x, tmp_path / "x.pt")
    script = NO_PEFT + (f"import torch, opzoo\nm = opzoo.load({str(out / 'model')!r})\nassert not m.training\n"
                        f"assert not any('lora' in n for n, _ in m.named_parameters())\n"
                        f"torch.save(m(torch.load({str(tmp_path / 'x.pt')!r})).detach(), {str(tmp_path / 'y.pt')!r})")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    merged = torch.load(tmp_path / "y.pt")

    import peft

    base = opzoo.load("dpot-micro", pretrained=True)
    adapted = peft.PeftModel.from_pretrained(base, str(out / "adapter")).eval()
    with torch.no_grad():
        unmerged, plain = adapted(x), opzoo.load("dpot-micro", pretrained=True)(x)
    assert not torch.allclose(unmerged, plain, atol=1e-6), "two LoRA steps changed nothing"
    torch.testing.assert_close(merged, unmerged, rtol=1e-5, atol=1e-5)

    memory = json.loads((out / "memory.json").read_text())
    assert 0.75 <= memory["estimate_over_measured"] <= 1.25, memory
    assert memory["estimate"]["trainable"] == tuning["trainable_parameters"]


def test_lora_without_peft_is_refused_in_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError
    model = opzoo.load("dpot-micro")
    with pytest.raises(opzoo.ConfigError) as refused:
        apply_tuning(model, parse_tune("lora"))
    assert str(refused.value) == "--tune lora needs Hugging Face's peft: pip install 'opzoo[lora]' (or pip install peft)"
    assert all(p.requires_grad for p in model.parameters())  # nothing frozen


def test_head_tune_trains_the_head_and_leaves_the_blocks_as_pretrained(tmp_path, datasets):
    from opzoo.training.trainer import Trainer

    cfg = finetune_config("dpot-micro", [str(datasets["heat"])], str(tmp_path / "run"), steps=2, batch_size=2,
                          tune="head")
    trainer = Trainer(cfg, show_progress=False)
    assert trainer.tuning.spec.mode == "head"
    trainer.fit()
    base = dict(opzoo.load("dpot-micro", pretrained=True).named_parameters())
    saved = dict(opzoo.load(str(tmp_path / "run" / "model")).named_parameters())
    head = trainer.model.head_parameters()
    assert {n for n in saved if n not in head and not torch.equal(saved[n], base[n])} == set()
    assert any(not torch.equal(saved[n], base[n]) for n in head)
    assert json.loads((tmp_path / "run" / "model" / "config.json").read_text())["pretrained_cfg"]["tuning"][
        "trainable_parameters"] == sum(base[n].numel() for n in head)


def _poseidon_l(tmp_path, datasets, tune, max_memory, batch=1):
    return finetune_config("poseidon-l", [str(datasets["heat"])], str(tmp_path / "run"), steps=1, batch_size=batch,
                           pretrained=False, tune=tune, max_memory=max_memory)


@pytest.mark.slow  # 40 s: poseidon-l's forward on meta, for the step asked and each option
def test_a_step_that_cannot_fit_is_refused_before_the_model_is_built(tmp_path, datasets):
    """poseidon-l (628M parameters, 2.3 GiB of float32 weights) under --max-memory 2: one line naming what makes it
    fit, from a process that never held the model (its peak resident memory stays below the weights' size)."""
    script = ("from opzoo.cli import main\nraise SystemExit(main(['finetune', 'poseidon-l', '--no-pretrained', "
              f"'--data', {str(datasets['heat'])!r}, '--out', {str(tmp_path / 'run')!r}, '--steps', '1', "
              "'--batch-size', '1', '--max-memory', '2']))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert result.returncode == 2, result.stderr  # a configuration error
    error = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(error) == 1 and "a training step needs about" in error[0] and "--max-memory 2" in error[0], result.stderr
    assert "none of --tune lora, --batch-size 1, checkpointing and bf16 fits alone" in error[0]
    assert "its weights alone take 2.4 GiB" in error[0]
    assert peak_kib * 1024 < 628_575_524 * 4, "the refusal came after the model was built at full size"
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # 25 s
def test_the_plan_names_what_fits_and_accepts_lora_where_it_fits(tmp_path, datasets):
    with pytest.raises(opzoo.ConfigError, match=r"it fits with --tune lora \(") as refused:
        check_before_build(_poseidon_l(tmp_path, datasets, "full", 6))
    assert "--tune head" in str(refused.value) and "\n" not in str(refused.value)
    plan = check_before_build(_poseidon_l(tmp_path, datasets, "lora", 6))
    assert plan is not None and plan.estimate.total <= plan.budget == 6 * 2**30
    assert plan.estimate.trainable < plan.estimate.parameters / 50


def test_the_plan_turns_checkpointing_on_when_only_that_makes_the_step_fit(tmp_path, datasets):
    model = opzoo.load("dpot-micro")
    cfg = finetune_config("dpot-micro", [str(datasets["heat"])], str(tmp_path / "run"), batch_size=64)
    shape = (64, 32, 32, 10, 2)
    meta = meta_copy(model)
    apply_tuning(meta, parse_tune("full"))
    from opzoo.training.memory import estimate_step_memory

    without = estimate_step_memory(meta, shape).total
    with_ckpt = estimate_step_memory(meta, shape, grad_checkpointing=True).total
    assert with_ckpt < without
    budget = (with_ckpt + without) / 2 / 2**30
    cfg.training.max_memory = budget
    plan = plan_memory(model, cfg, shape, [], torch.device("cpu"))
    assert plan.grad_checkpointing and plan.turned_on and "gradient checkpointing turned on" in plan.line()
    cfg.training.max_memory = without * 1.01 / 2**30
    assert not plan_memory(model, cfg, shape, [], torch.device("cpu")).turned_on


def test_a_micro_run_that_cannot_fit_is_refused_in_one_line_naming_what_fits(tmp_path, datasets, capsys):
    """The default tier's case of the two above: dpot-micro at batch 64 under 64 MiB (its activations are most of a
    step): refused before the model is built, in one line naming the smaller batch that fits."""
    from opzoo.cli import main

    code = main(["finetune", "dpot-micro", "--data", str(datasets["heat"]), "--out", str(tmp_path / "cli"),
                 "--steps", "1", "--batch-size", "64", "--max-memory", "0.0625"])
    assert code == 2 and not (tmp_path / "cli").exists()
    error = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(error) == 1 and re.match(r"^opzoo finetune: error: dpot-micro: a training step needs about 1\d\d MiB "
                                        r"at its peak \(.*activations 1\d\d MiB.*\), more than the 64 MiB "
                                        r"--max-memory 0.0625; it fits with --batch-size 16 \(", error[0]), error


@pytest.mark.slow  # 12 s: three short LoRA runs
def test_a_lora_run_resumes_to_the_losses_and_weights_of_an_uninterrupted_one(tmp_path, datasets, monkeypatch):
    """The adapters are in the run's checkpoints: a LoRA run stopped after step 3 resumes from its step-2 checkpoint
    to the losses and the merged weights of a run never stopped."""
    from opzoo.training.trainer import Trainer
    from tests.training.conftest import train_losses

    def config(out):
        return finetune_config("dpot-micro", [str(datasets["heat"])], str(out), steps=4, batch_size=2, tune="lora:4",
                               overrides={"checkpoint.every": 2, "training.log_every": 1})

    Trainer(config(tmp_path / "whole"), show_progress=False).fit()
    real_step = Trainer._step

    def stop_after_three(self, i, batch, logger):
        if i == 3:
            raise KeyboardInterrupt
        return real_step(self, i, batch, logger)

    monkeypatch.setattr(Trainer, "_step", stop_after_three)
    with pytest.raises(KeyboardInterrupt):
        Trainer(config(tmp_path / "cut"), show_progress=False).fit()
    monkeypatch.setattr(Trainer, "_step", real_step)
    result = Trainer(config(tmp_path / "cut"), show_progress=False).fit()
    assert result.resumed_from == 2
    assert train_losses(tmp_path / "cut") == train_losses(tmp_path / "whole")
    whole, cut = (opzoo.load(str(tmp_path / d / "model")).state_dict() for d in ("whole", "cut"))
    assert all(torch.equal(whole[k], cut[k]) for k in whole)


@pytest.mark.parametrize("tune", [pytest.param("head", marks=pytest.mark.slow), "lora:2"])
def test_tensors_adapted_to_new_channels_are_always_trained(tmp_path, tune):
    """A 3-channel file for dpot-micro's 2 channels: the fit adapts its input and output layers; under --tune head or
    lora those tensors are trainable and trained (they hold rows no pretraining trained), the blocks are not."""
    import numpy as np

    from opzoo.training.trainer import Trainer
    from tests.training.conftest import heat_trajectories, write_canonical

    data = np.concatenate([heat_trajectories(8, 32, 14, seed=s) for s in range(3)], axis=-1)
    path = write_canonical(tmp_path / "three.h5", data, ["a", "b", "c"], "heat")
    cfg = finetune_config("dpot-micro", [str(path)], str(tmp_path / "run"), steps=2, batch_size=2, tune=tune)
    trainer = Trainer(cfg, show_progress=False)
    adapted = trainer.tuning.adapted
    assert adapted and trainer.model.config.in_channels == 3
    params = dict(trainer.model.named_parameters())

    def param(name):
        return params[name] if name in params else params[name.rpartition(".")[0] + ".base_layer." +
                                                          name.rpartition(".")[2]]

    before = {n: param(n).detach().clone() for n in adapted}
    assert all(param(n).requires_grad for n in adapted)
    assert f"{len(adapted)} tensor(s) adapted to the data always trained" in trainer.tuning.line()
    trainer.fit()
    assert all(not torch.equal(param(n), before[n]) for n in adapted), "an adapted tensor was not trained"
    frozen = [n for n, p in params.items() if not p.requires_grad]
    assert frozen and "blocks.0.mixer.w1" in frozen
