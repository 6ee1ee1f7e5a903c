"""Records Walrus's reference code for opzoo's parity tests (tests/walrus/test_parity.py), each part in a process of
its own, none importing opzoo:

- ``fork``: Polymathic AI's own fork ``PolymathicAI/walrus_steering`` @ e963fad (the main repository,
  PolymathicAI/walrus, cannot be fetched): its ``models/`` (``SpaceTimeSplitBlock`` of ``FullAttention`` and
  ``AxialTimeAttention``, ``AdaptiveDVstrideEncoder``, ``AdaptiveDVstrideDecoder``, ``RMSGroupNorm``,
  ``choose_kernel_size_deterministic``) at reduced width, with weights set from a seed alone and the layer scales the
  published network folds away (``gamma_att``, ``gamma``) at 1. It writes the stand-in checkpoint ``walrus-small.pt``
  the way upstream's trainer writes its checkpoints (``torch.distributed.checkpoint.save`` of ``{"app": {"model",
  "optimizer"}}``, AdamW after one step, coalesced into one file by ``dcp_to_torch_save``, as the published
  ``walrus.pt`` is read: ``torch.load(...)["app"]["model"]``) in the published tensor names, and the parameter count
  of those parts at the published size on the meta device.
- ``port``: ``FhG-IISB/foundax`` @ 7a90e3a ``repos/jax_walrus`` (JAX, checked by its authors against the real
  checkpoint at atol = rtol = 5e-2): the whole network on the stand-in's weights, for the parts no PyTorch file holds
  (the SpaceBag encoder's columns, the boundary padding and its flags, the periodic decoder, the jitter's rolls), in
  float64 with two of its constants set to upstream PyTorch's: ``RMSGroupNorm``'s epsilon (the fork's forward passes
  none to ``F.rms_norm``, so the dtype's; the port adds 1e-6) and the pixel positions of the rotary embedding (torch
  makes them in float32; the port in the working precision).

    git clone https://github.com/PolymathicAI/walrus_steering FORK && git -C FORK checkout e963fad
    git clone https://github.com/FhG-IISB/foundax PORT && git -C PORT checkout 7a90e3a
    pip install --target JAXDIR "jax[cpu]" equinox      # jax 0.10.2, equinox 0.13.8 recorded
    OPZOO_WALRUS_FORK=FORK OPZOO_WALRUS_PORT=PORT OPZOO_JAX_PATH=JAXDIR OMP_NUM_THREADS=1 \\
        python tests/walrus/record_reference.py [OUT_DIR]

The fork's models/ need torch, einops, timm (``timm.layers.DropPath``) and the_well (``BoundaryCondition``), as
opzoo's test environment has them. Outputs, into tests/walrus/data/ (or OUT_DIR): ``walrus-small.pt``,
``reference.safetensors`` (every case's inputs and outputs), ``reference.json`` (commits, versions, cases, counts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import torch

SMALL = dict(hidden=32, heads=2, inner=8, groups=4, depth=2, n_states=12)
BASE = ((8, 4), (8, 4), (8, 4))
PUBLISHED = dict(hidden=1408, heads=16, inner=352, groups=16, depth=40, n_states=67)
WALL, OPEN, PERIODIC = 0, 1, 2
# whole-network cases of the port: (T, B, grid, labels, bcs per axis)
NETWORK_CASES = {
    "2d-wall-periodic-32x128": (3, 1, (32, 128, 1), [3, 4, 5, 9], [[WALL, WALL], [PERIODIC, PERIODIC],
                                                                   [PERIODIC, PERIODIC]]),
    "2d-open-wall-128x32": (2, 1, (128, 32, 1), [6, 7, 8], [[OPEN, WALL], [WALL, OPEN], [PERIODIC, PERIODIC]]),
    "3d-mixed-16x16x16": (2, 1, (16, 16, 16), [3, 4, 11], [[PERIODIC, PERIODIC], [WALL, OPEN],
                                                                  [OPEN, OPEN]]),
}
JITTER_CASE = "2d-wall-periodic-32x128"
ROLLOUT_CASE, ROLLOUT_STEPS = "2d-wall-periodic-32x128", 3
JITTER_SEED = 7


def data(shape, g: torch.Generator) -> torch.Tensor:
    """An input in [-1, 1), exact in float32 (stored so)."""
    return rounded_uniform(shape, g, 0.0, 2.0)


def rounded_uniform(shape, g: torch.Generator, base: float = 0.0, scale: float = 0.5) -> torch.Tensor:
    """Numbers from the seed alone, exact in float32 (multiples of 2^-12): every CPU records the same weights."""
    u = torch.randint(-2048, 2048, shape, generator=g, dtype=torch.int64).to(torch.float64) / 4096
    return base + u * scale


# ---- the fork ------------------------------------------------------------------------------------------------------
def import_fork(root: Path):
    """The fork's ``walrus_steering.models`` without its package ``__init__`` (which imports its data pipeline,
    hydra and wandb)."""
    pkg = types.ModuleType("walrus_steering")
    pkg.__path__ = [str(root / "walrus_steering" / "walrus_steering")]
    sys.modules["walrus_steering"] = pkg
    from walrus_steering.models.decoders import vstride_decoder
    from walrus_steering.models.encoders import vstride_encoder
    from walrus_steering.models.shared_utils import flexi_utils, normalization
    from walrus_steering.models.spatial_blocks import full_attention
    from walrus_steering.models.spatiotemporal_blocks import space_time_split
    from walrus_steering.models.temporal_blocks import axial_time_attention
    return types.SimpleNamespace(
        AdaptiveDVstrideDecoder=vstride_decoder.AdaptiveDVstrideDecoder,
        AdaptiveDVstrideEncoder=vstride_encoder.AdaptiveDVstrideEncoder,
        choose_kernel_size_deterministic=flexi_utils.choose_kernel_size_deterministic,
        RMSGroupNorm=normalization.RMSGroupNorm, FullAttention=full_attention.FullAttention,
        SpaceTimeSplitBlock=space_time_split.SpaceTimeSplitBlock,
        AxialTimeAttention=axial_time_attention.AxialTimeAttention)


def fork_parts(f, s: dict, device=None):
    """The fork's encoder, blocks and decoder at the sizes ``s``, as the published config builds them."""
    from functools import partial

    with torch.device(device or "cpu"):
        enc = f.AdaptiveDVstrideEncoder(kernel_scales_seq=((2, 2), (4, 2), (4, 4), (8, 4)), base_kernel_size3d=BASE,
                                        input_dim=s["n_states"], inner_dim=s["inner"], output_dim=s["hidden"],
                                        spatial_dims=3, groups=s["groups"], norm_layer=f.RMSGroupNorm,
                                        activation=torch.nn.SiLU)
        blocks = torch.nn.ModuleList(
            f.SpaceTimeSplitBlock(space_mixing=partial(f.FullAttention, num_heads=s["heads"]),
                                  time_mixing=partial(f.AxialTimeAttention, num_heads=s["heads"], bias_type="rel"),
                                  channel_mixing=partial(torch.nn.Identity), hidden_dim=s["hidden"], drop_path=0.0,
                                  causal_in_time=True, norm_layer=f.RMSGroupNorm)
            for _ in range(s["depth"]))
        dec = f.AdaptiveDVstrideDecoder(base_kernel_size3d=BASE, input_dim=s["hidden"], inner_dim=s["inner"],
                                        output_dim=s["n_states"], spatial_dims=3, groups=s["groups"],
                                        norm_layer=f.RMSGroupNorm, activation=torch.nn.SiLU)
    return enc, blocks, dec


