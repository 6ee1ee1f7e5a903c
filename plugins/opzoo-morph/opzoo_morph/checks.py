"""The load check of a MORPH checkpoint: its tensors build the preset's network, or the load is refused with the
overrides that would load it."""

from __future__ import annotations

import opzoo

from .converter import model_args


def tensors_agree() -> opzoo.PretrainedCheck:
    def run(artifacts: opzoo.PretrainedArtifacts) -> str:
        c = artifacts.model_config
        try:
            args = model_args(artifacts.state_dict, artifacts.preset, heads=c.heads, heads_xa=c.heads_xa,
                              time_positions=c.time_positions)
        except opzoo.CheckpointError as e:
            raise opzoo.CheckFailed(str(e)) from None
        mismatched = {k: (v, getattr(c, k)) for k, v in args.items() if getattr(c, k) != v}
        if mismatched:
            detail = ", ".join(f"{k}: file {a!r}, model {b!r}" for k, (a, b) in mismatched.items())
            raise opzoo.CheckFailed(f"the file holds another MORPH network ({detail}); load it with "
                                    f"opzoo.load(..., {', '.join(f'{k}={a!r}' for k, (a, _) in mismatched.items())}) "
                                    "if that is what you want")
        return "the tensors build this network (" + ", ".join(f"{k}={args[k]}" for k in ("dim", "depth", "mlp_dim",
                                                                                          "max_ar", "max_patches")) + ")"

    return opzoo.PretrainedCheck("the tensors agree with the preset", run)
