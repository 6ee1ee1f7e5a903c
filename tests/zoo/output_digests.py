"""Every preset's seeded output digest, to show a refactor changes no output (issue 44).

    python -m tests.zoo.output_digests BEFORE.json            # at the old commit
    python -m tests.zoo.output_digests AFTER.json --against BEFORE.json   # at the new one: exit 1 on any change

Each preset is built at small dims (``small_presets``) with seed 0, in eval mode, and run on a seeded input; the
digest is the sha256 of its float32 output. Digests are bit-level, so they compare runs on one machine (another CPU
may round differently): they are not a committed golden file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import torch

import opzoo

from .small_presets import small_input, small_model


def digests() -> dict[str, str]:
    out = {}
    for name in opzoo.list_models():
        model = small_model(name).eval()
        x, _ = small_input(model)
        with torch.no_grad():
            y = model(x)
        out[name] = hashlib.sha256(y.detach().float().contiguous().numpy().tobytes()).hexdigest()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--against", help="digests of an earlier commit: exit 1 when any preset's output differs")
    args = parser.parse_args(argv)
    found = digests()
    with open(args.out, "w") as f:
        json.dump(found, f, indent=1, sort_keys=True)
    print(f"{len(found)} presets -> {args.out}")
    if args.against:
        with open(args.against) as f:
            before = json.load(f)
        changed = sorted(n for n in before.keys() & found.keys() if before[n] != found[n])
        print(f"same output: {len(before.keys() & found.keys()) - len(changed)}; changed: {changed or 'none'}; "
              f"only before: {sorted(before.keys() - found.keys()) or 'none'}; "
              f"only now: {sorted(found.keys() - before.keys()) or 'none'}")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
