import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import opzoo
from opzoo.errors import ConfigError, HubError, WeightsError

from ..hub_cache import COMMIT, place_in_hf_cache, repo_files
from .subprocess_utils import run_python


@pytest.fixture
def model():
    torch.manual_seed(0)
    return opzoo.load("simple-op")


def test_save_then_load_is_bit_identical(model, tmp_path):
    x = torch.randn(2, 16, 16, 4, 1)
    model.save_pretrained(tmp_path / "repo")
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["README.md", "config.json", "model.safetensors"]
    for source in (tmp_path / "repo", f"local-dir:{tmp_path / 'repo'}", str(tmp_path / "repo")):
        loaded = opzoo.load(source) if not isinstance(source, type(tmp_path)) else opzoo.from_pretrained(source)
        assert torch.equal(model.eval()(x), loaded(x))
        assert loaded.config == model.config and loaded.preset_name == "simple-op"


def test_readme_is_the_rendered_model_card(model, tmp_path):
    from huggingface_hub import ModelCard

    model.save_pretrained(tmp_path)
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.library_name == "opzoo" and "opzoo" in card.data.tags
    n = sum(p.numel() for p in model.parameters())
    assert f"{n:,}" in card.text and "${" not in card.text
    for section in ("## Description", "## Architecture", "## Parameters", "## Training data", "## Evaluation",
                    "## Intended use and limits", "## Citation", "## Usage"):
        assert section in card.text


def test_config_json_layout(model, tmp_path):
    model.save_pretrained(tmp_path)
    doc = json.loads((tmp_path / "config.json").read_text())
    assert set(doc) == {"architecture", "opzoo_version", "model_args", "pretrained_cfg", "checksums"}
    assert doc["architecture"] == "simple" and doc["model_args"]["width"] == 32
    assert set(doc["checksums"]) == {"model.safetensors"}


def _without_checksums(repo):
    """As a repo saved before checksums were recorded: the checks behind the checksum still apply."""
    doc = json.loads((repo / "config.json").read_text())
    del doc["checksums"]
    (repo / "config.json").write_text(json.dumps(doc))


def _params(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_missing_extra_and_misshaped_tensors_are_all_listed_and_change_nothing(model, tmp_path):
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["head.bias"], weights["lift.bias"]
    weights["surplus.weight"] = torch.zeros(3)
    weights["head.weight"] = torch.zeros(5, 32)
    save_file(weights, tmp_path / "model.safetensors")
    target = opzoo.load("simple-op")
    before = _params(target)
    with pytest.raises(WeightsError) as info:
        opzoo.model_io.weights.load_weights(target, tmp_path / "model.safetensors")
    message = str(info.value)
    assert str(tmp_path / "model.safetensors") in message
    assert "missing tensors (2): head.bias, lift.bias" in message
    assert "unexpected tensors (1): surplus.weight" in message
    assert "mis-shaped tensor head.weight: file [5, 32], model [1, 32]" in message
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())
    with pytest.raises(WeightsError):
        opzoo.from_pretrained(tmp_path)


def test_non_finite_weights_are_refused(model, tmp_path):
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["head.weight"][0, 0] = float("nan")
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(WeightsError, match="model.safetensors: sha256 .* does not match"):
        opzoo.from_pretrained(tmp_path)
    _without_checksums(tmp_path)
    with pytest.raises(WeightsError, match="non-finite values in head.weight"):
        opzoo.from_pretrained(tmp_path)


def test_truncated_weights_file(model, tmp_path):
    model.save_pretrained(tmp_path)
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    _without_checksums(tmp_path)
    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        opzoo.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["model_args"].update(width="32"), r"model_args.width: expected int, got '32'"),
        (lambda d: d["model_args"].update(wdth=32), r"unknown field\(s\) 'wdth'"),
        (lambda d: d.update(opzoo_version="7.0.0"), r"written by opzoo 7.0.0, a newer major version"),
    ],
)
def test_bad_config_json_is_refused_naming_the_file(model, tmp_path, edit, message):
    model.save_pretrained(tmp_path)
    doc = json.loads((tmp_path / "config.json").read_text())
    edit(doc)
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=message) as info:
        opzoo.from_pretrained(tmp_path)
    assert "config.json" in str(info.value)


