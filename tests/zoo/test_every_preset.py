"""Every registered preset, timm-style: it builds (on ``meta``: no memory, no weights), ``opzoo info``
prints it, and at small dims it saves, reloads and computes the same function. Presets whose weights
ship inside a package load from that directory as a saved repo too (their ``config.json`` still
reads)."""

from __future__ import annotations

import json

import pytest
import torch

import opzoo
from opzoo.cli import main

from .small_presets import all_presets, small_input, small_model, small_overrides
from .test_fine_tuning_groups import check_no_decay_and_layer_ids

PRESETS = opzoo.list_models()
# at small dims, The Well's and PDE-Transformer's presets beyond one per backbone and spatial dims are the same
# network with other channel counts and stats: those run in the slow tier
REPRESENTED = set(all_presets())
SMALL = [n if n in REPRESENTED else pytest.param(n, marks=pytest.mark.slow) for n in PRESETS]


def _kind(name: str) -> tuple[str, str]:
    preset = opzoo.get_registry().preset(name)
    src = preset.pretrained
    return preset.backbone, "none" if src is None else "hub" if src.repo_id is not None else "package"


# `opzoo info NAME` as text, for one preset of each backbone and kind of weights source (the text is rendered from the
# same document `--json` gives every preset below)
TEXT_INFO = {_kind(n): n for n in reversed(PRESETS)}.values()


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", SMALL)  # the rest of The Well's, PDE-Transformer's and MORPH's in the slow tier; their
# plugins' own tests build every one of them on meta with its published parameter count
def test_preset_builds_on_meta_and_opzoo_info_prints_it(name, capsys):
    with torch.device("meta"):
        model = opzoo.load(name)
    assert isinstance(model, opzoo.Backbone) and model.preset_name == name
    assert all(p.is_meta for p in model.parameters())
    check_no_decay_and_layer_ids(name, model)
    n = n_params(model)
    assert n > 0
    assert main(["info", name, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["name"], doc["parameters"]) == (name, n)
    assert doc["config"] == model.config.to_dict()
    if name not in TEXT_INFO:
        return
    assert main(["info", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name}  ({doc['backbone']}, from {doc['plugin']})")
    assert f"parameters: {n:,}" in out
    # where the weights come from: the Hub repo, file and revision, the package (and version) they ship in, or the
    # page a file is downloaded from by hand
    weights = next(line for line in out.splitlines() if line.startswith("  weights:"))
    src = opzoo.get_registry().preset(name).pretrained
    if src is None:
        assert "none published" in weights
    elif src.repo_id is not None:
        assert f"hf-hub:{src.repo_id} file {src.filename or 'model.safetensors'}, revision" in weights
    elif src.download_page is not None:  # a file downloaded by hand: which file, where, and how to load it
        assert f"file {src.filename} of {src.download_page}, downloaded by hand" in weights
        assert "checkpoint_path=FILE" in weights
    else:
        assert f"package {doc['plugin']} " in weights and str(src.directory) in weights
    if src is not None:  # every pretrained preset recommends a fine-tuning lr, with its source
        lr = opzoo.get_registry().preset(name).pretrained_cfg["finetune_lr"]
        assert 0 < lr < 1 and f"finetune lr: {lr:g} (" in out


@pytest.mark.parametrize("name", SMALL)
def test_small_preset_saves_reloads_and_gives_the_same_output(name, tmp_path):
    model = small_model(name).eval()
    with torch.device("meta"):  # the meta build is the same architecture as the real one
        assert n_params(opzoo.load(name, **small_overrides(name))) == n_params(model)
    x, _ = small_input(model)
    with torch.no_grad():
        want = model(x)
    model.save_pretrained(tmp_path / name)
    again = opzoo.load(str(tmp_path / name))
    assert type(again) is type(model) and again.config == model.config
    assert again.preset_name == name and again.pretrained_cfg == model.pretrained_cfg
    with torch.no_grad():
        got = again(x)
    assert torch.equal(got, want)


SHIPPED = [n for n in PRESETS
           if (src := opzoo.get_registry().preset(n).pretrained) is not None and src.directory is not None]


def test_some_presets_ship_weights():
    assert {"dpot-micro", "aot-pot-micro"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_weights_load_by_name_and_as_a_saved_repo(name):
    """The shipped ``config.json`` files were written before the core moved into layers/ and models/:
    they must still load, by preset name and as a plain directory, to the same function."""
    by_name = opzoo.load(name, pretrained=True).eval()
    directory = opzoo.get_registry().preset(name).pretrained.directory
    as_repo = opzoo.from_pretrained(str(directory))
    assert as_repo.config == by_name.config
    x, _ = small_input(by_name, batch=1)
    with torch.no_grad():
        assert torch.equal(as_repo(x), by_name(x))


def _loss_and_grads(model, x, y):
    torch.manual_seed(7)  # routers with noise draw the same in both runs
    loss = torch.nn.functional.mse_loss(model(x), y)
    params = [p for p in model.parameters() if p.requires_grad]
    return loss, torch.autograd.grad(loss, params, allow_unused=True)


@pytest.mark.parametrize("name", SMALL)
def test_features_head_intermediates_and_grad_checkpointing(name):
    """timm's model API on every preset: ``forward_head(forward_features(x), x)`` is ``model(x)``; the last
    per-block latent is the features; gradient checkpointing gives the same loss, gradients and batch-norm running
    statistics, bit for bit."""
    model = small_model(name).eval()
    x, y = small_input(model)
    with torch.no_grad():
        out = model(x)
        features = model.forward_features(x)
        assert torch.equal(model.forward_head(features, x), out)
        try:
            last, kept = model.forward_intermediates(x, indices=1)
        except opzoo.ConfigError as e:  # The Well's published FNO/TFNO: blocks that do not feed the output
            assert "do not feed its output" in str(e) and model.config.fourier_blocks == "dropped"
        else:
            assert torch.equal(last, features) and len(kept) == 1 and torch.equal(kept[0], features)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    loss, grads = _loss_and_grads(model, x, y)
    after = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(before)  # batch norms' running statistics as they were before the first step
    model.set_grad_checkpointing(True)
    loss_ckpt, grads_ckpt = _loss_and_grads(model, x, y)
    assert torch.equal(loss, loss_ckpt)
    # a recompute in backward counts no batch twice: the running statistics are those of one step
    assert all(torch.equal(v, after[k]) for k, v in model.state_dict().items())
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(grads, grads_ckpt))
