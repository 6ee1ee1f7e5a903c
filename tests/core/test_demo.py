import torch

from opzoo.demo import heat_trajectories, run_demo


def test_heat_trajectories_are_exact_solutions():
    """Each frame solves u_t = kappa * laplacian(u): check with a spectral derivative."""
    traj = heat_trajectories(2, 16, 3, kappa=0.02, dt=0.05, generator=torch.Generator().manual_seed(1)).double()
    k = torch.fft.fftfreq(16, d=1 / 16, dtype=torch.float64) * 2 * torch.pi
    lap = -(k[:, None] ** 2 + k[None, :] ** 2)
    u_hat = torch.fft.fft2(traj[..., 0], dim=(1, 2))
    ratio = u_hat[..., 1] / u_hat[..., 0]
    expected = torch.exp(0.02 * lap * 0.05)[None].expand_as(ratio)
    nonzero = u_hat[..., 0].abs() > 1e-3
    assert nonzero.sum() > 10
    torch.testing.assert_close(ratio[nonzero].real, expected[nonzero], rtol=1e-4, atol=1e-4)


def test_demo_runs_end_to_end(tmp_path, capsys):
    assert run_demo(out_dir=tmp_path, steps=5) == 0
    out = capsys.readouterr().out
    assert "reloaded model identical: True" in out
    assert (tmp_path / "simple-op-heat" / "model.safetensors").is_file()
    assert (tmp_path / "demo_rollout.png").stat().st_size > 1000
