import json

from opzoo.cli import main


def test_list_with_pattern(capsys):
    assert main(["list", "simple-*"]) == 0
    assert capsys.readouterr().out.split() == ["simple-op"]
    assert main(["list", "zzz-*"]) == 0
    assert "no models match" in capsys.readouterr().out


def test_info_reports_exact_parameter_count(capsys):
    import opzoo

    n = sum(p.numel() for p in opzoo.load("simple-op").parameters())
    assert main(["info", "simple-op", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["parameters"] == n and doc["backbone"] == "simple" and doc["plugin"] == "opzoo"
    assert main(["info", "simple-op", "--set", "width=64"]) == 0
    assert "width: 64" in capsys.readouterr().out


def test_info_takes_what_load_takes(tmp_path, capsys):
    """A saved directory, local-dir:PATH and an alias, like opzoo.load (issue 11)."""
    import opzoo

    out = tmp_path / "saved"
    opzoo.load("simple-op", depth=1).save_pretrained(out)
    n = sum(p.numel() for p in opzoo.load(str(out)).parameters())
    for name in (str(out), f"local-dir:{out}"):
        assert main(["info", name, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["parameters"] == n and doc["backbone"] == "simple" and doc["plugin"] == "opzoo"
        assert doc["config"]["depth"] == 1 and doc["name"] == name
    assert main(["info", str(out)]) == 0
    assert f"loaded from {out}" in capsys.readouterr().out
    assert main(["info", f"local-dir:{tmp_path / 'missing'}"]) == 2
    assert "is not a directory" in capsys.readouterr().err
    from opzoo.registry.registry import get_registry

    aliases = [a for a in get_registry().list_models(include_aliases=True) if a not in get_registry().list_models()]
    if aliases:
        assert main(["info", aliases[0], "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["name"] in get_registry().list_models()


def test_unknown_name_is_a_clear_error(capsys):
    assert main(["info", "simple-oops"]) == 2
    assert "unknown model 'simple-oops'. Closest registered: simple-op" in capsys.readouterr().err


def test_export_writes_a_loadable_repo(tmp_path, capsys):
    import opzoo

    assert main(["export", "simple-op", str(tmp_path / "out"), "--set", "depth=1"]) == 0
    model = opzoo.load(f"local-dir:{tmp_path / 'out'}")
    assert model.config.depth == 1


def test_bad_override_syntax(capsys):
    assert main(["export", "simple-op", "x", "--set", "depth"]) == 2
    assert "not of the form key=value" in capsys.readouterr().err


def test_core_commands_are_the_parsers_own_and_help_shows_defaults(capsys):
    """`opzoo --help` and core commands are parsed without importing plugins: CORE_COMMANDS must be
    exactly the commands the core adds. Every --help shows defaults."""
    from opzoo.cli import CORE_COMMANDS, build_parser

    parser = build_parser(plugin_commands=False)
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == CORE_COMMANDS
    assert "(default: 500)" in sub.choices["finetune"].format_help()
    assert "--channel CHANNEL     channel shown in the panels (default: 0)" in sub.choices["eval"].format_help()


def test_version_prints_without_building_a_parser(capsys):
    from opzoo.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("opzoo ")


def test_every_command_is_of_one_style_on_the_top_floor():
    """Issue 57: the command modules are in opzoo/cli/ (the top layer), each adds its commands with
    add_commands(subparsers), and every command runs a handler cmd_<name>(args) of that module; nothing below
    opzoo/cli/ adds a command (plugins add theirs through the opzoo_register_commands hook)."""
    import argparse
    import re
    from pathlib import Path

    import opzoo
    from opzoo.cli import _command_providers, build_parser

    modules = {fn.__module__ for fn in _command_providers()}
    assert all(m.startswith("opzoo.cli.") for m in modules) and all(fn.__name__ == "add_commands"
                                                                    for fn in _command_providers())

    def leaves(parser, path):
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None:
            yield path, parser
            return
        for name, child in sub.choices.items():
            yield from leaves(child, [*path, name])

    found = list(leaves(build_parser(plugin_commands=False), []))
    assert len(found) >= 18
    for path, parser in found:
        func = parser.get_default("func")
        assert func.__module__ in modules and func.__name__ == "cmd_" + "_".join(path).replace("-", "_"), (path, func)
    root = Path(opzoo.__file__).parent
    outside = [str(p.relative_to(root)) for p in root.rglob("*.py") if p.relative_to(root).parts[0] != "cli"
               and re.search(r"^\s*\w+\.set_defaults\(func=", p.read_text(), re.M)]
    assert outside == [], f"commands outside opzoo/cli/: {outside}"
