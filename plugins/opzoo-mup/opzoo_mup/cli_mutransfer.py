"""``opzoo mutransfer CONFIG``: μTransfer-FNO's Algorithm 1 from the command line."""

from __future__ import annotations

import json


def _run(args) -> int:
    from .mutransfer import load_config, run_mutransfer

    cfg = load_config(args.config, output_dir=args.out, device=args.device)
    summary = run_mutransfer(cfg, progress=not args.quiet, source=str(args.config))
    for p, entry in summary["parametrizations"].items():
        best, target = entry["proxy_best"], entry["target"]
        print(f"{p}: proxy K={summary['proxy_modes']} best lr {best['lr']:.3g} (loss {best['loss']:.4g}) -> "
              f"target K={summary['target_modes']} loss {target['loss']:.4g}"
              + (f" (regret x{target['regret']:.3f})" if "regret" in target else ""))
        print("    best lr per K: " + ", ".join(f"K={k}: {v['best_lr']:.3g}" for k, v in entry["best_per_K"].items()))
    print(f"wrote {cfg.output_dir}/sweep.csv, lr_landscape.png, transfer.json")
    if args.json:
        print(json.dumps(summary))
    return 0


def add_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "mutransfer", help="μTransfer-FNO: sweep hyper-parameters on a few-mode proxy, rescale, train the target",
        description="Algorithm 1 of μTransfer-FNO (see docs/mup.md): sweep lr (and optionally batch size and "
                    "Adam betas) on the proxy for standard and μP parametrizations, pick the best, rescale with "
                    "the mup-fno hook, train the target; writes sweep.csv, lr_landscape.png and transfer.json. "
                    "Re-running skips finished runs.")
    p.add_argument("config", help="mutransfer config (YAML or JSON)")
    p.add_argument("--out", default=None, help="output directory (default: the config's output_dir)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: the run's training.device)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="also print the summary as JSON")
    p.set_defaults(func=_run)
