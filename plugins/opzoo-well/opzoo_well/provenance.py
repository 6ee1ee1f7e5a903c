"""Where every fact about The Well's datasets and checkpoints comes from (``python -m opzoo_well.families`` renders
every row into ``docs/the-well-provenance.md``; ``opzoo info`` shows a preset's rows).

Sources are paths in PolymathicAI/the_well at a commit (read with ``git log`` / ``git show``), or URLs.
A fact the record does not settle is unverified and lists its alternatives; where a load can test it
on the real files, a load check does (``checks.py``)."""

from __future__ import annotations

from importlib.resources import files
from string import Template
from typing import Any

import opzoo
from opzoo import Fact, Result, Variant

from .architectures import ARCHITECTURES, AS_TRAINED, N_STEPS_INPUT, hub_repo, preset_name
from .datasets import STATS_SOURCE, TEST_BATCH_SIZE, dataset

REPO = "PolymathicAI/the_well"
HEAD = "215f55d838d161964a49ce28d3dc1517c6e74b90"  # 2026-06-25, the newest commit read
UPLOAD_SCRIPT = "671f66caad717e08d013d9bdcb04c2a1447974f9"  # 2025-09-15, last change of the upload script, configs, READMEs
V1_1_0 = "d5ea89f2200104c4e030afec79f7f144bc6bf85b"  # tag v1.1.0 (2025-04-03)
BLOCKS_DROPPED = "2d8d7eaf9eb46b96f215abf39c94b6be4bf9ea5c"  # 2024-06-03 "Added gradient checkpointing"
FNO_FIX = "21e51f6313ccd520e1f0af78e7f74ec649e8b80a"  # 2025-11-17 "actually use the FNO blocks"
TFNO_FIX = "e4301602e57f2dddeaa87856dda49bbba47c663b"  # 2025-11-17 "actually use the TFNO blocks"
SHEAR_FLOW_REGENERATED = "06ac146ccd56a63777fe0befe4b1993865c807b1"  # 2024-12-01 "New shear_flow data informations (#200)"
# 2025-04-07 "Add missing statistics": a commit of refs/pull/44/head only, not of main; main took the same values
# rounded to 5 significant digits (a86893c "Fix missing statistics (#44)", 2025-04-11, unchanged since)
STATS_SHIPPED = "75c6b4948fda27d78fee7ac418fbb00711791784"
STATS_ON_MAIN = "a86893c"
ISSUE_49 = "https://github.com/PolymathicAI/the_well/issues/49"
PR_64 = "https://github.com/PolymathicAI/the_well/pull/64"

MODEL_DIR = {"fno": "fno", "tfno": "tfno", "unet-classic": "unet_classic", "unet-convnext": "unet_convnext"}


def at(path: str, commit: str = HEAD) -> str:
    return f"{REPO} {path} @ {commit[:7]}"


# stats.yaml revisions since the YAML stats appeared (495bcfe, 2024-09-20: 495bcfe, 06ac146 for shear_flow,
# d4dd9f2 2025-02-12, a86893c 2025-04-11, 75c6b49 shipped); for all other datasets every revision agrees on
# mean and std. The checkpoints do not record which one their training read.
STATS_ALTERNATIVES = {
    "MHD_64": ("495bcfe (2024-09-20): no velocity entry, which the code of that time left unnormalized; "
               "density mean 0.9654 (now 1.0015), magnetic_field std [0.5286, 0.3115, 0.3144] (now [0.5287, 0.3171, 0.3201])",
               "d4dd9f2 (2025-02-12) and later: the shipped values"),
    "planetswe": ("495bcfe (2024-09-20): velocity mean and std with theta and phi swapped: std [13.8956, 7.2242] "
                  "(now [7.2242, 13.8956])",
                  "d4dd9f2 (2025-02-12) and later: the shipped values"),
    "shear_flow": ("06ac146 (2024-12-01, the regenerated data): stds about 15-20 % lower: tracer 0.2869, pressure "
                   "0.0696, velocity [0.4052, 0.0942] (now 0.3583, 0.0821, [0.4019, 0.1042])",
                   "d4dd9f2 (2025-02-12) and later: the shipped values"),
    "acoustic_scattering_maze": ("495bcfe / 06ac146 (2024): no speed_of_sound entry (a constant field), which the "
                                 "code of that time left unnormalized",
                                 "d4dd9f2 (2025-02-12) and later: the shipped values"),
}


