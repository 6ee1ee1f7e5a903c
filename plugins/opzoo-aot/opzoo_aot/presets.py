"""The aot-pot-* presets: the POT backbone with sandwich blocks and AOT residuals (docs/models.md §3)."""

from __future__ import annotations

from importlib.resources import files

import opzoo
from opzoo.micro import micro_pretrained_cfg, micro_results
from opzoo_fourier import DPOT, dpot_micro_preset_args, dpot_preset_args

CARDS = files("opzoo_aot") / "model_cards"

# the paper's AOT hyper-parameters: n = 4 streams, 20 Sinkhorn iterations, gate init α = 0.01
AOT_RESIDUAL_ARGS = dict(n=4, sinkhorn_iters=20, alpha=0.01)

ALIASES = {"aot-pot-t": ("aot-pot-ti",)}

# aot-pot-micro: dpot-micro's dims and setup (opzoo_fourier.dpot_micro_preset_args) with sandwich blocks and
# AOT residuals, pretrained by opzoo on its synthetic suite (configs/micro/aot-pot-micro.yaml) with
# the same data, budget and seed; the weights ship in this package (pretrained/aot-pot-micro/)


def aot_pot_args_of(size: str) -> dict:
    """The POT config at POT size ``size``: DPOT's network (opzoo-fourier) with sandwich blocks and AOT residuals."""
    return dpot_preset_args(size, block="sandwich", residual="aot", residual_args=dict(AOT_RESIDUAL_ARGS))


def _table_row(cells: tuple[str, str]) -> str:
    name, values = cells
    return "| " + " | ".join([name, *values.split()]) + " |"


def aot_row(name: str, size: str, word: str, params: str, paper_params: str, noise: str, table: int,
            zero_shot: tuple, tuned: tuple | None = None, timing: str | None = None) -> opzoo.Variant:
    """One AOT-POT size: DPOT"s network at POT size ``size`` with sandwich blocks and AOT residuals, and what the
    paper reports of it (parameters, input noise, the zero-shot and fine-tuned rows of its Table ``table`` beside
    DPOT"s, single-step time). No weights are published."""
    return opzoo.Variant(name, args=aot_pot_args_of(size), aliases=ALIASES.get(name, ()),
                         data={"word": word, "params": int(params.replace(",", "")), "paper_params": paper_params,
                               "noise": noise, "table": table, "zero_shot": zero_shot, "tuned": tuned,
                               "timing": timing, "dpot": "dpot-" + size.lower()})


PAPER = "AOT-POT: Adaptive Operator Transformation for Large-Scale PDE Pre-training (the paper; docs/models.md §3)"


def aot_facts(v: opzoo.Variant) -> tuple[opzoo.Fact, ...]:
    return (
        opzoo.Fact("architecture", f"DPOT's network at POT size {v.name.split('-')[-1].upper()} ({v['dpot']}'s dims) "
                   "with sandwich blocks and AOT residuals: n = 4 streams, 20 Sinkhorn iterations, gate init 0.01",
                   PAPER + ", §3 and App. B.3"),
        opzoo.Fact("reported parameters", v["paper_params"], PAPER + f", Table {v['table']}"),
        opzoo.Fact("reported results", f"zero-shot relative L2 (Table {v['table']})"
                   + (", fine-tuned (Table 1), single-step time (App. C.12)" if v["tuned"] is not None else ""),
                   PAPER + f", Table {v['table']}" + (" and App. C.12" if v["tuned"] is not None else "")),
        opzoo.Fact("published weights", "none: the paper gives none opzoo could find, so the preset has random weights",
                   PAPER, verified=False, alternatives=("weights published since: a PretrainedSource row here",)),
    )


def aot_card_fields(v: opzoo.Variant) -> dict:
    a = v.args
    dpot = DPOT.variant(v["dpot"])
    results = "\n".join(map(_table_row, v["zero_shot"]))
    if v["tuned"] is not None:
        results += ("\n\nAfter fine-tuning on each subset (paper, Table 1):\n\n" + RESULTS_HEADER + "\n"
                    + "\n".join(map(_table_row, v["tuned"])) + "\n\n" + v["timing"])
    return {"size_word": v["word"], "blocks": a["depth"], "width": a["width"], "heads": a["mixer_args"]["n_blocks"],
            "hidden": int(a["width"] * a["mlp_ratio"]), "sublayers": 2 * a["depth"], "params": f"{v['params']:,}",
            "over": f"{(v['params'] / dpot['params'] - 1) * 100:+.2f} %", "dpot": v["dpot"],
            "dpot_params": dpot["official"], "paper_params": v["paper_params"], "noise": v["noise"],
            "table": v["table"], "results": results}


RESULTS_HEADER = ("| model | FNO ν=1e-5 | FNO ν=1e-4 | FNO ν=1e-3 | CNS (1, 0.1) | CNS (1, 0.01) | CNS (0.1, 0.1) | "
                  "CNS (0.1, 0.01) | PDB-DR | PDB-SWE | PDEArena NS | PDEArena NS-cond | CFDBench |\n" + "|---" * 13 + "|")