def published_names(enc, blocks, dec) -> dict[str, torch.Tensor]:
    """The parts' tensors in the published checkpoint's names: ``embed.{2,3}``, ``blocks.i`` (``ff_out.1`` ->
    ``ff_out``; no layer scales), ``debed.{2,3}``, ``encoder_dummy``."""
    sd = {"encoder_dummy": torch.tensor([1.0])}
    for d in ("2", "3"):
        sd.update({f"embed.{d}.{k}": v for k, v in enc.state_dict().items()})
        sd.update({f"debed.{d}.{k}": v for k, v in dec.state_dict().items()})
    for i, blk in enumerate(blocks):
        for k, v in blk.state_dict().items():
            if k.endswith("gamma_att") or k.endswith("gamma"):
                continue
            sd[f"blocks.{i}.{k.replace('ff_out.1.', 'ff_out.')}"] = v
    return sd


def record_fork(root: Path, out: Path) -> dict:
    from safetensors.torch import save_file

    f = import_fork(root)
    s = SMALL
    g = torch.Generator().manual_seed(20261207)
    enc, blocks, dec = fork_parts(f, s)
    with torch.no_grad():
        for module in (enc, blocks, dec):
            for name, p in module.named_parameters():
                one = name.endswith("gamma_att") or name.endswith("gamma")
                if one:
                    p.fill_(1.0)
                else:
                    norm = p.dim() == 1 and ("norm" in name) and name.endswith("weight")
                    p.copy_(rounded_uniform(p.shape, g, 1.0 if norm else 0.0, 0.5 if norm else 0.4))
    sd = published_names(enc, blocks, dec)
    sd["encoder_dummy"] = torch.tensor([1.0625])
    write_checkpoint(sd, out / "walrus-small.pt")

    tensors, cases = {}, {}
    for dtype, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
        e, b, d = (m.to(dtype).eval() for m in (enc, blocks, dec))
        gen = torch.Generator().manual_seed(5)
        # the blocks over a latent of a 2-D grid (d = 1) and of a 3-D one
        for name, shape in {"blocks-2d": (3, 2, s["hidden"], 4, 4, 1), "blocks-3d": (2, 1, s["hidden"], 2, 4, 2)}.items():
            x = data(shape, gen)
            h = x.to(dtype)
            with torch.no_grad():
                for blk in b:
                    h, _ = blk(h, None, None)
            tensors[f"{name}.input"] = x.float()
            tensors[f"{name}.{tag}"] = h
            cases[name] = {"shape": list(shape)}
        # the encoder: its input already padded, the flags appended; its first kernel's columns chosen and rescaled
        columns = [3, 4, 5, 9, 2, 0, 1]
        for name, (shape, kernels) in {"encoder-2d": ((2, len(columns), 18, 40, 1), ((1, 1), (2, 2), (1, 1))),
                                       "encoder-3d": ((1, len(columns), 12, 14, 20), ((1, 1), (1, 1), (2, 2)))}.items():
            x = data(shape, gen)
            sub = f.AdaptiveDVstrideEncoder(kernel_scales_seq=((2, 2),), base_kernel_size3d=BASE,
                                            input_dim=len(columns), inner_dim=s["inner"], output_dim=s["hidden"],
                                            spatial_dims=3, groups=s["groups"], norm_layer=f.RMSGroupNorm,
                                            activation=torch.nn.SiLU).to(dtype)
            sub.load_state_dict({k: v for k, v in e.state_dict().items() if not k.startswith("proj1")}, strict=False)
            w = e.proj1.weight[:, columns]
            scale = ((s["n_states"] - 3) / (len(columns) - 3)) ** 0.5
            with torch.no_grad():
                sub.proj1.weight.copy_(torch.cat([w[:, :-2] * scale, w[:, -2:]], dim=1))
                y, _ = sub(rearrange_nt(x.to(dtype)), random_kernel=kernels)
            tensors[f"{name}.input"] = x.float()
            tensors[f"{name}.{tag}"] = y[0]
            cases[name] = {"shape": list(shape), "kernels": kernels, "columns": columns}
        # the decoder on non-periodic axes (the fork's has no periodic wrap)
        labels = [3, 4, 5, 9]
        for name, (shape, kernels) in {"decoder-2d": ((2, s["hidden"], 5, 6, 1), ((1, 1), (2, 2), (1, 1))),
                                       "decoder-3d": ((1, s["hidden"], 3, 4, 3), ((1, 1), (1, 1), (2, 2)))}.items():
            x = data(shape, gen)
            with torch.no_grad():
                y = d(x.to(dtype)[None], torch.tensor(labels), stage_info={"random_kernel": kernels})
            tensors[f"{name}.input"] = x.float()
            tensors[f"{name}.{tag}"] = y[0]
            cases[name] = {"shape": list(shape), "kernels": kernels, "labels": labels}
    grids = [(32, 32, 1), (128, 128, 1), (256, 512, 1), (384, 768, 1), (1024, 1, 1), (16, 64, 128), (192, 256, 512)]
    kernel_choices = {"x".join(map(str, g_)): [list(k) for k in f.choose_kernel_size_deterministic(g_)]
                      for g_ in grids}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "fork.safetensors"))

    # the published size, counted on the meta device: the fork's parts, without the two layer scales per block
    enc, blocks, dec = fork_parts(f, PUBLISHED, device="meta")
    scales = sum(p.numel() for n, p in blocks.named_parameters() if n.endswith("gamma_att") or n.endswith("gamma"))
    count = (2 * sum(p.numel() for p in enc.parameters()) + sum(p.numel() for p in blocks.parameters()) - scales
             + 2 * sum(p.numel() for p in dec.parameters()) + 1)
    import einops
    import timm
    return {"fork_cases": cases, "kernel_choices": kernel_choices, "published_parameters": count,
            "published_parameters_how": "the fork's AdaptiveDVstrideEncoder and AdaptiveDVstrideDecoder for "
            "embed/debed '2' and '3', 40 SpaceTimeSplitBlocks (FullAttention 16 heads, AxialTimeAttention rel), at "
            "hidden 1408, intermediate 352, 16 groups, 67 states, minus the layer scales gamma_att and gamma the "
            "published tree does not hold, plus encoder_dummy",
            "fork_versions": {"torch": torch.__version__, "einops": einops.__version__, "timm": timm.__version__}}


