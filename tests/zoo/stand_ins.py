"""Stand-in weights for a preset, written in its upstream's own format and placed in an offline Hugging Face cache (no
network here), with the narrow sizes that make them small: for the slow conformance test of the data contract."""

from __future__ import annotations

from pathlib import Path

import torch
from huggingface_hub import constants

import opzoo

from ..hub_cache import place_in_hf_cache, repo_files


def _offline(monkeypatch, cache: Path) -> None:
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def place_stand_in(name: str, monkeypatch, cache: Path) -> dict:
    """Put ``name``'s stand-in weights into ``cache`` (made the offline Hub cache) and return the ``model.args`` that
    load them (its narrow sizes)."""
    cache.mkdir(parents=True, exist_ok=True)
    if name in ("dpot-micro", "aot-pot-micro"):  # opzoo's own weights ship in the package: they are the family's
        return {}
    if name == "gphyt-s":
        from ..gphyt.test_gphyt_plugin import NARROW, REPO, upstream_file

        place_in_hf_cache(cache, REPO, {"gphyt-S.pth": upstream_file(cache.parent / "gphyt-S.pth")})
        _offline(monkeypatch, cache)
        return dict(NARROW)
    if name == "poseidon-t":
        from ..poseidon.test_poseidon_plugin import NARROW, upstream_dir

        ckpt = upstream_dir(cache.parent / "Poseidon-T")
        place_in_hf_cache(cache, "camlab-ethz/Poseidon-T", {n: ckpt / n for n in ("config.json", "model.safetensors")})
        _offline(monkeypatch, cache)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in NARROW.items()}
    if name == "morph-ti":
        from ..morph.test_morph_plugin import REPO, SMALL, TI_FILE, upstream_checkpoint

        torch.manual_seed(0)
        sizes = {**SMALL, "max_ar": 1, "patch_size": 8, "max_patches": 4096, "dropout": 0.0, "emb_dropout": 0.0}
        path = upstream_checkpoint(opzoo.load("morph-ti", **sizes), cache.parent / "morph-ti.pth")
        place_in_hf_cache(cache, REPO, {TI_FILE: path})
        _offline(monkeypatch, cache)
        return sizes
    if name in ("pdet-mc-s", "pdet-sc-s"):
        from ..pdet.test_pdet_plugin import REPO, SEPARATE_ARGS, SMALL_ARGS

        mixed = name == "pdet-mc-s"
        folder, tree = ("mc-s", "periodic") if mixed else ("sc-s", "separate-periodic")
        recorded = Path(__file__).parents[1] / "pdet" / "data" / tree
        place_in_hf_cache(cache, REPO, {f"{folder}/{f}": recorded / f
                                        for f in ("config.json", "diffusion_pytorch_model.safetensors")})
        _offline(monkeypatch, cache)
        return {k: v for k, v in (SMALL_ARGS if mixed else SEPARATE_ARGS).items() if k != "normalization"}
    if name == "well-fno-shear_flow":  # The Well's own model class, saved by its own save_pretrained
        from ..well.test_well_as_trained import well_model

        well_model("fno", "shear_flow").save_pretrained(cache.parent / "well-repo")
        place_in_hf_cache(cache, "polymathic-ai/FNO-shear_flow", repo_files(cache.parent / "well-repo"))
        _offline(monkeypatch, cache)
        return {}
    raise KeyError(f"no stand-in weights for {name}")
