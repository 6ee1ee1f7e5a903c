"""The example plugin's checkpoint family, declared as one table (``opzoo.CheckpointFamily``): a row per size."""
from importlib.resources import files

import opzoo

REPO = "example-org/example-shift"


def facts(variant):
    return (opzoo.Fact("published parameters", f"{variant['params']:,}", f"{REPO} README @ 0123abc"),
            opzoo.Fact("width", str(variant.args["width"]), f"{REPO} config.json @ 0123abc"))


def weights_named(variant):
    def run(artifacts):
        return f"{variant.weights} read"
    return (opzoo.PretrainedCheck(f"{variant.name} weights present", run),)


FAMILY = opzoo.CheckpointFamily(
    "example-shift", backbone="simple", repo_id=REPO,
    args=dict(depth=1, in_channels=2, out_channels=2, in_timesteps=3, mixer="example-shift", mixer_args={"shift": 2}),
    variants=(
        opzoo.Variant("example-shift-s", args={"width": 16}, weights="s/model.safetensors",
                      data={"params": 1986, "nrmse": 0.30}),
        opzoo.Variant("example-shift-b", args={"width": 32}, weights="b/model.safetensors",
                      data={"params": 7042, "nrmse": 0.20}),
    ),
    checks=weights_named, provenance=facts,
    results=lambda v: (opzoo.Result("example data", "nRMSE", v["nrmse"], "the example authors",
                                    source=f"https://huggingface.co/{REPO}"),),
    pretrained_cfg=lambda v: {"in_timesteps": 3},
    card=files("opzoo_example_plugin") / "model_cards" / "example-shift.md",
    card_fields=lambda v: {"params": f"{v['params']:,}", "width": v.args["width"]},
)
