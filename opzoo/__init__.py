"""opzoo: a plugin-based zoo of neural operators for time-dependent PDEs.

    import opzoo
    model = opzoo.load("aot-pot-s")
    model = opzoo.load("dpot-s", pretrained=True)
    model = opzoo.from_pretrained("org/my-finetune")
"""

from ._version import __version__
from .builder import convert_to_repo, create_model, from_pretrained, list_models, load, push_to_hub, save_pretrained
from .checkpoints import ConvertedCheckpoint, safe_torch_load
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
from .hookspecs import hookimpl
from .interfaces import Backbone, Block, FeedForward, IdentityStreams, Mixer, Residual, StreamAdapter
from .layers.grid import append_grid
from .models.io_layout import DimMap, time_channel_index
from .models.pot import PotConfig
from .models.pot_sizes import POT_SIZES, PotSize, micro_pretrained_cfg, pot_micro_preset_args, pot_preset_args
from .plugins import get_plugin_host, get_registry, reset_plugins
from .pretrained_cfg import PretrainedCfg
from .registry import PretrainedSource, Registry
from .routing import Router, Routing
from .spectral import SpectralLayer, SpectralWeight, find_spectral_weights

def __getattr__(name):
    """The optimizer-hook interface lives with the trainer; import it only when asked for."""
    if name in ("OptimizerHook", "StepContext"):
        from .training import hooks

        return getattr(hooks, name)
    raise AttributeError(f"module 'opzoo' has no attribute {name!r}")


__all__ = [
    "__version__", "load", "list_models", "create_model", "from_pretrained", "save_pretrained", "push_to_hub",
    "hookimpl", "get_registry", "get_plugin_host", "reset_plugins", "Registry", "PretrainedSource",
    "ModelConfig", "build_dataclass", "PotConfig", "PotSize", "POT_SIZES", "DimMap", "time_channel_index", "Backbone", "Mixer", "FeedForward", "Block", "Residual", "StreamAdapter", "IdentityStreams", "Router", "Routing",
    "ConvertedCheckpoint", "convert_to_repo", "safe_torch_load", "append_grid", "pot_preset_args", "pot_micro_preset_args", "micro_pretrained_cfg",
    "OpzooError", "UnknownNameError", "RegistryConflictError", "ConfigError", "WeightsError", "HubError",
    "CheckpointError", "OptimizerHook", "StepContext", "SpectralLayer", "SpectralWeight", "find_spectral_weights",
    "PretrainedCfg",
]
