"""Worker of test_ddp_idle (run under torchrun, 2 processes, gloo): a sparse MoE whose routing sends
rank 0's tokens to expert 0 and rank 1's to expert 1, so expert 1 is idle on rank 0, expert 0 on
rank 1, and experts 2, 3 everywhere. Rank 0 writes the DDP gradients, the per-rank expert calls and a
single-process reference (mean of the two ranks' losses) as safetensors + JSON into OUT."""

import json
import os
import sys

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch.nn.parallel import DistributedDataParallel as DDP

from opzoo_moe import SparseMoEFeedForward


def build():
    torch.manual_seed(0)
    ffn = SparseMoEFeedForward(8, 8, num_experts=4, top_k=1, num_shared=1, aux_weight=0.01)
    with torch.no_grad():  # logits: +10 x0 for expert 0, -10 x0 for expert 1, 0 for experts 2, 3
        ffn.router.gate.weight.zero_()
        ffn.router.gate.bias.zero_()
        ffn.router.gate.weight[0, 0], ffn.router.gate.weight[1, 0] = 10.0, -10.0
    return ffn


def batch(rank):
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(rank))
    x[..., 0] = x[..., 0].abs() + 0.5
    return x if rank == 0 else -x


def loss_of(model, x):
    module = model.module if isinstance(model, DDP) else model
    return model(x).pow(2).mean() + module.router.aux_weight * module.router.last_aux_loss


def main(out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ffn = build()
    calls = [0] * 4
    for e, expert in enumerate(ffn.experts):
        expert.register_forward_hook(lambda m, a, o, e=e: calls.__setitem__(e, calls[e] + a[0].shape[0]))
    model = DDP(ffn, find_unused_parameters=True)
    for _ in range(2):  # two steps: DDP's unused-parameter bookkeeping must survive a repeat
        model.zero_grad(set_to_none=True)
        loss_of(model, batch(rank)).backward()
    all_calls = [None, None]
    dist.all_gather_object(all_calls, calls)
    if rank == 0:
        ref = build()
        ref.zero_grad()
        (0.5 * (loss_of(ref, batch(0)) + loss_of(ref, batch(1)))).backward()
        tensors = {}
        for name, p in ffn.named_parameters():
            tensors[f"ddp/{name}"] = p.grad.clone() if p.grad is not None else torch.zeros(0)
            tensors[f"ref/{name}"] = (
                dict(ref.named_parameters())[name].grad.clone()
                if dict(ref.named_parameters())[name].grad is not None else torch.zeros(0))
        save_file(tensors, os.path.join(out, "grads.safetensors"))
        with open(os.path.join(out, "calls.json"), "w") as f:
            json.dump(all_calls, f)
    dist.barrier()  # no rank tears down while a peer's work is in flight (opzoo.training.distributed.shutdown)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
