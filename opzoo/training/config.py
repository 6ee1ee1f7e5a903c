"""Run configs for pretraining and fine-tuning: YAML or JSON, validated completely before training.

A run config is a mapping with the sections below; every key is checked (unknown keys, wrong
types and missing data files are errors that name the key path), so a bad config fails in
milliseconds instead of after an hour of training.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional

from ..config import build_dataclass
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..model_io.reference import ModelReference


@dataclasses.dataclass
class DatasetSpec:
    """One dataset of the mixture: an HDF5 file in any layout opzoo.data reads (canonical: ``data [N, *S, T, C]``)."""

    path: str
    name: Optional[str] = None
    weight: float = 1.0
    test_path: Optional[str] = None  # separate test file; else the last ``test_fraction`` trajectories
    test_fraction: float = 0.1
    layout: Optional[str] = None  # force an opzoo.data layout; None: detected
    fields: Optional[list[str]] = None  # the channels' names of a plain array (.npy/.npz/.pt), in order
    # the file's field names read as the model's (file name -> model name; docs/data-contract.md), and the model's
    # upstream training set the file is laid out like (its field expressions and transposes)
    field_map: Optional[dict[str, str]] = None
    training_set: Optional[str] = None
    generate: Optional[dict[str, Any]] = None  # {kind, n, seed, **generator args}: made first if path is missing
    # train on the first N trajectories of the training split only (in file order, so a smaller N's are a subset of a
    # larger N's: opzoo compare's nested budgets); None: all of them
    train_trajectories: Optional[int] = None
    # hold out this fraction of the file's trajectories for validation (model selection, early stopping): the ones just
    # before the test split, never trained on whatever train_trajectories is (Poseidon's split: train, then
    # validation, then test, scOT/problems/base.py BaseTimeDataset.post_init @ v1-paper); 0: no validation split
    validation_fraction: float = 0.0


@dataclasses.dataclass
class DataSection:
    datasets: list[DatasetSpec] = dataclasses.field(default_factory=list)
    resolution: Optional[tuple[int, ...]] = None  # resize target; None: the model's pretrained resolution or the first dataset's
    channels: Optional[int] = None  # pad to this many channels; None: the model's in_channels
    horizon: Optional[int] = None  # rollout steps at evaluation; None: each dataset's whole trajectory
    max_test_trajectories: Optional[int] = None


@dataclasses.dataclass
class ModelSection:
    name: str = "simple"  # preset, registered backbone, hf-hub:org/repo, local-dir:PATH or a directory
    pretrained: bool = False
    args: dict[str, Any] = dataclasses.field(default_factory=dict)  # config overrides / backbone args
    # fine-tuning: adapt the input/output layers to the data (more channels, data.resolution, and
    # in_timesteps / in_channels / out_channels / img_size given in args) instead of refusing it
    adapt: bool = False
    # build a model whose estimated training memory exceeds this machine's ten times (opzoo.model_io.size_check)
    allow_oversize: bool = False

    @property
    def reference(self) -> "ModelReference":
        """``name`` parsed (:class:`opzoo.model_io.reference.ModelReference`): once, when the run config is validated
        (or given by the command that parsed it), then carried with the config; parsed again only if ``name``
        changes."""
        from ..model_io.reference import parse_model_reference

        ref = self.__dict__.get("_reference")
        if ref is None or ref.given != self.name:
            ref = parse_model_reference(self.name)
            self.__dict__["_reference"] = ref
        return ref

    def carry(self, reference: "ModelReference") -> None:
        """Carry ``reference``, already parsed by whoever named the model (it must be ``name``'s)."""
        if reference.given != self.name:
            raise ValueError(f"model reference {reference.given!r} is not model.name {self.name!r}")
        self.__dict__["_reference"] = reference


@dataclasses.dataclass
class HookSpec:
    name: str
    args: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class OptimizerSection:
    name: Literal["adamw", "adam", "sgd"] = "adamw"
    lr: float = 1e-3
    betas: tuple[float, ...] = (0.9, 0.9)
    weight_decay: float = 1e-6
    # timm's fine-tuning habits: exempt model.no_weight_decay() (biases, norms, gates, position embeddings) from
    # weight decay; layer-wise lr decay: layer l of L (model.layer_id) trains at lr · layer_decay^(L-1-l)
    filter_bias_and_norm: bool = True
    layer_decay: Optional[float] = None
    eps: float = 1e-8
    grad_clip: Optional[float] = 1.0  # max global grad norm; None: no clipping
    hooks: list[HookSpec] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ScheduleSection:
    name: Literal["one-cycle", "constant", "cosine"] = "one-cycle"
    warmup: float = 0.2  # fraction of steps (one-cycle pct_start; linear warm-up for cosine)
    div_factor: float = 1e4  # initial lr = lr / div_factor
    final_div_factor: float = 1e4  # final lr = initial lr / final_div_factor


@dataclasses.dataclass
class TrainingSection:
    steps: int = 1000
    batch_size: int = 16  # global batch, split evenly across DDP ranks
    noise_scale: float = 5e-4  # ε of the denoising noise (training only)
    ema: Optional[float] = None  # EMA decay of the weights, e.g. 0.999; None: no EMA
    amp: Literal["auto", "bf16", "off"] = "auto"  # auto: bf16 autocast on GPU, off on CPU
    device: str = "auto"
    num_workers: int = 0
    log_every: int = 10
    eval_every: Optional[int] = None  # evaluate on the test sets every N steps (and at the end)
    # which weights the run exports: "last" (the last step's), or "validation": the checkpoint with the lowest
    # validation error (mean relative L2 over the rollout of the validation split, evaluated at step 0 and every
    # eval_every steps; every evaluation is then a checkpoint, and the best is kept), as Poseidon keeps its best on
    # validation (load_best_model_at_end, scOT/train.py @ v1-paper); the test split is then evaluated at step 0 and at
    # the end only, of the model exported
    selection: Literal["last", "validation"] = "last"
    # stop when this many evaluations in a row have not improved the validation error (with selection: validation;
    # transformers' EarlyStoppingCallback, as Poseidon trains its baselines); None: train every step
    early_stopping: Optional[int] = None
    deterministic: bool = True
    # models with routers (opzoo.contracts.routing): warn when one expert takes more than this share of a
    # router's assignments, summed over the last expert_load_window steps
    expert_load_threshold: float = 0.9
    expert_load_window: int = 50
    # recompute each block's activations in backward (model.set_grad_checkpointing): less memory, the same
    # losses and gradients, about one more forward of time
    grad_checkpointing: bool = False
    # what the run trains (opzoo.training.tuning): full (every parameter), head (input and output projections, norms,
    # time aggregation) or lora[:RANK] (peft's low-rank adapters on the model's lora_targets); the tensors adapted to
    # the data are always trained
    tune: str = "full"
    # GiB one step may hold at its peak (opzoo.training.memory_plan); None: what the device has free (a GPU's
    # mem_get_info, else MemAvailable)
    max_memory: Optional[float] = None
    # seconds a SIGTERM/SIGINT waits for the step in progress and its checkpoint before the run ends without them
    # (a scheduler's grace period is often 30 s); None: no deadline
    stop_deadline: Optional[float] = 20.0


@dataclasses.dataclass
class CheckpointSection:
    every: Optional[int] = 500  # steps; None: only at the end
    keep_last: int = 3
    # continue the run in output_dir from its latest verified checkpoint (only under the config it was
    # started with); false: refuse a directory that holds a run (start over with --new)
    resume: bool = True
    # resume from a checkpoint without checksums.json (cut off while written, or from a pre-0.1 opzoo),
    # whose files cannot be verified; off: such a checkpoint is skipped for an older verified one
    trust_unverified: bool = False


@dataclasses.dataclass
class EvaluationSection:
    plot_steps: tuple[int, ...] = (1, 5, 10)  # rollout steps shown in the panel plots
    plot_channel: int = 0
    plots: bool = True  # PNG plots: loss.png, and the rollout panels and error curves of every evaluation


@dataclasses.dataclass
class DistributedSection:
    strategy: Literal["ddp", "fsdp"] = "ddp"
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    # POT's classification head gets no gradient from the loss; DDP must be told (costs a graph walk)
    find_unused_parameters: bool = True
    timeout_s: float = 600.0  # process-group timeout: a stopped rank fails the job after this long


@dataclasses.dataclass
class RunConfig:
    output_dir: str = "runs/run"
    seed: int = 0
    model: ModelSection = dataclasses.field(default_factory=ModelSection)
    data: DataSection = dataclasses.field(default_factory=DataSection)
    optimizer: OptimizerSection = dataclasses.field(default_factory=OptimizerSection)
    schedule: ScheduleSection = dataclasses.field(default_factory=ScheduleSection)
    training: TrainingSection = dataclasses.field(default_factory=TrainingSection)
    checkpoint: CheckpointSection = dataclasses.field(default_factory=CheckpointSection)
    evaluation: EvaluationSection = dataclasses.field(default_factory=EvaluationSection)
    distributed: DistributedSection = dataclasses.field(default_factory=DistributedSection)

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))