def rearrange_nt(x: torch.Tensor) -> torch.Tensor:
    """``[N, C, *S] -> [1, N, C, *S]``: the fork's encoder takes ``[T, B, C, *S]``."""
    return x[None]


def write_checkpoint(model_sd: dict, path: Path, optimizer: bool = False) -> None:
    """As upstream's trainer: ``dcp.save({"app": {"model", "optimizer"}})`` (AdamW after one step over the model's
    parameters), then coalesced into one torch file (``dcp_to_torch_save``). The published ``walrus.pt`` holds the
    model alone (its 5,145,064,530 bytes are the 1,286,199,047 float32 parameters and 268 kB more), so the recorded
    stand-in leaves the optimizer out; ``optimizer=True`` keeps it (tests/walrus/test_walrus_plugin.py reads both)."""
    import tempfile

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    params = {k: torch.nn.Parameter(v.clone()) for k, v in model_sd.items() if not k.endswith("rotary_emb.freqs")}
    opt = torch.optim.AdamW(params.values(), lr=2e-4, weight_decay=1e-4, eps=1e-10)
    sum((p.float() ** 2).sum() for p in params.values()).backward()
    opt.step()
    state = {"app": {"model": model_sd, **({"optimizer": opt.state_dict()} if optimizer else {})}}
    with tempfile.TemporaryDirectory() as tmp:
        dcp.save(state, checkpoint_id=tmp, no_dist=True)
        dcp_to_torch_save(tmp, str(path))


