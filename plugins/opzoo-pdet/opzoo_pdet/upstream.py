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

import torch

import opzoo

from .backbones import SIZES


def mixed_channels_module(kind: str = "mixed_channels"):
    """``pdetransformer.core.<kind>.pde_transformer``, or UpstreamUnavailable saying what is missing."""
    try:
        return importlib.import_module(f"pdetransformer.core.{kind}.pde_transformer")
    except ImportError as first:
        spec = importlib.util.find_spec("pdetransformer") if "pdetransformer" not in sys.modules else None
        if spec is None or not spec.submodule_search_locations:
            raise opzoo.UpstreamUnavailable(f"pdetransformer is not importable ({first}); pip install "
                                            "pdetransformer==0.1.11") from None
        root = Path(list(spec.submodule_search_locations)[0])
        for name, path in (("pdetransformer", root), ("pdetransformer.core", root / "core"),
                           ("pdetransformer.core.mixed_channels", root / "core" / "mixed_channels"),
                           ("pdetransformer.core.separate_channels", root / "core" / "separate_channels")):
            if name not in sys.modules:
                module = types.ModuleType(name)
                module.__path__ = [str(path)]
                sys.modules[name] = module
        try:
            return importlib.import_module(f"pdetransformer.core.{kind}.pde_transformer")
        except ImportError as e:
            raise opzoo.UpstreamUnavailable(f"pdetransformer's network needs {e.name or e} (diffusers, einops, timm, "
                                            "transformers)") from None


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


class SeparateChannelsCall(torch.nn.Module):
    """Their separate-channel ``PDETransformer`` called as pdetransformer's supervised prediction calls it (lists per
    channel; time 0, task 0), on ``[B, C, 2, H, W]`` slots."""

    def __init__(self, net, labels):
        super().__init__()
        self.net = net
        self.labels = labels  # (channel_types [B, C], pde_type [B, C])

    def forward(self, x):
        b, c = x.shape[:2]
        types, pde = (t.expand(b, c) for t in self.labels)
        zeros = torch.zeros(b, c, device=x.device)
        per = lambda t: list(t.unbind(1))  # noqa: E731
        return self.net(x=per(x), simulation_time=per(zeros), channel_type=per(types), pde_type=per(pde),
                        pde_parameters=per(torch.zeros(b, c, 1, device=x.device)),
                        pde_parameters_class=per(torch.zeros(b, c, 1, dtype=torch.long, device=x.device)),
                        simulation_dt=per(zeros), task=per(zeros.long()), t=per(zeros))


def build_pdetransformer_separate(model, x) -> opzoo.Upstream:
    """Their separate-channel ``PDETransformer`` at the model's sizes, on the model's two frame slots per channel."""
    sc = mixed_channels_module("separate_channels")
    c = model.config
    size = next((k for k, v in SIZES.items() if (v["hidden_size"], v["num_heads"]) == (c.hidden_size, c.num_heads)
                 and c.depth == [2, 5, 8, 5, 2] and c.mlp_ratio == 4 and c.num_classes == 1000
                 and c.window_size == 8), None)
    if size is None:
        size = "opzoo-benchmark"
        sc.PDE_models[size] = lambda **kw: sc.PDEImpl(
            down_factor=2, hidden_size=c.hidden_size, num_heads=c.num_heads, depth=list(c.depth), mlp_ratio=c.mlp_ratio,
            num_classes=c.num_classes, class_dropout_prob=c.class_dropout_prob, window_size=c.window_size, **kw)
    net = sc.PDETransformer(sample_size=x.shape[1], num_timesteps=c.num_timesteps, type=size, periodic=c.periodic,
                            carrier_token_active=False, patch_size=c.patch_size)
    none = c.num_classes
    types = torch.tensor(c.channel_types if c.channel_types is not None else [none] * c.in_channels)[None]
    pde = torch.full((1, c.in_channels), none if c.pde_type is None else c.pde_type, dtype=torch.long)
    version = getattr(sys.modules.get("pdetransformer"), "__version__", None) or _version()
    return opzoo.Upstream(f"pdetransformer {version} PDETransformer (separate channels)",
                          SeparateChannelsCall(net, (types, pde)), inputs=lambda t: model._slots(t).detach(),
                          outputs=lambda y: torch.stack(y.sample, dim=1))
