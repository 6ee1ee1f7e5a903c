"""The load check of a PDE-Transformer checkpoint: the subfolder's ``config.json`` (and the tensors) build the network
the preset builds, or the load is refused with the preset to use instead."""

from __future__ import annotations

import opzoo

from .converter import CONFIG_FILE, TABLES, WEIGHTS_FILE, architecture_of, model_args, read_config

NETWORK = {"pdet-mc": "mixed-channel", "pdet-sc": "separate-channel"}


def config_agrees(subfolder: str, architecture: str = "pdet-mc"):
    """The load check: the subfolder's config.json builds the preset's network (of ``architecture``)."""

    def run(artifacts: opzoo.PretrainedArtifacts) -> str:
        path = artifacts.files.get(f"{subfolder}/{CONFIG_FILE}")
        if path is None:
            raise opzoo.CheckFailed(f"{subfolder}/{CONFIG_FILE} was not fetched")
        doc = read_config(path)
        theirs = architecture_of(doc)
        if theirs != architecture:
            rows = opzoo.get_registry().family(theirs).variants
            names = [v.name for v in rows if v.data.get("size") == doc.get("type")] or [v.name for v in rows]
            raise opzoo.CheckFailed(f"{path} is a {NETWORK[theirs]} PDE-Transformer checkpoint, not the "
                                    f"{NETWORK[architecture]} network this preset builds: load it with "
                                    f"{' or '.join(names)}")
        sd = {"model." + k[4:]: v for k, v in artifacts.state_dict.items()}
        weights = artifacts.files.get(f"{subfolder}/{WEIGHTS_FILE}")
        if weights is not None:  # the position tables the converter dropped (they say the window size)
            from safetensors import safe_open

            with safe_open(str(weights), "pt") as f:
                sd |= {k: f.get_tensor(k) for k in f.keys() if k.endswith(TABLES)}
        try:
            args = model_args(doc, sd, path)
        except opzoo.CheckpointError as e:
            raise opzoo.CheckFailed(str(e)) from None
        c = artifacts.model_config
        mismatched = {k: (v, getattr(c, k)) for k, v in args.items() if getattr(c, k) != v}
        if mismatched:
            detail = ", ".join(f"{k}: config.json {a!r}, model {b!r}" for k, (a, b) in mismatched.items())
            raise opzoo.CheckFailed(f"{path} describes another network ({detail}); load it with "
                                    f"opzoo.load(..., {', '.join(f'{k}={a!r}' for k, (a, _) in mismatched.items())}) "
                                    "if that is what you want")
        return f"{subfolder}/{CONFIG_FILE} and the tensors build this network ({', '.join(f'{k}={v}' for k, v in args.items())})"

    return opzoo.PretrainedCheck(f"{subfolder}/config.json agrees with the preset", run)
