"""`opzoo list` and `opzoo info NAME` answer from the preset index without importing torch or a plugin, print
what the registry would, and never serve a stale index (issue 35)."""

import json
import os

from .fake_dists import MIXER_PLUGIN, write_dist
from .subprocess_utils import run_python


def test_the_index_key_changes_with_the_installed_code(tmp_path):
    site = tmp_path / "site"
    write_dist(site, "opzoo-extra", "1.0", "opzoo_extra_mixer", MIXER_PLUGIN.format(name="extra-mixer"))
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    key = "from opzoo.model_io.preset_index import index_key; print(index_key())"
    before = run_python(key, env=env).stdout
    assert before == run_python(key, env=env).stdout  # stable
    assert before != run_python(key, env={**env, "OPZOO_PLUGINS": "opzoo-fourier"}).stdout
    module = site / "opzoo_extra_mixer.py"
    module.write_text(module.read_text() + "\n# edited\n")  # an editable plugin edited in place
    assert before != run_python(key, env=env).stdout
    (site / "opzoo_extra-1.0.dist-info" / "entry_points.txt").write_text("")  # uninstalled
    assert before != run_python(key, env=env).stdout


def test_an_index_of_other_code_is_never_read(tmp_path, monkeypatch):
    from opzoo.model_io import preset_index

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
