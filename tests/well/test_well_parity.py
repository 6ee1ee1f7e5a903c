"""Parity with The Well's own code: its models, WellDataset, formatter, z-score normalization,
trainer rollout and VRMSE, against opzoo's well-* backbones after ``opzoo convert the-well``.

The reference is The Well's package (``the_well``, with neuraloperator 0.3.0), installed by
``make test`` through opzoo's ``test`` extra. Small dims, random weights; inputs are physical fields
(the dataset's mean + std * noise) so the normalization inside the model matters.
"""

from __future__ import annotations

import copy
import types
import warnings

import pytest
import torch
import yaml

from .the_well_package import VRMSE, Trainer, well_models  # noqa: I001 (first: it skips the module without The Well)

warnings.filterwarnings("ignore", category=FutureWarning)
from the_well.data.data_formatter import DefaultChannelsFirstFormatter  # noqa: E402
from the_well.data.datasets import WellDataset  # noqa: E402
from the_well.data.normalization import ZScoreNormalization  # noqa: E402

import opzoo  # noqa: E402
from opzoo.cli import main as opzoo_main  # noqa: E402
from opzoo.data import TrajectoryDataset  # noqa: E402
from opzoo.evaluation.vrmse import vrmse  # noqa: E402
from opzoo_well.converter import convert_the_well  # noqa: E402
from opzoo_well.datasets import STATS_DIR, dataset  # noqa: E402

from ..hub_cache import place_in_hf_cache, repo_files  # noqa: E402
from .well_files import write_well_file  # noqa: E402

T_IN, STEPS = 2, 3
CASES = {
    # arch: (The Well's class, small init args)
    "fno": ("FNO", {"modes1": 6, "modes2": 4, "modes3": 4, "hidden_channels": 8}),
    "tfno": ("TFNO", {"modes1": 6, "modes2": 4, "modes3": 4, "hidden_channels": 8}),
    "unet-classic": ("UNetClassic", {"init_features": 4}),
    "unet-convnext": ("UNetConvNext", {"init_features": 4, "stages": 2, "blocks_per_stage": 2}),
}
DIMS = {2: ("acoustic_scattering_maze", (16, 32)), 3: ("rayleigh_taylor_instability", (16, 16, 16))}


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights away from their init (layer scales, norms and BatchNorm statistics included)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g) * (p.detach().abs().mean() + 0.1))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))


def well_reference(data_dir, name: str, model: torch.nn.Module, n_traj: int, is_delta: bool = False):
    """The Well's evaluation path: WellDataset (raw), its Trainer.rollout_model(train=False) with
    ZScoreNormalization and DefaultChannelsFirstFormatter. Returns (prediction, target) ``[B, T, *S, C]``."""
    stats_path = str(STATS_DIR / f"{name}.yaml")
    ds = WellDataset(path=str(data_dir), normalization_path=stats_path, n_steps_input=T_IN, n_steps_output=STEPS,
                     boundary_return_type=None, return_grid=False, use_normalization=False)
    stats = yaml.safe_load((STATS_DIR / f"{name}.yaml").read_text())
    norm = ZScoreNormalization(stats, ds.core_field_names, ds.core_constant_field_names)
    batch = torch.utils.data.default_collate([ds[i] for i in range(n_traj)])
    trainer = types.SimpleNamespace(dset_norm=norm, is_delta=is_delta, max_rollout_steps=STEPS, device=torch.device("cpu"))
    trainer.normalize = types.MethodType(Trainer.normalize, trainer)
    trainer.denormalize = types.MethodType(Trainer.denormalize, trainer)
    with torch.no_grad():
        return Trainer.rollout_model(trainer, model, batch, DefaultChannelsFirstFormatter(ds.metadata), train=False)


@pytest.mark.slow
@pytest.mark.parametrize("n_dims", [2, 3])
@pytest.mark.parametrize("arch", list(CASES))
def test_converted_model_matches_the_wells_pipeline(arch, n_dims, tmp_path):
    name, spatial = DIMS[n_dims]
    check_parity(arch, name, spatial, CASES[arch][1], tmp_path)


@pytest.mark.parametrize("arch", ["fno", "tfno"])
def test_fno_parity_on_odd_grids_smaller_than_the_modes(arch, tmp_path):
    """neuraloperator 0.3.0's slicing when the grid keeps fewer frequencies than the weight has (the
    weight is cut), on odd sizes (where its second fftshift is not the inverse of the first)."""
    check_parity(arch, "acoustic_scattering_maze", (15, 9), {"modes1": 20, "modes2": 12, "hidden_channels": 8},
                 tmp_path)


