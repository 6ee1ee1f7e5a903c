"""``model_cards/`` at the top of the repo is every preset's card as published, in sync with the registry."""

from __future__ import annotations

from pathlib import Path

import opzoo
from opzoo.cli import main
from opzoo.model_io.card_catalogue import INDEX, catalogue, write_catalogue

CARDS = Path(__file__).resolve().parents[2] / "model_cards"


def test_model_cards_directory_is_in_sync_with_the_registry():
    want = catalogue(opzoo.list_models())
    have = {p.name: p.read_text(encoding="utf-8") for p in CARDS.glob("*.md")}
    stale = sorted(n for n in set(want) | set(have) if want.get(n) != have.get(n))
    assert not stale, f"model_cards/ is out of date ({', '.join(stale[:5])}...): run `make model-cards`"


def test_a_card_is_what_save_pretrained_publishes_with_the_presets_results(tmp_path):
    model = opzoo.load("dpot-micro", pretrained=True)
    preset = opzoo.get_registry().preset("dpot-micro")
    model.save_pretrained(tmp_path / "repo", results=preset.results)
    assert (tmp_path / "repo" / "README.md").read_text() == (CARDS / "dpot-micro.md").read_text()
    assert "[dpot-micro](dpot-micro.md)" in (CARDS / INDEX).read_text()


def test_opzoo_cards_writes_only_what_changed_and_removes_stale_cards(tmp_path, capsys):
    out = tmp_path / "cards"
    names = opzoo.list_models("dpot-*")
    assert write_catalogue(out, names) == [*(f"{n}.md" for n in names), INDEX]
    (out / "gone.md").write_text("---\nlibrary_name: opzoo\n---\n# a preset that no longer exists\n")
    assert write_catalogue(out, names) == ["gone.md"]  # the complete catalogue: only the stale card changes
    assert not (out / "gone.md").exists()
    # patterns write those cards alone: the other cards and the index stay as they are
    (out / "dpot-s.md").write_text("---\nlibrary_name: opzoo\n---\nstale\n")
    (out / "other.md").write_text("---\nlibrary_name: opzoo\n---\n# another preset's card\n")
    assert main(["cards", "dpot-s", "--out", str(out)]) == 0
    assert "stale" not in (out / "dpot-s.md").read_text() and (out / "other.md").exists()
    assert main(["cards", "no-such-*", "--out", str(out)]) == 2


def test_a_fine_tune_inherits_its_base_cards_license():
    """A run card's license is the base preset card's (fine-tuning does not relicense weights); unknown otherwise."""
    from opzoo.training.card import base_license

    assert base_license("dpot-micro") == "mit"  # opzoo's own weights
    assert base_license("dpot-s") == "unknown" and base_license("pdet-sc-s") == "unknown"
    assert base_license("well-fno-shear_flow") == "unknown"
    assert base_license("no-such-model-anywhere") == "unknown"
