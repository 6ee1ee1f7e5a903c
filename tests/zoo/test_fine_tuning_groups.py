"""Fine-tuning groups (timm's habits): what must not decay, layer ids for layer-wise lr decay, the optimizer groups
built from them, and the resume refusal when the grouping changed."""

from __future__ import annotations

import re

import pytest
import torch

import opzoo
from opzoo.training.checkpoint import CheckpointReadError, optimizer_from_flat, optimizer_to_flat
from opzoo.training.optim import fine_tuning_groups


def check_no_decay_and_layer_ids(name: str, model) -> None:
    """What must not decay and the layer ids of preset ``name`` (built on meta by tests/zoo/test_every_preset.py)."""
    params = dict(model.named_parameters())
    exempt = model.no_weight_decay()
    assert exempt <= set(params), name
    assert {n for n, p in params.items() if p.ndim <= 1} <= exempt, name
    assert any(p.ndim >= 2 for n, p in params.items() if n not in exempt), name  # the matrices decay
    if "pos_embed" in params:
        assert "pos_embed" in exempt, name
    n_layers = model.num_layers()
    ids = {n: model.layer_id(n) for n in params}
    assert set(ids.values()) <= set(range(n_layers)), name
    assert n_layers >= 3 and set(range(1, n_layers - 1)) <= set(ids.values()), f"{name}: a block with no parameter"
    blocks = model.group_matcher()["blocks"]
    if isinstance(blocks, str):  # "blocks.<i>." style: layer i + 1, in order
        for n, layer in ids.items():
            m = re.match(blocks, n)
            if m:
                assert layer == int(m.group(1)) + 1, (name, n)


def test_groups_split_decay_and_scale_the_learning_rate_by_depth():
    torch.manual_seed(0)
    model = opzoo.load("dpot-micro")
    names = [n for n, _ in model.named_parameters()]
    plain = fine_tuning_groups(model, 0.05, filter_bias_and_norm=False)
    assert len(plain) == 1 and plain[0]["weight_decay"] == 0.05
    groups = fine_tuning_groups(model, 0.05)
    assert sorted(n for g in groups for n in g["names"]) == sorted(names)
    exempt = model.no_weight_decay()
    for g in groups:
        assert g["weight_decay"] == (0.0 if g["names"][0] in exempt else 0.05)
        assert all((n in exempt) == (g["names"][0] in exempt) for n in g["names"])
    L = model.num_layers()
    layered = fine_tuning_groups(model, 0.05, layer_decay=0.5)
    scale = {n: g["lr_scale"] for g in layered for n in g["names"]}
    assert scale["pos_embed"] == 0.5 ** (L - 1)  # the stem: the smallest lr
    assert scale["blocks.0.mixer.w1"] == 0.5 ** (L - 2)
    head = [n for n in names if model.layer_id(n) == L - 1]
    assert head and all(scale[n] == 1.0 for n in head)


def test_resuming_with_another_grouping_says_which_setting_to_restore():
    model = opzoo.load("dpot-micro")
    saved = torch.optim.AdamW([{"params": list(model.parameters()), "names": [n for n, _ in model.named_parameters()]}])
    tensors, groups = optimizer_to_flat(saved)
    now = torch.optim.AdamW(fine_tuning_groups(model, 0.05))
    with pytest.raises(CheckpointReadError, match=r"1 parameter groups saved.*filter_bias_and_norm: false"):
        optimizer_from_flat(now, tensors, groups, "run/checkpoints/step-10")
