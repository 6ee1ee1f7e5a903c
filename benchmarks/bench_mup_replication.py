"""μTransfer-FNO replication that can fail (docs/mup.md): does μP keep the best lr put across K where SP moves it?

Task: low-viscosity Burgers on rough inputs, ``u0 -> u(·, t_end)`` (opzoo's ``burgers`` generator with
GRF ``alpha = 1``: amplitude ~ 1/k, so energy at every resolved mode; ``nu = 2e-3``, ``t_end = 0.05``:
viscous damping ``exp(-4π² nu t k²)`` is e^-0.4 at k = 10, e^-1.6 at 20 and e^-6 at 40, so the map
acts differently on every mode up to ~40 and an FNO that keeps only K modes passes the rest through
its pointwise path untouched). Resolution 128 (solved at 128, 2/3 dealiasing: modes <= 42 carry data).

Model: FNO-1D (``fno`` backbone, 1 spatial dim, width 16, depth 4, projection 32), K Fourier modes.
Training: Adam (0.9, 0.999), batch 16, ``--steps`` updates with cosine decay, relative-L2 loss; metric:
relative L2 on 128 held-out samples. Standard parametrization (SP) vs μP (``mup-fno`` with base K0 = 4:
spectral init and Adam lr x sqrt(log K0 / log K)); lr grid ``10^(a + 0.1 i)`` (steps of x1.259).

Every run is one line of ``OUT/runs.jsonl`` (resumable); ``--report`` writes the CSVs, the PNG and prints
the markdown tables from it.

    OMP_NUM_THREADS=1 python benchmarks/bench_mup_replication.py --out runs/mup-replication
    OMP_NUM_THREADS=1 python benchmarks/bench_mup_replication.py --out runs/mup-replication --report --docs docs/mup
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import time
from pathlib import Path

import h5py
import torch

import opzoo
from opzoo_mup import MuPFNO

DATA = dict(res=128, solver_res=128, nu=1e-3, t_end=0.1, steps=1, alpha=1.0, tau=5.0, sigma=5.0)  # --sigma overrides


def make_data(path: Path, n: int, seed: int = 0, sigma: float = DATA["sigma"],
              res: int = DATA["res"]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u0, u_T)`` each ``[n, res, 1, 1]`` (float32), generated once into ``path``."""
    from opzoo.data import generate

    if not path.is_file():
        generate("burgers", path, n, seed=seed, batch_size=64, progress=False,
                 **{**DATA, "sigma": sigma, "res": res, "solver_res": res})
    with h5py.File(path, "r") as f:
        arr = torch.as_tensor(f["data"][...])
    arr = arr.float()  # [n, res, T=2, 1]
    return arr[:, :, :1], arr[:, :, 1:]


def spectrum_share(u: torch.Tensor, ks=(4, 8, 16, 32, 64, 128)) -> dict[int, float]:
    """Fraction of the target's (mean-free) energy in rfft modes above ``K``."""
    e = torch.fft.rfft(u[..., 0, 0].double(), dim=-1).abs().square().mean(0)
    e[0] = 0
    total = float(e.sum())
    return {k: float(e[k:].sum()) / total for k in ks if k < e.numel()}


