"""Training: auto-regressive denoising pretraining, fine-tuning, DDP (DPOT paper, section 3); a model's scores are
:mod:`opzoo.evaluation`'s (whose names stay importable from here).

    from . import load_run_config, Trainer
    Trainer(load_run_config("configs/micro-pot.yaml")).fit()

Plugins change optimization through :class:`OptimizerHook` (see ``docs/training.md``).
"""


from typing import TYPE_CHECKING

from .._lazy import lazy_exports

# imported on first use (PEP 562), so that the `opzoo` parser (opzoo.training.cli) needs no torch:
# name -> the module of this package that defines it
_LAZY = {
    **dict.fromkeys(["CheckpointReadError", "latest_checkpoint", "list_checkpoints", "read_checkpoint"], ".checkpoint"),
    **dict.fromkeys(["RunConfig", "load_run_config", "parse_run_config", "read_document"], ".config"),
    "EMA": ".ema",
    "generate_dataset": ".generate",
    "adapt_model": "opzoo.model_io.adapt",
    **dict.fromkeys(["adapt_to_data", "finetune_config"], ".finetune"),
    **dict.fromkeys(["OptimizerHook", "StepContext"], ".hooks"),
    "read_log": ".logger",
    "relative_l2_loss": "opzoo.evaluation.l2",  # the training loss
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
    # issue 44: one home per name; opzoo.training re-exported evaluation's and data's
    **{name: ("opzoo.evaluation", name, "its home since the evaluation package; removed in the next release")
       for name in ("DatasetResult", "Persistence", "evaluate_dataset", "read_results", "write_results", "l2_full",
                    "l2_per_step", "field2d", "pyplot", "save_figure")},
    "StepBatchSampler": ("opzoo.data", "StepBatchSampler", "its home; removed in the next release"),
    "Adapt": ("opzoo.data", "FrameShape", "the same fields; removed in the next release"),
    "H5Trajectories": ("opzoo.data", "TrajectoryDataset", "the same arguments; removed in the next release"),
}

if TYPE_CHECKING:  # names for readers and IDEs: each is imported from its module on first use (below)
    from opzoo.evaluation.l2 import relative_l2_loss
    from opzoo.model_io.adapt import adapt_model

    from .checkpoint import CheckpointReadError, latest_checkpoint, list_checkpoints, read_checkpoint
    from .config import RunConfig, load_run_config, parse_run_config, read_document
    from .ema import EMA
    from .finetune import adapt_to_data, finetune_config
    from .forensics import TrainingDivergedError
    from .generate import generate_dataset
    from .hooks import OptimizerHook, StepContext
    from .logger import read_log
    from .noise import add_denoising_noise, denoising_noise
    from .optim import build_optimizer, build_param_groups
    from .run_dir import HARMLESS_KEYS, RunDirBusyError, RunDirError, flatten_config, is_harmless
    from .schedule import one_cycle_factor, schedule_factor
    from .stop import RunStopped
    from .trainer import Trainer, TrainResult

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), _DEPRECATED)


__all__ = [
    "Trainer", "TrainResult", "TrainingDivergedError", "RunConfig", "load_run_config", "parse_run_config", "read_document",
    "OptimizerHook", "StepContext", "build_optimizer", "build_param_groups", "one_cycle_factor", "schedule_factor",
    "relative_l2_loss", "denoising_noise", "add_denoising_noise", "EMA", "generate_dataset",
    "read_log", "finetune_config", "adapt_model", "adapt_to_data",
    "latest_checkpoint", "list_checkpoints", "read_checkpoint", "CheckpointReadError",
    "RunDirError", "RunDirBusyError", "RunStopped", "HARMLESS_KEYS", "is_harmless", "flatten_config",
]
