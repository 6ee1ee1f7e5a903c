"""The command line over the whole zoo: the first-party plugins listed, list/info from the preset index, a plugin written against the old pot_preset_args."""

import json
import os

import pytest

from opzoo.cli import main

from ..core.subprocess_utils import run_python

FIRST_PARTY = ("opzoo-fourier", "opzoo-aot", "opzoo-moe", "opzoo-mup")


def test_plugins_lists_the_first_party_plugins_with_versions(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    for name in FIRST_PARTY:
        assert f"{name} 0.1.0" in out
    assert main(["plugins", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(FIRST_PARTY) <= {p["distribution"] for p in doc["loaded"]}


PROBE = ("import atexit, sys\n"
         "atexit.register(lambda: sys.__stderr__.write('HEAVY ' + ','.join(m for m in ('torch', 'opzoo_fourier', "
         "'opzoo_well', 'h5py') if m in sys.modules) + '\\n'))\n"
         "from opzoo.cli import main\n"
         "sys.exit(main({argv!r}))\n")


def cli(argv, env):
    done = run_python(PROBE.format(argv=argv), env=env)
    heavy = next(line for line in done.stderr.splitlines() if line.startswith("HEAVY"))[6:]
    return done.returncode, done.stdout, heavy


@pytest.mark.slow  # 9 s of subprocesses over every plugin; tests/core/test_preset_index.py checks the index itself
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


PLUGIN = '''
import opzoo

@opzoo.hookimpl
def opzoo_register_models(registry):
    # the call form of the earlier README: (width, depth, n_blocks, mlp_ratio, out_layer_dim, **overrides)
    registry.register_model("old-style-pot", backbone="pot",
                            args=opzoo.pot_preset_args(512, 4, 4, 1.0, 32, block="sandwich"))
'''


@pytest.mark.slow
def test_a_plugin_using_the_old_pot_preset_args_still_loads_with_a_deprecation_warning(tmp_path):
    from ..core.fake_dists import write_dist
    from ..core.subprocess_utils import run_python

    write_dist(tmp_path, "opzoo-old-style", "0.1", "opzoo_old_style", PLUGIN)
    code = ("import warnings, opzoo, torch\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    names = opzoo.list_models('old-style-*')\n"
            "print(names, [str(w.message)[:40] for w in caught if w.category is DeprecationWarning])\n"
            "with torch.device('meta'):\n"
            "    m = opzoo.load('old-style-pot')\n"
            "print(m.config.width, m.config.depth, m.config.mixer_args['n_blocks'], m.config.block)\n"
            "print(opzoo.pot_preset_args('Ti', block='sandwich') == opzoo.get_registry().preset('old-style-pot').args)")
    done = run_python(code, env={"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
                                 "OPZOO_PLUGINS": "opzoo-old-style,opzoo-fourier"})  # and DPOT's mixer
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[0].startswith("['old-style-pot'] ['pot_preset_args(width, depth, n_blocks,")
    assert lines[1] == "512 4 4 sandwich" and lines[2] == "True"
