"""opzoo: a plugin-based zoo of neural operators for time-dependent PDEs.

    import opzoo
    model = opzoo.load("aot-pot-s")
    model = opzoo.load("dpot-s", pretrained=True)
    model = opzoo.from_pretrained("org/my-finetune")
"""

from ._version import __version__
from .checkpoints import ConvertedCheckpoint, convert_to_repo, safe_torch_load
from .config import ModelConfig, build_dataclass
from .errors import (
    CheckpointError,
    ConfigError,
    HubError,
    OpzooError,
    RegistryConflictError,
    UnknownNameError,
    WeightsError,
)
from .backbones.pot import PotConfig, micro_pretrained_cfg, pot_micro_preset_args, pot_preset_args
from .factory import create_model, list_models, load
from .grid import append_grid
from .hookspecs import hookimpl
from .hub import from_pretrained, push_to_hub, save_pretrained
from .interfaces import Backbone, Block, FeedForward, IdentityStreams, Mixer, Residual, Router, Routing, StreamAdapter
from .plugins import get_plugin_host, get_registry, reset_plugins
from .pretrained_cfg import PretrainedCfg
from .registry import PretrainedSource, Registry
from .spectral import SpectralLayer, SpectralWeight, find_spectral_weights

_LAZY = {"OptimizerHook": "opzoo.training.hooks", "StepContext": "opzoo.training.hooks"}


def __getattr__(name):
    """The optimizer-hook interface lives with the trainer; import it only when asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'opzoo' has no attribute {name!r}")


__all__ = [
    "__version__", "load", "list_models", "create_model", "from_pretrained", "save_pretrained", "push_to_hub",
    "hookimpl", "get_registry", "get_plugin_host", "reset_plugins", "Registry", "PretrainedSource",
    "ModelConfig", "build_dataclass", "PotConfig", "Backbone", "Mixer", "FeedForward", "Block", "Residual", "StreamAdapter", "IdentityStreams", "Router", "Routing",
    "ConvertedCheckpoint", "convert_to_repo", "safe_torch_load", "append_grid", "pot_preset_args", "pot_micro_preset_args", "micro_pretrained_cfg",
    "OpzooError", "UnknownNameError", "RegistryConflictError", "ConfigError", "WeightsError", "HubError",
    "CheckpointError", "OptimizerHook", "StepContext", "SpectralLayer", "SpectralWeight", "find_spectral_weights",
    "PretrainedCfg",
]
