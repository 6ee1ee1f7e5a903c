"""Run under ``torchrun --nproc_per_node=2``: one backward of the same POT and batch under DDP and under FSDP2 (opzoo's
``wrap_model``), the gradients compared, and any warning FSDP2 gives about view outputs turned into a failure.

``python -m torch.distributed.run --standalone --nproc_per_node=2 fsdp_grads_worker.py OUT.json RESIDUAL``: rank 0
writes ``{"max_abs_diff": ..., "max_abs_grad": ..., "warnings": [...]}``."""

import copy
import json
import sys
import warnings

import torch
import torch.distributed as dist

import opzoo
from opzoo.training.distributed import DistEnv, wrap_model


def main() -> None:
    out, residual = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    args = {"in_channels": 2, "out_channels": 2, "in_timesteps": 4, "img_size": [16, 16], "patch_size": 4, "width": 16,
            "depth": 2, "out_layer_dim": 8, "mixer": "pointwise-mlp"}
    if residual == "aot":
        args |= {"block": "sandwich", "residual": "aot"}
    torch.manual_seed(0)
    model = opzoo.create_model("pot", **args)
    env = DistEnv(rank, world, rank)
    ddp = wrap_model(copy.deepcopy(model), env, "ddp", torch.device("cpu"))
    fsdp_model = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1 + rank)  # each rank its own half of the batch
    x, y = torch.randn(2, 16, 16, 4, 2, generator=g), torch.randn(2, 16, 16, 1, 2, generator=g)
    caught = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fsdp = wrap_model(fsdp_model, env, "fsdp", torch.device("cpu"))
        ((fsdp(x) - y) ** 2).mean().backward()
    caught = [str(w.message) for w in seen if "view" in str(w.message)]
    ((ddp(x) - y) ** 2).mean().backward()
    diff, scale = 0.0, 0.0
    ddp_grads = dict(ddp.module.named_parameters())
    for name, p in fsdp.named_parameters():
        ref = ddp_grads[name].grad
        if p.grad is None or ref is None:  # a parameter the loss does not reach: so under both
            assert p.grad is None and ref is None, name
            continue
        grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        diff = max(diff, (grad - ref).abs().max().item())
        scale = max(scale, ref.abs().max().item())
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"max_abs_diff": diff, "max_abs_grad": scale, "warnings": caught}, f)
    dist.barrier()  # no rank tears down while a peer's work is in flight (opzoo.training.distributed.shutdown)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