def dataset_facts(name: str) -> list[Fact]:
    d = dataset(name)
    meta = f"datasets/{name}/{name}.yaml"
    res = " x ".join(map(str, d.resolution))
    facts = [
        Fact("resolution", res + (f" (regenerated data; 128 x 256 before {SHEAR_FLOW_REGENERATED[:7]}, 2024-12-01)"
                                  if name == "shear_flow" else ""),
             at(meta) + " spatial_resolution" + (f"; changed in {SHEAR_FLOW_REGENERATED[:7]}" if name == "shear_flow" else "")),
        Fact("fields, in order", ", ".join(d.channels) + " (files are matched by name, not position)",
             at(meta) + " field_names"),
        Fact("constant fields", ", ".join(d.constant_channels) or "none", at(meta) + " constant_field_names"),
    ]
    if name == "viscoelastic_instability":
        facts.append(Fact("data version", "the original data; a fixed version is a separate dataset, "
                          "viscoelastic_instability_v2 (2026-06-15), with its own stats: the checkpoints predate it",
                          at("datasets/viscoelastic_instability_v2/", "4a4d2490b6e8caf24b778be1f07125532a95c309")
                          + " ('Add fixed viscoelastic_instability data as v2')"))
    stats = (f"stats.yaml @ {STATS_SHIPPED[:7]} (refs/pull/44/head, shipped in opzoo_well/stats/; main's "
             f"{STATS_ON_MAIN} has the same values rounded to 5 significant digits)")
    if name in STATS_ALTERNATIVES:
        facts.append(Fact("normalization stats", stats, at(f"datasets/{name}/stats.yaml", STATS_SHIPPED)
                          + "; history: git log -- that path", verified=False, alternatives=STATS_ALTERNATIVES[name]))
    else:
        facts.append(Fact("normalization stats", stats + "; every revision since 495bcfe (2024-09-20) agrees",
                          at(f"datasets/{name}/stats.yaml", STATS_SHIPPED) + "; git log -- that path"))
    return facts