# the paper"s sizes (DPOT"s dims) and what it reports of each (AOT-POT, Tables 1 and 14, App. B.3 and C.12)
AOT_POT = opzoo.CheckpointFamily(
    "aot-pot", backbone="pot", args={},
    variants=(
        aot_row("aot-pot-t", "Ti", "Tiny (alias `aot-pot-ti`)", "7,936,271", "7M", "5e-4", 1,
                zero_shot=(("AOT-POT-T", "0.0610 0.0438 0.00604 0.0110 0.0280 0.00880 0.0130 0.0241 0.00433 0.0985 0.345 0.00776"),
                           ("DPOT-T", "0.0976 0.0606 0.00954 0.0173 0.0397 0.0132 0.0220 0.0321 0.00560 0.125 0.384 0.00952")),
                tuned=(("AOT-POT-FT-T", "0.0302 0.0158 0.00277 0.00489 0.00655 0.0120 0.00388 0.0106 0.00151 0.0440 0.218 0.00299"),
                       ("DPOT-T-FT", "0.0520 0.0367 0.00580 0.0112 0.0195 0.0174 0.0138 0.0148 0.00241 0.0910 0.280 0.00391")),
                timing=("Single-step inference on one H200 at batch 1 (paper, App. C.12):"
                        " 5.491 ms vs 5.317 ms for DPOT-T.")),
        aot_row("aot-pot-s", "S", "Small", "32,006,011", "31M", "5e-4", 1,
                zero_shot=(("AOT-POT-S", "0.0376 0.0333 0.00293 0.00767 0.0204 0.00833 0.00965 0.0146 0.00266 0.0784 0.261 0.00493"),
                           ("DPOT-S", "0.0553 0.0442 0.0131 0.0153 0.0337 0.0119 0.0188 0.0379 0.00657 0.0991 0.316 0.00696")),
                tuned=(("AOT-POT-FT-S", "0.0223 0.00758 0.00221 0.00427 0.00491 0.00909 0.00356 0.00686 0.00116 0.0291 0.170 0.00239"),
                       ("DPOT-S-FT", "0.0322 0.0237 0.00437 0.0129 0.0167 0.0152 0.0126 0.0129 0.00235 0.0867 0.268 0.00382")),
                timing=("Single-step inference on one H200 at batch 1 (paper, App. C.12):"
                        " 8.010 ms vs 7.795 ms for DPOT-S.")),
        aot_row("aot-pot-m", "M", "Medium", "124,534,975", "124M", "5e-4", 1,
                zero_shot=(("AOT-POT-M", "0.0312 0.0257 0.00236 0.00906 0.0168 0.00788 0.00954 0.0186 0.00200 0.0775 0.242 0.00543"),
                           ("DPOT-M", "0.0409 0.0285 0.00474 0.0116 0.0238 0.00866 0.0129 0.0292 0.00290 0.0812 0.276 0.00752")),
                tuned=(("AOT-POT-FT-M", "0.0145 0.00608 0.00181 0.00510 0.00943 0.0158 0.00323 0.00642 0.000720 0.0236 0.152 0.00216"),
                       ("DPOT-M-FT", "0.0229 0.0126 0.00335 0.00998 0.0146 0.0161 0.00947 0.0103 0.00227 0.0294 0.172 0.00373")),
                timing=("Single-step inference on one H200 at batch 1 (paper, App. C.12):"
                        " 15.976 ms vs 15.901 ms for DPOT-M.")),
        aot_row("aot-pot-l", "L", "Large", "516,245,383", "515M", "5e-5", 14,
                zero_shot=(("AOT-POT-L", "0.02934 0.02113 0.00285 0.00862 0.01804 0.00754 0.01000 0.02199 0.00197 0.06372 0.20111 0.00586"),
                           ("DPOT-L", "0.05500 0.02740 0.00528 0.01000 0.02160 0.00872 0.01150 0.02320 0.00233 0.07980 0.24000 0.00650"))),
    ),
    pretrained_cfg=dict(channels=4, resolution=[128, 128], in_timesteps=10), provenance=aot_facts,
    card=CARDS / "aot-pot.md", card_fields=aot_card_fields,
)


def register_presets(registry) -> None:
    registry.register_family(AOT_POT)
    registry.register_model(
        "aot-pot-micro",
        backbone="pot",
        args=dpot_micro_preset_args(block="sandwich", residual="aot", residual_args=dict(AOT_RESIDUAL_ARGS)),
        pretrained=opzoo.PretrainedSource.package("opzoo_aot", "pretrained/aot-pot-micro"),
        card=CARDS / "aot-pot-micro.md",
        pretrained_cfg=micro_pretrained_cfg(),
        results=micro_results(files("opzoo_aot") / "pretrained" / "aot-pot-micro" / "eval.json"),
    )
