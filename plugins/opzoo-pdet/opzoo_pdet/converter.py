"""The ``pde-transformer`` converter: a PDE-Transformer checkpoint (a diffusers ``ModelMixin`` directory:
``config.json`` and ``diffusion_pytorch_model.safetensors``, e.g. a subfolder of ``thuerey-group/pde-transformer``)
-> opzoo ``pdet-mc`` (mixed channels) or ``pdet-sc`` (separate channels: ``num_timesteps`` in config.json)
weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from safetensors import SafetensorError
from safetensors.torch import load_file

import opzoo

from .backbones import DEPTH, SIZES
from .provenance import pretrained_cfg

CONFIG_FILE, WEIGHTS_FILE = "config.json", "diffusion_pytorch_model.safetensors"
MIXED_CLASS = "PDETransformer"
# config.json keys of pdetransformer's mixed-channel PDETransformer (register_to_config) -> opzoo config fields
DIRECT = {"in_channels": "in_channels", "out_channels": "out_channels", "periodic": "periodic",
          "window_size": "window_size", "patch_size": "patch_size"}
# PDEImpl keywords a config.json may carry through **kwargs
EXTRA = ("hidden_size", "depth", "num_heads", "mlp_ratio", "num_classes", "class_dropout_prob", "max_hidden_size")
IGNORED = ("_class_name", "_diffusers_version", "_name_or_path", "sample_size", "type", "carrier_token_active")


def repo_files(path: Path) -> tuple[Path, Path]:
    """``(config.json, weights)`` of a checkpoint directory, or of a weights file with config.json beside it."""
    folder, weights = (path, path / WEIGHTS_FILE) if path.is_dir() else (path.parent, path)
    config = folder / CONFIG_FILE
    for f in (config, weights):
        if not f.is_file():
            what = "is not a regular file (a FIFO, device or directory)" if f.exists() else "is missing"
            raise opzoo.CheckpointError(f"{folder} is not a PDE-Transformer checkpoint directory: {f.name} {what} "
                                        f"(a diffusers save_pretrained directory holds {CONFIG_FILE} and "
                                        f"{WEIGHTS_FILE})")
    return config, weights


def read_config(path: Path) -> dict[str, Any]:
    doc = opzoo.read_json(path, "a diffusers config.json", error=opzoo.CheckpointError)
    if not isinstance(doc, dict):
        raise opzoo.CheckpointError(f"{path}: expected a JSON object")
    return doc


def _shape(sd: Mapping[str, Any], key: str, where: Path) -> tuple[int, ...]:
    if key not in sd:
        raise opzoo.CheckpointError(f"{where}: tensor {key!r} is missing: not a mixed-channel PDE-Transformer")
    return tuple(sd[key].shape)


def sizes_of(sd: Mapping[str, Any], where: Path) -> dict[str, Any]:
    """The network's sizes, read from its tensors (``model.``-prefixed names)."""
    hidden, c_in, patch, _ = _shape(sd, "model.x_embedder.proj.weight", where)
    levels = sum(1 for k in sd if k.startswith("model.t_embedder_") and k.endswith(".mlp.0.weight")) - 1
    stages = [f"encoder_level_{i}" for i in range(levels)] + ["latent"] + [f"decoder_level_{i}" for i in range(levels)]
    depth = [len({k.split(".")[3] for k in sd if k.startswith(f"model.{st}.blocks.")}) for st in stages]
    heads = _shape(sd, "model.encoder_level_0.blocks.0.attn.logit_scale", where)[0]
    mlp_hidden = _shape(sd, "model.encoder_level_0.blocks.0.mlp.fc1.weight", where)[0]
    rows = _shape(sd, "model.y_embedder_0.embedding_table.weight", where)[0]
    out_rows = _shape(sd, "model.final_layer.out_proj.weight", where)[0]
    if levels < 1 or 0 in depth or out_rows % (patch * patch):
        raise opzoo.CheckpointError(f"{where}: the tensors do not form a mixed-channel PDE-Transformer "
                                    f"({levels} levels, stage depths {depth})")
    return {"in_channels": c_in, "out_channels": out_rows // (patch * patch), "hidden_size": hidden, "depth": depth,
            "num_heads": heads, "mlp_ratio": mlp_hidden / hidden, "patch_size": patch, "num_classes": rows - 1}


