"""Model cards of the ``well-*`` presets, from one template (``python -m opzoo_well.cards`` writes them).

A card is an opzoo card template (``${name}``, ``${parameters}``, ... are filled on save).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .datasets import STATS_SOURCE, dataset
from .presets import ARCHITECTURES, AS_TRAINED, N_STEPS_INPUT, REPORTED, checkpoints, hub_repo, preset_name
from .provenance import BLOCKS_DROPPED, FNO_FIX, ISSUE_49, PR_64, STATS_ALTERNATIVES, STATS_SHIPPED, TFNO_FIX

CITATION = """@article{ohana2024well,
  title={The well: a large-scale collection of diverse physics simulations for machine learning},
  author={Ohana, Ruben and McCabe, Michael and Meyer, Lucas and Morel, Rudy and Agocs, Fruzsina and Beneitez, Miguel and Berger, Marsha and Burkhart, Blakesly and Dalziel, Stuart and Fielding, Drummond and others},
  journal={Advances in Neural Information Processing Systems},
  volume={37},
  pages={44989--45037},
  year={2024}
}"""

LICENSE_STATUS = (
    "The Well's code (PolymathicAI/the_well) is BSD-3-Clause. The model README that The Well keeps for "
    "these checkpoints (`the_well/benchmark/models/{readme}/README.md`, the source of the Hub model cards) "
    "states no license for the weights, and the Hub repo's own card could not be read when this card was "
    "written (no network). Until the repo says otherwise, treat the weights' license as unstated "
    "(`license: unknown`) and check the Hub repo before redistributing them."
)

README_DIR = {"fno": "fno", "tfno": "tfno", "unet-classic": "unet_classic", "unet-convnext": "unet_convnext"}


def card_text(arch: str, dataset_name: str, published: bool = True, source: str | None = None,
              steps: int = N_STEPS_INPUT, fourier_blocks: str | None = None,
              resolution: list[int] | None = None) -> str:
    """The card template of ``arch`` on ``dataset_name``; ``published=False`` for a checkpoint converted from
    a directory, whose weights need not be the published ones (no reported VRMSE then). ``fourier_blocks``
    (FNO/TFNO) defaults to the published weights' ``"dropped"``; ``resolution`` to the dataset's grid."""
    a, d = ARCHITECTURES[arch], dataset(dataset_name)
    repo = hub_repo(arch, dataset_name)
    fields = ", ".join(f"`{c}`" for c in d.channels)
    constants = ", ".join(f"`{c}`" for c in d.constant_channels) or "none"
    res = " x ".join(map(str, resolution or d.resolution))
    lr, epochs, vrmse = REPORTED[arch].get(dataset_name, ("?", "?", "?"))
    if arch in ("fno", "tfno") and fourier_blocks is None:
        fourier_blocks = AS_TRAINED[arch]["fourier_blocks"]
    if published:
        evaluation = (f"**Reported by The Well** (not measured by opzoo): a test VRMSE of **{vrmse}** in its README "
                      f"(the best of five learning rates on validation: {lr}, {epochs} epochs). The Well's test score "
                      f"averages the one-step VRMSE over every window of every test trajectory; `opzoo eval "
                      f"--protocol the-well` scores that way (labelled so). `opzoo eval`'s default scores rollouts "
                      f"from the first window of each trajectory, a different number: do not set the two side by side.")
        if arch.startswith("unet"):
            evaluation += (f"\n\nCaveat: the U-Nets' README numbers are not reproduced by The Well's own code with the "
                           f"Hub weights (viscoelastic_instability: 0.947 for UNetConvNext and 3.95 for UNetClassic; "
                           f"{ISSUE_49}). Measure before you rely on the reported value.")
    else:
        evaluation = ("A checkpoint converted from a directory: nothing shows that its weights are the published "
                      "ones, so The Well's reported result is not claimed for it. Evaluate it with `opzoo eval` "
                      "(VRMSE per field next to l2 full; `--protocol the-well` for The Well's test protocol).")
    stats_caveat = ""
    if dataset_name in STATS_ALTERNATIVES:
        stats_caveat = (" For this dataset the revisions disagree, and which one trained the weights is "
                        "**unverified**: " + "; ".join(STATS_ALTERNATIVES[dataset_name]) + ".")
    source = source or f"[`{repo}`](https://huggingface.co/{repo})"
    config_line = ("Published config: " + ", ".join(f"`{k}={v}`" for k, v in a.args.items())
                   + ", other arguments at The Well's defaults." if published
                   else "Its arguments are the converted checkpoint's own (its `config.json`).")
    if fourier_blocks == "dropped":
        config_line += (
            f"\n\n**A pointwise map, not an FNO.** These weights were trained by the_well <= 1.1.0, whose "
            f"`NeuralOpsCheckpointWrapper.forward` (`the_well/benchmark/models/{arch}/__init__.py`, from commit "
            f"{BLOCKS_DROPPED[:7]}, 2024-06-03) called each Fourier block and dropped its output, until commit "
            f"{(FNO_FIX if arch == 'fno' else TFNO_FIX)[:7]} (2025-11-17, {PR_64}). The network they learned is "
            f"`projection(lifting(x))`: two pointwise MLPs, no Fourier layer, no spatial coupling. opzoo computes "
            f"exactly that (`fourier_blocks=\"dropped\"`), and the load refuses weights whose blocks look trained. "
            f"The block weights are in the file, an untrained init draw; `fourier_blocks=\"applied\"` builds the "
            f"FNO as neuraloperator defines it, for training.")
    elif fourier_blocks == "applied":
        config_line += "\n\nThe Fourier blocks are applied (`fourier_blocks=\"applied\"`, The Well from commit 21e51f6)."
    return f"""---
