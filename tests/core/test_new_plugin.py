"""Issue 70: `opzoo new-plugin NAME` writes a plugin package whose own tests (opzoo's conformance suite on its family,
its reader and its metric) pass as written, once pip-installed."""

import os
import subprocess
import sys

import pytest

import opzoo
from opzoo.cli import main
from opzoo.plugin_template import plugin_files

from .fake_dists import env_enabling


def test_the_files_and_the_names_it_refuses(tmp_path, capsys):
    files = plugin_files("my-net")
    assert sorted(files) == ["README.md", "opzoo_my_net/__init__.py", "opzoo_my_net/data_format.py",
                             "opzoo_my_net/family.py", "opzoo_my_net/model_cards/my-net.md",
                             "opzoo_my_net/plugin.py", "pyproject.toml", "tests/test_my_net.py"]
    assert 'my_net = "opzoo_my_net.plugin"' in files["pyproject.toml"]
    assert all("__NAME__" not in t and "__MODULE__" not in t for t in files.values())
    for bad in ("My-Net", "my_net", "1net", "my--net", "", "x" * 41):
        with pytest.raises(opzoo.ConfigError, match="is not a plugin name"):
            plugin_files(bad)
    out = tmp_path / "p"
    assert main(["new-plugin", "my-net", "--out", str(out)]) == 0
    assert (out / "opzoo_my_net" / "family.py").read_text() == files["opzoo_my_net/family.py"]
    assert main(["new-plugin", "my-net", "--out", str(out)]) == 2  # not empty: refused, nothing overwritten
    assert "exists and is not empty" in capsys.readouterr().err


@pytest.mark.slow  # 20 s: a pip install and the package's own test run
def test_the_written_package_passes_its_own_tests_as_written(tmp_path):
    out, site = tmp_path / "opzoo-my-net", tmp_path / "site"
    assert main(["new-plugin", "my-net", "--out", str(out)]) == 0
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target",
                    str(site), str(out)], check=True, capture_output=True, text=True)
    env = {**os.environ, "PYTHONPATH": str(site), **env_enabling("opzoo-my-net")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-m",
                             "", "tests"], cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "12 passed, 6 skipped" in result.stdout  # the conformance suite, its slow fine-tune, the reader's test
