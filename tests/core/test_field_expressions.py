"""The field-expression grammar of training-set maps and ``--field-map`` (opzoo.registry.contract): each form parsed,
evaluated on a window, and (where it holds one field) inverted back to the file's own values."""

from __future__ import annotations

import numpy as np
import pytest

from opzoo.data.readers.base import evaluate
from opzoo.registry.contract import parse_expression


@pytest.mark.parametrize("text,want", [("rho", [2.0, 4.0]), ("-rho", [-2.0, -4.0]), ("rho + 1.5", [3.5, 5.5]),
                                       ("m / rho", [5.0, 2.5]), ("rho * 0", [0.0, 0.0]), ("3", [3.0, 3.0]),
                                       ("log10(rho)", [np.log10(2.0), np.log10(4.0)]), (" log10( m ) ", [1.0, 1.0])])
def test_each_form_reads_a_window(text, want):
    window = np.array([[2.0, 10.0], [4.0, 10.0]], dtype=np.float32)  # [2 points, channels rho, m]
    np.testing.assert_allclose(evaluate(parse_expression(text), window, ["rho", "m"]), want, rtol=1e-6)


def test_log10_names_its_field_and_a_non_positive_value_is_not_finite():
    expr = parse_expression("log10(density)")
    assert expr.names == ("density",) and expr.func == "log10" and not expr.constant
    out = evaluate(expr, np.array([[0.0], [-1.0]], dtype=np.float32), ["density"])
    assert not np.isfinite(out).any()  # the read refuses a non-finite window, naming the channel


@pytest.mark.parametrize("text", ["log(rho)", "log10(rho + 1)", "log10 rho", "-log10(rho)"])
def test_other_functions_and_compositions_are_refused(text):
    with pytest.raises(ValueError, match="log10\\(field\\)"):
        parse_expression(text, "here")
