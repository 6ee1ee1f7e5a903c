"""Every registered preset at small dims (same architecture and components), for tests that
must cover all presets quickly: compile, bf16 autocast, and the GPU report."""

from __future__ import annotations

import os
from typing import Any

import torch

import opzoo

SMALL_WIDTH = 32
SMALL_PATCH = 4


def device_under_test() -> torch.device:
    """``OPZOO_TEST_DEVICE`` (``cpu`` by default; ``benchmarks/gpu_report.py`` sets ``cuda``)."""
    return torch.device(os.environ.get("OPZOO_TEST_DEVICE", "cpu"))


def small_overrides(name: str) -> dict[str, Any]:
    """Config overrides that shrink preset ``name``: width 32, depth 1, 16^d inputs, few modes.
    Fields a preset's config does not have are left alone; mixer, feed-forward and residual
    arguments keep their values except the Fourier head count and modes."""
    preset = opzoo.get_registry().preset(name)
    args = dict(preset.args)
    out: dict[str, Any] = {}
    d = int(args.get("spatial_dims", 2))
    if "depth" in args:
        out["depth"] = 1
    if "width" in args:
        out["width"] = SMALL_WIDTH
    if "img_size" in args:  # POT: 16^d pixels, patch 4: a 4^d latent, modes 2 truncate it
        out["img_size"] = [4 * SMALL_PATCH] * d
        out["patch_size"] = SMALL_PATCH
    if "out_layer_dim" in args:
        out["out_layer_dim"] = 8
    if isinstance(args.get("mixer_args"), dict):
        mixer_args = dict(args["mixer_args"])
        if "n_blocks" in mixer_args:
            mixer_args["n_blocks"] = 4
        if "modes" in mixer_args:
            mixer_args["modes"] = 2
        out["mixer_args"] = mixer_args
    if "modes" in args:  # FNO: 8^d grid, 2 modes per corner
        out["modes"] = 2
    # The Well's models (opzoo-well): narrow, 2 modes, a 2-stage CNextU-Net (a 4-stage one has a 1^d
    # bottleneck at 16^d, where aot_eager's backward fails on a view; eager is fine), and no
    # normalization: the random test inputs are not in any dataset's units (with acoustic_scattering_maze's
    # stats, density would be a near-constant channel and BatchNorm's gradient all cancellation)
    known = opzoo.get_registry().get("backbone", preset.backbone).config_class.__dataclass_fields__
    for key, small in (("hidden_channels", 8), ("lifting_channels", 8), ("projection_channels", 8),
                       ("modes1", 2), ("modes2", 2), ("modes3", 2), ("init_features", 4), ("stages", 2)):
        if key in known:
            out[key] = small
    if {"hidden_size", "window_size", "num_heads"} <= set(known):  # PDE-Transformer (opzoo-pdet): narrow, one block
        out |= {"hidden_size": 16, "num_heads": 2, "depth": [1, 1, 1, 1, 1], "window_size": 4}  # per stage
    if {"mlp_dim", "max_patches", "heads_xa"} <= set(known):  # MORPH (opzoo-morph): narrow, a short position table
        # dropout off (upstream trains with 0.1): these tests compare train-mode steps across dtypes and backends
        out |= {"dim": 32, "heads": 2, "heads_xa": 2, "mlp_dim": 32, "max_patches": 64, "dropout": 0.0,
                "emb_dropout": 0.0}
    if {"hidden_dim", "num_layers", "use_derivatives"} <= set(known):  # GPhyT (opzoo-gphyt): narrow, coarse patches
        out |= {"hidden_dim": 16, "mlp_dim": 16, "num_heads": 2, "num_layers": 1, "img_size": [16, 16],
                "patch_size": [1, 8, 8]}
    if {"embed_dim", "skip_connections", "lead_time"} <= set(known):  # Poseidon (opzoo-poseidon): narrow, a 32^2 grid
        out |= {"embed_dim": 8, "depths": [1, 1, 1, 1], "num_heads": [1, 1, 2, 2], "skip_connections": [2, 2, 2, 0],
                "image_size": 32, "patch_size": 4, "window_size": 4}  # four levels also for the three of poseidon-micro
    if {"state_names", "drop_path"} <= set(known):  # MPP (opzoo-mpp): narrow, one block, no stochastic depth
        out |= {"dim": 32, "heads": 2, "depth": 1, "drop_path": 0.0}
    if {"field_names", "boundaries", "jitter"} <= set(known):  # Walrus (opzoo-walrus): narrow, one block, and without
        # upstream's random jitter at inference (these tests run a model twice; tests/walrus covers the jitter)
        out |= {"hidden": 32, "heads": 2, "depth": 1, "inner": 8, "groups": 4, "drop_path": 0.0, "jitter": False}
    if "normalization" in known and "mean_delta" in known:
        out["normalization"] = "none"
    from opzoo.evaluation.fit import neutral_statistics

    return {**out, **neutral_statistics(name, out)}


def small_model(name: str, seed: int = 0) -> opzoo.Backbone:
    torch.manual_seed(seed)
    return opzoo.load(name, **small_overrides(name))


def small_input(model: opzoo.Backbone, batch: int = 2, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, target) for ``model``: ``[B, *S, T_in, C_in]``, ``[B, *S, T_out, C_out]``."""
    c = model.config
    d = int(getattr(c, "spatial_dims", 2))
    # a U-Net (opzoo-well) gets twice its down-sampling factor: BatchNorm statistics over the batch at a
    # 1^d bottleneck have 2 values per channel, too few for float32 and bf16 to track float64
    sizes = list(getattr(c, "img_size", None) or [max(8, 2 * getattr(model, "size_multiple", 1))] * d)
    if hasattr(c, "boundaries") and hasattr(c, "field_names"):  # Walrus: its stem takes 32 per axis, 128, ... (2-D)
        sizes = list(model.grid_for(sizes)[0])
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, *sizes, c.in_timesteps, c.in_channels, generator=g)
    y = torch.randn(batch, *sizes, c.out_timesteps, c.out_channels, generator=g)
    return x, y


def all_presets() -> list[str]:
    """Every preset, except that of The Well's presets (four backbones x up to 15 datasets, which differ
    only in channel counts and normalization stats) one per backbone and number of spatial dims is taken, and of
    PDE-Transformer's one per backbone (its S/B/L differ only in the sizes small_overrides replaces), and of MORPH's
    one per kind of position table (sliced or interpolated in time), and of GPhyT's and Poseidon's one (their sizes are
    what small_overrides replaces), and of MPP's and Walrus's one."""
    registry, seen, out = opzoo.get_registry(), set(), []
    for name in opzoo.list_models():
        preset = registry.preset(name)
        if preset.owner in ("opzoo-well", "opzoo-pdet", "opzoo-morph", "opzoo-gphyt", "opzoo-poseidon",
                             "opzoo-mpp", "opzoo-walrus"):
            key = (preset.backbone, preset.args.get("spatial_dims"), preset.args.get("time_positions"))
            if key in seen:
                continue
            seen.add(key)
        out.append(name)
    return out
