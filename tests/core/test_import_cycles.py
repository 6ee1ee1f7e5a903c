"""The core's import graph has no circle (issue 24), read from the code with ``ast``.

Every ``import``/``from ... import`` counts, at module level, inside a function or under
``if TYPE_CHECKING:`` (a type-only import never runs, but it is still an arrow of the design: issue 36),
and so does ``importlib.import_module("a.literal.name")``. ``from pkg import name`` is an import of
``pkg.name`` when that is a module, else of ``pkg``. Importing ``a.b`` also runs ``a/__init__``, but
that implicit edge is not counted: every module would otherwise "import" its package.

The two synthetic packages below show the check failing; run on the core as it was before issue 24
(commit 3c6ffcb) it reports the two circles the issue names: twelve modules around
``plugins -> builtins -> backbones -> plugins`` (with ``interfaces <-> hub`` and
``interfaces <-> routing``), and ``checkpoints <-> factory``.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import opzoo

OPZOO_ROOT = Path(opzoo.__file__).parent


def module_files(root: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` file of package directory ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _literal_import_module(node: ast.AST) -> str | None:
    """``"a.b"`` for a call ``importlib.import_module("a.b")`` / ``import_module("a.b")``, else None."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return node.args[0].value if name == "import_module" else None


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node (and literal ``import_module`` call), type-only ones included."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)) or _literal_import_module(node):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(root: Path) -> dict[str, set[str]]:
    """``{module: modules of the same package it imports}`` for package directory ``root``."""
    modules = module_files(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                targets = [_literal_import_module(node)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            for target in targets:
                while target and target not in modules:  # `import a.b.c` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, in order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def describe(graph: dict[str, set[str]], component: list[str]) -> str:
    """One circle inside ``component``, as ``a -> b -> ... -> a``."""
    members = set(component)
    path = [component[0]]
    seen = {component[0]: 0}
    while True:
        nxt = sorted(graph[path[-1]] & members)[0]
        if nxt in seen:
            return " -> ".join(path[seen[nxt]:] + [nxt])
        seen[nxt] = len(path)
        path.append(nxt)


def plugin_packages() -> list[Path]:
    """Every first-party plugin's package directory (``plugins/opzoo-*/opzoo_*``)."""
    found = sorted(p for p in (OPZOO_ROOT.parent / "plugins").glob("opzoo-*/opzoo_*") if p.is_dir()
                   and not p.name.endswith(".egg-info"))
    assert len(found) >= 6
    return found


def test_opzoo_has_no_import_circle():
    graph = import_graph(OPZOO_ROOT)
    assert "opzoo.host.plugins" in graph and "opzoo.model_io.builder" in graph  # the walk found the core
    cycles = import_cycles(graph)
    assert not cycles, "import circles in opzoo/ (module or function level):\n" + "\n".join(
        f"  {describe(graph, c)}  (component: {', '.join(c)})" for c in cycles)


# docs/architecture.md's layers, bottom to top, and the arrows that run up (each named there)
LAYERS = ["root", "contracts", "registry", "layers", "models", "model_io", "data", "evaluation", "training", "benchmark",
          "plugin-host", "cli", "testing"]
UPWARD: set = set()  # none: the console is at the bottom, the preset index in cli/, and Backbone's hub I/O installed


def test_no_first_party_plugin_has_an_import_circle():
    """Issue 44: opzoo_pdet.converter <-> presets and opzoo_well.checks -> provenance -> presets -> checks were circles;
    a family's table now sits above what it derives from, and a converter reads a row from the registry."""
    found = []
    for package in plugin_packages():
        graph = import_graph(package)
        found += [f"  {describe(graph, c)}" for c in import_cycles(graph)]
    assert not found, "import circles in plugins/ (module or function level):\n" + "\n".join(found)


PUBLIC_MODULES = ("opzoo", "opzoo.training", "opzoo.evaluation", "opzoo.data", "opzoo.micro")
# the modules a plugin's table (``family``, whose PLUGIN is its entry point) may be imported by: its package alone
ABOVE_THE_TABLE = ("__init__",)


def test_first_party_plugins_import_public_names_and_their_tables_sit_on_top():
    """The plugins' layers: a first-party plugin imports only opzoo's public names (``__all__`` of opzoo,
    opzoo.training, opzoo.evaluation, opzoo.data); inside a plugin its checkpoint tables and entry point (``family``,
    whose ``PLUGIN`` the entry point names) are imported only by the package, never by the converter or the checks
    the tables use."""
    wrong = plugin_layer_violations(plugin_packages())
    assert not wrong, "plugin imports that break the plugins' layers:\n" + "\n".join(wrong)


def plugin_layer_violations(packages: list[Path]) -> list[str]:
    import importlib

    exported = {m: set(importlib.import_module(m).__all__) for m in PUBLIC_MODULES}
    wrong = []
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            for node in _imports(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    wrong += [f"{path}:{node.lineno} import {a.name}" for a in node.names
                              if a.name.startswith("opzoo.")]
                elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "opzoo":
                    if node.module not in exported:
                        wrong.append(f"{path}:{node.lineno} from {node.module}")
                    else:
                        wrong += [f"{path}:{node.lineno} {node.module}.{a.name}" for a in node.names
                                  if a.name not in exported[node.module]]
        graph = import_graph(package)
        for module, targets in graph.items():
            short = module.rpartition(".")[2] if module != package.name else "__init__"
            for target in targets:
                last = target.rpartition(".")[2]
                if last == "family" and short not in ABOVE_THE_TABLE:
                    wrong.append(f"{module} imports {target}")
    return wrong


def test_the_plugin_layer_check_finds_each_kind(tmp_path):
    _write(tmp_path, {
        "opzoo_bad/__init__.py": "from .family import TABLE\n",
        "opzoo_bad/family.py": "from .checks import check\nTABLE = ()\n",
        "opzoo_bad/checks.py": "def check():\n    from .family import TABLE\n",
        "opzoo_bad/converter.py": "from opzoo.registry.registry import Registry\nfrom opzoo import _LAZY, Fact\nimport opzoo.model_io\n",
        "opzoo_bad/helpers.py": "from . import family\n",
    })
    assert sorted(plugin_layer_violations([tmp_path / "opzoo_bad"])) == sorted([
        f"{tmp_path / 'opzoo_bad' / 'converter.py'}:1 from opzoo.registry.registry",
        f"{tmp_path / 'opzoo_bad' / 'converter.py'}:2 opzoo._LAZY",
        f"{tmp_path / 'opzoo_bad' / 'converter.py'}:3 import opzoo.model_io",
        "opzoo_bad.checks imports opzoo_bad.family", "opzoo_bad.helpers imports opzoo_bad.family"])


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 3 and parts[-1] in ("opzoo", "__main__") or len(parts) == 2 and parts[1] not in LAYERS:
        return "root"
    if parts[1] == "host":  # the plugin host loads everything: it sits at the top
        return "plugin-host"
    return parts[1] if parts[1] in LAYERS else "root"


def test_every_import_runs_down_the_layers_but_the_named_exceptions():
    graph = import_graph(OPZOO_ROOT)
    rank = {name: i for i, name in enumerate(LAYERS)}
    up = {(a, b) for a, targets in graph.items() for b in targets
          if a not in ("opzoo", "opzoo.__main__") and b != "opzoo" and rank[layer_of(b)] > rank[layer_of(a)]}
    assert up == UPWARD, f"arrows up the layers not in docs/architecture.md: {sorted(up - UPWARD)}; gone: {sorted(UPWARD - up)}"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_check_finds_a_circle_through_a_function_level_import(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "from .registry import get\n",
        "pkg/registry.py": """
            def get():
                from .models.net import Net   # function level: still a circle
                return Net
            """,
        "pkg/models/__init__.py": "",
        "pkg/models/net.py": "from ..registry import get\nclass Net: ...\n",
        "pkg/hub.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from .user import User   # type-only: never runs, still counted
            """,
        "pkg/user.py": "from pkg import hub\n",
        "pkg/cli.py": "import importlib\ndef main():\n    return importlib.import_module('pkg.commands')\n",
        "pkg/commands.py": "from pkg.cli import main\n",
    })
    graph = import_graph(tmp_path / "pkg")
    assert graph["pkg.models.net"] == {"pkg.registry"}
    assert graph["pkg.hub"] == {"pkg.user"}
    assert graph["pkg.user"] == {"pkg.hub"}
    assert graph["pkg.cli"] == {"pkg.commands"}
    cycles = import_cycles(graph)
    assert cycles == [["pkg.cli", "pkg.commands"], ["pkg.hub", "pkg.user"], ["pkg.models.net", "pkg.registry"]]
    assert describe(graph, cycles[2]) == "pkg.models.net -> pkg.registry -> pkg.models.net"


def test_the_check_finds_a_circle_through_a_package_init(tmp_path):
    # `from . import b` in a names module b; `from pkg import x` names the package's __init__
    _write(tmp_path, {
        "pkg/__init__.py": "from .a import x\n",
        "pkg/a.py": "x = 1\nfrom . import b\n",
        "pkg/b.py": "from pkg import x\n",
    })
    graph = import_graph(tmp_path / "pkg")
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg"}
    assert import_cycles(graph) == [["pkg", "pkg.a", "pkg.b"]]


def private_imports(roots: list[Path]) -> list[str]:
    """``file:line module.name`` for every ``from module import _name`` (a name its module keeps to itself) under
    ``roots``; a package's ``__future__`` and dunder names are not private."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in _imports(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                    found += [f"{path}:{node.lineno} {node.module or '.' * node.level}.{a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_imports_another_modules_private_names():
    """Issue 44: validate and benchmark took the command line's private helpers (_frame_shape_for, _one_line_errors,
    ...); what a module shares, it names publicly. The core and every first-party plugin package are read."""
    assert not private_imports([OPZOO_ROOT, *plugin_packages()])


def test_the_private_import_check_finds_one(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "def _helper(): pass\n",
                      "pkg/b.py": "from __future__ import annotations\nfrom .a import _helper\n"})
    assert private_imports([tmp_path / "pkg"]) == [f"{tmp_path / 'pkg' / 'b.py'}:2 a._helper"]


def test_the_registrys_old_home_still_imports_with_a_warning():
    """Issue 44 split host/ into the registry (low) and the plugin host (top); opzoo.host.registry and
    opzoo.host.provenance keep working for a release."""
    import importlib
    import sys
    import warnings

    import opzoo.registry.provenance
    import opzoo.registry.registry

    for name in ("registry", "provenance"):
        sys.modules.pop(f"opzoo.host.{name}", None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            old = importlib.import_module(f"opzoo.host.{name}")
        assert any(issubclass(w.category, DeprecationWarning) and f"opzoo.registry.{name}" in str(w.message)
                   for w in caught)
    assert old.Fact is opzoo.registry.provenance.Fact
    assert importlib.import_module("opzoo.host.registry").PretrainedSource is opzoo.registry.registry.PretrainedSource
