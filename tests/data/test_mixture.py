"""The one data pipeline: trajectories and their split, resize, channel padding with mask, windows, the
mixture, and the per-step balanced DDP-aware batch sampler."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from opzoo.data import (
    DataFormatError,
    FrameShape,
    MixtureDataset,
    StepBatchSampler,
    TrajectoryDataset,
    WindowDataset,
    collate,
    pad_channels,
    resize,
    split_trajectories,
    train_test_split,
    write_canonical,
)


def _file(tmp_path, name, n, s, t, c, seed=0):
    data = np.random.default_rng(seed).standard_normal((n, *s, t, c)).astype(np.float32)
    write_canonical(tmp_path / name, data, [f"f{i}" for i in range(c)])
    return tmp_path / name, data


def test_resize_is_identity_at_same_size_and_exact_on_linear_fields():
    frames = torch.randn(8, 6, 3, 2)
    assert resize(frames, (8, 6)) is frames
    # a field linear in x, sampled at cell centres; 2x downsampling with align_corners=False
    # lands on the centres of the coarse cells, where the linear field is reproduced exactly.
    x = (torch.arange(16) + 0.5) / 16
    field = (3 * x - 1)[:, None, None, None].expand(16, 16, 2, 1)
    coarse = resize(field, (8, 8))
    xc = (torch.arange(8) + 0.5) / 8
    torch.testing.assert_close(coarse[:, 3, 1, 0], 3 * xc - 1)
    # upsampling a constant stays constant; 1-D and 3-D use (tri)linear interpolation
    assert torch.allclose(resize(torch.full((4, 5, 1), 2.5), (9,)), torch.tensor(2.5))
    assert resize(torch.randn(4, 4, 4, 2, 3), (8, 8, 8)).shape == (8, 8, 8, 2, 3)


def test_pad_channels_with_ones_and_mask():
    frames = torch.randn(4, 4, 3, 2)
    padded, mask = pad_channels(frames, 4)
    assert padded.shape == (4, 4, 3, 4) and mask.tolist() == [True, True, False, False]
    assert torch.equal(padded[..., :2], frames) and (padded[..., 2:] == 1.0).all()
    with pytest.raises(ValueError, match="more than n_channels"):
        pad_channels(frames, 1)


def test_window_dataset_items_are_the_file_windows(tmp_path):
    path, data = _file(tmp_path, "a.h5", n=2, s=(6, 5), t=9, c=2)
    ds = WindowDataset(path, t_in=3, t_out=2, n_channels=3)
    assert len(ds) == 2 * (9 - 5 + 1)
    for i in (0, 4, 7):
        sample, start = ds.window_position(i)
        item = ds[i]
        assert item["x"].shape == (6, 5, 3, 3) and item["y"].shape == (6, 5, 2, 3)
        np.testing.assert_array_equal(item["x"][..., :2].numpy(), data[sample, :, :, start : start + 3])
        np.testing.assert_array_equal(item["y"][..., :2].numpy(), data[sample, :, :, start + 3 : start + 5])
        assert (item["x"][..., 2] == 1).all() and item["mask"].tolist() == [True, True, False]
        assert item["dataset"].dtype == torch.int64


def test_window_dataset_stride_samples_and_too_short(tmp_path):
    path, _ = _file(tmp_path, "a.h5", n=4, s=(4, 4), t=10, c=1)
    ds = WindowDataset(path, t_in=2, t_out=1, stride=3, samples=range(1, 3))
    assert {ds.window_position(i) for i in range(len(ds))} == {(s, t) for s in (1, 2) for t in (0, 3, 6)}
    with pytest.raises(ValueError, match="fewer than t_in \\+ t_out = 11"):
        WindowDataset(path, t_in=10, t_out=1)


def _train_windows(path, k, resolution=8, n_test=None):
    train, _ = split_trajectories(TrajectoryDataset(path), n_test=n_test)
    return WindowDataset(train, 2, resolution=resolution, n_channels=3, dataset_index=k)


def test_mixture_resizes_pads_and_labels(tmp_path):
    a, data_a = _file(tmp_path, "a.h5", n=5, s=(16, 16), t=6, c=1, seed=1)
    b, data_b = _file(tmp_path, "b.h5", n=3, s=(8, 8), t=5, c=3, seed=2)
    mix = MixtureDataset([_train_windows(a, 0), _train_windows(b, 1, n_test=1)], [1.0, 3.0], ["a", "b"])
    assert mix.n_channels == 3 and mix.weights == [1.0, 3.0] and mix.names == ["a", "b"]
    # a: 4 train samples x 4 windows; b: 2 train samples x 3 windows
    assert mix.sizes == [16, 6] and len(mix) == 22
    item = mix[0]
    assert item["x"].shape == (8, 8, 2, 3) and item["y"].shape == (8, 8, 1, 3)
    assert item["mask"].tolist() == [True, False, False] and int(item["dataset"]) == 0
    expected = resize(torch.from_numpy(data_a[0, ..., 0:2, :]), (8, 8))
    torch.testing.assert_close(item["x"][..., :1], expected)
    last = mix[len(mix) - 1]
    assert int(last["dataset"]) == 1 and last["mask"].all()
    np.testing.assert_array_equal(last["y"].numpy(), data_b[1, :, :, 4:5])  # 8 x 8 is b's own size
    batch = next(iter(DataLoader(mix, batch_size=4)))
    assert batch["x"].shape == (4, 8, 8, 2, 3) and batch["mask"].shape == (4, 3) and batch["dataset"].shape == (4,)


def test_mixture_rejects_mismatched_datasets(tmp_path):
    a, _ = _file(tmp_path, "a.h5", n=2, s=(8, 8), t=5, c=1)
    b, _ = _file(tmp_path, "b.h5", n=2, s=(4, 4), t=5, c=1)
    with pytest.raises(ValueError, match="share resolution"):
        MixtureDataset([WindowDataset(a, 2), WindowDataset(b, 2)])
    with pytest.raises(ValueError, match="no windows"):
        MixtureDataset([WindowDataset(a, 2, samples=[])])


def test_trajectories_split_on_one_open_file(tmp_path):
    a, data_a = _file(tmp_path, "a.h5", n=10, s=(16, 16), t=6, c=2, seed=1)
    trajectories = TrajectoryDataset(a)
    train, test = split_trajectories(trajectories, 0.2)
    assert train.indices == list(range(8)) and test.indices == [8, 9]
    assert train.source is test.source is trajectories.source  # the file is opened once
    np.testing.assert_array_equal(test[1].numpy(), data_a[9])
    np.testing.assert_array_equal(test.read(0, 2, 5).numpy(), data_a[8, :, :, 2:5])
    frames, mask = FrameShape((8, 8), 3, 2).frames(test.read(0))
    assert frames.shape == (8, 8, 6, 3) and mask.tolist() == [True, True, False]
    torch.testing.assert_close(frames[..., :2], resize(torch.from_numpy(data_a[8]), (8, 8)))
    window = WindowDataset(test, 2, resolution=8, n_channels=3)[1]  # a split's windows: the same frames
    torch.testing.assert_close(window["x"], frames[..., 1:3, :])
    one, _ = _file(tmp_path, "one.h5", n=1, s=(4, 4), t=3, c=1)
    with pytest.raises(DataFormatError, match="one.h5: 1 trajectories are too few"):
        split_trajectories(TrajectoryDataset(one), 0.1)


def test_train_test_split():
    assert train_test_split(100) == (range(0, 90), range(90, 100))
    assert train_test_split(5) == (range(0, 4), range(4, 5))
    assert train_test_split(10, n_test=0) == (range(0, 10), range(10, 10))
    with pytest.raises(ValueError, match="too few"):
        train_test_split(10, 0.96)


def _mixture(tmp_path, sizes=(40, 4), weights=(1.0, 3.0)):
    parts = []
    for k, n in enumerate(sizes):
        path, _ = _file(tmp_path, f"d{k}.h5", n=n, s=(4, 4), t=3, c=1, seed=k)
        parts.append(WindowDataset(path, 2, dataset_index=k))
    return MixtureDataset(parts, list(weights))


def test_step_sampler_follows_weights_not_sizes(tmp_path):
    """DPOT's balanced sampling: dataset k is drawn with probability w_k / sum(w), its windows uniformly."""
    mix = _mixture(tmp_path)  # 40 windows vs 4 windows, weights 1 : 3
    sampler = StepBatchSampler(mix.window_probabilities(), 80, seed=0, start=0, stop=100)
    indices = np.concatenate([np.array(batch) for batch in sampler])
    datasets = np.searchsorted(mix.offsets, indices, side="right") - 1
    assert abs((datasets == 1).mean() - 0.75) < 0.02
    counts = np.bincount(indices[datasets == 1] - mix.offsets[1], minlength=4)
    assert counts.min() > 0.8 * counts.mean()
    assert indices.min() >= 0 and indices.max() < len(mix)


