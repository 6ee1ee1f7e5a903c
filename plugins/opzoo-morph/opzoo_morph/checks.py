"""The load check of a MORPH checkpoint: its tensors build the preset's network, or the load is refused with the
overrides that would load it."""

from __future__ import annotations

import opzoo

from .converter import model_args


def tensors_agree() -> opzoo.PretrainedCheck:
    def run(artifacts: opzoo.PretrainedArtifacts) -> str:
        c = artifacts.model_config
        try:
            # the heads are not in the tensors: the file's are its width's in upstream's size table (never the
            # preset's: S's weights in Ti's 4 heads are another function), or the preset's for a width not in it
            try:
                args = model_args(artifacts.state_dict, artifacts.preset, heads_xa=c.heads_xa,
                                  time_positions=c.time_positions)
            except opzoo.CheckpointError:
                args = model_args(artifacts.state_dict, artifacts.preset, heads=c.heads, heads_xa=c.heads_xa,
                                  time_positions=c.time_positions)
        except opzoo.CheckpointError as e:
            raise opzoo.CheckFailed(str(e)) from None
        mismatched = {k: (v, getattr(c, k)) for k, v in args.items() if getattr(c, k) != v}
        if mismatched:
            detail = ", ".join(f"{k}: file {a!r}, model {b!r}" for k, (a, b) in mismatched.items())
            other = _preset_of(args)
            advice = (f"it is {other}'s network: load it as {other} (opzoo.load({other!r}, checkpoint_path=FILE))"
                      if other else "load it with opzoo.load(..., " + ", ".join(f"{k}={a!r}" for k, (a, _) in
                                                                                mismatched.items()) + ")")
            raise opzoo.CheckFailed(f"the file holds another MORPH network ({detail}); {advice} if that is what "
                                    "you want")
        return "the tensors build this network (" + ", ".join(f"{k}={args[k]}" for k in ("dim", "heads", "depth",
                                                                                          "mlp_dim", "max_ar",
                                                                                          "max_patches")) + ")"

    return opzoo.PretrainedCheck("the tensors agree with the preset", run)


def _preset_of(args: dict) -> str | None:
    """The morph-* preset whose sizes are ``args``, if one is."""
    registry = opzoo.get_registry()
    for variant in registry.family("morph").variants:
        preset = registry.preset(variant.name)
        if all(preset.args.get(k, v) == v for k, v in args.items()):
            return variant.name
    return None
