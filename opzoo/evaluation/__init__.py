"""Evaluation: a model rolled out over a file's trajectories and scored at the file's own grid (relative L2, The Well's
VRMSE, PDEBench's metric set, with bootstrap intervals and the persistence baseline), which of a file's trajectories a
model may call held-out, non-finite data named, the plots, and ``opzoo eval``/``rollout``/``validate``.

    from opzoo.evaluation import fit_files, evaluate_dataset, evaluate_files
    model, frame_shape, (src,) = fit_files(opzoo.load("dpot-micro", pretrained=True), ["ns.h5"])
    result = evaluate_dataset(model, "ns", src, frame_shape, horizon=10)
    evaluate_files(opzoo.load("dpot-micro", pretrained=True), "dpot-micro", ["ns.h5"], "eval_out")  # `opzoo eval`

:func:`fit_data` is the one rule that fits data files to a model: the Trainer, ``eval``, ``rollout`` and ``validate``
all use it.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

# imported on first use (PEP 562), so that the `opzoo` parser needs no torch: name -> the module that defines it
_LAZY = {
    **dict.fromkeys(["FittedData", "GridChoice", "fit_data", "fit_files", "choose_grid", "open_trajectories",
                     "contract_of"], ".fit"),
    **dict.fromkeys(["DatasetResult", "Persistence", "evaluate_dataset", "evaluate_windows", "with_persistence",
                     "persistence_result",
                     "headline", "read_results", "write_results"], ".rollouts"),
    **dict.fromkeys(["l2_full", "l2_per_step"], ".l2"),
    **dict.fromkeys(["vrmse", "vrmse_fields"], ".vrmse"),
    **dict.fromkeys(["TrajectoryMetrics", "bootstrap"], ".pdebench_metrics"),
    **dict.fromkeys(["choose_split", "split_to_score", "trained_by"], ".splits"),
    **dict.fromkeys(["scan_trajectories", "bad_trajectories_of"], ".bad_data"),
    **dict.fromkeys(["plot_rollout_panels", "plot_error_curves", "field2d", "pyplot", "save_figure"], ".plots"),
    **dict.fromkeys(["evaluate_files", "evaluate_every_window", "rollout_trajectory"], ".run"),
}

if TYPE_CHECKING:  # names for readers and IDEs: each is imported from its module on first use (below)
    from .bad_data import bad_trajectories_of, scan_trajectories
    from .fit import FittedData, GridChoice, choose_grid, contract_of, fit_data, fit_files, open_trajectories
    from .l2 import l2_full, l2_per_step
    from .pdebench_metrics import TrajectoryMetrics, bootstrap
    from .plots import field2d, plot_error_curves, plot_rollout_panels, pyplot, save_figure
    from .rollouts import (
        DatasetResult,
        Persistence,
        evaluate_dataset,
        evaluate_windows,
        headline,
        persistence_result,
        read_results,
        with_persistence,
        write_results,
    )
    from .run import evaluate_every_window, evaluate_files, rollout_trajectory
    from .splits import choose_split, split_to_score, trained_by
    from .vrmse import vrmse, vrmse_fields

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = [
    "DatasetResult", "FittedData", "GridChoice", "Persistence", "TrajectoryMetrics", "bad_trajectories_of",
    "bootstrap", "choose_grid", "choose_split", "contract_of", "evaluate_dataset", "evaluate_every_window", "evaluate_files",
    "evaluate_windows", "field2d", "fit_data",
    "fit_files", "headline", "l2_full", "persistence_result", "l2_per_step", "open_trajectories", "plot_error_curves",
    "plot_rollout_panels", "pyplot", "read_results", "rollout_trajectory", "save_figure", "scan_trajectories", "split_to_score",
    "trained_by", "vrmse", "vrmse_fields", "with_persistence", "write_results",
]
