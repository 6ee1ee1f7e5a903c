"""Installed-distribution layouts (dist-info + module) written to a directory, as pip would."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path


def write_dist(root: Path, dist: str, version: str, module: str, source: str, ep_name: str | None = None) -> None:
    """A distribution ``dist`` whose entry point in group ``opzoo`` loads module ``module``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[opzoo]\n{ep_name or module} = {module}\n")
    (info / "RECORD").write_text("")


def env_enabling(*dists: str) -> dict[str, str]:
    """Environment for a process that must load ``dists``: when ``OPZOO_PLUGINS`` restricts loading (e.g. the
    core's tests run with ``OPZOO_PLUGINS=``, no first-party plugin), the fake distributions are added to it."""
    if "OPZOO_PLUGINS" not in os.environ:
        return {}
    return {"OPZOO_PLUGINS": ",".join(filter(None, [os.environ["OPZOO_PLUGINS"], *dists]))}


def enable(monkeypatch, *dists: str) -> None:
    """:func:`env_enabling` for this process."""
    for k, v in env_enabling(*dists).items():
        monkeypatch.setenv(k, v)


MIXER_PLUGIN = '''
import opzoo
from opzoo.layers.mixers import PointwiseMLPMixer

@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_mixer("{name}", PointwiseMLPMixer)
'''
