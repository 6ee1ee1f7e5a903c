"""The reference checkpoints of tests/pdet: small mixed-channel PDE-Transformers built, perturbed and saved by
pdetransformer 0.1.11 itself (in its own process), with its outputs.

They are recorded in tests/pdet/data (``python -m tests.pdet.conftest`` rewrites them), so that the default suite
compares against pdetransformer without paying for its imports (6 s); the slow test
``test_recorded_reference_is_what_pdetransformer_computes`` runs it live and checks the recording."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / ".venv" / "reference" / "pdetransformer-0.1.11"
SCRIPT = Path(__file__).with_name("pdetransformer_0_1_11.py")
STEPS = 3
SMALL = {"hidden_size": 8, "num_heads": 2, "depth": [1, 2, 2, 2, 1], "mlp_ratio": 2, "num_classes": 30}
CASES = {  # name: (config of their PDETransformer, input, labels); type PDE-test: SMALL, registered like PDE_S
    "periodic": ({"sample_size": 64, "in_channels": 2, "out_channels": 2, "type": "PDE-test", "periodic": True,
                  "window_size": 4, "patch_size": 2}, "x", "labels"),
    "walls": ({"sample_size": 64, "in_channels": 2, "out_channels": 2, "type": "PDE-test", "periodic": False,
               "window_size": 4, "patch_size": 2}, "x_walls", None),
}

# separate channels: their PDETransformer takes no window_size (PDEImpl's default is 8), so the small type fixes it
SEPARATE_SIZES = {**SMALL, "window_size": 4}
SEPARATE_CASES = {  # name: config of their separate-channel PDETransformer; inputs "xs" [B=2, C=3, T=2, 32, 32]
    "separate-periodic": {"sample_size": 32, "num_timesteps": 2, "type": "PDE-test", "periodic": True,
                          "carrier_token_active": False, "patch_size": 2},
    "separate-walls": {"sample_size": 32, "num_timesteps": 2, "type": "PDE-test", "periodic": False,
                       "carrier_token_active": False, "patch_size": 2},
}

DATA = Path(__file__).with_name("data")


@pytest.fixture(scope="session")
def reference() -> Path:
    """Every case's checkpoint directory and reference outputs, as pdetransformer 0.1.11 wrote them (recorded)."""
    return DATA


@pytest.fixture(scope="session")
def live_reference(tmp_path_factory) -> Path:
    """The same, from a run of pdetransformer 0.1.11 now."""
    if not (REFERENCE / "pdetransformer").is_dir():
        pytest.skip(f"pdetransformer 0.1.11 is not in {REFERENCE} (`make install` puts it there)")
    return run_reference(tmp_path_factory.mktemp("pdetransformer"))


def run_reference(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    # periodic: a 32x48 grid, whose 4x6 latent is padded to whole windows; walls: every level holds whole windows
    save_file({"x": torch.randn(2, 2, 32, 48, generator=g, dtype=torch.float64),
               "x_walls": torch.randn(2, 2, 32, 32, generator=g, dtype=torch.float64), "labels": torch.tensor([6, 15]),
               # separate channels: 3 channels of 2 frames, a diffusion time and labels per channel
               "xs": torch.randn(2, 3, 2, 32, 32, generator=g, dtype=torch.float64),
               "xs_t": torch.tensor([[0.0, 0.0, 0.0], [0.2, 0.5, 0.9]], dtype=torch.float64),
               "xs_channel_type": torch.tensor([[3, 4, 7], [8, 8, 2]]), "xs_pde_type": torch.tensor([[6, 6, 6], [15, 15, 15]]),
               "xs_task": torch.tensor([[0, 1, 2], [1, 1, 0]])},
              str(out / "inputs.safetensors"))
    job = {"out": str(out), "inputs": str(out / "inputs.safetensors"),
           "cases": [{"name": n, "config": cfg, "sizes": SMALL, "seed": i, "x": x, "labels": labels, "steps": STEPS}
                     for i, (n, (cfg, x, labels)) in enumerate(CASES.items())]
           + [{"name": n, "kind": "separate", "config": cfg, "sizes": SEPARATE_SIZES, "seed": 10 + i, "x": "xs"}
              for i, (n, cfg) in enumerate(SEPARATE_CASES.items())]}
    (out / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": str(REFERENCE)}
    done = subprocess.run([sys.executable, str(SCRIPT), str(out / "job.json")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (out / "job.json").unlink()
    return out


if __name__ == "__main__":
    print(run_reference(DATA))


