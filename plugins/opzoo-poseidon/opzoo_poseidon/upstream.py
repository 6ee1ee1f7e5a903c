"""camlab-ethz/poseidon's own scOT, run side by side with opzoo's by ``opzoo benchmark`` and by the parity tests.

Poseidon is not on the package index (the index's ``scOT`` is an unrelated EEG toolbox): ``OPZOO_POSEIDON_REPO`` names
a checkout at v1-paper, and its network needs the transformers of its time, 4.29.2, importable beside opzoo
(``make poseidon-reference`` installs it into .venv/reference/poseidon-transformers-4.29.2; put that directory on
``PYTHONPATH``)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from torch import nn

import opzoo

REPO_ENV = "OPZOO_POSEIDON_REPO"
TRANSFORMERS = "4.29.2"


def upstream_classes(repo: str | os.PathLike | None = None):
    """``(ScOT, ScOTConfig)`` from the checkout ``repo`` (default ``$OPZOO_POSEIDON_REPO``), or UpstreamUnavailable."""
    repo = repo if repo is not None else os.environ.get(REPO_ENV)
    if not repo:
        raise opzoo.UpstreamUnavailable(f"Poseidon's code is not on the package index: set {REPO_ENV} to a checkout of "
                                        "https://github.com/camlab-ethz/poseidon at v1-paper")
    root = Path(repo)
    if not (root / "scOT" / "model.py").is_file():
        raise opzoo.UpstreamUnavailable(f"{REPO_ENV}={repo}: scOT/model.py does not exist")
    try:
        import transformers
    except ImportError:
        raise opzoo.UpstreamUnavailable(f"scOT needs transformers {TRANSFORMERS}: run `make poseidon-reference` and put "
                                        ".venv/reference/poseidon-transformers-4.29.2 on PYTHONPATH") from None
    if transformers.__version__ != TRANSFORMERS:
        raise opzoo.UpstreamUnavailable(f"scOT's Swin-v2 parts come from transformers, and the weights were trained "
                                        f"with {TRANSFORMERS}; this is {transformers.__version__}")
    sys.path.insert(0, str(root))
    try:
        module = importlib.import_module("scOT.model")
    except ImportError as e:
        raise opzoo.UpstreamUnavailable(f"{REPO_ENV}={repo}: importing scOT failed ({e})") from None
    finally:
        sys.path.remove(str(root))
    return module.ScOT, module.ScOTConfig


def upstream_config(model, config_class):
    c = model.config
    return config_class(image_size=c.image_size, patch_size=c.patch_size, num_channels=c.in_channels,
                        num_out_channels=c.out_channels, embed_dim=c.embed_dim, depths=list(c.depths),
                        num_heads=list(c.num_heads), skip_connections=list(c.skip_connections),
                        window_size=c.window_size, mlp_ratio=c.mlp_ratio, qkv_bias=True, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, drop_path_rate=0.0, hidden_act="gelu",
                        use_absolute_embeddings=False, initializer_range=0.02, layer_norm_eps=c.layer_norm_eps, p=1,
                        residual_model="convnext", use_conditioning=True, learn_residual=False)


class _ScOTAtLeadTime(nn.Module):
    """Upstream's ``ScOT`` called as opzoo's benchmark calls a module, on the standardized frames ``[B, C, n, n]``
    alone: every sample at the one lead time ``lead_time``."""

    def __init__(self, net, lead_time: float):
        super().__init__()
        self.net, self.lead_time = net, lead_time

    def forward(self, frames):
        time = frames.new_full((frames.shape[0],), self.lead_time)
        return self.net(pixel_values=frames, time=time).output


def upstream_network(model, repo=None) -> nn.Module:
    """Upstream's ``ScOT`` at ``model``'s sizes, holding ``model``'s weights, in eval mode."""
    scot, config_class = upstream_classes(repo)
    net = scot(upstream_config(model, config_class))
    net.load_state_dict({k[len("net."):]: v for k, v in model.state_dict().items() if k.startswith("net.")},
                        strict=True)
    return _ScOTAtLeadTime(net.to(next(model.parameters()).dtype).eval(), model.config.lead_time)


def build_upstream_poseidon(model, x) -> opzoo.Upstream:
    """Their ``ScOT`` with the model's weights, on the model's standardized frame and one step's lead time."""
    if model.config.out_timesteps != 1:
        raise opzoo.UpstreamUnavailable("upstream predicts one lead time per call; benchmark with out_timesteps=1")
    net = upstream_network(model)
    return opzoo.Upstream(f"Poseidon scOT (v1-paper, transformers {TRANSFORMERS}; {os.environ.get(REPO_ENV)})", net,
                          inputs=lambda t: model._frame(t).detach().contiguous(),
                          outputs=lambda y: y.permute(0, 2, 3, 1).unsqueeze(3) if model.config.field_mean is None
                          else (y * model.field_std.view(1, -1, 1, 1) + model.field_mean.view(1, -1, 1, 1))
                          .permute(0, 2, 3, 1).unsqueeze(3))


__all__ = ["upstream_classes", "upstream_network", "build_upstream_poseidon"]
