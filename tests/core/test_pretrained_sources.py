"""Preset weights from a directory or a package resource (PretrainedSource(directory=...)), loaded by the
code that loads a Hub repo's files; the micro presets' weights ship inside their plugins and load offline."""

import zipfile
from importlib.resources import files

import pytest
import torch

import opzoo
from opzoo.errors import HubError


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(3)
    model = opzoo.load("simple-op")
    model.save_pretrained(tmp_path / "repo")
    return model, tmp_path / "repo"


@pytest.fixture
def preset():
    registry = opzoo.get_registry()

    def register(source):
        with registry.owned_by("tests"):
            registry.register_model("test-dir-weights", backbone="simple", args=opzoo.load("simple-op").config.to_dict(),
                                    pretrained=source)
        return "test-dir-weights"

    yield register
    registry.forget("tests")


def _same_weights(a, b):
    return all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())


def test_a_local_directory_source_loads_like_a_hub_repo(saved, preset):
    model, repo = saved
    name = preset(opzoo.PretrainedSource(directory=repo))
    assert _same_weights(opzoo.load(name, pretrained=True), model)
    assert not _same_weights(opzoo.load(name), model)


def test_a_source_inside_a_zip_is_extracted_for_loading(saved, preset, tmp_path):
    model, repo = saved
    with zipfile.ZipFile(tmp_path / "weights.zip", "w") as z:
        z.write(repo / "model.safetensors", "pkg/weights/model.safetensors")
    name = preset(opzoo.PretrainedSource(directory=zipfile.Path(tmp_path / "weights.zip", "pkg/weights/")))
    assert _same_weights(opzoo.load(name, pretrained=True), model)


def test_a_missing_weights_file_names_the_directory(preset, tmp_path):
    name = preset(opzoo.PretrainedSource(directory=tmp_path / "nowhere"))
    with pytest.raises(HubError, match=r"pretrained weights 'model.safetensors': the directory .*nowhere does not exist"):
        opzoo.load(name, pretrained=True)


def test_a_source_is_a_hub_repo_or_a_directory():
    with pytest.raises(ValueError, match="exactly one of repo_id"):
        opzoo.PretrainedSource()
    with pytest.raises(ValueError, match="exactly one of repo_id"):
        opzoo.PretrainedSource("org/repo", directory="x")
    with pytest.raises(ValueError, match="revision applies to Hub repos only"):
        opzoo.PretrainedSource(directory="x", revision="v1")
    assert opzoo.PretrainedSource("org/repo", revision="v1").location == "hf-hub:org/repo@v1"
    src = opzoo.PretrainedSource.package("opzoo_aot", "pretrained/aot-pot-micro")
    assert src.directory == files("opzoo_aot") / "pretrained" / "aot-pot-micro"