def fork_normalization(root: Path):
    """The fork's ``SamplewiseRevNormalization`` (and its stats dataclass), read from ``trainer/training.py`` and
    defined here: that module imports wandb, FSDP and its data pipeline, which the normalization does not need."""
    import ast
    from dataclasses import dataclass
    from typing import Optional

    path = root / "walrus_steering" / "walrus_steering" / "trainer" / "training.py"
    text = path.read_text()
    scope = {"torch": torch, "dataclass": dataclass, "Optional": Optional}
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name in ("SamplewiseNormalizationStats",
                                                             "SamplewiseRevNormalization"):
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), scope)
    return scope["SamplewiseRevNormalization"]


# ---- the port ------------------------------------------------------------------------------------------------------
def record_port(port: Path, jax_path: str, out: Path) -> dict:
    sys.path.append(jax_path)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from safetensors.torch import save_file

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(port / "repos" / "jax_walrus"))
    from jax_walrus import convert_weights, model_eqx

    model_eqx.RMSGroupNorm.__init__.__defaults__ = (float(np.finfo(np.float64).eps),)  # the fork's F.rms_norm

    def axial_freqs(self, *dims):  # positions in float32, as torch.linspace makes them upstream
        parts = []
        for ind, n in enumerate(dims):
            pos = jnp.asarray(torch.linspace(-1, 1, steps=n).double().numpy())
            f_ = self(pos)
            shape = [1] * len(dims)
            shape[ind] = n
            parts.append(f_.reshape(*shape, -1))
        return jnp.concatenate(jnp.broadcast_arrays(*parts), axis=-1)

    model_eqx.LRRotaryEmbedding.get_axial_freqs = axial_freqs

    payload = torch.load(out / "walrus-small.pt", weights_only=True, map_location="cpu")
    sd = {k: v.double() for k, v in payload["app"]["model"].items()}
    s = SMALL
    model = model_eqx.IsotropicModel(hidden_dim=s["hidden"], intermediate_dim=s["inner"], n_states=s["n_states"],
                                     processor_blocks=s["depth"], groups=s["groups"], num_heads=s["heads"],
                                     causal_in_time=True, drop_path=0.0, base_kernel_size=BASE, encoder_groups=s["groups"],
                                     key=jax.random.PRNGKey(0))
    params = convert_weights.convert_pytorch_to_jax_params(sd, processor_blocks=s["depth"])
    model = model_eqx.transfer_weights(params, model)

    tensors, cases = {}, {}
    gen = torch.Generator().manual_seed(11)
    for name, (t, b, grid, labels, bcs) in NETWORK_CASES.items():
        x = data((t, b, len(labels), *grid), gen)
        xj = jnp.asarray(x.numpy()[..., 0] if grid[2] == 1 else x.numpy())  # the port squeezes nothing itself
        xj = jnp.moveaxis(jnp.swapaxes(xj, 0, 1), 2, -1)  # [T, B, C, *S] -> [B, T, *S, C]
        y = model(xj, jnp.asarray(labels), bcs if grid[2] != 1 else bcs[:2])
        y = np.moveaxis(np.swapaxes(np.asarray(y), 0, 1), -1, 2)  # -> [T, B, C, *S]
        tensors[f"{name}.input"] = x.float()
        tensors[f"{name}.f64"] = torch.from_numpy(y.copy()) if grid[2] != 1 else torch.from_numpy(y.copy())[..., None]
        cases[name] = {"T": t, "B": b, "grid": list(grid), "labels": labels, "bcs": bcs}

    # a rollout as upstream's trainer runs one (rollout_model, validation): each step the window's statistics by the
    # fork's SamplewiseRevNormalization (in float32, as its compute_stats casts), the port's network on the normalized
    # window, the last frame plus the denormalized change (the padded field zeroed), the window slid forward
    revin = fork_normalization(Path(os.environ["OPZOO_WALRUS_FORK"]))()
    t, b, grid, labels, bcs = NETWORK_CASES[ROLLOUT_CASE]
    window = tensors[f"{ROLLOUT_CASE}.input"].double()[..., 0]  # [T, B, C, H, W]
    window = torch.cat([window, torch.zeros_like(window[:, :, :1])], dim=2)  # velocity_z, as 2-D data is padded
    labels = labels + [6]
    meta = types.SimpleNamespace(n_spatial_dims=2)
    frames = []
    for _ in range(ROLLOUT_STEPS):
        stats = revin.compute_stats(window, meta)
        normalized = revin.normalize_stdmean(window, stats)
        xj = jnp.moveaxis(jnp.swapaxes(jnp.asarray(normalized.numpy()), 0, 1), 2, -1)
        y = np.moveaxis(np.swapaxes(np.asarray(model(xj, jnp.asarray(labels), bcs[:2])), 0, 1), -1, 2)
        nxt = window[-1:].float() + revin.denormalize_delta(torch.from_numpy(y[-1:].copy()), stats)
        nxt[:, :, -1] = 0.0  # velocity_z: a padded field, zeroed as rollout_model's field_mask does
        frames.append(nxt)
        window = torch.cat([window[1:], nxt.double()])
    tensors["rollout.f32"] = torch.cat(frames)[..., None]  # [steps, B, C + 1, H, W, 1]
    cases["rollout"] = {"case": ROLLOUT_CASE, "steps": ROLLOUT_STEPS, "labels": labels}

    # the jitter: the padded, flagged and rolled grid the port's _jitter_forward makes, and the rolls it drew
    t, b, grid, labels, bcs = NETWORK_CASES[JITTER_CASE]
    x = tensors[f"{JITTER_CASE}.input"].double().numpy()
    kernels = model_eqx.choose_kernel_size_deterministic(grid)
    padded, info = model_eqx._jitter_forward(jnp.asarray(x), bcs, 3, 3, BASE, kernels, True,
                                             jax.random.PRNGKey(JITTER_SEED))
    rolls = [0, 0, 0]
    for r, dim in zip(*info["rolls"]):
        rolls[dim - 3] = int(r)
    tensors["jitter.padded"] = torch.from_numpy(np.asarray(padded).copy()).float()  # exact: the input, 0s, flags
    cases["jitter"] = {"case": JITTER_CASE, "rolls": rolls, "kernels": [list(k) for k in kernels]}
    # the rotary positions both sides used (torch's float32 linspace on this CPU), per token count of the cases
    for n in (2, 4, 16, 32):
        tensors[f"positions.{n}"] = torch.linspace(-1, 1, steps=n)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "port.safetensors"))
    import equinox
    return {"port_cases": cases, "port_versions": {"jax": jax.__version__, "equinox": equinox.__version__}}


