"""``training.grad_checkpointing``: the same run, with each block's activations recomputed in backward."""

import torch

from opzoo.training import Trainer, parse_run_config

from .conftest import run_document, tiny_pot_args


def test_a_run_with_grad_checkpointing_has_the_same_losses_and_weights(tmp_path, datasets):
    runs = []
    for on in (False, True):
        doc = run_document(tmp_path / f"run-{on}", datasets, model={"name": "pot", "args": tiny_pot_args()},
                           training={"steps": 3, "batch_size": 2, "grad_checkpointing": on}, checkpoint={"every": None},
                           evaluation={"plots": False})
        trainer = Trainer(parse_run_config(doc), show_progress=False)
        assert trainer.model.grad_checkpointing is on
        runs.append((trainer.fit().losses, trainer.model.state_dict()))
    (losses, weights), (losses_ckpt, weights_ckpt) = runs
    assert losses == losses_ckpt and len(losses) == 3
    assert all(torch.equal(weights[k], weights_ckpt[k]) for k in weights)
