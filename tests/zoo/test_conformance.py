"""Issue 57: every registered checkpoint family passes opzoo.testing's conformance suite. A family whose upstream
format the tests can write (MORPH, GPhyT, Poseidon, MPP) also goes through its converter: a round trip, and each damaged
file refused in one line. What is a family's own (its recorded parity, its data contract's cases) stays in
tests/<family>/."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

import opzoo
from opzoo.testing import FamilyConformance

from .small_presets import small_overrides


def _shrunk(name: str) -> dict:
    return dict(small_overrides(name))


def test_every_registered_family_has_a_conformance_class_here():
    classes = {cls.family for cls in globals().values() if isinstance(cls, type) and issubclass(cls, FamilyConformance)
               and cls is not FamilyConformance}
    assert classes == set(opzoo.get_registry().families())


class TestDPOT(FamilyConformance):
    family = "dpot"
    tiny = {**_shrunk("dpot-ti"), "img_size": [128, 128], "patch_size": 8}  # a load adapts the grid after its checks
    other = {"width": 64}
    no_gradient = {r"cls_head\..*": "DPOT's PDE-type classification head: forward_with_class reads it, the forward's output does not"}

    def write_upstream(self, model, path, edit):  # as DPOT's train script saves: {"args", "model"} (1x1-conv MLPs)
        import argparse

        from opzoo_fourier.dpot_converter import OFFICIAL_NAMES

        c = model.config
        state = {OFFICIAL_NAMES.name(k): (v[..., None, None] if ".mlp.fc" in k and k.endswith("weight") else v)
                 for k, v in model.state_dict().items()}
        edit(state)
        args = argparse.Namespace(modes=c.mixer_args["modes"], act=c.act, normalize=c.normalize)
        torch.save({"args": args, "model": state}, path.with_suffix(".pth"))
        return path.with_suffix(".pth")


class TestFNO(FamilyConformance):  # the reference scripts' sizes; no weights are published
    family = "fno"
    tiny = {"width": 8, "depth": 1, "modes": 4}


class TestAOTPOT(FamilyConformance):  # the paper's sizes; no weights are published
    family = "aot-pot"
    tiny = _shrunk("aot-pot-t")
    no_gradient = {r"cls_head\..*": "DPOT's PDE-type classification head: forward_with_class reads it, the forward's output does not"}


class TestNESTOR(FamilyConformance):  # no weights are published
    family = "nestor"
    tiny = _shrunk("nestor-ti")
    no_gradient = {
        r"cls_head\..*": "DPOT's PDE-type classification head: forward_with_class reads it, the forward's output does not",
        r"blocks\.\d+\.router\.gate\..*": "top-1 image routing renormalized over the one chosen expert: its weight is 1",
        r"blocks\.\d+\.experts\.\d+\..*": "an expert no image of the batch is routed to is never called (sparse dispatch)",
    }


class TestMorph(FamilyConformance):
    family = "morph"
    no_gradient = {  # the tiny model's input: one frame, 2-D (depth 1)
        r"net\.blocks\.\d+\.attn\.time\..*": "MORPH skips attention over time for a one-frame window",
        r"net\.blocks\.\d+\.attn\.depth\.[qk]\..*": "attention over a depth of one: its softmax over one key is 1",
    }
    tiny = {"dim": 32, "depth": 1, "heads": 2, "heads_xa": 2, "mlp_dim": 32, "conv_filters": 8, "patch_size": 4,
            "max_patches": 64, "max_ar": 1, "dropout": 0.0, "emb_dropout": 0.0}
    other = {"dim": 64, "heads": 4}
    grid = (16, 16)

    def write_upstream(self, model, path, edit):
        from opzoo_morph.converter import upstream_name

        state = {"module." + upstream_name(k): v for k, v in model.state_dict().items()}  # as trained under DDP
        edit(state)
        torch.save({"epoch": 1, "model_state_dict": state}, path.with_suffix(".pth"))
        return path.with_suffix(".pth")


class TestGPhyT(FamilyConformance):
    family = "gphyt"
    # at the published grid and patches (a load adapts the grid after its checks); the file records no heads: S's 3
    tiny = {**_shrunk("gphyt-s"), "hidden_dim": 24, "num_heads": 3, "img_size": [256, 128], "patch_size": [1, 16, 16]}
    other = {"hidden_dim": 48}

    def write_upstream(self, model, path, edit):
        from opzoo_gphyt.converter import upstream_name

        c = model.config
        state = {f"module._orig_mod.{upstream_name(k)}": v for k, v in model.state_dict().items()}
        edit(state)
        config = {"model": {"img_size": [c.in_timesteps, *c.img_size], "transformer": {
            "input_channels": c.in_channels, "hidden_dim": c.hidden_dim, "mlp_dim": c.mlp_dim,
            "num_heads": c.num_heads, "num_layers": c.num_layers, "patch_size": list(c.patch_size),
            "pos_enc_mode": "absolute", "use_derivatives": c.use_derivatives, "integrator": c.integrator,
            "dropout": 0.0}}}
        torch.save({"model_state_dict": state, "config": config}, path.with_suffix(".pth"))
        return path.with_suffix(".pth")


def save_folder(path: Path, config: dict, state: dict, weights: str, edit) -> Path:
    """A checkpoint folder as a ``save_pretrained`` writes one: ``config.json`` and the safetensors file ``weights``
    (after ``edit(state)``); returns the weights file, which the converter reads."""
    edit(state)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file(state, str(path / weights))
    return path / weights


class TestPoseidon(FamilyConformance):
    family = "poseidon"
    no_gradient = {  # the tiny grid's coarsest level is 1x1: a window of one token
        r"net\.(encoder\.layers\.3|decoder\.layers\.0)\.blocks\.\d+\.attention\.self\."
        r"(query|key|logit_scale|continuous_position_bias_mlp)(\..*)?": "a window of one token: its softmax is 1",
    }
    tiny = {"embed_dim": 8, "depths": [1, 1, 1, 1], "num_heads": [1, 1, 2, 2], "image_size": 32, "window_size": 4}
    other = {"embed_dim": 16}

    def write_upstream(self, model, path, edit):  # as scOT's save_pretrained writes it: config.json and safetensors
        c = model.config
        recorded = Path(__file__).parents[1] / "poseidon" / "data" / "scot-small" / "config.json"
        config = json.loads(recorded.read_text())
        config.update({"image_size": c.image_size, "patch_size": c.patch_size, "num_channels": c.in_channels,
                       "num_out_channels": c.out_channels, "embed_dim": c.embed_dim, "depths": list(c.depths),
                       "num_heads": list(c.num_heads), "skip_connections": list(c.skip_connections),
                       "window_size": c.window_size})
        state = {k[len("net."):]: v.contiguous() for k, v in model.state_dict().items()}
        return save_folder(path, config, state, "model.safetensors", edit)


class TestMPP(FamilyConformance):
    family = "mpp"
    no_gradient = {r"net\.(blocks\.\d+\.spatial\.(norm1|norm2|mlp_norm)|embed\.in_proj\.\d+|debed\.out_proj\.\d+)\.bias":
                   "RMSInstanceNorm2d's bias, held because the published files hold it and never used (as upstream's "
                   "models/spatial_modules.py @ 38eefb1)"}
    tiny = _shrunk("mpp-avit-ti")
    other = {"dim": 64, "heads": 4}
    grid = (32, 32)

    def write_upstream(self, model, path, edit):  # as train_basic.py saves under DDP: {iters, epoch, model_state, ...}
        from opzoo_mpp.converter import upstream_state

        state = {f"module.{k}": v for k, v in upstream_state(model).items()}
        edit(state)
        torch.save({"iters": 0, "epoch": 0, "model_state": state, "optimizer_state_dict": {}}, path.with_suffix(".tar"))
        return path.with_suffix(".tar")


class TestPdetMixedChannels(FamilyConformance):
    family = "pdet-mc"
    tiny = _shrunk("pdet-mc-s")
    other = {"hidden_size": 32}

    def write_upstream(self, model, path, edit):  # a diffusers folder: config.json, diffusion_pytorch_model.safetensors
        c = model.config
        config = {"_class_name": "PDETransformer", "in_channels": c.in_channels, "out_channels": c.out_channels,
                  "periodic": c.periodic, "window_size": c.window_size, "patch_size": c.patch_size,
                  "hidden_size": c.hidden_size, "depth": list(c.depth), "num_heads": c.num_heads,
                  "mlp_ratio": c.mlp_ratio, "num_classes": c.num_classes, "carrier_token_active": False}
        state = {"model." + k[len("net."):]: v.contiguous() for k, v in model.state_dict().items()}
        return save_folder(path, config, state, "diffusion_pytorch_model.safetensors", edit)


class TestPdetSeparateChannels(FamilyConformance):
    family = "pdet-sc"
    no_gradient = {r"net\.(simulation_time|simulation_dt|pde_parameter)_embedder_\d+\..*":
                   "held because the published files hold them; upstream scales them by 0.0, opzoo leaves them out"}
    tiny = _shrunk("pdet-sc-s")
    other = {"hidden_size": 32}

    def write_upstream(self, model, path, edit):  # as the mixed channels', with the window tables upstream saves
        from opzoo_pdet.mixed_net import RelativePositionBias

        c = model.config
        config = {"_class_name": "PDETransformer", "num_timesteps": c.num_timesteps, "periodic": c.periodic,
                  "patch_size": c.patch_size, "carrier_token_active": False}
        state = {"model." + k[len("net."):]: v.contiguous() for k, v in model.state_dict().items()}
        tables = RelativePositionBias(c.window_size, c.num_heads)
        for key in [k for k in state if k.endswith("attn_spatial.logit_scale")]:
            at = key[:-len("logit_scale")] + "pos_emb_funct."
            state[at + "relative_coords_table"] = tables.table.unsqueeze(0).clone()
            state[at + "relative_position_index"] = tables.index.clone()
        return save_folder(path, config, state, "diffusion_pytorch_model.safetensors", edit)


def write_well_fno_repo(model, path, edit):
    """As The Well pushed its FNO/TFNO: neuraloperator's names (one stacked spectral bias, weights per layer)."""
    def upstream(key: str) -> str:
        parts = key.split(".")
        if parts[1] == "skips":
            return f"model.fno_blocks.fno_skips.{parts[2]}.weight"
        if parts[1] == "spectral":
            kind = {"weight": "tensor", "core": "core"}.get(parts[3], f"factors.factor_{parts[-1]}")
            return f"model.fno_blocks.convs.weight.{parts[2]}.{kind}"
        return "model." + key[len("net."):]

    weights = model.state_dict()
    state = {upstream(k): v.contiguous() for k, v in weights.items() if not k.endswith(".bias") or "spectral" not in k}
    layers = sorted({int(k.split(".")[2]) for k in weights if k.startswith("net.spectral.")})
    state["model.fno_blocks.convs.bias"] = torch.stack([weights[f"net.spectral.{i}.bias"] for i in layers])
    return write_well_repo(model, path, edit, state)


