"""opzoo-mpp: the four presets against upstream's own build_avit (counted from its config files in the recording),
files downloaded by hand (a stand-in Ti file as train_basic.py saves it, under DDP), the refusals, and MPP's data
contract: its state slots by name, its training sets, new fields as new slots (upstream's expand_projections)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import opzoo
from opzoo.evaluation.fit import fit_data, open_trajectories
from opzoo_mpp.backbone import STATE_NAMES
from opzoo_mpp.family import DRIVE

DATA = Path(__file__).parent / "data"
META = json.loads((DATA / "reference.json").read_text())
PRESETS = {"ti": "mpp-avit-ti", "s": "mpp-avit-s", "b": "mpp-avit-b", "l": "mpp-avit-l"}


@pytest.mark.parametrize("size", PRESETS)
def test_each_preset_is_upstreams_build_avit_from_its_own_config_file(size):
    """Sizes as upstream's config/mpp_avit_*_config.yaml, parameter count as its build_avit on them (recorded)."""
    upstream = META["sizes"][size]
    with torch.device("meta"):
        model = opzoo.load(PRESETS[size])
    c = model.config
    assert (c.dim, c.heads, c.depth, len(c.state_names)) == (upstream["embed_dim"], upstream["num_heads"],
                                                             upstream["processor_blocks"], upstream["n_states"])
    assert upstream["patch_size"] == [16, 16] and upstream["n_steps"] == c.in_timesteps == 16
    assert upstream["bias_type"] == "rel" and upstream["block_type"] == "axial"
    assert sum(p.numel() for p in model.parameters()) == upstream["parameters"]


def train_basic_file(model: torch.nn.Module, path: Path) -> Path:
    """``model``'s weights as train_basic.py L165 saves them under DDP (``module.``), with an optimizer state."""
    state = {f"module.{k[len('net.'):]}": v for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.save({"iters": 2000, "epoch": 1, "model_state": state, "optimizer_state_dict": optimizer.state_dict()},
               path)
    return path


@pytest.fixture(scope="module")
def ti_file(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    torch.manual_seed(0)
    model = opzoo.load("mpp-avit-ti")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return model, train_basic_file(model, tmp_path_factory.mktemp("mpp") / "MPP_AViT_Ti")


def test_a_stand_in_ti_file_converts_and_the_model_holds_exactly_its_tensors(ti_file, tmp_path):
    model, path = ti_file
    loaded = opzoo.load("mpp-avit-ti", checkpoint_path=path)
    assert not loaded.training and loaded.preset_name == "mpp-avit-ti"
    want = model.state_dict()
    got = loaded.state_dict()
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert len(got) == len(torch.load(path, weights_only=True)["model_state"])
    from opzoo.cli import main

    assert main(["convert", "mpp", str(path), str(tmp_path / "out")]) == 0
    converted = opzoo.load(str(tmp_path / "out"))
    assert converted.preset_name == "mpp-avit-ti" and all(torch.equal(converted.state_dict()[k], want[k])
                                                          for k in want)


def test_checkpoint_path_takes_pretrained_true_and_the_fields_of_fewer_channels(ti_file, tmp_path):
    """Issue 74 items 11 and 12: load(pretrained=True, checkpoint_path=F), the call the MPP issue specified, was refused
    ("it would load the published weights first"), and fields= with fewer channels failed on the checkpoint_path branch
    ("2 names for 4 channels") where the converted folder loaded."""
    model, path = ti_file
    plain = opzoo.load("mpp-avit-ti", checkpoint_path=path)
    both = opzoo.load("mpp-avit-ti", pretrained=True, checkpoint_path=path)
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), both.state_dict().values()))
    from opzoo.cli import main

    assert main(["convert", "mpp", str(path), str(tmp_path / "out")]) == 0
    shaped = dict(in_channels=2, out_channels=2, fields=["compNS.pressure", "compNS.density"])
    by_file = opzoo.load("mpp-avit-ti", checkpoint_path=path, **shaped)
    by_folder = opzoo.load(str(tmp_path / "out"), **shaped)
    assert list(by_file.config.fields) == ["compNS.pressure", "compNS.density"] == list(by_folder.config.fields)
    assert all(torch.equal(a, b) for a, b in zip(by_file.state_dict().values(), by_folder.state_dict().values()))


