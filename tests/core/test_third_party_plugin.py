"""A third-party plugin installed the way a user would: `pip install` of its own package."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .fake_dists import env_enabling
from .subprocess_utils import run_python

PLUGIN_SOURCE = Path(__file__).resolve().parents[1] / "third_party_plugin"


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory):
    """pip-installs tests/third_party_plugin into a private target directory (the environment is untouched)."""
    target = tmp_path_factory.mktemp("site")
    source = tmp_path_factory.mktemp("src") / "plugin"
    shutil.copytree(PLUGIN_SOURCE, source)  # setuptools builds in the source tree: keep ours clean
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True, capture_output=True, text=True,
    )
    assert any(p.name.startswith("opzoo_example_plugin-0.3.1.dist-info") for p in target.iterdir())
    return target


def test_installed_plugin_is_found_by_load_and_runs(installed_plugin):
    code = """
import torch, opzoo
model = opzoo.load("example-shift-op")
assert type(model.blocks[0].mixer).__module__ == "opzoo_example_plugin.plugin"
out = model(torch.randn(2, 8, 8, 3, 2))
assert out.shape == (2, 8, 8, 1, 2) and torch.isfinite(out).all()
print(opzoo.get_registry().owner("mixer", "example-shift"))
"""
    result = run_python(code, env={"PYTHONPATH": str(installed_plugin), **env_enabling("opzoo-example-plugin")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "opzoo-example-plugin"


def test_installed_plugin_is_listed_by_the_cli(installed_plugin):
    result = run_python("import sys, opzoo.cli; sys.exit(opzoo.cli.main(['plugins']))",
                        env={"PYTHONPATH": str(installed_plugin), **env_enabling("opzoo-example-plugin")})
    assert result.returncode == 0, result.stderr
    assert "opzoo-example-plugin 0.3.1" in result.stdout


def test_without_the_install_the_preset_is_unknown():
    result = run_python("import opzoo; print(opzoo.get_registry().has_preset('example-shift-op'))")
    assert result.stdout.strip() == "False"
