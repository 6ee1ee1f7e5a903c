"""Provenance rows and load checks (opzoo.Fact, opzoo.PretrainedCheck): a preset's checks run on the real
files before ``load(pretrained=True)`` returns, a failing one refuses with nothing loaded, ``opzoo verify``
prints every check, ``opzoo info`` shows the rows; a pretrained load returns eval mode."""

import json

import pytest
import torch

import opzoo
from opzoo.cli import main as opzoo_main
from opzoo.registry.provenance import snapshot_revision


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(3)
    model = opzoo.load("simple-op")
    model.save_pretrained(tmp_path / "repo")
    (tmp_path / "repo" / "notes.json").write_text(json.dumps({"trained_by": "v1"}))
    return model, tmp_path / "repo"


def trained_by_v1(a: opzoo.PretrainedArtifacts) -> str:
    notes = json.loads(a.files["notes.json"].read_text())
    if notes["trained_by"] != "v1":
        raise opzoo.CheckFailed(f"notes.json says {notes['trained_by']!r}, the preset assumes 'v1'")
    return f"trained_by {notes['trained_by']}; {len(a.state_dict)} tensors; width {a.model_config.width}"


def weights_small(a: opzoo.PretrainedArtifacts) -> str:
    biggest = max(float(v.abs().max()) for v in a.state_dict.values())
    if biggest > 100:
        raise opzoo.CheckFailed(f"a weight of {biggest:g}")
    return f"largest weight {biggest:.3g}"


@pytest.fixture
def preset(saved):
    registry = opzoo.get_registry()
    _, repo = saved
    with registry.owned_by("tests"):
        registry.register_model(
            "test-checked", backbone="simple", args=opzoo.load("simple-op").config.to_dict(),
            pretrained=opzoo.PretrainedSource(directory=repo, extra_files=("notes.json",), checks=(
                opzoo.PretrainedCheck("trained by v1", trained_by_v1),
                opzoo.PretrainedCheck("weights small", weights_small))),
            provenance=[opzoo.Fact("trainer", "v1", "https://example.org/notes @ abc1234"),
                        opzoo.Fact("license", "not stated", "https://example.org/readme", verified=False,
                                   alternatives=("MIT on the Hub card",))])
    yield "test-checked"
    registry.forget("tests")


def test_checks_pass_and_the_model_returns_in_eval_mode(saved, preset):
    model, _ = saved
    loaded = opzoo.load(preset, pretrained=True)
    assert not loaded.training  # pretrained: inference at once, as from_pretrained
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())
    assert opzoo.load(preset).training  # random init stays in training mode, like any new module


def test_a_failing_check_refuses_naming_it_and_loads_nothing(saved, preset):
    _, repo = saved
    (repo / "notes.json").write_text(json.dumps({"trained_by": "v2"}))
    with pytest.raises(opzoo.CheckFailed) as info:
        opzoo.load(preset, pretrained=True)
    assert "test-checked: the published weights fail 1 load check(s)" in str(info.value)
    assert "[trained by v1] notes.json says 'v2'" in str(info.value) and "weights small" not in str(info.value)
    (repo / "notes.json").write_text("{")  # a check that cannot run fails with the reason, it confirms nothing
    with pytest.raises(opzoo.CheckFailed, match=r"\[trained by v1\] could not run on these files \(JSONDecodeError"):
        opzoo.load(preset, pretrained=True)


def test_verify_prints_every_check_and_exits_1_on_a_failure(saved, preset, capsys):
    _, repo = saved
    assert opzoo_main(["verify", preset]) == 0
    out = capsys.readouterr().out
    assert "test-checked / trained by v1: trained_by v1" in out and "weights small: largest weight" in out
    assert "3 passed, 0 failed, 0 not run" in out
    (repo / "notes.json").write_text(json.dumps({"trained_by": "v2"}))
    assert opzoo_main(["verify", preset, "--json"]) == 1
    rows = {r["check"]: r["status"] for r in json.loads(capsys.readouterr().out)}
    assert rows == {"weights fit the preset": "passed", "trained by v1": "FAILED", "weights small": "passed"}



def test_verify_fails_all_nan_weights_that_every_load_refuses(saved, preset, capsys):
    """Issue 49: verify passed all-NaN weights that every load refuses."""
    from safetensors.torch import load_file, save_file

    _, repo = saved
    weights = load_file(str(repo / "model.safetensors"))
    save_file({k: torch.full_like(v, float("nan")) for k, v in weights.items()}, str(repo / "model.safetensors"))
    assert opzoo_main(["verify", preset, "--json"]) == 1
    rows = {r["check"]: (r["status"], r["message"]) for r in json.loads(capsys.readouterr().out)}
    assert rows["weights fit the preset"][0] == "FAILED" and "non-finite values in" in rows["weights fit the preset"][1]
    with pytest.raises(opzoo.WeightsError, match="non-finite values in"):
        opzoo.load(preset, pretrained=True)


def test_info_shows_provenance_and_checks(preset, capsys):
    assert opzoo_main(["info", preset]) == 0
    out = capsys.readouterr().out
    assert "load checks: trained by v1; weights small" in out
    assert "trainer: v1 [verified; https://example.org/notes @ abc1234]" in out
    assert "license: not stated [UNVERIFIED; https://example.org/readme; alternatives: MIT on the Hub card]" in out
    assert opzoo_main(["info", preset, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["provenance"][1]["alternatives"] == ["MIT on the Hub card"] and doc["load_checks"][0] == "trained by v1"


def test_facts_need_a_source_and_sources_take_only_checks():
    with pytest.raises(ValueError, match="every fact needs a source"):
        opzoo.Fact("x", "y", "")
    with pytest.raises(ValueError, match="alternatives are for unverified facts"):
        opzoo.Fact("x", "y", "z", alternatives=("w",))
    with pytest.raises(TypeError, match="expected opzoo.PretrainedCheck"):
        opzoo.PretrainedSource(repo_id="a/b", checks=(lambda a: "ok",))
    registry = opzoo.Registry()
    with pytest.raises(TypeError, match="provenance rows must be opzoo.Fact"):
        registry.register_model("m", backbone="simple", provenance=[("a", "b")])


def test_snapshot_revision_reads_the_cache_path(tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    assert snapshot_revision(tmp_path / "models--a--b" / "snapshots" / commit / "model.safetensors") == commit
    assert snapshot_revision(tmp_path / "repo" / "model.safetensors") is None


