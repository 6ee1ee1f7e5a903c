"""opzoo-aot: the AOT hyper-connection Residual (registered as residual ``aot``) and aot-pot-* presets.

Public API::

    AOTResidual, AOTStreams, AOTState   # the residual, its stream adapter and state (docs/models.md §3)
    equations                        # the equations as functions of tensors (sinkhorn_knopp, coefficients, ...)
    collect_diagnostics, AOTDiagnostics, amax_gains, composite_products, plot_amax_gains
"""

from . import equations
from .diagnostics import (
    AOTDiagnostics,
    Gains,
    SubLayerCoefficients,
    amax_gains,
    aot_residuals,
    collect_diagnostics,
    composite_products,
    plot_amax_gains,
)
from .equations import sinkhorn_knopp
from .residual import AOT_ARGS, AOTResidual, AOTResidualArgs, AOTState, AOTStreams, check_aot_args

__all__ = [
    "AOTResidual", "AOTResidualArgs", "AOTStreams", "AOTState", "AOT_ARGS", "check_aot_args", "equations", "sinkhorn_knopp",
    "AOTDiagnostics", "Gains", "SubLayerCoefficients", "amax_gains", "aot_residuals", "collect_diagnostics",
    "composite_products", "plot_amax_gains",
]