def rel_l2(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``[B]`` relative L2 error per sample."""
    d = (pred - y).flatten(1).norm(dim=1)
    return d / y.flatten(1).norm(dim=1)


def train_one(param: str, K: int, lr: float, seed: int, data, steps: int, batch: int = 16, width: int = 16,
              base_modes: int = 4) -> dict:
    (x_tr, y_tr), (x_te, y_te) = data
    torch.manual_seed(seed)
    model = opzoo.create_model("fno", spatial_dims=1, width=width, depth=4, modes=K, projection_dim=32)
    groups = [{"params": [p for _, p in model.named_parameters()], "names": [n for n, _ in model.named_parameters()],
               "lr_scale": 1.0}]
    if param == "mup":
        hook = MuPFNO(base_modes=base_modes)
        hook.on_model_built(model)
        groups = hook.param_groups(model, groups)
    opt = torch.optim.Adam([{"params": g["params"], "lr": lr * g["lr_scale"], "lr_scale": g["lr_scale"]} for g in groups],
                           lr=lr, betas=(0.9, 0.999))
    gen = torch.Generator().manual_seed(10_000 + seed)
    t0 = time.perf_counter()
    status = "ok"
    for i in range(steps):
        factor = 0.5 * (1 + math.cos(math.pi * i / steps))
        for g in opt.param_groups:
            g["lr"] = lr * g["lr_scale"] * factor
        idx = torch.randint(0, x_tr.shape[0], (batch,), generator=gen)
        loss = rel_l2(model(x_tr[idx]), y_tr[idx]).mean()
        if not math.isfinite(loss.item()):
            status = "diverged"
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        test = float(rel_l2(model(x_te), y_te).mean()) if status == "ok" else math.inf
    if not math.isfinite(test):
        status, test = "diverged", math.inf
    return {"param": param, "K": K, "lr": lr, "seed": seed, "test": test, "status": status,
            "seconds": round(time.perf_counter() - t0, 2)}


def lr_grid(lo_exp: float, n: int) -> list[float]:
    return [float(f"{10 ** (lo_exp + 0.1 * i):.4g}") for i in range(n)]


def sweep(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"burgers-rough-sigma{args.sigma:g}" + ("" if args.res == DATA["res"] else f"-res{args.res}")
    x, y = make_data(out / f"{name}.h5", args.train + args.test, sigma=args.sigma, res=args.res)
    data = ((x[:args.train], y[:args.train]), (x[args.train:], y[args.train:]))
    log = out / "runs.jsonl"
    done = set()
    if log.is_file():
        for line in log.read_text().splitlines():
            r = json.loads(line)
            done.add((r["param"], r["K"], r["lr"], r["seed"]))
    specs = [(p, K, lr, s) for s in args.seeds for lr in lr_grid(args.lr_exp, args.n_lr) for K in args.modes
             for p in ("standard", "mup") if not (p == "mup" and K == args.base_modes)]
    todo = [s for s in specs if s not in done]
    print(f"{len(specs)} runs, {len(todo)} to do; target energy above K: "
          + ", ".join(f"K={k}: {v:.3f}" for k, v in spectrum_share(y).items())
          + f"; identity map's test error {float(rel_l2(x[args.train:], y[args.train:]).mean()):.3f}", flush=True)
    t_start = time.perf_counter()
    for j, (p, K, lr, s) in enumerate(todo):
        r = train_one(p, K, lr, s, data, args.steps, base_modes=args.base_modes)
        with open(log, "a") as f:
            f.write(json.dumps(r) + "\n")
        el = time.perf_counter() - t_start
        print(f"[{j + 1}/{len(todo)}] {p} K={K} lr={lr:.3g} seed={s}: test {r['test']:.4f} ({r['seconds']} s; "
              f"eta {el / (j + 1) * (len(todo) - j - 1) / 60:.1f} min)", flush=True)


def curves(rows: list[dict], base_modes: int) -> dict:
    """``{(param, K): {lr: [test per seed]}}``; μP at the base K is SP (identical runs)."""
    out: dict = {}
    for r in rows:
        keys = [(r["param"], r["K"])]
        if r["param"] == "standard" and r["K"] == base_modes:
            keys.append(("mup", r["K"]))
        for k in keys:
            out.setdefault(k, {}).setdefault(r["lr"], {})[r["seed"]] = r["test"]
    return out


def report(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(args.out)
    rows = [r for r in (json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()) if r["K"] in args.modes]
    docs = Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    with open(docs / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["param", "K", "lr", "seed", "test", "status", "seconds"])
        w.writeheader()
        for r in sorted(rows, key=lambda r: (r["param"], r["K"], r["lr"], r["seed"])):
            w.writerow(r)
    c = curves(rows, args.base_modes)
    ks = sorted({k for _, k in c})
    seeds = sorted({r["seed"] for r in rows})
    summary = []
    print("| K | SP: best lr (seed-mean) | SP: per-seed best lr | μP: best lr (seed-mean) | μP: per-seed best lr |")
    print("|---|---|---|---|---|")
    best = {}
    for K in ks:
        cells = []
        for p in ("standard", "mup"):
            cur = c[(p, K)]
            mean = {lr: statistics.fmean(v.values()) for lr, v in cur.items() if len(v) == len(seeds)}
            lr_b = min(mean, key=mean.get)
            per_seed = [min(cur, key=lambda lr: cur[lr].get(s, math.inf)) for s in seeds]
            best[(p, K)] = (lr_b, mean[lr_b])
            cells += [f"{lr_b:.3g} ({mean[lr_b]:.4f})", ", ".join(f"{v:.3g}" for v in per_seed)
                      + f" (max/min x{max(per_seed) / min(per_seed):.2f})"]
            summary.append({"param": p, "K": K, "best_lr": lr_b, "best_test": mean[lr_b],
                            **{f"best_lr_seed{s}": v for s, v in zip(seeds, per_seed)}})
        print(f"| {K} | " + " | ".join(cells) + " |")
    K0, Kt = min(ks), max(ks)
    print()
    print(f"Transfer to K = {Kt} at the proxy's (K = {K0}) seed-mean optimum:")
    print("| parametrization | proxy best lr | K_target loss at it (mean ± sd over seeds) | K_target's own best | regret |")
    print("|---|---|---|---|---|")
    transfer = []
    for p in ("standard", "mup"):
        lr0 = best[(p, K0)][0]
        vals = list(c[(p, Kt)][lr0].values())
        own_lr, own = best[(p, Kt)]
        print(f"| {p} | {lr0:.3g} | {statistics.fmean(vals):.4f} ± {statistics.stdev(vals):.4f} | "
              f"{own:.4f} (lr {own_lr:.3g}) | x{statistics.fmean(vals) / own:.3f} |")
        transfer.append({"param": p, "proxy_lr": lr0, "target_K": Kt, "target_loss_mean": statistics.fmean(vals),
                         "target_loss_sd": statistics.stdev(vals), "target_best_lr": own_lr, "target_best": own})
    for name, table in (("optimum.csv", summary), ("transfer.csv", transfer)):
        with open(docs / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    cmap = plt.get_cmap("viridis")
    for ax, p in zip(axes, ("standard", "mup")):
        for j, K in enumerate(ks):
            cur = c[(p, K)]
            lrs = sorted(cur)
            color = cmap(j / max(1, len(ks) - 1))
            m = [statistics.fmean(cur[lr].values()) for lr in lrs]
            lo = [min(cur[lr].values()) for lr in lrs]
            hi = [max(cur[lr].values()) for lr in lrs]
            ax.plot(lrs, m, "o-", color=color, ms=3, label=f"K = {K}")
            ax.fill_between(lrs, lo, hi, color=color, alpha=0.15)
            ax.plot([best[(p, K)][0]], [best[(p, K)][1]], "*", color=color, ms=14, mec="k", mew=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("learning rate (master)")
        ax.set_title({"standard": "standard parametrization", "mup": f"μP (mup-fno, base K0 = {args.base_modes})"}[p])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel(f"test rel. L2 (mean of {len(seeds)} seeds; band: min-max)")
    fig.suptitle("FNO-1D on rough low-viscosity Burgers: loss vs lr")
    fig.tight_layout()
    fig.savefig(docs / "lr_landscape.png", dpi=110)
    print(f"wrote {docs}/runs.csv, optimum.csv, transfer.csv, lr_landscape.png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/mup-replication")
    ap.add_argument("--modes", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--base-modes", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--lr-exp", type=float, default=-2.4, help="log10 of the smallest lr")
    ap.add_argument("--n-lr", type=int, default=15, help="grid points, x10^0.1 apart")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--sigma", type=float, default=DATA["sigma"], help="GRF amplitude of u0 (nonlinearity)")
    ap.add_argument("--res", type=int, default=DATA["res"], help="resolution (solved at the same resolution)")
    ap.add_argument("--train", type=int, default=512)
    ap.add_argument("--test", type=int, default=128)
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--docs", default="docs/mup")
    args = ap.parse_args()
    torch.set_num_threads(1)
    report(args) if args.report else sweep(args)


if __name__ == "__main__":
    main()