def git_head(path: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else
               Path(__file__).parent / "data")
    out.mkdir(parents=True, exist_ok=True)
    fork, port = Path(os.environ["OPZOO_WALRUS_FORK"]), Path(os.environ["OPZOO_WALRUS_PORT"])
    if "--part" in sys.argv:
        part = sys.argv[sys.argv.index("--part") + 1]
        result = record_fork(fork, out) if part == "fork" else record_port(port, os.environ["OPZOO_JAX_PATH"], out)
        (out / f"{part}.json").write_text(json.dumps(result))
        return
    for part in ("fork", "port"):  # each in a process of its own
        subprocess.run([sys.executable, __file__, str(out), "--part", part], check=True)
    from safetensors.torch import load_file, save_file

    meta = {"small": SMALL, "base_kernels": BASE, "published": PUBLISHED,
            "fork": {"repo": "PolymathicAI/walrus_steering", "commit": git_head(fork)},
            "port": {"repo": "FhG-IISB/foundax", "path": "repos/jax_walrus", "commit": git_head(port)}}
    tensors = {}
    for part in ("fork", "port"):
        meta.update(json.loads((out / f"{part}.json").read_text()))
        tensors.update({f"{part}.{k}": v for k, v in load_file(str(out / f"{part}.safetensors")).items()})
        (out / f"{part}.json").unlink()
        (out / f"{part}.safetensors").unlink()
    save_file(tensors, str(out / "reference.safetensors"))
    (out / "reference.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
