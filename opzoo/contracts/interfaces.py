"""The interfaces opzoo's components implement (docs/architecture.md, Components), seven in all: here Mixer, FeedForward,
Residual, StreamAdapter (a Residual's per-network adapter), Block and Backbone; Router (with the
Routing it returns) lives in :mod:`opzoo.contracts.routing`, next to the code that reads routers.

Tensors are channels-last; ``S`` stands for the 1, 2 or 3 spatial dims.
"""

from __future__ import annotations

import abc
import re
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from .channels import PAD
from .hub_io import hub_io
from .routing import weighted_aux_loss

if TYPE_CHECKING:
    from ..config import ModelConfig
    from .io_layout import DimMap

__all__ = ["Mixer", "FeedForward", "Residual", "StreamAdapter", "IdentityStreams", "Block", "Backbone"]


class Mixer(nn.Module, metaclass=abc.ABCMeta):
    """Spatial token mixing at fixed width.

    ``forward(x: [B, *S, D]) -> [B, *S, D]``; must accept any spatial size where the math allows.
    Constructed as ``MixerClass(dim, **mixer_args)``.
    """

    @abc.abstractmethod
    def forward(self, x: Tensor) -> Tensor: ...


class FeedForward(nn.Module, metaclass=abc.ABCMeta):
    """The per-token feed-forward sub-layer of a block (an MLP, a sparse mixture of experts...).

    ``forward(x: [B, *S, D]) -> [B, *S, D]``. Constructed as
    ``FeedForwardClass(dim, hidden_dim=int(dim * mlp_ratio), act=act, **feedforward_args)`` where
    ``act`` names an activation of ``opzoo.layers.norm_act.ACTIVATIONS``. A feed-forward that routes keeps
    its :class:`opzoo.Router` modules as submodules, so the backbone's ``aux_loss()`` finds them.
    """

    @abc.abstractmethod
    def forward(self, x: Tensor) -> Tensor: ...


class StreamAdapter(nn.Module, metaclass=abc.ABCMeta):
    """Turns a latent into a residual state before the first block and back after the last.

    ``expand(x: [B, *S, D]) -> state``; ``collapse(state) -> [B, *S, D]``. The state is whatever
    the adapter and its residual agree on (the latent itself for the plain residual, a multi-stream
    object for hyper-connections); backbones only pass it from block to block. A state that is not
    a tensor should be a registered pytree (``torch.export.register_dataclass``) so that FSDP and
    ``torch.compile`` find the tensors inside it.
    """

    @abc.abstractmethod
    def expand(self, x: Tensor) -> Any: ...

    @abc.abstractmethod
    def collapse(self, state: Any) -> Tensor: ...

    def forward(self, x: Tensor) -> Tensor:
        return self.expand(x)


class IdentityStreams(StreamAdapter):
    """The stream adapter of residuals whose state is the latent itself."""

    def expand(self, x: Tensor) -> Tensor:
        return x

    def collapse(self, state: Tensor) -> Tensor:
        return state


class Residual(nn.Module, metaclass=abc.ABCMeta):
    """How one sub-layer joins the residual path: ``forward(state, branch) -> state``.

    ``branch`` maps ``[B, *S, D] -> [B, *S, D]``. Constructed per sub-layer as
    ``ResidualClass(dim, index=k, **residual_args)`` where ``k`` counts sub-layers from 0 across
    the network; the per-network adapter comes from ``ResidualClass.stream_adapter(dim, **residual_args)``.
    """

    @abc.abstractmethod
    def forward(self, state: Any, branch: Callable[[Tensor], Tensor]) -> Any: ...

    @classmethod
    def stream_adapter(cls, dim: int, **residual_args) -> StreamAdapter:
        return IdentityStreams()


