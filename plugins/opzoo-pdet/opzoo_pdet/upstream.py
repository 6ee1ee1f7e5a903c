"""pdetransformer's own mixed-channel network, timed side by side with opzoo's by ``opzoo benchmark``.

pdetransformer's package ``__init__`` imports its training stack (lightning, wandb, the data modules); where those
are not installed, the model module is imported under empty parent packages (it needs diffusers, einops and timm
only). ``PYTHONPATH=.venv/reference/pdetransformer-0.1.11 opzoo benchmark "pdet-*"`` uses the copy ``make install``
puts there."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import opzoo

from .backbones import SIZES


def mixed_channels_module():
    """``pdetransformer.core.mixed_channels.pde_transformer``, or UpstreamUnavailable saying what is missing."""
    try:
        return importlib.import_module("pdetransformer.core.mixed_channels.pde_transformer")
    except ImportError as first:
        spec = importlib.util.find_spec("pdetransformer") if "pdetransformer" not in sys.modules else None
        if spec is None or not spec.submodule_search_locations:
            raise opzoo.UpstreamUnavailable(f"pdetransformer is not importable ({first}); pip install "
                                            "pdetransformer==0.1.11") from None
        root = Path(list(spec.submodule_search_locations)[0])
        for name, path in (("pdetransformer", root), ("pdetransformer.core", root / "core"),
                           ("pdetransformer.core.mixed_channels", root / "core" / "mixed_channels")):
            module = types.ModuleType(name)
            module.__path__ = [str(path)]
            sys.modules[name] = module
        try:
            return importlib.import_module("pdetransformer.core.mixed_channels.pde_transformer")
        except ImportError as e:
            raise opzoo.UpstreamUnavailable(f"pdetransformer's network needs {e.name or e} (diffusers, einops, timm)")


def build_pdetransformer(model, x) -> opzoo.Upstream:
    """Their ``PDETransformer`` at the model's sizes (a size other than PDE-S/B/L registered like theirs), on the
    channels-first, standardized frame."""
    mc = mixed_channels_module()
    c = model.config
    size = next((k for k, v in SIZES.items() if (v["hidden_size"], v["num_heads"]) == (c.hidden_size, c.num_heads)
                 and c.depth == [2, 5, 8, 5, 2] and c.mlp_ratio == 4 and c.num_classes == 1000), None)
    if size is None:
        size = "opzoo-benchmark"
        mc.PDE_models[size] = lambda **kw: mc.PDEImpl(
            down_factor=2, hidden_size=c.hidden_size, num_heads=c.num_heads, depth=list(c.depth), mlp_ratio=c.mlp_ratio,
            num_classes=c.num_classes, class_dropout_prob=c.class_dropout_prob, max_hidden_size=c.max_hidden_size, **kw)
    module = mc.PDETransformer(sample_size=x.shape[1], in_channels=c.in_channels, out_channels=c.out_channels,
                               type=size, periodic=c.periodic, window_size=c.window_size, patch_size=c.patch_size)
    version = getattr(sys.modules.get("pdetransformer"), "__version__", None) or _version()
    return opzoo.Upstream(f"pdetransformer {version} PDETransformer (mixed channels)", module,
                          inputs=lambda t: model._net_input(t).detach(), outputs=lambda y: y.sample)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pdetransformer")
    except metadata.PackageNotFoundError:
        return "?"
