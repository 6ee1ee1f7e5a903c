"""Upstream code timed side by side with opzoo's by ``opzoo benchmark``: neuraloperator's FNO for ``fno`` models,
and the official DPOT network (``thu-ml/DPOT``'s ``models/dpot.py``, not on PyPI: ``OPZOO_DPOT_REPO`` names a
checkout) for DPOT's presets."""

from __future__ import annotations

import importlib.util
import inspect
import os
from importlib import metadata
from pathlib import Path

import torch.nn.functional as F

import opzoo

DPOT_REPO_ENV = "OPZOO_DPOT_REPO"


def build_neuralop_fno(model, x) -> opzoo.Upstream:
    """neuraloperator 0.3's ``FNO`` at the model's width, depth and kept frequencies: a one-layer lifting from the same
    inputs (the frames and the grid coordinates opzoo appends), Fourier layers with linear skips, the same projection.
    ``n_modes`` counts +/- frequencies and halves the last (rfft) axis: ``(2K, ..., 2K - 2)`` keeps opzoo's ``K`` per
    corner."""
    try:
        from neuralop.models import FNO
    except ImportError:
        raise opzoo.UpstreamUnavailable("neuraloperator is not installed (pip install neuraloperator==0.3.0)") from None
    version = metadata.version("neuraloperator")
    params = inspect.signature(FNO.__init__).parameters
    if "lifting_channels" not in params or "use_mlp" not in params:
        raise opzoo.UpstreamUnavailable(f"neuraloperator {version}: only 0.3's FNO signature (lifting_channels, "
                                        "use_mlp) is mapped to opzoo's FNO")
    c = model.config
    k = c.modes
    module = FNO(n_modes=(*[2 * k] * (c.spatial_dims - 1), 2 * k - 2), hidden_channels=c.width,
                 in_channels=c.in_timesteps * c.in_channels + c.spatial_dims,
                 out_channels=c.out_timesteps * c.out_channels, lifting_channels=0,
                 projection_channels=c.projection_dim, n_layers=c.depth, use_mlp=False,
                 non_linearity=getattr(F, c.act))

    def inputs(t):
        h = opzoo.append_grid(t.flatten(-2).unsqueeze(-2), time=False).squeeze(-2)  # [B, *S, T*C + d]
        return h.movedim(-1, 1)

    return opzoo.Upstream(f"neuraloperator {version} FNO", module, inputs=inputs)


def build_official_dpot(model, x) -> opzoo.Upstream:
    """``DPOTNet`` from the checkout ``$OPZOO_DPOT_REPO`` at the model's sizes, when the model is DPOT's network."""
    repo = os.environ.get(DPOT_REPO_ENV)
    if not repo:
        raise opzoo.UpstreamUnavailable(f"the official DPOT code is not on PyPI: set {DPOT_REPO_ENV} to a checkout of "
                                        "https://github.com/thu-ml/DPOT")
    path = Path(repo) / "models" / "dpot.py"
    if not path.is_file():
        raise opzoo.UpstreamUnavailable(f"{DPOT_REPO_ENV}={repo}: {path} does not exist")
    c = model.config
    ours = (c.block, c.mixer, c.residual, c.feedforward, c.spatial_dims, bool(c.residual_args or c.block_args
                                                                             or c.feedforward_args))
    if ours != ("dpot", "fourier-attention", "plain", "mlp", 2, False):
        raise opzoo.UpstreamUnavailable(f"not DPOT's network (block {c.block!r}, mixer {c.mixer!r}, residual "
                                        f"{c.residual!r}, feed-forward {c.feedforward!r}, {c.spatial_dims}D)")
    grid = list(x.shape[1:-2])
    if grid != list(c.img_size) or grid[0] != grid[1]:
        raise opzoo.UpstreamUnavailable(f"DPOTNet takes square inputs of its img_size only; got {grid}")
    spec = importlib.util.spec_from_file_location("opzoo_official_dpot_models", path)
    code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code)
    module = code.DPOTNet(img_size=grid[0], patch_size=c.patch_size, mixing_type="afno", in_channels=c.in_channels,
                          out_channels=c.out_channels, in_timesteps=c.in_timesteps, out_timesteps=c.out_timesteps,
                          n_blocks=c.mixer_args["n_blocks"], embed_dim=c.width, out_layer_dim=c.out_layer_dim,
                          depth=c.depth, modes=c.mixer_args["modes"], mlp_ratio=c.mlp_ratio, n_cls=c.n_cls,
                          normalize=c.normalize, act=c.act, time_agg=c.time_agg)
    return opzoo.Upstream(f"official DPOT ({_checkout_name(Path(repo))}models/dpot.py)", module, outputs=lambda y: y[0])


def _checkout_name(repo: Path) -> str:
    """``"<commit> "`` of a git checkout (read from ``.git``, no subprocess), else ``""``."""
    head = repo / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            ref = (repo / ".git" / ref[5:]).read_text().strip()
        return f"{ref[:7]} "
    except OSError:
        return ""
