"""The export-form marker: how a layer that ONNX cannot take as written (complex parameters, a complex
matmul) gives ``opzoo export`` a form that computes the same function in real arithmetic (docs/export.md).

A layer opts in by defining one method (no base class, no import of opzoo needed)::

    class MySpectralConv(nn.Module):
        def export_form(self) -> nn.Module:
            # a module with the same forward function, whose parameters, buffers and intermediates are real
            # (complex values only as the output of an FFT and the input of an inverse one)
            return MyRealSpectralConv(self)

The exporter builds the model's export graph from :func:`with_export_forms` (a copy of the model in which every
such layer is replaced by its form); the model itself is never changed. A layer's test holds its form equal to it
in float64 (docs/export.md, "What was checked"). :func:`complex_layers` names the layers that keep complex tensors
and have no form, which the exporter refuses in one line.
"""

from __future__ import annotations

import copy
from typing import Protocol, runtime_checkable

from torch import nn

__all__ = ["ExportForm", "with_export_forms", "complex_layers"]


@runtime_checkable
class ExportForm(Protocol):
    """A module with an export form: ``export_form() -> nn.Module`` computing the same function in real arithmetic."""

    def export_form(self) -> nn.Module: ...


def with_export_forms(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` (in its mode) in which every :class:`ExportForm` layer is replaced by its form (a
    form replaces its layer's whole subtree)."""
    return _replace(copy.deepcopy(model))


def _has_form(module: nn.Module) -> bool:
    return isinstance(module, ExportForm) and callable(getattr(module, "export_form", None))


def _replace(module: nn.Module) -> nn.Module:
    if _has_form(module):
        return module.export_form().train(module.training)
    for name, child in list(module.named_children()):
        new = _replace(child)
        if new is not child:
            setattr(module, name, new)
    return module


def complex_layers(model: nn.Module) -> list[str]:
    """``"name (Class)"`` of every module holding a complex parameter or buffer of its own (not through a
    submodule): what ONNX cannot take, and what an export form would replace."""
    out = []
    for name, module in model.named_modules():
        own = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
        if any(t is not None and t.is_complex() for _, t in own):
            out.append(f"{name or '(model)'} ({type(module).__name__})")
    return out
