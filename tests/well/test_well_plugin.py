"""opzoo-well without The Well's package: presets, physical-units wrapper, offline message, cards,
VRMSE in ``opzoo eval`` on a file in The Well's layout."""

from __future__ import annotations

import json

import pytest
import torch
from huggingface_hub import constants

import opzoo
from opzoo.cli import main as opzoo_main
from opzoo.evaluation.vrmse import vrmse, vrmse_summary
from opzoo_well.architectures import hub_repo, model_args, preset_name
from opzoo_well.datasets import DATASETS, dataset, normalization_args
from opzoo_well.family import checkpoints
from opzoo_well.provenance import card_text

from .well_files import write_well_file


def test_every_published_checkpoint_is_a_preset(capsys):
    assert opzoo_main(["list", "well-*"]) == 0
    listed = capsys.readouterr().out.split()
    expected = sorted(preset_name(a, d) for a, d in checkpoints())
    assert sorted(n for n in listed if n.startswith("well-")) == expected
    assert len(expected) == 58  # 15 FNO + 15 TFNO + 14 U-Net + 14 CNextU-Net (no U-Nets on post_neutron_star_merger)
    assert "well-fno-shear_flow" in listed and "well-unet-convnext-active_matter" in listed
    src = opzoo.get_registry().preset("well-fno-shear_flow").pretrained
    assert (src.repo_id, src.filename, src.converter, dict(src.converter_options), src.extra_files) == (
        "polymathic-ai/FNO-shear_flow", "model.safetensors", "the-well",
        {"dataset": "shear_flow", "fourier_blocks": "dropped"}, ("config.json",))
    # the ids the Hub pages of UNetClassic-active_matter and UNetConvNext-viscoelastic_instability show
    assert hub_repo("unet-convnext", "viscoelastic_instability") == "polymathic-ai/UNetConvNext-viscoelastic_instability"
    assert hub_repo("unet-classic", "active_matter") == "polymathic-ai/UNetClassic-active_matter"
    assert hub_repo("tfno", "acoustic_scattering_maze") == "polymathic-ai/TFNO-acoustic_scattering_maze"


