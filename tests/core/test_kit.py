"""Issue 57: the family kit (opzoo.kit), each part on a hand-made case; MORPH, GPhyT and Poseidon are built on it
(tests/morph, tests/gphyt, tests/poseidon run it on their real converters)."""

import dataclasses
import sys

import pytest
import torch

import opzoo
from opzoo import kit


def test_renames_take_the_first_rule_that_matches_the_whole_name_and_refuse_the_rest():
    renames = kit.Renames([
        (r"enc\.(\d+)\.w", r"blocks.\1.weight"),
        (r"act\.(\d+)\.w", lambda m: f"acts.{int(m[1]) // 2}" if int(m[1]) % 2 == 0 else None),
        (r"enc\.num_batches", None),
        (r"enc\.(.+)", r"rest.\1"),
    ])
    assert renames.name("enc.3.w") == "blocks.3.weight" and renames.name("enc.3.wx") == "rest.3.wx"
    assert renames.name("act.4.w") == "acts.2" and renames.name("act.5.w") is None
    assert renames.apply({"enc.0.w": 1, "enc.num_batches": 2, "act.1.w": 3}, "f.pth", "Lab") == {"blocks.0.weight": 1}
    with pytest.raises(KeyError):
        renames.name("dec.w")
    with pytest.raises(opzoo.CheckpointError, match=r"f.pth: tensors that are not Lab's: d0, d1, d2, d3, d4 and 2 more"):
        renames.apply({f"d{i}": i for i in range(7)}, "f.pth", "Lab")


def test_a_prefix_is_stripped_from_every_name_or_none():
    assert kit.strip_prefix({"module.a": 1, "module.b": 2}, "module.", "f") == {"a": 1, "b": 2}
    assert kit.strip_prefix({"a": 1}, "module.", "f") == {"a": 1}
    with pytest.raises(opzoo.CheckpointError, match="f.pth: some tensor names have the 'module.' prefix"):
        kit.strip_prefix({"module.a": 1, "b": 2}, "module.", "f.pth")


def test_tensor_shape_names_the_file_and_the_tensor():
    sd = {"w": torch.zeros(2, 3)}
    assert kit.tensor_shape(sd, "w", "f", "Lab", 2) == (2, 3) and kit.tensor_shape(sd, "w", "f", "Lab") == (2, 3)
    with pytest.raises(opzoo.CheckpointError, match="f.pth: tensor 'b' is missing: not a Lab network"):
        kit.tensor_shape(sd, "b", "f.pth", "Lab")
    with pytest.raises(opzoo.CheckpointError, match=r"f.pth: 'w' has shape \[2, 3\], expected 4 dims"):
        kit.tensor_shape(sd, "w", "f.pth", "Lab", 4)


def test_upstream_code_comes_from_the_checkout_an_environment_variable_names(tmp_path, monkeypatch):
    where = dict(family="Lab", url="https://example.org/lab", marker="labnet/model.py", at="abc1234")
    monkeypatch.delenv("LAB_REPO", raising=False)
    with pytest.raises(opzoo.UpstreamUnavailable, match="Lab's code is not on the package index: set LAB_REPO to a "
                                                        "checkout of https://example.org/lab at abc1234"):
        kit.import_from_checkout("LAB_REPO", "labnet.model", **where)
    monkeypatch.setenv("LAB_REPO", str(tmp_path))
    with pytest.raises(opzoo.UpstreamUnavailable, match="labnet/model.py does not exist"):
        kit.import_from_checkout("LAB_REPO", "labnet.model", **where)
    (tmp_path / "labnet").mkdir()
    (tmp_path / "labnet" / "__init__.py").write_text("")
    (tmp_path / "labnet" / "model.py").write_text("class Net:\n    pass\n")
    module = kit.import_from_checkout("LAB_REPO", "labnet.model", **where)
    assert module.Net.__module__ == "labnet.model" and str(tmp_path) not in sys.path
    other = tmp_path / "other"
    (other / "labnet").mkdir(parents=True)
    (other / "labnet" / "model.py").write_text("")
    with pytest.raises(opzoo.UpstreamUnavailable, match="another package named 'labnet' is already imported"):
        kit.import_from_checkout("LAB_REPO", "labnet.model", repo=other, **where)
    for name in ("labnet.model", "labnet"):
        sys.modules.pop(name)


