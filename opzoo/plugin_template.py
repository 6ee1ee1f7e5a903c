"""``opzoo new-plugin NAME``: a plugin package that passes opzoo's conformance suite as written (docs/plugins.md, "A
starting point"): a checkpoint family (a mixer of its own on the core's ``simple`` backbone, two sizes, a card), a data
reader of a format of its own and a metric, and their tests. Every file is one of the templates below, with the
plugin's names put in; nothing else is generated.
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")

PYPROJECT = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "opzoo-__NAME__"
version = "0.1.0"
description = "__NAME__: an opzoo plugin (a checkpoint family, a data reader and a metric)"
requires-python = ">=3.10"
dependencies = ["opzoo"]

[project.optional-dependencies]
test = ["pytest>=7"]

[project.entry-points.opzoo]
__MODULE__ = "opzoo___MODULE__.plugin"

[tool.setuptools]
packages = ["opzoo___MODULE__"]

[tool.setuptools.package-data]
opzoo___MODULE__ = ["model_cards/*.md"]

[tool.pytest.ini_options]
markers = ["slow: the long checks (a 2-step fine-tune)"]
addopts = "-m 'not slow'"
'''

README = '''# opzoo-__NAME__

An opzoo plugin, from `opzoo new-plugin __NAME__`: the checkpoint family `__NAME__` (presets `__NAME__-s` and
`__NAME__-b`: a shift mixer of its own on opzoo's `simple` backbone), a reader of `__SUFFIX__` files (layout
`__NAME__-traj`) and the metric `__METRIC__`.

    pip install -e ".[test]"
    pytest            # opzoo.testing's conformance suite and the reader's and metric's tests
    opzoo plugins     # lists it, with its layout and metric
    opzoo list "__NAME__-*"

Change the network in `opzoo___MODULE__/plugin.py`, the table in `opzoo___MODULE__/family.py` (one `opzoo.Variant` per
checkpoint; `repo_id=` where its weights are published, and a converter for a foreign format: docs/adding-a-family.md),
the format in `opzoo___MODULE__/data_format.py` (docs/plugins.md, "A reader"), and keep `pytest` passing.
'''

INIT = '''"""__NAME__: an opzoo plugin (``opzoo new-plugin``), written against opzoo's public API only."""
'''

PLUGIN = '''"""The plugin's hooks: its mixer, reader and metric, then its checkpoint family."""

import torch
from torch import nn

import opzoo

from .data_format import METRIC, TrajSource
from .family import FAMILY, MIXER


class ShiftMixer(opzoo.Mixer):
    """Mixes each token with its neighbour along the first spatial axis: ``[B, *S, D] -> [B, *S, D]``."""

    def __init__(self, dim, shift=1):
        super().__init__()
        self.shift = shift
        self.proj = nn.Linear(2 * dim, dim)

    def forward(self, x):
        return self.proj(torch.cat([x, torch.roll(x, self.shift, dims=1)], dim=-1))


@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_mixer(MIXER, ShiftMixer)
    registry.register_reader(TrajSource)
    registry.register_metric(METRIC)


@opzoo.hookimpl
def opzoo_register_models(registry):
    registry.register_family(FAMILY)
'''

FAMILY = '''"""The checkpoint family ``__NAME__`` as one table (``opzoo.CheckpointFamily``): a row per size. No weights are
published yet: give the table ``repo_id=`` (and a ``converter=`` for a foreign format) when they are."""

from importlib.resources import files

import opzoo

MIXER = "__NAME__-shift"


def facts(variant):
    return (opzoo.Fact("width", str(variant.args["width"]), "opzoo_new_plugin template"),)


FAMILY = opzoo.CheckpointFamily(
    "__NAME__", backbone="simple",
    args=dict(depth=1, in_channels=2, out_channels=2, in_timesteps=3, mixer=MIXER, mixer_args={"shift": 1}),
    variants=(
        opzoo.Variant("__NAME__-s", args={"width": 16}),
        opzoo.Variant("__NAME__-b", args={"width": 32}),
    ),
    provenance=facts,
    card=files("opzoo___MODULE__") / "model_cards" / "__NAME__.md",
    card_fields=lambda v: {"width": v.args["width"]},
)
'''

CARD = '''---
license: mit
tags: [opzoo]
---
# ${name}

The __NAME__ shift operator at width $width (${parameters} parameters).
'''

DATA_FORMAT = '''"""A trajectory format of the plugin's own (``__SUFFIX__``) and its reader, and a metric.

A ``__SUFFIX__`` file is the magic ``__MAGIC__``, one line of JSON (``{"shape": [N, T, C, H, W], "fields": [...]}``),
then the values as little-endian float32 in that order (each frame channels-first).
"""

from __future__ import annotations

import json

import numpy as np

import opzoo
from opzoo.data import DataFormatError, SourceInfo, TrajectorySource

MAGIC = b"__MAGIC__"


def write_traj(path, data: np.ndarray, fields: list[str]) -> None:
    """Write ``data [N, T, C, H, W]`` as a ``__SUFFIX__`` file."""
    header = json.dumps({"shape": list(data.shape), "fields": list(fields)}).encode() + b"\\n"
    with open(path, "wb") as f:
        f.write(MAGIC + header)
        f.write(np.ascontiguousarray(data, dtype="<f4").tobytes())


