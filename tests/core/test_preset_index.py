"""`opzoo list` and `opzoo info NAME` answer from the preset index without importing torch or a plugin, print
what the registry would, and never serve a stale index (issue 35)."""

import json
import os

import pytest

from .fake_dists import MIXER_PLUGIN, write_dist
from .subprocess_utils import run_python


def test_the_index_key_changes_with_the_installed_code(tmp_path):
    site = tmp_path / "site"
    write_dist(site, "opzoo-extra", "1.0", "opzoo_extra_mixer", MIXER_PLUGIN.format(name="extra-mixer"))
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    key = "from opzoo.cli.preset_index import index_key; print(index_key())"
    before = run_python(key, env=env).stdout
    assert before == run_python(key, env=env).stdout  # stable
    assert before != run_python(key, env={**env, "OPZOO_PLUGINS": "opzoo-fourier"}).stdout
    module = site / "opzoo_extra_mixer.py"
    module.write_text(module.read_text() + "\n# edited\n")  # an editable plugin edited in place
    assert before != run_python(key, env=env).stdout
    (site / "opzoo_extra-1.0.dist-info" / "entry_points.txt").write_text("")  # uninstalled
    assert before != run_python(key, env=env).stdout


def test_an_index_of_other_code_is_never_read(tmp_path, monkeypatch):
    from opzoo.cli import preset_index

    monkeypatch.setenv("OPZOO_CACHE_DIR", str(tmp_path))
    key = preset_index.index_key()
    path = tmp_path / f"preset-index-{key}.json"
    good = {"key": key, "presets": {}, "aliases": {}, "digest": preset_index._digest({}, {})}
    path.write_text(json.dumps(good))
    assert preset_index.read_index() == good
    path.write_text(json.dumps({**good, "key": "another"}))  # a file of other code
    with pytest.warns(preset_index.PresetIndexWarning, match="another key"):
        assert preset_index.read_index() is None
    path.write_text("{")  # a torn write
    with pytest.warns(preset_index.PresetIndexWarning, match="not valid JSON"):
        assert preset_index.read_index() is None
    monkeypatch.setenv("OPZOO_NO_INDEX", "1")
    path.write_text(json.dumps(good))
    assert preset_index.read_index() is None


# ---- issue 43: an index that cannot lie; issue 49: an index read as untrusted data ---------------------------------
INFO = ("import sys, json; from opzoo.cli import main\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    assert main(argv) == 0, argv\n")


def _opzoo(commands, env):
    """Run opzoo commands (each an argv list) one after the other in one fresh interpreter."""
    import subprocess
    import sys

    full = {**os.environ, **env}  # run outside the checkout: `-c` puts the working directory first on the path
    return subprocess.run([sys.executable, "-c", INFO, json.dumps(commands)], env=full, capture_output=True,
                          text=True, timeout=300, cwd=env.get("OPZOO_CACHE_DIR", "/").rsplit("/", 1)[0] or "/")


def _widths(done) -> list[int]:
    assert done.returncode == 0, done.stderr
    decoder, text, out = json.JSONDecoder(), done.stdout, []
    while text.strip():
        doc, end = decoder.raw_decode(text.lstrip())
        out.append(doc["config"]["width"])
        text = text.lstrip()[end:]
    return out


@pytest.mark.slow
def test_info_follows_an_edit_of_the_core_anywhere_in_the_package_and_of_a_plugin(tmp_path):
    """The key stamped the folder of preset_index.py alone (model_io/, 13 of the core's files): an edited
    host/builtins.py kept printing the old width. A copy of the opzoo package first on the path is edited here."""
    import shutil

    import opzoo

    site = tmp_path / "site"
    shutil.copytree(os.path.dirname(opzoo.__file__), site / "opzoo", ignore=shutil.ignore_patterns("__pycache__"))
    write_dist(site, "opzoo-extra", "1.0", "opzoo_extra_preset", PRESET_PLUGIN.format(width=8))
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "OPZOO_CACHE_DIR": str(tmp_path / "cache"), "OPZOO_PLUGINS": "opzoo-extra"}
    both = [["info", "simple-op", "--json"], ["info", "extra-op", "--json"]]
    first = _opzoo(both, env)
    assert "indexing the installed presets once" in first.stderr  # said while it builds
    assert _widths(first) == [32, 8]
    builtins = site / "opzoo" / "host" / "builtins.py"
    builtins.write_text(builtins.read_text().replace("args=dict(width=32,", "args=dict(width=128,"))  # another size: Python's pyc check is by size and whole seconds
    (site / "opzoo_extra_preset.py").write_text(PRESET_PLUGIN.format(width=16))
    again = _opzoo(both, env)
    assert "indexing the installed presets once" in again.stderr and _widths(again) == [128, 16]
    unchanged = _opzoo(both[:1], env)  # answered from the new index
    assert "indexing" not in unchanged.stderr and _widths(unchanged) == [128]


PRESET_PLUGIN = '''
import opzoo

@opzoo.hookimpl
def opzoo_register_models(registry):
    registry.register_model("extra-op", backbone="simple",
                            args=dict(width={width}, depth=1, in_channels=1, out_channels=1, in_timesteps=2))
'''