def test_a_checkout_whose_package_init_imports_its_training_stack_is_read_without_it(tmp_path):
    """``package_init=False``: the package lies under ``root`` of the checkout and its ``__init__`` (which would import
    the whole training stack) is not run; the modules asked for are."""
    pkg = tmp_path / "src" / "heavynet"
    (pkg / "models").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('hydra is not installed')\n")
    (pkg / "models" / "__init__.py").write_text("")
    (pkg / "models" / "block.py").write_text("class Block:\n    pass\n")
    where = dict(family="Heavy", url="https://example.org/heavy", marker="src/heavynet/models/block.py")
    with pytest.raises(opzoo.UpstreamUnavailable, match="hydra is not installed"):
        kit.import_from_checkout("HEAVY_REPO", "heavynet.models.block", repo=tmp_path, root="src", **where)
    sys.modules.pop("heavynet", None)
    module = kit.import_from_checkout("HEAVY_REPO", "heavynet.models.block", repo=tmp_path, root="src",
                                      package_init=False, **where)
    assert module.Block.__module__ == "heavynet.models.block" and str(tmp_path / "src") not in sys.path
    for name in ("heavynet.models.block", "heavynet.models", "heavynet"):
        sys.modules.pop(name, None)


@dataclasses.dataclass
class _Config:
    width: int = 8
    depth: int = 2
    sizes: tuple = (1, 2)
    kind: str = "Euler"


def test_the_file_args_check_names_each_difference_and_how_to_load_the_file(monkeypatch):
    registry = opzoo.Registry()
    registry.register_backbone("simple", opzoo.get_registry().get("backbone", "simple"))
    monkeypatch.setattr(opzoo.registry.registry, "get_registry", lambda: registry)
    registry.register_family(opzoo.CheckpointFamily("lab", backbone="simple", args={}, variants=(
        opzoo.Variant("lab-s", args={"width": 8}), opzoo.Variant("lab-b", args={"width": 16}))))
    artifacts = opzoo.PretrainedArtifacts("lab-s", {}, {}, _Config())
    agree = kit.file_args_agree("Lab", lambda a: {"width": 8, "sizes": [1, 2]}, shown=("width", "sizes"))
    assert agree.run(artifacts) == "the file builds this network (width=8, sizes=[1, 2])"
    bigger = kit.file_args_agree("Lab", lambda a: {"width": 16})
    with pytest.raises(opzoo.CheckFailed, match=r"another Lab network \(width: file 16, model 8\); it is lab-b's "
                                                r"network: load it as lab-b \(opzoo.load\('lab-b', checkpoint_path"):
        bigger.run(artifacts)
    unknown = kit.file_args_agree("Lab", lambda a: {"width": 12, "depth": 3, "kind": "RK4", "sizes": [1, 3]})
    with pytest.raises(opzoo.CheckFailed, match=r"load it with opzoo.load\(\.\.\., width=12, depth=3, kind='RK4', "
                                                r"sizes=\[1, 3\]\) or, on the command line, --model-args width=12 "
                                                r"depth=3 kind=RK4 'sizes=\[1,3\]'"):
        unknown.run(artifacts)  # the command line's form too (issue 74: GPhyT's integrator named only Python's)

    def unreadable(a):
        raise opzoo.CheckpointError("f.pth: tensor 'w' is missing:\n not a Lab network")

    with pytest.raises(opzoo.CheckFailed, match="^f.pth: tensor 'w' is missing: not a Lab network$"):
        kit.file_args_agree("Lab", unreadable).run(artifacts)


def test_a_family_plugin_registers_its_parts_and_tables_through_the_hooks():
    simple = opzoo.get_registry().get("backbone", "simple")
    family = opzoo.CheckpointFamily("lab", backbone="lab-net", args={}, variants=(opzoo.Variant("lab-s"),))

    def convert(path):
        raise opzoo.CheckpointError("not here")

    plugin = kit.FamilyPlugin(family, backbones={"lab-net": simple}, converters={"lab": convert},
                              upstreams={"lab": ("lab-net", lambda model, x: None)})
    registry = opzoo.Registry()
    with registry.owned_by("lab-plugin"):
        plugin.opzoo_register_components(registry=registry)
        plugin.opzoo_register_models(registry=registry)
    assert registry.owner("backbone", "lab-net") == "lab-plugin" and registry.get("converter", "lab") is convert
    assert [n for n, _ in registry.upstreams_for("lab-net")] == ["lab"]
    assert registry.preset("lab-s").family == "lab" and repr(plugin) == "FamilyPlugin(lab)"
    import pluggy

    from opzoo.contracts import hookspecs
    pm = pluggy.PluginManager("opzoo")
    pm.add_hookspecs(hookspecs)
    pm.register(plugin)  # pluggy takes the object as a plugin: its hooks are the marked methods
    assert {impl.plugin for impl in pm.hook.opzoo_register_models.get_hookimpls()} == {plugin}
