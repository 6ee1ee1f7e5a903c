"""Training: auto-regressive denoising pretraining, fine-tuning, DDP (DPOT paper, section 3); a model's scores are
:mod:`opzoo.evaluation`'s (whose names stay importable from here).

    from . import load_run_config, Trainer
    Trainer(load_run_config("configs/micro-pot.yaml")).fit()

Plugins change optimization through :class:`OptimizerHook` (see ``docs/training.md``).
"""


from typing import TYPE_CHECKING

from .._lazy import lazy_exports, typed_imports

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

if TYPE_CHECKING:  # each lazy name, once: imported from its module on first use (opzoo._lazy.typed_imports)
    from opzoo.contracts.optimizer_hook import OptimizerHook, StepContext
    from opzoo.evaluation.l2 import relative_l2_loss
    from opzoo.model_io.adapt import adapt_model

    from .checkpoint import CheckpointReadError, latest_checkpoint, list_checkpoints, read_checkpoint
    from .config import RunConfig, load_run_config, parse_run_config, read_document
    from .ema import EMA
    from .finetune import adapt_to_data, finetune_config
    from .forensics import TrainingDivergedError
    from .generate import generate_dataset
    from .logger import read_log
    from .noise import add_denoising_noise, denoising_noise
    from .optim import build_optimizer, build_param_groups
    from .run_dir import HARMLESS_KEYS, RunDirBusyError, RunDirError, flatten_config, is_harmless
    from .schedule import one_cycle_factor, schedule_factor
    from .stop import RunStopped
    from .trainer import Trainer, TrainResult

_LAZY = typed_imports(__file__)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), _DEPRECATED)


__all__ = [*_LAZY]
