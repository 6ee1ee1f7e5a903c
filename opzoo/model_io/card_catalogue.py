"""``model_cards/``: every preset's card rendered exactly as it is published on the Hub (its template filled in, its
results as the ``model-index``), with an index page, so that the catalogue can be read without installing opzoo."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import ConfigError
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
    rows = [INDEX_TITLE, "",
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


INDEX_TITLE = "# opzoo's model cards"


def written_by_opzoo(path: Path) -> bool:
    """Whether ``path`` is a file this catalogue wrote: a card (front matter with ``library_name: opzoo``) or the
    index. Read as untrusted: only a regular file, only its first lines."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    if path.name == INDEX:
        return head.startswith(INDEX_TITLE)
    front = head.split("---", 2)[1] if head.startswith("---") and head.count("---") >= 2 else ""
    return path.suffix == ".md" and any(line.strip() == "library_name: opzoo" for line in front.splitlines())


def foreign_files(out: Path) -> list[Path]:
    """What ``out`` holds that the catalogue did not write (empty for a new directory)."""
    if not out.exists():
        return []
    if not out.is_dir() or out.is_symlink():
        raise ConfigError(f"--out {out}: not a directory; name a directory for the cards (e.g. model_cards)")
    return sorted(p for p in out.iterdir() if not written_by_opzoo(p))


def write_catalogue(out: Path, names: Sequence[str], complete: bool = True, force: bool = False) -> list[str]:
    """Write the catalogue of ``names`` into ``out`` (each file replaced atomically). ``complete``: ``names`` are every
    preset, so the index is written and the cards of presets that are gone are removed; otherwise only those
    presets' cards are written and nothing else is touched. Returns the files that changed.

    A directory holding files the catalogue did not write is refused (before any rendering) unless ``force``; even
    then no such file is removed, and one is replaced only where a card or the index goes."""
    out = Path(out)
    foreign = foreign_files(out)
    if foreign and not force:
        shown = ", ".join(p.name for p in foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ConfigError(f"--out {out} holds files opzoo did not write ({shown}); choose another directory, or pass "
                          "--force to write the cards beside them (files opzoo did not write are never removed)")
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
        if written_by_opzoo(out / stale):  # a card of a preset that is gone; anything else stays
            (out / stale).unlink()
            changed.append(stale)
    return changed
