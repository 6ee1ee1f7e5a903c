"""The model card of a trained or fine-tuned model (its ``README.md``), written by the trainer.

A fine-tuned model is not its base preset: its card names the base model (``base_model:`` in the
front matter, the Hub convention), the data files and splits, steps and lr, the zero-shot,
fine-tuned and persistence errors on its test split, and the command that made it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import OpzooError
from ..evaluation.rollouts import DatasetResult, headline

if TYPE_CHECKING:
    from ..model_io.reference import ModelReference


def given_name(name: "str | ModelReference") -> str:
    return name if isinstance(name, str) else name.given


def base_model_id(name: "str | ModelReference") -> str:
    """``base_model`` for the front matter: a Hub repo id where there is one, else the opzoo name (a local
    model: its folder's name, not its path)."""
    from ..model_io.reference import model_reference
    from ..registry.registry import get_registry

    try:
        ref = model_reference(name)
    except OpzooError:
        return Path(given_name(name)).name
    if ref.kind == "dir":  # a local model (a fine-tune's output): the published model its lineage starts from
        from ..model_io.loading import saved_pretrained_cfg

        try:
            root = saved_pretrained_cfg(ref).get("preset")
        except OpzooError:
            root = None
        if root and get_registry().has_preset(root):
            return base_model_id(root)
    if ref.kind == "preset":
        src = get_registry().preset(ref.preset).pretrained
        if src is not None and src.repo_id is not None:
            return src.repo_id
    return ref.base_model_id


def _reference(name: "str | ModelReference") -> "ModelReference | None":
    from ..model_io.reference import model_reference

    try:
        return model_reference(name)
    except OpzooError:
        return None


def _portable_line(line: str) -> str:
    """A fit line with the files named by their names, not their local paths."""
    import re

    return re.sub(r"(?<![\w.~])(?:/[^\s,;:()]+)+/([^/\s,;:()]+)", r"\1", line)


def _fine_tuned(ref: "ModelReference") -> bool:
    """Whether a local model was itself fine-tuned by opzoo (its record names the model it started from): then a
    card of its fine-tune cannot name the published model the lineage starts from as its base."""
    from ..model_io.loading import saved_pretrained_cfg

    try:
        return bool(saved_pretrained_cfg(ref).get("base_model"))
    except OpzooError:
        return False


def _chain(ref: "ModelReference") -> str:
    """``dpot-micro -> run1/model``: the models a local model's record names, its root first, then itself."""
    from ..model_io.loading import saved_pretrained_cfg

    try:
        records = saved_pretrained_cfg(ref).get("training_data") or []
    except OpzooError:
        records = []
    chain = list(dict.fromkeys(r.get("by") for r in reversed(records) if r.get("by")))
    return " -> ".join([*chain, ref.lineage_id])


def base_license(name: "str | ModelReference") -> str:
    """The license a fine-tune inherits: the ``license:`` of its base preset's card front matter, else ``unknown``
    (weights of unknown license stay so: fine-tuning does not make them MIT)."""
    from ..model_io.reference import model_reference
    from ..registry.registry import get_registry

    try:
        ref = model_reference(name)
    except OpzooError:
        return "unknown"
    text = get_registry().preset(ref.preset).card_template() if ref.kind == "preset" else None
    if text is None:
        return "unknown"
    front = text.split("---", 2)[1] if text.startswith("---") else ""
    found = [line.split(":", 1)[1].strip() for line in front.splitlines() if line.startswith("license:")]
    return found[0] if found and found[0] else "unknown"


def _portable(base_weights: str, model_name: "str | ModelReference") -> str:
    """The weights line without a local path: the base model's folder by its name, and any other absolute path (a
    package's weights directory) by its last three parts (``opzoo_fourier/pretrained/dpot-micro``)."""
    import re

    from ..model_io.reference import model_reference

    try:
        ref = model_reference(model_name)
    except OpzooError:
        ref = None
    text = base_weights
    if ref is not None and ref.kind == "dir":  # the base model's folder, as the weights line names it
        for local in (ref.given, str(ref.path)):
            text = text.replace(local, ref.path.name) if "/" in local else text
    return markdown_text(re.sub(r"(?<![\w.])/[^\s,;()]+", lambda m: "/".join(Path(m.group(0)).parts[-3:]), text))


def markdown_text(text: str, limit: int = 500) -> str:
    """A record's text as inert Markdown in a card: one line, at most ``limit`` characters, HTML escaped and the
    characters of links, images, code and tables (``[ ] ` |``) too (a record is data: an edited one must not put
    links, images, markup or table cells into a card)."""
    import html
    import re

    text = " ".join(str(text).split())
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return re.sub(r"([\\`\[\]|])", r"\\\1", html.escape(text, quote=False))


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def split_text(data, test) -> str:
    """Which trajectories of ``data`` (a training file's path, or its opened source) are the test split (``test``: its
    TrajectoryDataset), by file name and content hash (a card is meant for publishing: no local path)."""
    from ..data.fingerprint import content_hash

    path = getattr(data, "path", data)
    idx = list(test.indices)
    if str(test.path) != str(path):
        return (f"train: all of `{Path(path).name}` ({content_hash(data)}); test: all {len(idx)} trajectories of "
                f"`{Path(test.path).name}` ({content_hash(test.source)})")
    train = f"trajectories 0–{idx[0] - 1}" if idx[0] > 0 else "none"
    return (f"train: {train} of `{Path(path).name}` ({content_hash(test.source)}); test: trajectories "
            f"{idx[0]}–{idx[-1]} ({len(idx)}, the last ones of the file)")


def portable_command(command: str | None) -> str | None:
    """The command as typed, with each local path shortened to its file name (a card is published)."""
    import shlex

    if not command:
        return command
    out = []
    for token in shlex.split(command):
        key, eq, value = token.partition("=")
        candidate = value if eq and key.startswith("--") else token
        if ("/" in candidate or "\\" in candidate) and Path(candidate).expanduser().exists():
            shortened = Path(candidate).name
            token = f"{key}={shortened}" if eq and key.startswith("--") else shortened
        out.append(token)
    return shlex.join(out)


def selection_lines(selection: dict | None) -> list[str]:
    """The card's lines on which weights a run kept (``TrainResult.selection``), or none for the last step's."""
    if not selection:
        return []
    lines = [f"- weights kept: step {selection['step']}, the lowest validation error (relative L2 over the rollout of "
             f"the validation split: {_fmt(selection.get('validation_l2'))}) among {len(selection.get('history', []))} "
             f"evaluations"]
    if selection.get("early_stopped"):
        lines.append(f"- stopped early at step {selection['steps_done']} of {selection['steps']}: "
                     f"{selection.get('patience')} evaluations in a row without improvement")
    return lines


def run_card(*, model_name: "str | ModelReference", from_scratch: bool, base_weights: str, datasets: Sequence[tuple[str, object]],
             steps: int, lr: float, batch_size: int, seed: int, zero_shot: Sequence[DatasetResult] | None,
             final: Sequence[DatasetResult], command: str | None, resolution: Sequence[int], channels: int,
             in_timesteps: int, fit: Sequence[str] = (), selection: dict | None = None,
             tuning: str | None = None) -> str:
    """The card template (``${parameters}``, ``${config}`` are filled by :func:`opzoo.model_io.model_card.render_card`).

    ``datasets``: ``(training file: its path or opened source, test TrajectoryDataset)`` per file; ``fit``: the fit block of the data to the model;
    ``tuning``: what the run trained (:meth:`opzoo.training.tuning.Tuning.line`).
    """
    zero = {r.name: r for r in zero_shot or []}
    kind = "trained from scratch" if from_scratch else "fine-tuned"
    start_col = "at step 0 (random init)" if from_scratch else "zero-shot"
    license_ = "mit" if from_scratch else base_license(model_name)
    front = ["---", "library_name: opzoo", f"license: {license_}", "tags: [opzoo, neural-operator, pde" +
             (", fine-tuned]" if not from_scratch else "]")]
    ref = _reference(model_name)
    local = ref is not None and ref.kind == "dir" and _fine_tuned(ref)
    if not from_scratch and not local:  # a local fine-tune has no Hub id to name: the body says what it is
        front += [f"base_model: {base_model_id(model_name)}", "base_model_relation: finetune"]
    front.append("---")
    files = ", ".join(f"`{Path(getattr(p, 'path', p)).name}`" for p, _ in datasets)
    lines = [*front, f"# {Path(given_name(model_name)).name} {kind} on {files}", "",
             f"An opzoo model with ${{parameters}} parameters, {kind} by `opzoo` on the data below.", "",
             "## Base model", "",
             ("None: random initialization of the architecture of " if from_scratch else "")
             + (f"`{ref.lineage_id}`, a local model (lineage: {_chain(ref)})" if local and not from_scratch else
                f"`{base_model_id(model_name)}`") + f" ({_portable(base_weights, model_name)}).", "",
             "## Data", "",
             *[f"- `{Path(getattr(p, 'path', p)).name}` — {split_text(p, test)}" for p, test in datasets],
             f"- the model runs at {list(resolution)}, {channels} channel(s), T_in = {in_timesteps}"
             + ("" if all(list(test.spatial) == list(resolution) for _, test in datasets) else
                "; a file at another grid is resampled to it for the model, and its predictions back: the scores "
                "below are computed at each file's own grid"), "",
             *(["## How the data was fitted to the model", "",
                 "The one fit of the data to the model (docs/data-contract.md), a line per decision, as the run said "
                 "it:", "", *[f"- {_portable_line(line)}" for line in fit], ""] if fit else []),
             "## Training", "",
             f"- steps: {steps}", *selection_lines(selection),
             *([f"- what was trained: {tuning}" + ("; the LoRA adapters are merged into these weights, and saved "
                                                    "beside them as peft's files (`../adapter`)" if "LoRA" in tuning
                                                    else "")] if tuning else []), f"- max lr (one-cycle): {lr:g}",
             f"- batch size: {batch_size}", f"- seed: {seed}", "",
             "## Evaluation on the test split", "",
             "Relative L2 over space and time (\"l2 full\"), rolled out auto-regressively from the first "
             "T_in frames of each test trajectory, over the first 1 and 5 steps and the whole rollout, at the file's "
             "own grid; persistence repeats the last input frame.", "",
             f"| dataset | trajectories | rollout | {start_col} | {kind} | persistence |",
             "|---|---|---|---|---|---|"]
    notes = []
    for r in final:
        z = zero.get(r.name)
        for h in sorted(r.short_horizons):
            zh = z.short_horizons.get(h) if z else None
            ph = r.persistence.short_horizons.get(h) if r.persistence else None
            lines.append(f"| {r.name} | {r.n_trajectories} | {h} step(s) | {_fmt(zh)} | {_fmt(r.short_horizons[h])} | "
                         f"{_fmt(ph)} |")
        lines.append(f"| {r.name} | {r.n_trajectories} | full ({r.horizon} steps) | {_fmt(z.l2_full if z else None)} | "
                     f"{_fmt(r.l2_full)} | {_fmt(r.persistence.l2_full if r.persistence else None)} |")
        what, _, _, note = headline(r)
        if note:
            notes.append(f"- {r.name}: {note}.")
    lines += ["", *notes] if notes else []
    lines += ["", "## Command", "", "```bash", portable_command(command) or "(not started from the opzoo command line)",
              "```", "",
              "## Configuration", "", "```json", "${config}", "```", "",
              "## Usage", "", "```python", "import opzoo", 'model = opzoo.from_pretrained("PATH_OR_REPO")', "```", ""]
    return "\n".join(lines)


__all__ = ["run_card", "base_model_id", "split_text", "portable_command"]
