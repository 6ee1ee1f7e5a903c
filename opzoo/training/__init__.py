"""Training: auto-regressive denoising pretraining, fine-tuning, rollout evaluation, DDP (DESIGN §8).

    from opzoo.training import load_run_config, Trainer
    Trainer(load_run_config("configs/micro-pot.yaml")).fit()

Plugins change optimization through :class:`OptimizerHook` (see ``docs/training.md``).
"""

from .checkpoint import CheckpointReadError, latest_checkpoint, list_checkpoints, read_checkpoint
from .config import RunConfig, load_run_config, parse_run_config, read_document
from .data import Adapt, H5Trajectories, StepBatchSampler
from .ema import EMA
from .evaluate import DatasetResult, evaluate_dataset, write_results
from .adapt import adapt_model
from .finetune import adapt_to_data, finetune_config
from .hooks import OptimizerHook, StepContext
from .logger import read_log
from .losses import l2_full, l2_per_step, relative_l2_loss
from .noise import add_denoising_noise, denoising_noise
from .optim import build_optimizer, build_param_groups
from .schedule import one_cycle_factor, schedule_factor
from .trainer import Trainer, TrainingDivergedError, TrainResult
from .run_dir import HARMLESS_KEYS, RunDirBusyError, RunDirError
from .stop import RunStopped

__all__ = [
    "Trainer", "TrainResult", "TrainingDivergedError", "RunConfig", "load_run_config", "parse_run_config", "read_document",
    "OptimizerHook", "StepContext", "build_optimizer", "build_param_groups", "one_cycle_factor", "schedule_factor",
    "relative_l2_loss", "l2_full", "l2_per_step", "denoising_noise", "add_denoising_noise", "EMA",
    "evaluate_dataset", "write_results", "DatasetResult", "read_log", "finetune_config", "adapt_model", "adapt_to_data",
    "Adapt", "H5Trajectories", "StepBatchSampler",
    "latest_checkpoint", "list_checkpoints", "read_checkpoint", "CheckpointReadError",
    "RunDirError", "RunDirBusyError", "RunStopped", "HARMLESS_KEYS",
]
