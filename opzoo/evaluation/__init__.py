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

from .._lazy import lazy_exports, typed_imports

if TYPE_CHECKING:  # each lazy name, once: imported from its module on first use (opzoo._lazy.typed_imports)
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

_LAZY = typed_imports(__file__)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = [*_LAZY]
