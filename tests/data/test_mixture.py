"""Mixture: resize, channel padding with mask, windows, balanced DDP-aware sampling."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from opzoo.data import (
    BalancedSampler,
    DataSpec,
    MixtureDataset,
    TrajectoryDataset,
    WindowDataset,
    make_mixture,
    make_trajectory_sets,
    pad_channels,
    resize,
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


def test_mixture_resizes_pads_and_labels(tmp_path):
    a, data_a = _file(tmp_path, "a.h5", n=5, s=(16, 16), t=6, c=1, seed=1)
    b, data_b = _file(tmp_path, "b.h5", n=3, s=(8, 8), t=5, c=3, seed=2)
    mix = make_mixture([DataSpec(a, weight=1.0), DataSpec(b, weight=3.0, n_test=1)], t_in=2, resolution=8, split="train")
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
    with pytest.raises(ValueError, match="pass resolution="):
        make_mixture([a, b], t_in=2, resolution=None)
    with pytest.raises(ValueError, match="share resolution"):
        MixtureDataset([WindowDataset(a, 2), WindowDataset(b, 2)])
    c, _ = _file(tmp_path, "c.h5", n=2, s=(8,), t=5, c=1)
    with pytest.raises(ValueError, match="same number of spatial dims"):
        make_mixture([a, c], t_in=2)


def test_trajectory_sets_match_training_preprocessing(tmp_path):
    a, data_a = _file(tmp_path, "a.h5", n=10, s=(16, 16), t=6, c=2, seed=1)
    b, _ = _file(tmp_path, "b.h5", n=4, s=(8, 8), t=7, c=1, seed=2)
    tests = make_trajectory_sets([a, b], resolution=8)
    assert [len(t) for t in tests] == [1, 1]  # last 10 % (at least one) of each file
    item = tests[0][0]
    assert item["trajectory"].shape == (8, 8, 6, 2) and item["mask"].all()
    torch.testing.assert_close(item["trajectory"], resize(torch.from_numpy(data_a[9]), (8, 8)))
    other = tests[1][0]
    assert other["trajectory"].shape == (8, 8, 7, 2) and other["mask"].tolist() == [True, False]
    assert int(other["dataset"]) == 1
    window = WindowDataset(a, 2, resolution=8, samples=[9])[1]
    torch.testing.assert_close(window["x"], item["trajectory"][..., 1:3, :])
    part = TrajectoryDataset(a, t_start=2, n_steps=3)
    np.testing.assert_array_equal(part[4]["trajectory"].numpy(), data_a[4, :, :, 2:5])


def test_train_test_split():
    assert train_test_split(100) == (range(0, 90), range(90, 100))
    assert train_test_split(5) == (range(0, 4), range(4, 5))
    assert train_test_split(10, n_test=0) == (range(0, 10), range(10, 10))


def _mixture(tmp_path, sizes=(40, 4), weights=(1.0, 3.0)):
    specs = []
    for k, n in enumerate(sizes):
        path, _ = _file(tmp_path, f"d{k}.h5", n=n, s=(4, 4), t=3, c=1, seed=k)
        specs.append(DataSpec(path, weight=weights[k], n_test=0))
    return make_mixture(specs, t_in=2, resolution=None)


def test_balanced_sampler_follows_weights_not_sizes(tmp_path):
    mix = _mixture(tmp_path)  # 40 windows vs 4 windows, weights 1 : 3
    sampler = BalancedSampler(mix, num_samples=8000, seed=0)
    indices = np.array(list(sampler))
    datasets = np.searchsorted(mix.offsets, indices, side="right") - 1
    assert abs((datasets == 1).mean() - 0.75) < 0.02
    # within a dataset, windows are drawn uniformly
    counts = np.bincount(indices[datasets == 1] - mix.offsets[1], minlength=4)
    assert counts.min() > 0.8 * counts.mean()
    assert indices.min() >= 0 and indices.max() < len(mix)


def test_balanced_sampler_is_deterministic_and_epoch_dependent(tmp_path):
    mix = _mixture(tmp_path)
    a, b = BalancedSampler(mix, seed=3), BalancedSampler(mix, seed=3)
    assert list(a) == list(b) and len(a) == len(mix)
    a.set_epoch(1)
    assert list(a) != list(b)
    b.set_epoch(1)
    assert list(a) == list(b)
    assert list(BalancedSampler(mix, seed=4)) != list(BalancedSampler(mix, seed=3))


def test_balanced_sampler_ranks_split_one_global_sequence(tmp_path):
    mix = _mixture(tmp_path)
    world = 3
    samplers = [BalancedSampler(mix, num_samples=100, seed=5, rank=r, world_size=world) for r in range(world)]
    for s in samplers:
        s.set_epoch(2)
    shares = [list(s) for s in samplers]
    assert all(len(share) == 34 for share in shares)  # 100 rounded up to 102 = 3 x 34
    full = BalancedSampler(mix, num_samples=102, seed=5, rank=0, world_size=1)
    full.set_epoch(2)
    sequence = list(full)
    interleaved = [shares[p % world][p // world] for p in range(102)]
    assert interleaved == sequence  # disjoint positions of the same sequence
    with pytest.raises(ValueError, match="rank 3"):
        BalancedSampler(mix, rank=3, world_size=3)


def test_balanced_sampler_reads_torch_distributed(tmp_path):
    import torch.distributed as dist

    mix = _mixture(tmp_path)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        sampler = BalancedSampler(mix, seed=1)
        assert (sampler.rank, sampler.world_size) == (0, 1)
        assert list(sampler) == list(BalancedSampler(mix, seed=1, rank=0, world_size=1))
    finally:
        dist.destroy_process_group()


def test_dataloader_with_worker_processes(tmp_path):
    mix = _mixture(tmp_path)
    loader = DataLoader(mix, batch_size=8, sampler=BalancedSampler(mix, num_samples=32, seed=0), num_workers=2)
    batches = list(loader)
    assert len(batches) == 4 and batches[0]["x"].shape == (8, 4, 4, 2, 1)
    again = list(DataLoader(mix, batch_size=8, sampler=BalancedSampler(mix, num_samples=32, seed=0), num_workers=0))
    for x, y in zip(batches, again):
        assert torch.equal(x["x"], y["x"]) and torch.equal(x["dataset"], y["dataset"])