def neuralop_fno_parameters(dim_in: int, dim_out: int, n_dims: int, modes: int = 16, hidden: int = 128) -> int:
    """neuraloperator 0.3.0 FNO's parameter count, by hand: lifting MLP (dim_in -> 256 -> hidden), 4 layers
    of a complex [hidden, hidden, modes^(d-1), modes/2+1] weight (2 reals each), a bias and a 1x1 skip,
    projection MLP (hidden -> 256 -> dim_out)."""
    spectral = hidden * hidden * modes ** (n_dims - 1) * (modes // 2 + 1) * 2
    layer = spectral + hidden + hidden * hidden
    return (dim_in * 256 + 256) + (256 * hidden + hidden) + 4 * layer + (hidden * 256 + 256) + (256 * dim_out + dim_out)


def test_presets_build_on_meta_with_the_published_sizes():
    for arch, ds in checkpoints():
        with torch.device("meta"):
            model = opzoo.load(preset_name(arch, ds))
        d = dataset(ds)
        c = model.config
        assert c.dim_in == 4 * len(d.channels) + len(d.constant_channels) and c.dim_out == len(d.channels)
        assert model.pretrained_cfg["fields"] == d.channels + d.constant_channels
        if arch == "fno":
            n = sum(p.numel() for p in model.parameters())
            assert n == neuralop_fno_parameters(c.dim_in, c.dim_out, d.n_spatial_dims), ds
    # The Well's own count for FNO on shear_flow (its README config), computed once by the_well 1.2.0
    with torch.device("meta"):
        assert sum(p.numel() for p in opzoo.load("well-fno-shear_flow").parameters()) == 19_011_716


def test_stats_are_flattened_in_the_wells_channel_order():
    args = normalization_args("active_matter")
    assert dataset("active_matter").channels == ["concentration", "velocity_x", "velocity_y", "D_xx", "D_xy", "D_yx",
                                                 "D_yy", "E_xx", "E_xy", "E_yx", "E_yy"]
    assert args["mean"][0] == 0.9999999892851011 and args["mean"][3:7] == [
        0.5018405407250873, -0.0062219885900007986, -0.0062219885900007986, 0.4981594485653477]
    sm = normalization_args("acoustic_scattering_maze")
    assert sm["constant_mean"] == [575388.14137268, 0.4914537656565524]
    for name in DATASETS:  # every shipped stats file covers its dataset
        assert len(normalization_args(name)["std"]) == len(dataset(name).channels)


def small_model(arch="unet-convnext", name="acoustic_scattering_maze", **extra):
    arch_args = {"init_features": 4, "stages": 2} if arch == "unet-convnext" else {}
    args = model_args(arch, name, 2, {**arch_args, **extra})
    return opzoo.create_model(f"well-{arch}", **args).eval()


def test_physical_units_in_and_out_and_rollout():
    torch.manual_seed(0)
    model = small_model()
    d = dataset("acoustic_scattering_maze")
    nv = len(d.channels)
    x = torch.randn(2, 16, 8, 2, model.config.in_channels)
    x[..., nv:] = x[..., -1:, nv:]  # constants do not change in time
    y = model(x)
    assert y.shape == (2, 16, 8, 1, 5)
    torch.testing.assert_close(y[..., nv:], x[..., -1:, nv:])
    # the output is in physical units: an untrained net predicts ~ the dataset's mean, not ~0
    mean = torch.tensor(normalization_args("acoustic_scattering_maze")["mean"])
    std = torch.tensor(normalization_args("acoustic_scattering_maze")["std"])
    assert ((y[..., :nv] - mean).abs() / std).mean() < 20
    traj = model.rollout(x, 4)
    assert traj.shape == (2, 16, 8, 4, 5)
    torch.testing.assert_close(traj[..., :1, :], y)
    with pytest.raises(ValueError, match=r"T_in=2, C=5\] with channels \(pressure, velocity_x"):
        model(x[..., :4])


def test_offline_uncached_preset_says_which_file_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with torch.device("meta"), pytest.raises(opzoo.HubError) as info:
        opzoo.load("well-fno-shear_flow", pretrained=True)
    message = str(info.value)
    assert "\n" not in message
    assert "model.safetensors of polymathic-ai/FNO-shear_flow is not in the Hugging Face cache" in message
    assert "hf download polymathic-ai/FNO-shear_flow" in message


def test_cards_are_rendered_from_the_one_template():
    """Issue 44: one card template for The Well's 58 checkpoints, filled per row of their families' tables; nothing
    generated is committed in the plugin (the root model_cards/ is the one rendered copy)."""
    from importlib.resources import files

    assert sorted(p.name for p in (files("opzoo_well") / "model_cards").iterdir()) == ["well.md"]
    registry = opzoo.get_registry()
    for arch, ds in checkpoints():
        preset = registry.preset(preset_name(arch, ds))
        assert preset.family == f"well-{arch}" and "$" not in preset.card_template().replace("${name}", "").replace(
            "${architecture}", "").replace("${parameters}", "")
    reported = registry.family("well-tfno").variant("well-tfno-shear_flow")
    text = card_text("tfno", "shear_flow", reported=(reported["lr"], reported["epochs"], reported["vrmse"]))
    assert text == registry.preset("well-tfno-shear_flow").card_template()
    assert "**0.3626**" in text and "polymathic-ai/TFNO-shear_flow" in text and "license: unknown" in text
    assert "states no license" in text and "ohana2024well" in text and "Reported by The Well" in text
    assert "A pointwise map, not an FNO" in text and "pull/64" in text and "e430160" in text
    assert "issues/49" in card_text("unet-classic", "shear_flow", reported=("5E-4", 29, "0.836")) and "issues/49" not in text
    assert "**unverified**" in text and "06ac146" in text  # shear_flow's stats revisions disagree


def test_eval_reports_vrmse_per_field_next_to_l2_full(tmp_path, capsys):
    torch.manual_seed(0)
    model = small_model()
    model.pretrained_cfg = {"fields": model.config.fields + model.config.constant_fields,
                            "time_varying_fields": model.config.fields, "resolution": [16, 32]}
    model.save_pretrained(tmp_path / "model")
    data = write_well_file(tmp_path / "valid.hdf5", "acoustic_scattering_maze", (16, 32), n_traj=2, n_steps=6)
    assert opzoo_main(["eval", str(tmp_path / "model"), "--data", str(data), "--out", str(tmp_path / "out"),
                       "--plot-steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "l2 full" in out and "VRMSE pressure: one_step" in out and "VRMSE full:" in out
    result = json.loads((tmp_path / "out" / "eval.json").read_text())["datasets"]["valid"]
    assert set(result["vrmse"]) == {"pressure", "velocity_x", "velocity_y", "full"}
    # the same numbers from the metric directly, on the same rollout
    from opzoo.data import TrajectoryDataset

    src = TrajectoryDataset(str(data))
    src.select_channels(model.pretrained_cfg["fields"])
    frames = torch.stack([src.read(i) for i in range(2)])
    with torch.no_grad():
        pred = model.rollout(frames[..., :2, :], 4)
    per_step = vrmse(pred[..., :3], frames[..., 2:, :3]).mean(0)
    expected = vrmse_summary(per_step, ["pressure", "velocity_x", "velocity_y"])
    for field, values in expected.items():
        for k, v in values.items():
            assert result["vrmse"][field][k] == pytest.approx(v, rel=1e-5)


def test_vrmse_of_a_perfect_and_a_mean_prediction():
    y = torch.randn(2, 32, 32, 3, 2, dtype=torch.float64)
    assert vrmse(y, y).abs().max() == 0
    mean = y.mean(dim=(1, 2), keepdim=True).expand_as(y)
    n = 32 * 32  # predicting the spatial mean: sqrt(biased var / (unbiased var + eps)) = sqrt((n-1)/n)
    torch.testing.assert_close(vrmse(mean, y), torch.full((2, 3, 2), ((n - 1) / n) ** 0.5, dtype=torch.float64),
                               rtol=1e-6, atol=0)


def test_finetune_on_own_data_in_the_models_field_order(tmp_path, capsys):
    import h5py
    import numpy as np

    torch.manual_seed(0)
    model = small_model("fno", "gray_scott_reaction_diffusion", modes1=4, modes2=4, hidden_channels=4)
    model.pretrained_cfg = {"fields": ["A", "B"], "time_varying_fields": ["A", "B"], "resolution": [16, 16]}
    model.save_pretrained(tmp_path / "model")
    rng = np.random.default_rng(0)
    data = (0.5 + 0.1 * rng.standard_normal((4, 16, 16, 6, 2))).astype(np.float32)
    for name, order in (("ok.h5", ["A", "B"]), ("swapped.h5", ["B", "A"])):
        with h5py.File(tmp_path / name, "w") as f:  # opzoo's canonical layout: data [N, *S, T, C] + field names
            f.create_dataset("data", data=data)
            f.attrs["fields"] = order
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f.create_dataset("data", data=data)
        f.attrs["fields"] = ["A", "C"]
    run = ["finetune", str(tmp_path / "model"), "--steps", "2", "--batch-size", "2", "--test-fraction", "0.5", "--set",
           "evaluation.plots=false"]
    # fields are matched by name: another order is read in the model's order, a missing field is refused
    assert opzoo_main([*run, "--data", str(tmp_path / "swapped.h5"), "--out", str(tmp_path / "run0")]) == 0
    assert opzoo_main([*run, "--data", str(tmp_path / "other.h5"), "--out", str(tmp_path / "run2")]) == 2
    err = capsys.readouterr().err
    assert "reads A, B; the file has A, C (lacking B, which nothing fills)" in err and "--field-map" in err
    assert opzoo_main([*run, "--data", str(tmp_path / "ok.h5"), "--out", str(tmp_path / "run1")]) == 0
    tuned = opzoo.load(str(tmp_path / "run1" / "model"))
    assert tuned.config.fields == ["A", "B"] and tuned.config.mean == model.config.mean


def test_pretrained_cfg_is_typed_by_the_well_schema(tmp_path):
    """The facts a Well checkpoint records are declared (``WellPretrainedCfg``, a subclass of
    ``opzoo.PretrainedCfg``): every preset's pass; unknown keys, wrong types and time-varying fields
    that are not fields are refused, naming the file and key; a core backbone knows none of them."""
    from opzoo.model_io.pretrained_cfg import schema_of, validate_pretrained_cfg
    from opzoo_well import WellFNO, WellPretrainedCfg, WellUNetConvNext
    from opzoo_well.architectures import pretrained_cfg

    assert issubclass(WellPretrainedCfg, opzoo.PretrainedCfg)
    assert schema_of(WellFNO) is WellPretrainedCfg and schema_of(WellUNetConvNext) is WellPretrainedCfg
    registry = opzoo.get_registry()
    for name in opzoo.list_models("well-*"):
        preset = registry.preset(name)
        validate_pretrained_cfg(preset.pretrained_cfg, name, schema_of(registry.get("backbone", preset.backbone)))

    model = small_model()
    model.pretrained_cfg = pretrained_cfg("unet-convnext", "acoustic_scattering_maze", 2)
    repo = model.save_pretrained(tmp_path / "repo")
    assert opzoo.from_pretrained(repo).pretrained_cfg == model.pretrained_cfg
    config = repo / "config.json"
    good = json.loads(config.read_text())
    for bad, words in (({"colour": "red"}, "unknown field(s) 'colour'"),
                       ({"constant_fields": "maze"}, "pretrained_cfg.constant_fields: expected"),
                       ({"time_varying_fields": ["pressure", "speed"]},
                        "pretrained_cfg.time_varying_fields: ['speed'] are not in fields")):
        doc = json.loads(json.dumps(good))
        doc["pretrained_cfg"].update(bad)
        config.write_text(json.dumps(doc))
        with pytest.raises(opzoo.ConfigError) as info:
            opzoo.from_pretrained(repo)
        assert str(info.value).startswith(f"{config}: pretrained_cfg") and words in str(info.value)
    with pytest.raises(opzoo.ConfigError, match=r"unknown field\(s\) 'constant_fields', 'dataset', 'input_format', "
                                                r"'target' for PretrainedCfg"):
        validate_pretrained_cfg(good["pretrained_cfg"], "core", opzoo.PretrainedCfg)


def test_the_provenance_table_in_the_docs_is_current_and_every_row_has_a_source():
    """docs/the-well-provenance.md is rendered from the families' tables (python -m opzoo_well.family); every
    preset's rows are on it and in `opzoo info`, unverified facts list alternatives."""
    from pathlib import Path

    from opzoo_well.family import markdown_table
    from opzoo_well.provenance import STATS_ALTERNATIVES

    doc = Path(__file__).resolve().parents[2] / "docs" / "the-well-provenance.md"
    assert doc.read_text() == markdown_table(), "stale: python -m opzoo_well.family docs/the-well-provenance.md"
    registry = opzoo.get_registry()
    for name in opzoo.list_models("well-*"):
        facts = registry.preset(name).provenance
        topics = {f.topic for f in facts}
        assert {"Hub repo", "resolution", "fields, in order", "normalization stats", "weights license",
                "reported test VRMSE", "test protocol"} <= topics, name
        assert all(f.source and (f.verified or f.alternatives) for f in facts), name
    assert {"MHD_64", "planetswe", "shear_flow"} <= set(STATS_ALTERNATIVES)
    for ds in ("MHD_64", "planetswe", "shear_flow"):
        facts = registry.preset(f"well-fno-{ds}").provenance
        assert not next(f for f in facts if f.topic == "normalization stats").verified
    assert next(f for f in registry.preset("well-fno-active_matter").provenance
                if f.topic == "normalization stats").verified
