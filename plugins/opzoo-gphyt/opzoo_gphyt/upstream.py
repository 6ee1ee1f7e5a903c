"""FloWsnr/General-Physics-Transformer's own network, run side by side with opzoo's by ``opzoo benchmark`` and by the
parity tests.

GPhyT is not on the package index: ``OPZOO_GPHYT_REPO`` names a checkout at 4374116, the commit that published the
weights (its ``gphyt/model`` suffices; it needs einops and torchvision)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import opzoo

from .converter import upstream_name

REPO_ENV = "OPZOO_GPHYT_REPO"


def upstream_class(repo: str | os.PathLike | None = None):
    """``PhysicsTransformer`` from the checkout ``repo`` (default ``$OPZOO_GPHYT_REPO``), or UpstreamUnavailable."""
    repo = repo if repo is not None else os.environ.get(REPO_ENV)
    if not repo:
        raise opzoo.UpstreamUnavailable(f"GPhyT's code is not on the package index: set {REPO_ENV} to a checkout of "
                                        "https://github.com/FloWsnr/General-Physics-Transformer at 4374116")
    root = Path(repo)
    if not (root / "gphyt" / "model" / "transformer" / "model.py").is_file():
        raise opzoo.UpstreamUnavailable(f"{REPO_ENV}={repo}: gphyt/model/transformer/model.py does not exist (the "
                                        "layout before the 2026-02 restructuring is needed)")
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module("gphyt.model.transformer.model").PhysicsTransformer
    except ImportError as e:
        raise opzoo.UpstreamUnavailable(f"{REPO_ENV}={repo}: importing GPhyT's network failed ({e})") from None
    finally:
        sys.path.remove(str(root))


def upstream_network(model, repo=None):
    """Upstream's network at ``model``'s sizes, holding ``model``'s weights, in eval mode."""
    c = model.config
    net = upstream_class(repo)(
        num_fields=c.in_channels, hidden_dim=c.hidden_dim, mlp_dim=c.mlp_dim, num_heads=c.num_heads,
        num_layers=c.num_layers, patch_size=tuple(c.patch_size), img_size=(c.in_timesteps, *c.img_size),
        use_derivatives=c.use_derivatives, pos_enc_mode="absolute", att_mode="full",
        integrator=c.integrator if c.integrator != "none" else None, dropout=c.dropout)
    state = net.state_dict()
    state.update({upstream_name(k): v for k, v in model.state_dict().items()})
    net.load_state_dict(state, strict=True)
    return net.to(next(model.parameters()).dtype).eval()


def build_upstream_gphyt(model, x) -> opzoo.Upstream:
    """Their ``PhysicsTransformer`` with the model's weights, on the model's normalized frames."""
    if model.config.step_size != 1.0:
        raise opzoo.UpstreamUnavailable("upstream's forward always steps by 1.0 (it does not pass step_size on)")
    net = upstream_network(model)
    return opzoo.Upstream(f"GPhyT PhysicsTransformer ({os.environ.get(REPO_ENV)})", net,
                          inputs=lambda t: model._frames(t)[0].detach().contiguous())
