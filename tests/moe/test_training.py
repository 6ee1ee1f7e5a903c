"""nestor-ti and aot-moe-pot-t at micro dims train in the opzoo Trainer on two generated PDEs (heat,
advection): the loss falls, both aux losses and the expert load are logged, `opzoo eval` plots the
expert load per dataset, and the exported model reloads bit-exactly."""

import json

import pytest
import torch

import opzoo
from opzoo.cli import main as training_cli
from opzoo.training import Trainer, parse_run_config, read_log
from opzoo.training.expert_load import ExpertCollapseWarning, ExpertLoadMonitor

from ..training.conftest import micro_pot_args, run_document

# alpha and beta of the total loss L2 + alpha L_aux1 + beta L_aux2, set in the run config (model args;
# not the preset defaults 0.01, so the log shows they are the ones used)
LOSS_WEIGHTS = {"nestor-ti": {"aux/image": 0.02, "aux/token": 0.005}, "aot-moe-pot-t": {"aux/token": 0.005}}
MODEL_ARGS = {"nestor-ti": {"block_args": {"alpha": 0.02, "beta": 0.005}},
              "aot-moe-pot-t": {"feedforward_args": {"num_experts": 4, "top_k": 2, "num_shared": 1, "aux_weight": 0.005}}}


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["nestor-ti", "aot-moe-pot-t"])
def test_micro_moe_preset_trains_logs_aux_and_load_and_reloads_bit_exactly(tmp_path, datasets, preset):
    steps = 40
    doc = run_document(tmp_path / "run", datasets, model={"name": preset, "args": {**micro_pot_args(), **MODEL_ARGS[preset]}},
                       training={"steps": steps, "batch_size": 4, "log_every": 10, "eval_every": steps},
                       optimizer={"lr": 3e-3}, checkpoint={"every": None}, evaluation={"plots": True})
    trainer = Trainer(parse_run_config(doc), show_progress=False)
    result = trainer.fit()
    losses = result.losses
    assert sum(losses[-8:]) / 8 < 0.9 * sum(losses[:8]) / 8, losses  # ~0.87x for nestor-ti in 40 steps
    before = sum(r.l2_full for r in result.evals[0])
    after = sum(r.l2_full for r in result.evals[steps])
    assert after < before, (before, after)

    records = read_log(tmp_path / "run" / "log.jsonl")
    weights = LOSS_WEIGHTS[preset]
    assert set(weights) <= set(records[0]), records[0]
    for r in records:  # aux_loss is the weighted total: alpha * L_aux1 + beta * L_aux2
        assert r["aux_loss"] == pytest.approx(sum(w * r[g] for g, w in weights.items()), rel=1e-5)
        assert all(0.99 < r[g] < 4.01 for g in weights)  # E * sum p f lies in [1, E] for top-k; ~1 balanced
    loads = [r["expert_load"] for r in records if "expert_load" in r]
    assert len(loads) == steps // 10
    for name, share in loads[-1].items():
        assert len(share) == 4 and (sum(share) == pytest.approx(1.0, abs=1e-5) or sum(share) == 0), name
    eval_record = json.loads((tmp_path / "run" / "eval" / f"step-{steps:08d}.json").read_text())
    assert set(eval_record["datasets"]["heat"]["expert_load"]) == set(loads[-1])
    assert (tmp_path / "run" / "eval" / f"step-{steps:08d}-expert-load.png").is_file()

    # the exported model reloads bit-exactly: the trained weights, the trained model's outputs
    model = opzoo.from_pretrained(result.model_dir).eval()
    trained = trainer.model.eval()
    assert model.config == trained.config
    assert set(model.state_dict()) == set(trained.state_dict())
    assert all(torch.equal(v, trained.state_dict()[k]) for k, v in model.state_dict().items())
    x = torch.randn(2, 16, 16, 4, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(x), trained(x))
    assert model.aux_loss().item() == trained.aux_loss().item()  # same routing, same alpha and beta

    # opzoo eval: which PDE goes to which expert, as a PNG and in eval.json
    out = tmp_path / "eval"
    code = training_cli(["eval", str(result.model_dir), "--data", str(datasets["heat"]), str(datasets["advection"]),
                         "--out", str(out), "--max-trajectories", "2", "--horizon", "3"])
    assert code == 0
    assert (out / "expert-load.png").is_file()
    summary = json.loads((out / "eval.json").read_text())
    for name in ("heat", "advection"):
        for share in summary["datasets"][name]["expert_load"].values():
            assert sum(share) == pytest.approx(1.0, abs=1e-5) or sum(share) == 0


def test_collapse_monitor_warns_once_over_a_sustained_window():
    monitor = ExpertLoadMonitor(threshold=0.9, window=5)
    balanced, collapsed = torch.tensor([4.0, 4, 4, 4]), torch.tensor([15.0, 1, 0, 0])
    for step in range(1, 5):  # a few collapsed steps inside a balanced window: no warning
        assert monitor.update(step, {"r": collapsed if step == 2 else balanced}) == []
    with pytest.warns(ExpertCollapseWarning, match="'r' sent 93.8%"):
        for step in range(5, 11):
            monitor.update(step, {"r": collapsed})
    assert monitor.update(11, {"r": collapsed}) == []  # once, until it recovers
    for step in range(12, 17):
        monitor.update(step, {"r": balanced})
    with pytest.warns(ExpertCollapseWarning):
        for step in range(17, 23):
            monitor.update(step, {"r": collapsed})


def test_trainer_logs_a_collapse_warning(tmp_path, datasets):
    """A router forced onto one expert: the run logs a warning record naming the router."""
    from ..training.conftest import tiny_pot_args

    args = {**tiny_pot_args(), "feedforward": "moe", "feedforward_args": {"num_experts": 2, "top_k": 1,
                                                                         "temperature": 1e-3}}
    doc = run_document(tmp_path / "run", datasets, model={"name": "pot", "args": args},
                       training={"steps": 6, "batch_size": 2, "log_every": 1, "expert_load_window": 3,
                                 "expert_load_threshold": 0.5},
                       checkpoint={"every": None}, evaluation={"plots": False})
    trainer = Trainer(parse_run_config(doc), show_progress=False)
    router = trainer.model.blocks[0].mlp.router
    with torch.no_grad():
        router.gate.weight.zero_()
        router.gate.bias.copy_(torch.tensor([10.0, -10.0]))
    with pytest.warns(ExpertCollapseWarning):
        trainer.fit()
    warnings_logged = read_log(tmp_path / "run" / "log.jsonl", kind="warning")
    assert warnings_logged and "blocks.0.mlp.router" in warnings_logged[0]["message"]
