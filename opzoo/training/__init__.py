"""Training: auto-regressive denoising pretraining, fine-tuning, DDP (DPOT paper, section 3); a model's scores are
:mod:`opzoo.evaluation`'s (whose names stay importable from here).

    from . import load_run_config, Trainer
    Trainer(load_run_config("configs/micro-pot.yaml")).fit()

Plugins change optimization through :class:`OptimizerHook` (see ``docs/training.md``).
"""


from .._lazy import lazy_exports

# imported on first use (PEP 562), so that the `opzoo` parser (opzoo.training.cli) needs no torch:
# name -> the module of this package that defines it
_LAZY = {
    **dict.fromkeys(["CheckpointReadError", "latest_checkpoint", "list_checkpoints", "read_checkpoint"], ".checkpoint"),
    **dict.fromkeys(["RunConfig", "load_run_config", "parse_run_config", "read_document"], ".config"),
    "StepBatchSampler": "opzoo.data.sampler",
    "EMA": ".ema",
    **dict.fromkeys(["DatasetResult", "Persistence", "evaluate_dataset", "read_results", "write_results"],
                    "opzoo.evaluation.rollouts"),
    "generate_dataset": ".generate",
    **dict.fromkeys(["field2d", "pyplot", "save_figure"], "opzoo.evaluation.plots"),
    "adapt_model": "opzoo.model_io.adapt",
    **dict.fromkeys(["adapt_to_data", "finetune_config"], ".finetune"),
    **dict.fromkeys(["OptimizerHook", "StepContext"], ".hooks"),
    "read_log": ".logger",
    **dict.fromkeys(["l2_full", "l2_per_step", "relative_l2_loss"], "opzoo.evaluation.l2"),
    **dict.fromkeys(["add_denoising_noise", "denoising_noise"], ".noise"),
    **dict.fromkeys(["build_optimizer", "build_param_groups"], ".optim"),
    **dict.fromkeys(["one_cycle_factor", "schedule_factor"], ".schedule"),
    **dict.fromkeys(["Trainer", "TrainResult"], ".trainer"),
    "TrainingDivergedError": ".forensics",
    **dict.fromkeys(["HARMLESS_KEYS", "RunDirBusyError", "RunDirError", "flatten_config", "is_harmless"],
                    ".run_dir"),
    "RunStopped": ".stop",
}


# old names, kept for one release (CHANGELOG.md): name -> (module, new name, note)
_DEPRECATED = {
    "Adapt": ("opzoo.data", "FrameShape", "the same fields; removed in the next release"),
    "H5Trajectories": ("opzoo.data", "TrajectoryDataset", "the same arguments; removed in the next release"),
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), _DEPRECATED)


__all__ = [
    "Trainer", "TrainResult", "TrainingDivergedError", "RunConfig", "load_run_config", "parse_run_config", "read_document",
    "OptimizerHook", "StepContext", "build_optimizer", "build_param_groups", "one_cycle_factor", "schedule_factor",
    "relative_l2_loss", "l2_full", "l2_per_step", "denoising_noise", "add_denoising_noise", "EMA",
    "evaluate_dataset", "write_results", "read_results", "DatasetResult", "Persistence", "generate_dataset",
    "pyplot", "save_figure", "field2d", "read_log", "finetune_config", "adapt_model", "adapt_to_data",
    "StepBatchSampler",
    "latest_checkpoint", "list_checkpoints", "read_checkpoint", "CheckpointReadError",
    "RunDirError", "RunDirBusyError", "RunStopped", "HARMLESS_KEYS", "is_harmless", "flatten_config",
]
