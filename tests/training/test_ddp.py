"""A 2-process gloo DDP run (torchrun) gives the loss sequence of one process with the same global batch."""

import os
import subprocess
import sys

import pytest

from .conftest import run_cli, run_document, tiny_pot_args, train_losses, write_json


@pytest.mark.slow
def test_two_process_ddp_matches_single_process(tmp_path, datasets):
    def doc(out):
        return run_document(out, datasets, model={"name": "pot", "args": tiny_pot_args()},
                            training={"steps": 5, "batch_size": 4, "log_every": 1},
                            checkpoint={"every": 5}, optimizer={"lr": 3e-3}, seed=7)

    single = run_cli("pretrain", str(write_json(tmp_path / "one.json", doc(tmp_path / "one"))))
    assert single.returncode == 0, single.stderr
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ddp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "-m", "opzoo", "pretrain", str(write_json(tmp_path / "two.json", doc(tmp_path / "two")))],
                         capture_output=True, text=True, env=env, timeout=300)
    assert ddp.returncode == 0, ddp.stderr[:6000]
    one, two = train_losses(tmp_path / "one"), train_losses(tmp_path / "two")
    assert [s for s, _ in two] == [1, 2, 3, 4, 5]
    assert max(abs(a - b) for (_, a), (_, b) in zip(one, two)) < 1e-5, (one, two)
    assert one[0][1] != one[-1][1]  # it trained
    # rank 0 alone wrote the checkpoint and the exported model
    assert (tmp_path / "two" / "checkpoints" / "step-00000005" / "model.safetensors").is_file()
    assert (tmp_path / "two" / "model" / "config.json").is_file()


# AOT-POT's blocks pass an AOTState (a pytree of tensors) from block to block, which FSDP must see
RESIDUALS = {"plain": {}, "aot": {"block": "sandwich", "residual": "aot"}}


@pytest.mark.slow
@pytest.mark.parametrize("residual", RESIDUALS)
def test_two_process_fsdp_matches_single_process_and_resumes(tmp_path, datasets, residual):
    """FSDP2 (fully_shard) on 2 CPU processes: the loss sequence of one process; gathered checkpoints resume."""
    import shutil

    def doc(out, **dist):
        return run_document(out, datasets, model={"name": "pot", "args": {**tiny_pot_args(), **RESIDUALS[residual]}},
                            training={"steps": 4, "batch_size": 4, "log_every": 1},
                            checkpoint={"every": 2, "keep_last": 2}, optimizer={"lr": 3e-3}, seed=7, distributed=dist)

    def torchrun(cfg):
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                               "-m", "opzoo", "pretrain", str(cfg)], capture_output=True, text=True,
                              env=env, timeout=300)

    cfg = write_json(tmp_path / "fsdp.json", doc(tmp_path / "run", strategy="fsdp"))
    first = torchrun(cfg)
    assert first.returncode == 0, first.stderr[:6000]
    single = run_cli("pretrain", str(write_json(tmp_path / "one.json", doc(tmp_path / "one"))))
    assert single.returncode == 0, single.stderr
    sharded, one = train_losses(tmp_path / "run"), train_losses(tmp_path / "one")
    assert [s for s, _ in sharded] == [1, 2, 3, 4]
    assert max(abs(a - b) for (_, a), (_, b) in zip(sharded, one)) < 1e-5, (sharded, one)
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()
    # drop the step-4 checkpoint: the same command resumes from step 2 (sharded optimizer state restored)
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step-00000004")
    again = torchrun(cfg)
    assert again.returncode == 0, again.stderr[:6000]
    assert max(abs(a - b) for (_, a), (_, b) in zip(train_losses(tmp_path / "run"), sharded)) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("residual", RESIDUALS)
def test_fsdp_gradients_equal_ddps_without_the_view_warning(tmp_path, residual):
    """Issue 43: FSDP2 warned on every run that the wrapped backbone "returned a view tensor" (an in-place op on it
    would silently skip the all-gather). One backward of the same model and batch under both wrappers, 2 processes."""
    import json
    from pathlib import Path

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    worker = Path(__file__).with_name("fsdp_grads_worker.py")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(worker), str(tmp_path / "out.json"), residual], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-6000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["warnings"] == [], result["warnings"]
    assert result["max_abs_grad"] > 0 and result["max_abs_diff"] <= 1e-6 * result["max_abs_grad"], result
