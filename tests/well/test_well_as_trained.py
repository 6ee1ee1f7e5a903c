"""The Well's checkpoints as they were trained: repo ids by the upload rule, FNO/TFNO as the_well 1.1.0
computed them, load checks on the real files (``opzoo verify``), eval mode, fields by name, shear_flow's grid.

Published-size repos are written by The Well's own ``save_pretrained`` (PyTorchModelHubMixin) into a Hugging
Face cache, so ``opzoo.load(preset, pretrained=True)`` runs its real path offline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import constants
from safetensors.torch import load_file, save_file

from .the_well_package import Trainer, well_models  # noqa: I001 (first: it skips the module without The Well)

warnings.filterwarnings("ignore", category=FutureWarning)
from the_well.data import WELL_DATASETS  # noqa: E402
from the_well.data.data_formatter import DefaultChannelsFirstFormatter  # noqa: E402
from the_well.data.normalization import ZScoreNormalization  # noqa: E402

import opzoo  # noqa: E402
from opzoo.cli import main as opzoo_main  # noqa: E402
from opzoo_well.datasets import STATS_DIR, dataset  # noqa: E402

from ..hub_cache import place_in_hf_cache, repo_files  # noqa: E402
from .well_files import write_well_file  # noqa: E402

WELL_1_1_0 = Path(sys.prefix) / "reference" / "the_well-1.1.0"  # `make install` puts the_well==1.1.0 here
SCRIPT_1_1_0 = Path(__file__).with_name("the_well_1_1_0.py")
# The Well's model classes, by the name opzoo's presets use for them (the test's own table)
WELL_CLASS = {"fno": "FNO", "tfno": "TFNO", "unet-classic": "UNetClassic", "unet-convnext": "UNetConvNext"}
PUBLISHED = {"fno": {"modes1": 16, "modes2": 16, "hidden_channels": 128},
             "tfno": {"modes1": 16, "modes2": 16, "hidden_channels": 128},
             "unet-classic": {"init_features": 48}}


def well_model(arch: str, name: str, resolution=None, seed: int = 0) -> torch.nn.Module:
    """The Well's model at its published config for dataset ``name`` (an init draw)."""
    d = dataset(name)
    torch.manual_seed(seed)
    return getattr(well_models, WELL_CLASS[arch])(
        dim_in=4 * len(d.channels) + len(d.constant_channels), dim_out=len(d.channels), n_spatial_dims=d.n_spatial_dims,
        spatial_resolution=tuple(resolution or d.resolution), **PUBLISHED[arch]).eval()


def use_cache(monkeypatch, cache: Path, repos: dict[str, Path]) -> None:
    """An offline Hugging Face cache holding ``repos`` (repo id -> a directory saved by The Well)."""
    for repo_id, directory in repos.items():
        place_in_hf_cache(cache, repo_id, repo_files(directory))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def fno_repos(tmp_path_factory) -> dict[str, Path]:
    """well-fno-shear_flow's repo as The Well would push it: blocks an init draw, the same scaled by 0.9, blocks
    trained (Adam with the blocks applied), and the init draw saved at the pre-2024-12 grid 128 x 256."""
    return make_fno_repos(tmp_path_factory.mktemp("fno-repos"))


def make_fno_repos(root: Path) -> dict[str, Path]:
    model = well_model("fno", "shear_flow")
    model.save_pretrained(root / "init")
    scaled = well_model("fno", "shear_flow")
    with torch.no_grad():
        for name, p in scaled.named_parameters():
            if "fno_blocks" in name:
                p.mul_(0.9)
    scaled.save_pretrained(root / "scaled")
    old_grid = well_model("fno", "shear_flow", resolution=(128, 256))
    old_grid.save_pretrained(root / "old-grid")
    trained = well_model("fno", "shear_flow").train()  # the_well 1.2.0's FNO applies its blocks
    opt = torch.optim.Adam(trained.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 16, 32, 64, generator=g), torch.randn(2, 4, 32, 64, generator=g)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.mse_loss(trained(x), y).backward()
        opt.step()
    trained.eval().save_pretrained(root / "trained")
    return {"init": root / "init", "scaled": root / "scaled", "trained": root / "trained", "old-grid": root / "old-grid"}


