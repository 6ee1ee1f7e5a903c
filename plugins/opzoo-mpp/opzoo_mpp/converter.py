"""The ``mpp`` converter: an MPP checkpoint (the files of the Google Drive folder upstream's README links, or a
``train_basic.py`` checkpoint) -> opzoo ``mpp-avit`` weights; and upstream's own network, run beside opzoo's.

PolymathicAI/multiple_physics_pretraining ``train_basic.py`` @ e751fc2 saves ``torch.save({'iters', 'epoch',
'model_state', 'optimizer_state_dict'})`` (L165), under DDP with the ``module.`` prefix on every tensor name; its
``restore_checkpoint`` (L170-186) also takes a bare state dict, and strips the prefix when the model is not wrapped.
opzoo reads the file with ``torch.load(weights_only=True)`` (nothing in it runs), takes ``model_state`` (or the bare
state dict), strips ``module.``, and checks every name and shape against the network the tensors build. The sizes are
all in the tensors: the width from the stem's last convolution, the heads from the per-head LayerNorm's width, the
depth from the blocks, the number of state slots from the projection's columns. Which field each slot holds is not
in the file: a file of 12 slots holds MPP's (:data:`opzoo_mpp.backbone.STATE_NAMES`); another count needs
``state_names``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

import opzoo
from opzoo import kit

from .backbone import DEFAULT_FIELDS, STATE_NAMES

REPO = "PolymathicAI/multiple_physics_pretraining"
HEAD = "e751fc2"  # 2024-05 "Update README.md": the newest commit
TRAINED = "38eefb1"  # the submission commit: models/ and data_utils/ as the weights were trained (see family.py)


def at(path: str, commit: str = HEAD) -> str:
    return f"{REPO} {path} @ {commit}"


# what any MPP file's training is known to be (a published one's row adds its own: family.pretrained_cfg)
ANY_FILE_CFG = {"in_timesteps": 16, "finetune_lr": 1e-4,
                "finetune_lr_source": "opzoo's choice, not upstream's: upstream fine-tunes with DAdaptAdan, which sets "
                                      "its own step size (learning_rate: -1, " + at("config/mpp_avit_b_config.yaml")
                                      + " finetune); 1e-4 is of the order the other pretrained transformers here are "
                                      "fine-tuned with by their upstreams (MORPH 1e-4, Poseidon 5e-5)"}


def read_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """The state dict of an MPP file, without ``module.``; nothing is executed. Upstream's own ``save_checkpoint``
    keeps the optimizer's state, whose weight decay is a ruamel ``ScalarFloat`` (``YParams`` reads the config with
    ruamel): such objects are read as inert placeholders and left with the optimizer's state, which opzoo never uses;
    the model's state must be tensors."""
    payload = opzoo.safe_torch_load(path, placeholders=True)
    if isinstance(payload, Mapping) and "model_state" in payload:
        sd = kit.tensors_under(payload, "model_state", str(path), "MPP", "upstream's train_basic.py")
    elif isinstance(payload, Mapping) and payload and all(isinstance(v, torch.Tensor) for v in payload.values()):
        sd = payload  # a bare state dict, which upstream's restore_checkpoint also reads
    else:
        sd = kit.tensors_under(payload, "model_state", str(path), "MPP", "upstream's train_basic.py")
    return kit.strip_prefix(sd, "module.", str(path))


