"""An expert that receives no input costs nothing and breaks nothing under 2-process DDP (gloo)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

WORKER = Path(__file__).with_name("ddp_idle_worker.py")


@pytest.mark.slow
def test_idle_experts_under_two_process_ddp(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(WORKER), str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-6000:]
    calls = json.loads((tmp_path / "calls.json").read_text())
    # 2 steps x 6 tokens: rank 0 ran only expert 0, rank 1 only expert 1; experts 2, 3 never ran
    assert calls == [[12, 0, 0, 0], [0, 12, 0, 0]]
    g = load_file(tmp_path / "grads.safetensors")
    names = sorted(k[4:] for k in g if k.startswith("ddp/"))
    for name in names:
        ddp, ref = g[f"ddp/{name}"], g[f"ref/{name}"]
        if name.startswith(("experts.2.", "experts.3.")):  # idle on both ranks: no gradient (None) or zero
            assert ref.numel() == 0
            assert ddp.numel() == 0 or torch.count_nonzero(ddp) == 0, name
            continue
        # experts idle on one rank get the other rank's gradient averaged with zero, like the reference
        assert ddp.numel() and ref.numel(), name
        # same float32 sums in another order (all-reduce vs autograd): a few ulps apart
        torch.testing.assert_close(ddp, ref, rtol=1e-5, atol=1e-7, msg=name)
    assert torch.count_nonzero(g["ddp/experts.0.fc1.weight"]) > 0 and torch.count_nonzero(g["ddp/experts.1.fc1.weight"]) > 0


@pytest.mark.slow
def test_micro_nestor_trains_under_two_process_ddp(tmp_path, datasets):
    """The Trainer under torchrun (2 ranks, gloo): batch 2 per rank and top-1 of 4 image experts leave
    experts idle on some rank at most steps; the run finishes and logs global expert loads."""
    from ..training.conftest import micro_pot_args, run_document, write_json

    doc = run_document(tmp_path / "run", datasets, model={"name": "nestor-ti", "args": micro_pot_args()},
                       training={"steps": 6, "batch_size": 4, "log_every": 1}, checkpoint={"every": None}, seed=3)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "opzoo", "pretrain", str(write_json(tmp_path / "run.json", doc))],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]
    from opzoo.training import read_log

    records = read_log(tmp_path / "run" / "log.jsonl")
    assert [r["step"] for r in records] == list(range(1, 7))
    idle = 0
    for r in records:
        image = [v for k, v in r["expert_load"].items() if k.endswith("blocks.0.router")][0]
        assert sum(image) == pytest.approx(1.0, abs=1e-5)  # all 4 samples of both ranks counted
        idle += sum(v == 0 for v in image)
    assert idle > 0  # some expert was idle at some step (so on every rank)
