"""Records FloWsnr/General-Physics-Transformer's own network on perturbed random weights, for opzoo's parity tests
(tests/gphyt/test_parity.py).

GPhyT is not on the package index, so this runs upstream's code from a checkout at 4374116 (the commit that published
the weights), in a process of its own and without importing opzoo:

    git clone https://github.com/FloWsnr/General-Physics-Transformer GPhyT && git -C GPhyT checkout 4374116
    OPZOO_GPHYT_REPO=GPhyT OMP_NUM_THREADS=1 python tests/gphyt/record_reference.py [OUT_DIR]

It writes, into tests/gphyt/data/ (or OUT_DIR):

- ``gphyt-small.pth``: a small network's perturbed weights in upstream's checkpoint format, as its ``Trainer`` saves
  it (``model_state_dict`` under DDP's and torch.compile's ``module._orig_mod.`` prefix, the optimizer state, the
  counters and the run's ``config``);
- ``reference.safetensors``: an input ``[B, T, H, W, C]`` (float64) and upstream's prediction with each integrator
  (Euler, Heun, RK4, none), in float64 and float32;
- ``reference.json``: what produced them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

SMALL = dict(num_fields=3, hidden_dim=24, mlp_dim=32, num_heads=2, num_layers=2, patch_size=(1, 4, 4),
             img_size=(3, 16, 8), use_derivatives=True, pos_enc_mode="absolute", att_mode="full")
INTEGRATORS = {"Euler": "Euler", "Heun": "Heun", "RK4": "RK4", "none": None}
CONFIG = {  # the run config as Trainer.save_checkpoint records it (path_to_string: no path objects)
    "model": {"architecture": "gphyt", "img_size": [3, 16, 8],
              "transformer": {"input_channels": 3, "att_mode": "full", "dropout": 0.0, "pos_enc_mode": "absolute",
                              "patch_size": [1, 4, 4], "stochastic_depth_rate": 0.0, "use_derivatives": True,
                              "integrator": "Euler"},
              "tokenizer": {"tokenizer_mode": "linear", "detokenizer_mode": "linear", "tokenizer_overlap": 0,
                            "detokenizer_overlap": 0}},
    "training": {"seed": 42, "batch_size": 2},
}


def upstream_class(repo: Path):
    sys.path.insert(0, str(repo))
    from gphyt.model.transformer.model import PhysicsTransformer

    return PhysicsTransformer


def commit(repo: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def main() -> None:
    repo = Path(os.environ["OPZOO_GPHYT_REPO"])
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data"
    out.mkdir(parents=True, exist_ok=True)
    cls = upstream_class(repo)
    torch.manual_seed(0)
    net = cls(**SMALL, integrator="Euler")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.2)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    x = torch.randn(2, 3, 16, 8, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    net(x.float()).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    net.eval()
    state = {f"module._orig_mod.{k}": v for k, v in net.state_dict().items()}
    torch.save({"samples_trained": 128, "batches_trained": 64, "cycle_idx": 1, "model_state_dict": state,
                "optimizer_state_dict": optimizer.state_dict(), "config": CONFIG}, out / "gphyt-small.pth")
    tensors = {"input": x}
    for name, integrator in INTEGRATORS.items():
        stepped = cls(**SMALL, integrator=integrator)
        stepped.load_state_dict(net.state_dict())
        stepped.eval()
        with torch.no_grad():
            tensors[f"{name}.output32"] = stepped.float()(x.float())
            tensors[f"{name}.output64"] = stepped.double()(x)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "reference.safetensors"))
    meta = {"repo": "FloWsnr/General-Physics-Transformer", "commit": commit(repo), "torch": torch.__version__,
            "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in SMALL.items()},
            "integrators": list(INTEGRATORS), "script": "tests/gphyt/record_reference.py"}
    (out / "reference.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {out}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
