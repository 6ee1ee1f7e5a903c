"""The mup-fno optimizer hook: init and Adam-lr multipliers sqrt(log N0 / log N) on exactly the
spectral weights (found through the public opzoo.SpectralLayer marker), errors, element-wise
gradient clipping, composition with the schedule, and checkpoint + resume."""

from __future__ import annotations

import math
import re
import shutil

import pytest
import torch
from torch import nn

import opzoo
from opzoo.training import Trainer, parse_run_config, read_log, schedule_factor
from opzoo.training.config import HookSpec
from opzoo.training.hooks import build_hooks, default_param_groups
from opzoo_mup import MuPFNO, mup_factor

from .conftest import fno1d_run_document

TINY_POT = dict(img_size=[16, 16], patch_size=2, width=32, depth=2, out_layer_dim=16, norm_groups=4,
                mixer="fourier-attention", mixer_args={"n_blocks": 4, "modes": 6})

# (model factory, expected spectral-parameter-name pattern, kept modes per dim K, spatial dims d)
CASES = {
    "fno-1d": (lambda: opzoo.load("fno-1d", modes=16, width=16), r"spectral\.\d+\.weights\.\d+", 16, 1),
    "fno-2d": (lambda: opzoo.load("fno-2d", modes=6, width=8), r"spectral\.\d+\.weights\.\d+", 6, 2),
    "fno-3d": (lambda: opzoo.load("fno-3d", modes=3, width=4), r"spectral\.\d+\.weights\.\d+", 3, 3),
    # DPOT-Ti's network (the POT preset) with its Fourier attention kept small: N = modes^d
    "dpot-ti": (lambda: opzoo.load("dpot-ti", **TINY_POT), r"blocks\.\d+\.mixer\.(w1|b1|w2|b2)", 6, 2),
}


def _built_pair(factory, hook):
    torch.manual_seed(0)
    reference = factory()
    torch.manual_seed(0)
    model = factory()
    hook.on_model_built(model)
    groups = hook.param_groups(model, default_param_groups(model, 0.0))
    return reference, model, groups


def test_factor_matches_algorithm_1_by_hand():
    # sqrt(log N0 / log N): fno-1d K0 = 4 -> K = 16: sqrt(log 4 / log 16) = sqrt(1/2)
    assert mup_factor(16, 4) == pytest.approx(math.sqrt(0.5), rel=1e-15)
    # Algorithm 1 (lines 4-5) writes sqrt(log K_proxy / log K*): the same for isotropic K^d, any d
    for d in (1, 2, 3):
        assert mup_factor(32 ** d, 4 ** d) == pytest.approx(math.sqrt(math.log(4) / math.log(32)), rel=1e-14)
    assert mup_factor(2 ** 3, 2 ** 3) == 1.0


@pytest.mark.parametrize("preset", list(CASES))
def test_init_and_lr_multipliers_on_spectral_weights_only(preset):
    factory, pattern, K, d = CASES[preset]
    base = 2
    hook = MuPFNO(base_modes=base)
    reference, model, groups = _built_pair(factory, hook)
    expected_c = math.sqrt(math.log(base ** d) / math.log(K ** d))
    lr_scale = {n: g["lr_scale"] for g in groups for n in g["names"]}
    ref = dict(reference.named_parameters())
    spectral = [n for n, _ in model.named_parameters() if re.fullmatch(pattern, n)]
    assert spectral and sorted(hook.factors) == sorted(spectral)
    for name, p in model.named_parameters():
        c = expected_c if name in spectral else 1.0
        assert lr_scale[name] == pytest.approx(c, rel=1e-12), name
        assert hook.multipliers(model)[name] == pytest.approx(c, rel=1e-12)
        r = ref[name].detach()
        # init: the same draw times c (one float32 rounding per element), so its std is c times the std
        torch.testing.assert_close(p.detach(), r * c, rtol=2 ** -23, atol=0)
        if p.numel() > 1 and float(r.abs().std()) > 0:
            ratio = float((p.detach().to(torch.complex128 if p.is_complex() else torch.float64)).std()
                          / r.to(torch.complex128 if r.is_complex() else torch.float64).std())
            assert ratio == pytest.approx(c, rel=1e-6), name
    # every trainable parameter is in exactly one group (the trainer's check passes)
    assert sorted(lr_scale) == sorted(n for n, p in model.named_parameters() if p.requires_grad)


@pytest.mark.parametrize("preset", list(CASES))
def test_base_equal_to_model_is_the_identity(preset):
    factory, _, K, _ = CASES[preset]
    reference, model, groups = _built_pair(factory, MuPFNO(base_modes=K))
    for (n, a), (_, b) in zip(reference.named_parameters(), model.named_parameters()):
        assert torch.equal(a, b), n
    assert all(g["lr_scale"] == 1.0 for g in groups)


