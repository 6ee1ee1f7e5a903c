"""EMA weights, data adaptation (resize, channel padding) and foreign layouts in training."""

import torch
import torch.nn.functional as F

from opzoo.data import pad_channels, resize
from opzoo.training import EMA


def test_ema_update_formula():
    model = torch.nn.Linear(2, 2)
    ema = EMA(model, decay=0.9)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update(model)
    assert torch.allclose(ema.shadow["weight"], 0.9 * start["weight"] + 0.1 * (start["weight"] + 1.0))
    assert torch.equal(ema.shadow["bias"], start["bias"])
    ema.copy_to(model)
    assert torch.equal(model.weight, ema.shadow["weight"])


def test_resize_is_bilinear_align_corners_false_per_frame_and_channel():
    x = torch.randn(12, 10, 3, 2)  # [X, Y, T, C]
    out = resize(x, (16, 8))
    assert out.shape == (16, 8, 3, 2)
    for t in range(3):
        for c in range(2):
            ref = F.interpolate(x[None, None, :, :, t, c], size=(16, 8), mode="bilinear", align_corners=False)[0, 0]
            assert torch.allclose(out[..., t, c], ref, atol=1e-6)
    assert resize(x, (12, 10)) is x


def test_pad_channels_with_ones_and_mask():
    x = torch.randn(4, 4, 2, 1)
    out, mask = pad_channels(x, 3)
    assert out.shape == (4, 4, 2, 3) and torch.equal(out[..., :1], x) and torch.all(out[..., 1:] == 1.0)
    assert mask.tolist() == [True, False, False]


def test_ema_bf16_autocast_and_tensorboard_run(tmp_path, datasets):
    """EMA on, bf16 autocast forced on CPU (the GPU code path), TensorBoard scalars when installed."""
    import opzoo
    from opzoo.training import Trainer, parse_run_config

    from .conftest import run_document, tiny_pot_args

    doc = run_document(tmp_path / "run", datasets, model={"name": "pot", "args": tiny_pot_args()},
                       training={"steps": 3, "batch_size": 2, "ema": 0.5, "amp": "bf16"}, checkpoint={"every": 2})
    trainer = Trainer(parse_run_config(doc), show_progress=False)
    assert trainer.autocast
    result = trainer.fit()
    assert len(result.losses) == 3 and all(l == l for l in result.losses)
    exported = opzoo.from_pretrained(result.model_dir)
    for name, value in exported.state_dict().items():  # the exported model holds the EMA weights
        assert torch.equal(value, trainer.ema.shadow[name].cpu())
    assert not torch.equal(exported.state_dict()["pos_embed"], trainer.model.state_dict()["pos_embed"])
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        return
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def test_training_reads_foreign_layouts_through_opzoo_data(tmp_path, datasets):
    """A PDEBench per-sample file ('0000/data' [T, X, Y, C]) trains like its canonical twin."""
    import h5py

    from opzoo.data import TrajectoryDataset

    canonical = h5py.File(datasets["heat"], "r")["data"][:4]  # [N, X, Y, T, C]
    path = tmp_path / "pdebench.h5"
    with h5py.File(path, "w") as f:
        for i, traj in enumerate(canonical):
            g = f.create_group(f"{i:04d}")
            g.create_dataset("data", data=traj.transpose(2, 0, 1, 3))  # [T, X, Y, C]
    src = TrajectoryDataset(str(path))
    assert src.shape == canonical.shape
    assert torch.equal(src.read(2, 3, 7), torch.from_numpy(canonical[2, :, :, 3:7]))