def check_parity(arch: str, name: str, spatial: tuple[int, ...], init: dict, tmp_path) -> None:
    d = dataset(name)
    n_dims = len(spatial)
    cls_name = CASES[arch][0]
    torch.manual_seed(0)
    well = getattr(well_models, cls_name)(dim_in=T_IN * len(d.channels) + len(d.constant_channels),
                                          dim_out=len(d.channels), n_spatial_dims=n_dims,
                                          spatial_resolution=spatial, **init)
    randomize(well, seed=1)
    well.eval()
    well.save_pretrained(tmp_path / "hub-repo")  # PyTorchModelHubMixin: config.json + model.safetensors
    # the_well 1.2.0 (the test extra) applies the FNO blocks; test_well_as_trained.py covers 1.1.0's dropped ones
    blocks = ["--option", "fourier_blocks=applied"] if arch in ("fno", "tfno") else []
    assert opzoo_main(["convert", "the-well", str(tmp_path / "hub-repo"), str(tmp_path / "opzoo-repo"),
                       "--dataset", name, *blocks]) == 0
    card = (tmp_path / "opzoo-repo" / "README.md").read_text()
    assert "hub-repo" in card and "ohana2024well" in card and "BSD-3-Clause" in card
    assert f"T_in={T_IN}, C]" in card and f"with {T_IN} input steps" in card and "Published config" not in card
    model = opzoo.load(str(tmp_path / "opzoo-repo"))
    assert model.config.in_timesteps == T_IN and model.pretrained_cfg["time_varying_fields"] == d.channels

    data_file = write_well_file(tmp_path / "data" / "part.hdf5", name, spatial, n_traj=2, n_steps=T_IN + STEPS)
    ref_pred, ref_target = well_reference(tmp_path / "data", name, well, n_traj=2)  # [B, T, *S, C]

    src = TrajectoryDataset(str(data_file))
    src.select_channels(model.pretrained_cfg["fields"])  # opzoo's reader, channels by name
    frames = torch.stack([src.read(i) for i in range(2)])  # [B, *S, T, C], physical
    with torch.no_grad():
        pred = model.rollout(frames[..., :T_IN, :], STEPS)  # [B, *S, STEPS, C]
    nv = len(d.channels)
    ours = pred[..., :nv].movedim(-2, 1)  # -> The Well's [B, T, *S, C]
    torch.testing.assert_close(frames[..., T_IN:, :nv].movedim(-2, 1), ref_target, rtol=0, atol=0)
    # "float32 rounding", measured: opzoo's own float32 rollout against its float64 rollout sets the scale;
    # The Well's float32 path (opt_einsum, factorized Tucker contraction, normalize-then-denormalize of the
    # inputs) may differ from ours by a small multiple of it. Errors are in units of each field's spread.
    with torch.no_grad():
        pred64 = copy.deepcopy(model).double().rollout(frames[..., :T_IN, :].double(), STEPS)[..., :nv].movedim(-2, 1)
    scale = pred64.flatten(0, -2).std(0)

    def rel_err(a: torch.Tensor) -> float:
        return ((a.double() - pred64).abs().flatten(0, -2).max(0).values / scale).max().item()

    rounding = rel_err(ours)
    assert rounding < 1e-3, f"opzoo float32 vs float64: {rounding:.2e}"
    err = rel_err(ref_pred)
    assert err < max(20 * rounding, 1e-5), f"The Well vs opzoo (float64): {err:.2e} of a field's std; " \
                                           f"float32 rounding is {rounding:.2e}"
    # the constant fields ride along unchanged
    if d.constant_channels:
        torch.testing.assert_close(pred[..., nv:], frames[..., -1:, nv:].expand_as(pred[..., nv:]))


def test_vrmse_equals_the_wells_metric():
    torch.manual_seed(0)
    meta = types.SimpleNamespace(n_spatial_dims=2)
    target = torch.randn(3, 5, 12, 10, 4, dtype=torch.float64) * torch.tensor([1.0, 10.0, 1e-3, 0.0], dtype=torch.float64)
    pred = target + 0.1 * torch.randn_like(target)
    theirs = VRMSE.eval(pred, target, meta)  # [B, T, C]
    ours = vrmse(pred.movedim(1, -2), target.movedim(1, -2))  # opzoo layout [B, *S, T, C]
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=0)
    # float32 inputs: the same to float32 rounding
    torch.testing.assert_close(vrmse(pred.float().movedim(1, -2), target.float().movedim(1, -2)), theirs.float(),
                               rtol=1e-5, atol=0)


