"""The ``flerm`` optimizer hook in the real Trainer: record, match, mapping, errors, resume, every model, plot."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import opzoo
from opzoo.training import Trainer, parse_run_config, read_log
from opzoo_mup.flerm import FlermHook, FslrRecord, map_base_values
from opzoo_mup.flerm.record import block_lists
from tests.training.conftest import datasets, run_document, tiny_pot_args, write_canonical  # noqa: F401


def fno_args(width=8, depth=2, channels=2):
    return {"spatial_dims": 2, "width": width, "depth": depth, "modes": 3, "projection_dim": 2 * width,
            "in_channels": channels, "out_channels": channels, "in_timesteps": 1}


def flerm_run(out, datasets, hook_args, steps=9, model=None, **sections):
    doc = run_document(out, datasets, model=model or {"name": "fno", "args": fno_args()},
                       training={"steps": steps, "batch_size": 4, "log_every": 1, "eval_every": None},
                       checkpoint={"every": None, "resume": False}, schedule={"name": "constant"},
                       optimizer={"lr": 3e-3, "hooks": [{"name": "flerm", "args": hook_args}]})
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    return doc


def fit(doc):
    trainer = Trainer(parse_run_config(doc), show_progress=False)
    trainer.fit()
    return trainer


def test_record_writes_json_with_steps_and_every_tensor(tmp_path, datasets):
    trainer = fit(flerm_run(tmp_path / "base", datasets, {"mode": "record", "warmup": 4, "every": 4}))
    rec = json.loads((tmp_path / "base" / "flerm" / "record.json").read_text())
    names = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert rec["format"] == "opzoo-flerm" and rec["mode"] == "record"
    assert rec["steps"] == [1, 5, 9]  # after update 1 (40 → 4 warm-up estimates), then every 4th update
    assert sorted(rec["fslr"]) == sorted(names)
    assert all(len(v) == 3 and all(x > 0 for x in v) for v in rec["fslr"].values())
    assert rec["block_lists"] == {"spectral": 2, "pointwise": 2}
    assert rec["readout"] == ["project.2.weight", "project.2.bias"]
    assert rec["base_lr"] == [3e-3] * 3
    assert len(trainer.optimizer.param_groups) == len(names)  # one group per tensor


def test_match_of_its_own_recording_reproduces_its_learning_rates(tmp_path, datasets):
    base = fit(flerm_run(tmp_path / "base", datasets, {"mode": "record", "warmup": 4, "every": 3}))
    match = fit(flerm_run(tmp_path / "match", datasets, {"mode": "match", "warmup": 4, "every": 3,
                                                          "base": str(tmp_path / "base")}))
    rec = json.loads((tmp_path / "match" / "flerm" / "match.json").read_text())
    assert rec["steps"] == [1, 4, 7]
    for name, mults in rec["multipliers"].items():
        assert all(abs(m - 1) <= 0.05 for m in mults), (name, mults)
    for gb, gm in zip(base.optimizer.param_groups, match.optimizer.param_groups):
        assert gm["lr"] == pytest.approx(gb["lr"], rel=0.05)
    lb = [r["loss"] for r in read_log(tmp_path / "base" / "log.jsonl")]
    lm = [r["loss"] for r in read_log(tmp_path / "match" / "log.jsonl")]
    np.testing.assert_allclose(lm, lb, rtol=1e-4)


def test_match_sets_lr_base_over_current_times_the_schedule(tmp_path, datasets):
    """A base record 4x (resp. 1/4x) the model's own values gives multipliers 4 (1/4), on top of one-cycle.

    (The same schedule in both runs: ∂φ/∂W is taken after the update, so the lr = 1 value depends a
    little on the lr actually used, by 5-17 % between 3e-3 and 3e-4 at step 1 of this tiny model.)"""
    schedule = {"name": "one-cycle", "warmup": 0.2, "div_factor": 10.0, "final_div_factor": 10.0}
    fit(flerm_run(tmp_path / "base", datasets, {"mode": "record", "warmup": 3, "every": 100}, schedule=schedule))
    path = tmp_path / "base" / "flerm" / "record.json"
    doc = json.loads(path.read_text())
    for i, name in enumerate(sorted(doc["fslr"])):
        doc["fslr"][name] = [v * (4.0 if i % 2 else 0.25) for v in doc["fslr"][name]]
    scaled = tmp_path / "scaled.json"
    scaled.write_text(json.dumps(doc))
    trainer = fit(flerm_run(tmp_path / "match", datasets, {"mode": "match", "warmup": 3, "every": 100,
                                                            "base": str(scaled)}, schedule=schedule))
    from opzoo.training import one_cycle_factor

    last = 3e-3 * one_cycle_factor(8, 9, 0.2, 10.0, 10.0)
    for i, name in enumerate(sorted(doc["fslr"])):
        g = next(g for g in trainer.optimizer.param_groups if g["names"] == [name])
        assert g["lr"] == pytest.approx(last * (4.0 if i % 2 else 0.25), rel=1e-6), name


def test_match_once_keeps_the_first_multipliers_and_periodic_follows_the_record(tmp_path, datasets):
    """A base record whose values from the second measurement on are 10x the run's own: ``match: once``
    keeps the multipliers of the warm-up (1), ``periodic`` switches to base / current = 10 at step 4."""
    fit(flerm_run(tmp_path / "base", datasets, {"mode": "record", "warmup": 3, "every": 3}, steps=7))
    doc = json.loads((tmp_path / "base" / "flerm" / "record.json").read_text())
    assert doc["steps"] == [1, 4, 7]
    doc["fslr"] = {n: [v[0]] + [10 * x for x in v[1:]] for n, v in doc["fslr"].items()}
    tenfold = tmp_path / "tenfold.json"
    tenfold.write_text(json.dumps(doc))
    for match in ("once", "periodic"):
        fit(flerm_run(tmp_path / match, datasets, {"mode": "match", "warmup": 3, "every": 3, "match": match,
                                                   "base": str(tenfold)}, steps=7))
        rec = json.loads((tmp_path / match / "flerm" / "match.json").read_text())
        for name, mults in rec["multipliers"].items():
            if doc["fslr"][name][0] == 0:  # a tensor the output does not depend on keeps its lr
                assert mults == [1.0, 1.0, 1.0]
                continue
            assert mults[0] == pytest.approx(1.0, rel=1e-9), name
            if match == "once":
                assert mults == [mults[0]] * 3, name
            else:  # identical training up to update 4, so current = the record's own value there
                assert mults[1] == pytest.approx(10.0, rel=1e-4), name


def test_base_records_of_several_seeds_are_averaged():
    a = FslrRecord([1, 5], {"w": [1.0, 2.0], "b": [4.0, 0.0]}, {"blocks": 2}, "a.json")
    b = FslrRecord([1, 5], {"w": [3.0, 4.0], "b": [0.0, 2.0]}, {"blocks": 2}, "b.json")
    mean = FslrRecord.mean([a, b])
    assert mean.fslr == {"w": [2.0, 3.0], "b": [2.0, 1.0]} and mean.steps == [1, 5]
    assert mean.at(4) == {"w": 2.0, "b": 2.0} and mean.at(100) == {"w": 3.0, "b": 1.0}
    with pytest.raises(opzoo.ConfigError, match="no measurement at or before step 0"):
        mean.at(0)
    other = FslrRecord([1, 6], {"w": [1.0, 2.0], "b": [4.0, 0.0]}, {"blocks": 2}, "c.json")
    with pytest.raises(opzoo.ConfigError, match="a.json and c.json differ"):
        FslrRecord.mean([a, other])


def test_depth_and_width_mapping_by_name(tmp_path, datasets):
    fit(flerm_run(tmp_path / "base", datasets, {"mode": "record", "warmup": 2, "every": 100}, steps=2))
    base = FslrRecord.load(tmp_path / "base")
    deeper = opzoo.create_model("fno", **fno_args(width=16, depth=4))
    names = [n for n, _ in deeper.named_parameters()]
    mapped = map_base_values(names, block_lists(deeper), base, step=1)
    b = base.at(1)
    for j in range(4):  # base block m -> scaled blocks 2m, 2m+1, each base / 2
        assert mapped[f"spectral.{j}.weights.0"] == pytest.approx(b[f"spectral.{j // 2}.weights.0"] / 2)
        assert mapped[f"pointwise.{j}.bias"] == pytest.approx(b[f"pointwise.{j // 2}.bias"] / 2)
    assert mapped["lift.weight"] == b["lift.weight"] and mapped["project.2.bias"] == b["project.2.bias"]
    # a scaled FLeRM run of the wider, deeper model trains with those
    fit(flerm_run(tmp_path / "match", datasets, {"mode": "match", "warmup": 2, "every": 100,
                                                  "base": str(tmp_path / "base")}, steps=2,
                  model={"name": "fno", "args": fno_args(width=16, depth=4)}))
    three = opzoo.create_model("fno", **fno_args(depth=3))
    with pytest.raises(opzoo.ConfigError, match="spectral: 3 blocks is not a multiple of the base's 2"):
        map_base_values([n for n, _ in three.named_parameters()], block_lists(three), base, step=1)
    pot = opzoo.create_model("pot", **tiny_pot_args())
    with pytest.raises(opzoo.ConfigError, match=r"have no counterpart.*pos_embed.*patch_embed"):
        map_base_values([n for n, _ in pot.named_parameters()], {}, base, step=1)


def test_unmappable_model_fails_before_training(tmp_path, datasets):
    fit(flerm_run(tmp_path / "base", datasets, {"mode": "record", "warmup": 2, "every": 100}, steps=2))
    doc = flerm_run(tmp_path / "pot", datasets, {"mode": "match", "base": str(tmp_path / "base")},
                    model={"name": "pot", "args": tiny_pot_args()})
    with pytest.raises(opzoo.ConfigError, match="no counterpart in the FLeRM base record: pos_embed"):
        Trainer(parse_run_config(doc), show_progress=False)
    assert not (tmp_path / "pot" / "log.jsonl").exists()


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("{not json", "not valid JSON .*a FLeRM record cut short or damaged"),
    (json.dumps({"format": "other"}), "key 'format'"),
    (json.dumps({"format": "opzoo-flerm", "version": 2, "steps": [1, 5], "block_lists": {}, "base_lr": [1.0, 1.0],
                 "fslr": {"a": [1.0]}, "lr_scale": {"a": [1.0, 1.0]}}), r"fslr\['a'\] has 1 values for 2 steps"),
    (json.dumps({"format": "opzoo-flerm", "version": 2, "steps": [1], "block_lists": {}, "base_lr": [1.0],
                 "fslr": {"a": [-1.0]}, "lr_scale": {"a": [1.0]}}), "negative or non-finite"),
    (json.dumps({"format": "opzoo-flerm", "version": 2, "steps": [1], "block_lists": {}, "base_lr": [1.0],
                 "fslr": {"a": [1.0]}, "lr_scale": {"b": [1.0]}}), "'lr_scale' and 'fslr' name different tensors"),
    (json.dumps({"format": "opzoo-flerm", "version": 2, "steps": [1], "block_lists": {}, "base_lr": [],
                 "fslr": {"a": [1.0]}, "lr_scale": {"a": [1.0]}}), "'base_lr' must hold one finite lr"),
    (json.dumps({"format": "opzoo-flerm", "version": 2, "steps": [1], "fslr": {}}), "lacks key 'block_lists'"),
    (json.dumps({"format": "opzoo-flerm", "version": 1, "steps": [1], "fslr": {}}), "version-1 FLeRM record.*again"),
])
def test_bad_base_records_are_clear_errors(tmp_path, content, message):
    path = tmp_path / "rec.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(opzoo.ConfigError, match=message) as e:
        FslrRecord.load(path)
    assert "rec.json" in str(e.value)


def test_bad_hook_arguments_are_config_errors():
    with pytest.raises(opzoo.ConfigError, match="mode must be one of"):
        FlermHook(mode="copy")
    with pytest.raises(opzoo.ConfigError, match="needs args.base"):
        FlermHook(mode="match")
    with pytest.raises(opzoo.ConfigError, match="every must be an int >= 1"):
        FlermHook(every=0)
    with pytest.raises(opzoo.ConfigError, match="complex_dim"):
        FlermHook(complex_dim="imag")


def test_resumed_recording_equals_an_uninterrupted_one(tmp_path, datasets):
    args = {"mode": "record", "warmup": 3, "every": 3}
    import shutil

    ckpts = {"every": 3, "keep_last": 4, "resume": True}
    fit(flerm_run(tmp_path / "full", datasets, args, steps=10, checkpoint=ckpts))
    # the same run cut after its step-6 checkpoint (later checkpoints and the record gone), then resumed
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")
    for later in ("step-00000009", "step-00000010"):
        shutil.rmtree(tmp_path / "resumed" / "checkpoints" / later)
    shutil.rmtree(tmp_path / "resumed" / "flerm")
    fit(flerm_run(tmp_path / "resumed", datasets, args, steps=10, checkpoint=ckpts))
    a = json.loads((tmp_path / "full" / "flerm" / "record.json").read_text())
    b = json.loads((tmp_path / "resumed" / "flerm" / "record.json").read_text())
    assert a["steps"] == b["steps"] == [1, 4, 7, 10]
    for name in a["fslr"]:
        np.testing.assert_allclose(b["fslr"][name], a["fslr"][name], rtol=1e-5)


@pytest.mark.slow
def test_plot_command_writes_a_png(tmp_path, datasets, capsys):
    from opzoo.cli import main

    fit(flerm_run(tmp_path / "base", datasets, {"mode": "record", "warmup": 2, "every": 2}, steps=5))
    fit(flerm_run(tmp_path / "match", datasets, {"mode": "match", "warmup": 2, "every": 2,
                                                  "base": str(tmp_path / "base")}, steps=5))
    assert main(["flerm", "plot", str(tmp_path / "base"), "--out", str(tmp_path / "fig.png")]) == 0
    assert (tmp_path / "fig.png").stat().st_size > 10_000
    assert main(["flerm", "plot", str(tmp_path / "match")]) == 0
    assert (tmp_path / "match" / "flerm" / "match.png").is_file()
    assert main(["flerm", "plot", str(tmp_path)]) == 2
    assert "no FLeRM record" in capsys.readouterr().err


# ---- every registered model -------------------------------------------------------------------------
def tiny_args(name):
    if name.startswith("fno-"):
        return {"width": 8, "depth": 2, "modes": 3, "projection_dim": 8}
    return {**tiny_pot_args(channels=2, t_in=4), "mixer_args": {**tiny_pot_args()["mixer_args"]}}


def spatial_file(tmp_path, dims, channels=1):
    shape = {1: (6, 16, 6, 1), 2: (6, 16, 16, 6, channels), 3: (6, 8, 8, 8, 6, 1)}[dims]
    data = np.random.default_rng(dims).normal(size=shape).astype(np.float32) + 2.0
    return write_canonical(tmp_path / f"d{dims}.h5", data, [f"c{i}" for i in range(shape[-1])], "random")


# one FNO, the POT backbone, and AOT with MoE (every component family) by default; the rest in the slow tier
@pytest.mark.slow
@pytest.mark.parametrize("name", ["fno-2d", "dpot-ti", "aot-moe-pot-t",
                                  *(pytest.param(n, marks=pytest.mark.slow)
                                    for n in ("fno-1d", "fno-3d", "aot-pot-t", "nestor-ti"))])
def test_flerm_records_and_matches_on_small_versions_of_the_presets(tmp_path, name):
    dims = int(name[4]) if name.startswith("fno-") else 2
    data = {"d": spatial_file(tmp_path, dims, channels=1 if name.startswith("fno-") else 2)}
    res = {1: [16], 2: [16, 16], 3: [8, 8, 8]}[dims]
    model = {"name": name, "args": tiny_args(name)}
    extra = {"data": {"datasets": [{"name": "d", "path": str(data["d"])}], "resolution": res,
                      "max_test_trajectories": 1}}
    fit(flerm_run(tmp_path / "base", data, {"mode": "record", "warmup": 2, "every": 1}, steps=2, model=model, **extra))
    rec = json.loads((tmp_path / "base" / "flerm" / "record.json").read_text())
    assert rec["steps"] == [1, 2]
    assert rec["readout"], "the readout layer is found on every preset"
    last = {n: v[-1] for n, v in rec["fslr"].items()}
    assert all(np.isfinite(v) and v >= 0 for v in last.values())
    # the input layer, the readout and every block move the output; tensors that may not (experts and
    # routers not chosen by top-k on this batch, the unused classification head) may read 0
    first_layer = "lift.weight" if name.startswith("fno-") else "patch_embed.proj.0.weight"
    assert last[first_layer] > 0 and all(last[n] > 0 for n in rec["readout"])
    for path, count in rec["block_lists"].items():
        for i in range(count):
            assert any(v > 0 for n, v in last.items() if n.startswith(f"{path}.{i}.")), (path, i)
    trainer = fit(flerm_run(tmp_path / "match", data, {"mode": "match", "warmup": 2, "every": 1,
                                                        "base": str(tmp_path / "base")}, steps=2, model=model, **extra))
    assert all(np.isfinite(g["lr"]) and g["lr"] > 0 for g in trainer.optimizer.param_groups)


@pytest.mark.slow  # 5 s: every preset on meta
def test_every_registered_preset_groups_and_maps_onto_itself():
    """On the meta device (shapes only): one group per tensor and a record of the model maps onto it (The Well's
    presets: one per architecture and dimension, the others differ in channel counts only)."""
    from ..zoo.small_presets import all_presets

    for name in all_presets():
        with torch.device("meta"):
            model = opzoo.load(name)
        hook = FlermHook()
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        groups = hook.param_groups(model, [{"params": [p for _, p in named], "names": [n for n, _ in named],
                                            "lr_scale": 1.0, "weight_decay": 0.0}])
        assert [g["names"] for g in groups] == [[n] for n, _ in named], name
        assert all(g["weight_decay"] == 0.0 and g["lr_scale"] == 1.0 for g in groups)
        record = FslrRecord([1], {n: [1.0] for n, _ in named}, block_lists(model), name)
        mapped = map_base_values([n for n, _ in named], block_lists(model), record, step=1)
        assert set(mapped) == {n for n, _ in named}, name


# ---- the shipped configs ----------------------------------------------------------------------------
def test_shipped_configs_record_a_pot_then_match_a_wider_deeper_one(tmp_path):
    """configs/flerm-{record,match}.yaml as shipped (shortened, smaller data): x4 width, x2 depth mapped."""
    from opzoo.training.config import read_document

    root = Path(__file__).resolve().parents[2]
    for name in ("record", "match"):
        doc = read_document(root / "configs" / f"flerm-{name}.yaml")
        parse_run_config(doc, source=name)  # valid as shipped
        doc["output_dir"] = str(tmp_path / name)
        ds = doc["data"]["datasets"][0]
        ds.update(path=str(tmp_path / "ns.h5"), generate={**ds["generate"], "n": 8, "steps": 8})
        doc["training"].update(steps=3, batch_size=4, eval_every=None)
        doc["checkpoint"] = {"every": None, "resume": False}
        doc["evaluation"] = {"plots": False}
        doc["data"].update(horizon=1, max_test_trajectories=1)
        hook = doc["optimizer"]["hooks"][0]
        assert hook["name"] == "flerm" and hook["args"]["mode"] == name
        hook["args"].update(warmup=2, every=2)
        if name == "match":
            assert hook["args"]["base"] == "runs/flerm-base"
            hook["args"]["base"] = str(tmp_path / "record")
        trainer = fit(doc)
    base = json.loads((tmp_path / "record" / "flerm" / "record.json").read_text())
    match = json.loads((tmp_path / "match" / "flerm" / "match.json").read_text())
    assert base["block_lists"] == {"blocks": 2} and match["block_lists"] == {"blocks": 4}
    names = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert sorted(match["multipliers"]) == sorted(names)
    assert match["steps"] == base["steps"] == [1, 3]
    assert all(m > 0 and np.isfinite(m) for v in match["multipliers"].values() for m in v)
    # the multiplier of a deep block tensor is (base of its base block / 2) / its current value
    name = "blocks.3.mlp.fc1.weight" if "blocks.3.mlp.fc1.weight" in names else next(n for n in names if n.startswith("blocks.3."))
    base_name = "blocks.1." + name.split(".", 2)[2]
    expected = base["fslr"][base_name][0] / 2 / match["fslr"][name][0]
    assert match["multipliers"][name][0] == pytest.approx(min(max(expected, 1e-3), 1e3), rel=1e-9)


# ---- composition with other hooks ---------------------------------------------------------------------
class MergeAllGroups(opzoo.training.OptimizerHook):
    """A hook that puts every tensor back into one group (FLeRM cannot work after it)."""

    def param_groups(self, model, groups):
        return [{"params": [p for g in groups for p in g["params"]], "names": [n for g in groups for n in g["names"]],
                 "lr_scale": 1.0}]


@pytest.fixture
def merge_hook():
    registry = opzoo.get_registry()
    with registry.owned_by("tests-flerm"):
        registry.register_optimizer_hook("test-merge-all", MergeAllGroups)
    yield
    registry.forget("tests-flerm")


def test_flerm_composes_with_mup_fno_and_refuses_a_merging_hook(tmp_path, datasets, merge_hook):
    record = {"name": "flerm", "args": {"mode": "record", "warmup": 2, "every": 2}}
    mup = {"name": "mup-fno", "args": {"base_modes": 2}}
    for order, hooks in (("mup-first", [mup, record]), ("flerm-first", [record, mup])):
        trainer = fit(flerm_run(tmp_path / order, datasets, {}, steps=3, optimizer={"lr": 3e-3, "hooks": hooks}))
        groups = trainer.optimizer.param_groups
        assert all(len(g["names"]) == 1 for g in groups)
        spectral = [g for g in groups if g["names"][0].startswith("spectral.")]
        assert spectral and all(g["lr_scale"] == pytest.approx(math.sqrt(math.log(4) / math.log(9))) for g in spectral)
        rec = json.loads((tmp_path / order / "flerm" / "record.json").read_text())
        assert all(v[-1] > 0 for n, v in rec["fslr"].items() if n.startswith("spectral."))
    a, b = (json.loads((tmp_path / o / "flerm" / "record.json").read_text())["fslr"] for o in ("mup-first", "flerm-first"))
    for name in a:  # the lr = 1 update divides the mup-fno lr_scale out: the same values either way
        np.testing.assert_allclose(b[name], a[name], rtol=1e-6)
    doc = flerm_run(tmp_path / "merged", datasets, {}, steps=3,
                    optimizer={"lr": 3e-3, "hooks": [record, {"name": "test-merge-all"}]})
    with pytest.raises(opzoo.ConfigError, match="flerm needs one parameter group per tensor.*merged"):
        fit(doc)
    assert not (tmp_path / "merged" / "flerm" / "record.json").exists()


# ---- composition with mup-fno, the base lr, clamping ------------------------------------------------------
def test_matching_across_mup_fno_reproduces_the_base_function_space_lr_per_tensor(tmp_path, datasets):
    """Base: mup-fno at its own modes (c = 1). Scaled run: the same FNO with mup-fno at base_modes 2
    (spectral lr x c = sqrt(log 4 / log 9) = 0.63, init unscaled so that only the lr differs). Matching
    must undo c on the spectral weights (multiplier 1/c) and leave the rest at 1, so that every tensor's
    function-space lr per update, ``fslr x lr``, is the base's; the old hook left the spectral weights
    at c x the base's."""
    c = math.sqrt(math.log(4) / math.log(9))
    args = {"warmup": 4, "every": 3}
    base_hooks = [{"name": "mup-fno", "args": {"base_modes": 3}}, {"name": "flerm", "args": {"mode": "record", **args}}]
    fit(flerm_run(tmp_path / "base", datasets, {}, steps=7, optimizer={"lr": 3e-3, "hooks": base_hooks}))
    match_hooks = [{"name": "mup-fno", "args": {"base_modes": 2, "scale_init": False}},
                   {"name": "flerm", "args": {"mode": "match", "base": str(tmp_path / "base"), **args}}]
    trainer = fit(flerm_run(tmp_path / "match", datasets, {}, steps=7, optimizer={"lr": 3e-3, "hooks": match_hooks}))
    base = json.loads((tmp_path / "base" / "flerm" / "record.json").read_text())
    match = json.loads((tmp_path / "match" / "flerm" / "match.json").read_text())
    assert match["steps"] == base["steps"] == [1, 4, 7]
    spectral = [n for n in match["fslr"] if n.startswith("spectral.")]
    assert spectral and all(match["lr_scale"][n] == pytest.approx([c] * 3) for n in spectral)
    assert all(base["lr_scale"][n] == pytest.approx([1.0] * 3) for n in base["fslr"])
    for name, mults in match["multipliers"].items():
        if base["fslr"][name][0] == 0:
            continue
        expected = 1 / c if name in spectral else 1.0
        assert all(m == pytest.approx(expected, rel=0.05) for m in mults), (name, mults)
        # the update measured at steps 4 and 7 ran with the multipliers of the measurement before
        for j in (1, 2):
            lr_used = 3e-3 * match["lr_scale"][name][j] * mults[j - 1]
            actual, wanted = match["fslr"][name][j] * lr_used, base["fslr"][name][j] * 3e-3
            assert actual == pytest.approx(wanted, rel=0.05), (name, j, actual, wanted)
    spectral_groups = [g for g in trainer.optimizer.param_groups if g["names"][0] in spectral]
    assert all(g["lr"] == pytest.approx(3e-3, rel=0.05) for g in spectral_groups)  # c x 1/c


