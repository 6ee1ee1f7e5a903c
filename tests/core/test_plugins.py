import warnings

import pytest

from opzoo.errors import RegistryConflictError
from opzoo.host.plugins import PluginHost, PluginLoadWarning

from .fake_dists import MIXER_PLUGIN, enable, write_dist

FIRST_PARTY = {"opzoo-fourier", "opzoo-aot", "opzoo-moe", "opzoo-mup"}


def test_first_party_plugins_are_discovered_with_versions():
    host = PluginHost()
    found = {p.distribution: p.version for p in host.loaded}
    assert FIRST_PARTY <= set(found)
    assert all(v and v != "?" for v in found.values())


def test_a_plugin_that_fails_to_import_is_a_warning_and_the_others_load(tmp_path, monkeypatch):
    write_dist(tmp_path, "opzoo-broken", "1.2", "broken_plugin", "raise RuntimeError('boom at import')\n")
    write_dist(tmp_path, "opzoo-good", "2.0", "good_plugin", MIXER_PLUGIN.format(name="good-mixer"))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(PluginLoadWarning, match=r"'opzoo-broken' 1.2 \(broken_plugin\) was not loaded: import failed: RuntimeError: boom at import"):
        host = PluginHost()
    assert [p.distribution for p in host.failed] == ["opzoo-broken"]
    assert "good-mixer" in host.registry.names("mixer")
    assert FIRST_PARTY | {"opzoo-good"} <= {p.distribution for p in host.loaded}


def test_a_plugin_whose_hook_raises_leaves_nothing_registered(tmp_path, monkeypatch):
    source = MIXER_PLUGIN.format(name="half-mixer") + '''
@opzoo.hookimpl
def opzoo_register_models(registry):
    registry.register_model("half-model", backbone="simple")
    raise ValueError("bad preset table")
'''
    write_dist(tmp_path, "opzoo-half", "0.1", "half_plugin", source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(PluginLoadWarning, match=r"opzoo-half.*opzoo_register_models raised ValueError: bad preset table"):
        host = PluginHost()
    assert "half-mixer" not in host.registry.names("mixer")
    assert not host.registry.has_preset("half-model")


def test_two_plugins_registering_one_name_is_an_error_naming_both(tmp_path, monkeypatch):
    write_dist(tmp_path, "opzoo-alpha", "1.0", "alpha_plugin", MIXER_PLUGIN.format(name="same-name"))
    write_dist(tmp_path, "opzoo-beta", "1.0", "beta_plugin", MIXER_PLUGIN.format(name="same-name"))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistryConflictError) as info:
        PluginHost()
    message = str(info.value)
    assert "mixer 'same-name'" in message and "'opzoo-alpha'" in message and "'opzoo-beta'" in message


def test_a_plugin_cannot_take_a_core_name_and_is_left_out_alone(tmp_path, monkeypatch):
    """A plugin that takes the core's own name (a mixer) or the core's files (a reader claiming .h5) is left out with
    a warning naming its package and version; every command goes on with the core and the other plugins (issue 72:
    a reader claiming .h5 made every command refuse, naming the layout, not the package)."""
    write_dist(tmp_path, "opzoo-thief", "1.0", "thief_plugin", MIXER_PLUGIN.format(name="pointwise-mlp"))
    write_dist(tmp_path, "opzoo-h5-thief", "0.3", "h5_thief_plugin", """
import opzoo
from opzoo.data import TrajectorySource

class Greedy(TrajectorySource):
    layout = "greedy"
    suffixes = (".h5",)

@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_reader(Greedy)
""")
    write_dist(tmp_path, "opzoo-good", "2.0", "good_plugin", MIXER_PLUGIN.format(name="good-mixer"))
    monkeypatch.syspath_prepend(str(tmp_path))
    enable(monkeypatch, "opzoo-thief", "opzoo-h5-thief", "opzoo-good")
    with pytest.warns(PluginLoadWarning) as caught:
        host = PluginHost()
    said = " ".join(str(w.message) for w in caught)
    assert "'opzoo-thief' 1.0 (thief_plugin) was not loaded: mixer 'pointwise-mlp' is registered by both 'opzoo' and " \
           "'opzoo-thief'" in said
    assert "'opzoo-h5-thief' 0.3 (h5_thief_plugin) was not loaded: reader 'greedy' of opzoo-h5-thief claims .h5" in said
    assert {p.distribution for p in host.failed} == {"opzoo-thief", "opzoo-h5-thief"}
    assert host.registry.owner("mixer", "pointwise-mlp") == "opzoo" and "greedy" not in host.registry.readers()
    assert "good-mixer" in host.registry.names("mixer")