# ---- parsing -----------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _check_values(cfg: RunConfig, base: Path | None, source: str) -> None:
    """Checks beyond types: ranges, files that must exist, registered names."""
    def fail(msg: str) -> None:
        raise ConfigError(f"{source}: {msg}")

    t = cfg.training
    for key, value in (("training.steps", t.steps), ("training.batch_size", t.batch_size),
                       ("training.log_every", t.log_every), ("checkpoint.keep_last", cfg.checkpoint.keep_last)):
        if value < 1:
            fail(f"{key} must be >= 1, got {value}")
    for key, value in (("training.eval_every", t.eval_every), ("checkpoint.every", cfg.checkpoint.every)):
        if value is not None and value < 1:
            fail(f"{key} must be >= 1 or null, got {value}")
    try:
        from .tuning import parse_tune

        parse_tune(t.tune)
    except ConfigError as e:
        fail(str(e))
    if t.max_memory is not None and not t.max_memory > 0:
        fail(f"training.max_memory is GiB a step may hold, > 0 (or null), got {t.max_memory}")
    if t.early_stopping is not None and t.early_stopping < 1:
        fail(f"training.early_stopping must be >= 1 evaluations or null, got {t.early_stopping}")
    if t.early_stopping is not None and t.selection != "validation":
        fail("training.early_stopping stops on the validation error: set training.selection: validation too")
    if t.selection == "validation":
        if t.eval_every is None:
            fail("training.selection: validation picks among evaluations: set training.eval_every")
        without = [f"data.datasets[{i}]" for i, d in enumerate(cfg.data.datasets) if not d.validation_fraction]
        if without:
            fail(f"training.selection: validation needs a validation split in every dataset: set validation_fraction "
                 f"in {', '.join(without)} (finetune: --validation-fraction)")
    if cfg.distributed.timeout_s <= 0:
        fail(f"distributed.timeout_s must be > 0, got {cfg.distributed.timeout_s}")
    if not 0.0 < t.expert_load_threshold <= 1.0:
        fail(f"training.expert_load_threshold must be in (0, 1], got {t.expert_load_threshold}")
    if t.num_workers < 0:
        fail(f"training.num_workers must be >= 0 (0: load data in the main process), got {t.num_workers}")
    if cfg.data.max_test_trajectories is not None and cfg.data.max_test_trajectories < 1:
        fail(f"data.max_test_trajectories must be >= 1 or null (every test trajectory), got "
             f"{cfg.data.max_test_trajectories}")
    if t.expert_load_window < 1:
        fail(f"training.expert_load_window must be >= 1, got {t.expert_load_window}")
    if t.stop_deadline is not None and not t.stop_deadline > 0:
        fail(f"training.stop_deadline must be > 0 seconds or null (no deadline), got {t.stop_deadline}")
    if t.noise_scale < 0:
        fail(f"training.noise_scale must be >= 0, got {t.noise_scale}")
    if t.ema is not None and not 0.0 < t.ema < 1.0:
        fail(f"training.ema must be in (0, 1), got {t.ema}")
    o, sch = cfg.optimizer, cfg.schedule
    if not 0 < o.lr <= 10:
        fail(f"optimizer.lr must be in (0, 10], got {o.lr}")
    if len(o.betas) != 2 or not all(0.0 <= b < 1.0 for b in o.betas):
        fail(f"optimizer.betas must be 2 values in [0, 1), got {list(o.betas)}")
    if o.eps <= 0:
        fail(f"optimizer.eps must be > 0, got {o.eps}")
    if o.weight_decay < 0:
        fail(f"optimizer.weight_decay must be >= 0, got {o.weight_decay}")
    if o.layer_decay is not None and not 0 < o.layer_decay <= 1:
        fail(f"optimizer.layer_decay must be in (0, 1] (e.g. 0.75), got {o.layer_decay}")
    if o.grad_clip is not None and o.grad_clip <= 0:
        fail(f"optimizer.grad_clip must be > 0 (a max gradient norm) or null (no clipping), got {o.grad_clip}")
    if sch.div_factor <= 0 or sch.final_div_factor <= 0:
        fail(f"schedule.div_factor and schedule.final_div_factor must be > 0 (they divide the lr), got "
             f"{sch.div_factor} and {sch.final_div_factor}")
    if not 0 <= cfg.seed < 2**63:
        fail(f"seed must be in [0, 2**63), got {cfg.seed}")
    if not 0.0 <= cfg.schedule.warmup < 1.0:
        fail(f"schedule.warmup must be in [0, 1), got {cfg.schedule.warmup}")
    if not cfg.data.datasets:
        fail("data.datasets is empty: list at least one HDF5 file")
    names = []
    for i, d in enumerate(cfg.data.datasets):
        where = f"data.datasets[{i}]"
        for key in ("path", "test_path"):
            p = getattr(d, key)
            if p is None:
                continue
            resolved = resolve_path(p, base)
            if resolved.is_dir():  # a dataset when a reader of directories claims it
                from ..data.errors import DataFormatError
                from ..data.readers import directory_layout

                try:
                    directory_layout(resolved, d.layout)
                except DataFormatError as e:
                    fail(f"{where}.{key}: {e}")
            elif not resolved.is_file():
                if key == "path" and d.generate is not None:
                    setattr(d, key, str(Path(os.path.expandvars(p)).expanduser()))  # made before training
                    continue
                fail(f"{where}.{key}: file {str(resolved)!r} does not exist"
                     + (" (add a 'generate' entry to make it)" if key == "path" else ""))
            setattr(d, key, str(resolved))
        if d.generate is not None:
            from .generate import check_generate_spec

            check_generate_spec(d.generate, f"{source}: {where}.generate")
        if d.weight <= 0:
            fail(f"{where}.weight must be > 0, got {d.weight}")
        if d.train_trajectories is not None and d.train_trajectories < 1:
            fail(f"{where}.train_trajectories must be >= 1, got {d.train_trajectories}")
        if d.test_path is None and not 0.0 < d.test_fraction < 1.0:
            fail(f"{where}.test_fraction must be in (0, 1) when there is no test_path, got {d.test_fraction}")
        if not 0.0 <= d.validation_fraction < 1.0 or (d.test_path is None
                                                      and d.validation_fraction + d.test_fraction >= 1.0):
            fail(f"{where}.validation_fraction must be in [0, 1) and leave trajectories to train on beside "
                 f"test_fraction {d.test_fraction:g}, got {d.validation_fraction:g}")
        run_dir = Path(os.path.expandvars(cfg.output_dir)).expanduser().resolve()
        for key in ("path", "test_path"):
            file = getattr(d, key)
            if file is not None and run_dir in Path(file).resolve().parents:
                fail(f"{where}.{key}: the data file {file} lies inside the run directory {run_dir} (output_dir / "
                     f"--out), which holds the run's own files and is moved aside by --new; choose another directory")
        d.name = d.name or Path(d.path).stem
        if d.name in names:
            fail(f"{where}.name: {d.name!r} is used by two datasets; give them distinct names")
        names.append(d.name)
    if cfg.data.resolution is not None and any(r < 1 for r in cfg.data.resolution):
        fail(f"data.resolution must be positive, got {list(cfg.data.resolution)}")
    if cfg.data.resolution is not None:  # before any model is adapted to it: the data of one step, at least
        from ..model_io.size_check import check_batch_memory

        check_batch_memory(cfg.training.batch_size, cfg.data.resolution, 2, 1, f"{source}: data.resolution "
                           f"{list(cfg.data.resolution)} with training.batch_size {cfg.training.batch_size}",
                           cfg.model.allow_oversize)
    from ..registry.registry import get_registry

    registry = get_registry()
    for i, h in enumerate(cfg.optimizer.hooks):
        if h.name not in registry.names("optimizer_hook"):
            registry.get("optimizer_hook", h.name)  # raises UnknownNameError with suggestions
    cfg.model.reference  # a preset, backbone, Hub repo or directory (parsed once, carried), or a one-line error


