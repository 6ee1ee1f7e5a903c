"""Records MPP's own AViT (PolymathicAI/multiple_physics_pretraining) for opzoo's parity tests (tests/mpp/test_parity.py).

MPP is not on the package index, so this runs upstream's ``models/`` from a checkout, in a process of its own and
without importing opzoo (it needs torch, einops, timm >= 0.9 for ``timm.layers.DropPath``, PyYAML, and upstream's own
``dadaptation==3.1`` and ``ruamel.yaml==0.17.32`` (its requirements.txt) for the checkpoint):

    git clone https://github.com/PolymathicAI/multiple_physics_pretraining MPP && git -C MPP checkout e751fc2
    OPZOO_MPP_REPO=MPP OMP_NUM_THREADS=1 python tests/mpp/record_reference.py [OUT_DIR]

It writes, into tests/mpp/data/ (or OUT_DIR):

- ``mpp-small.tar``: a small AViT (built by upstream's ``build_avit``) with weights set from the seed alone, written by
  ``train_basic.py``'s own ``save_checkpoint`` (``iters``, ``epoch``, ``model_state`` with DDP's ``module.`` prefix,
  the state of upstream's optimizer: DAdaptAdan over ``add_weight_decay``'s groups, its weight decay a ruamel
  ``ScalarFloat`` as upstream's ``YParams`` reads the config);
- ``reference.safetensors``: per case (history, grid, slots, boundary) the input ``[T, B, C, H, W]`` (float64) and
  upstream's prediction in float64 and float32, and a 3-step rollout (each prediction appended to the history, the
  oldest frame dropped);
- ``reference.json``: the commit, torch, einops and timm versions, the cases, and for the four published sizes the
  parameter count of ``build_avit`` built on the meta device from upstream's own config files, with those files'
  sizes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import save_file

SMALL = dict(embed_dim=32, num_heads=2, processor_blocks=2, n_states=12)
CASES = {  # name: (T, B, H, W, slots, periodic)
    "cns-32x32": (4, 2, 32, 32, [6, 7, 8, 9], False),
    "cns-periodic-64x32": (3, 1, 64, 32, [6, 7, 8, 9], True),
    "swe-48x64": (8, 2, 48, 64, [0], False),
    "diffre-periodic-32x48": (2, 1, 32, 48, [4, 5], True),
}
ROLLOUT = "cns-32x32"
SIZES = {"ti": "mpp_avit_ti_config.yaml", "s": "mpp_avit_s_config.yaml", "b": "mpp_avit_b_config.yaml",
         "l": "mpp_avit_L_config.yaml"}


def params_of(config: dict, **overrides) -> SimpleNamespace:
    keys = ("embed_dim", "num_heads", "processor_blocks", "n_states", "patch_size", "block_type", "time_type",
            "space_type", "bias_type", "gradient_checkpointing")
    return SimpleNamespace(**{**{k: config[k] for k in keys}, **overrides})


def perturbed(build_avit, config: dict, seed: int) -> torch.nn.Module:
    """The small network with every parameter set from ``seed`` alone, off its initial value (layer scales not 1e-6,
    norms not 1): uniform numbers scaled and shifted exactly, so that every CPU records the same weights (an
    initializer's or a normal sampler's float32 arithmetic may round otherwise on another CPU)."""
    torch.manual_seed(seed)
    net = build_avit(params_of(config, **SMALL))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in net.named_parameters():
            u = torch.rand(p.shape, generator=g, dtype=torch.float64) - 0.5  # exact: a multiple of 2^-53
            base = 1.0 if p.dim() == 1 and name.endswith("weight") else 0.0  # norms about 1
            p.copy_(base + u * 0.5)
    return net


def upstream_functions(repo: Path, *names: str) -> dict:
    """``names`` as train_basic.py defines them (functions and methods at module or class level), read from the
    checkout and defined here: the file imports wandb and its data pipeline, which a checkpoint does not need."""
    import ast

    tree = ast.parse((repo / "train_basic.py").read_text())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            found[node.name] = ast.get_source_segment((repo / "train_basic.py").read_text(), node)
    missing = set(names) - set(found)
    if missing:
        raise SystemExit(f"train_basic.py defines no {', '.join(sorted(missing))}")
    scope = {"torch": torch}
    for source in found.values():
        exec(compile(textwrap.dedent(source), str(repo / "train_basic.py"), "exec"), scope)  # noqa: S102 - upstream's
    return {n: scope[n] for n in names}


def checkpoint(net: torch.nn.Module, repo: Path, path: Path) -> None:
    """``path`` written by upstream's own ``Trainer.save_checkpoint`` (train_basic.py L160-166) under DDP's ``module.``
    prefix (DataParallel's, the same on a CPU), holding the state of upstream's optimizer for the ti config
    (``optimizer: adan``, ``learning_rate: -1``: ``DAdaptAdan(add_weight_decay(model, weight_decay), lr=1.,
    growth_rate=1.05, log_every=100)``, L121-130), the config read by upstream's ``YParams`` (ruamel). The optimizer
    steps once on a copy of the network, so that its state is a real one and the weights saved are ``net``'s (a
    step's result differs between CPUs)."""
    import copy
    from types import SimpleNamespace

    from dadaptation import DAdaptAdan
    from utils.YParams import YParams

    params = YParams(str(repo / "config" / "mpp_avit_ti_config.yaml"), "basic_config")
    assert params.optimizer == "adan" and params.learning_rate < 0, "the ti config no longer selects DAdaptAdan"
    up = upstream_functions(repo, "add_weight_decay", "save_checkpoint")
    stepped = torch.nn.DataParallel(copy.deepcopy(net))
    optimizer = DAdaptAdan(up["add_weight_decay"](stepped, params.weight_decay), lr=1., growth_rate=1.05,
                           log_every=100)
    t, b, h, w, slots, periodic = CASES["cns-32x32"]
    x = torch.randn(t, b, len(slots), h, w, generator=torch.Generator().manual_seed(99))
    stepped.train()
    stepped(x, [slots], torch.zeros(b, 2, dtype=torch.long)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    trainer = SimpleNamespace(model=torch.nn.DataParallel(net), optimizer=optimizer, epoch=1, params=params)
    up["save_checkpoint"](trainer, str(path))


def dadaptation_version() -> str:
    from importlib.metadata import version

    return version("dadaptation")


def ruamel_version() -> str:
    from importlib.metadata import version

    return version("ruamel.yaml")


def commit(repo: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        marker = repo / "COMMIT"
        return marker.read_text().strip() if marker.is_file() else "unknown (not a git checkout)"


def main() -> None:
    import einops
    import timm
    import yaml

    repo = Path(os.environ["OPZOO_MPP_REPO"])
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data"
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(repo))
    from models.avit import build_avit

    configs = {k: yaml.safe_load((repo / "config" / f).read_text())["basic_config"] for k, f in SIZES.items()}
    sizes = {}
    for key, config in configs.items():
        with torch.device("meta"):
            net = build_avit(params_of(config))
        sizes[key] = {"config": f"config/{SIZES[key]}", "parameters": sum(p.numel() for p in net.parameters()),
                      **{k: config[k] for k in ("embed_dim", "num_heads", "processor_blocks", "n_states",
                                                "patch_size", "n_steps", "bias_type", "block_type", "drop_path")}}
    net = perturbed(build_avit, configs["b"], seed=0)
    checkpoint(net, repo, out / "mpp-small.tar")
    net.eval()
    tensors = {}
    for j, (case, (t, b, h, w, slots, periodic)) in enumerate(CASES.items()):
        x = torch.randn(t, b, len(slots), h, w, generator=torch.Generator().manual_seed(100 + j), dtype=torch.float64)
        x = x * (1.0 + torch.arange(len(slots), dtype=torch.float64)[None, None, :, None, None]) + 3.0
        bcs = torch.full((b, 2), int(periodic), dtype=torch.long)
        tensors[f"{case}.input"] = x
        with torch.no_grad():
            tensors[f"{case}.output32"] = net.float()(x.float(), [slots], bcs)
            tensors[f"{case}.output64"] = net.double()(x, [slots], bcs)
            if case == ROLLOUT:
                window, frames = x, []
                for _ in range(3):
                    y = net(window, [slots], bcs)
                    frames.append(y)
                    window = torch.cat([window[1:], y[None]], dim=0)
                tensors[f"{case}.rollout64"] = torch.stack(frames)
        net.float()
    save_file(tensors, str(out / "reference.safetensors"))
    meta = {"repo": "PolymathicAI/multiple_physics_pretraining", "commit": commit(repo), "torch": torch.__version__,
            "einops": einops.__version__, "timm": timm.__version__, "dadaptation": dadaptation_version(),
            "ruamel.yaml": ruamel_version(), "small": SMALL, "rollout": ROLLOUT,
            "cases": {k: {"T": v[0], "B": v[1], "H": v[2], "W": v[3], "slots": v[4], "periodic": v[5]}
                      for k, v in CASES.items()},
            "sizes": sizes, "script": "tests/mpp/record_reference.py"}
    (out / "reference.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {out}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