def test_meta_parameter_counts_and_names_match_the_published_models():
    """Every well-* preset on ``meta`` has the parameter count of The Well's model at the published
    config, and The Well's state dict names map onto it (shapes included)."""
    from opzoo.model_io.weights import check_state_dict
    from opzoo_well.architectures import ARCHITECTURES, N_STEPS_INPUT, preset_name
    from opzoo_well.converter import map_state_dict
    from opzoo_well.family import checkpoints

    assert len(checkpoints()) == 58
    for arch, ds in checkpoints():
        d = dataset(ds)
        with torch.device("meta"):
            ours = opzoo.load(preset_name(arch, ds))
            theirs = getattr(well_models, ARCHITECTURES[arch].well_class)(
                dim_in=N_STEPS_INPUT * len(d.channels) + len(d.constant_channels), dim_out=len(d.channels),
                n_spatial_dims=d.n_spatial_dims, spatial_resolution=d.resolution, **ARCHITECTURES[arch].args)
        assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters()), ds
        mapped = map_state_dict(theirs.state_dict(), arch, preset_name(arch, ds))
        check_state_dict(ours, {k: tuple(v.shape) for k, v in mapped.items()}, preset_name(arch, ds))


@pytest.mark.parametrize("factorization", ["dense", "tucker"])
def test_a_fresh_spectral_conv_is_drawn_as_neuraloperator_030_draws_it(factorization):
    """From scratch, every tensor of a Fourier block has the spread of neuraloperator 0.3.0's init (tensorly-torch's
    complex normal: each part at std/sqrt(2); a Tucker core and factors at its rank-scaled std). opzoo's drew each
    part at the full std (a dense weight sqrt(2) too wide) and a Tucker core and factors at the dense std."""
    from neuralop.layers.spectral_convolution import SpectralConv as TheirConv

    from opzoo_well.fno_net import SpectralConv

    torch.manual_seed(0)
    theirs = TheirConv(48, 48, n_modes=(16, 16), factorization=factorization.capitalize(), rank=1.0,
                       implementation="factorized", n_layers=1)
    ours = SpectralConv(48, 48, (16, 16), factorization=factorization)
    names = {"tensor": "weight", "core": "core", "factors.factor_0": "factors.0", "factors.factor_1": "factors.1",
             "factors.factor_2": "factors.2", "factors.factor_3": "factors.3"}
    mine = dict(ours.named_parameters())
    for name, p in theirs.weight[0].named_parameters():
        want, got = p.detach().std().item(), mine[names[name]].detach().std().item()
        tolerance = 5 / (2 * p.numel()) ** 0.5  # about 3.5 standard errors of the ratio of two samples' stds
        assert abs(got / want - 1) < tolerance, f"{factorization} {name}: std {got:.4g}, neuraloperator's {want:.4g}"
    wide = SpectralConv(8, 1024, (2, 2), factorization=factorization)  # the bias is real: at init_std, as theirs
    assert abs(wide.bias.std().item() / (2 / (8 + 1024)) ** 0.5 - 1) < 0.1


def test_tucker_rank_is_tensorlys():
    from tensorly.tucker_tensor import validate_tucker_rank

    from opzoo_well.fno_net import tucker_rank

    for shape in [(128, 128, 16, 9), (128, 128, 16, 16, 9), (8, 8, 6, 3), (8, 8, 6, 4, 3), (3, 5, 7)]:
        assert tucker_rank(shape, 1.0) == list(validate_tucker_rank(shape, rank=1.0)), shape
        assert tucker_rank(shape, 0.5) == list(validate_tucker_rank(shape, rank=0.5)), shape



