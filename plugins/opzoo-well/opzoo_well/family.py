"""Every checkpoint The Well publishes, one table per architecture: a row is a preset ``well-<arch>-<dataset>``, and
its Hub repo, weights source, load checks, provenance, ``pretrained_cfg``, reported result and card are derived from
it (``architectures``, ``provenance`` with the card, and the checks in ``converter``). Adding a published checkpoint is adding a row.

Rows: the model READMEs ``the_well/benchmark/models/{fno,tfno,unet_classic,unet_convnext}/README.md`` @ 671f66c
(dataset, learning rate, epochs, test VRMSE); datasets a README lists without results ("-") have no checkpoint and no
row. ``python -m opzoo_well.family docs/the-well-provenance.md`` renders every row's provenance; the plugin's
entry point is :data:`PLUGIN`."""

from __future__ import annotations

import sys
from importlib.resources import files
from pathlib import Path

import opzoo
from opzoo import Fact

from .architectures import AS_TRAINED, WEIGHTS_FILE, backbone_name, hub_repo, model_args, preset_name, pretrained_cfg
from .backbones import BACKBONES
from .converter import CONFIG_FILE, build_the_wells_model, checks_for, convert_the_well
from .datasets import DATASETS
from .provenance import CONTRACT, REPO, checkpoint_facts, dataset_facts, reported_result, variant_card_fields

CARD = files("opzoo_well") / "model_cards" / "well.md"


def family(arch: str, rows: tuple[tuple[str, str, int, str], ...]) -> opzoo.CheckpointFamily:
    """The family of ``arch``: one preset per ``(dataset, lr, epochs, test VRMSE)`` row."""
    for ds, *_ in rows:
        if ds not in DATASETS:
            raise opzoo.ConfigError(f"no layout for The Well dataset {ds!r}")
    variants = tuple(opzoo.Variant(
        preset_name(arch, ds), args=model_args(arch, ds), repo_id=hub_repo(arch, ds), weights=WEIGHTS_FILE,
        converter_options={"dataset": ds, **AS_TRAINED.get(arch, {})},
        data={"arch": arch, "dataset": ds, "lr": lr, "epochs": epochs, "vrmse": vrmse}) for ds, lr, epochs, vrmse in rows)
    return opzoo.CheckpointFamily(
        backbone_name(arch), backbone=backbone_name(arch), variants=variants, converter="the-well",
        extra_files=(CONFIG_FILE,), checks=checks_for(arch),
        provenance=lambda v: [*checkpoint_facts(v), *dataset_facts(v["dataset"])],
        results=lambda v: (reported_result(v),),
        pretrained_cfg=lambda v: pretrained_cfg(arch, v["dataset"], trained_lr=v["lr"]),
        card=CARD, card_fields=variant_card_fields, contract=CONTRACT)


FNO = family("fno", (
    # dataset                          lr      epochs  test VRMSE (the README's)
    ("acoustic_scattering_maze",        "1E-3",   27, "0.5033"),
    ("active_matter",                   "5E-3",  239, "0.3157"),
    ("convective_envelope_rsg",         "1E-4",   14, "0.0224"),
    ("gray_scott_reaction_diffusion",   "1E-3",   46, "0.2044"),
    ("helmholtz_staircase",             "5E-4",  132, "0.00160"),
    ("MHD_64",                          "5E-3",  170, "0.3352"),
    ("planetswe",                       "5E-4",   49, "0.0855"),
    ("post_neutron_star_merger",        "5E-4",  104, "0.4144"),
    ("rayleigh_benard",                 "1E-4",   32, "0.6049"),
    ("rayleigh_taylor_instability",     "5E-3",  177, "0.4013"),
    ("shear_flow",                      "1E-3",   24, "0.4450"),
    ("supernova_explosion_64",          "1E-4",   40, "0.3804"),
    ("turbulence_gravity_cooling",      "1E-4",   13, "0.2381"),
    ("turbulent_radiative_layer_2D",    "5E-3",  500, "0.4906"),
    ("viscoelastic_instability",        "5E-3",  205, "0.7195"),
))

TFNO = family("tfno", (
    # dataset                          lr      epochs  test VRMSE (the README's)
    ("acoustic_scattering_maze",        "1E-3",   27, "0.5034"),
    ("active_matter",                   "1E-3",  243, "0.3342"),
    ("convective_envelope_rsg",         "1E-3",   13, "0.0195"),
    ("gray_scott_reaction_diffusion",   "5E-3",   45, "0.1784"),
    ("helmholtz_staircase",             "5E-4",  131, "0.00031"),
    ("MHD_64",                          "1E-3",  155, "0.3347"),
    ("planetswe",                       "5E-4",   49, "0.1061"),
    ("post_neutron_star_merger",        "5E-4",   99, "0.4064"),
    ("rayleigh_benard",                 "1E-4",   31, "0.8568"),
    ("rayleigh_taylor_instability",     "1E-4",  175, "0.2251"),
    ("shear_flow",                      "1E-3",   24, "0.3626"),
    ("supernova_explosion_64",          "1E-4",   35, "0.3645"),
    ("turbulence_gravity_cooling",      "5E-4",   10, "0.2789"),
    ("turbulent_radiative_layer_2D",    "1E-3",  500, "0.4938"),
    ("viscoelastic_instability",        "5E-3",  199, "0.7021"),
))

