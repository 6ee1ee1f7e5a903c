"""PDEBench's own ``metric_func`` on shared inputs, recorded for tests/training/test_pdebench_metrics.py.

``OPZOO_PDEBENCH_REPO=/path/to/a/checkout/of/pdebench python -m tests.training.pdebench_metrics_reference [OUT]``: loads
``pdebench/models/metrics.py`` of that checkout (github.com/pdebench/PDEBench, read at 9754b4c; the file carries its own
non-commercial research license, so its code is not in opzoo: it is run where it is), runs ``metric_func`` on 1-D, 2-D
and 3-D inputs in float64 and writes inputs and outputs to OUT (default: tests/training/data/pdebench_metrics.safetensors).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

DEFAULT_OUT = Path(__file__).with_name("data") / "pdebench_metrics.safetensors"
SHAPES = {"1d": (3, 32, 5, 2), "2d": (3, 24, 32, 4, 2), "3d": (2, 12, 14, 10, 3, 2)}  # [B, *S, T, C]
NAMES = ("RMSE", "nRMSE", "cRMSE", "max_error", "bRMSE", "fRMSE")  # metric_func's return order


def inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out = {}
    for name, shape in SHAPES.items():
        target = torch.randn(shape, generator=g, dtype=torch.float64) + 0.5
        out[f"{name}_target"] = target
        out[f"{name}_pred"] = target + 0.3 * torch.randn(shape, generator=g, dtype=torch.float64)
    return out


def load_metric_func(repo: str):
    path = Path(repo) / "pdebench" / "models" / "metrics.py"
    spec = importlib.util.spec_from_file_location("pdebench_metrics", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.metric_func


def record(repo: str, out: Path = DEFAULT_OUT) -> Path:
    metric_func = load_metric_func(repo)
    data = inputs()
    result = dict(data)
    for name in SHAPES:
        values = metric_func(data[f"{name}_pred"], data[f"{name}_target"], if_mean=True, initial_step=0)
        for key, value in zip(NAMES, values):
            result[f"{name}_{key}"] = torch.as_tensor(value, dtype=torch.float64).reshape(-1)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in result.items()}, str(out))
    return out


if __name__ == "__main__":
    repo = os.environ.get("OPZOO_PDEBENCH_REPO")
    if not repo:
        sys.exit("set OPZOO_PDEBENCH_REPO to a checkout of github.com/pdebench/PDEBench")
    print(record(repo, Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT))