# ---- repo ids ------------------------------------------------------------------------------------
def test_repo_ids_follow_the_upload_scripts_rule():
    """scripts/huggingface/upload_model.py: ``polymathic-ai/{model.__class__.__name__}-{dataset_name}``, with the
    class from The Well's package and the dataset name from its own list."""
    registry = opzoo.get_registry()
    names = opzoo.list_models("well-*")
    assert len(names) == 58
    for name in names:
        arch = next(a for a in sorted(WELL_CLASS, key=len, reverse=True) if name.startswith(f"well-{a}-"))
        ds = name[len(f"well-{arch}-"):]
        assert ds in WELL_DATASETS, name
        cls = getattr(well_models, WELL_CLASS[arch])
        assert registry.preset(name).pretrained.repo_id == f"polymathic-ai/{cls.__name__}-{ds}", name


# ---- as trained: the_well 1.1.0 ----------------------------------------------------------------------
def run_the_well_1_1_0(cases: list[tuple[Path, str, str, dict]], tmp_path: Path) -> list[torch.Tensor]:
    """The Well 1.1.0's rollouts of ``cases`` (repo, dataset, class name, batch), in one process."""
    if not (WELL_1_1_0 / "the_well").is_dir():
        pytest.skip(f"the_well==1.1.0 is not installed in {WELL_1_1_0} (`make install` puts it there)")
    argv = []
    for i, (repo, name, cls_name, batch) in enumerate(cases):
        d = dataset(name)
        save_file({k: v.contiguous() for k, v in batch.items()}, tmp_path / f"batch{i}.safetensors")
        argv += [str(repo), str(STATS_DIR / f"{name}.yaml"), str(tmp_path / f"batch{i}.safetensors"),
                 str(tmp_path / f"out{i}.safetensors"), cls_name, ",".join(f.name for f in d.fields),
                 ",".join(f.name for f in d.constant_fields)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(WELL_1_1_0), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(SCRIPT_1_1_0), *argv], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert str(WELL_1_1_0) in done.stdout  # the 1.1.0 copy ran, not the installed 1.2.0
    return [load_file(tmp_path / f"out{i}.safetensors")["prediction"] for i in range(len(cases))]


