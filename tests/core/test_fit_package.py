"""The fit is a package of one module per decision (issue 74), each short enough to read whole, and its public names
are where they were (``from opzoo.evaluation.fit import fit_data, ...``)."""

from pathlib import Path

import opzoo.evaluation.fit as fit

PACKAGE = Path(fit.__file__).parent


def test_no_module_of_the_fit_is_over_300_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
    assert {"contract.py", "fields.py", "channels.py", "normalization.py", "boundary.py", "grid.py", "compose.py",
            "files.py"} <= set(sizes)
    assert all(n <= 300 for n in sizes.values()), sizes


def test_the_public_names_of_the_fit_are_where_they_were():
    for name in ("FittedData", "GridChoice", "fit_data", "fit_files", "fit_files_block", "contract_of",
                 "open_trajectories", "choose_grid", "field_statistics", "neutral_statistics", "select_model_fields",
                 "boundary_plan", "array_order_lines", "say_block", "with_file_channels", "model_fields"):
        assert callable(getattr(fit, name)), name
    assert set(fit.__all__) <= set(dir(fit))
