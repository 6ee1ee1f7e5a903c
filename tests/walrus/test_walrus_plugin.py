"""opzoo-walrus: the physical-field wrapper by hand (slots, 2-D in 3-D, the RMS normalization and the change it
predicts), the converter on the files upstream writes, the grid and boundary rules, jitter, new fields, and the
published preset on the meta device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from opzoo_walrus.converter import convert_walrus, read_checkpoint
from opzoo_walrus.fields import FIELD_INDEX_MAP, inflated
from opzoo_walrus.network import PERIODIC, WALL, boundary_flags, kernels_for, pad_plan

import opzoo

from .record_reference import write_checkpoint
from .test_parity import DATA, SMALL, converted_model

TINY = dict(hidden=32, heads=2, depth=1, inner=8, groups=4, drop_path=0.0)


def tiny(seed: int = 0, **changes) -> torch.nn.Module:
    torch.manual_seed(seed)
    return opzoo.load("walrus", **{**TINY, **changes}).double().eval()


def history(shape, seed: int = 1) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---- the wrapper, by hand ------------------------------------------------------------------------------------------
def test_the_wrapper_is_the_network_between_upstreams_normalization_by_hand():
    """``[B, X, Y, T, C]`` with fields by name: velocity_z appended as zeros (2-D in 3-D), each field divided by its RMS
    over history and grid, the network's last change times the RMS of the frame-to-frame changes added to the last
    frame (loops over samples and channels, not the wrapper's code)."""
    fields = ("velocity_x", "density", "velocity_y")
    model = tiny(fields=fields, in_channels=3, out_channels=3, in_timesteps=3, jitter=False,
                 boundaries=("wall", "periodic"))
    x = history((2, 32, 128, 3, 3))
    with torch.no_grad():
        y = model(x)
    slots = [FIELD_INDEX_MAP.index(f) for f in (*fields, "velocity_z")]
    assert model.slots.tolist() == slots
    b, t = x.shape[0], x.shape[3]
    u = torch.zeros(t, b, 4, 32, 128, 1, dtype=torch.float64)
    for i in range(b):
        for c in range(3):
            u[:, i, c, :, :, 0] = x[i, :, :, :, c].permute(2, 0, 1)
    field_rms = torch.full((b, 4), 5e-6, dtype=torch.float64)
    change_rms = torch.full((b, 4), 5e-6, dtype=torch.float64)
    for i in range(b):
        for c in range(3):
            field_rms[i, c] = max(u[:, i, c].pow(2).mean().sqrt().item(), 5e-6)
            change_rms[i, c] = max((u[1:, i, c] - u[:-1, i, c]).pow(2).mean().sqrt().item(), 5e-6)
    with torch.no_grad():
        delta = model.net(u / field_rms[None, :, :, None, None, None], torch.tensor(slots),
                          [[WALL, WALL], [PERIODIC, PERIODIC], [PERIODIC, PERIODIC]])[-1]
    want = torch.empty_like(y)
    for i in range(b):
        for c in range(3):
            want[i, :, :, 0, c] = u[-1, i, c, :, :, 0] + delta[i, c, :, :, 0] * change_rms[i, c]
    assert (y - want).abs().max().item() <= 1e-12 * want.abs().max().item()


def test_a_field_constant_in_time_changes_by_no_more_than_the_floor():
    """Its RMS of changes is 0, raised to 5e-6 as upstream: the predicted next frame is the constant within that."""
    model = tiny(jitter=False)
    x = history((1, 32, 32, 6, 4))
    x[..., 1] = 3.0  # pressure constant in time and space
    with torch.no_grad():
        y = model(x)
    assert torch.isfinite(y).all()
    assert (y[..., 1] - 3.0).abs().max().item() < 1e-3


def test_the_2d_embedding_pads_the_components_upstream_pads():
    vocab = FIELD_INDEX_MAP
    assert inflated(("velocity_x", "velocity_y", "density"), vocab) == ("velocity_z",)
    assert inflated(("D_xx", "D_xy", "D_yx", "D_yy"), vocab) == ("D_xz", "D_yz", "D_zx", "D_zy", "D_zz")
    assert inflated(("c_zz", "pressure", "velocity_r"), vocab) == ()  # no Cartesian vector or tensor of the map
    assert tiny(spatial_dims=3, boundaries=("periodic",) * 3,
                fields=("velocity_x", "velocity_y", "density", "pressure")).slots.tolist() == [4, 5, 28, 3]


def test_the_flags_mark_each_sides_padding_by_its_boundary():
    const = [(2, 1), (0, 0), (0, 0)]
    flags = boundary_flags((6, 3, 1), const, [[WALL, 1], [PERIODIC, PERIODIC], [PERIODIC, PERIODIC]],
                           torch.float64, "cpu")
    assert flags[0, 2:5].eq(1).all() and flags[0, :2].eq(0).all() and flags[0, 5:].eq(0).all()
    assert flags[1, :2].eq(1).all() and flags[1, 2:].eq(0).all()  # the wall before
    assert flags[2, 5:].eq(1).all() and flags[2, :5].eq(0).all()  # the open side after


def test_the_padding_gives_the_stem_its_tokens():
    for grid in ((32, 32, 1), (128, 256, 1), (512, 1024, 1), (16, 64, 192)):
        kernels = kernels_for(grid)
        for jitter in (False, True):
            const, circ = pad_plan(grid, [[WALL, WALL]] * 3, kernels, ((8, 4),) * 3, jitter)
            for n, (s1, s2), (a, b) in zip(grid, kernels, const):
                if n == 1:
                    continue
                first = (n + a + b - 8) // s1 + 1
                tokens = (first - 4) // s2 + 1
                assert tokens == n // (s1 * s2) + (1 if jitter and s1 * s2 > 1 else 0), (grid, jitter)  # half a patch a side


# ---- grids, boundaries, histories: refused in one line ---------------------------------------------------------------
def test_a_grid_the_stem_does_not_take_is_refused_naming_the_ones_it_takes():
    model = tiny()
    with pytest.raises(opzoo.ConfigError, match=r"walrus does not run at 64x64: .* 32, 128, 256, 384, 512, 768, 1024; "
                                                r"--resolution 128 128 runs it"):
        model(history((1, 64, 64, 6, 4)))
    assert model.grid_for((100, 300))[0] == (128, 384)
    grid, why = model.grid_for((2048, 64))
    assert grid == (1024, 128) and "down to its largest" in why
    assert tiny(spatial_dims=3, boundaries=("periodic",) * 3).grid_for((20, 64, 200))[0] == (64, 64, 256)


@pytest.mark.parametrize("boundaries,match", [(("wall", "sticky"), "not a boundary"),
                                              (("periodic/wall", "wall"), "periodic on both sides"),
                                              (("wall",), "1 for 2 axes")])
def test_a_bad_boundary_is_refused(boundaries, match):
    with pytest.raises(opzoo.ConfigError, match=match):
        tiny(boundaries=boundaries)


def test_one_frame_and_an_unknown_field_are_refused():
    with pytest.raises(opzoo.ConfigError, match="at least 2 frames"):
        tiny(in_timesteps=1)
    with pytest.raises(opzoo.ConfigError, match="blubber is no field slot"):
        tiny(fields=("density", "blubber", "velocity_x", "velocity_y"))
    with pytest.raises(opzoo.ConfigError, match="no field slot"):
        tiny(fields=("closed_boundary", "density", "velocity_x", "velocity_y"))


# ---- jitter ---------------------------------------------------------------------------------------------------------
def test_jitter_is_random_as_upstreams_inference_and_repeats_with_the_seed():
    model = tiny(boundaries=("wall", "periodic"))
    x = history((1, 32, 128, 6, 4))
    with torch.no_grad():
        torch.manual_seed(3)
        a = model(x)
        torch.manual_seed(3)
        b = model(x)
        c = model(x)
        plain = tiny(boundaries=("wall", "periodic"), jitter=False)(x)
    assert torch.equal(a, b) and not torch.equal(a, c) and not torch.equal(a, plain)


# ---- new fields (upstream's align_checkpoint_with_field_to_index_map) ------------------------------------------------
def test_a_new_field_gets_a_new_slot_and_keeps_every_other_tensor():
    model = tiny()
    grown = dict(field_names=FIELD_INDEX_MAP + ("blubber",), fields=("density", "blubber", "velocity_x", "velocity_y"))
    layout = type(model).io_layout(model.config, type(model.config)(**{**model.config.to_dict(), **grown}))
    assert set(layout) == {f"net.{p}.{d}.{k}" for p, k in (("embed", "proj1.weight"), ("debed", "proj2.weight"),
                                                           ("debed", "proj2.bias")) for d in "23"}
    assert all(m[0].index[-1] is None and m[0].index[:-1] == tuple(range(67)) for m in layout.values())


# ---- the converter --------------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_trainer_checkpoint_with_its_optimizer_reads_only_the_model(tmp_path):
    """As upstream's trainer writes a checkpoint (torch.distributed.checkpoint of {app: {model, optimizer}}, coalesced
    by dcp_to_torch_save): the model's state alone, the same tensors as the recorded model-only file."""
    theirs = torch.load(DATA / "walrus-small.pt", weights_only=True)["app"]["model"]
    write_checkpoint(theirs, tmp_path / "trainer.pt", optimizer=True)
    assert "optimizer" in torch.load(tmp_path / "trainer.pt", weights_only=True)["app"]
    sd = read_checkpoint(tmp_path / "trainer.pt")
    assert set(sd) == set(theirs) and all(torch.equal(sd[k], theirs[k]) for k in theirs)


def test_a_bare_state_dict_reads_and_a_file_without_the_model_is_refused(tmp_path):
    theirs = torch.load(DATA / "walrus-small.pt", weights_only=True)["app"]["model"]
    torch.save(theirs, tmp_path / "bare.pt")
    assert set(read_checkpoint(tmp_path / "bare.pt")) == set(theirs)
    torch.save({"app": {"optimizer": {"state": {}}}}, tmp_path / "no-model.pt")
    with pytest.raises(opzoo.CheckpointError, match=r"no-model.pt \['app'\]: not a Walrus checkpoint: expected a "
                                                    r"dict with 'model'"):
        read_checkpoint(tmp_path / "no-model.pt")
    torch.save({"model_state": theirs}, tmp_path / "other.pt")
    with pytest.raises(opzoo.CheckpointError, match="expected a dict with 'app'"):
        read_checkpoint(tmp_path / "other.pt")


def test_a_tensor_of_another_shape_is_refused_at_load(tmp_path):
    theirs = dict(torch.load(DATA / "walrus-small.pt", weights_only=True)["app"]["model"])
    theirs["blocks.0.space_mixing.ff_out.weight"] = torch.zeros(SMALL["hidden"], 3)
    torch.save({"app": {"model": theirs}}, tmp_path / "walrus.pt")
    c = convert_walrus(tmp_path / "walrus.pt", field_names=FIELD_INDEX_MAP[:SMALL["n_states"]])
    model = opzoo.create_model("walrus", **c.model_args)
    with pytest.raises(RuntimeError, match="ff_out.weight"):
        model.load_state_dict(c.state_dict, strict=True)


def test_the_published_preset_builds_on_meta_with_upstreams_tensor_names():
    with torch.device("meta"):
        model = opzoo.load("walrus")
    names = {k[len("net."):]: tuple(v.shape) for k, v in model.state_dict().items()}
    assert names["embed.2.proj1.weight"] == (352, 67, 8, 8, 8)
    assert names["blocks.39.space_mixing.fused_ff_qkv.weight"] == (9856, 1408)
    assert names["blocks.0.space_mixing.ff_out.weight"] == (1408, 2816)
    assert names["blocks.0.time_mixing.input_head.weight"] == (4224, 1408, 1, 1, 1)
    assert names["blocks.0.time_mixing.rel_pos_bias.relative_attention_bias.weight"] == (32, 16)
    assert names["blocks.0.space_mixing.rotary_emb.freqs"] == (11,)
    assert names["debed.3.proj2.weight"] == (352, 67, 8, 8, 8)
    assert not any("gamma" in k or "space_bag" in k or "padding_tokens" in k for k in names)


def test_the_stand_in_predicts_through_the_preset_wrapper():
    model = converted_model(fields=("pressure", "velocity_x", "velocity_y"), in_channels=3, out_channels=3,
                            in_timesteps=3, jitter=False).double()
    with torch.no_grad():
        y = model(history((1, 32, 32, 3, 3)))
    assert y.shape == (1, 32, 32, 1, 3) and torch.isfinite(y).all()


def test_the_data_dir_is_small():
    assert sum(p.stat().st_size for p in Path(DATA).iterdir()) < 4_000_000


def test_a_boundary_change_copies_every_tensor_once_and_leaves_the_given_model_as_it_was():
    """adapt_model of a change that touches no tensor builds the new model with its parameters on meta and gives it a
    copy of each tensor: no second initialized model (a full-size Walrus: one copy of 4.8 GiB, not two)."""
    from opzoo.model_io.adapt import adapt_model

    model = tiny(boundaries=("wall", "periodic")).float()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    new = adapt_model(model, boundaries=("open", "periodic"))
    assert tuple(new.config.boundaries) == ("open", "periodic") and tuple(model.config.boundaries) == ("wall", "periodic")
    for name, value in new.state_dict().items():
        assert torch.equal(value, before[name]) and value.data_ptr() != model.state_dict()[name].data_ptr(), name
    assert new.bcs[0] == [1, 1] and not any(p.is_meta for p in new.parameters()) and new.slots.device.type == "cpu"
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), before.values()))


def test_a_boundary_change_of_a_model_on_meta_stays_on_meta():
    """A memory plan fits a model built on the meta device before any weights exist: its adaptation is built there."""
    from opzoo.model_io.adapt import adapt_model

    with torch.device("meta"):
        model = opzoo.load("walrus", **TINY)
        new = adapt_model(model, boundaries=("open", "wall"))
    assert all(p.is_meta for p in new.parameters()) and tuple(new.config.boundaries) == ("open", "wall")
