"""The load check of a Poseidon checkpoint: its config.json and its tensors build the preset's network, or the load
is refused with the overrides that would load it."""

from __future__ import annotations

import torch

import opzoo

from .backbone import Poseidon
from .converter import model_args, read_config


def config_and_tensors_agree() -> opzoo.PretrainedCheck:
    def run(artifacts: opzoo.PretrainedArtifacts) -> str:
        c = artifacts.model_config
        config_path = artifacts.files.get("config.json") or next(iter(artifacts.files.values())).with_name("config.json")
        try:
            args = model_args(read_config(config_path), str(config_path))
        except opzoo.CheckpointError as e:
            raise opzoo.CheckFailed(str(e)) from None
        ours = {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in vars(c).items()}
        mismatched = {k: (v, ours.get(k)) for k, v in args.items() if ours.get(k) != v}
        if mismatched:
            detail = ", ".join(f"{k}: file {a!r}, model {b!r}" for k, (a, b) in mismatched.items())
            raise opzoo.CheckFailed(f"{config_path} describes another scOT network ({detail}); load it with "
                                    f"opzoo.load(..., {', '.join(f'{k}={a!r}' for k, (a, _) in mismatched.items())}) "
                                    "if that is what you want")
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in Poseidon(c).state_dict().items()}
        got = {k: tuple(v.shape) for k, v in artifacts.state_dict.items()}
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        wrong = [f"{k} {list(got[k])} (want {list(expected[k])})" for k in sorted(set(got) & set(expected))
                 if got[k] != expected[k]]
        if missing or extra or wrong:
            raise opzoo.CheckFailed("the tensors are not this network's: "
                                    + "; ".join(part for part in (
                                        f"missing {', '.join(missing[:4])}" if missing else "",
                                        f"unexpected {', '.join(extra[:4])}" if extra else "",
                                        f"shaped {', '.join(wrong[:4])}" if wrong else "") if part))
        return (f"config.json and the {len(got)} tensors build this network (embed {args['embed_dim']}, depths "
                f"{list(args['depths'])}, {args['in_channels']} -> {args['out_channels']} channels at "
                f"{args['image_size']}x{args['image_size']})")

    return opzoo.PretrainedCheck("config.json and the tensors agree with the preset", run)
