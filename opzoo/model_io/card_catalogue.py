"""``model_cards/``: every preset's card rendered exactly as it is published on the Hub (its template filled in, its
results as the ``model-index``), with an index page, so that the catalogue can be read without installing opzoo."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..files import atomic_write

INDEX = "README.md"


def preset_card(name: str) -> str:
    """The README.md a preset is published with: its card, its numbers (``Preset.results``) as the model-index."""
    import torch

    from ..registry.registry import get_registry
    from .loading import load
    from .saving import model_card

    preset = get_registry().preset(name)
    with torch.device("meta"):
        model = load(preset.name)
    return model_card(model, results=preset.results)


def catalogue(names: Sequence[str]) -> dict[str, str]:
    """``file name -> text`` of the catalogue: one ``<preset>.md`` per preset and the index."""
    from ..registry.registry import get_registry

    registry = get_registry()
    files = {f"{name}.md": preset_card(name) for name in names}
    rows = ["# opzoo's model cards", "",
            "Each preset's card as it is published, generated from the registry by `opzoo cards --out model_cards` "
            "(`make model-cards`); a test fails when one is out of date.", "",
            "| preset | backbone | plugin | published weights |", "|---|---|---|---|"]
    for name in names:
        preset = registry.preset(name)
        src = preset.pretrained
        where = "none" if src is None else (f"`{src.repo_id}`" if src.repo_id else "shipped in the package")
        rows.append(f"| [{name}]({name}.md) | {preset.backbone} | {preset.owner} | {where} |")
    files[INDEX] = "\n".join(rows) + "\n"
    return files


def write_catalogue(out: Path, names: Sequence[str], complete: bool = True) -> list[str]:
    """Write the catalogue of ``names`` into ``out`` (each file replaced atomically). ``complete``: ``names`` are every
    preset, so the index is written and the ``.md`` files of presets that are gone are removed; otherwise only those
    presets' cards are written and nothing else is touched. Returns the files that changed."""
    files = catalogue(names)
    if not complete:
        files.pop(INDEX)
    out.mkdir(parents=True, exist_ok=True)
    changed = []
    for file_name, text in files.items():
        path = out / file_name
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        atomic_write(path, text)
        changed.append(file_name)
    for stale in sorted(set(p.name for p in out.glob("*.md")) - set(files) if complete else ()):
        (out / stale).unlink()
        changed.append(stale)
    return changed