def test_a_preset_registered_at_run_time_never_reaches_the_disk(tmp_path, monkeypatch, capsys):
    """The CLI looked for the running plugin host under a module name that never exists, so a notebook's live
    registry, with its run-time presets, was written into the index; a later `opzoo list` listed a preset that
    `opzoo.load` could not find."""
    import opzoo
    from opzoo.cli import main
    from opzoo.registry.registry import live_registry

    monkeypatch.setenv("OPZOO_CACHE_DIR", str(tmp_path / "cache"))
    registry = opzoo.get_registry()
    assert live_registry() is registry
    with registry.owned_by("tests"):
        registry.register_model("run-time-op", backbone="simple", args=dict(width=4, depth=1, in_channels=1,
                                                                            out_channels=1, in_timesteps=2))
    try:
        assert main(["list", "run-time-*"]) == 0
        assert capsys.readouterr().out.split() == ["run-time-op"]  # the live registry answers in this process
        assert main(["info", "run-time-op", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["name"] == "run-time-op"
        assert not list((tmp_path / "cache").glob("preset-index-*"))
        later = _opzoo([["list", "run-time-*"]], {"OPZOO_CACHE_DIR": str(tmp_path / "cache")})
        assert later.returncode == 0 and "run-time-op" not in later.stdout
        assert list((tmp_path / "cache").glob("preset-index-*"))
    finally:
        registry.forget("tests")


def _built_index(tmp_path, monkeypatch):
    from opzoo.cli import preset_index
    from opzoo.cli.models import preset_document

    monkeypatch.setenv("OPZOO_CACHE_DIR", str(tmp_path))
    doc = preset_index.build_index(preset_document)
    path = tmp_path / f"preset-index-{doc['key']}.json"
    assert preset_index.read_index() == json.loads(path.read_text())
    return preset_index, path


@pytest.mark.parametrize("damage", ["fifo", "dev-zero", "huge", "torn", "edited-entry", "ghost-alias", "deep",
                                    "wrong-types", "directory"])
def test_a_damaged_index_is_discarded_with_one_warning_and_rebuilt(tmp_path, monkeypatch, damage):
    """Issue 49: a FIFO hung `opzoo list`, a link to /dev/zero read until memory ran out, an edited entry was
    printed as fact, and a corrupt index gave tracebacks until removed."""
    preset_index, path = _built_index(tmp_path, monkeypatch)
    doc = json.loads(path.read_text())
    parameters = doc["presets"]["simple-op"]["parameters"]
    path.unlink()
    if damage == "fifo":
        os.mkfifo(path)
    elif damage == "dev-zero":
        path.symlink_to("/dev/zero")
    elif damage == "huge":
        with open(path, "wb") as f:
            f.truncate(preset_index.MAX_BYTES + 1)
    elif damage == "torn":
        path.write_text(json.dumps(doc)[:len(json.dumps(doc)) // 2])
    elif damage == "edited-entry":
        doc["presets"]["simple-op"]["parameters"] = 123
        path.write_text(json.dumps(doc))
    elif damage == "ghost-alias":
        doc["aliases"]["ghost"] = "no-such-preset"
        path.write_text(json.dumps(doc))
    elif damage == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif damage == "wrong-types":
        doc["presets"] = {"simple-op": {"name": "simple-op"}}
        doc["digest"] = preset_index._digest(doc["presets"], doc["aliases"])
        path.write_text(json.dumps(doc))
    elif damage == "directory":
        path.mkdir()
    with pytest.warns(preset_index.PresetIndexWarning) as caught:
        assert preset_index.read_index() is None
    assert len(caught) == 1 and str(path) in str(caught[0].message)
    assert not os.path.lexists(path)  # discarded
    from opzoo.cli.models import preset_document

    rebuilt = preset_index.build_index(preset_document)
    assert rebuilt["presets"]["simple-op"]["parameters"] == parameters
    assert preset_index.read_index() == json.loads(path.read_text())
    assert os.path.realpath("/dev/zero") == "/dev/zero"  # the link's target was never written


def test_two_plugin_sets_in_turn_keep_their_own_indexes(tmp_path, monkeypatch):
    """Issue 49: alternating OPZOO_PLUGINS rebuilt the index on every call, because a build deleted every other key."""
    preset_index, first = _built_index(tmp_path, monkeypatch)
    monkeypatch.setenv("OPZOO_PLUGINS", "opzoo-something-else")
    from opzoo.cli.models import preset_document

    second = preset_index.build_index(preset_document)
    assert first.is_file() and (tmp_path / f"preset-index-{second['key']}.json").is_file()
    for i in range(preset_index.KEEP + 3):
        monkeypatch.setenv("OPZOO_PLUGINS", f"set-{i}")
        preset_index.build_index(preset_document)
    assert len(list(tmp_path.glob("preset-index-*.json"))) == preset_index.KEEP


def test_a_planted_link_at_the_index_or_its_temporary_name_is_not_written_through(tmp_path, monkeypatch):
    """Issue 49: a link at the index's temporary name overwrote its target, and the index became a link."""
    from opzoo.cli import preset_index
    from opzoo.cli.models import preset_document

    monkeypatch.setenv("OPZOO_CACHE_DIR", str(tmp_path))
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    path = tmp_path / f"preset-index-{preset_index.index_key()}.json"
    path.symlink_to(victim)
    preset_index.build_index(preset_document)
    assert victim.read_text() == "mine" and path.is_file() and not path.is_symlink()
