"""A checkpoint family declared as one table (issue 44): ``opzoo.CheckpointFamily`` rows become presets, each derived
from its row by the family's rules, registered all or none."""

from __future__ import annotations

import pytest

import opzoo
from opzoo.models.simple import SimpleOperator


def card(tmp_path, text="# ${name}\n\nwidth $width, $params parameters as published, ${parameters} counted\n"):
    path = tmp_path / "card.md"
    path.write_text(text)
    return path


def family(tmp_path, rows=None, **rules) -> opzoo.CheckpointFamily:
    rows = rows or (opzoo.Variant("toy-s", args={"width": 8}, weights="s/w.safetensors", data={"params": 1000}),
                    opzoo.Variant("toy-b", args={"width": 16}, weights="b/w.safetensors", data={"params": 4000},
                                  aliases=("toy-base",)))
    base = dict(repo_id="org/toy", revision="abc1234", converter="toy-format", args={"depth": 1, "width": 4},
                extra_files=lambda v: (f"{v.weights.split('/')[0]}/config.json",),
                provenance=lambda v: (opzoo.Fact("published parameters", f"{v['params']:,}", "org/toy README @ abc1234"),),
                results=lambda v: (opzoo.Result("toy data", "nRMSE", v.args["width"] / 100, "the toy authors",
                                                source="https://example.org"),),
                pretrained_cfg={"in_timesteps": 1}, card=card(tmp_path),
                card_fields=lambda v: {"width": v.args["width"], "params": f"{v['params']:,}"})
    return opzoo.CheckpointFamily("toy", backbone="simple", variants=rows, **{**base, **rules})


def test_every_row_becomes_a_preset_derived_by_the_familys_rules(tmp_path):
    registry = opzoo.Registry()
    presets = registry.register_family(family(tmp_path))
    assert [p.name for p in presets] == ["toy-s", "toy-b"] and registry.families() == ["toy"]
    small, base = registry.preset("toy-s"), registry.preset("toy-base")
    assert base.name == "toy-b" and base.family == "toy" and base.backbone == "simple"
    assert small.args == {"depth": 1, "width": 8}  # the family's args, updated by the row's
    src = base.pretrained
    assert (src.repo_id, src.filename, src.revision, src.converter, src.extra_files) == (
        "org/toy", "b/w.safetensors", "abc1234", "toy-format", ("b/config.json",))
    assert [f.value for f in base.provenance] == ["4,000"] and base.results[0].value == 0.16
    assert base.pretrained_cfg == {"in_timesteps": 1}
    # the card: the family's template, its fields filled per row; the save-time fields are left for the save
    assert base.card_template() == "# ${name}\n\nwidth 16, 4,000 parameters as published, ${parameters} counted\n"
    model = opzoo.create_model("simple", width=16, depth=1)
    model.preset_name = None
    from opzoo.model_io.model_card import render_card

    text = render_card(model, "simple", base.card_template())
    assert "width 16, 4,000 parameters as published" in text and f"{sum(p.numel() for p in model.parameters()):,} counted" in text
    assert registry.family("toy").variant("toy-base")["params"] == 4000


def test_a_row_that_fails_leaves_no_preset_of_its_family(tmp_path):
    registry = opzoo.Registry()
    registry.register_model("toy-b", backbone="simple")  # a name the second row also wants

    with pytest.raises(opzoo.RegistryConflictError, match="model 'toy-b'"):
        registry.register_family(family(tmp_path))
    assert registry.list_models("toy-*") == ["toy-b"] and registry.families() == []
    assert not registry.has_preset("toy-s")

    def broken(v):
        if v.name == "toy-b":
            raise KeyError("no such fact")
        return ()
    with pytest.raises(KeyError):
        opzoo.Registry().register_family(family(tmp_path, provenance=broken))


def test_a_bad_table_is_refused_naming_the_family_and_row(tmp_path):
    with pytest.raises(ValueError, match="checkpoint family 'toy': variant 'a' appears twice"):
        family(tmp_path, rows=(opzoo.Variant("a"), opzoo.Variant("a")))
    with pytest.raises(ValueError, match="checkpoint family 'toy': no variants"):
        opzoo.CheckpointFamily("toy", backbone="simple", variants=())
    with pytest.raises(TypeError, match="variants must be opzoo.Variant, got dict"):
        family(tmp_path, rows=({"name": "a"},))
    with pytest.raises(ValueError, match="card field\\(s\\) name are filled on save"):
        opzoo.Registry().register_family(family(tmp_path, card_fields={"name": "x"}))
    with pytest.raises(KeyError, match="variant 'toy-s' has no 'size' in its data \\(it has params\\)"):
        family(tmp_path).variants[0]["size"]
    registry = opzoo.Registry()
    registry.register_family(family(tmp_path, results=(), provenance=()))
    with pytest.raises(opzoo.RegistryConflictError, match="checkpoint family 'toy'"):
        registry.register_family(family(tmp_path, rows=(opzoo.Variant("other"),)))
    with pytest.raises(opzoo.UnknownNameError):
        registry.family("nope")


def test_a_family_without_a_repo_has_no_weights_and_a_row_may_name_its_own(tmp_path):
    rows = (opzoo.Variant("toy-s"), opzoo.Variant("toy-x", repo_id="org/other", weights="x.safetensors"))
    registry = opzoo.Registry()
    registry.register_family(family(tmp_path, rows=rows, repo_id=None, extra_files=(), card_fields={},
                                    provenance=(), results=()))
    assert registry.preset("toy-s").pretrained is None
    assert registry.preset("toy-x").pretrained.repo_id == "org/other"


def test_matching_preset_is_the_preset_whose_config_a_converted_checkpoint_builds(tmp_path):
    registry = opzoo.Registry()
    registry.register_backbone("simple", SimpleOperator)
    registry.register_family(family(tmp_path))
    assert registry.matching_preset("simple", {"width": 16, "depth": 1}).name == "toy-b"
    assert registry.matching_preset("simple", {"width": 16, "depth": 2}) is None
    with pytest.raises(opzoo.ConfigError, match="converted checkpoint"):
        registry.matching_preset("simple", {"width": "wide"})


@pytest.mark.parametrize("count", ["7M", "5k", 30130.0, True])
def test_a_parameter_count_that_is_not_an_int_is_refused_at_registration_in_one_line(count):
    """Issue 70: the conformance suite holds every preset to its row's count, so a row states it exactly."""
    with pytest.raises(opzoo.ConfigError) as info:
        opzoo.Variant("my-net-s", args={"width": 8}, data={"params": count})
    message = str(info.value)
    assert "\n" not in message and "'my-net-s'" in message and "as an int" in message and repr(count) in message
    assert opzoo.Variant("my-net-s", data={"params": 30130})["params"] == 30130