def test_a_file_of_another_size_is_refused_in_one_line_naming_its_preset(ti_file):
    _, path = ti_file
    with pytest.raises(opzoo.OpzooError) as e:
        opzoo.load("mpp-avit-s", checkpoint_path=path)
    text = str(e.value)
    assert "\n" not in text and "mpp-avit-ti" in text and "dim: file 192, model 384" in text


def test_loading_by_name_says_where_the_files_are_and_which_is_which():
    with pytest.raises(opzoo.HubError) as e:
        opzoo.load("mpp-avit-b", pretrained=True)
    text = str(e.value)
    assert "\n" not in text and DRIVE in text and "MPP_AViT_B" in text and "checkpoint_path=FILE" in text
    info = opzoo.get_registry().preset("mpp-avit-l")
    assert info.pretrained.download_page == DRIVE and info.pretrained.filename == "MPP_AViT_L"


def test_verify_answers_offline_in_one_line_and_checks_a_downloaded_file(ti_file, capsys):
    from opzoo.cli import main

    assert main(["verify", "mpp-avit-b"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and DRIVE in err and "--file" in err
    _, path = ti_file
    assert main(["verify", "mpp-avit-ti", "--file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 passed, 0 failed, 0 not run" in out
    assert main(["verify", "mpp-avit-s", "--file", str(path)]) == 1


def test_info_names_the_download_page_and_the_file():
    from opzoo.cli.models import preset_document

    doc = preset_document("mpp-avit-s", {})
    assert DRIVE in doc["pretrained"]["description"] and "MPP_AViT_S" in doc["pretrained"]["description"]
    topics = {f["topic"]: f for f in doc["provenance"]}
    assert not topics["file name"]["verified"] and topics["code license"]["value"] == "MIT"


def test_a_bare_state_dict_reads_as_restore_checkpoint_reads_it(ti_file, tmp_path):
    model, _ = ti_file
    path = tmp_path / "bare.pt"
    torch.save({k[len("net."):]: v for k, v in model.state_dict().items()}, path)
    loaded = opzoo.load("mpp-avit-ti", checkpoint_path=path)
    assert torch.equal(loaded.state_dict()["net.space_bag.weight"], model.state_dict()["net.space_bag.weight"])


def test_a_file_of_more_slots_needs_their_names(tmp_path):
    model = opzoo.load("mpp-avit-ti", dim=32, heads=2, depth=1, state_names=[*STATE_NAMES, "u"])
    path = train_basic_file(model, tmp_path / "ft.tar")
    with pytest.raises(opzoo.CheckpointError, match="state_names"):
        opzoo.get_registry().get("converter", "mpp")(path)
    converted = opzoo.get_registry().get("converter", "mpp")(path, state_names=",".join([*STATE_NAMES, "u"]))
    assert converted.model_args["state_names"][-1] == "u"


# ---- the data contract ----------------------------------------------------------------------------------------------


def tiny(**changes) -> torch.nn.Module:
    torch.manual_seed(0)
    model = opzoo.load("mpp-avit-ti", dim=32, heads=2, depth=1, drop_path=0.0, **changes)
    model.preset_name = "mpp-avit-ti"
    return model.eval()


@pytest.fixture(scope="module")
def cfd_file(tmp_path_factory) -> Path:
    from tests.data.foreign_layouts import write_pdebench_cfd

    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("cfd") / "2D_CFD_Rand_M0.1.hdf5"
    write_pdebench_cfd(path, rng.standard_normal((3, 32, 32, 6, 4)).astype(np.float32))
    return path


def test_a_pdebench_cfd_file_read_as_upstream_read_compns(cfd_file):
    fitted = fit_data(tiny(), [open_trajectories(str(cfd_file))], training_set="compNS")
    c = fitted.model.config
    assert c.fields == ("compNS.Vx", "compNS.Vy", "compNS.density", "compNS.pressure")
    assert fitted.model.slots.tolist() == [6, 7, 8, 9]
    block = "\n".join(fitted.lines)
    assert "training set compNS" in block and "compNS.Vx := Vx" in block
    src = fitted.sources[0]
    raw = open_trajectories(str(cfd_file))
    assert np.array_equal(src[0][0][..., 0].numpy(), raw[0][0][..., 2].numpy())  # slot 6 (Vx) is the file's Vx


def test_fields_by_name_each_into_its_slot_and_a_subset_of_them(cfd_file):
    fitted = fit_data(tiny(), [open_trajectories(str(cfd_file))],
                      field_map="density=compNS.density,pressure=compNS.pressure")
    assert fitted.model.config.fields == ("compNS.density", "compNS.pressure")
    assert fitted.model.slots.tolist() == [8, 9]
    assert any("not read: Vx, Vy" in line for line in fitted.lines)


def test_a_field_of_no_slot_is_refused_in_evaluation_and_gains_a_slot_in_fine_tuning(cfd_file):
    src = open_trajectories(str(cfd_file))
    with pytest.raises(opzoo.ConfigError, match="--training-set NAME"):
        fit_data(tiny(), [src])
    model = tiny()
    fitted = fit_data(model, [open_trajectories(str(cfd_file))], train=True,
                      field_map="Vx=compNS.Vx,Vy=compNS.Vy")
    new = fitted.model
    # the two new fields take the unused slots 10-11, as upstream numbers a new dataset's fields after the used ones
    assert new.config.state_names == (*STATE_NAMES[:10], "density", "pressure")
    assert new.config.fields == ("density", "pressure", "compNS.Vx", "compNS.Vy")  # the file's order
    assert new.slots.tolist() == [10, 11, 6, 7]
    old_sd, new_sd = model.state_dict(), new.state_dict()
    assert set(new_sd) == set(old_sd) and all(torch.equal(new_sd[k], v) for k, v in old_sd.items())


def test_expand_projections_is_upstreams_where_it_is_run():
    """With a checkout named ($OPZOO_MPP_REPO), upstream's own AViT.expand_projections on the same weights keeps what
    opzoo's adaptation keeps (the fresh slices are random on both sides)."""
    import os

    from opzoo_mpp.converter import upstream_network

    if not os.environ.get("OPZOO_MPP_REPO"):
        pytest.skip("OPZOO_MPP_REPO does not name a checkout of PolymathicAI/multiple_physics_pretraining")
    model = tiny()
    net = upstream_network(model)
    net.expand_projections(2)
    assert torch.equal(net.space_bag.weight[:, :12], model.net.space_bag.weight)
    assert torch.equal(net.space_bag.bias, model.net.space_bag.bias)
    assert tuple(net.debed.out_kernel.shape) == (8, 14, 4, 4)


def boundary_line(fitted) -> str:
    return next(line for line in fitted.lines if line.startswith("boundary: "))


def test_periodic_is_upstreams_boundary_flag_and_follows_the_training_set_a_file_is_read_as(cfd_file, tmp_path):
    """Upstream gives each batch its dataset's bcs (data_utils/hdf5_datasets.py _get_specific_bcs @ 38eefb1: compNS
    [1, 1], swe/diffre2d/incompNS [0, 0]): a PDEBench CFD file (its metadata states no boundary) read as compNS runs
    periodic, whatever the model was built with, unless the user set the flag."""
    src = open_trajectories(str(cfd_file))
    assert src.boundary is None
    fitted = fit_data(tiny(), [src], training_set="compNS")
    assert fitted.model.config.periodic is True
    assert boundary_line(fitted) == (
        f"boundary: periodic=True for mpp-avit-ti, as the data states: read as compNS, which upstream ran periodic "
        f"({cfd_file}); mpp-avit-ti was periodic=False (periodic=false in its model args keeps it: --model-args, "
        f"model.args in a run)")
    assert fit_data(tiny(periodic=True), [open_trajectories(str(cfd_file))], training_set="compNS").model.config.periodic
    kept = fit_data(tiny(), [open_trajectories(str(cfd_file))], training_set="compNS", keep_boundary=True)
    assert kept.model.config.periodic is False
    assert boundary_line(kept).startswith("boundary: periodic=False as the model args set it, although the data states")
    # a file read as a non-periodic set: periodic=False, as upstream ran it
    swe = swe_file(tmp_path / "swe.h5")
    fitted = fit_data(tiny(periodic=True), [open_trajectories(str(swe))], training_set="swe")
    assert fitted.model.config.periodic is False and "read as swe, which upstream ran not periodic" in \
        boundary_line(fitted)


def swe_file(path: Path, **params) -> Path:
    """A file laid out as PDEBench's shallow water is read (one field, c0), with ``params`` as its metadata."""
    from opzoo.data import write_canonical

    data = np.random.default_rng(0).standard_normal((2, 32, 32, 5, 1)).astype(np.float32)
    write_canonical(path, data, ["c0"], pde="swe", params=params)
    return path


def test_a_files_own_boundary_wins_over_its_training_sets_and_two_boundaries_are_refused(tmp_path):
    own = swe_file(tmp_path / "periodic.h5", boundary="periodic")
    fitted = fit_data(tiny(), [open_trajectories(str(own))], training_set="swe")
    assert fitted.model.config.periodic is True and f"periodic ({own})" in boundary_line(fitted)
    other = swe_file(tmp_path / "plain.h5")
    with pytest.raises(opzoo.ConfigError, match=r"state different boundaries .*--model-args periodic=true\|false"):
        fit_data(tiny(), [open_trajectories(str(own)), open_trajectories(str(other))], training_set="swe")


def test_a_grid_not_of_16s_is_resampled_to_the_nearest_and_said(tmp_path):
    from opzoo.data import write_canonical

    path = tmp_path / "odd.h5"
    data = np.random.default_rng(0).standard_normal((2, 40, 56, 5, 1)).astype(np.float32)
    write_canonical(path, data, ["h"], pde="swe")
    fitted = fit_data(tiny(), [open_trajectories(str(path))], field_map="h=swe.h")
    assert fitted.grid.resolution == (64, 64)  # 40 -> 48 in whole patches, then 4 patches at least
    assert fitted.model.slots.tolist() == [0]
    data = np.random.default_rng(0).standard_normal((2, 80, 96, 5, 1)).astype(np.float32)
    write_canonical(path, data, ["h"], pde="swe")
    fitted = fit_data(tiny(), [open_trajectories(str(path))], field_map="h=swe.h")
    assert fitted.grid.resolution == (80, 96) and "the data's own" in " ".join(fitted.lines)


def test_a_grid_of_few_patches_runs_at_four_per_axis_and_is_refused_when_named(tmp_path):
    """Issue 74, item 15: at 2x2 patches MPP's RMS instance norms multiply a map flat over the 4 patches by 1e8 and
    float32 rollouts turn NaN. The commands run a 32x32 file at 64x64 (4 patches per axis), said; a grid named below
    that is refused in one line, naming the grid that runs."""
    from opzoo.data import write_canonical

    path = tmp_path / "small.h5"
    write_canonical(path, np.random.default_rng(0).standard_normal((2, 32, 48, 17, 1)).astype(np.float32), ["h"],
                    pde="swe")
    fitted = fit_data(tiny(), [open_trajectories(str(path))], field_map="h=swe.h")
    assert fitted.grid.resolution == (64, 64)
    line = next(x for x in fitted.lines if x.startswith("grid:"))
    assert "at least 4 patches of 16 on each axis" in line and "scores are computed at the file's own grid" in line
    with pytest.raises(opzoo.ConfigError, match=r"does not run at 32x48: it needs at least 4 patches of 16 \(64\) on "
                                                r"each axis; .*--resolution 64 64 runs it") as e:
        fit_data(tiny(), [open_trajectories(str(path))], field_map="h=swe.h", resolution=(32, 48))
    assert "\n" not in str(e.value)


def test_the_rms_instance_norm_multiplies_a_map_flat_over_its_patches_by_1e8():
    """The part behind item 15, on a hand-made input: a map whose values over the patch grid are equal has std 0, and
    upstream's RMS instance norm divides it by its eps 1e-8; a map that varies is brought to unit scale."""
    from opzoo_mpp.network import RMSInstanceNorm2d

    norm = RMSInstanceNorm2d(2)
    x = torch.tensor([[[[0.3, 0.3], [0.3, 0.3]], [[0.3, 0.1], [0.2, 0.4]]]], dtype=torch.float64)
    y = norm(x)
    assert torch.allclose(y[0, 0], torch.full((2, 2), 0.3e8, dtype=torch.float64), rtol=1e-12)
    assert torch.allclose(y[0, 1], x[0, 1] / (x[0, 1].std() + 1e-8), rtol=1e-12) and y[0, 1].abs().max() < 4


@pytest.mark.slow  # 20 s: rollouts of mpp-avit-ti in float32 and float64
def test_a_rollout_at_few_patches_turns_non_finite_in_float32():
    """As measured for item 15 (mpp-avit-ti, random init): a field that repeats with the patch (every patch the same
    values: every map flat over the 2x2 patch grid, on any CPU) is non-finite in float32 within a few steps; a smooth
    field stays finite at 64x64 over 30 steps, and at 32x32 in float64 over 60."""
    import math

    torch.manual_seed(0)
    model = opzoo.load("mpp-avit-ti", in_channels=1, out_channels=1, fields=["compNS.Vx"]).eval()

    def rollout(u, dtype, steps):
        frames = torch.stack([u * (1 + 0.05 * t) for t in range(16)], -1)[None, ..., None].to(dtype)
        with torch.no_grad():
            return model.to(dtype).rollout(frames, steps=steps)

    def smooth(n):
        x = torch.linspace(0, 2 * math.pi, n + 1, dtype=torch.float64)[:-1]
        return torch.sin(x)[:, None] * torch.cos(x)[None, :]

    tile = smooth(16)
    assert not torch.isfinite(rollout(tile.repeat(2, 2), torch.float32, 3)).all()
    assert torch.isfinite(rollout(smooth(64), torch.float32, 30)).all()
    assert torch.isfinite(rollout(smooth(32), torch.float64, 60)).all()


def test_list_says_the_files_are_downloaded_by_hand():
    """`opzoo list --pretrained`'s column: never "shipped (offline)" for a file the user downloads."""
    from opzoo.cli.models import _offline_of

    assert all(_offline_of(None, name) == "download by hand (checkpoint_path=FILE)" for name in PRESETS.values())


UPSTREAM_SAVED = DATA / "mpp-small.tar"  # written by upstream's own save_checkpoint (tests/mpp/record_reference.py)


@pytest.fixture
def small_preset():
    """A preset of the recorded network's sizes, its weights downloaded by hand as mpp-avit-ti's are, with MPP's load
    checks."""
    import dataclasses

    registry = opzoo.get_registry()
    ti = registry.preset("mpp-avit-ti")
    with registry.owned_by("tests"):
        registry.register_model("mpp-small-upstream", backbone="mpp-avit",
                                args={**ti.args, "dim": 32, "heads": 2, "depth": 2},
                                pretrained=dataclasses.replace(ti.pretrained, filename="mpp-small.tar"),
                                pretrained_cfg=dict(ti.pretrained_cfg))
    yield "mpp-small-upstream"
    registry.forget("tests")


def test_a_checkpoint_upstreams_save_checkpoint_wrote_converts_loads_and_verifies(small_preset, tmp_path, monkeypatch):
    """Item 10: upstream reads its config with ruamel, so the saved DAdaptAdan state's weight decay is a ruamel
    ScalarFloat, which a weights-only load refuses; opzoo reads it as an inert placeholder, never importing ruamel (a
    ruamel here records any use), and reads the model's tensors only."""
    import sys
    import types

    from opzoo.cli import main
    from opzoo.model_io.converters import Placeholder

    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(UPSTREAM_SAVED)) == [
        "ruamel.yaml.scalarfloat.ScalarFloat"]
    with pytest.raises(Exception, match="ScalarFloat"):
        torch.load(UPSTREAM_SAVED, weights_only=True)
    touched = []

    class ScalarFloat(float):  # what `import ruamel.yaml.scalarfloat` gives here: its code records that it ran
        def __new__(cls, *args, **kwargs):
            touched.append("ScalarFloat.__new__")
            return float.__new__(cls, *args)

        def __setstate__(self, state):
            touched.append("ScalarFloat.__setstate__")

    for name in ("ruamel", "ruamel.yaml", "ruamel.yaml.scalarfloat"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules["ruamel.yaml.scalarfloat"].ScalarFloat = ScalarFloat
    payload = opzoo.safe_torch_load(UPSTREAM_SAVED, placeholders=True)
    decay = payload["optimizer_state_dict"]["param_groups"][1]["weight_decay"]
    assert isinstance(decay, Placeholder) and decay.args == (1e-3,) and type(decay).__qualname__ == "ScalarFloat"
    assert set(payload["optimizer_state_dict"]["param_groups"][0]) >= {"d", "growth_rate", "log_every"}  # DAdaptAdan
    assert all(k.startswith("module.") for k in payload["model_state"])
    assert main(["convert", "mpp", str(UPSTREAM_SAVED), str(tmp_path / "out")]) == 0
    converted = opzoo.load(str(tmp_path / "out"))
    model = opzoo.load(small_preset, checkpoint_path=UPSTREAM_SAVED)
    assert not model.training and all(torch.equal(v, converted.state_dict()[k]) for k, v in model.state_dict().items())
    assert main(["verify", small_preset, "--file", str(UPSTREAM_SAVED)]) == 0
    assert touched == []


def test_a_pickle_that_would_run_code_still_never_runs(tmp_path, capsys):
    import os

    from opzoo.cli import main

    marker = tmp_path / "ran"

    class Shell:  # a name torch's reader blocks whatever the allow-list says
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    class Writes:  # a name it does not block: a placeholder stands in, and calling it is refused
        def __reduce__(self):
            return (Path.write_text, (marker, "ran"))

    state = opzoo.safe_torch_load(UPSTREAM_SAVED, placeholders=True)["model_state"]
    for payload, said in ((Shell(), f"holds Python objects ({os.system.__module__}.system)"),
                          (Writes(), "while it is read (how a pickle runs code): refused, and nothing of it ran")):
        torch.save({"model_state": state, "optimizer_state_dict": {"state": {}, "hook": payload}}, tmp_path / "bad.tar")
        assert main(["convert", "mpp", str(tmp_path / "bad.tar"), str(tmp_path / "out")]) == 2
        assert said in capsys.readouterr().err
        assert not marker.exists() and not (tmp_path / "out").exists()


def test_new_fields_take_the_unused_slots_first_as_upstream_numbers_them(tmp_path):
    """Item 13: upstream numbers a new dataset's fields after the ten used slots (use_all_fields), so its first two
    land in slots 10-11, whose columns the published weights hold; opzoo gave them new slots from 12 on."""
    path = tmp_path / "new.h5"
    with h5py_file(path) as f:
        f["data"] = np.random.default_rng(0).standard_normal((3, 32, 32, 20, 3)).astype(np.float32)
        f.attrs["fields"] = ["a", "b", "c"]
    model = tiny()
    fitted = fit_data(model, [open_trajectories(str(path))], train=True)
    c = fitted.model.config
    assert c.state_names == (*STATE_NAMES[:10], "a", "b", "c") and c.fields == ("a", "b", "c")
    assert fitted.model.slots.tolist() == [10, 11, 12]
    old, new = model.state_dict(), fitted.model.state_dict()
    for key in ("net.space_bag.weight", "net.debed.out_kernel"):
        assert torch.equal(new[key][:, :12], old[key])  # slots 10-11 keep the published columns
    assert torch.equal(new["net.debed.out_bias"][:12], old["net.debed.out_bias"])
    lines = " ".join(fitted.lines)
    assert "a takes the unused slot unused.10 (slot 10), b takes the unused slot unused.11 (slot 11)" in lines
    assert "c: no slot of mpp-avit-ti's free; each gains a new slot" in lines
    two = tmp_path / "two.h5"
    with h5py_file(two) as f:
        f["data"] = np.random.default_rng(0).standard_normal((3, 32, 32, 20, 1)).astype(np.float32)
        f.attrs["fields"] = ["a"]
    assert fit_data(model, [open_trajectories(str(two))], train=True).model.config.state_names == (
        *STATE_NAMES[:10], "a", "unused.11")  # one new field: one slot taken, no slot appended


def h5py_file(path):
    import h5py

    return h5py.File(path, "w")
