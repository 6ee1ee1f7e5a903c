"""The optimizer-hook interface: init, parameter groups, per-group per-step lr multipliers, step observation."""

import pytest
import torch

import opzoo
from opzoo.training import OptimizerHook, Trainer, one_cycle_factor, parse_run_config, read_log

from .conftest import run_document, tiny_pot_args


class RecordingHook(OptimizerHook):
    """One group per tensor; freezes ``pos_embed`` through a zero multiplier; halves the rest's lr_scale;
    does one extra forward/backward on a fresh batch after each step (as FLeRM does)."""

    instances: list = []

    def __init__(self, init_value: float = 0.25):
        self.init_value = init_value
        self.calls, self.lrs, self.extra_losses, self.seen_losses = [], [], [], []
        self.steps_seen = 0
        RecordingHook.instances.append(self)

    def on_model_built(self, model):
        self.calls.append("on_model_built")
        with torch.no_grad():
            model.pos_embed.fill_(self.init_value)

    def param_groups(self, model, groups):
        self.calls.append("param_groups")
        names = [n for g in groups for n in g["names"]]
        params = dict(model.named_parameters())
        return [{"params": [params[n]], "names": [n], "lr_scale": 1.0 if n == "pos_embed" else 0.5} for n in names]

    def before_optimizer_step(self, ctx):
        assert all(p.grad is not None for n, p in ctx.model.named_parameters() if n.startswith("blocks"))

    def lr_multipliers(self, ctx):
        return [0.0 if g["names"] == ["pos_embed"] else 2.0 for g in ctx.optimizer.param_groups]

    def after_optimizer_step(self, ctx):
        self.steps_seen += 1
        self.seen_losses.append(ctx.loss)
        self.lrs.append((ctx.step, ctx.base_lr, [g["lr"] for g in ctx.optimizer.param_groups]))
        fresh = ctx.fresh_batch()
        assert fresh["x"].shape == ctx.batch["x"].shape and not torch.equal(fresh["x"], ctx.batch["x"])
        ctx.model.zero_grad(set_to_none=True)
        loss = ctx.loss_fn(ctx.forward(fresh["x"]), fresh)
        loss.backward()
        assert ctx.model.blocks[0].norm1.weight.grad is not None
        self.extra_losses.append(float(ctx.all_reduce_mean(loss.detach())))
        ctx.model.zero_grad(set_to_none=True)

    def state_dict(self):
        return {"steps_seen": self.steps_seen, "trace": torch.tensor(self.seen_losses)}

    def load_state_dict(self, state):
        self.steps_seen = state["steps_seen"]
        self.seen_losses = state["trace"].tolist()


@pytest.fixture
def registered():
    registry = opzoo.get_registry()
    with registry.owned_by("tests"):
        registry.register_optimizer_hook("test-recording", RecordingHook)
    RecordingHook.instances.clear()
    yield
    registry.forget("tests")


def test_hook_controls_init_groups_and_lr(tmp_path, datasets, registered):
    doc = run_document(tmp_path / "run", datasets, model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 4, "batch_size": 2}, checkpoint={"every": 2},
                       optimizer={"lr": 1e-3, "hooks": [{"name": "test-recording", "args": {"init_value": 0.25}}]})
    trainer = Trainer(parse_run_config(doc))
    hook = RecordingHook.instances[-1]
    assert hook.calls == ["on_model_built", "param_groups"]
    n_tensors = sum(1 for p in trainer.model.parameters() if p.requires_grad)
    assert len(trainer.optimizer.param_groups) == n_tensors  # one group per tensor
    result = trainer.fit()
    # pos_embed was re-initialized by the hook and never moved (multiplier 0); other tensors moved
    assert torch.all(trainer.model.pos_embed == 0.25)
    # lr = lr · schedule(step) · lr_scale · multiplier, per group and step
    for step, base, lrs in hook.lrs:
        assert base == pytest.approx(1e-3 * one_cycle_factor(step, 4, 0.2, 1e4, 1e4))
        groups = trainer.optimizer.param_groups
        for g, lr in zip(groups, lrs):
            assert lr == pytest.approx(0.0 if g["names"] == ["pos_embed"] else base * 0.5 * 2.0)
    assert hook.seen_losses == result.losses == [r["loss"] for r in read_log(tmp_path / "run" / "log.jsonl")]
    assert len(hook.extra_losses) == 4 and all(x == x for x in hook.extra_losses)