class TestWellFNO(FamilyConformance):
    family = "well-fno"
    tiny = _shrunk("well-fno-acoustic_scattering_maze")
    no_gradient = {r"net\.(spectral|skips)\..*": "the_well <= 1.1.0 ran the Fourier blocks and dropped their output "
                                                "(fourier_blocks='dropped', as the published weights were trained)"}
    other = {"hidden_channels": 16}

    def write_upstream(self, model, path, edit):
        return write_well_fno_repo(model, path, edit)


class TestWellTFNO(FamilyConformance):
    family = "well-tfno"
    tiny = _shrunk("well-tfno-acoustic_scattering_maze")
    no_gradient = {r"net\.(spectral|skips)\..*": "the_well <= 1.1.0 ran the Fourier blocks and dropped their output "
                                                "(fourier_blocks='dropped', as the published weights were trained)"}
    other = {"hidden_channels": 16}

    def write_upstream(self, model, path, edit):
        return write_well_fno_repo(model, path, edit)


def write_well_repo(model, path, edit, state=None):
    """As The Well pushed a model (huggingface_hub's PyTorchModelHubMixin): config.json, the init arguments of its
    class, and model.safetensors under its own tensor names (``state``; opzoo's U-Nets keep them under ``net.``)."""
    c = model.config
    init = {"dim_in": c.dim_in, "dim_out": c.dim_out, "n_spatial_dims": c.spatial_dims,
            "spatial_resolution": list(c.resolution),
            **{k: getattr(c, k) for k in ("modes1", "modes2", "hidden_channels", "init_features", "stages",
                                          "blocks_per_stage", "blocks_at_neck") if hasattr(c, k)}}
    if state is None:
        state = {k[len("net."):]: v.contiguous() for k, v in model.state_dict().items()}
    return save_folder(path, init, state, "model.safetensors", edit)