def physical_batch(name: str, spatial: tuple[int, ...], steps: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """The Well's batch layout ``[B, T, *S, C]`` of physical fields (its stats' mean + std * noise)."""
    d = dataset(name)
    stats = yaml.safe_load((STATS_DIR / f"{name}.yaml").read_text())
    norm = ZScoreNormalization(stats, [f.name for f in d.fields], [f.name for f in d.constant_fields])
    g = torch.Generator().manual_seed(seed)
    mean, std = torch.as_tensor(norm.flattened_means["variable"]), torch.as_tensor(norm.flattened_stds["variable"])
    frames = mean + std * torch.randn(2, 4 + steps, *spatial, len(d.channels), generator=g, dtype=torch.float64)
    batch = {"input_fields": frames[:, :4].float(), "output_fields": frames[:, 4:].float()}
    if d.constant_channels:
        cm, cs = torch.as_tensor(norm.flattened_means["constant"]), torch.as_tensor(norm.flattened_stds["constant"])
        batch["constant_fields"] = (cm + cs * torch.randn(2, *spatial, len(d.constant_channels), generator=g,
                                                          dtype=torch.float64)).float()
    return batch


def opzoo_rollout(model, batch: dict, steps: int, dtype=torch.float32) -> torch.Tensor:
    """opzoo's rollout of The Well's batch, back in The Well's layout ``[B, T, *S, C_varying]``."""
    x = batch["input_fields"].movedim(1, -2)  # [B, *S, T, C]
    if "constant_fields" in batch:
        x = torch.cat([x, batch["constant_fields"].unsqueeze(-2).expand(*x.shape[:-1], -1)], dim=-1)
    nv = batch["input_fields"].shape[-1]
    with torch.no_grad():
        return model.to(dtype).rollout(x.to(dtype), steps)[..., :nv].movedim(-2, 1)


AS_TRAINED = [("fno", "shear_flow", (32, 64)), ("tfno", "acoustic_scattering_maze", (32, 32))]
# the_well 1.1.0's rollouts of the AS_TRAINED cases (seeded init draws and batches), recorded by
# `python -m tests.well.test_well_as_trained` in a process of its own; the slow test below reruns the_well 1.1.0
RECORDED = Path(__file__).with_name("data") / "the_well_1_1_0_as_trained.safetensors"


def as_trained_cases(root: Path, fno_repos: dict[str, Path]) -> list[tuple[Path, str, str, dict]]:
    """(a Hub repo at the published config, the dataset, The Well's class, a physical batch) per AS_TRAINED case."""
    cases = []
    for arch, name, spatial in AS_TRAINED:
        if arch == "fno":
            repo = fno_repos["init"]
        else:
            repo = root / f"{arch}-repo"
            well_model(arch, name).save_pretrained(repo)
        cases.append((repo, name, WELL_CLASS[arch], physical_batch(name, spatial, steps=3)))
    return cases


@pytest.fixture(scope="module")
def as_trained(tmp_path_factory, fno_repos) -> dict[str, tuple[Path, dict, torch.Tensor]]:
    """arch -> (the Hub repo at the published config, a physical batch, the_well 1.1.0's rollout of it, recorded)."""
    cases = as_trained_cases(tmp_path_factory.mktemp("as-trained"), fno_repos)
    recorded = load_file(RECORDED)
    return {arch: (repo, batch, recorded[arch]) for (arch, _, _), (repo, _, _, batch) in zip(AS_TRAINED, cases)}


@pytest.mark.slow
def test_the_recording_is_what_the_well_1_1_0_computes(tmp_path):
    live = run_the_well_1_1_0(as_trained_cases(tmp_path, make_fno_repos(tmp_path / "fno")), tmp_path)
    recorded = load_file(RECORDED)
    for (arch, _, _), prediction in zip(AS_TRAINED, live):
        scale = recorded[arch].abs().max().item()
        assert (prediction - recorded[arch]).abs().max().item() <= 1e-5 * scale, arch


@pytest.mark.slow
@pytest.mark.parametrize("arch,name", [(arch, name) for arch, name, _ in AS_TRAINED])
def test_published_fno_and_tfno_compute_what_the_well_1_1_0_computed(arch, name, tmp_path, monkeypatch, as_trained):
    """``opzoo.load(well-(t)fno-..., pretrained=True)`` of a Hub repo at the published config (blocks an init
    draw, as The Well's 1.1.0 training left them) passes the load checks and equals the_well 1.1.0's own
    rollout (from_pretrained, normalization, formatter) to float32 rounding; the blocks-applied network
    (1.2.0) is a different function on the same weights."""
    preset = f"well-{arch}-{name}"
    repo, batch, reference = as_trained[arch]  # reference: [B, T, *S, C]
    use_cache(monkeypatch, tmp_path / "hub", {f"polymathic-ai/{WELL_CLASS[arch]}-{name}": repo})
    model = opzoo.load(preset, pretrained=True)
    assert model.config.fourier_blocks == "dropped" and not model.training
    ours = opzoo_rollout(model, batch, 3)
    ours64 = opzoo_rollout(opzoo.load(preset, pretrained=True), batch, 3, torch.float64)
    scale = ours64.flatten(0, -2).std(0)

    def err(a: torch.Tensor) -> float:
        return ((a.double() - ours64).abs().flatten(0, -2).max(0).values / scale).max().item()

    rounding = err(ours)
    assert rounding < 1e-4, rounding
    assert err(reference) < max(20 * rounding, 1e-5), (err(reference), rounding)
    applied = opzoo.load(preset, pretrained=True, fourier_blocks="applied")
    assert err(opzoo_rollout(applied, batch, 3)) > 1e-2  # the test tells the two functions apart


# ---- load checks --------------------------------------------------------------------------------
def test_load_check_accepts_an_init_draw_scaled_by_0_9_and_refuses_trained_blocks(tmp_path, monkeypatch, fno_repos):
    use_cache(monkeypatch, tmp_path / "scaled", {"polymathic-ai/FNO-shear_flow": fno_repos["scaled"]})
    assert opzoo.load("well-fno-shear_flow", pretrained=True).config.fourier_blocks == "dropped"

    use_cache(monkeypatch, tmp_path / "trained", {"polymathic-ai/FNO-shear_flow": fno_repos["trained"]})
    with pytest.raises(opzoo.CheckFailed) as info:
        opzoo.load("well-fno-shear_flow", pretrained=True)
    message = str(info.value)
    assert "[Fourier blocks untrained]" in message and "x the init's" in message and "grew" in message
    assert "fourier_blocks='applied'" in message and "21e51f6" in message and "\n" not in message
    # the override the message names: blocks applied, no blocks check, the trained weights load
    model = opzoo.load("well-fno-shear_flow", pretrained=True, fourier_blocks="applied")
    trained = load_file(fno_repos["trained"] / "model.safetensors")
    torch.testing.assert_close(model.net.skips[0].weight, trained["model.fno_blocks.fno_skips.0.weight"])


def test_load_check_refuses_a_config_json_that_disagrees(tmp_path, monkeypatch, fno_repos):
    use_cache(monkeypatch, tmp_path / "hub", {"polymathic-ai/FNO-shear_flow": fno_repos["old-grid"]})
    with pytest.raises(opzoo.CheckFailed, match=r"spatial_resolution: config.json \[128, 256\], preset \[256, 512\]"):
        opzoo.load("well-fno-shear_flow", pretrained=True)


@pytest.mark.slow
def test_opzoo_verify_prints_a_table_of_every_check(tmp_path, monkeypatch, capsys, fno_repos):
    unet = tmp_path / "unet"
    well_model("unet-classic", "gray_scott_reaction_diffusion").save_pretrained(unet)
    use_cache(monkeypatch, tmp_path / "hub", {"polymathic-ai/FNO-shear_flow": fno_repos["init"],
                                              "polymathic-ai/UNetClassic-gray_scott_reaction_diffusion": unet})
    assert opzoo_main(["verify", "well-fno-shear_flow", "well-unet-classic-gray_scott*"]) == 0
    out = capsys.readouterr().out
    assert "preset" in out and "revision" in out and "0123456789ab" in out  # the cache's commit
    for check in ("weights fit the preset", "config.json agrees with the preset", "Fourier blocks untrained"):
        assert f"well-fno-shear_flow / {check}:" in out
    assert "5 passed, 0 failed, 0 not run" in out

    for case, words in (("trained", "Fourier blocks untrained"), ("old-grid", "config.json agrees with the preset")):
        use_cache(monkeypatch, tmp_path / case, {"polymathic-ai/FNO-shear_flow": fno_repos[case]})
        assert opzoo_main(["verify", "well-fno-shear_flow", "--json"]) == 1
        rows = json.loads(capsys.readouterr().out)
        failed = [r for r in rows if r["status"] == "FAILED"]
        assert [r["check"] for r in failed] == [words], case
        assert rows[0]["repo"] == "hf-hub:polymathic-ai/FNO-shear_flow"

    # offline, nothing cached: one line saying what verify needs
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    assert opzoo_main(["verify", "well-tfno-*"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "HF_HUB_OFFLINE=1 is set" in err and "none of the 15 preset(s)" in err


def _edited_repo(source: Path, where: Path, tensors=None, config=None) -> Path:
    """A copy of a saved The Well repo with its tensors and config.json edited."""
    from safetensors.torch import save_file

    where.mkdir(parents=True)
    sd = load_file(source / "model.safetensors")
    save_file(tensors(sd) if tensors else sd, where / "model.safetensors")
    doc = json.loads((source / "config.json").read_text())
    (where / "config.json").write_text(json.dumps(config(doc) if config else doc))
    return where


def test_verify_says_why_cached_files_do_not_convert(tmp_path, monkeypatch, capsys, fno_repos):
    """Issue 43: a converter error became a 'not run' row, and all rows 'not run' became "none of the 1 preset(s) has
    its files in the cache", while the files were there and opzoo.load printed the real reason."""
    cases = {
        "extra-tensor": (lambda sd: {**sd, "model.mystery": torch.zeros(3)}, None, "unexpected keys.*model.mystery"),
        "dim-in": (None, lambda doc: {**doc, "dim_in": doc["dim_in"] + 1}, "dim_in=.* but the weights have"),
    }
    for case, (tensors, config, words) in cases.items():
        repo = _edited_repo(fno_repos["init"], tmp_path / case, tensors, config)
        use_cache(monkeypatch, tmp_path / f"hub-{case}", {"polymathic-ai/FNO-shear_flow": repo})
        assert opzoo_main(["verify", "well-fno-shear_flow", "--json"]) == 1, case
        rows = json.loads(capsys.readouterr().out)
        assert [(r["check"], r["status"]) for r in rows] == [("the published files convert", "FAILED")], case
        assert re.search(words, rows[0]["message"]), rows[0]["message"]


def test_well_check_messages_name_what_is_wrong_and_what_works(tmp_path, monkeypatch, fno_repos):
    """A dense FNO missing one spectral weight was refused with KeyError 'net.spectral.3.core' (a Tucker name); the
    config refusal suggested an `opzoo convert` that fails without --option fourier_blocks; the blocks check said
    "never trained" for what it can only bound."""
    from opzoo.registry.provenance import PretrainedArtifacts
    from opzoo_well.converter import blocks_untrained, config_agrees

    with torch.device("meta"):
        model = opzoo.load("well-fno-shear_flow")
    converted = opzoo.convert_to_repo("the-well", fno_repos["init"], tmp_path / "converted", dataset="shear_flow",
                                      fourier_blocks="dropped")
    sd = dict(load_file(converted / "model.safetensors"))
    artifacts = PretrainedArtifacts("well-fno-shear_flow", {"config.json": fno_repos["init"] / "config.json"}, sd,
                                    model.config, None)
    assert "no training that moved them can be seen" in blocks_untrained(artifacts)
    del sd["net.spectral.3.weight"]
    with pytest.raises(opzoo.CheckFailed, match=r"lacks net\.spectral\.3\.weight \(Fourier block 3 of the dense FNO"):
        blocks_untrained(artifacts)
    old = PretrainedArtifacts("well-fno-shear_flow", {"config.json": fno_repos["old-grid"] / "config.json"}, sd,
                              model.config, None)
    with pytest.raises(opzoo.CheckFailed, match="--dataset shear_flow --option fourier_blocks=dropped`"):
        config_agrees(old)


def test_provenance_cites_the_card_template_and_the_stats_branch():
    facts = {f.topic: f for f in opzoo.get_registry().preset("well-fno-shear_flow").provenance}
    assert "scripts/huggingface/MODEL_CARD_TEMPLATE.md" in facts["input steps"].source
    assert "refs/pull/44/head" in facts["normalization stats"].value and "a86893c" in facts["normalization stats"].value


def test_verify_names_presets_without_weights_and_unknown_patterns(capsys):
    assert opzoo_main(["verify"]) == 2
    assert "--all" in capsys.readouterr().err
    assert opzoo_main(["verify", "fno-2d"]) == 2
    assert "publishes no weights" in capsys.readouterr().err
    assert opzoo_main(["verify", "nothing-*"]) == 2
    assert "no preset with published weights matches 'nothing-*'" in capsys.readouterr().err


# ---- eval mode ------------------------------------------------------------------------------------
def test_unet_classic_loaded_pretrained_gives_the_wells_output_at_once(tmp_path, monkeypatch):
    """BatchNorm with running statistics: the model comes back in eval mode, so ``model(x)`` right after the
    load is The Well's evaluation (and the call leaves the running statistics alone)."""
    name = "gray_scott_reaction_diffusion"
    well = well_model("unet-classic", name)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for key, b in well.named_buffers():
            if key.endswith("running_mean"):
                b.copy_(0.3 * torch.randn(b.shape, generator=g))
            elif key.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
    well.save_pretrained(tmp_path / "repo")
    use_cache(monkeypatch, tmp_path / "hub", {f"polymathic-ai/UNetClassic-{name}": tmp_path / "repo"})
    model = opzoo.load(f"well-unet-classic-{name}", pretrained=True)
    assert not model.training
    batch = physical_batch(name, (32, 32), steps=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ours = opzoo_rollout(model, batch, 1)
    stats = yaml.safe_load((STATS_DIR / f"{name}.yaml").read_text())
    trainer = types.SimpleNamespace(dset_norm=ZScoreNormalization(stats, ["A", "B"], []), is_delta=False,
                                    max_rollout_steps=1, device=torch.device("cpu"))
    trainer.normalize = types.MethodType(Trainer.normalize, trainer)
    trainer.denormalize = types.MethodType(Trainer.denormalize, trainer)
    with torch.no_grad():
        ref, _ = Trainer.rollout_model(trainer, well, dict(batch), DefaultChannelsFirstFormatter(
            types.SimpleNamespace(n_spatial_dims=2)), train=False)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4 * float(ref.std()))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert opzoo.load(f"well-unet-classic-{name}").training  # random init stays in training mode


# ---- data facts ------------------------------------------------------------------------------------
def test_shear_flow_is_256_by_512():
    with torch.device("meta"):
        model = opzoo.load("well-fno-shear_flow")
    assert model.config.resolution == [256, 512] and model.pretrained_cfg["resolution"] == [256, 512]
    assert dataset("shear_flow").resolution == (256, 512)


@pytest.mark.slow
def test_a_well_file_with_its_fields_in_another_order_gives_the_same_prediction(tmp_path, capsys):
    """eval and finetune read The Well's files by field name: a file storing the same data with every
    group's fields reversed scores and trains exactly as the canonical one; a missing field is refused."""
    import h5py

    from opzoo_well.architectures import model_args

    name, spatial = "acoustic_scattering_maze", (16, 32)
    torch.manual_seed(0)
    model = opzoo.create_model("well-unet-convnext", **model_args(
        "unet-convnext", name, 2, {"init_features": 4, "stages": 2})).eval()
    model.pretrained_cfg = {"fields": model.config.fields + model.config.constant_fields,
                            "time_varying_fields": model.config.fields, "resolution": list(spatial)}
    model.save_pretrained(tmp_path / "model")
    canonical = write_well_file(tmp_path / "a" / "data.hdf5", name, spatial, n_traj=4, n_steps=6)
    reversed_ = write_well_file(tmp_path / "b" / "data.hdf5", name, spatial, n_traj=4, n_steps=6, reverse_fields=True)
    with h5py.File(canonical) as f, h5py.File(reversed_) as g:
        assert list(f["t0_fields"].attrs["field_names"]) != list(g["t0_fields"].attrs["field_names"])
    results = []
    for i, path in enumerate((canonical, reversed_)):
        assert opzoo_main(["eval", str(tmp_path / "model"), "--data", str(path), "--out", str(tmp_path / f"e{i}"),
                           "--plot-steps", "1"]) == 0
        results.append(json.loads((tmp_path / f"e{i}" / "eval.json").read_text())["datasets"]["data"])
        assert opzoo_main(["finetune", str(tmp_path / "model"), "--data", str(path), "--steps", "2", "--batch-size",
                           "2", "--test-fraction", "0.5", "--out", str(tmp_path / f"f{i}"), "--set",
                           "evaluation.plots=false"]) == 0
    assert results[0]["vrmse"] == results[1]["vrmse"] and results[0]["l2_full"] == results[1]["l2_full"]
    tuned = [load_file(tmp_path / f"f{i}" / "model" / "model.safetensors") for i in range(2)]
    for k in tuned[0]:
        assert torch.equal(tuned[0][k], tuned[1][k]), k
    capsys.readouterr()
    missing = write_well_file(tmp_path / "c" / "data.hdf5", name, spatial, n_traj=4, n_steps=6, reverse_fields=True)
    with h5py.File(missing, "a") as g:
        del g["t1_fields/velocity"]
        g["t1_fields"].attrs["field_names"] = []
    assert opzoo_main(["eval", str(tmp_path / "model"), "--data", str(missing), "--out", str(tmp_path / "e2")]) == 2
    err = capsys.readouterr().err
    assert "lacking velocity_x, velocity_y, which nothing fills" in err and "--field-map FILE=MODEL" in err


# ---- the converter ---------------------------------------------------------------------------------
def test_converter_asks_which_code_trained_an_fno_and_keeps_its_grid(tmp_path, capsys, fno_repos):
    out = tmp_path / "out"
    assert opzoo_main(["convert", "the-well", str(fno_repos["old-grid"]), str(out), "--dataset", "shear_flow"]) == 2
    err = capsys.readouterr().err
    assert "fourier_blocks=dropped" in err and "fourier_blocks=applied" in err and not out.exists()
    assert opzoo_main(["convert", "the-well", str(fno_repos["old-grid"]), str(out), "--dataset", "shear_flow",
                       "--option", "fourier_blocks=dropped"]) == 0
    model = opzoo.load(str(out))
    assert model.config.resolution == [128, 256] and model.pretrained_cfg["resolution"] == [128, 256]
    assert model.config.fourier_blocks == "dropped" and "A pointwise map" in (out / "README.md").read_text()


# ---- comparable numbers ----------------------------------------------------------------------------
def wells_test_dataloader(dataset, batch_size: int):
    """The DataLoader The Well's own ``WellDataModule.test_dataloader`` (the installed the_well) builds for
    ``dataset`` on one process: its settings, not a copy of them."""
    from the_well.data.datamodule import WellDataModule

    module = WellDataModule.__new__(WellDataModule)
    module.test_dataset, module.batch_size, module.data_workers, module.world_size, module.rank = \
        dataset, batch_size, 0, 1, 0
    return module.test_dataloader()


def test_the_wells_test_dataloader_drops_the_short_last_batch_at_every_version():
    """drop_last=True in WellDataModule.test_dataloader: the installed the_well's DataLoader, and the source of the
    1.1.0 copy that trained the FNO/TFNO checkpoints (v1.0.1, v1.2.0 and the head say the same)."""
    import ast

    assert wells_test_dataloader(list(range(7)), 3).drop_last is True
    source = (WELL_1_1_0 / "the_well" / "data" / "datamodule.py")
    if not source.is_file():
        pytest.skip(f"the_well 1.1.0 is not in {WELL_1_1_0} (`make install` puts it there)")
    tree = ast.parse(source.read_text())
    methods = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "test_dataloader"]
    loader = next(n for m in methods for n in ast.walk(m)  # WellDataModule's (the abstract one builds none)
                  if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "DataLoader")
    kwargs = {k.arg: k.value for k in loader.keywords}
    assert isinstance(kwargs["drop_last"], ast.Constant) and kwargs["drop_last"].value is True
    assert isinstance(kwargs["shuffle"], ast.Constant) and kwargs["shuffle"].value is False


def test_eval_every_window_is_the_wells_test_score(tmp_path, capsys):
    """``opzoo eval --windows all`` against The Well's own test loop: WellDataset over the test directory
    (every window, files in order), the DataLoader of The Well's own ``WellDataModule.test_dataloader`` (no
    shuffling, ``drop_last=True``) at the model's test batch size, ``Trainer.rollout_model(train=False)``, VRMSE per
    batch mean then the mean over batches: the short last batch is not scored (issue 43: opzoo averaged it too)."""
    from the_well.benchmark.metrics import VRMSE
    from the_well.data.datasets import WellDataset

    name, spatial, t_in, batch = "acoustic_scattering_maze", (16, 32), 2, 3
    d = dataset(name)
    torch.manual_seed(0)
    well = well_models.UNetConvNext(dim_in=t_in * 3 + 2, dim_out=3, n_spatial_dims=2, spatial_resolution=spatial,
                                    init_features=4, stages=2, blocks_per_stage=1).eval()
    well.save_pretrained(tmp_path / "hub-repo")
    assert opzoo_main(["convert", "the-well", str(tmp_path / "hub-repo"), str(tmp_path / "model"), "--dataset", name]) == 0
    converted = opzoo.load(f"local-dir:{tmp_path / 'model'}")
    converted.pretrained_cfg.update(test_batch_size=batch, test_protocol="The Well's test (for this test)")
    converted.save_pretrained(tmp_path / "model")  # re-saved: the weights' metadata binds the pretrained_cfg
    files = [write_well_file(tmp_path / "test" / f"part{i}.hdf5", name, spatial, n_traj=2, n_steps=6, seed=i)
             for i in range(2)]

    ds = WellDataset(path=str(tmp_path / "test"), normalization_path=str(STATS_DIR / f"{name}.yaml"),
                     n_steps_input=t_in, n_steps_output=1, boundary_return_type=None, return_grid=False,
                     use_normalization=False)
    assert len(ds) == 16  # 2 files x 2 trajectories x (6 - 2) windows: the last batch of 3 holds one
    stats = yaml.safe_load((STATS_DIR / f"{name}.yaml").read_text())
    trainer = types.SimpleNamespace(dset_norm=ZScoreNormalization(stats, ds.core_field_names, ds.core_constant_field_names),
                                    is_delta=False, max_rollout_steps=1, device=torch.device("cpu"))
    trainer.normalize = types.MethodType(Trainer.normalize, trainer)
    trainer.denormalize = types.MethodType(Trainer.denormalize, trainer)
    loader = wells_test_dataloader(ds, batch)
    assert len(loader) == 5  # 16 windows in batches of 3: the 16th is dropped
    total = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for b in loader:
            pred, ref = Trainer.rollout_model(trainer, well, b, DefaultChannelsFirstFormatter(ds.metadata), train=False)
            total += VRMSE.eval(pred, ref, ds.metadata).mean(0).mean(0).double() / len(loader)  # [C]

    assert opzoo_main(["eval", str(tmp_path / "model"), "--data", *map(str, files), "--windows", "all",
                       "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "16 windows" in out and "batch size 3, the model pretrained_cfg.test_batch_size" in out
    assert "short last batch of 1 window(s) left out" in out
    assert "this is The Well's test (for this test)" in out
    result = json.loads((tmp_path / "out" / "eval_windows.json").read_text())
    ours = torch.tensor([result["vrmse"][c] for c in d.channels], dtype=torch.float64)
    torch.testing.assert_close(ours, total, rtol=1e-4, atol=0)
    assert result["vrmse"]["full"] == pytest.approx(float(total.mean()), rel=1e-4)
    assert result["dropped_windows"] == 1 and result["upstream_protocol"] == "The Well's test (for this test)"
    # fewer windows than a batch: The Well scores nothing, and so does opzoo, saying why
    assert opzoo_main(["eval", str(tmp_path / "model"), "--data", str(files[0]), "--windows", "all", "--batch-size",
                       "9", "--out", str(tmp_path / "few")]) == 2
    err = capsys.readouterr().err
    assert "8 window(s), fewer than one batch of 9" in err and "scores nothing" in err and "\n" not in err.strip()
    # The Well skips no trajectory: the flag the NaN message used to advise is refused with this protocol
    assert opzoo_main(["eval", str(tmp_path / "model"), "--data", str(files[0]), "--windows", "all",
                       "--skip-bad-trajectories", "--out", str(tmp_path / "skip")]) == 2
    assert "does not apply with --windows all" in capsys.readouterr().err
    # at another grid than the files', the score is said not to be The Well's
    assert opzoo_main(["eval", str(tmp_path / "model"), "--data", *map(str, files), "--windows", "all",
                       "--resolution", "32", "64", "--out", str(tmp_path / "resampled")]) == 0
    out = capsys.readouterr().out
    assert "grid: the model runs at 32x64 (--resolution)" in out and "the file's own grid (16x32)" in out
    assert "not The Well's test" in out
    assert json.loads((tmp_path / "resampled" / "eval_windows.json").read_text())["upstream_protocol"] is None


if __name__ == "__main__":  # python -m tests.well.test_well_as_trained: record the_well 1.1.0's rollouts
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        live = run_the_well_1_1_0(as_trained_cases(Path(tmp), make_fno_repos(Path(tmp) / "fno")), Path(tmp))
    RECORDED.parent.mkdir(exist_ok=True)
    save_file({arch: p.contiguous() for (arch, _, _), p in zip(AS_TRAINED, live)}, str(RECORDED))
    print(f"wrote {RECORDED}")
