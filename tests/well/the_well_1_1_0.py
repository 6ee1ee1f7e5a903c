"""The Well 1.1.0's evaluation of a Hub-layout repo, run in its own process by tests/well/test_well_as_trained.py.

``python the_well_1_1_0.py REPO_DIR STATS_YAML BATCH.safetensors OUT.safetensors CLASS FIELDS CONSTANTS
[REPO_DIR ... (seven arguments per case)]`` with ``PYTHONPATH`` set to
the ``pip install --target`` directory of ``the_well==1.1.0`` (the code that trained the published FNO and
TFNO checkpoints; ``make install`` puts it in ``.venv/reference/the_well-1.1.0``). Runs its
``Trainer.rollout_model(train=False)``: ZScoreNormalization, DefaultChannelsFirstFormatter, the model
loaded by its own ``from_pretrained``, the inverse normalization. Writes the prediction ``[B, T, *S, C]``.
"""

import sys
import types
import warnings

warnings.filterwarnings("ignore")

import the_well  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

assert the_well.__version__ == "1.1.0", f"expected the_well 1.1.0 first on PYTHONPATH, got {the_well.__file__}"
from the_well.benchmark import models  # noqa: E402
from the_well.benchmark.trainer.training import Trainer  # noqa: E402
from the_well.data.data_formatter import DefaultChannelsFirstFormatter  # noqa: E402
from the_well.data.normalization import ZScoreNormalization  # noqa: E402

args = sys.argv[1:]
assert args and len(args) % 7 == 0, "seven arguments per case"
for i in range(0, len(args), 7):  # one process for every case: the imports cost more than the cases
    repo, stats_path, batch_path, out_path, cls_name, fields, constants = args[i:i + 7]
    model = getattr(models, cls_name).from_pretrained(repo).eval()
    batch = load_file(batch_path)
    norm = ZScoreNormalization(yaml.safe_load(open(stats_path)), fields.split(","),
                               [c for c in constants.split(",") if c])
    steps = batch["output_fields"].shape[1]
    trainer = types.SimpleNamespace(dset_norm=norm, is_delta=False, max_rollout_steps=steps, device=torch.device("cpu"))
    trainer.normalize = types.MethodType(Trainer.normalize, trainer)
    trainer.denormalize = types.MethodType(Trainer.denormalize, trainer)
    meta = types.SimpleNamespace(n_spatial_dims=batch["input_fields"].ndim - 3)
    with torch.no_grad():
        pred, _ = Trainer.rollout_model(trainer, model, dict(batch), DefaultChannelsFirstFormatter(meta), train=False)
    save_file({"prediction": pred.contiguous()}, out_path)
print(the_well.__file__)