def test_step_sampler_depends_on_seed_and_step_only(tmp_path):
    mix = _mixture(tmp_path)
    p = mix.window_probabilities()
    whole = list(StepBatchSampler(p, 6, seed=3, start=0, stop=10))
    assert list(StepBatchSampler(p, 6, seed=3, start=4, stop=10)) == whole[4:]  # a resume sees the same batches
    assert list(StepBatchSampler(p, 6, seed=4, start=0, stop=10)) != whole
    shares = [list(StepBatchSampler(p, 6, 3, 0, 10, rank=r, world_size=3)) for r in range(3)]
    assert [sum((s[step] for s in shares), []) for step in range(10)] == whole  # ranks split each global batch
    with pytest.raises(ValueError, match="rank 3"):
        StepBatchSampler(p, 6, 3, 0, 10, rank=3, world_size=3)
    with pytest.raises(ValueError, match="batch_size 7 is not divisible by the 2 ranks"):
        StepBatchSampler(p, 7, 3, 0, 1, rank=0, world_size=2)


def test_dataloader_with_worker_processes(tmp_path):
    mix = _mixture(tmp_path)
    sampler = StepBatchSampler(mix.window_probabilities(), 8, seed=0, start=0, stop=4)
    batches = list(DataLoader(mix, batch_sampler=sampler, collate_fn=collate, num_workers=2))
    assert len(batches) == 4 and batches[0]["x"].shape == (8, 4, 4, 2, 1)
    again = list(DataLoader(mix, batch_sampler=sampler, collate_fn=collate, num_workers=0))
    for x, y in zip(batches, again):
        assert torch.equal(x["x"], y["x"]) and torch.equal(x["dataset"], y["dataset"])
