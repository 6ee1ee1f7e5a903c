"""Issue 69: a load holds the weights once. The model is built with its parameters on the meta device and takes the
tensors read as its parameters (opzoo.model_io.weights); the tensors alive at once during a load stay within 1.3x the
weights (the resident memory of the largest presets' loads: docs/benchmarks.md, "Memory of a load")."""

import pytest
import torch
from safetensors.torch import save_file

import opzoo
from opzoo.model_io.weights import load_state_dict_strict, parameters_on_meta, read_state_dict
from opzoo.training.memory import PeakTensorMemory, tensor_bytes


def test_safetensors_are_read_exactly_and_aligned(tmp_path):
    tensors = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16), "c": torch.tensor([True, False]),
               "d": torch.zeros(0, 4), "e": torch.arange(5), "f": torch.randn(2, 3, dtype=torch.float64)[:, 1:], "g": torch.randn(4, 3, dtype=torch.complex64)}
    save_file({k: v.contiguous() for k, v in tensors.items()}, tmp_path / "x.safetensors")
    read = read_state_dict(tmp_path / "x.safetensors")
    assert set(read) == set(tensors)
    for k, v in tensors.items():
        assert read[k].dtype == v.dtype and torch.equal(read[k], v)
        assert read[k].data_ptr() % 64 == 0 or read[k].numel() == 0


def test_a_model_built_on_meta_takes_the_tensors_read_as_its_parameters_and_stays_tied():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)
            self.b.weight = self.a.weight
            self.register_buffer("table", torch.arange(3.0), persistent=False)

    with parameters_on_meta():
        model = Tied()
    assert all(p.is_meta for p in model.parameters()) and not model.table.is_meta
    weights = {"a.weight": torch.randn(4, 4), "a.bias": torch.randn(4), "b.weight": torch.randn(4, 4),
               "b.bias": torch.randn(4)}
    weights["b.weight"] = weights["a.weight"]
    load_state_dict_strict(model, weights, "test")
    assert model.a.weight is model.b.weight and model.a.weight.data_ptr() == weights["a.weight"].data_ptr()
    assert torch.equal(model.table, torch.arange(3.0))
    with parameters_on_meta():
        other = Tied()
    with pytest.raises(opzoo.WeightsError, match="missing"):
        load_state_dict_strict(other, {"a.weight": torch.randn(4, 4)}, "test")
    assert all(p.is_meta for p in other.parameters())  # nothing loaded


@pytest.mark.parametrize("name", ["dpot-micro", "poseidon-micro", "gphyt-micro"])
def test_a_load_holds_the_weights_once(name, tmp_path):
    """The tensors alive at once while a saved repo and a preset's shipped weights load: at most 1.3x the weights (a
    random initialization beside the tensors read would be 2x); the loaded model computes what the saved one did."""
    torch.manual_seed(0)
    model = opzoo.load(name)
    model.save_pretrained(tmp_path / "repo")
    weights = tensor_bytes(model.state_dict().values())
    with PeakTensorMemory() as mode:
        loaded = opzoo.load(str(tmp_path / "repo"))
    assert mode.peak <= 1.3 * weights, f"{name}: {mode.peak:,} B of tensors at once for {weights:,} B of weights"
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    with PeakTensorMemory() as mode:
        opzoo.load(name, pretrained=True)
    assert mode.peak <= 1.3 * weights, f"{name} (shipped weights): {mode.peak:,} B for {weights:,} B"


def test_an_upstream_safetensors_file_is_read_once_through_its_converter(tmp_path):
    """checkpoint_path= with The Well's own safetensors file (other tensor names: its converter reads it): the names
    are told from the header, and the file's tensors are read once (reading it whole to look at its names, then again
    in the converter, held it twice)."""
    from tests.zoo.test_conformance import TestWellUNetConvNext

    suite = TestWellUNetConvNext()
    model = suite.tiny_model()
    path = suite.write_upstream(model, tmp_path / "upstream", lambda state: None)
    preset = suite.table().variants[0].name
    weights = tensor_bytes(model.state_dict().values())
    with PeakTensorMemory() as mode:
        loaded = opzoo.load(preset, checkpoint_path=path, **suite.tiny)
    assert mode.peak <= 1.3 * weights, f"{mode.peak:,} B of tensors at once for {weights:,} B of weights"
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
