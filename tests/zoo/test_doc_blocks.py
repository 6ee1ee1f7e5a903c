"""Issue 70: the code blocks of a plugin author's docs are tested as written. Every ``python`` block of
docs/plugins.md and docs/adding-a-family.md either runs (executed here, and what it defines used), or starts with
``# mirrors: PATH``: a file of the repository that holds the same code and is itself tested, every statement of the
block found there (its trailing comments and elided ``...`` lines aside)."""

import re
from pathlib import Path

import pytest
import torch

import opzoo

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("docs/plugins.md", "docs/adding-a-family.md")
MIRROR = re.compile(r"^# mirrors: (.+)$")


def python_blocks():
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
            line = text[:m.start()].count("\n") + 1
            yield pytest.param(doc, line, m.group(1), id=f"{doc}:{line}")


def section_of(doc: str, line: int) -> str:
    """The ``## `` heading a block is under."""
    headings = [h for h in (ROOT / doc).read_text().splitlines()[:line] if h.startswith("## ")]
    return headings[-1][3:] if headings else ""


def statements(code: str) -> list[str]:
    """The block's lines, each without its trailing comment and indentation; blank, comment-only and ``...`` lines
    left out."""
    out = []
    for line in code.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line and not line.startswith("#") and line != "...":
            out.append(line)
    return out


BLOCKS = list(python_blocks())


def test_every_block_is_found():
    assert len(BLOCKS) >= 4, [b.id for b in BLOCKS]


@pytest.mark.parametrize("doc, line, code", BLOCKS)
def test_a_block_runs_or_mirrors_tested_code(doc, line, code):
    first = code.splitlines()[0]
    mirror = MIRROR.match(first)
    if mirror is None:
        namespace: dict = {}
        namespace["opzoo"] = opzoo  # the page's blocks follow its prose, which imports opzoo
        exec(compile(code, f"{doc}:{line}", "exec"), namespace)  # the block as a reader would paste it
        section = section_of(doc, line)
        assert section in RUNS, f"{doc}:{line}: a block that runs, under '{section}', has no check of what it defines"
        RUNS[section](namespace)
        return
    held: set[str] = set()
    for name in mirror.group(1).split():
        path = ROOT / name
        assert path.is_file(), f"{doc}:{line}: mirrors {name}, which is not in the repository"
        held |= {re.sub(r"\s+#\s.*$", "", s).strip() for s in path.read_text().splitlines()}
    missing = [s for s in statements(code) if s not in held]
    assert not missing, f"{doc}:{line}: these lines are not in {mirror.group(1)} as written: {missing}"


def _metric_block(namespace):
    """docs/plugins.md's metric: registered into a registry of its own, and computing a mean absolute error."""
    from opzoo.registry.registry import Registry

    registry = Registry()
    namespace["opzoo_register_components"](registry)
    metric = registry.get("metric", "MAE")
    pred, truth = torch.zeros(2, 4, 4, 3, 1), torch.ones(2, 4, 4, 3, 1)
    assert torch.equal(metric.parts(pred, truth, (1.0, 1.0)), torch.ones(2))


RUNS = {"A metric": _metric_block}
