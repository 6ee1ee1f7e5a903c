"""Where each fact about the poseidon-* presets comes from: camlab-ethz/poseidon at a commit (fetched with its history).

The rules here are functions of a row of the family's table (:class:`opzoo.Variant`, in ``family.py``): its
``size`` and ``params``."""

from __future__ import annotations

from typing import Any

import opzoo

REPO = "camlab-ethz/poseidon"
PAPER_TAG, PAPER_COMMIT = "v1-paper", "2cc8c85"  # 2024-06-20: pins torch 2.0.1, transformers 4.29.2
MAIN_COMMIT = "b8fa28f"  # head: merges ba06215 (2025-03-26, mask and padding caches in ScOTLayer)
LICENSE = "CC-BY-NC-4.0"
FIELDS = ["density", "velocity_x", "velocity_y", "pressure"]
# scOT/problems/fluids/normalization_constants.py @ v1-paper: the constants of the pretraining datasets
FIELD_MEAN = (0.80, 0.0, 0.0, 0.0)
FIELD_STD = (0.31, 0.391, 0.356, 0.185)
LEAD_TIME = 0.1  # scOT/problems/base.py @ v1-paper: the pretraining data's time_step_size 2 of 20 stored steps
DATASETS = ["NS-Sines", "NS-Gauss", "CE-RP", "CE-CRP", "CE-KH", "CE-Gauss"]
CITATION = ("Maximilian Herde et al. Poseidon: Efficient Foundation Models for PDEs. NeurIPS 2024, arXiv:2405.19101 "
            "(README.md @ v1-paper)")


def at(path: str, commit: str = PAPER_COMMIT) -> str:
    return f"{REPO} {path} @ {commit} ({PAPER_TAG})" if commit == PAPER_COMMIT else f"{REPO} {path} @ {commit}"


MODEL = at("scOT/model.py")
TRAIN = at("scOT/train.py")
COMPRESSIBLE = at("scOT/problems/fluids/compressible.py")
INCOMPRESSIBLE = at("scOT/problems/fluids/incompressible.py")
# CompressibleBase.__getitem__ subtracts each dataset's mean_pressure before the constants (L236-237 @ v1-paper)
MEAN_PRESSURE = {"CE-Gauss": 2.513, "CE-KH": 1.0, "CE-RP": 0.215, "CE-CRP": 0.553, "CE-RPUI": 1.33}
CLASS_OF = {"CE-Gauss": "Gaussians", "CE-KH": "KelvinHelmholtz", "CE-RP": "Riemann", "CE-CRP": "RiemannCurved",
            "CE-RPUI": "RiemannKelvinHelmholtz"}

TRAINING_SETS = (
    *(opzoo.TrainingSet(name, source=INCOMPRESSIBLE + " (IncompressibleBase: velocity read, density ones and pressure "
                        "zeros added)") for name in ("NS-Sines", "NS-Gauss")),
    *(opzoo.TrainingSet(name, mean={"pressure": p}, source=f"{COMPRESSIBLE} ({CLASS_OF[name]}.mean_pressure, "
                        f"subtracted in CompressibleBase.__getitem__)") for name, p in MEAN_PRESSURE.items()),
)

CONTRACT = opzoo.DataContract(
    name="poseidon",
    fields=tuple(FIELDS),
    units="the pretraining operators' nondimensional units",
    training_sets=TRAINING_SETS,
    absent={"density": 1.0, "pressure": 0.0},
    absent_source=f"as upstream read its incompressible datasets: density ones, pressure zeros ({INCOMPRESSIBLE})",
    other_fields="adapt",
    other_fields_source=f"upstream fine-tunes on other fields with from_pretrained(..., ignore_mismatched_sizes=True): "
                        f"the embedding's and recovery's channel-shaped tensors start afresh, the rest is kept ({TRAIN})",
    rollout_note="upstream's incompressible data held density 1 and pressure 0 in every frame",
    grid="any square grid with an even side (Fourier-resampled to 128x128 inside and back, as upstream's forward); "
         "another grid is resampled to 128x128 first",
    resample="bilinear",
    resample_source="opzoo's, for grids upstream does not take (it assumes square ones)",
    boundary="no boundary input; its pretraining operators are posed on the periodic unit square (unverified here)",
    spatial_dims=(2,),
    normalization=opzoo.Normalization(
        "constants",
        f"each field standardized by the pretraining constants, mean {list(FIELD_MEAN)} and std {list(FIELD_STD)}, "
        "inside the model, after pressure's per-dataset mean is subtracted",
        source=at("scOT/problems/fluids/normalization_constants.py") + "; " + COMPRESSIBLE + " (L236-237)",
        breaks="fields far from the pretraining constants (a physical pressure without its dataset mean enters "
               "many stds off)",
        config=("field_mean", "field_std"), dataset_mean=("pressure",)),
)


def hub_repo(size: str) -> str:
    return f"camlab-ethz/Poseidon-{size}"


