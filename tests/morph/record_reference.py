"""Records lanl/MORPH's own network on perturbed random weights, for opzoo's parity tests (tests/morph/test_parity.py).

MORPH is not on the package index, so this runs upstream's code from a checkout, in a process of its own and without
importing opzoo:

    git clone https://github.com/lanl/MORPH && git -C MORPH checkout a16d5c4
    OPZOO_MORPH_REPO=MORPH OMP_NUM_THREADS=1 python tests/morph/record_reference.py [OUT_DIR]

For two small networks (the position table sliced in time, as every size but L builds it, and interpolated, as the
L size with max_ar > 1) it writes, into tests/morph/data/ (or OUT_DIR):

- ``morph-small-<positions>.pth``: the network's perturbed weights in upstream's checkpoint format, as its training
  scripts save it (``epoch``, ``model_state_dict`` under ``nn.DataParallel``'s ``module.`` prefix; the first file
  also with the AdamW and ReduceLROnPlateau states);
- ``reference.safetensors``: for 1-D, 2-D and 3-D inputs ``[B, T, F, C, D, H, W]`` (float64), upstream's prediction in
  float64 and in float32 (``<positions>.<case>.output64`` / ``output32``);
- ``reference.json``: what produced them (the commit, torch's version, the sizes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

SMALL = dict(patch_size=4, dim=32, depth=2, heads=4, heads_xa=4, mlp_dim=48, max_components=3, conv_filter=16,
             max_ar=3, max_patches=64, max_fields=3, dropout=0.1, emb_dropout=0.1)
POSITIONS = {"slice": "Ti", "interpolate": "L"}  # upstream's model_size that builds each
CASES = {  # name: [B, T, F, C, D, H, W]
    "1d": (2, 2, 2, 1, 1, 1, 16),
    "2d": (1, 3, 3, 2, 1, 8, 12),
    "3d": (1, 1, 1, 3, 8, 8, 8),
    "2d-short": (2, 2, 1, 1, 1, 8, 8),
}


def upstream_class(repo: Path):
    sys.path.insert(0, str(repo))
    from src.utils.vit_conv_xatt_axialatt2 import ViT3DRegression

    return ViT3DRegression


def perturbed(cls, positions: str, seed: int) -> torch.nn.Module:
    """The small network with every parameter moved off its initial value (norms not 1, biases not 0), after one
    AdamW step so that the saved optimizer state is a real one."""
    torch.manual_seed(seed)
    net = cls(**SMALL, model_size=POSITIONS[positions])
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.2)
    return net


def checkpoint(net: torch.nn.Module, with_optimizer: bool) -> dict:
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min")
    net.train()
    x = torch.randn(*CASES["2d"], generator=torch.Generator().manual_seed(99))
    net(x)[2].square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    scheduler.step(1.0)
    parallel = torch.nn.DataParallel(net)  # the 'module.' prefix of a DataParallel save
    saved = {"epoch": 7, "model_state_dict": parallel.state_dict()}
    if with_optimizer:  # in one file only, to keep the test data small
        saved |= {"optimizer_state_dict": optimizer.state_dict(), "scheduler_state_dict": scheduler.state_dict()}
    return saved


def commit(repo: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def main() -> None:
    repo = Path(os.environ["OPZOO_MORPH_REPO"])
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data"
    out.mkdir(parents=True, exist_ok=True)
    cls = upstream_class(repo)
    tensors = {}
    for i, positions in enumerate(POSITIONS):
        net = perturbed(cls, positions, seed=10 * i)
        torch.save(checkpoint(net, with_optimizer=i == 0), out / f"morph-small-{positions}.pth")
        net.eval()
        for j, (case, shape) in enumerate(CASES.items()):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(100 + j), dtype=torch.float64)
            with torch.no_grad():
                tensors[f"{positions}.{case}.input"] = x
                tensors[f"{positions}.{case}.output32"] = net.float()(x.float())[2]
                tensors[f"{positions}.{case}.output64"] = net.double()(x)[2]
            net.float()
    save_file(tensors, str(out / "reference.safetensors"))
    meta = {"repo": "lanl/MORPH", "commit": commit(repo), "torch": torch.__version__, "sizes": SMALL,
            "positions": POSITIONS, "cases": {k: list(v) for k, v in CASES.items()},
            "script": "tests/morph/record_reference.py"}
    (out / "reference.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {out}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
