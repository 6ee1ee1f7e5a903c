"""The load check of a GPhyT checkpoint: its recorded config and its tensors build the preset's network, or the load
is refused with the overrides that would load it."""

from __future__ import annotations

import opzoo

from .converter import model_args, read_checkpoint, recorded_normalization, to_opzoo_names


def config_agrees() -> opzoo.PretrainedCheck:
    def run(artifacts: opzoo.PretrainedArtifacts) -> str:
        c = artifacts.model_config
        path = next(iter(artifacts.files.values()))
        try:
            raw, config = read_checkpoint(path)
            # the heads and the integrator as the file records them (or its size's row), never the preset's: a file
            # recorded with RK4 is another function than the Euler preset, whatever the tensors say
            args = model_args(to_opzoo_names(raw, path), config, str(path))
        except opzoo.CheckpointError as e:
            if "pass num_heads" not in str(e):
                raise opzoo.CheckFailed(str(e)) from None
            args = model_args(to_opzoo_names(raw, path), config, str(path), num_heads=c.num_heads)
        recorded = recorded_normalization(config)
        if recorded is not None:
            args["normalization"] = recorded if c.normalization != "none" else "none"
        mismatched = {k: (v, getattr(c, k)) for k, v in args.items()
                      if (tuple(getattr(c, k)) if isinstance(v, tuple) else getattr(c, k)) != v}
        if mismatched:
            detail = ", ".join(f"{k}: file {a!r}, model {b!r}" for k, (a, b) in mismatched.items())
            raise opzoo.CheckFailed(f"{path} holds another GPhyT network ({detail}); load it with opzoo.load(..., "
                                    + ", ".join(f"{k}={list(a) if isinstance(a, tuple) else a!r}"
                                                for k, (a, _) in mismatched.items()) + ") if that is what you want")
        said = "its recorded config and " if config is not None else ""
        return (f"{said}the tensors build this network (hidden {args['hidden_dim']}, {args['num_heads']} heads, "
                f"{args['num_layers']} blocks, derivatives {args['use_derivatives']}, integrator {args['integrator']}"
                f", {args['in_timesteps']} frames at {args['img_size'][0]}x{args['img_size'][1]}"
                + (f", normalization {args['normalization']}" if "normalization" in args else "") + ")")

    return opzoo.PretrainedCheck("the recorded config and tensors agree with the preset", run)
