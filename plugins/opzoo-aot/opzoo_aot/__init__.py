"""opzoo-aot: the AOT hyper-connection Residual (registered as residual ``aot``) and aot-pot-* presets.

Public API::

    AOTResidual, AOTStreams          # the residual and its stream adapter (DESIGN §6.3)
    AOTState                         # the state between sub-layers (streams, pending update, summary)
    sinkhorn_knopp                   # float32, log-space, batched Sinkhorn–Knopp
    cpu_kernels.empty_cache          # release the CPU kernels' buffer pool
    collect_diagnostics, AOTDiagnostics, amax_gains, composite_products, plot_amax_gains
"""

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
from . import cpu_kernels
from .residual import AOT_ARGS, AOTResidual, AOTState, AOTStreams, check_aot_args
from .sinkhorn import sinkhorn_knopp, sinkhorn_knopp_eager

__all__ = [
    "AOTResidual", "AOTStreams", "AOTState", "cpu_kernels", "AOT_ARGS", "check_aot_args", "sinkhorn_knopp",
    "sinkhorn_knopp_eager",
    "AOTDiagnostics", "Gains", "SubLayerCoefficients", "amax_gains", "aot_residuals", "collect_diagnostics",
    "composite_products", "plot_amax_gains",
]