UNET_CLASSIC = family("unet-classic", (
    # dataset                          lr      epochs  test VRMSE (the README's)
    ("acoustic_scattering_maze",        "1E-2",   26, "0.0395"),
    ("active_matter",                   "5E-3",  239, "0.2609"),
    ("convective_envelope_rsg",         "5E-4",   19, "0.0701"),
    ("gray_scott_reaction_diffusion",   "1E-2",   44, "0.5870"),
    ("helmholtz_staircase",             "1E-3",  120, "0.01655"),
    ("MHD_64",                          "5E-4",  165, "0.1988"),
    ("planetswe",                       "1E-2",   49, "0.3498"),
    ("rayleigh_benard",                 "1E-4",   29, "0.8448"),
    ("rayleigh_taylor_instability",     "5E-4",  193, "0.6140"),
    ("shear_flow",                      "5E-4",   29, "0.836"),
    ("supernova_explosion_64",          "5E-4",   46, "0.3242"),
    ("turbulence_gravity_cooling",      "1E-3",   14, "0.3152"),
    ("turbulent_radiative_layer_2D",    "5E-3",  500, "0.2394"),
    ("viscoelastic_instability",        "5E-4",  198, "0.3147"),
))

UNET_CONVNEXT = family("unet-convnext", (
    # dataset                          lr      epochs  test VRMSE (the README's)
    ("acoustic_scattering_maze",        "1E-3",   10, "0.0196"),
    ("active_matter",                   "5E-3",  156, "0.0953"),
    ("convective_envelope_rsg",         "1E-4",    5, "0.0663"),
    ("gray_scott_reaction_diffusion",   "1E-4",   15, "0.3596"),
    ("helmholtz_staircase",             "5E-4",   47, "0.00146"),
    ("MHD_64",                          "5E-3",   59, "0.1487"),
    ("planetswe",                       "1E-2",   18, "0.3268"),
    ("rayleigh_benard",                 "5E-4",   12, "0.4807"),
    ("rayleigh_taylor_instability",     "5E-3",   56, "0.3771"),
    ("shear_flow",                      "5E-4",    9, "0.3972"),
    ("supernova_explosion_64",          "5E-4",   13, "0.2801"),
    ("turbulence_gravity_cooling",      "1E-3",    3, "0.2093"),
    ("turbulent_radiative_layer_2D",    "5E-3",  495, "0.1247"),
    ("viscoelastic_instability",        "5E-4",  114, "0.1966"),
))

FAMILIES = (FNO, TFNO, UNET_CLASSIC, UNET_CONVNEXT)


def checkpoints() -> list[tuple[str, str]]:
    """Every published ``(arch, dataset)`` pair."""
    return [(v["arch"], v["dataset"]) for f in FAMILIES for v in f.variants]


PLUGIN = opzoo.kit.FamilyPlugin(*FAMILIES, backbones=BACKBONES, converters={"the-well": convert_the_well},
                                upstreams={f"the_well:{name}": (name, build_the_wells_model) for name in BACKBONES})


# ---- ``docs/the-well-provenance.md``: every dataset's and every published checkpoint's provenance rows, as one Markdown
# table (``python -m opzoo_well.family docs/the-well-provenance.md``; a test fails when it is out of date).
def markdown_table() -> str:
    """The whole provenance table, as docs/the-well-provenance.md shows it."""

    def row(subject: str, f: Fact) -> str:
        alt = "<br>".join(f.alternatives)
        cells = (subject, f.topic, f.value, f.status, f.source, alt)
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [
        "# The Well: where each fact comes from",
        "",
        "Generated by `python -m opzoo_well.family docs/the-well-provenance.md` from the checkpoint tables in",
        "`plugins/opzoo-well/opzoo_well/family.py` (a test fails when this file is out of date).",
        f"Sources are paths in {REPO} at a commit, read with `git log` / `git show`, or URLs.",
        "UNVERIFIED rows are facts the public record does not settle; their alternatives are listed, and",
        "where the files can tell, a load check (`opzoo verify`) tests the assumption on the real weights.",
        "",
        "| subject | fact | value | status | source | alternatives |",
        "|---|---|---|---|---|---|",
    ]
    for name in DATASETS:
        lines += [row(f"dataset {name}", f) for f in dataset_facts(name)]
    for f in FAMILIES:
        for v in f.variants:
            lines += [row(v.name, fact) for fact in checkpoint_facts(v)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/the-well-provenance.md")
    out.write_text(markdown_table())
    print(f"wrote {out}")