def to_opzoo_names(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """opzoo holds upstream's network under ``net.`` with upstream's own names."""
    return {f"net.{k}": v for k, v in sd.items()}


def _shape(sd: Mapping[str, torch.Tensor], key: str, ndim: int, where: str) -> tuple[int, ...]:
    return kit.tensor_shape(sd, key, where, "MPP", ndim)


def sizes_of(sd: Mapping[str, torch.Tensor], where: str) -> dict[str, Any]:
    """The network's sizes read from its tensors (opzoo names)."""
    dim = _shape(sd, "net.embed.in_proj.6.weight", 4, where)[0]
    quarter, n_states = _shape(sd, "net.space_bag.weight", 2, where)
    head_width = _shape(sd, "net.blocks.0.spatial.qnorm.weight", 1, where)[0]
    buckets, heads = _shape(sd, "net.blocks.0.spatial.rel_pos_bias.relative_attention_bias.weight", 2, where)
    depth = len({k.split(".")[2] for k in sd if k.startswith("net.blocks.")})
    if 0 in (dim, n_states, head_width, heads) or quarter * 4 != dim or head_width * heads != dim or buckets != 32:
        raise opzoo.CheckpointError(f"{where}: the tensor shapes do not form an MPP AViT (width {dim}, state projection "
                                    f"to {quarter}, {heads} heads of {head_width}, {buckets} position buckets)")
    return {"dim": dim, "heads": heads, "depth": depth, "n_states": n_states}


def model_args(sd: Mapping[str, torch.Tensor], where: str, state_names: Sequence[str] | None = None) -> dict[str, Any]:
    """The ``mpp-avit`` config of a state dict (opzoo names)."""
    sizes = sizes_of(sd, where)
    n = sizes.pop("n_states")
    if state_names is None:
        if n != len(STATE_NAMES):
            raise opzoo.CheckpointError(
                f"{where}: {n} state slots, not MPP's {len(STATE_NAMES)} (a file fine-tuned with more fields, "
                f"append_datasets): the file does not say which field each slot holds; name them with "
                f"state_names (opzoo convert mpp FILE OUT --option state_names=a,b,...)")
        state_names = STATE_NAMES
    state_names = tuple(state_names.split(",") if isinstance(state_names, str) else state_names)
    if len(state_names) != n:
        raise opzoo.CheckpointError(f"{where}: {len(state_names)} state_names for the file's {n} slots")
    if all(f in state_names for f in DEFAULT_FIELDS):
        return {**sizes, "state_names": state_names}
    return {**sizes, "state_names": state_names, "fields": state_names[:1], "in_channels": 1, "out_channels": 1}


def convert_mpp(path, state_names: Sequence[str] | str | None = None) -> opzoo.ConvertedCheckpoint:
    """Registered as converter ``mpp``: an MPP checkpoint -> :class:`opzoo.ConvertedCheckpoint`."""
    path = Path(path)
    sd = to_opzoo_names(read_checkpoint(path))
    args = model_args(sd, str(path), state_names)
    match = opzoo.get_registry().matching_preset("mpp-avit", args)
    cfg = dict(match.pretrained_cfg) if match is not None else dict(ANY_FILE_CFG)
    cfg["source"] = f"MPP checkpoint {path} (converted by opzoo's 'mpp' converter)"
    return opzoo.ConvertedCheckpoint(architecture="mpp-avit", model_args=args, state_dict=sd, pretrained_cfg=cfg,
                                     preset=match.name if match is not None else None)


def file_args(artifacts: opzoo.PretrainedArtifacts) -> dict[str, Any]:
    """The sizes the file's tensors build (the load check, :func:`opzoo.kit.file_args_agree`)."""
    sizes = sizes_of(artifacts.state_dict, artifacts.preset)
    n = sizes.pop("n_states")
    names = tuple(artifacts.model_config.state_names)
    return {**sizes, **({} if n == len(names) else {"state_names": names[:n] if n < len(names) else
                                                     names + tuple(f"slot.{i}" for i in range(len(names), n))})}


def upstream_state(model) -> dict[str, torch.Tensor]:
    """``model``'s weights in upstream's names (its ``AViT``'s state dict, no ``module.``)."""
    return {k[len("net."):]: v for k, v in model.state_dict().items()}


# ---- upstream's own network, run side by side with opzoo's by `opzoo benchmark` and the parity tests ----------------
# MPP is not on the package index: OPZOO_MPP_REPO names a checkout of the repository (e751fc2 is the tested commit).
# Its models/ need einops and timm (timm.layers.DropPath, timm >= 0.9).
REPO_ENV = "OPZOO_MPP_REPO"


def upstream_module(repo: str | os.PathLike | None = None):
    """upstream's ``models.avit`` from the checkout ``repo`` (default ``$OPZOO_MPP_REPO``), or UpstreamUnavailable
    saying what to set."""
    return kit.import_from_checkout(REPO_ENV, "models.avit", family="MPP", url=f"https://github.com/{REPO}",
                                    marker="models/avit.py", repo=repo, at=HEAD)


def upstream_network(model, repo=None) -> torch.nn.Module:
    """Upstream's ``AViT`` at ``model``'s sizes, built by its ``build_avit``, holding ``model``'s weights, in eval
    mode."""
    from types import SimpleNamespace

    c = model.config
    params = SimpleNamespace(patch_size=(16, 16), embed_dim=c.dim, num_heads=c.heads, processor_blocks=c.depth,
                             n_states=len(c.state_names), block_type="axial", time_type="attention",
                             space_type="axial_attention", bias_type="rel", gradient_checkpointing=False)
    net = upstream_module(repo).build_avit(params)
    net.load_state_dict(upstream_state(model), strict=True)
    return net.to(next(model.parameters()).dtype).eval()


class UpstreamCall(torch.nn.Module):
    """Upstream's ``AViT`` called as its trainer calls it: ``net(x [T, B, C, H, W], labels, bcs)``."""

    def __init__(self, net: torch.nn.Module, slots: list[int], periodic: bool):
        super().__init__()
        self.net, self.labels, self.bc = net, [slots], int(periodic)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x, self.labels, torch.full((x.shape[1], 2), self.bc))


def build_upstream_mpp(model, x) -> opzoo.Upstream:
    """Their ``AViT`` with the model's weights, on the model's input in their layout (``[T, B, C, H, W]``, the
    slots as labels, ``bcs`` per sample)."""
    call = UpstreamCall(upstream_network(model), model.slots.tolist(), model.config.periodic)
    return opzoo.Upstream(f"{REPO} AViT @ {HEAD} ({os.environ.get(REPO_ENV)})", call,
                          inputs=lambda t: model.to_upstream(t).detach().contiguous(),
                          outputs=lambda y: y.permute(0, 2, 3, 1).unsqueeze(-2))
