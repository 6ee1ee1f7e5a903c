import torch
from torch import nn

import opzoo

from .family import FAMILY
from .lab_format import MAE, LabTrajSource


class ShiftMixer(opzoo.Mixer):
    """Mixes each token with its neighbour along the first spatial axis: ``[B, *S, D] -> [B, *S, D]``."""

    def __init__(self, dim, shift=1):
        super().__init__()
        self.shift = shift
        self.proj = nn.Linear(2 * dim, dim)

    def forward(self, x):
        return self.proj(torch.cat([x, torch.roll(x, self.shift, dims=1)], dim=-1))


@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_mixer("example-shift", ShiftMixer)
    registry.register_reader(LabTrajSource)
    registry.register_metric(MAE)


@opzoo.hookimpl
def opzoo_register_models(registry):
    registry.register_model(
        "example-shift-op",
        backbone="simple",
        args=dict(width=16, depth=1, in_channels=2, out_channels=2, in_timesteps=3,
                  mixer="example-shift", mixer_args={"shift": 2}),
    )
    registry.register_family(FAMILY)
