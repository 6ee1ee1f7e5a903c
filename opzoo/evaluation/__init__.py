"""Evaluation: a model rolled out over a file's trajectories and scored at the file's own grid (relative L2, The Well's
VRMSE, PDEBench's metric set, with bootstrap intervals and the persistence baseline), which of a file's trajectories a
model may call held-out, non-finite data named, the plots, and ``opzoo eval``/``rollout``/``validate``.

    from opzoo.evaluation import fit_files, evaluate_dataset
    model, frame_shape, (src,) = fit_files(opzoo.load("dpot-micro", pretrained=True), ["ns.h5"])
    result = evaluate_dataset(model, "ns", src, frame_shape, horizon=10)

:func:`fit_data` is the one rule that fits data files to a model: the Trainer, ``eval``, ``rollout`` and ``validate``
all use it.
"""

from .._lazy import lazy_exports

# imported on first use (PEP 562), so that the `opzoo` parser needs no torch: name -> the module that defines it
_LAZY = {
    **dict.fromkeys(["FittedData", "GridChoice", "fit_data", "fit_files", "choose_grid", "open_trajectories"], ".fit"),
    **dict.fromkeys(["DatasetResult", "Persistence", "evaluate_dataset", "evaluate_windows", "with_persistence",
                     "headline", "read_results", "write_results"], ".rollouts"),
    **dict.fromkeys(["l2_full", "l2_per_step"], ".l2"),
    **dict.fromkeys(["vrmse", "vrmse_fields"], ".vrmse"),
    **dict.fromkeys(["TrajectoryMetrics", "bootstrap"], ".pdebench_metrics"),
    **dict.fromkeys(["choose_split", "split_to_score", "trained_by"], ".splits"),
    **dict.fromkeys(["scan_trajectories", "bad_trajectories_of"], ".bad_data"),
    **dict.fromkeys(["plot_rollout_panels", "plot_error_curves"], ".plots"),
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = sorted(_LAZY)