def test_opzoo_plugins_restricts_loading(tmp_path, monkeypatch):
    write_dist(tmp_path, "opzoo-broken", "1.2", "broken_plugin", "raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the broken plugin is not even imported
        host = PluginHost(allowed={"opzoo-fourier"})
    assert [p.distribution for p in host.loaded] == ["opzoo-fourier"]
    none = PluginHost(allowed=set())
    assert none.loaded == [] and "simple" in none.registry.names("backbone")  # the core always loads
    assert none.registry.names("mixer") == ["pointwise-mlp"] and none.registry.list_models() == ["simple-op"]


def test_env_variable_parsing(monkeypatch):
    from opzoo.host.plugins import allowed_from_env

    monkeypatch.delenv("OPZOO_PLUGINS", raising=False)
    assert allowed_from_env() is None
    monkeypatch.setenv("OPZOO_PLUGINS", "")
    assert allowed_from_env() == set()
    monkeypatch.setenv("OPZOO_PLUGINS", "opzoo-aot, opzoo-fourier")
    assert allowed_from_env() == {"opzoo-aot", "opzoo-fourier"}


COMMAND_PLUGIN = '''
import opzoo

def _hello(args):
    print(f"hello {args.who}")
    return 3

@opzoo.hookimpl
def opzoo_register_commands(subparsers):
    p = subparsers.add_parser("{name}", help="say hello")
    p.add_argument("who")
    p.set_defaults(func=_hello)
'''


def test_a_plugin_adds_a_command_to_the_cli(tmp_path, monkeypatch, fresh_plugins, capsys):
    from opzoo.cli import main

    write_dist(tmp_path, "opzoo-hello", "1.0", "hello_plugin", COMMAND_PLUGIN.replace("{name}", "hello"))
    enable(monkeypatch, "opzoo-hello")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["hello", "world"]) == 3
    assert capsys.readouterr().out == "hello world\n"
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "hello" in capsys.readouterr().out


def test_a_plugin_command_taking_a_core_name_is_an_error_naming_both(tmp_path, monkeypatch, fresh_plugins, capsys):
    from opzoo.cli import build_parser

    write_dist(tmp_path, "opzoo-lister", "1.0", "lister_plugin", COMMAND_PLUGIN.replace("{name}", "list"))
    enable(monkeypatch, "opzoo-lister")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistryConflictError, match=r"command 'list' is registered by both 'opzoo' and 'opzoo-lister'"):
        build_parser()

    # through the command line: one line, exit 2 (issue 49: it was a traceback)
    from opzoo.cli import main

    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("opzoo: error: command 'list' is registered by both 'opzoo' and 'opzoo-lister'; uninstall one of "
                   "them or restrict loading with OPZOO_PLUGINS")


def test_a_plugin_whose_command_hook_raises_is_a_warning_and_adds_nothing(tmp_path, monkeypatch, fresh_plugins):
    from opzoo.cli import build_parser

    source = COMMAND_PLUGIN.replace("{name}", "half") + '''
    raise ValueError("no more commands")
'''
    source = source.replace("    p.set_defaults(func=_hello)\n\n    raise", "    p.set_defaults(func=_hello)\n    raise")
    write_dist(tmp_path, "opzoo-halfcmd", "1.0", "halfcmd_plugin", source)
    enable(monkeypatch, "opzoo-halfcmd")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(PluginLoadWarning, match=r"opzoo-halfcmd.*opzoo_register_commands raised ValueError: no more commands"):
        parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert "half" not in sub.choices and "list" in sub.choices
    assert "half" not in parser.format_help()


def test_the_core_registers_through_its_own_hook_implementation_first():
    """The core's components come from ``opzoo.host.builtins``, a hook implementation registered like a
    plugin's (first, under the name ``opzoo``), and the process-wide registry is the host's."""
    import opzoo
    from opzoo.host import builtins
    from opzoo.registry.registry import get_registry

    host = PluginHost(allowed={"opzoo-fourier"})
    assert host.pm.get_plugin("opzoo") is builtins
    for hook in (host.pm.hook.opzoo_register_components, host.pm.hook.opzoo_register_models):
        assert hook.get_hookimpls()[0].plugin is builtins
    assert host.registry.owner("backbone", "pot") == "opzoo"
    assert host.registry.owner("mixer", "fourier-attention") == "opzoo-fourier"
    assert get_registry() is opzoo.get_registry() is opzoo.get_plugin_host().registry


def test_a_hook_asking_for_the_registry_it_fills_is_one_failed_plugin_not_a_hang(tmp_path):
    """A hook (or a family's card_fields it runs) that calls opzoo.get_registry() waited for itself forever: the
    host's lock was held by the same thread. It is now that plugin's one-line failure, and the others load."""
    from .fake_dists import env_enabling
    from .subprocess_utils import run_python

    source = MIXER_PLUGIN.format(name="asking-mixer") + '''
@opzoo.hookimpl
def opzoo_register_models(registry):
    opzoo.get_registry()
'''
    write_dist(tmp_path, "opzoo-asking", "0.1", "asking_plugin", source)
    code = ("import warnings, opzoo\nwith warnings.catch_warnings(record=True) as w:\n    warnings.simplefilter('always')\n"
            "    registry = opzoo.get_registry()\nprint([str(x.message) for x in w])\n"
            "print(registry.has_preset('simple-op'), 'asking-mixer' in registry.names('mixer'))")
    result = run_python(code, env={"PYTHONPATH": str(tmp_path), **env_enabling("opzoo-asking")}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "'opzoo-asking'" in result.stdout and "get_registry() was called while the plugins register" in result.stdout
    assert result.stdout.strip().endswith("True False")


def test_strict_loading_makes_a_plugin_that_fails_to_import_an_error(tmp_path, monkeypatch):
    """Issue 70: a plugin author's tests set OPZOO_STRICT_PLUGINS=1, and a plugin that fails to import stops them."""
    from opzoo.errors import OpzooError

    write_dist(tmp_path, "opzoo-broken", "1.2", "broken_plugin", "raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("OPZOO_STRICT_PLUGINS", "1")
    with pytest.raises(OpzooError, match=r"'opzoo-broken' 1.2 \(broken_plugin\) was not loaded: import failed: "
                                         r"RuntimeError: boom at import \(OPZOO_STRICT_PLUGINS is set\)"):
        PluginHost()