def test_missing_base_and_too_few_modes_are_named_errors():
    with pytest.raises(opzoo.ConfigError, match="mup-fno: base_modes is required"):
        MuPFNO()
    with pytest.raises(opzoo.ConfigError, match="base_modes is required"):  # through a run config's hooks list
        build_hooks([HookSpec("mup-fno", {})])
    with pytest.raises(opzoo.ConfigError, match="base_modes: expected an int"):
        MuPFNO(base_modes="four")
    with pytest.raises(opzoo.ConfigError, match=r"base_modes: the base keeps N0 = 1 modes"):
        MuPFNO(base_modes=1).on_model_built(opzoo.load("fno-1d", modes=4, width=4))
    model = opzoo.load("fno-1d", modes=1, width=4)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(opzoo.ConfigError, match=r"modes: a spectral weight keeping N = 1 modes"):
        MuPFNO(base_modes=4).on_model_built(model)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing changed
    with pytest.raises(opzoo.ConfigError, match=r"base_modes: \[4, 4\] has 2 entries for a spectral weight with 1"):
        MuPFNO(base_modes=[4, 4]).on_model_built(opzoo.load("fno-1d", modes=8, width=4))
    with pytest.raises(opzoo.ConfigError, match="has no spectral weights"):
        MuPFNO(base_modes=4).on_model_built(nn.Sequential(nn.Linear(2, 2)))
    for bad in (-1, 0, True, "0.01"):
        with pytest.raises(opzoo.ConfigError, match="mup-fno: grad_clip: expected a positive number"):
            MuPFNO(base_modes=4, grad_clip=bad)


def test_per_dim_base_modes():
    """``base_modes: [4, 2]`` means N0 = 8 for a 2-D weight keeping 6 x 6 modes."""
    hook = MuPFNO(base_modes=[4, 2])
    _, model, _ = _built_pair(lambda: opzoo.load("fno-2d", modes=6, width=4), hook)
    assert len(hook.factors) == 8
    assert all(v == pytest.approx(math.sqrt(math.log(8) / math.log(36)), rel=1e-14) for v in hook.factors.values())


class ThirdPartySpectral(nn.Module):
    """A spectral layer of another package: opts in by the method alone (no opzoo base class)."""

    def __init__(self):
        super().__init__()
        self.kernel = nn.Parameter(torch.ones(3, 5, 7, dtype=torch.cfloat))
        self.mix = nn.Parameter(torch.ones(3))

    def spectral_weights(self, spatial_dims):
        return [(self.kernel, (5, 7))]


def test_a_third_party_layer_opts_in_through_the_public_marker():
    model = nn.Sequential(nn.Linear(3, 3), ThirdPartySpectral())
    assert isinstance(model[1], opzoo.SpectralLayer) and not isinstance(model[0], opzoo.SpectralLayer)
    found = opzoo.find_spectral_weights(model)
    assert [(w.name, w.modes, w.n_modes) for w in found] == [("1.kernel", (5, 7), 35)]
    hook = MuPFNO(base_modes=[2, 3])
    hook.on_model_built(model)
    c = math.sqrt(math.log(6) / math.log(35))
    assert torch.allclose(model[1].kernel, torch.full((3, 5, 7), c, dtype=torch.cfloat))
    assert torch.equal(model[1].mix, torch.ones(3))


def test_marker_errors_name_the_layer():
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))

        def spectral_weights(self, spatial_dims):
            return [(torch.ones(2), (4,))]

    with pytest.raises(opzoo.ConfigError, match=r"Bad 0\.spectral_weights\(\): a marked tensor .* is not a parameter"):
        opzoo.find_spectral_weights(nn.Sequential(Bad()))
    pot = opzoo.create_model("pot", **TINY_POT)
    with pytest.raises(opzoo.ConfigError, match="spatial_dims: fourier-attention needs"):
        opzoo.find_spectral_weights(pot.blocks[0].mixer)  # a bare mixer does not know its dims


def test_elementwise_gradient_clipping_of_spectral_weights_only():
    model = opzoo.load("fno-1d", modes=4, width=4)
    hook = MuPFNO(base_modes=2, grad_clip=0.01)
    hook.on_model_built(model)
    torch.manual_seed(1)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 0.05
    raw = {n: p.grad.clone() for n, p in model.named_parameters()}
    ctx = opzoo.StepContext(step=0, model=model, optimizer=torch.optim.Adam(model.parameters()), batch={}, loss=0.0,
                            base_lr=1e-3, fresh_batch=None, loss_fn=None, forward=model, all_reduce_mean=None)
    hook.before_optimizer_step(ctx)
    for n, p in model.named_parameters():
        g = raw[n]
        if n in hook.factors:  # real and imaginary parts clipped separately, element by element
            expected = torch.complex(g.real.clamp(-0.01, 0.01), g.imag.clamp(-0.01, 0.01))
            assert torch.equal(p.grad, expected), n
        else:
            assert torch.equal(p.grad, g), n


