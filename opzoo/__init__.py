"""opzoo: a plugin-based zoo of neural operators for time-dependent PDEs.

    import opzoo
    model = opzoo.load("aot-pot-s")
    model = opzoo.load("dpot-s", pretrained=True)
    model = opzoo.from_pretrained("org/my-finetune")
"""


from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from ._version import __version__
from .errors import (
    CheckpointError,
    ConfigError,
    HubError,
    OpzooError,
    RegistryConflictError,
    UnknownNameError,
    UpstreamUnavailable,
    WeightsError,
)
from .files import atomic_write, atomic_writer, claim_output_dir, read_json
from .registry import kit
from .registry.contract import DataContract, Normalization, TrainingSet
from .registry.family import CheckpointFamily, Variant
from .registry.metric import Metric
from .registry.provenance import CheckFailed, Fact, PretrainedArtifacts, PretrainedCheck, Result
from .registry.registry import PretrainedSource, Registry
from .registry.registry import set_registry_source as _set_registry_source

# Everything that needs torch is imported on first use (PEP 562), so that `opzoo --version`, `--help`
# and a plugin's `import opzoo` for `opzoo.hookimpl` stay fast: name -> the module that defines it.
_LAZY = {
    **dict.fromkeys(["create_model", "from_pretrained", "load"], ".model_io.loading"),
    **dict.fromkeys(["push_to_hub", "save_pretrained"], ".model_io.saving"),
    "convert_to_repo": ".model_io.pretrained",
    "list_models": ".model_io.builder",
    **dict.fromkeys(["ConvertedCheckpoint", "safe_torch_load"], ".model_io.converters"),
    **dict.fromkeys(["ModelConfig", "build_dataclass"], ".config"),
    "hookimpl": ".contracts.hookspecs",
    **dict.fromkeys(["Backbone", "Block", "FeedForward", "IdentityStreams", "Mixer", "Residual", "StreamAdapter"],
                    ".contracts.interfaces"),
    "append_grid": ".layers.grid",
    **dict.fromkeys(["DimMap", "time_channel_index"], ".contracts.io_layout"),
    "PotConfig": ".models.pot",
    "PotParts": ".models.pot_parts",
    "PretrainedCfg": ".model_io.pretrained_cfg",
    **dict.fromkeys(["MICRO_SUITE", "POT_MICRO_SIZE", "POT_SIZES", "PotSize", "micro_pretrained_cfg", "micro_results",
                     "pot_micro_preset_args",
                     "pot_preset_args", "pot_size"],
                    ".models.pot_sizes"),
    **dict.fromkeys(["get_plugin_host", "reset_plugins"], ".host.plugins"),
    "get_registry": ".registry.registry",
    "Upstream": ".contracts.upstream",
    **dict.fromkeys(["Router", "Routing"], ".contracts.routing"),
    **dict.fromkeys(["SpectralLayer", "SpectralWeight", "find_spectral_weights"], ".contracts.spectral"),
    **dict.fromkeys(["OptimizerHook", "StepContext"], ".training.hooks"),  # the trainer's interface
}


def _plugin_registry():
    """The registry the plugin host fills, for :func:`opzoo.registry.registry.get_registry` (host loaded on first use)."""
    from .host.plugins import get_plugin_host

    return get_plugin_host().registry


_set_registry_source(_plugin_registry)


if TYPE_CHECKING:  # names for readers and IDEs: each is imported from its module on first use (below)
    from .config import ModelConfig, build_dataclass
    from .contracts.hookspecs import hookimpl
    from .contracts.interfaces import Backbone, Block, FeedForward, IdentityStreams, Mixer, Residual, StreamAdapter
    from .contracts.io_layout import DimMap, time_channel_index
    from .contracts.routing import Router, Routing
    from .contracts.spectral import SpectralLayer, SpectralWeight, find_spectral_weights
    from .contracts.upstream import Upstream
    from .host.plugins import get_plugin_host, reset_plugins
    from .layers.grid import append_grid
    from .model_io.builder import list_models
    from .model_io.converters import ConvertedCheckpoint, safe_torch_load
    from .model_io.loading import create_model, from_pretrained, load
    from .model_io.pretrained import convert_to_repo
    from .model_io.pretrained_cfg import PretrainedCfg
    from .model_io.saving import push_to_hub, save_pretrained
    from .models.pot import PotConfig
    from .models.pot_parts import PotParts
    from .models.pot_sizes import (
        MICRO_SUITE,
        POT_MICRO_SIZE,
        POT_SIZES,
        PotSize,
        micro_pretrained_cfg,
        micro_results,
        pot_micro_preset_args,
        pot_preset_args,
        pot_size,
    )
    from .registry.registry import get_registry
    from .training.hooks import OptimizerHook, StepContext

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__all__ = [
    "__version__", "load", "list_models", "create_model", "from_pretrained", "save_pretrained", "push_to_hub",
    "hookimpl", "get_registry", "get_plugin_host", "reset_plugins", "Registry", "PretrainedSource",
    "ModelConfig", "build_dataclass", "PotConfig", "PotParts", "PotSize", "POT_SIZES", "POT_MICRO_SIZE", "MICRO_SUITE", "pot_size", "DimMap", "time_channel_index", "Backbone", "Mixer", "FeedForward", "Block", "Residual", "StreamAdapter", "IdentityStreams", "Router", "Routing",
    "ConvertedCheckpoint", "convert_to_repo", "safe_torch_load", "append_grid", "pot_preset_args", "pot_micro_preset_args", "micro_pretrained_cfg", "micro_results",
    "OpzooError", "UnknownNameError", "RegistryConflictError", "ConfigError", "WeightsError", "HubError",
    "CheckpointError", "OptimizerHook", "StepContext", "SpectralLayer", "SpectralWeight", "find_spectral_weights",
    "PretrainedCfg", "Fact", "PretrainedCheck", "PretrainedArtifacts", "CheckFailed", "Result",
    "Upstream", "UpstreamUnavailable", "CheckpointFamily", "Variant", "DataContract", "Normalization", "TrainingSet",
    "atomic_write", "atomic_writer", "claim_output_dir", "read_json", "Metric", "kit",
]
