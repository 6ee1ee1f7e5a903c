"""opzoo: a plugin-based zoo of neural operators for time-dependent PDEs.

    import opzoo
    model = opzoo.load("aot-pot-s")
    model = opzoo.load("dpot-s", pretrained=True)
    model = opzoo.from_pretrained("org/my-finetune")
"""



import sys as _sys
from typing import TYPE_CHECKING

from ._lazy import lazy_exports, typed_imports
from ._version import __version__
from .contracts.hub_io import set_hub_io_source as _set_hub_io_source
from .errors import (
    CheckpointError,
    ConfigError,
    ExportRefused,
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
# and a plugin's `import opzoo` for `opzoo.hookimpl` stay fast: the names and their modules are the imports under
# TYPE_CHECKING (where readers and IDEs follow them).
if TYPE_CHECKING:  # each lazy name, once: imported from its module on first use (opzoo._lazy.typed_imports)
    from .config import ModelConfig, build_dataclass
    from .contracts.export_form import ExportForm, with_export_forms
    from .contracts.hookspecs import hookimpl
    from .contracts.interfaces import Backbone, Block, FeedForward, IdentityStreams, Mixer, Residual, StreamAdapter
    from .contracts.io_layout import DimMap, time_channel_index
    from .contracts.optimizer_hook import OptimizerHook, StepContext
    from .contracts.routing import Router, Routing
    from .contracts.spectral import SpectralLayer, SpectralWeight, find_spectral_weights
    from .contracts.upstream import Upstream
    from .host.plugins import get_plugin_host, reset_plugins
    from .layers.grid import append_grid
    from .model_io.builder import list_models
    from .model_io.converters import ConvertedCheckpoint, safe_torch_load
    from .model_io.graph_export import ExportCheck, ExportReport, export_model
    from .model_io.loading import create_model, from_pretrained, load
    from .model_io.pretrained import convert_to_repo
    from .model_io.pretrained_cfg import PretrainedCfg
    from .model_io.saving import push_to_hub, save_pretrained
    from .models.pot import PotConfig
    from .models.pot_parts import PotParts
    from .models.pot_sizes import POT_SIZES, PotSize, pot_preset_args, pot_size
    from .registry.registry import get_registry

_LAZY = typed_imports(__file__)  # the names imported under TYPE_CHECKING below, each written once there

# old names, kept for one release (CHANGELOG.md): name -> (module, new name, note)
_DEPRECATED = {name: ("opzoo.micro", name, "the micro setup's helpers live in opzoo.micro; removed in the next release")
               for name in ("MICRO_SUITE", "POT_MICRO_SIZE", "micro_pretrained_cfg", "micro_results",
                            "pot_micro_preset_args")}


def _plugin_registry():
    """The registry the plugin host fills, for :func:`opzoo.registry.registry.get_registry` (host loaded on first use)."""
    from .host.plugins import get_plugin_host

    return get_plugin_host().registry


_set_registry_source(_plugin_registry)
_sys.modules.setdefault(f"{__name__}.kit", kit)  # `import opzoo.kit` as docs/adding-a-family.md writes it


def _hub_io(name: str):
    """Backbone's save_pretrained / push_to_hub / from_pretrained (``opzoo.contracts`` sits below ``model_io``)."""
    from .model_io import loading, saving

    return getattr(loading if name == "from_pretrained" else saving, name)


_set_hub_io_source(_hub_io)


_lazy_attribute, __dir__ = lazy_exports(__name__, _LAZY, globals(), _DEPRECATED)
_SUBMODULES = ("micro", "testing")  # opzoo.micro, opzoo.testing: imported on first use too


def __getattr__(name: str):
    if name in _SUBMODULES:
        from importlib import import_module

        return import_module(f"{__name__}.{name}")
    return _lazy_attribute(name)


# the names imported above, then every lazy one: each name is written once
__all__ = [
    "__version__", "OpzooError", "UnknownNameError", "RegistryConflictError", "ConfigError", "WeightsError", "HubError",
    "CheckpointError", "UpstreamUnavailable", "ExportRefused", "atomic_write", "atomic_writer", "claim_output_dir", "read_json", "kit",
    "DataContract", "Normalization", "TrainingSet", "CheckpointFamily", "Variant", "Metric", "CheckFailed", "Fact",
    "PretrainedArtifacts", "PretrainedCheck", "Result", "PretrainedSource", "Registry",
    *_LAZY,
]