def test_load_the_published_config_from_the_hub_cache_offline(tmp_path, monkeypatch):
    """``opzoo.load("well-fno-shear_flow", pretrained=True, fourier_blocks="applied")``: The Well's FNO at its
    published shear_flow config (19,011,716 parameters), saved by its own ``save_pretrained`` into the Hub
    cache, converted on load, and one step of physical fields equal to The Well 1.2.0's
    normalize-format-model-denormalize (blocks applied)."""
    from huggingface_hub import constants

    d = dataset("shear_flow")
    torch.manual_seed(0)
    well = well_models.FNO(dim_in=16, dim_out=4, n_spatial_dims=2, spatial_resolution=(256, 512), modes1=16,
                           modes2=16, hidden_channels=128).eval()
    well.save_pretrained(tmp_path / "repo")
    place_in_hf_cache(tmp_path / "hub", "polymathic-ai/FNO-shear_flow", repo_files(tmp_path / "repo"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    model = opzoo.load("well-fno-shear_flow", pretrained=True, fourier_blocks="applied")
    # the same repo converted on disk has the published config (config.json has modes3=16), but nothing shows
    # its weights are the published ones: the card claims no published VRMSE
    converted = convert_the_well(tmp_path / "repo", dataset="shear_flow", fourier_blocks="dropped")
    assert converted.preset == "well-fno-shear_flow" and "0.4450" not in converted.card
    assert "converted from a directory" in converted.card
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in well.parameters()) == 19_011_716

    stats = yaml.safe_load((STATS_DIR / "shear_flow.yaml").read_text())
    norm = ZScoreNormalization(stats, ["tracer", "pressure", "velocity"], [])
    mean, std = torch.tensor(norm.flattened_means["variable"]), torch.tensor(norm.flattened_stds["variable"])
    x = (mean + std * torch.randn(1, 4, 32, 64, 4, dtype=torch.float64)).float()  # [B, T, *S, C] physical
    batch = {"input_fields": x.clone(), "output_fields": x[:, :1].clone()}
    trainer = types.SimpleNamespace(dset_norm=norm, is_delta=False, max_rollout_steps=1, device=torch.device("cpu"))
    trainer.normalize = types.MethodType(Trainer.normalize, trainer)
    trainer.denormalize = types.MethodType(Trainer.denormalize, trainer)
    meta = types.SimpleNamespace(n_spatial_dims=2)
    with torch.no_grad():
        ref, _ = Trainer.rollout_model(trainer, well, batch, DefaultChannelsFirstFormatter(meta), train=False)
        ours = model(x.movedim(1, -2)).movedim(-2, 1)
    assert model.pretrained_cfg["fields"] == d.channels
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5 * float(std.min()))


def test_converter_refuses_what_it_cannot_place(tmp_path, capsys):
    well = well_models.UNetClassic(dim_in=14, dim_out=3, n_spatial_dims=2, spatial_resolution=(16, 16), init_features=2)
    well.save_pretrained(tmp_path / "repo")
    repo, out = str(tmp_path / "repo"), str(tmp_path / "out")

    def refused(*extra: str) -> str:
        assert opzoo_main(["convert", "the-well", repo, out, *extra]) != 0
        return capsys.readouterr().err

    assert "needs the data set the checkpoint was trained on" in refused()
    assert "dim_out=3, but The Well's shear_flow has 4 time-varying channels" in refused("--dataset", "shear_flow")
    assert "unknown The Well dataset 'shear_flo'" in refused("--dataset", "shear_flo").replace('"', "'")
    (tmp_path / "repo" / "config.json").unlink()
    assert "config.json is missing" in refused("--dataset", "acoustic_scattering_maze")
    assert not (tmp_path / "out").exists()
    # T_in is read from dim_in: 14 = 4 * 3 + 2 for acoustic_scattering_maze
    well.save_pretrained(tmp_path / "repo2")
    assert opzoo_main(["convert", "the-well", str(tmp_path / "repo2"), str(tmp_path / "out2"), "--dataset",
                       "acoustic_scattering_maze"]) == 0
    assert opzoo.load(str(tmp_path / "out2")).config.in_timesteps == 4


def test_delta_target_matches_the_wells_delta_rollout(tmp_path):
    """``target="delta"``: The Well's trainer with a DeltaWellDataset (``is_delta``) denormalizes the
    output with the delta stats and adds the last input frame; so does the backbone."""
    name, spatial = DIMS[2]
    d = dataset(name)
    torch.manual_seed(0)
    well = well_models.FNO(dim_in=T_IN * 3 + 2, dim_out=3, n_spatial_dims=2, spatial_resolution=spatial, modes1=6,
                           modes2=4, hidden_channels=8)
    randomize(well, seed=2)
    well.eval().save_pretrained(tmp_path / "hub-repo")
    assert opzoo_main(["convert", "the-well", str(tmp_path / "hub-repo"), str(tmp_path / "repo"), "--dataset", name,
                       "--option", "fourier_blocks=applied"]) == 0
    model = opzoo.load(str(tmp_path / "repo"), target="delta")
    data_file = write_well_file(tmp_path / "data" / "part.hdf5", name, spatial, n_traj=2, n_steps=T_IN + STEPS)
    ref_pred, _ = well_reference(tmp_path / "data", name, well, n_traj=2, is_delta=True)
    src = TrajectoryDataset(str(data_file))
    src.select_channels(model.pretrained_cfg["fields"])
    frames = torch.stack([src.read(i) for i in range(2)])
    with torch.no_grad():
        ours = model.rollout(frames[..., :T_IN, :], STEPS)[..., : len(d.channels)].movedim(-2, 1)
    scale = ref_pred.flatten(0, -2).std(0)
    assert ((ours - ref_pred).abs().flatten(0, -2).max(0).values / scale).max() < 1e-4
