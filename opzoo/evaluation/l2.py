"""Masked per-channel relative L2: the metric rollouts are scored by (``l2_full``, ``l2_per_step``) and, of one
predicted step, the training loss (``relative_l2_loss``; DPOT paper, section 3)."""

from __future__ import annotations

from torch import Tensor

EPS = 1e-8


def per_channel_relative_l2(pred: Tensor, target: Tensor, reduce_dims: tuple[int, ...]) -> Tensor:
    """``‖ŷ − y‖₂ / (‖y‖₂ + 1e-8)`` over ``reduce_dims``, computed in float32."""
    pred, target = pred.float(), target.float()
    err = (pred - target).square().sum(reduce_dims).sqrt()
    ref = target.square().sum(reduce_dims).sqrt()
    return err / (ref + EPS)


def relative_l2_loss(pred: Tensor, target: Tensor, mask: Tensor, reduction: str = "mean") -> Tensor:
    """Masked per-channel relative L2 of one prediction.

    pred, target: ``[B, *S, T, C]``; mask: ``[B, C]`` or ``[C]`` bool (False = padded channel).
    Per sample and channel ``‖m⊙(ŷ−y)‖₂ / (‖m⊙y‖₂ + 1e-8)`` over (S, T); ``reduction="mean"``
    averages over valid channels then the batch, ``"none"`` returns the per-sample values ``[B]``.
    """
    if pred.shape != target.shape:
        raise ValueError(f"prediction {list(pred.shape)} and target {list(target.shape)} differ in shape")
    if mask.ndim == 1:
        mask = mask.expand(pred.shape[0], -1)
    rel = per_channel_relative_l2(pred, target, tuple(range(1, pred.ndim - 1)))  # [B, C]
    m = mask.to(rel.dtype)
    per_sample = (rel * m).sum(-1) / m.sum(-1).clamp_min(1.0)
    if reduction == "none":
        return per_sample
    return per_sample.mean()


def l2_full(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """"l2 full" of rollouts, per sample: relative L2 per channel over space × time, averaged over valid channels.

    pred, target: ``[N, *S, T, C]``; mask ``[N, C]`` or ``[C]`` -> ``[N]``.
    """
    return relative_l2_loss(pred, target, mask, reduction="none")


def l2_per_step(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Per-step curve: relative L2 per channel over space at each step, averaged over valid channels.

    pred, target: ``[N, *S, T, C]``; mask ``[N, C]`` or ``[C]`` -> ``[N, T]``.
    """
    if mask.ndim == 1:
        mask = mask.expand(pred.shape[0], -1)
    rel = per_channel_relative_l2(pred, target, tuple(range(1, pred.ndim - 2)))  # [N, T, C]
    m = mask.to(rel.dtype)[:, None, :]
    return (rel * m).sum(-1) / m.sum(-1).clamp_min(1.0)
