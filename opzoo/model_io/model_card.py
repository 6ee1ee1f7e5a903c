"""Model cards: Markdown with YAML front matter, rendered into a repo's README.md (docs/architecture.md, Where a pretrained load goes).

A card template may use ``${name}``, ``${architecture}``, ``${parameters}`` (the exact count,
with thousands separators) and ``${config}`` (the config as JSON); they are filled on save.
"""

from __future__ import annotations

import json
from string import Template
from typing import TYPE_CHECKING, Sequence

from huggingface_hub import EvalResult, ModelCard

if TYPE_CHECKING:
    from torch import nn

    from ..registry.provenance import Result

DEFAULT_CARD = """---
library_name: opzoo
license: mit
tags: [opzoo, neural-operator, pde]
---
# ${name}

An opzoo `${architecture}` model with ${parameters} parameters.

## Configuration

```json
${config}
```

## Usage

```python
import opzoo
model = opzoo.from_pretrained("PATH_OR_REPO")
```
"""


def model_index(results: Sequence["Result"]) -> list[EvalResult]:
    """``results`` as Hugging Face ``EvalResult`` rows (the card's ``model-index``). Who measured: a number reported
    upstream carries ``source`` (name and URL, as the Hub's model-index has it); opzoo's own carry none (the card's
    author measured them) and say so in the metric's name."""
    def name(r):
        return f"{r.metric_name or r.metric} ({'measured by opzoo' if r.measured_by == 'opzoo' else 'reported by ' + r.measured_by})"

    return [EvalResult(task_type=r.task, task_name="autoregressive rollout of a time-dependent PDE",
                       dataset_type=r.dataset, dataset_name=r.dataset, dataset_split=r.split,
                       metric_type=r.metric, metric_value=round(float(r.value), 6), metric_name=name(r),
                       **({} if r.measured_by == "opzoo" else {"source_name": r.measured_by, "source_url": r.source}))
            for r in results]


def render_card(model: "nn.Module", architecture: str, template: str | None = None,
                results: Sequence["Result"] = (), model_name: str | None = None) -> str:
    """The README.md text for ``model``: ``template`` (its preset's card; default: a generic card) with
    values filled in, and ``results`` as the ``model-index`` front matter, under ``model_name`` (default its preset's:
    a fine-tune names itself, not its base)."""
    name = getattr(model, "preset_name", None) or architecture
    text = Template(template or DEFAULT_CARD).safe_substitute(
        name=name,
        architecture=architecture,
        parameters=f"{sum(p.numel() for p in model.parameters()):,}",
        config=json.dumps(model.config.to_dict(), indent=2),
    )
    card = ModelCard(text)
    card.data.library_name = "opzoo"
    tags = list(card.data.tags or [])
    if "opzoo" not in tags:
        card.data.tags = ["opzoo", *tags]
    if results:
        card.data.model_name = model_name or name
        card.data.eval_results = model_index(results)
    return str(card)
