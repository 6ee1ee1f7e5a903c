"""``opzoo verify``: fetch each preset's published files and run every check on them.

For each preset with published weights: download (or find in the Hugging Face cache) the weights and
the source's ``extra_files``, convert them when they are foreign, check names and shapes against the
preset built on the ``meta`` device (no memory), then run every :class:`opzoo.PretrainedCheck`. One
row per check: preset, repo, revision, check, passed or failed, and what was measured.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Iterable

from ..errors import ConfigError, HubError, OpzooError, WeightsError
from ..registry.provenance import CheckResult, run_checks


@dataclasses.dataclass
class VerifyRow:
    preset: str
    repo: str
    revision: str
    check: str
    status: str  # "passed", "FAILED" or "not run"
    message: str


def select_presets(patterns: Iterable[str], all_presets: bool) -> list[str]:
    """The presets with published weights that ``patterns`` (names, aliases or fnmatch patterns) name."""
    from ..registry.registry import get_registry

    registry = get_registry()
    published = [n for n in registry.list_models() if registry.preset(n).pretrained is not None]
    if all_presets:  # a file downloaded by hand is verified one preset at a time (--file)
        return [n for n in published if registry.preset(n).pretrained.download_page is None]
    chosen: list[str] = []
    for pattern in patterns:
        if registry.has_preset(pattern):
            name = registry.preset(pattern).name
            if registry.preset(name).pretrained is None:
                raise ConfigError(f"{name} publishes no weights: there is nothing to verify")
            found = [name]
        else:
            found = [n for n in published if fnmatch.fnmatchcase(n, pattern)]
            if not found:
                raise ConfigError(f"no preset with published weights matches {pattern!r} (`opzoo list --pretrained`)")
        chosen += [n for n in found if n not in chosen]
    return chosen


def verify_preset(name: str, local_files_only: bool = False, file: str | None = None) -> list[VerifyRow]:
    """Every check of preset ``name`` on its real files (``local_files_only``: those in the Hugging Face cache,
    without asking the Hub; ``file``: a local copy of its weights file, e.g. one downloaded by hand); a file that
    cannot be had is one 'not run' row."""
    import torch

    from ..registry.provenance import snapshot_revision
    from ..registry.registry import get_registry
    from .builder import build_preset
    from .pretrained import fetch_pretrained, pretrained_files
    from .weights import check_finite, check_state_dict

    preset = get_registry().preset(name)
    if file is not None:
        from pathlib import Path

        from .pretrained import overlaid

        path = Path(file)
        if not path.is_file():
            kind = ("a directory: name the weights file in it" if path.is_dir() else
                    "not a regular file (a FIFO or a device)" if path.exists() else "no such file")
            raise ConfigError(f"--file {file}: {kind}")
        preset, _ = overlaid(preset, {"directory": str(path.parent.resolve()), "filename": path.name})
    src = preset.pretrained
    repo = src.location
    with torch.device("meta"):
        model = build_preset(preset)
    try:  # the files first: only a file that cannot be had makes a 'not run' row
        with pretrained_files(src, local_files_only, name) as files:
            revision = snapshot_revision(next(iter(files.values()))) or (src.revision or "-")
    except HubError as e:
        return [VerifyRow(name, repo, src.revision or "-", "fetch the published files", "not run",
                          " ".join(str(e).split()))]
    try:
        with fetch_pretrained(preset, model.config, local_files_only) as (artifacts, where):
            revision = artifacts.revision or (src.revision or "-")
            try:
                check_state_dict(model, {k: tuple(v.shape) for k, v in artifacts.state_dict.items()}, where)
                check_finite(artifacts.state_dict, where)  # every load refuses NaN/Inf weights: so does verify
                fits = CheckResult("weights fit the preset", True, f"{len(artifacts.state_dict)} tensors, names and "
                                                                   f"shapes as {preset.backbone} expects, all finite")
            except WeightsError as e:
                fits = CheckResult("weights fit the preset", False, " ".join(str(e).split()))
            results = [fits, *run_checks(src.checks, artifacts)]
    except (OpzooError, OSError, ValueError, KeyError) as e:  # the files are there: why they do not convert is the result
        why = str(e) if isinstance(e, OpzooError) else f"{type(e).__name__}: {e}"
        return [VerifyRow(name, repo, revision, "the published files convert", "FAILED", " ".join(why.split()))]
    return [VerifyRow(name, repo, revision, r.check, "passed" if r.passed else "FAILED", r.message) for r in results]


def offline_reason() -> str | None:
    """Why nothing can be fetched (offline mode, or the Hub unreachable within the usual wait), or None."""
    from huggingface_hub import constants

    from .hub import hub_unreachable, hub_wait

    if constants.is_offline_mode():
        return "HF_HUB_OFFLINE=1 is set"
    reason = hub_unreachable()
    return None if reason is None else f"the Hub could not be reached ({reason}, tried for {hub_wait():g} s)"


def verify(names: list[str], file: str | None = None) -> list[VerifyRow]:
    """Rows for every check of every preset in ``names``. Without a network, the presets whose files are
    in the cache are verified; when none is, a one-line HubError says what ``opzoo verify`` needs. ``file``: the
    weights file of the one preset named, a local copy (checked as its published file). A preset whose file is
    downloaded by hand (a download page) and not given is that one-line HubError when it is the only one."""
    from ..registry.registry import get_registry

    registry = get_registry()
    if file is not None and len(names) != 1:
        raise ConfigError(f"--file checks the weights file of one preset; {len(names)} are named")
    sources = [registry.preset(n).pretrained for n in names]
    if file is None and len(names) == 1 and sources[0].download_page is not None:
        from .pretrained import download_refusal

        raise HubError(download_refusal(sources[0], names[0]))
    hub = file is None and any(s.repo_id is not None for s in sources)
    offline = offline_reason() if hub else None  # directory sources need no network
    # without a network every look-up answers from the cache alone: no wait per file
    rows = [row for name in names for row in verify_preset(name, local_files_only=bool(offline), file=file)]
    if offline and all(r.status == "not run" for r in rows):
        raise HubError(f"opzoo verify downloads each preset's published files from the Hugging Face Hub, and {offline}; "
                       f"none of the {len(names)} preset(s) has its files in the cache. Run it on a machine with "
                       f"network, or fetch the files first (`opzoo info NAME` names the repo; `hf download REPO`)")
    return rows


def format_table(rows: list[VerifyRow]) -> str:
    head = ("preset", "repo", "revision", "check", "result")
    cells = [head] + [(r.preset, r.repo, r.revision[:12], r.check, r.status) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    details = [f"- {r.preset} / {r.check}: {r.message}" for r in rows]
    return "\n".join(lines + ["", *details])


__all__ = ["VerifyRow", "select_presets", "verify", "verify_preset", "offline_reason", "format_table"]
