"""``model_cards/``: every preset's card rendered exactly as it is published on the Hub (its template filled in, its
results as the ``model-index``), with an index page, so that the catalogue can be read without installing opzoo."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..files import atomic_write, claim_output_dir

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
    rows = [INDEX_TITLE, "",
            "Each preset's card as it is published, generated from the registry by `opzoo cards --out model_cards` "
            "(`make model-cards`); a test fails when one is out of date.", "",
            "| preset | backbone | plugin | published weights |", "|---|---|---|---|"]
    for name in names:
        preset = registry.preset(name)
        src = preset.pretrained
        where = ("none" if src is None else f"`{src.repo_id}`" if src.repo_id else
                 f"[downloaded by hand]({src.download_page})" if src.download_page else "shipped in the package")
        rows.append(f"| [{name}]({name}.md) | {preset.backbone} | {preset.owner} | {where} |")
    files[INDEX] = "\n".join(rows) + "\n"
    return files


INDEX_TITLE = "# opzoo's model cards"


def written_by_catalogue(path: Path) -> bool:
    """Whether ``path`` is a file this catalogue wrote: a card (``repo_dir.is_opzoo_card``) or the index. Read as
    untrusted: only a regular file, only its first lines."""
    from .repo_dir import is_opzoo_card

    if path.name != INDEX:
        return path.suffix == ".md" and is_opzoo_card(path)
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(len(INDEX_TITLE)) == INDEX_TITLE
    except OSError:
        return False


def write_catalogue(out: Path, names: Sequence[str], complete: bool = True, force: bool = False) -> list[str]:
    """Write the catalogue of ``names`` into ``out`` (each file replaced atomically). ``complete``: ``names`` are every
    preset, so the index is written and the cards of presets that are gone are removed; otherwise only those
    presets' cards are written and nothing else is touched. Returns the files that changed.

    A directory holding files the catalogue did not write is refused (before any rendering) unless ``force``; even
    then no such file is removed, and one is replaced only where a card or the index goes."""
    out = claim_output_dir(out, written_by_catalogue, force=force, what="the cards",
                           advice="pass --force to write the cards beside them")
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
        if written_by_catalogue(out / stale):  # a card of a preset that is gone; anything else stays
            (out / stale).unlink()
            changed.append(stale)
    return changed
