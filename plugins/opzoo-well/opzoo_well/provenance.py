"""Where every fact about The Well's datasets and checkpoints comes from (``python -m opzoo_well.families`` renders
every row into ``docs/the-well-provenance.md``; ``opzoo info`` shows a preset's rows).

Sources are paths in PolymathicAI/the_well at a commit (read with ``git log`` / ``git show``), or URLs.
A fact the record does not settle is unverified and lists its alternatives; where a load can test it
on the real files, a load check does (``checks.py``).
"""

from __future__ import annotations

import opzoo
from opzoo import Fact, Result, Variant

from .architectures import ARCHITECTURES, N_STEPS_INPUT, hub_repo
from .datasets import TEST_BATCH_SIZE, dataset

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

