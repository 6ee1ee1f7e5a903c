"""Every family's data contract (docs/data-contract.md), on the four files of the conformance test: one field; three
fields with names no family knows; 40 x 56 with a Dirichlet boundary; 1-D.

Each family either fits the file (and says each decision in one block: fields, channels, grid, boundary,
normalization) or refuses in one line naming the flag or command that fits it. The default tier runs the one fit on
small models (fine-tuning's decisions and evaluation's); the slow tier fine-tunes 2 steps through `opzoo finetune`
with stand-in weights written in each upstream's own format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import opzoo
from opzoo.evaluation.fit import contract_of, derived_contract, fit_data, open_trajectories

from .contract_files import contract_files
from .small_presets import small_model

# a preset of every family (and of every backbone a preset without a family uses)
REPRESENTATIVES = ["dpot-micro", "aot-pot-micro", "nestor-ti", "fno-2d", "simple-op", "well-fno-shear_flow",
                   "well-unet-convnext-shear_flow", "pdet-mc-s", "pdet-sc-s", "morph-ti", "gphyt-s", "poseidon-t",
                   "mpp-avit-ti"]
DECISIONS = ("fields", "channels", "grid", "boundary", "normalization")
KINDS = ("one-field", "three-unknown-fields", "40x56-dirichlet", "1-d")
# what each family does with each file when fine-tuning (a fit, or a refusal naming what fits): a change here is a
# change of a family's contract, to be said in docs/data-contract.md
FINETUNE = {
    "dpot-micro": ("pad", "adapt", "pad", "refuse"),
    "aot-pot-micro": ("pad", "adapt", "pad", "refuse"),
    "nestor-ti": ("pad", "pad", "pad", "refuse"),  # DPOT's 4 channels
    "fno-2d": ("own", "adapt", "own", "refuse"),
    "simple-op": ("own", "refuse", "own", "refuse"),
    "well-fno-shear_flow": ("refuse", "refuse", "refuse", "refuse"),
    "well-unet-convnext-shear_flow": ("refuse", "refuse", "refuse", "refuse"),
    "pdet-mc-s": ("pad", "adapt", "pad", "refuse"),
    "pdet-sc-s": ("any", "any", "any", "refuse"),
    "morph-ti": ("own", "any", "own", "own"),
    "gphyt-s": ("adapt", "adapt", "adapt", "refuse"),
    "poseidon-t": ("adapt", "adapt", "adapt", "refuse"),
    "mpp-avit-ti": ("own", "adapt", "own", "refuse"),  # a new field takes an unused slot (two), then gains one
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return contract_files(tmp_path_factory.mktemp("contract"))


def test_every_family_and_backbone_declares_its_contract():
    registry = opzoo.get_registry()
    for family in registry.families():  # the family's own, or its backbone's (dpot and aot-pot: the POT's)
        table = registry.family(family)
        assert registry.contract(table.backbone, table.variants[0].name) is not None, family
    for name in REPRESENTATIVES:
        model = small_model(name)
        model.preset_name = name
        contract = contract_of(model)
        assert contract.name != derived_contract(model).name, f"{name}: no declared contract"
        assert contract.normalization.words and contract.boundary and contract.grid
    for backbone in registry.names("backbone"):
        assert registry.contract(backbone) is not None, f"backbone {backbone!r} declares no data contract"


def outcome(fitted) -> str:
    channels = next(line for line in fitted.lines if line.startswith("channels"))
    if "adapted" in channels or "replace them" in " ".join(fitted.lines):
        return "adapt"
    if "padded" in channels:
        return "pad"
    if "takes any number" in channels:
        return "any"
    return "own"


@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_each_family_fits_each_file_or_refuses_in_one_line_naming_what_fits(name, files):
    for kind, expected in zip(KINDS, FINETUNE[name]):
        for train in (True, False):
            model = small_model(name)
            model.preset_name = name
            src = open_trajectories(str(files[kind]))
            try:
                fitted = fit_data(model, [src], train=train)
            except opzoo.ConfigError as e:
                text = str(e)
                assert "\n" not in text and str(files[kind]) in text, text
                assert "--" in text or "opzoo finetune" in text, f"{name} on {kind}: names no flag: {text}"
                got = "refuse"
            else:
                heads = [line.split(":")[0].split(" (")[0] for line in fitted.lines]
                assert all(d in heads for d in DECISIONS), (name, kind, fitted.lines)
                got = outcome(fitted)
                assert fitted.frame_shape.channels == fitted.model.config.in_channels
            if train:
                assert got == expected, f"{name} fine-tuned on {kind}: {got}, the contract table says {expected}"
            elif name == "mpp-avit-ti":  # evaluation gives no field a slot: a field of none is refused
                assert got == "refuse", (name, kind, got)
            else:  # evaluation adapts no weights: a fit that needs new channel-shaped tensors is refused
                assert got in ({"adapt": "refuse"}.get(expected, expected), "any"), (name, kind, got)


def test_the_fit_block_is_the_same_in_every_command_that_takes_data(files, capsys):
    """eval, rollout, validate and fit print one block, in the same words (finetune's adds its adaptations)."""
    from opzoo.cli import main

    path = str(files["40x56-dirichlet"])
    blocks = {}
    for argv in (["fit", "dpot-micro", "--data", path],
                 ["eval", "dpot-micro", "--data", path, "--out", str(files["one-field"].parent / "e"), "--horizon",
                  "2"],
                 ["rollout", "dpot-micro", "--data", path, "--steps", "2"],
                 ["validate", "dpot-micro", "--data", path, "--out", str(files["one-field"].parent / "v.csv"),
                  "--horizon", "2"]):
        assert main(argv) == 0, argv
        out = capsys.readouterr().out.splitlines()
        start = next(i for i, line in enumerate(out) if line.startswith("fit of dpot-micro"))
        blocks[argv[0]] = out[start:start + 6]
    assert len({tuple(b) for b in blocks.values()}) == 1, blocks
    block = "\n".join(blocks["fit"])
    assert "padded with 1" in block and "refilled with 1 in a rollout" in block
    assert "--resolution 40 56 runs it at the file's own" in block  # said where the file is squashed to 32 x 32
    assert "boundary: the files state dirichlet; dpot-micro assumes periodic" in block


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dpot-micro", "aot-pot-micro", "gphyt-s", "poseidon-t", "morph-ti", "pdet-mc-s",
                                  "pdet-sc-s", "well-fno-shear_flow"])