def test_a_record_made_at_another_base_lr_is_refused_unless_allowed(tmp_path, datasets):
    fit(flerm_run(tmp_path / "base", datasets, {"mode": "record", "warmup": 2, "every": 3}, steps=4))
    doc = flerm_run(tmp_path / "other", datasets, {"mode": "match", "warmup": 2, "every": 3, "base": str(tmp_path / "base")},
                    steps=4, optimizer={"lr": 1e-3})
    doc["optimizer"]["hooks"][0]["args"]["base"] = str(tmp_path / "base")
    with pytest.raises(opzoo.ConfigError, match=r"made at base lr 0\.003 .* this run's base lr is 0\.001.*allow_other_base_lr"):
        fit(doc)
    assert not (tmp_path / "other" / "flerm" / "match.json").exists()  # refused before the first update
    doc["optimizer"]["hooks"][0]["args"]["allow_other_base_lr"] = True
    doc["output_dir"] = str(tmp_path / "other-allowed")  # the refused run's directory holds its config
    fit(doc)
    rec = json.loads((tmp_path / "other-allowed" / "flerm" / "match.json").read_text())
    assert rec["base_lr"] == [1e-3, 1e-3] and rec["settings"]["allow_other_base_lr"] is True
    with pytest.raises(opzoo.ConfigError, match="allow_other_base_lr must be true or false"):
        FlermHook(mode="match", base="x", allow_other_base_lr="yes")


