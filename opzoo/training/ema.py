"""Exponential moving average of model weights."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn


class EMA:
    """``ema ← decay·ema + (1−decay)·θ`` after every optimizer step, for floating-point tensors.

    Buffers that are not floating point are copied. The averaged weights are what evaluation and
    the exported model use when EMA is on.
    """

    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for k, v in model.state_dict().items():
            s = self.shadow[k]
            if v.is_floating_point():
                s.lerp_(v.detach(), 1.0 - self.decay)
            else:
                s.copy_(v)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.shadow

    def load_state_dict(self, state) -> None:
        for k in self.shadow:
            self.shadow[k].copy_(state[k])

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        model.load_state_dict(self.shadow)


@contextlib.contextmanager
def ema_weights(model: nn.Module, ema: EMA | None) -> Iterator[nn.Module]:
    """``model`` with the averaged weights inside the block (evaluation, export) and its own after it;
    the model unchanged when there is no EMA."""
    if ema is None:
        yield model
        return
    backup = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ema.copy_to(model)
    try:
        yield model
    finally:
        model.load_state_dict(backup)
