"""Walrus's data contract on files of The Well's layout: fields by name into the slots, each axis's boundary from the
file (as The Well's own loader reads it), 2-D embedded in 3-D, the grid the stem takes, and the fit block saying each
decision."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import opzoo
from opzoo.data import open_source
from opzoo.evaluation.fit import fit_files_block

from .test_walrus_plugin import TINY


def write_well(path: Path, spatial=(32, 128), steps: int = 8, n: int = 2, sides=(("WALL",), ("PERIODIC",)),
               name: str = "toy_flow", scalars=("density", "pressure"), vector: str = "velocity") -> Path:
    """A file of The Well's layout: density and pressure (t0), velocity (t1), a boundary group per axis and side kind
    (``sides[axis]``: one kind for both ends, or two for before/after)."""
    rng = np.random.default_rng(0)
    axes = ["x", "y", "z"][:len(spatial)]
    with h5py.File(path, "w") as f:
        f.attrs.update(dataset_name=name, grid_type="cartesian", n_spatial_dims=len(spatial), n_trajectories=n,
                       simulation_parameters=[])
        dims = f.create_group("dimensions")
        dims.attrs["spatial_dims"] = axes
        dims.create_dataset("time", data=np.linspace(0, 1, steps, dtype=np.float32))
        for a, size in zip(axes, spatial):
            dims.create_dataset(a, data=np.linspace(0, 1, size, dtype=np.float32))
        bcs = f.create_group("boundary_conditions")
        for a, size, kinds in zip(axes, spatial, sides):
            for i, kind in enumerate(dict.fromkeys(kinds)):
                g = bcs.create_group(f"{a}_{kind.lower()}")
                g.attrs.update(bc_type=kind, associated_dims=[a], associated_fields=[], sample_varying=False,
                               time_varying=False)
                mask = np.zeros(size, dtype=bool)
                if len(set(kinds)) == 1:
                    mask[[0, -1]] = True
                else:
                    mask[[0] if i == 0 else [-1]] = True
                g.create_dataset("mask", data=mask)
        t0 = f.create_group("t0_fields")
        t0.attrs["field_names"] = list(scalars)
        for fld, mean in zip(scalars, (1.0, 2.0)):
            d = t0.create_dataset(fld, data=(mean + 0.1 * rng.standard_normal((n, steps, *spatial))).astype("f4"))
            d.attrs.update(sample_varying=True, time_varying=True)
        t1 = f.create_group("t1_fields")
        t1.attrs["field_names"] = [vector]
        d = t1.create_dataset(vector, data=rng.standard_normal((n, steps, *spatial, len(spatial))).astype("f4"))
        d.attrs.update(sample_varying=True, time_varying=True)
        f.create_group("t2_fields").attrs["field_names"] = []
        f.create_group("scalars").attrs["field_names"] = []
    return path


def test_the_well_reader_states_each_axis_boundary_as_the_wells_loader(tmp_path):
    f = write_well(tmp_path / "a.hdf5", sides=(("WALL", "OPEN"), ("PERIODIC",)))
    assert open_source(str(f)).info.axis_boundaries == ("wall/open", "periodic")
    g = write_well(tmp_path / "b.hdf5", spatial=(16, 16, 16), sides=(("OPEN",), ("WALL",), ("PERIODIC",)))
    assert open_source(str(g)).info.axis_boundaries == ("open", "wall", "periodic")


def fitted(tmp_path, **file_args):
    lines = []
    path = write_well(tmp_path / "flow.hdf5", **file_args)
    model = opzoo.load("walrus", **TINY).eval()
    block = fit_files_block(model, [str(path)], say=lines.append)
    return block, lines


def test_a_well_file_is_read_by_name_with_its_boundaries(tmp_path):
    block, lines = fitted(tmp_path, sides=(("WALL", "OPEN"), ("PERIODIC",)))
    model = block.model
    assert model.config.fields == ("density", "pressure", "velocity_x", "velocity_y")
    assert tuple(model.config.boundaries) == ("wall/open", "periodic")
    assert model.slots.tolist()[-1] == 6  # velocity_z: the zero component 2-D data gets in 3-D
    text = "\n".join(lines)
    assert "boundaries=wall/open,periodic for walrus, as the data states" in text
    assert "inference: jitter on, as upstream runs Walrus" in text


def test_a_grid_the_stem_does_not_take_is_resampled_up_and_said(tmp_path):
    block, lines = fitted(tmp_path, spatial=(48, 100))
    assert tuple(block.grid.resolution) == (128, 128)
    assert any("nearest larger grid" in line for line in lines)


def test_the_fitted_model_predicts_the_file_at_its_grid(tmp_path):
    block, _ = fitted(tmp_path)
    model, shape = block.model.double(), block.frame_shape
    x = torch.from_numpy(np.stack([block.sources[0].source.read(0, 0, 6)])).double()  # [1, X, Y, 6, C]
    with torch.no_grad():
        y = model(x)
    assert y.shape == (1, 32, 128, 1, 4) and torch.isfinite(y).all()
    assert shape is not None


def test_files_of_different_boundaries_are_refused(tmp_path):
    a = write_well(tmp_path / "a.hdf5", sides=(("WALL",), ("PERIODIC",)))
    b = write_well(tmp_path / "b.hdf5", sides=(("OPEN",), ("PERIODIC",)))
    model = opzoo.load("walrus", **TINY).eval()
    with pytest.raises(opzoo.ConfigError, match="state different boundaries"):
        fit_files_block(model, [str(a), str(b)], say=lambda line: None)


def test_boundaries_the_user_sets_are_kept_and_the_difference_said(tmp_path):
    path = write_well(tmp_path / "flow.hdf5")
    lines = []
    model = opzoo.load("walrus", **TINY, boundaries=("open", "open")).eval()
    block = fit_files_block(model, [str(path)], say=lines.append, keep_boundary=True)
    assert tuple(block.model.config.boundaries) == ("open", "open")
    assert any("boundaries=open,open as the model args set them, although the data states wall,periodic" in line
               for line in lines)


def test_a_3d_file_runs_with_the_3d_build_and_the_2d_one_says_how(tmp_path):
    path = write_well(tmp_path / "cube.hdf5", spatial=(16, 16, 16), steps=4, n=1,
                      sides=(("OPEN",), ("WALL",), ("PERIODIC",)))
    with pytest.raises(opzoo.ConfigError, match=r"walrus runs 3-D data when built so: --model-args spatial_dims=3"):
        fit_files_block(opzoo.load("walrus", **TINY).eval(), [str(path)], say=lambda line: None)
    block = fit_files_block(opzoo.load("walrus", **TINY, spatial_dims=3, in_timesteps=2).eval(), [str(path)],
                            say=lambda line: None)
    assert tuple(block.model.config.boundaries) == ("open", "wall", "periodic")
    assert block.model.config.fields == ("density", "pressure", "velocity_x", "velocity_y", "velocity_z")


def test_a_file_of_other_names_is_read_through_a_field_map(tmp_path):
    path = write_well(tmp_path / "lab.hdf5", scalars=("rho", "p"), vector="u")
    model = opzoo.load("walrus", **TINY).eval()
    lines = []
    block = fit_files_block(model, [str(path)], say=lines.append,
                            field_map="rho=density,p=pressure,u_x=velocity_x,u_y=velocity_y")
    assert block.model.config.fields == ("density", "pressure", "velocity_x", "velocity_y")
    with pytest.raises(opzoo.ConfigError, match="rho"):
        fit_files_block(model, [str(path)], say=lambda line: None)


def test_the_sets_upstream_transformed_are_read_as_upstream_read_them(tmp_path):
    """supernova_explosion_128's density and temperature as log10_density, log10_temperature; an acoustic set's density
    as the zeros of zeros_like_density (the published config's field_transforms)."""
    astro = write_well(tmp_path / "sn.hdf5", spatial=(16, 16, 16), steps=4, n=1, name="supernova_explosion_128",
                       scalars=("density", "temperature"), sides=(("OPEN",),) * 3)
    model = opzoo.load("walrus", **TINY, spatial_dims=3, in_timesteps=2).eval()
    lines = []
    block = fit_files_block(model, [str(astro)], say=lines.append)
    assert block.model.config.fields[:2] == ("log10_density", "log10_temperature")
    x = block.sources[0].read(0, 0, 2)  # [X, Y, Z, T, C]
    with h5py.File(astro) as f:
        rho = f["t0_fields/density"][0, :2]
    np.testing.assert_allclose(x[..., 0].permute(3, 0, 1, 2).numpy(), np.log10(rho), rtol=1e-5)
    assert any("read as walrus's upstream read its training set supernova_explosion_128" in line for line in lines)
    sound = write_well(tmp_path / "ac.hdf5", name="acoustic_scattering_maze", scalars=("density", "pressure"))
    block = fit_files_block(opzoo.load("walrus", **TINY).eval(), [str(sound)], say=lambda line: None)
    assert "density" not in block.model.config.fields and "zeros_like_density" in block.model.config.fields
    assert not block.sources[0].read(0, 0, 2)[..., block.model.config.fields.index("zeros_like_density")].any()


def test_a_new_field_gains_a_slot_when_fine_tuning_and_every_other_tensor_is_kept(tmp_path):
    """As upstream's align_checkpoint_with_field_to_index_map (the notebook's 'blubber'): the file's unknown field is
    appended to the slots, its stem column and decoder row new, every other weight kept."""
    from opzoo.evaluation.fit import fit_data, open_trajectories

    path = write_well(tmp_path / "b.hdf5", scalars=("density", "blubber"))
    model = opzoo.load("walrus", **TINY).eval()
    fitted = fit_data(model, [open_trajectories(str(path))], train=True)
    new = fitted.model
    assert new.config.field_names[-1] == "blubber" and len(new.config.field_names) == 68
    assert "blubber" in new.config.fields
    old, grown = model.state_dict(), new.state_dict()
    w_old, w_new = old["net.embed.2.proj1.weight"], grown["net.embed.2.proj1.weight"]
    assert w_new.shape[1] == 68 and torch.equal(w_new[:, :67], w_old)
    assert torch.equal(grown["net.blocks.0.space_mixing.fused_ff_qkv.weight"],
                       old["net.blocks.0.space_mixing.fused_ff_qkv.weight"])
    assert any("blubber" in line for line in fitted.lines)