def test_clamped_multipliers_are_reported_in_the_log_and_the_record(tmp_path, datasets, caplog):
    fit(flerm_run(tmp_path / "base", datasets, {"mode": "record", "warmup": 2, "every": 3}, steps=4))
    path = tmp_path / "base" / "flerm" / "record.json"
    doc = json.loads(path.read_text())
    doc["fslr"]["lift.weight"] = [v * 1e5 for v in doc["fslr"]["lift.weight"]]
    path.write_text(json.dumps(doc))
    with caplog.at_level("WARNING", logger="opzoo_mup.flerm"):
        fit(flerm_run(tmp_path / "match", datasets, {"mode": "match", "warmup": 2, "every": 3, "max_multiplier": 100.0,
                                                      "base": str(tmp_path / "base")}, steps=4))
    rec = json.loads((tmp_path / "match" / "flerm" / "match.json").read_text())
    assert rec["multipliers"]["lift.weight"][0] == 100.0
    assert rec["clamped"] and rec["clamped"][0]["step"] == 1
    raw = rec["clamped"][0]["raw"]["lift.weight"]
    assert raw > 1e4  # ~1e5: the base is 1e5 x its own value
    assert any("clamped" in r.getMessage() and "lift.weight" in r.getMessage() for r in caplog.records)
