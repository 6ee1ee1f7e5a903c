"""lanl/MORPH's own network, run side by side with opzoo's by ``opzoo benchmark`` and by the parity tests.

MORPH is not on the package index (its README's ``morph-pde`` is not published): ``OPZOO_MORPH_REPO`` names a checkout
of github.com/lanl/MORPH (its ``src/utils`` and ``config`` suffice; a16d5c4 is the tested commit). Its modules import
each other as ``src.utils.*``, so the checkout's root goes on ``sys.path`` while the network is imported."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import torch

import opzoo

from .converter import upstream_name

REPO_ENV = "OPZOO_MORPH_REPO"


def upstream_class(repo: str | os.PathLike | None = None):
    """lanl/MORPH's ``ViT3DRegression`` from the checkout ``repo`` (default ``$OPZOO_MORPH_REPO``), or
    UpstreamUnavailable saying what to set."""
    repo = repo if repo is not None else os.environ.get(REPO_ENV)
    if not repo:
        raise opzoo.UpstreamUnavailable(f"MORPH's code is not on the package index: set {REPO_ENV} to a checkout of "
                                        "https://github.com/lanl/MORPH")
    root = Path(repo)
    if not (root / "src" / "utils" / "vit_conv_xatt_axialatt2.py").is_file():
        raise opzoo.UpstreamUnavailable(f"{REPO_ENV}={repo}: src/utils/vit_conv_xatt_axialatt2.py does not exist")
    loaded = sys.modules.get("src")
    if loaded is not None and Path(list(getattr(loaded, "__path__", [""]))[0]).resolve() != (root / "src").resolve():
        raise opzoo.UpstreamUnavailable(f"another package named 'src' is already imported ({loaded}); run in a fresh "
                                        "process")
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module("src.utils.vit_conv_xatt_axialatt2").ViT3DRegression
    except ImportError as e:
        raise opzoo.UpstreamUnavailable(f"{REPO_ENV}={repo}: importing MORPH's network failed ({e})") from None
    finally:
        sys.path.remove(str(root))


def upstream_network(model, repo=None) -> torch.nn.Module:
    """Upstream's network at ``model``'s sizes, holding ``model``'s weights, in eval mode."""
    c = model.config
    cls = upstream_class(repo)
    net = cls(patch_size=c.patch_size, dim=c.dim, depth=c.depth, heads=c.heads, heads_xa=c.heads_xa,
              mlp_dim=c.mlp_dim, max_components=c.max_components, conv_filter=c.conv_filters, max_ar=c.max_ar,
              max_patches=c.max_patches, max_fields=c.max_fields, dropout=c.dropout, emb_dropout=c.emb_dropout,
              model_size="L" if c.time_positions == "interpolate" else "Ti")
    if c.time_positions == "interpolate" and c.max_ar == 1:
        raise opzoo.UpstreamUnavailable("upstream interpolates its position table only for max_ar > 1")
    state = {upstream_name(k): v for k, v in model.state_dict().items()}
    net.load_state_dict(state, strict=True)
    return net.to(next(model.parameters()).dtype).eval()


def build_upstream_morph(model, x) -> opzoo.Upstream:
    """Their ``ViT3DRegression`` with the model's weights, on the model's normalized fields."""
    net = upstream_network(model)

    def inputs(t):
        v, _, _ = model._normalized(t)
        return v.detach().contiguous()

    return opzoo.Upstream(f"lanl/MORPH ViT3DRegression ({os.environ.get(REPO_ENV)})", net, inputs=inputs,
                          outputs=lambda y: y[2])
