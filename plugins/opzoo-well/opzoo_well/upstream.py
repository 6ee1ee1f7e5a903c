"""The Well's own models (``the_well`` package), timed side by side with opzoo's by ``opzoo benchmark``."""

from __future__ import annotations

from importlib import metadata

import opzoo

from .backbones import BACKBONES, WellFnoConfig

CLASS_NAMES = {"well-fno": "FNO", "well-tfno": "TFNO", "well-unet-classic": "UNetClassic",
               "well-unet-convnext": "UNetConvNext"}
ARCH_FIELDS = {"FNO": ("modes1", "modes2", "modes3", "hidden_channels"),
               "TFNO": ("modes1", "modes2", "modes3", "hidden_channels"),
               "UNetClassic": ("init_features",), "UNetConvNext": ("stages", "blocks_per_stage", "blocks_at_neck",
                                                                   "init_features")}


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def build_the_wells_model(model, x) -> opzoo.Upstream:
    """The Well's class of ``model``'s architecture at its sizes, on the input its formatter makes of ``x``
    (``[B, dim_in, *S]``, normalized: opzoo's ``format_input``, done once before timing)."""
    try:
        from the_well.benchmark import models as well_models
    except ImportError:
        raise opzoo.UpstreamUnavailable("The Well's package is not installed (pip install the_well)") from None
    version = metadata.version("the_well")
    c = model.config
    if isinstance(c, WellFnoConfig):
        # the_well from 1.2.0 (commit 21e51f6) applies the FNO blocks; up to 1.1.0 it computed and dropped them
        applies = _version_tuple(version) >= (1, 2, 0)
        if applies != (c.fourier_blocks == "applied"):
            raise opzoo.UpstreamUnavailable(
                f"the_well {version}'s FNO {'applies' if applies else 'drops'} its Fourier blocks and this model "
                f"{'applies' if c.fourier_blocks == 'applied' else 'drops'} them (fourier_blocks="
                f"{c.fourier_blocks!r}), not the same computation: benchmark with --model-kwargs fourier_blocks="
                f"{'applied' if applies else 'dropped'}")
        fixed = {"n_layers": 4, "lifting_channels": 256, "projection_channels": 256, "rank": 1.0}
        differ = {k: getattr(c, k) for k, v in fixed.items() if getattr(c, k) != v}
        if differ:
            raise opzoo.UpstreamUnavailable(f"The Well's FNO/TFNO fix {fixed}; this model has {differ}")
    name = next((n for n, cls in BACKBONES.items() if type(model) is cls), None)
    if name is None:
        raise opzoo.UpstreamUnavailable(f"{type(model).__name__} is not one of The Well's architectures")
    cls_name = CLASS_NAMES[name]
    args = {k: getattr(c, k) for k in ARCH_FIELDS[cls_name]}
    grid = tuple(x.shape[1:-2])
    module = getattr(well_models, cls_name)(dim_in=c.dim_in, dim_out=c.dim_out, n_spatial_dims=c.spatial_dims,
                                            spatial_resolution=grid, **args)
    return opzoo.Upstream(f"the_well {version} {cls_name}", module, inputs=lambda t: model.format_input(t).detach())