class TestWellUNetClassic(FamilyConformance):
    family = "well-unet-classic"
    tiny = _shrunk("well-unet-classic-acoustic_scattering_maze")
    other = {"init_features": 8}

    def write_upstream(self, model, path, edit):
        return write_well_repo(model, path, edit)


class TestWellUNetConvNext(FamilyConformance):
    family = "well-unet-convnext"
    tiny = _shrunk("well-unet-convnext-acoustic_scattering_maze")
    no_gradient = {r"net\.(encoder|decoder)\.\d+\.resample\.block\.0\.bias": "The Well's channels-first LayerNorm "
                                                                             "holds a bias it never uses (ChannelL2Norm)"}
    other = {"init_features": 8}

    def write_upstream(self, model, path, edit):
        return write_well_repo(model, path, edit)


class TestWalrus(FamilyConformance):
    family = "walrus"
    tiny = _shrunk("walrus")
    other = {"hidden": 64, "heads": 4}
    grid = (32, 32)
    deterministic = {"jitter": False}  # upstream rolls the grid and tokens by random amounts at inference too
    no_gradient = {r"net\.(embed|debed)\.3\..*": "the 3-D stem and decoder: the tiny model runs 2-D data (upstream "
                                                 "holds one pair per dimensionality, embed/debed '2' and '3')"}

    def write_upstream(self, model, path, edit):  # as upstream's trainer coalesces a checkpoint: {"app": {"model"}}
        from opzoo_walrus.converter import upstream_state

        state = upstream_state(model)
        edit(state)
        torch.save({"app": {"model": state}}, path.with_suffix(".pt"))
        return path.with_suffix(".pt")
