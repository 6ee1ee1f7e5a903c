"""Model cards: Markdown with YAML front matter, rendered into a repo's README.md (DESIGN §5).

A card template may use ``${name}``, ``${architecture}``, ``${parameters}`` (the exact count,
with thousands separators) and ``${config}`` (the config as JSON); they are filled on save.
"""

from __future__ import annotations

import json
from string import Template
from typing import TYPE_CHECKING

from huggingface_hub import ModelCard

if TYPE_CHECKING:
    from torch import nn

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


def render_card(model: "nn.Module", architecture: str, template: str | None = None) -> str:
    """The README.md text for ``model``: ``template`` (its preset's card; default: a generic card) with
    values filled in."""
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
    return str(card)
