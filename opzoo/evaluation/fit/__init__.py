"""The one fit of data files to a model, for training, ``eval``, ``rollout``, ``validate`` and ``compare`` alike
(docs/data-contract.md).

:func:`fit_data` reads the model's data contract (:func:`contract_of`, an :class:`opzoo.DataContract`) and decides,
for the model and the files:

- **fields**: a model that names its fields reads each file's by name (after the user's ``--field-map`` renames, and
  as upstream read its training set when the file is one of them, ``--training-set``: field expressions, a transposed
  grid); a field the file lacks is filled as the contract says, or the file is refused naming the flag that fits it;
  a model that reads channels by position takes them in the file's order;
- **channels**: kept, padded (left out of the loss and the scores, refilled in a rollout), or (training only) the
  channel-shaped tensors adapted to the file's fields, as the family's upstream fine-tunes;
- **grid**: the one asked for, else the one the backbone asks for given the data, else the pretrained grid, else the
  first file's, and how data is resampled to it;
- **boundary**: what the files state and what the model assumes;
- **normalization**: as the contract says: inside the model, by constants, or by statistics of the training split that
  the fit computes and the model then carries.

Each decision is one line of :attr:`FittedData.lines`, the block every command prints and every run records. One
module per decision: :mod:`.contract` (which contract), :mod:`.fields`, :mod:`.channels`, :mod:`.normalization`,
:mod:`.boundary`, :mod:`.grid`; :mod:`.compose` is :func:`fit_data`, which makes them in order; :mod:`.files` opens
a user's files and says the block.
"""

from __future__ import annotations

from .boundary import axis_boundary_plan, boundary_plan, stated_axis_boundaries, stated_boundaries
from .channels import plan_channels
from .compose import FittedData, fit_data
from .contract import contract_of, derived_contract, model_fields, model_name, pad_value_of
from .fields import (
    FieldPlan,
    apply_plan,
    fitted_names,
    one_field_set,
    plan_fields,
    plan_subset,
    recognised_training_set,
    select_model_fields,
)
from .files import array_order_lines, fit_files, fit_files_block, open_trajectories, say_block, with_file_channels
from .grid import GridChoice, choose_grid, frame_shape, model_resolution
from .normalization import (
    describe_parts,
    field_statistics,
    neutral_statistics,
    normalization,
    normalization_kind,
    training_parts,
)

__all__ = ["FieldPlan", "FittedData", "GridChoice", "apply_plan", "array_order_lines",
           "axis_boundary_plan", "boundary_plan", "choose_grid",
           "contract_of", "derived_contract", "describe_parts", "field_statistics", "fit_data", "fit_files",
           "fit_files_block", "fitted_names", "frame_shape", "model_fields", "model_name", "model_resolution",
           "neutral_statistics", "normalization", "normalization_kind", "one_field_set", "open_trajectories",
           "pad_value_of", "plan_channels", "plan_fields", "plan_subset", "recognised_training_set", "say_block",
           "select_model_fields", "stated_axis_boundaries", "stated_boundaries", "training_parts",
           "with_file_channels"]
