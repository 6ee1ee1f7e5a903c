"""Records camlab-ethz/poseidon's own scOT on perturbed random weights, for opzoo's parity tests
(tests/poseidon/test_parity.py).

Poseidon is not on the package index, and its network imports Swin-v2 parts from transformers, so this runs upstream's
code from a checkout with the transformers of its time (4.29.2, pinned by its pyproject.toml at v1-paper), in a process
of its own and without importing opzoo:

    git clone https://github.com/camlab-ethz/poseidon && git -C poseidon checkout v1-paper
    pip install --no-deps --target REF transformers==4.29.2 huggingface_hub==0.33.0 tokenizers==0.13.3 regex
    PYTHONPATH=REF OPZOO_POSEIDON_REPO=poseidon OMP_NUM_THREADS=1 python tests/poseidon/record_reference.py [OUT_DIR]

(`make poseidon-reference` makes REF = .venv/reference/poseidon-transformers-4.29.2.) It writes into
tests/poseidon/data/ (or OUT_DIR), for a narrow network with Poseidon's geometry (128 x 128, 4 x 4 patches, windows of
16, four levels):

- ``scot-small/``: the network's perturbed weights as upstream's ``save_pretrained`` writes them (``config.json``,
  ``pytorch_model.bin``: transformers 4.29.2 saves torch pickles by default);
- ``reference.safetensors``: inputs ``[B, C, n, n]`` at n = 128, 64 and 256 (the last two through upstream's Fourier
  resampling) with per-sample lead times, upstream's outputs in float64 and float32, and the float32 tables of
  Swin-v2's log-spaced offsets per window (``table.<w>``), which a float64 comparison inherits;
- ``reference.json``: what produced them (the commit, the versions, the sizes).

Run again with a checkout of main (``ba06215`` or later) and ``--tag main`` to record ``reference-main.safetensors``:
the tests check that main computes what v1-paper computes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

SMALL = dict(image_size=128, patch_size=4, num_channels=2, num_out_channels=2, embed_dim=8, depths=[2, 2, 2, 2],
             num_heads=[1, 2, 2, 4], skip_connections=[2, 1, 2, 0], window_size=16, mlp_ratio=4.0, qkv_bias=True,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0, hidden_act="gelu",
             use_absolute_embeddings=False, initializer_range=0.02, layer_norm_eps=1e-5, p=1,
             residual_model="convnext", use_conditioning=True, learn_residual=False)
CASES = {"n128": (2, 128, [0.05, 0.7]), "n64": (2, 64, [0.1, 1.0]), "n256": (1, 256, [0.3])}  # B, n, lead times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default=str(Path(__file__).parent / "data"))
    parser.add_argument("--tag", default="v1-paper", help="v1-paper (weights, inputs, outputs) or main (outputs)")
    args = parser.parse_args()
    repo = os.environ.get("OPZOO_POSEIDON_REPO")
    if not repo:
        sys.exit("set OPZOO_POSEIDON_REPO to a checkout of github.com/camlab-ethz/poseidon")
    sys.path.insert(0, repo)
    import transformers
    from scOT.model import ScOT, ScOTConfig

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    torch.manual_seed(0)
    if args.tag == "v1-paper":
        model = ScOT(ScOTConfig(**SMALL))
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():  # off the initialization: every tensor matters, none is near zero
                p.add_(0.2 * torch.randn(p.shape, generator=g) * (p.detach().abs().mean() + 0.05))
        model.save_pretrained(out / "scot-small")
        inputs = {f"{name}.x": torch.randn(b, SMALL["num_channels"], n, n, generator=g)
                  for name, (b, n, _) in CASES.items()}
    else:
        model = ScOT.from_pretrained(out / "scot-small")
        from safetensors.torch import load_file

        recorded = load_file(out / "reference.safetensors")
        inputs = {k: v for k, v in recorded.items() if k.endswith(".x")}
    model.eval()
    tensors = dict(inputs)
    for name, (_, _, times) in CASES.items():
        t = torch.tensor(times, dtype=torch.float64)
        tensors[f"{name}.t"] = t
        with torch.no_grad():
            tensors[f"{name}.output64"] = model.double()(pixel_values=inputs[f"{name}.x"].double(), time=t).output
            tensors[f"{name}.output32"] = model.float()(pixel_values=inputs[f"{name}.x"].float(),
                                                        time=t.float()).output
    model.float()
    for module in model.modules():
        if hasattr(module, "relative_coords_table"):
            tensors[f"table.{module.window_size[0]}"] = module.relative_coords_table.detach().clone()
    name = "reference.safetensors" if args.tag == "v1-paper" else f"reference-{args.tag}.safetensors"
    if args.tag != "v1-paper":
        tensors = {k: v for k, v in tensors.items() if k.endswith(".output64")}
    save_file({k: v.contiguous() for k, v in tensors.items()}, out / name)
    info = {"commit": commit, "tag": args.tag, "transformers": transformers.__version__, "torch": torch.__version__,
            "config": SMALL, "cases": CASES}
    (out / name.replace(".safetensors", ".json")).write_text(json.dumps(info, indent=2) + "\n")
    print(f"wrote {out / name} ({commit}, transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
