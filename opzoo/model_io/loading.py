"""A model by name: ``opzoo.load`` / ``create_model`` (one function: a preset, a backbone, a saved repo on disk or on the
Hub) and ``from_pretrained``, each name parsed once by :mod:`opzoo.model_io.reference`; a loaded model is in eval mode."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..config import CONFIG_NAME, read_config
from ..errors import ConfigError, HubError, WeightsError
from ..registry.provenance import snapshot_revision
from ..registry.registry import Preset, get_registry
from .adapt import SHAPE_FIELDS, adapt_model
from .builder import build_backbone, build_model, build_preset
from .hub import hub_download, hub_repo_files
from .pretrained import WEIGHTS_COMMIT, fetch_before_building, load_checkpoint_file, load_preset_weights, overlaid
from .reference import ModelReference, model_reference, parse_model_reference
from .repo_dir import WEIGHTS_NAME, check_repo_dir, open_repo, read_repo_retrying
from .weights import load_weights

if TYPE_CHECKING:
    import torch
    from torch import nn


def create_model(name: "str | ModelReference", pretrained: bool = False, **args: Any) -> "nn.Module":
    """timm's name for :func:`load` (the same grammar, the same model): a preset, ``hf-hub:``/``local-dir:``
    reference or saved directory (``args`` are config overrides), or a registered *backbone* name built from config
    fields ``args`` with random weights, e.g. ``create_model("pot", width=64, ...)``."""
    return load(name, pretrained=pretrained, **args)


def from_pretrained(
    repo_or_dir: "str | os.PathLike | ModelReference", revision: str | None = None, *,
    device: "str | torch.device | None" = None, **overrides: Any,
) -> "nn.Module":
    """Load a saved opzoo repo from a local directory or the Hub (``revision``: branch, tag or commit), in eval mode.

    The grammar is :func:`load`'s (``hf-hub:org/name[@rev]``, ``local-dir:PATH``, a directory, a preset), with one
    documented difference, huggingface_hub's convention: a bare ``org/name`` that is neither a preset nor a directory
    is a Hub repo (``load`` asks for ``hf-hub:`` there). A preset name loads its published weights, as
    ``load(name, pretrained=True)``. ``overrides`` replace config fields (the weights must still fit). Extra keyword
    arguments of ``hf_hub_download`` (``cache_dir``, ``token``, ``force_download``) may be given as overrides named
    ``hub_<arg>``.
    """
    ref = repo_or_dir if isinstance(repo_or_dir, ModelReference) else parse_model_reference(
        repo_or_dir, backbones=False, bare_repo_ids=True)
    if ref.kind == "preset":
        if revision is not None:
            raise ConfigError(f"from_pretrained({ref.given!r}, revision={revision!r}): revision applies to Hub repos; "
                              f"for a preset's weights pass pretrained_cfg_overlay={{'revision': ...}} to opzoo.load")
        model = load(ref, pretrained=True, **overrides)
        return model.to(device) if device is not None else model
    if ref.kind == "hub":
        if revision is not None and ref.revision is not None and revision != ref.revision:
            raise ConfigError(f"{ref.given!r} names revision {ref.revision!r} and revision={revision!r} another; "
                              "give one")
        hub_kwargs = {k[4:]: overrides.pop(k) for k in list(overrides) if k.startswith("hub_")}
        config_path, weights_path = hub_repo_files(ref.repo_id, revision or ref.revision, **hub_kwargs)
    else:
        check_repo_dir(ref.path)
        config_path, weights_path = ref.path / CONFIG_NAME, ref.path / WEIGHTS_NAME
    return from_repo_files(config_path, weights_path, device, overrides)


def from_repo_files(config_path: Path, weights_path: Path, device, overrides: Mapping[str, Any]) -> "nn.Module":
    def read() -> "nn.Module":  # one consistent read: the config and the weights of the same save
        with open_repo(config_path, weights_path) as repo:
            pretrained_cfg = repo.document["pretrained_cfg"]
            built = build_model(repo.document["architecture"], repo.document["model_args"],
                                f"{config_path}: model_args", overrides, pretrained_cfg, pretrained_cfg.get("preset"),
                                pretrained_cfg_source=f"{config_path}: pretrained_cfg", weights_follow=True)
            load_weights(built, repo.weights, shown_as=weights_path, verify=repo.verify)
            commit = snapshot_revision(weights_path)
            if commit is not None:  # a repo read from the Hub cache: the commit its revision named then
                built.pretrained_cfg = {**built.pretrained_cfg, WEIGHTS_COMMIT: commit}
            return built

    model = read_repo_retrying(read)
    if device is not None:
        model.to(device)
    return model.eval()


def load(name: "str | os.PathLike | ModelReference", pretrained: bool = False, **overrides: Any) -> "nn.Module":
    """A model by preset name, ``hf-hub:org/repo[@rev]``, ``local-dir:PATH``, existing directory, or registered
    backbone name (random weights from config fields ``overrides``; :func:`create_model` is the same function).

    ``pretrained=True`` loads a preset's published weights (converted on load when they are in a
    foreign format, after the preset's load checks pass on them) and returns the model in eval mode,
    as :func:`from_pretrained` and a saved model do: ``y = model(x)`` is inference at once (BatchNorm
    uses its running statistics, dropout is off). Training code calls ``model.train()`` itself, as in
    PyTorch (opzoo's trainer does at every step). A preset built with random weights
    (``pretrained=False``) stays in training mode, like any new ``nn.Module`` and timm's ``create_model``.
    ``overrides`` replace config fields, e.g. ``load("fno-2d", modes=24)``. With
    ``pretrained=True`` the shape fields ``in_channels``, ``out_channels``, ``in_timesteps`` and
    ``img_size`` adapt the weights instead (:func:`adapt_loaded`), as timm's ``in_chans`` does.

    timm's two load arguments, with timm's meaning, for presets:

    - ``pretrained_cfg_overlay={...}``: replaces fields of where the preset's weights come from (its
      ``PretrainedSource``: ``repo_id``, ``revision``, ``filename``, ``directory``, ``converter``,
      ``converter_options``; ``file`` is timm's name for a local weights file, ``checkpoint_path``) and of its
      ``pretrained_cfg`` (``resolution``, ``datasets``, ...) for this load; the load checks still run.
    - ``checkpoint_path=FILE``: the preset's weights from a local file instead of its published ones (with
      ``pretrained=True`` or without: the published ones are never fetched): a ``.safetensors`` file in opzoo's
      names (e.g. from ``save_pretrained``), or a file in the preset's published format (converted by its converter,
      after its load checks), adapted to the shape fields given as a pretrained load is. Returned in eval mode.
    """
    overlay = overrides.pop("pretrained_cfg_overlay", None)
    checkpoint_path = overrides.pop("checkpoint_path", None)
    ref = model_reference(name)
    if ref.kind == "backbone" and overlay is None and checkpoint_path is None:
        return build_backbone(ref, pretrained, overrides)
    if (overlay is not None or checkpoint_path is not None) and ref.kind != "preset":
        raise ConfigError(f"{name}: pretrained_cfg_overlay= and checkpoint_path= apply to presets; a saved model "
                          f"brings its own weights and pretrained_cfg")
    if ref.kind == "hub":  # always the Hub, never a local directory of the same name
        hub_kwargs = {k[4:]: overrides.pop(k) for k in list(overrides) if k.startswith("hub_")}
        config_path, weights_path = hub_repo_files(ref.repo_id, ref.revision, **hub_kwargs)
        return from_repo_files(config_path, weights_path, overrides.pop("device", None), overrides)
    if ref.kind == "dir":
        return from_pretrained(ref, **overrides)
    preset = get_registry().preset(ref.preset)
    if overlay is not None:
        preset, file = overlaid(preset, overlay)
        if file is not None:
            if checkpoint_path is not None:
                raise ConfigError(f"{preset.name}: pretrained_cfg_overlay['file'] and checkpoint_path= both name a "
                                  "weights file; give one")
            checkpoint_path = file
    if checkpoint_path is None and not pretrained:
        return build_preset(preset, overrides)
    shape = {k: overrides.pop(k) for k in SHAPE_FIELDS if k in overrides}
    if "in_channels" in shape:  # labels per channel name the adapted channels: applied with them
        labels = getattr(get_registry().get("backbone", preset.backbone).config_class, "per_channel_fields", ())
        shape |= {k: overrides.pop(k) for k in labels if k in overrides}
    if checkpoint_path is not None:  # the weights come from the file, pretrained=True or not: the published never load
        model = build_preset(preset, overrides, weights_follow=True)
        load_checkpoint_file(model, preset, Path(checkpoint_path))
        return adapt_loaded(model, preset.name, shape).eval()
    fetch_before_building(preset)
    model = build_preset(preset, overrides, weights_follow=True)
    try:
        load_preset_weights(model, preset)
    except WeightsError as e:
        from .weights import TensorMismatchError

        if not overrides or not isinstance(e, TensorMismatchError):  # overrides can only make tensors not fit
            raise
        raise WeightsError(f"the overrides {sorted(overrides)} change tensors the published weights of {preset.name} fix. "
                           f"With pretrained=True only {', '.join(SHAPE_FIELDS)} adapt the weights at load time; "
                           f"drop the other overrides, or load with pretrained=False. Details: {e}") from None
    return adapt_loaded(model, preset.name, shape).eval()


def adapt_loaded(model: "nn.Module", name: str, shape: Mapping[str, Any]) -> "nn.Module":
    """``model`` with its published weights brought to the shape fields ``shape`` (``in_channels``,
    ``out_channels``, ``in_timesteps``, ``img_size``) by :func:`opzoo.model_io.adapt.adapt_model`, as timm does for
    ``in_chans``: copy what matches, interpolate positional embeddings, initialize the rest.

    ``in_channels`` alone changes ``out_channels`` too when the model maps C -> C (an auto-regressive
    operator predicts the channels it reads)."""
    if not shape:
        return model
    c = model.config
    shape = dict(shape)
    if "in_channels" in shape and "out_channels" not in shape and c.in_channels == c.out_channels:
        shape["out_channels"] = shape["in_channels"]
    try:
        adapted = adapt_model(model, **shape)
    except ConfigError as e:
        raise ConfigError(f"{name}: the published weights cannot be adapted to {shape}: {e}. What adapts at load "
                          f"time: {', '.join(SHAPE_FIELDS)} (with io_layout); other fields must match the weights, "
                          f"or load with pretrained=False") from None
    contract = get_registry().contract(get_registry().backbone_name(type(model)), getattr(model, "preset_name", None))
    statistics = contract.normalization.config or () if contract is not None else ()
    dropped = [k for k in statistics if getattr(c, k, None) is not None and getattr(adapted.config, k, None) is None
               and k not in shape]
    if dropped:  # the statistics of the pretrained channels name no channel of the adapted model
        import warnings

        warnings.warn(f"{name} adapted to {adapted.config.in_channels} channel(s): its {', '.join(dropped)} were "
                      f"those of its {c.in_channels} pretrained fields and are dropped, so it now takes the fields as "
                      f"given, not normalized. Pass your data's own ({', '.join(f'{k}=[...]' for k in dropped)}, one "
                      f"per channel) to load(), or fine-tune with opzoo finetune, which computes them from the "
                      f"training split", UserWarning, stacklevel=3)
    return adapted


def saved_pretrained_cfg(name: "str | ModelReference") -> dict:
    """The ``pretrained_cfg`` in a saved model's ``config.json`` (only that file is read or fetched)."""
    ref = model_reference(name, backbones=False)
    if ref.kind == "hub":
        return read_config(hub_download(ref.repo_id, CONFIG_NAME, ref.revision))["pretrained_cfg"]
    if ref.kind != "dir":
        raise HubError(f"{name} is a preset, not a saved model")
    return read_config(ref.path / CONFIG_NAME)["pretrained_cfg"]


def preset_named(name: "str | ModelReference") -> Preset:
    """The registered preset ``name`` (:func:`opzoo.model_io.reference.parse_model_reference`'s errors otherwise)."""
    ref = model_reference(name, backbones=False)
    if ref.kind != "preset":
        raise HubError(f"{name} is a saved model, not a preset")
    return get_registry().preset(ref.preset)


__all__ = ["load", "create_model", "from_pretrained", "from_repo_files", "adapt_loaded", "saved_pretrained_cfg", "preset_named"]