def checkpoint_facts(variant: Variant) -> list[Fact]:
    """The rows of a published checkpoint (a row of ``families.py``: its ``arch``, ``dataset``, ``lr``, ``epochs`` and
    ``vrmse``)."""
    arch, name, lr, epochs, vrmse = (variant[k] for k in ("arch", "dataset", "lr", "epochs", "vrmse"))
    a = ARCHITECTURES[arch]
    readme = f"the_well/benchmark/models/{MODEL_DIR[arch]}/README.md"
    facts = [
        Fact("Hub repo", hub_repo(arch, name),
             at("scripts/huggingface/upload_model.py", UPLOAD_SCRIPT)
             + ": repo_id = f'polymathic-ai/{model.__class__.__name__}-{dataset_name}'; ids of this form in " + ISSUE_49),
        Fact("architecture", f"The Well's {a.well_class}, " + ", ".join(f"{k}={v}" for k, v in a.args.items())
             + ", other arguments at the class defaults",
             at(f"the_well/benchmark/configs/model/{MODEL_DIR[arch]}.yaml", UPLOAD_SCRIPT)),
        Fact("input steps", f"{N_STEPS_INPUT} -> 1", at("scripts/huggingface/MODEL_CARD_TEMPLATE.md", UPLOAD_SCRIPT)
             + ' ("the context length was set to 4", the Hub cards\' template); '
             + at("the_well/benchmark/configs/model_upload.yaml", UPLOAD_SCRIPT) + " n_steps_input: 4"),
        Fact("normalization", "z-score of inputs and target with stats.yaml, full next step as target",
             at(f"the_well/benchmark/configs/data/{name}.yaml", V1_1_0) + " use_normalization: True; "
             + at("the_well/data/datamodule.py", V1_1_0) + " (ZScoreNormalization, WellDataset)"),
        Fact("reported test VRMSE", f"{vrmse} (lr {lr}, {epochs} epochs), as reported by The Well",
             at(readme, UPLOAD_SCRIPT)),
        Fact("test protocol", "every window (4 -> 1, stride 1) of the test files, one-step VRMSE, mean of batch means "
             f"with batch size {TEST_BATCH_SIZE[name]} (`opzoo eval --windows all`)",
             at("the_well/benchmark/trainer/training.py", V1_1_0) + " Trainer.validation_loop(full=True); "
             + at(f"the_well/benchmark/configs/data/{name}.yaml", V1_1_0) + " batch_size",
             verified=False, alternatives=("the batch size at the time the README's numbers were computed, if it "
                                           "differed (it changes only the weight of the last, short batch)",)),
        Fact("weights license", "not stated", at(readme, UPLOAD_SCRIPT) + " (the Hub card's source) states none; "
             "the Hub repo's own card could not be read here", verified=False,
             alternatives=("a license on the Hub repo's card: check it before redistributing",)),
    ]
    if arch.startswith("unet"):
        facts.append(Fact("reported result reproduced", "not reproduced by The Well's own code for "
                          "viscoelastic_instability (VRMSE 0.947 for UNetConvNext and 3.95 for UNetClassic, measured "
                          "with the Hub weights)", ISSUE_49, verified=False,
                          alternatives=("the README's number, if another evaluation protocol produced it",)))
    else:
        fix = FNO_FIX if arch == "fno" else TFNO_FIX
        facts.append(Fact(
            "Fourier blocks", "dropped: the weights were trained as projection(lifting(x)), a pointwise map",
            at(f"the_well/benchmark/models/{arch}/__init__.py", BLOCKS_DROPPED) + " to " + fix[:7]
            + f" (NeuralOpsCheckpointWrapper.forward dropped each block's output; fixed 2025-11-17, {PR_64}); every "
              f"tag up to v1.2.0 and the PyPI wheels 1.0.1 and 1.1.0 have it, the Hub weights were uploaded "
              f"2025-03-28, and {ISSUE_49} reproduces the README's FNO/TFNO numbers with them",
            verified=False,
            alternatives=("blocks applied (weights trained after the fix): the load check measures the block weights "
                          "and refuses; load with fourier_blocks='applied' then",)))
    return facts


def reported_result(variant: Variant) -> Result:
    """The test VRMSE The Well's README reports for a published checkpoint (their number, not opzoo's), for the
    card's model-index."""
    readme = f"the_well/benchmark/models/{MODEL_DIR[variant['arch']]}/README.md"
    return Result(variant["dataset"], "VRMSE", float(variant["vrmse"]), "The Well",
                  source=f"https://github.com/{REPO}/blob/{UPLOAD_SCRIPT}/{readme}", split="test",
                  metric_name="test VRMSE")


CONTRACT = opzoo.DataContract(
    name="the-well",
    fields=None,  # each preset names its dataset's fields (pretrained_cfg["fields"]); read by name
    units="its dataset's own (The Well's HDF5 files)",
    other_fields="refuse",
    other_fields_source="opzoo-well adapts no channel-shaped tensor (its backbones have no io_layout)",
    grid="its dataset's grid; another is resampled to it (the FNOs run any grid, the U-Nets multiples of 16 or 2^stages)",
    resample="bilinear",
    resample_source="opzoo's (The Well trains and tests at each dataset's own grid)",
    boundary="its dataset's (The Well's boundary_conditions); no boundary input",
    spatial_dims=(2, 3),
    normalization=opzoo.Normalization(
        "constants",
        "each field z-scored by its dataset's stats.yaml mean and std inside the model (stds clipped at 1e-4), as The "
        "Well's trainer does",
        source=at("the_well/data/normalization.py") + " (ZScoreNormalization)",
        breaks="a file of the same fields on another scale than the dataset's"),
)


# ---- The model card of The Well's checkpoints: one template (``model_cards/well.md``) for every ``well-*`` preset and
# for a converted checkpoint, filled with a checkpoint's fields here; ``${name}``, ``${parameters}``, ... are left for
# the card's rendering on save.
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
