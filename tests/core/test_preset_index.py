"""`opzoo list` and `opzoo info NAME` answer from the preset index without importing torch or a plugin, print
what the registry would, and never serve a stale index (issue 35)."""

import json
import os

from .fake_dists import MIXER_PLUGIN, write_dist
from .subprocess_utils import run_python

PROBE = ("import atexit, sys\n"
         "atexit.register(lambda: sys.__stderr__.write('HEAVY ' + ','.join(m for m in ('torch', 'opzoo_fourier', "
         "'opzoo_well', 'h5py') if m in sys.modules) + '\\n'))\n"
         "from opzoo.cli import main\n"
         "sys.exit(main({argv!r}))\n")


def cli(argv, env):
    done = run_python(PROBE.format(argv=argv), env=env)
    heavy = next(line for line in done.stderr.splitlines() if line.startswith("HEAVY"))[6:]
    return done.returncode, done.stdout, heavy


def test_list_and_info_from_the_index_import_nothing_heavy_and_match_the_registry(tmp_path, capsys):
    import opzoo
    from opzoo.cli import main

    opzoo.get_registry()  # this process answers from its live registry: the reference
    env = {"OPZOO_CACHE_DIR": str(tmp_path / "cache")}
    code, first, heavy = cli(["list"], env)  # builds the index: imports the plugins once
    assert code == 0 and "torch" in heavy and list((tmp_path / "cache").glob("preset-index-*.json"))
    for argv in (["list"], ["list", "dpot-*", "--pretrained"], ["list", "*-t", "--aliases"], ["info", "dpot-micro"],
                 ["info", "well-fno-shear_flow", "--json"], ["info", "nestor-t"]):
        code, fast, heavy = cli(argv, env)
        assert code == 0 and heavy == "", (argv, heavy)
        assert main(argv) == 0
        assert fast == capsys.readouterr().out, argv
    assert "dpot-micro" in first


def test_the_index_key_changes_with_the_installed_code(tmp_path):
    site = tmp_path / "site"
    write_dist(site, "opzoo-extra", "1.0", "opzoo_extra_mixer", MIXER_PLUGIN.format(name="extra-mixer"))
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    key = "from opzoo.preset_index import index_key; print(index_key())"
    before = run_python(key, env=env).stdout
    assert before == run_python(key, env=env).stdout  # stable
    assert before != run_python(key, env={**env, "OPZOO_PLUGINS": "opzoo-fourier"}).stdout
    module = site / "opzoo_extra_mixer.py"
    module.write_text(module.read_text() + "\n# edited\n")  # an editable plugin edited in place
    assert before != run_python(key, env=env).stdout
    (site / "opzoo_extra-1.0.dist-info" / "entry_points.txt").write_text("")  # uninstalled
    assert before != run_python(key, env=env).stdout


def test_an_index_of_other_code_is_never_read(tmp_path, monkeypatch):
    from opzoo import preset_index

    monkeypatch.setenv("OPZOO_CACHE_DIR", str(tmp_path))
    key = preset_index.index_key()
    path = tmp_path / f"preset-index-{key}.json"
    path.write_text(json.dumps({"key": key, "presets": {}, "aliases": {}}))
    assert preset_index.read_index() == {"key": key, "presets": {}, "aliases": {}}
    path.write_text(json.dumps({"key": "another", "presets": {}, "aliases": {}}))  # a file of other code
    assert preset_index.read_index() is None
    path.write_text("{")  # a torn write
    assert preset_index.read_index() is None
    monkeypatch.setenv("OPZOO_NO_INDEX", "1")
    path.write_text(json.dumps({"key": key, "presets": {}, "aliases": {}}))
    assert preset_index.read_index() is None