def test_a_failed_save_leaves_the_previous_repo_intact(model, tmp_path, monkeypatch):
    model.save_pretrained(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    other = opzoo.load("simple-op")

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(opzoo.model_io.repo_dir, "write_config", fail)
    with pytest.raises(OSError, match="disk full"):
        other.save_pretrained(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_not_a_repo(tmp_path):
    with pytest.raises(HubError, match="has no config.json"):
        opzoo.load(f"local-dir:{tmp_path}")
    with pytest.raises(HubError, match="is not a directory"):
        opzoo.load(f"local-dir:{tmp_path / 'nope'}")
    with pytest.raises(opzoo.UnknownNameError, match="not a repo id"):
        opzoo.from_pretrained("not a repo id")
    with pytest.raises(HubError, match="not a Hub repo id"):
        opzoo.from_pretrained("org/not a repo")


def test_preset_without_weights_says_so():
    with pytest.raises(HubError, match="preset 'simple-op' has no published weights"):
        opzoo.load("simple-op", pretrained=True)



def test_a_cached_repo_loads_offline_with_revision(model, tmp_path):
    model.save_pretrained(tmp_path / "repo")
    cache = tmp_path / "hf-cache"
    commit = COMMIT
    place_in_hf_cache(cache, "someorg/simple-demo", repo_files(tmp_path / "repo"))
    place_in_hf_cache(cache, "someorg/simple-demo", repo_files(tmp_path / "repo"), ref="v1")
    x = torch.randn(1, 16, 16, 4, 1)
    torch.save(x, tmp_path / "x.pt")
    expected = model.eval()(x)
    torch.save(expected, tmp_path / "y.pt")
    code = f"""
import torch, opzoo
x = torch.load({str(tmp_path / 'x.pt')!r}, weights_only=True)
y = torch.load({str(tmp_path / 'y.pt')!r}, weights_only=True)
for name in ("hf-hub:someorg/simple-demo", "hf-hub:someorg/simple-demo@v1"):
    m = opzoo.load(name)
    assert torch.equal(m(x), y), name
m = opzoo.from_pretrained("someorg/simple-demo", revision="{commit}")
assert torch.equal(m(x), y)
print("OK")
"""
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf-home")}
    result = run_python(code, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"


def test_an_uncached_repo_offline_says_how_to_get_it(tmp_path):
    code = """
import opzoo
try:
    opzoo.load("hf-hub:someorg/not-cached")
except opzoo.HubError as e:
    print(e)
"""
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path), "HF_HOME": str(tmp_path / "home")}
    result = run_python(code, env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "config.json of someorg/not-cached is not in the Hugging Face cache" in out
    assert "HF_HUB_OFFLINE=1" in out and "hf download someorg/not-cached" in out


def test_push_to_hub_uploads_the_saved_repo(model, monkeypatch):
    """The Hub is not reachable here: check what push_to_hub hands to huggingface_hub's HfApi."""
    calls = {}

    class RecordingApi:
        def __init__(self, token=None):
            calls["token"] = token

        def create_repo(self, repo_id, private=None, exist_ok=False):
            calls["create"] = (repo_id, private, exist_ok)

        def upload_folder(self, repo_id, folder_path, **kwargs):
            calls["files"] = sorted(p.name for p in __import__("pathlib").Path(folder_path).iterdir())
            calls["repo"] = repo_id
            return "commit-info"

    monkeypatch.setattr(opzoo.model_io.hub, "HfApi", RecordingApi)
    monkeypatch.setattr(opzoo.model_io.hub, "hub_unreachable", lambda wait=None: None)  # as if the Hub answered
    assert model.push_to_hub("me/simple", token="tok", private=True) == "commit-info"
    assert calls == {"token": "tok", "create": ("me/simple", True, True),
                     "files": ["README.md", "config.json", "model.safetensors"], "repo": "me/simple"}