def _mup_doc(out, data, **extra):
    return fno1d_run_document(out, data, optimizer={"hooks": [{"name": "mup-fno", "args": {"base_modes": 2, **extra}}]},
                              schedule={"name": "one-cycle", "warmup": 0.25, "div_factor": 10.0, "final_div_factor": 10.0})


def test_lr_composes_with_the_schedule(tmp_path, burgers_file):
    doc = _mup_doc(tmp_path / "run", burgers_file)
    seen = []

    class Probe(opzoo.OptimizerHook):  # records the lr each group got at each step, after the optimizer step
        def after_optimizer_step(self, ctx):
            seen.append((ctx.step, ctx.base_lr, [(g["names"], g["lr"]) for g in ctx.optimizer.param_groups]))

    cfg = parse_run_config(doc)
    trainer = Trainer(cfg, show_progress=False)
    trainer.hooks.append(Probe())
    trainer.fit()
    c = mup_factor(8, 2)
    assert len(seen) == 8
    for step, base, groups in seen:
        assert base == pytest.approx(3e-3 * schedule_factor(cfg.schedule, step, 8), rel=1e-12)
        for names, lr in groups:
            spectral = all(".weights." in n for n in names)
            assert spectral or not any(".weights." in n for n in names)
            assert lr == pytest.approx(base * (c if spectral else 1.0), rel=1e-12), (step, names)


def test_checkpoint_and_resume_reproduce_the_run(tmp_path, burgers_file):
    """Interrupted after the step-4 checkpoint and resumed: the same losses and weights, bit for bit
    (on resume the hook rescales a fresh init, which the checkpoint then replaces)."""
    full = tmp_path / "full"
    Trainer(parse_run_config(_mup_doc(full, burgers_file, grad_clip=0.01)), show_progress=False).fit()
    cut = tmp_path / "cut"
    shutil.copytree(full, cut)
    shutil.rmtree(cut / "checkpoints" / "step-00000008")
    shutil.rmtree(cut / "model")
    resumed = Trainer(parse_run_config(_mup_doc(cut, burgers_file, grad_clip=0.01)), show_progress=False).fit()
    assert resumed.resumed_from == 4
    losses = lambda d: [(r["step"], r["loss"]) for r in read_log(d / "log.jsonl", kind="train")]
    assert losses(cut) == losses(full) and len(losses(full)) == 8
    from safetensors.torch import load_file

    a, b = load_file(full / "model" / "model.safetensors"), load_file(cut / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the checkpoint records the factors; resuming with another base is refused
    # (the run directory refuses the changed hook argument by name before the hook sees the checkpoint)
    with pytest.raises(opzoo.ConfigError, match=r"other μP factors|optimizer\.hooks\[0\]\.args\.base_modes: 2 -> 4"):
        doc = _mup_doc(tmp_path / "other", burgers_file)
        shutil.copytree(full, tmp_path / "other")
        doc["optimizer"]["hooks"][0]["args"]["base_modes"] = 4
        Trainer(parse_run_config(doc), show_progress=False).fit()


def test_a_non_adam_optimizer_is_a_config_error_quoting_the_papers_scope_unless_allowed(tmp_path, burgers_file):
    """Theorem 3.5 is the Adam scaling; SGD is refused before the first update, naming the way out."""
    doc = _mup_doc(tmp_path / "sgd", burgers_file)
    doc["optimizer"]["name"] = "sgd"
    trainer = Trainer(parse_run_config(doc), show_progress=False)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    with pytest.raises(opzoo.ConfigError, match=r"mup-fno: optimizer 'SGD' is outside the paper's scope .*"
                       r"optimizer-dependent … In our work, we focus on the Adam optimizer.*allow_non_adam: true"):
        trainer.fit()
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())  # no update was made
    doc["output_dir"] = str(tmp_path / "sgd-allowed")
    doc["optimizer"]["hooks"][0]["args"]["allow_non_adam"] = True
    Trainer(parse_run_config(doc), show_progress=False).fit()
    assert len(read_log(tmp_path / "sgd-allowed" / "log.jsonl", kind="train")) == 8
    for name in ("adam", "adamw"):  # the paper's optimizer passes
        doc["output_dir"] = str(tmp_path / name)
        doc["optimizer"]["name"] = name
        doc["optimizer"]["hooks"][0]["args"]["allow_non_adam"] = False
        Trainer(parse_run_config(doc), show_progress=False).fit()
    with pytest.raises(opzoo.ConfigError, match="allow_non_adam: expected true or false"):
        MuPFNO(base_modes=2, allow_non_adam="no")