SEPARATE_KEYS = ("_class_name", "_diffusers_version", "_name_or_path", "sample_size", "type", "carrier_token_active",
                 "num_timesteps", "periodic", "patch_size")
TABLES = ("relative_coords_table", "relative_position_index")  # buffers upstream saves; opzoo recomputes them


def architecture_of(doc: Mapping[str, Any]) -> str:
    return "pdet-sc" if "num_timesteps" in doc else "pdet-mc"


def separate_model_args(doc: Mapping[str, Any], sd: Mapping[str, Any], where: Path) -> dict[str, Any]:
    """The ``pdet-sc`` config of a separate-channel checkpoint: sizes from its tensors (the window from its saved
    position tables), checked against ``config.json``'s ``type``; boundary from config.json (their default: walls)."""
    if doc.get("carrier_token_active", True):  # their constructor's default is True
        raise opzoo.CheckpointError(f"{where}: carrier tokens (carrier_token_active true or unset) are not "
                                    "implemented by opzoo-pdet (the published checkpoints were trained without them)")
    unknown = sorted(set(doc) - set(SEPARATE_KEYS))
    if unknown:
        raise opzoo.CheckpointError(f"{where}: config.json keys {', '.join(unknown)} are not known to opzoo's "
                                    "PDE-Transformer: refusing rather than ignoring them")
    hidden, steps, patch, _ = _shape(sd, "model.x_embedder.proj.weight", where)
    levels = sum(1 for k in sd if k.startswith("model.t_embedder_") and k.endswith(".mlp.0.weight")) - 1
    stages = [f"encoder_level_{i}" for i in range(levels)] + ["latent"] + [f"decoder_level_{i}" for i in range(levels)]
    depth = [len({k.split(".")[3] for k in sd if k.startswith(f"model.{st}.blocks.")}) for st in stages]
    block = "model.encoder_level_0.blocks.0."
    table = _shape(sd, block + "attn_spatial.pos_emb_funct.relative_coords_table", where)
    args = {"num_timesteps": steps, "hidden_size": hidden, "depth": depth, "patch_size": patch,
            "num_heads": _shape(sd, block + "attn_spatial.logit_scale", where)[0],
            "mlp_ratio": _shape(sd, block + "mlp.fc1.weight", where)[0] / hidden, "window_size": (table[1] + 1) // 2,
            "num_classes": _shape(sd, "model.task_embedder_0.embedding_table.weight", where)[0],
            "periodic": bool(doc.get("periodic", False))}
    if doc.get("num_timesteps") != steps or doc.get("patch_size", patch) != patch:
        raise opzoo.CheckpointError(f"{where}: config.json (num_timesteps {doc.get('num_timesteps')}, patch_size "
                                    f"{doc.get('patch_size')}) and the weights ({steps} frames, patch {patch}) disagree")
    if doc.get("type") in SIZES:
        want = {**SIZES[doc["type"]], "depth": list(DEPTH), "window_size": 8, "num_classes": 1000, "mlp_ratio": 4.0}
        differ = {k: (v, args[k]) for k, v in want.items() if args[k] != v}
        if differ:
            raise opzoo.CheckpointError(f"{where}: config.json (type {doc['type']!r}) and the weights disagree: "
                                        + ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in differ.items()))
    return args


