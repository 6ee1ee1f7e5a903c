"""The model card of The Well's checkpoints: one template (``model_cards/well.md``) for every ``well-*`` preset and
for a converted checkpoint, filled with a checkpoint's fields here; ``${name}``, ``${parameters}``, ... are left for
the card's rendering on save."""

from __future__ import annotations

from importlib.resources import files
from string import Template
from typing import Any

import opzoo

from .architectures import ARCHITECTURES, AS_TRAINED, N_STEPS_INPUT, hub_repo, preset_name
from .datasets import STATS_SOURCE, dataset
from .provenance import BLOCKS_DROPPED, FNO_FIX, ISSUE_49, PR_64, STATS_ALTERNATIVES, STATS_SHIPPED, TFNO_FIX

TEMPLATE = files("opzoo_well") / "model_cards" / "well.md"

CITATION = """@article{ohana2024well,
  title={The well: a large-scale collection of diverse physics simulations for machine learning},
  author={Ohana, Ruben and McCabe, Michael and Meyer, Lucas and Morel, Rudy and Agocs, Fruzsina and Beneitez, Miguel and Berger, Marsha and Burkhart, Blakesly and Dalziel, Stuart and Fielding, Drummond and others},
  journal={Advances in Neural Information Processing Systems},
  volume={37},
  pages={44989--45037},
  year={2024}
}"""

LICENSE_STATUS = (
    "The Well's code (PolymathicAI/the_well) is BSD-3-Clause. The model README that The Well keeps for "
    "these checkpoints (`the_well/benchmark/models/{readme}/README.md`, the source of the Hub model cards) "
    "states no license for the weights, and the Hub repo's own card could not be read when this card was "
    "written (no network). Until the repo says otherwise, treat the weights' license as unstated "
    "(`license: unknown`) and check the Hub repo before redistributing them."
)

README_DIR = {"fno": "fno", "tfno": "tfno", "unet-classic": "unet_classic", "unet-convnext": "unet_convnext"}


def card_fields(arch: str, dataset_name: str, reported: tuple[str, int, str] | None = None, source: str | None = None,
                steps: int = N_STEPS_INPUT, fourier_blocks: str | None = None,
                resolution: list[int] | None = None) -> dict[str, Any]:
    """The fields of the card of ``arch`` on ``dataset_name``: ``reported`` is a published checkpoint's ``(lr, epochs,
    test VRMSE)`` from The Well's README; None for a checkpoint converted from a directory, whose weights need not be
    the published ones (no reported VRMSE then). ``fourier_blocks`` (FNO/TFNO) defaults to the published weights'
    ``"dropped"``; ``resolution`` to the dataset's grid."""
    published = reported is not None
    a, d = ARCHITECTURES[arch], dataset(dataset_name)
    repo = hub_repo(arch, dataset_name)
    fields = ", ".join(f"`{c}`" for c in d.channels)
    constants = ", ".join(f"`{c}`" for c in d.constant_channels) or "none"
    res = " x ".join(map(str, resolution or d.resolution))
    lr, epochs, vrmse = reported or ("?", "?", "?")
    if arch in ("fno", "tfno") and fourier_blocks is None:
        fourier_blocks = AS_TRAINED[arch]["fourier_blocks"]
    if published:
        evaluation = (f"**Reported by The Well** (not measured by opzoo): a test VRMSE of **{vrmse}** in its README "
                      f"(the best of five learning rates on validation: {lr}, {epochs} epochs). The Well's test score "
                      f"averages the one-step VRMSE over every window of every test trajectory; `opzoo eval "
                      f"--protocol the-well` scores that way (labelled so). `opzoo eval`'s default scores rollouts "
                      f"from the first window of each trajectory, a different number: do not set the two side by side.")
        if arch.startswith("unet"):
            evaluation += (f"\n\nCaveat: the U-Nets' README numbers are not reproduced by The Well's own code with the "
                           f"Hub weights (viscoelastic_instability: 0.947 for UNetConvNext and 3.95 for UNetClassic; "
                           f"{ISSUE_49}). Measure before you rely on the reported value.")
    else:
        evaluation = ("A checkpoint converted from a directory: nothing shows that its weights are the published "
                      "ones, so The Well's reported result is not claimed for it. Evaluate it with `opzoo eval` "
                      "(VRMSE per field next to l2 full; `--protocol the-well` for The Well's test protocol).")
    stats_caveat = ""
    if dataset_name in STATS_ALTERNATIVES:
        stats_caveat = (" For this dataset the revisions disagree, and which one trained the weights is "
                        "**unverified**: " + "; ".join(STATS_ALTERNATIVES[dataset_name]) + ".")
    source = source or f"[`{repo}`](https://huggingface.co/{repo})"
    config_line = ("Published config: " + ", ".join(f"`{k}={v}`" for k, v in a.args.items())
                   + ", other arguments at The Well's defaults." if published
                   else "Its arguments are the converted checkpoint's own (its `config.json`).")
    if fourier_blocks == "dropped":
        config_line += (
            f"\n\n**A pointwise map, not an FNO.** These weights were trained by the_well <= 1.1.0, whose "
            f"`NeuralOpsCheckpointWrapper.forward` (`the_well/benchmark/models/{arch}/__init__.py`, from commit "
            f"{BLOCKS_DROPPED[:7]}, 2024-06-03) called each Fourier block and dropped its output, until commit "
            f"{(FNO_FIX if arch == 'fno' else TFNO_FIX)[:7]} (2025-11-17, {PR_64}). The network they learned is "
            f"`projection(lifting(x))`: two pointwise MLPs, no Fourier layer, no spatial coupling. opzoo computes "
            f"exactly that (`fourier_blocks=\"dropped\"`), and the load refuses weights whose blocks look trained. "
            f"The block weights are in the file, an untrained init draw; `fourier_blocks=\"applied\"` builds the "
            f"FNO as neuraloperator defines it, for training.")
    elif fourier_blocks == "applied":
        config_line += "\n\nThe Fourier blocks are applied (`fourier_blocks=\"applied\"`, The Well from commit 21e51f6)."
    return {"arch": arch, "dataset": dataset_name, "well_class": a.well_class, "source": source, "paper": a.paper,
            "config_line": config_line, "axes": ", ".join("XYZ"[:d.n_spatial_dims]), "steps": steps,
            "stats_source": STATS_SOURCE.format(name=dataset_name), "spatial_dims": d.n_spatial_dims,
            "resolution": res, "fields": fields, "constants": constants, "evaluation": evaluation,
            "license": LICENSE_STATUS.format(readme=README_DIR[arch]), "stats_shipped": STATS_SHIPPED[:7],
            "stats_caveat": stats_caveat, "citation": CITATION, "preset": preset_name(arch, dataset_name),
            "repo": repo, "n_steps_input": N_STEPS_INPUT}


def variant_card_fields(variant: opzoo.Variant) -> dict[str, Any]:
    """The card fields of a published checkpoint (a row of ``families.py``)."""
    return card_fields(variant["arch"], variant["dataset"], (variant["lr"], variant["epochs"], variant["vrmse"]))


def card_text(arch: str, dataset_name: str, **kwargs: Any) -> str:
    """The card template filled for ``arch`` on ``dataset_name`` (:func:`card_fields`' arguments)."""
    return Template(TEMPLATE.read_text(encoding="utf-8")).safe_substitute(card_fields(arch, dataset_name, **kwargs))