def test_hook_state_is_checkpointed_and_restored(tmp_path, datasets, registered):
    import shutil

    doc = run_document(tmp_path / "run", datasets, model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 6, "batch_size": 2}, checkpoint={"every": 2, "keep_last": 3},
                       optimizer={"hooks": [{"name": "test-recording"}]})
    Trainer(parse_run_config(doc)).fit()
    first = RecordingHook.instances[-1]
    # the same run without its last checkpoint resumes from step 4 with the hook's state
    shutil.copytree(tmp_path / "run", tmp_path / "cut")
    shutil.rmtree(tmp_path / "cut" / "checkpoints" / "step-00000006")
    doc["output_dir"] = str(tmp_path / "cut")
    assert Trainer(parse_run_config(doc)).fit().resumed_from == 4
    second = RecordingHook.instances[-1]
    assert second.steps_seen == 6
    assert second.seen_losses == pytest.approx(first.seen_losses)


def test_bad_hook_args_named(tmp_path, datasets, registered):
    doc = run_document(tmp_path / "run", datasets, model={"name": "pot", "args": tiny_pot_args()},
                       optimizer={"hooks": [{"name": "test-recording", "args": {"bogus": 1}}]})
    with pytest.raises(opzoo.ConfigError, match="'test-recording' does not accept args"):
        Trainer(parse_run_config(doc))


def test_resume_refuses_checkpoints_of_another_run(tmp_path, datasets):
    doc = run_document(tmp_path / "run", datasets, model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 2, "batch_size": 2}, checkpoint={"every": 1})
    Trainer(parse_run_config(doc), show_progress=False).fit()
    doc["model"]["args"] = {**tiny_pot_args(), "width": 24}
    with pytest.raises(opzoo.OpzooError, match=r"Changed: model\.args\.width: 16 -> 24\."):
        Trainer(parse_run_config(doc), show_progress=False).fit()


class FreshBatchHook(OptimizerHook):
    """Collects fresh batches 0..2 of every step, twice, and the run directory the context names."""

    instances: list = []

    def __init__(self):
        self.fresh, self.run_dirs = [], []
        FreshBatchHook.instances.append(self)

    def after_optimizer_step(self, ctx):
        self.fresh.append([ctx.fresh_batch(k)["x"] for k in range(3)] + [ctx.fresh_batch(2)["x"], ctx.fresh_batch()["x"]])
        self.run_dirs.append(ctx.run_dir)


def test_fresh_batch_index_and_run_dir(tmp_path, datasets):
    registry = opzoo.get_registry()
    with registry.owned_by("tests"):
        registry.register_optimizer_hook("test-fresh", FreshBatchHook)
    try:
        doc = run_document(tmp_path / "run", datasets, model={"name": "pot", "args": tiny_pot_args()},
                           training={"steps": 2, "batch_size": 4}, checkpoint={"every": None},
                           optimizer={"hooks": [{"name": "test-fresh"}]})
        Trainer(parse_run_config(doc), show_progress=False).fit()
    finally:
        registry.forget("tests")
    hook = FreshBatchHook.instances[-1]
    assert hook.run_dirs == [tmp_path / "run"] * 2
    for step in hook.fresh:
        b0, b1, b2, b2_again, default = step
        assert torch.equal(b2, b2_again) and torch.equal(b0, default)  # a function of (seed, step, index)
        assert not torch.equal(b0, b1) and not torch.equal(b1, b2)
    assert not torch.equal(hook.fresh[0][1], hook.fresh[1][1])  # and of the step
