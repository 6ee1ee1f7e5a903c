"""``opzoo export --format onnx|pt2``: one step of a model, ``[B, *S, T_in, C] -> [B, *S, T_out, C]``, as an ONNX file
or a ``torch.export`` program, checked against the eager model before it is left on disk (docs/export.md).

The graph is traced from :func:`opzoo.with_export_forms` (layers with complex parameters replaced by their real-
arithmetic forms) in eval mode, with the batch dynamic and the grid dynamic where the family's code allows it. The
written file is read back (onnxruntime for ONNX, ``torch.export.load`` for pt2) and run on inputs drawn for the model at
two batch sizes, and at a second grid where the grid is dynamic; a difference beyond float32 rounding, or a failure,
leaves nothing behind. A JSON beside the file records what was checked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from .._version import __version__
from ..contracts.export_form import ExportForm, complex_layers, with_export_forms
from ..errors import ConfigError, ExportRefused
from ..files import atomic_write, clean_dead_temporaries, temporary_name
from .checksums import sha256_file
from .example_input import example_input, grid_step, input_grid

FORMATS = ("onnx", "pt2")
OPSET = 20  # the first with DFT's inverse and onesided attributes as the dynamo exporter emits them
# the relative L2 error ||exported - eager|| / ||eager|| (opzoo's rel L2) a file may keep: float32 rounding through a
# deep network in another order. An ONNX file is held to it as written (onnxruntime without graph optimizations);
# what onnxruntime's default optimizations add is measured beside it and said (docs/export.md)
TOLERANCE = 1e-5
TRACE_BATCH = 2
CHECK_BATCHES = (1, 3)  # neither is the traced batch: a graph specialized to it fails here
EXTRA = "pip install 'opzoo[export]'"


@dataclasses.dataclass
class ExportCheck:
    batch: int
    grid: list[int]
    max_abs: float
    rel_l2: float
    optimized_rel_l2: float | None = None  # ONNX: onnxruntime with its default graph optimizations


@dataclasses.dataclass
class ExportReport:
    """What :func:`export_model` wrote and checked (also the JSON beside the file)."""

    path: str
    format: str
    model: str
    input: dict[str, Any]
    output: dict[str, Any]
    dynamic: dict[str, Any]
    checks: list[ExportCheck]
    tolerance: float
    export_forms: list[str]
    checked_with: dict[str, str]
    weights: str = ""  # which weights the file holds, as the caller said (the command: its weights line)
    notes: list[str] = dataclasses.field(default_factory=list)
    sha256: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def require_export_dependencies(fmt: str) -> dict[str, str]:
    """The versions the check runs with; a missing optional dependency is one line naming the extra."""
    versions = {"opzoo": __version__, "torch": torch.__version__}
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: opzoo exports 'onnx' or 'pt2' (or writes an opzoo repo, 'repo')")
    if fmt == "onnx":
        for module in ("onnx", "onnxscript", "onnxruntime"):
            try:
                versions[module] = metadata.version(module)
            except metadata.PackageNotFoundError:
                raise ConfigError(f"--format onnx needs {module}, which is not installed: {EXTRA}") from None
        versions["opset"] = str(OPSET)
    return versions


def _deepest(error: BaseException) -> BaseException:
    while error.__cause__ is not None:
        error = error.__cause__
    return error


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def _layer_of(program, error: BaseException) -> str:
    """`` in layer NAME (Class)`` for the operator the ONNX exporter names in ``error``, from the traced graph's module
    stack; empty when it names none."""
    found = re.search(r"op='([\w.]+)', overload='(\w+)'", str(error))
    if not found:
        return ""
    exact, stem = f"{found[1]}.{found[2]}", found[1].rsplit(".", 1)[-1]
    nodes = [n for n in program.graph.nodes if n.op == "call_function" and n.meta.get("nn_module_stack")]
    # the exporter names the operator after its decompositions (argsort -> sort): the exact name first, then an
    # operator whose name holds the stem (aten.argsort.stable holds sort)
    for match in (lambda target: target == exact, lambda target: stem in target.split(".")[1] if target.count(".") else False):
        for node in nodes:
            if match(str(node.target)):
                path, kind = list(node.meta["nn_module_stack"].values())[-1]
                return f" in layer {path} ({str(kind).rsplit('.', 1)[-1].rstrip(chr(39) + '>')})"
    return ""


def _run_eager(model: nn.Module, x: Tensor) -> Tensor:
    with torch.no_grad():
        return model(x)


def _trace(model: nn.Module, x: Tensor, step: int | None):
    """The program of ``model`` at ``x``: the batch dynamic where the code allows it (checked after), each grid axis
    a multiple of ``step`` (or fixed when None)."""
    d = x.ndim - 3
    dims: dict[int, Any] = {0: torch.export.Dim.AUTO}
    for i in range(d):
        dims[1 + i] = step * torch.export.Dim(f"grid{i}") if step else torch.export.Dim.STATIC
    with torch.no_grad():
        return torch.export.export(model, (x,), dynamic_shapes=(dims,), strict=False)


def _dynamic_axes(program, d: int) -> dict[str, bool]:
    """Which input axes the traced program left symbolic."""
    name = program.graph_signature.user_inputs[0]
    shape = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == name).meta["val"].shape
    symbolic = [not isinstance(n, int) for n in shape]
    return {"batch": symbolic[0], "grid": all(symbolic[1:1 + d])}


class _Written:
    """The exported file in a staging directory beside ``path``, runnable as it was written."""

    def __init__(self, fmt: str, program, path: Path, stage: Path, example: Tensor):
        self.fmt, self.file = fmt, stage / path.name
        if fmt == "pt2":
            torch.export.save(program, self.file)
            self.run_program = torch.export.load(self.file).module()
        else:
            import onnxruntime

            with contextlib.redirect_stdout(io.StringIO()):  # the exporter prints its steps
                onnx_program = torch.onnx.export(program, (example,), dynamo=True, opset_version=OPSET,
                                                 input_names=["x"], output_names=["y"], verbose=False)
            size = sum(p.numel() * p.element_size() for p in program.state_dict.values())
            onnx_program.save(self.file, external_data=size > 1.5 * 2**30)  # protobuf's 2 GiB limit
            exact, default = onnxruntime.SessionOptions(), onnxruntime.SessionOptions()
            exact.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
            for options in (exact, default):
                options.log_severity_level = 3  # its warnings (a CastLike it cannot fold) are not the user's
            self.sessions = [onnxruntime.InferenceSession(str(self.file), options, providers=["CPUExecutionProvider"])
                             for options in (exact, default)]
            self.names = self.sessions[0].get_inputs()[0].name, self.sessions[0].get_outputs()[0].name

    def __call__(self, x: Tensor, optimized: bool = False) -> Tensor:
        """The file's output (ONNX: as written, or with onnxruntime's default graph optimizations)."""
        if self.fmt == "pt2":
            with torch.no_grad():
                return self.run_program(x)
        session = self.sessions[1 if optimized else 0]
        return torch.from_numpy(session.run([self.names[1]], {self.names[0]: x.numpy()})[0])


def _difference(out: Tensor, ref: Tensor, batch: int, grid: list[int], name: str) -> ExportCheck:
    if out.shape != ref.shape:
        raise ExportRefused(f"{name}: the exported graph gives {list(out.shape)} at batch {batch}, grid {grid}; the model "
                            f"{list(ref.shape)}")
    diff = out.double() - ref.double()
    norm = ref.double().norm().item()
    return ExportCheck(batch, grid, diff.abs().max().item(), diff.norm().item() / norm if norm > 0 else diff.norm().item())


def export_model(model: nn.Module, path: str | os.PathLike, fmt: str = "onnx", *, grid: Sequence[int] | None = None,
                 seed: int = 0, tolerance: float = TOLERANCE, name: str | None = None,
                 weights: str = "") -> ExportReport:
    """Export one step of ``model`` to ``path`` (``fmt``: ``"onnx"`` or ``"pt2"``), checked against the model in
    float32 at two batch sizes, and at a second grid where the grid is dynamic, and a JSON of the checks beside it
    (``path`` + ``.json``). ``grid`` defaults to the model's pretrained grid (:func:`input_grid`); ``weights`` says
    which weights it holds, for the record (``opzoo export`` passes its weights line). Raises
    :class:`ExportRefused` (nothing written) when the graph cannot be made or differs beyond ``tolerance``."""
    versions = require_export_dependencies(fmt)
    path = Path(path)
    name = name or getattr(model, "preset_name", None) or type(model).__name__
    other = sorted({str(p.dtype) for p in model.parameters() if p.dtype not in (torch.float32, torch.complex64)})
    if other:
        raise ConfigError(f"{name}: opzoo exports float32 models; this one holds {other} (model.float())")
    was_training = model.training
    model.eval()
    try:
        return _export(model, path, fmt, versions, grid, seed, tolerance, name, weights)
    finally:
        model.train(was_training)


def _export(model, path, fmt, versions, grid, seed, tolerance, name, weights) -> ExportReport:
    form = with_export_forms(model)
    left = complex_layers(form)
    if left:
        raise ExportRefused(f"{name}: layer {left[0]} holds complex tensors and has no export form (ONNX and "
                            "torch.export's serializer take real tensors only); its plugin can give it one "
                            "(opzoo.ExportForm, docs/export.md)")
    forms = sorted({type(m).__name__ for m in model.modules() if isinstance(m, ExportForm)})
    grid, _ = input_grid(model, grid)
    d = len(grid)
    x = example_input(model, TRACE_BATCH, grid, seed)
    try:
        traced_out = _run_eager(model, x)
    except Exception as error:  # noqa: BLE001 - said as the model's refusal of the input
        advice = "" if isinstance(error, ConfigError) else "; name a grid it takes with --grid"  # one that says its own
        raise ExportRefused(f"{name} refuses its example input {list(x.shape)} ([B, *S, T_in, C]): "
                            f"{_first_line(error)}{advice}") from None
    if not bool(torch.isfinite(traced_out).all()):  # nothing to compare a file with
        raise ExportRefused(f"{name} gives a non-finite output on its example input {list(x.shape)} (standard-normal "
                            "values): the export cannot be checked; name another grid with --grid")
    second = [n + grid_step(model) for n in grid]
    fixed = getattr(model, "fixed_export_grid", None)
    if fixed:
        grid_note, attempts = f"{type(model).__name__}: {fixed}", [False]
    else:
        try:
            _run_eager(model, example_input(model, 1, second, seed))
            grid_note, attempts = "", [True, False]
        except Exception as error:  # noqa: BLE001 - the model itself takes one grid
            grid_note, attempts = f"the model takes no other grid ({_first_line(error)})", [False]
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_dead_temporaries(path.parent, path.name)  # staging directories of an export killed before it finished
    failures = []
    for dynamic_grid in attempts:
        stage = temporary_name(path, "export")
        stage.mkdir()
        try:
            try:
                program = _trace(form, x, grid_step(model) if dynamic_grid else None)
            except Exception as error:  # noqa: BLE001 - the tracer's own failure, said in one line
                raise ExportRefused(f"{name}: torch.export fails: {_first_line(_deepest(error))}") from None
            dynamic = _dynamic_axes(program, d)
            if dynamic["grid"]:  # a graph that guards on the traced grid fails here, before a costly conversion
                try:
                    with torch.no_grad():
                        program.module()(example_input(model, 1, second, seed))
                except Exception as error:  # noqa: BLE001 - said as the graph's failure at that grid
                    raise ExportRefused(f"{name}: the traced graph fails at grid {second}: "
                                        f"{_first_line(error)}") from None
            try:
                written = _Written(fmt, program, path, stage, x)
            except Exception as error:  # noqa: BLE001 - the serializer's or the ONNX exporter's failure
                raise ExportRefused(f"{name}: {'torch.export.save' if fmt == 'pt2' else 'the ONNX exporter'} fails"
                                    f"{_layer_of(program, _deepest(error))}: {_first_line(_deepest(error))}") from None
            if not dynamic["batch"]:
                raise ExportRefused(f"{name}: the traced graph fixed the batch at {TRACE_BATCH} (the family's code "
                                    "branches on it)")
            grids = [grid, second] if dynamic["grid"] else [grid]
            checks = []
            for g in grids:
                for batch in CHECK_BATCHES:
                    xb = example_input(model, batch, g, seed + batch)
                    ref = _run_eager(model, xb)
                    try:
                        out = written(xb)
                    except Exception as error:  # noqa: BLE001 - the exported graph's failure at this shape
                        raise ExportRefused(f"{name}: the exported graph fails at batch {batch}, grid {g}: "
                                            f"{_first_line(error)}") from None
                    checks.append(_difference(out, ref, batch, g, name))
                    if fmt == "onnx":
                        optimized = _difference(written(xb, optimized=True), ref, batch, g, name)
                        checks[-1].optimized_rel_l2 = optimized.rel_l2
                    if not checks[-1].rel_l2 <= tolerance:
                        raise ExportRefused(f"{name}: the exported graph differs from the model by "
                                            f"{checks[-1].rel_l2:.2e} (relative L2; at most {tolerance:.0e}) at batch "
                                            f"{batch}, grid {g}")
            drift = max((c.optimized_rel_l2 or 0.0) for c in checks)
            notes = [f"onnxruntime's default graph optimizations move the output by {drift:.1e} (relative L2), more "
                     f"than the file's {max(c.rel_l2 for c in checks):.1e}: for the file's own accuracy, run it with "
                     "graph_optimization_level=ORT_DISABLE_ALL (docs/export.md)"] if drift > tolerance else []
            if dynamic_grid and not dynamic["grid"]:
                grid_note = "torch.export fixed it (the family's code branches on the grid's sizes)"
            report = ExportReport(
                path=str(path), format=fmt, model=name,
                input={"name": "x", "layout": "[B, *S, T_in, C]", "shape": list(x.shape[1:]), "dtype": "float32"},
                output={"name": "y", "layout": "[B, *S, T_out, C]", "shape": list(traced_out.shape[1:])},
                dynamic={"batch": True, "grid": dynamic["grid"], "grid_step": grid_step(model) if dynamic["grid"]
                         else None, "grid_note": "" if dynamic["grid"] else grid_note},
                checks=checks, tolerance=tolerance, export_forms=forms, checked_with=versions, notes=notes, weights=weights)
            _place(stage, path, report)
            return report
        except ExportRefused as error:
            failures.append(str(error))
            if dynamic_grid:  # the lesser failure: said in the record of the fixed-grid file
                grid_note = f"with a dynamic grid, {str(error).split(': ', 1)[-1]}"[:240]
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    raise ExportRefused(failures[-1])  # the fixed grid's (a dynamic one's failure is the lesser)


def _place(stage: Path, path: Path, report: ExportReport) -> None:
    """Move the checked file (and its external data) from ``stage`` to ``path``'s directory, then its JSON."""
    report.sha256 = sha256_file(stage / path.name)
    for member in sorted(stage.iterdir(), key=lambda p: p.name == path.name):  # the model file last
        os.replace(member, path.parent / member.name)
    atomic_write(Path(f"{path}.json"), json.dumps(report.to_json(), indent=2) + "\n")
