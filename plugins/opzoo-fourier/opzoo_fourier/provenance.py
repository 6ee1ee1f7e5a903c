"""Where each fact about DPOT's published checkpoints comes from (thu-ml/DPOT, read with git at its newest
commit), and the load check that settles the one its sources disagree on (DPOT-L's head count)."""

from __future__ import annotations

from opzoo import CheckFailed, Fact, PretrainedArtifacts, PretrainedCheck

DPOT_COMMIT = "dcd2f9a9359765e19ad63e2f3f879a2a8ce1aa17"  # thu-ml/DPOT, 2024-06-10 "upload pre-trained models", its newest
README = f"thu-ml/DPOT README.md @ {DPOT_COMMIT[:7]}"
SIZE_ROW = {"dpot-ti": "Tiny", "dpot-s": "Small", "dpot-m": "Medium", "dpot-l": "Large", "dpot-h": "Huge"}


def dpot_facts(name: str, repo: str, filename: str) -> list[Fact]:
    facts = [
        Fact("Hub repo and file", f"{repo}, {filename}", README + ' ("Pre-trained weights are at https://huggingface.co/'
             'hzk17/DPOT"; the example loads model_Ti.pth)'),
        Fact("size", f"the README's {SIZE_ROW[name]} row", README + " (table of pre-trained models)"),
        Fact("weights license", "not stated upstream", f"thu-ml/DPOT @ {DPOT_COMMIT[:7]}: no LICENSE file in any commit, "
             "the README states none; the Hub card of hzk17/DPOT could not be read here", verified=False,
             alternatives=("a license on the Hub repo's card: check it before redistributing",)),
    ]
    if name == "dpot-l":
        facts.append(Fact("heads (Fourier attention n_blocks)", "16", README + " (Large: 16 heads; its 509M parameters "
                          f"match 16 heads: 509,018,739, not 8: 523,174,515); thu-ml/DPOT configs/pretrain_large.yaml @ "
                          f"{DPOT_COMMIT[:7]} says `n_blocks: [8]  ### 8????`", verified=False,
                          alternatives=("8, as configs/pretrain_large.yaml says: the load check reads the count off the "
                                        "weights and refuses, naming it",)))
    return facts


def heads_agree(artifacts: PretrainedArtifacts) -> str:
    """The Fourier-attention head count of the weights (``w1``: ``[2, n_blocks, bs, bs]``) against the config's."""
    expected = artifacts.model_config.mixer_args.get("n_blocks")
    found = sorted({tuple(v.shape)[1] for k, v in artifacts.state_dict.items() if k.endswith("mixer.w1")})
    if found != [expected]:
        raise CheckFailed(
            f"the weights' Fourier attention has {found} head(s) (n_blocks, from the w1 tensors' shapes) where the "
            f"preset has {expected}. DPOT's README says 16 for Large and configs/pretrain_large.yaml says 8: these "
            f"weights settle it. Load them with opzoo.load('dpot-l', pretrained=True, mixer_args={{'n_blocks': "
            f"{found[0] if found else '?'}, 'modes': 32}}), and tell opzoo (the preset should change)")
    return f"{expected} heads in every block, as the preset has (README 16 vs configs/pretrain_large.yaml 8: 16 holds)"


HEADS_CHECK = PretrainedCheck("head count agrees with the weights", heads_agree)

__all__ = ["dpot_facts", "heads_agree", "HEADS_CHECK"]
