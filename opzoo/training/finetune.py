"""Fine-tuning: a pretrained model on a user's HDF5 file whose channels and resolution may differ.

The data is brought to the model (DESIGN §8): channels are padded with 1.0 up to the model's
``in_channels`` and masked out of the loss and metrics; space is interpolated (bilinear,
align_corners=False) to the model's pretraining resolution (``pretrained_cfg['resolution']``), or
to ``resolution`` when given.
"""

from __future__ import annotations

from typing import Any, Sequence

from .config import RunConfig, parse_run_config


def finetune_config(model: str, data: Sequence[str], output_dir: str, *, steps: int = 500, batch_size: int = 8,
                    lr: float = 1e-4, resolution: Sequence[int] | None = None, test_fraction: float = 0.1,
                    pretrained: bool = True, overrides: dict[str, Any] | None = None) -> RunConfig:
    """A validated run config that fine-tunes ``model`` (preset, hf-hub:..., or a saved repo dir) on ``data``.

    Defaults follow the pretraining recipe with a 10x smaller max lr and no checkpoints in between.
    """
    document: dict[str, Any] = {
        "output_dir": output_dir,
        "model": {"name": model, "pretrained": pretrained},
        "data": {"datasets": [{"path": p, "test_fraction": test_fraction} for p in data],
                 "resolution": list(resolution) if resolution else None},
        "optimizer": {"lr": lr},
        "training": {"steps": steps, "batch_size": batch_size},
        "checkpoint": {"every": None},
    }
    for dotted, value in (overrides or {}).items():
        node = document
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return parse_run_config(document, source="finetune arguments")