class TrajSource(TrajectorySource):
    """``__SUFFIX__`` files as opzoo's ``N`` trajectories ``[H, W, T, C]``."""

    layout = "__NAME__-traj"
    suffixes = ("__SUFFIX__",)
    expects = "a __SUFFIX__ file: __MAGIC__, a JSON line {shape: [N, T, C, H, W], fields}, then float32 values"

    @classmethod
    def detect(cls, f) -> bool:  # told by its suffix, never from an HDF5 handle
        return False

    def _h5(self):  # the open "file" of this format: a read-only memory map of its values
        if self._file is None:
            with open(self.path, "rb") as f:
                if f.read(len(MAGIC)) != MAGIC:
                    raise DataFormatError(f"{self.path}: not a __SUFFIX__ file (no {MAGIC.decode()} at its start)")
                line = f.readline(4096)
                offset = f.tell()
            try:
                header = json.loads(line)
                shape, self.file_fields = [int(n) for n in header["shape"]], list(header["fields"])
            except (ValueError, KeyError, TypeError) as e:
                raise DataFormatError(f"{self.path}: its header line is not {{shape, fields}} JSON ({e})") from None
            if len(shape) != 5 or len(self.file_fields) != shape[2]:
                raise DataFormatError(f"{self.path}: shape {shape} is not [N, T, C, H, W] with one field per channel")
            self._file = np.memmap(self.path, dtype="<f4", mode="r", offset=offset, shape=tuple(shape))
        return self._file

    def _validate(self, values) -> SourceInfo:
        n, t, _, h, w = values.shape
        return SourceInfo(layout=self.layout, n_samples=n, spatial_shape=(h, w), n_steps=t, fields=self.file_fields,
                          axis_note="[N, T, C, H, W] as every __SUFFIX__ file stores them")

    def _read(self, values, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        return np.asarray(values[sample, t_start:t_stop]).transpose(2, 3, 0, 1)  # [t, C, H, W] -> [H, W, t, C]


def _mean_absolute(pred, truth, lengths):
    """Each trajectory's mean absolute error over grid, steps and channels: ``[B]``."""
    return (pred - truth).abs().flatten(1).mean(1)


METRIC = opzoo.Metric("__METRIC__", _mean_absolute, description="mean absolute error over grid, steps and channels")
'''

TESTS = '''"""The plugin's tests: opzoo's conformance suite on its family, and its reader and metric on a file it writes."""

import numpy as np
import torch

import opzoo
from opzoo.testing import FamilyConformance
from opzoo___MODULE__.data_format import write_traj


class Test__CLASS__(FamilyConformance):
    family = "__NAME__"
    tiny = {"width": 8}
    grid = (8, 8)


def test_the_reader_reads_what_was_written_and_the_metric_scores_it(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((3, 5, 2, 8, 8)).astype(np.float32)  # [N, T, C, H, W]
    path = tmp_path / "run__SUFFIX__"
    write_traj(path, data, ["u", "v"])
    with opzoo.data.open_source(str(path)) as source:
        assert source.info.layout == "__NAME__-traj" and source.info.fields == ["u", "v"]
        np.testing.assert_array_equal(source.read(1, 1, 4), data[1, 1:4].transpose(2, 3, 0, 1))
    from opzoo.evaluation.pdebench_metrics import registered_metrics

    metric = {m.name: m for m in registered_metrics()}["__METRIC__"]
    pred, truth = torch.zeros(2, 8, 8, 3, 2), torch.ones(2, 8, 8, 3, 2)
    assert torch.equal(metric.parts(pred, truth, (1.0, 1.0)), torch.ones(2))
'''


def plugin_files(name: str) -> dict[str, str]:
    """``{relative path: text}`` of the plugin package ``opzoo-NAME``."""
    if not _NAME.match(name) or len(name) > 40:
        raise ConfigError(f"new-plugin: {name!r} is not a plugin name: lower-case letters and digits, words joined by "
                          f"'-', starting with a letter (e.g. my-net), at most 40 characters")
    module = name.replace("-", "_")
    compact = name.replace("-", "")
    values = {"__NAME__": name, "__MODULE__": module, "__SUFFIX__": f".{compact}traj",
              "__MAGIC__": (compact.upper() + "TRAJ1")[:24], "__METRIC__": f"{compact.upper()}_MAE",
              "__CLASS__": "".join(part.capitalize() for part in name.split("-"))}

    def fill(text: str) -> str:
        for key in sorted(values, key=len, reverse=True):
            text = text.replace(key, values[key])
        return text

    package = f"opzoo_{module}"
    return {"pyproject.toml": fill(PYPROJECT), "README.md": fill(README), f"{package}/__init__.py": fill(INIT),
            f"{package}/plugin.py": fill(PLUGIN), f"{package}/family.py": fill(FAMILY),
            f"{package}/data_format.py": fill(DATA_FORMAT), f"{package}/model_cards/{name}.md": fill(CARD),
            f"tests/test_{module}.py": fill(TESTS)}


def write_plugin(name: str, out: str | Path | None = None, force: bool = False) -> Path:
    """Write ``opzoo-NAME/`` (into ``out``, default the current directory); a directory that exists is refused unless
    ``force``. Returns the package's directory."""
    from .files import atomic_write

    files = plugin_files(name)
    root = Path(out) if out is not None else Path.cwd() / f"opzoo-{name}"
    if root.exists() and any(root.iterdir()) and not force:
        raise ConfigError(f"new-plugin: {root} exists and is not empty; name another --out, or pass --force to write "
                          f"the plugin's files into it")
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
    return root


__all__ = ["plugin_files", "write_plugin"]