def resolve_path(path: str, base: Path | None) -> Path:
    p = Path(os.path.expandvars(path)).expanduser()
    if not p.is_absolute() and base is not None and not p.exists():
        p = base / p
    return p


def _load_yaml(text: str) -> Any:
    """YAML with YAML 1.2's floats: PyYAML (YAML 1.1) reads ``5e-4`` as a string."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*\.?[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
                   r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."),
    )
    return yaml.load(text, Loader=Loader)


def parse_run_config(document: Mapping[str, Any], source: str = "run config", base: Path | None = None,
                     reference: "ModelReference | None" = None) -> RunConfig:
    """Validate a run-config mapping completely (types, ranges, files, names) and build it; ``reference``: the model
    named by ``model.name``, already parsed by the caller (carried, not parsed again)."""
    try:
        cfg = build_dataclass(RunConfig, document, "")
    except ConfigError as e:
        raise ConfigError(f"{source}: {str(e).lstrip(': ')}") from None
    if reference is not None and reference.given == cfg.model.name:
        cfg.model.carry(reference)
    _check_values(cfg, base, source)
    return cfg


def read_document(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML (``.yaml``/``.yml``) or JSON file into a mapping."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"run config {str(path)!r} does not exist")
    from ..files import open_regular, read_bounded

    try:
        with open_regular(path) as f:
            text = read_bounded(f, path, "a run config").decode()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read as a run config ({getattr(e, 'strerror', None) or e})") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            document = _load_yaml(text)
        else:
            document = json.loads(text)
    except Exception as e:  # yaml.YAMLError / JSONDecodeError
        raise ConfigError(f"{path}: not valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'JSON'}: {e}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(document).__name__}")
    return document


def load_run_config(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """Read and validate a run config; ``overrides`` are dotted keys, e.g. ``{"training.steps": 10}``.

    Relative data paths resolve against the working directory first, then the config's folder.
    """
    document = apply_overrides(read_document(path), overrides)
    return parse_run_config(document, source=str(path), base=Path(path).resolve().parent)


def apply_overrides(document: dict[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``document`` with each dotted key of ``overrides`` set (``training.steps``; a list entry by its index,
    ``data.datasets.0.train_trajectories``); a key through a value that is neither a section nor a list, or an index
    beyond its list, is a one-line ConfigError."""
    for dotted, value in (overrides or {}).items():
        node: Any = document
        *parents, leaf = dotted.split(".")
        for depth, key in enumerate([*parents, leaf]):
            where = ".".join([*parents, leaf][:depth + 1])
            if isinstance(node, list):
                if not key.isdigit() or int(key) >= len(node):
                    raise ConfigError(f"override {dotted}: {where[:-len(key) - 1]} is a list of {len(node)}; index it "
                                      f"with 0 to {len(node) - 1}, got {key!r}")
                key = int(key)
            elif not isinstance(node, dict):
                raise ConfigError(f"override {dotted}: {where[:-len(str(key)) - 1]!r} is a value, not a section")
            if depth == len(parents):
                node[key] = value
            else:
                if isinstance(node, dict):
                    node = node.setdefault(key, {})
                else:
                    node = node[key]
    return document