def facts(variant: opzoo.Variant) -> tuple[opzoo.Fact, ...]:
    Fact = opzoo.Fact
    a, size = variant["args"], variant["size"]
    return (
        Fact("Hub repo", f"{hub_repo(size)}: config.json and model.safetensors (ScOT.save_pretrained's files)",
             at("README.md") + " (ScOT.from_pretrained(\"camlab-ethz/Poseidon-<MODEL_SIZE>\"), T, B or L); the Hub's "
             "file listing could not be read here", verified=False,
             alternatives=("only pytorch_model.bin at the revision loaded: it is read instead, through weights_only "
                           "(never unpickled)",)),
        Fact("Hub revision", "not pinned: the Hub repo's commits could not be read here, so a load takes main; the "
             "load check compares config.json's sizes and every tensor name and shape with the preset",
             f"huggingface.co/{hub_repo(size)} (not reachable offline)", verified=False,
             alternatives=("weights replaced on main since: the config and tensor checks refuse another network",)),
        Fact("code that trained the weights", f"{REPO} at tag {PAPER_TAG} ({PAPER_COMMIT}, 2024-06-20) with "
             "transformers 4.29.2 and torch 2.0.1 (its pyproject.toml pins them; Swin-v2's attention comes from "
             "transformers, whose 4.29.2 adds the shifted windows' mask twice); main changed scOT/model.py in "
             "ba06215 (caches) and computes the same (tests/poseidon); 6c9b24e (an init rule) is on the branch "
             "drop-version-req, not on main",
             at("pyproject.toml") + "; " + at("scOT/model.py", MAIN_COMMIT) + " (git log v1-paper..main); "
             + f"{REPO} refs/heads/drop-version-req @ 6c9b24e"),
        Fact("architecture", f"scOT {size}: embed {a['embed_dim']}, depths {list(a['depths'])}, heads "
             f"{list(a['num_heads'])}, ConvNeXt skips {list(a['skip_connections'])}, windows of 16, 4x4 patches at "
             f"128x128, MLP ratio 4, time-conditioned layer norms; {variant['params']:,} parameters",
             TRAIN + " (MODEL_MAP, ScOTConfig(...)); " + MODEL),
        Fact("input fields", "4 channels: density, velocity x, velocity y, pressure (incompressible datasets get "
             "density 1 and pressure 0); a prediction of the same 4", at("scOT/problems/fluids/incompressible.py")
             + " (label_description \"[rho],[u,v],[p]\", density ones, pressure zeros); "
             + at("scOT/problems/fluids/compressible.py")),
        Fact("lead time", f"the network's time input is the lead time over 20 stored steps (time = t / 20, t in "
             f"stored steps, trajectories of 21 frames over unit time); pretraining pairs use multiples of 2 steps, "
             f"so opzoo's lead_time defaults to {LEAD_TIME} (2 steps); T_out > 1 predicts k * lead_time directly",
             at("scOT/problems/fluids/compressible.py") + " (time = t / self.constants[\"time\"], \"time\": 20.0); "
             + at("scOT/problems/base.py") + " (default_time_settings time_step_size 2, _idx_map)"),
        Fact("normalization", "each field standardized by the pretraining data's constants, mean "
             f"{list(FIELD_MEAN)} and std {list(FIELD_STD)}, by the data pipeline; opzoo applies them around the "
             "network (field_mean, field_std), so the model takes and returns physical fields",
             at("scOT/problems/fluids/normalization_constants.py") + "; "
             + at("scOT/problems/fluids/incompressible.py") + " ((inputs - mean) / std)"),
        Fact("native grid", "128 x 128; a square grid of another even side is Fourier-resampled to it and the "
             "prediction back (upstream's _downsample/_upsample), a grid that is not square is refused (upstream "
             "assumes one)", MODEL + " (ScOT.forward, _downsample, _upsample; \"#! assumes square images\")"),
        Fact("training data", ", ".join(DATASETS) + " (the pretraining operators)", at("README.md")
             + " (the code identifiers fluids.incompressible.Sines/Gaussians, fluids.compressible.Riemann/"
             "RiemannCurved/KelvinHelmholtz/Gaussians)", verified=False),
        Fact("fine-tuning", "upstream loads the weights with ignore_mismatched_sizes=True after changing the "
             "channels: the embedding's and recovery's tensors whose shape changes start afresh, the rest is kept; "
             "lr 5e-5 with 5e-4 for the embedding, recovery and time embeddings",
             TRAIN + " (ScOT.from_pretrained(..., ignore_mismatched_sizes=True)); " + at("configs/run.yaml")),
        Fact("code license", "none: the repository has no LICENSE file in its history, so opzoo's scOT is its own "
             "code, written from the paper and the behaviour of upstream's", f"{REPO} (git log --all -- LICENSE "
             "is empty)"),
        Fact("weights license", f"{LICENSE}: non-commercial use only", f"the Hub cards of {hub_repo(size)} (the "
             "issue's lead; they could not be read here)", verified=False,
             alternatives=("another license on the Hub card: check it before use",)),
    )


def pretrained_cfg(preset: str | None) -> dict[str, Any]:
    """The facts of a published checkpoint (``preset``), or of another Poseidon checkpoint (None)."""
    cfg: dict[str, Any] = {"in_timesteps": 1, "resolution": [128, 128], "finetune_lr": 5e-5,
                           "finetune_lr_source": "upstream's fine-tuning config (" + at("configs/run.yaml") + ")"}
    if preset is None:
        return {**cfg, "normalization": "none: the network's inputs and outputs are in the normalized units of the "
                "data it was trained on (upstream normalizes in its data pipeline)"}
    return {**cfg, "channels": 4, "fields": list(FIELDS), "datasets": list(DATASETS),
            "normalization": (f"the pretraining constants, applied inside the model: (x - {list(FIELD_MEAN)}) / "
                              f"{list(FIELD_STD)} in, the inverse out"),
            "license": LICENSE}


def card_fields(variant: opzoo.Variant) -> dict[str, Any]:
    a = variant["args"]
    return {"size": variant["size"], "repo": hub_repo(variant["size"]), "embed": a["embed_dim"],
            "depths": list(a["depths"]), "params": f"{variant['params']:,}", "license": LICENSE}