def test_finetune_two_steps_with_stand_in_weights_on_the_four_files(name, files, monkeypatch, tmp_path, capsys):
    """`opzoo finetune` from the family's weights, written in its upstream's own format (the Hub cache stands in for the
    network): 2 steps and the fit block, or one line naming what fits."""
    from opzoo.cli import main

    from .stand_ins import place_stand_in

    sets = place_stand_in(name, monkeypatch, tmp_path / "hub")
    for kind, expected in zip(KINDS, FINETUNE[name]):
        argv = ["finetune", name, "--data", str(files[kind]), "--out", str(tmp_path / kind), "--steps", "2",
                "--batch-size", "2", "--test-fraction", "0.34", "--set", "evaluation.plots=false",
                "data.horizon=2", *(f"model.args.{k}={json.dumps(v)}" for k, v in sets.items())]
        code = main(argv)
        captured = capsys.readouterr()
        if expected == "refuse":
            assert code == 2 and len(captured.err.strip().splitlines()) == 1, (name, kind, captured.err)
            assert "--" in captured.err or "opzoo finetune" in captured.err, (name, kind, captured.err)
            continue
        assert code == 0, (name, kind, captured.err[-2000:])
        for decision in DECISIONS:
            assert f"  {decision}" in captured.out, (name, kind, decision)
        saved = json.loads((tmp_path / kind / "model" / "config.json").read_text())["pretrained_cfg"]
        assert saved["data_fit"] and saved["fields"], (name, kind)
        assert "## How the data was fitted to the model" in (tmp_path / kind / "model" / "README.md").read_text()
        with torch.no_grad():
            assert not opzoo.load(str(tmp_path / kind / "model")).training