class Block(nn.Module, metaclass=abc.ABCMeta):
    """One block of a layered backbone (the POT backbone): ``forward(state) -> state``.

    ``state`` is the residual state of the backbone's Residual (the latent ``[B, *S, D]`` for the
    plain residual); a block joins each of its sub-layers to it with a Residual, so any block works
    with any Residual. Constructed as ``BlockClass(parts, index=i, **block_args)`` for block ``i``,
    where ``parts`` is the backbone's builder (for the POT backbone a :class:`opzoo.PotParts`: the
    config's fields read through it, and ``make_mixer()``, ``make_feedforward()``, ``make_norm()`` and
    ``make_residual(k)`` build the components the config names). A block with ``sublayers = m`` residual sub-layers gives them the
    residual indices ``m*i, ..., m*i + m - 1``, so indices count sub-layers across the network.
    """

    sublayers: int = 1

    @abc.abstractmethod
    def forward(self, state: Any) -> Any: ...


def _counting_batch_norm_once(fn: Callable, model: nn.Module) -> Callable:
    """``fn`` for ``torch.utils.checkpoint``: its second call is backward's recompute, after which every batch norm of
    ``model`` gets back the running statistics it had before it (a recompute must not count a batch twice). The
    recomputed output is the same either way: in training a batch norm normalizes by the batch's own statistics."""
    calls = [0]
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not norms:
        return fn

    def run(*args):
        calls[0] += 1
        if calls[0] == 1:
            return fn(*args)
        kept = [(m, {k: getattr(m, k).clone() for k in ("running_mean", "running_var", "num_batches_tracked")
                     if getattr(m, k, None) is not None}) for m in norms]
        try:
            return fn(*args)
        finally:  # also when the recompute is stopped early (torch's checkpoint raises inside it once it has enough)
            with torch.no_grad():
                for m, stats in kept:
                    for k, v in stats.items():
                        getattr(m, k).copy_(v)

    return run


def _pointwise_conv3d(module: nn.Module) -> bool:
    # peft 0.21.2 merges a Conv3d of kernel (1, 1, k) as a 2-D 1x1 convolution and fails
    # (peft/tuners/lora/layer.py, _ConvNd.get_delta_weight); such a layer is not a LoRA target
    return isinstance(module, nn.Conv3d) and tuple(module.kernel_size[:2]) == (1, 1)


