"""DPOT-L's head count, read off the weights by its load check."""

import pytest
import torch

import opzoo


def test_dpot_l_head_count_is_read_off_the_weights():
    """DPOT-L's README says 16 heads, its config says 8: the load check reads the count from the w1 shapes
    (meta tensors: only shapes matter) and refuses 8, naming the override."""
    from opzoo_fourier.provenance import heads_agree

    with torch.device("meta"):
        model = opzoo.load("dpot-l")
    sd = {k: v for k, v in model.state_dict().items()}
    artifacts = opzoo.PretrainedArtifacts("dpot-l", {}, sd, model.config)
    assert heads_agree(artifacts).startswith("16 heads in every block")
    eight = {k: (torch.empty(2, 8, 192, 192, device="meta") if k.endswith("mixer.w1") else v) for k, v in sd.items()}
    with pytest.raises(opzoo.CheckFailed, match=r"has \[8\] head\(s\).*mixer_args=\{'n_blocks': 8, 'modes': 32\}"):
        heads_agree(opzoo.PretrainedArtifacts("dpot-l", {}, eight, model.config))