def model_args(doc: Mapping[str, Any], sd: Mapping[str, Any], where: Path) -> dict[str, Any]:
    """The ``pdet-mc`` config of a mixed-channel checkpoint (``pdet-sc``: :func:`separate_model_args`): sizes from
    its tensors, checked against its ``config.json`` (``type`` PDE-S/B/L fixes hidden size, heads and depth); window
    and boundary from config.json (pdetransformer's defaults: 8, periodic)."""
    if "num_timesteps" in doc:
        return separate_model_args(doc, sd, where)
    if doc.get("carrier_token_active"):
        raise opzoo.CheckpointError(f"{where}: carrier_token_active=true: carrier tokens are not implemented by "
                                    "opzoo-pdet (the published checkpoints were trained without them)")
    unknown = sorted(set(doc) - set(DIRECT) - set(EXTRA) - set(IGNORED))
    if unknown:
        raise opzoo.CheckpointError(f"{where}: config.json keys {', '.join(unknown)} are not known to opzoo's "
                                    "PDE-Transformer: refusing rather than ignoring them")
    args = sizes_of(sd, where)
    said = {k: doc[k] for k in (*DIRECT, *EXTRA) if k in doc}
    if doc.get("type") in SIZES:
        said |= {**SIZES[doc["type"]], "depth": list(DEPTH)}
    said.pop("periodic", None), said.pop("window_size", None), said.pop("class_dropout_prob", None)
    said.pop("max_hidden_size", None)
    differ = {k: (v, args[k]) for k, v in said.items() if k in args and v != args[k]}
    if differ:
        raise opzoo.CheckpointError(f"{where}: config.json (type {doc.get('type')!r}) and the weights disagree: "
                                    + ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in differ.items()))
    args["window_size"] = doc.get("window_size", 8)
    args["periodic"] = doc.get("periodic", True)
    for key in ("class_dropout_prob", "max_hidden_size"):
        if key in doc:
            args[key] = doc[key]
    return args


def convert_pde_transformer(path) -> opzoo.ConvertedCheckpoint:
    """Registered as converter ``pde-transformer``: a checkpoint directory (or its weights file) ->
    :class:`opzoo.ConvertedCheckpoint`. Tensor names lose pdetransformer's ``model.`` prefix for opzoo's ``net.``."""
    path = Path(path)
    config, weights = repo_files(path)
    doc = read_config(config)
    try:
        sd = load_file(str(weights))
    except (SafetensorError, OSError) as e:
        raise opzoo.CheckpointError(f"{weights}: not a readable safetensors file ({e})") from None
    args = model_args(doc, sd, config)
    foreign = sorted(k for k in sd if not k.startswith("model."))
    if foreign:
        raise opzoo.CheckpointError(f"{weights}: tensors outside PDETransformer.model: {', '.join(foreign[:5])}")
    architecture = architecture_of(doc)
    if architecture == "pdet-sc":
        sd = drop_position_tables(sd, args, weights)
    match = opzoo.get_registry().matching_preset(architecture, args)
    preset = match.name if match is not None else None
    cfg = pretrained_cfg(architecture, published=preset is not None)
    cfg["source"] = f"PDE-Transformer checkpoint {path} (converted by opzoo's 'pde-transformer' converter)"
    return opzoo.ConvertedCheckpoint(architecture=architecture, model_args=args,
                                     state_dict={"net." + k[len("model."):]: v for k, v in sd.items()},
                                     pretrained_cfg=cfg, preset=preset)


def drop_position_tables(sd: Mapping[str, Any], args: Mapping[str, Any], where: Path) -> dict[str, Any]:
    """The separate-channel checkpoint without the window position tables upstream saves as buffers, after checking
    that each equals the one opzoo computes (a checkpoint of another window or log scaling is refused)."""
    from .mixed_net import RelativePositionBias

    ours = RelativePositionBias(args["window_size"], args["num_heads"])
    for key in (k for k in sd if k.endswith(TABLES)):
        mine = ours.table.unsqueeze(0) if key.endswith("table") else ours.index
        if tuple(sd[key].shape) != tuple(mine.shape) or (sd[key].double() - mine.double()).abs().max() > 1e-6:
            raise opzoo.CheckpointError(f"{where}: {key} is not the position table of {args['window_size']}x"
                                        f"{args['window_size']} windows that opzoo computes")
    return {k: v for k, v in sd.items() if not k.endswith(TABLES)}