class Backbone(nn.Module, metaclass=abc.ABCMeta):
    """A whole operator: ``forward(x: [B, *S, T_in, C_in]) -> [B, *S, T_out, C_out]``.

    Subclasses set ``config_class`` (a ModelConfig dataclass) and take their config as the only
    constructor argument. ``save_pretrained``, ``from_pretrained`` and ``push_to_hub`` call the
    functions of the same names in :mod:`opzoo.model_io.saving` and :mod:`opzoo.model_io.loading`; a backbone that can be adapted to data of
    another shape (:func:`opzoo.training.adapt_model`) overrides :meth:`io_layout`.
    """

    config_class: type["ModelConfig"]

    def __init__(self, config: "ModelConfig"):
        super().__init__()
        self.config = config
        self.pretrained_cfg: dict = {}
        self.preset_name: str | None = None

    # ---- hub I/O (docs/architecture.md, Where a pretrained load goes) ----
    def save_pretrained(self, save_directory, card: str | None = None, results=()):
        """Write ``config.json``, ``model.safetensors`` and ``README.md`` into a directory (``card``: the card template,
        default the preset's; ``results``: :class:`opzoo.Result` numbers for its ``model-index``)."""
        return hub_io("save_pretrained")(self, save_directory, card=card, results=results)

    def push_to_hub(self, repo_id: str, **kwargs):
        """Upload this model to the Hugging Face Hub (see :func:`opzoo.model_io.saving.push_to_hub`)."""
        return hub_io("push_to_hub")(self, repo_id, **kwargs)

    @classmethod
    def from_pretrained(cls, repo_or_dir, revision: str | None = None, **overrides):
        """Load an opzoo repo (local dir or Hub id); it must hold this class's architecture."""
        from ..errors import ConfigError

        model = hub_io("from_pretrained")(repo_or_dir, revision=revision, **overrides)
        if not isinstance(model, cls):
            raise ConfigError(f"{repo_or_dir} holds a {type(model).__name__}, not a {cls.__name__}")
        return model

    @abc.abstractmethod
    def forward(self, x: Tensor) -> Tensor: ...

    # ---- features, head and gradient checkpointing (timm's model API) ----
    grad_checkpointing: bool = False
    supports_grad_checkpointing: bool = False  # a backbone that runs its blocks through checkpointed() sets it

    def forward_features(self, x: Tensor) -> Tensor:
        """The latent before the head (each backbone documents its shape); ``forward_head(forward_features(x),
        x) == forward(x)``."""
        raise NotImplementedError(f"{type(self).__name__} does not split into features and a head")

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``features -> [B, *S, T_out, C_out]``. ``x``, the input ``features`` came from, is needed by a backbone
        whose output is relative to its input (per-sample standardization, a predicted difference to the last
        frame); such a backbone refuses ``x=None``."""
        raise NotImplementedError(f"{type(self).__name__} does not split into features and a head")

    def forward_intermediates(self, x: Tensor, indices: int | Sequence[int] | None = None,
                              intermediates_only: bool = False):
        """The latents after the blocks ``indices`` (an int ``n``: the last ``n``; a sequence: those block
        indices, negative ones from the end; None: every block), in block order. Returns
        ``(forward_features(x), [latent, ...])``, or the list alone with ``intermediates_only``."""
        raise NotImplementedError(f"{type(self).__name__} does not expose per-block latents")

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them: less memory, the
        same loss and gradients, about one more forward of time. A backbone that cannot raises ConfigError."""
        if enable and not self.supports_grad_checkpointing:
            from ..errors import ConfigError

            raise ConfigError(f"{type(self).__name__} does not implement gradient checkpointing (its blocks do not run "
                              "through Backbone.checkpointed); train it without training.grad_checkpointing")
        self.grad_checkpointing = bool(enable)

    def checkpointed(self, fn: Callable, *args: Any) -> Any:
        """``fn(*args)``; with gradient checkpointing on and gradients recorded, its activations are recomputed
        in backward (``torch.utils.checkpoint``, non-reentrant, the RNG state replayed)."""
        if self.grad_checkpointing and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(_counting_batch_norm_once(fn, self), *args, use_reentrant=False)
        return fn(*args)

    # ---- what a parameter-efficient fine-tune trains (training.tune: head, lora) ----
    lora_layer_types: tuple[type, ...] = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.MultiheadAttention)

    def lora_targets(self) -> list[str]:
        """The modules ``training.tune: lora`` adapts with low-rank adapters (peft's ``target_modules``): every linear
        layer, convolution and ``nn.MultiheadAttention`` inside a block (:meth:`group_matcher`'s ``blocks``): the
        attention's and the MLP's projections, and the blocks' convolutions. Not targets: a router's gate (routing
        stays as pretrained), a grouped or depthwise convolution and a pointwise 3-D one (peft cannot merge their
        adapters), the projections
        inside an ``nn.MultiheadAttention`` (which reads their weights without calling them: the attention itself is
        the target), and spectral weights (:class:`opzoo.contracts.spectral.SpectralLayer`: peft adapts real linear
        layers; they stay frozen, docs/training.md, "What a fine-tune trains"). A family whose blocks hold other
        layers worth adapting overrides it."""
        from .routing import Router

        skip = [name + "." for name, module in self.named_modules()
                if isinstance(module, (Router, nn.MultiheadAttention))]
        return [name for name, module in self.named_modules() if isinstance(module, self.lora_layer_types)
                and self._block_of(name + ".") is not None and not any(name.startswith(r) for r in skip)
                and getattr(module, "groups", 1) == 1 and not _pointwise_conv3d(module)]

    def head_parameters(self) -> set[str]:
        """The parameters ``training.tune: head`` trains, the rest frozen: the stem and the head of
        :meth:`group_matcher` (the input and output projections, the position table, the time aggregation) and every
        norm's scale and shift (a module whose class name ends in ``Norm``, ``Norm1d``/``2d``/``3d``)."""
        matcher = self.group_matcher()
        names = {n for n, _ in self.named_parameters()
                 if re.match(matcher["stem"], n) or self._block_of(n) is None}
        for prefix, module in self.named_modules():
            if re.search(r"Norm(\dd)?$", type(module).__name__):
                names |= {f"{prefix}.{n}" if prefix else n for n, _ in module.named_parameters(recurse=False)}
        return names

    # ---- fine-tuning: what must not decay, which layer a parameter is in (timm's habits) ----
    no_weight_decay_keys: tuple[str, ...] = ()  # parameter names that must not decay besides 1-d ones, e.g. pos_embed

    def no_weight_decay(self) -> set[str]:
        """Names of the parameters weight decay must leave alone: biases, norms' scales, gates and every other
        parameter of at most one dimension, and the backbone's ``no_weight_decay_keys`` (position embeddings)."""
        return {n for n, p in self.named_parameters() if p.ndim <= 1 or n in self.no_weight_decay_keys}

    def group_matcher(self) -> dict[str, Any]:
        """timm's grouping of parameters by depth: ``{"stem": regex, "blocks": regex with one group, the block
        index | [(regex, index), ...]}``; a parameter matching neither belongs to the head. ``layer_id``
        reads it: the stem is layer 0, block ``i`` is layer ``i + 1``, the head ``num_layers - 1``."""
        return {"stem": r"^$", "blocks": r"^$"}

    def _block_of(self, name: str) -> int | None:
        blocks = self.group_matcher()["blocks"]
        for pattern, index in ([(blocks, None)] if isinstance(blocks, str) else blocks):
            m = re.match(pattern, name)
            if m:
                return int(m.group(1)) if index is None else int(index)
        return None

    def num_layers(self) -> int:
        """The layer ids :meth:`layer_id` gives: the stem, one per block, the head."""
        found = [b for b in (self._block_of(n) for n, _ in self.named_parameters()) if b is not None]
        return (max(found) + 1 if found else 0) + 2

    def layer_id(self, name: str) -> int:
        """The depth of parameter ``name`` for layer-wise lr decay (see :meth:`group_matcher`)."""
        if re.match(self.group_matcher()["stem"], name):
            return 0
        block = self._block_of(name)
        return self.num_layers() - 1 if block is None else block + 1

    @staticmethod
    def block_indices(indices: int | Sequence[int] | None, n_blocks: int) -> list[int]:
        """``indices`` of :meth:`forward_intermediates` as sorted block indices in ``[0, n_blocks)``."""
        from ..errors import ConfigError

        if indices is None:
            return list(range(n_blocks))
        if isinstance(indices, int):
            if not 0 < indices <= n_blocks:
                raise ConfigError(f"indices={indices}: the last n of {n_blocks} blocks needs 1 <= n <= {n_blocks}")
            return list(range(n_blocks - indices, n_blocks))
        out = sorted({i % n_blocks if -n_blocks <= i < n_blocks else n_blocks for i in indices})
        if out and out[-1] >= n_blocks:
            raise ConfigError(f"indices={list(indices)}: block indices lie in [-{n_blocks}, {n_blocks})")
        return out

    @classmethod
    def io_layout(cls, old: "ModelConfig", new: "ModelConfig") -> Mapping[str, Sequence["DimMap"] | str] | None:
        """How this backbone's data-shaped tensors map from config ``old`` to ``new`` (which differ in
        ``in_channels``, ``out_channels``, ``in_timesteps`` or ``img_size``): ``{tensor name:
        [DimMap, ...] or "resize"}`` (see :mod:`opzoo.contracts.io_layout`). A tensor not named keeps its
        weights when its shape did not change. None (the default): the backbone cannot be adapted."""
        return None

    # ---- data of another shape: the grid a file runs at, the channels it lacks ----
    channel_pad_value: float = 1.0  # what fills a channel the data lacks (DPOT's ones); it is left out of the loss
    takes_any_channel_count: bool = False  # True: a file's own channel count is used, never padded
    # a model that names its fields (pretrained_cfg["fields"]) and was trained with a field a dataset lacked filled
    # with a value (GPhyT's zeros): a file without that field reads it as this value (and says so); None: refused
    missing_field_value: float | None = None
    # why this backbone's exported graph (opzoo export --format onnx|pt2, docs/export.md) takes only the grid it was
    # traced at, when its code is known to fix the grid under torch.export; None: the exporter tries a dynamic grid
    fixed_export_grid: str | None = None

    def grid_for(self, data_grid: Sequence[int]) -> tuple[tuple[int, ...] | None, str]:
        """``(grid, why)``: the grid this model runs data of ``data_grid`` at when the user names none. ``None``
        (the default): its pretrained grid (``pretrained_cfg["resolution"]``), since its weights are tied to one
        (a positional embedding). A backbone that runs at any grid returns the data's own, or the nearest one it
        can take, and says why."""
        return None, ""

    def check_window(self, x: Tensor) -> None:
        """Refuse, with a :class:`opzoo.ConfigError` that says what to do, input windows ``x [B, *S, T_in, C]`` that
        this model's forward would refuse for their values (MORPH's RevIN: a field uniform over the window); the
        default takes any. The fit calls it on each file's first windows, so that ``opzoo fit`` refuses, in the same
        words, what ``eval`` or ``finetune`` would refuse once running."""

    def random_inference(self) -> str:
        """What this model draws at random when it predicts in eval mode, in a line the fit block says (``""``, the
        default: nothing; Walrus's jitter, as its upstream runs it at inference)."""
        return ""

    @property
    def in_timesteps(self) -> int:
        return self.config.in_timesteps

    def mask_padded_channels(self, out: Tensor, channel_mask: Tensor) -> Tensor:
        """A prediction ``out [B, *S, T_out, C]`` given data whose channels ``~channel_mask`` are padding: the
        default keeps it as predicted; a backbone whose training zeroed padded outputs does so here."""
        return out

    def feedback(self, out: Tensor, **inputs: Any) -> Tensor:
        """What of a prediction ``[B, *S, T_out, C]`` a rollout feeds back as the next input (default: all of it);
        ``inputs`` are the rollout's keyword inputs (e.g. per-sample labels)."""
        return out

    def rollout(self, x: Tensor, steps: int, channel_mask: Tensor | None = None, **inputs: Any) -> Tensor:
        """Autoregressive prediction: ``x [B, *S, T_in, C] -> [B, *S, steps, C_out]``.

        Each forward's ``T_out`` frames are appended to the window, which slides forward.
        Requires ``C_out == C_in``. ``channel_mask [C]`` (bool, False for channels that hold no data: padding, or a
        field the file lacks read as a fill value) lets a backbone treat them as it was trained to
        (:meth:`mask_padded_channels`), and such channels are refilled in every frame fed back with what the input
        window holds there (their fill value), as every training window held it (docs/data-contract.md, the one
        rollout rule); without one, the channels the model's record names ``<pad>`` (``pretrained_cfg["fields"]``,
        as a fine-tune on fewer fields saves it) are those; ``inputs`` are passed to every forward (a backbone's
        keyword inputs, e.g. per-sample labels).
        """
        if steps < 1:
            raise ValueError(f"rollout needs steps >= 1, got {steps}")
        if channel_mask is None:  # the channels its record names padding (a fine-tune's <pad>) are padding here too
            fields = (getattr(self, "pretrained_cfg", None) or {}).get("fields") or []
            if PAD in fields and len(fields) == x.shape[-1]:
                channel_mask = torch.tensor([f != PAD for f in fields], device=x.device)
        window, preds, made = x, [], 0
        masked = channel_mask is not None and not bool(channel_mask.all())
        while made < steps:
            out = self(window, **inputs)
            if masked:
                out = self.mask_padded_channels(out, channel_mask)
            preds.append(out)
            made += out.shape[-2]
            fed = self.feedback(out, **inputs)
            if masked:  # the fill values, not the model's prediction of them
                fed = torch.where(channel_mask.to(fed.device), fed, window[..., -1:, :].expand_as(fed))
            window = torch.cat([window, fed], dim=-2)[..., -x.shape[-2]:, :]
        return torch.cat(preds, dim=-2)[..., :steps, :]

    def aux_loss(self) -> Tensor:
        """The routers' loss term of the last forward, ``sum_g w_g * mean_{r in g} L_r`` over the
        routers' ``aux_group`` s (0 when no router ran); see :func:`opzoo.contracts.routing.weighted_aux_loss`."""
        total = weighted_aux_loss(self)
        return torch.zeros((), device=self._any_device()) if total is None else total

    def _any_device(self) -> torch.device:
        for p in self.parameters():
            return p.device
        return torch.device("cpu")