library_name: opzoo
license: unknown
tags: [opzoo, neural-operator, pde, the-well, {arch}]
datasets: [polymathic-ai/{dataset_name}]
metrics: [vrmse, relative-l2]
---
# ${{name}}

## Description
The Well's {a.well_class} baseline trained on `{dataset_name}`, converted to opzoo. Source:
{source} (The Well, PolymathicAI/the_well). The model takes and returns physical fields: The Well's
normalization and input formatting are inside it.

## Architecture
`${{architecture}}`: The Well's `{a.well_class}` ({a.paper}), implemented in opzoo and computing the
same function (tested against The Well's own pipeline at small dims). {config_line}
Input `[B, {", ".join("XYZ"[:d.n_spatial_dims])}, T_in={steps}, C]` -> output `[B, {", ".join("XYZ"[:d.n_spatial_dims])}, 1, C]`,
channels = the time-varying fields then the constant fields (copied through unchanged).
Inside: z-score with the dataset's `stats.yaml` ({STATS_SOURCE.format(name=dataset_name)}), time
folded into channels (The Well's `DefaultChannelsFirstFormatter`), the network, the inverse z-score.

## Parameters
${{parameters}} parameters.

## Training data
The Well, `{dataset_name}`: {d.n_spatial_dims}D, resolution {res}; time-varying fields {fields};
constant fields {constants}. Trained by The Well's code with {steps} input steps to predict the next one.

## Evaluation
{evaluation}

## License
{LICENSE_STATUS.format(readme=README_DIR[arch])}

## Intended use and limits
A baseline, not a state-of-the-art model (The Well's words). Inputs must be on the dataset's grid
and in its units; other resolutions work for the FNOs, and for the U-Nets when every size is divisible by 16.
The normalization stats shipped with opzoo are `stats.yaml` at commit {STATS_SHIPPED[:7]} of The Well's repo; The
Well does not record in the checkpoint which revision of them it trained with.{stats_caveat}
Files are read by field name: a Well file whose `field_names` come in another order is reordered, and one
missing a field is refused.

## Citation
```bibtex
{CITATION}
```

## Usage
```python
import opzoo
model = opzoo.load("{preset_name(arch, dataset_name)}", pretrained=True)  # fetches {repo}, checks it, eval mode
y = model(x)                       # x: [B, *S, {N_STEPS_INPUT}, C] physical fields -> [B, *S, 1, C]
traj = model.rollout(x, steps=20)  # autoregressive
```
Offline: `hf download {repo}` on a machine with network first (same cache). `opzoo verify
{preset_name(arch, dataset_name)}` runs the load checks and prints what they measured; `opzoo info
{preset_name(arch, dataset_name)}` lists where every fact on this card comes from.
"""


def write_cards(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for stale in directory.glob("well-*.md"):
        stale.unlink()
    for arch, ds in checkpoints():
        path = directory / f"{preset_name(arch, ds)}.md"
        path.write_text(card_text(arch, ds))
        written.append(path)
    return written


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "model_cards"
    print(f"wrote {len(write_cards(out))} cards in {out}")
