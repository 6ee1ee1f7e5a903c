"""What a preset says about its published weights, where each fact comes from, and the checks that
confirm the facts on the real files when they are loaded.

* :class:`Fact` is one row of a provenance table: a fact about a preset (its repo id, resolution,
  normalization, license, ...), its source (an upstream path at a commit, or a URL) and whether the
  source settles it. A fact upstream leaves open is ``verified=False`` and lists its ``alternatives``.
  Presets carry their rows (``registry.register_model(..., provenance=...)``); ``opzoo info`` shows them.
* :class:`PretrainedCheck` is an assumption tested on the downloaded files before a model is
  returned (``PretrainedSource(checks=...)``): ``opzoo.load(name, pretrained=True)`` refuses weights
  that fail one, and ``opzoo verify`` runs every check and prints a table. This way the first user
  with network access confirms each unverified assumption, or is refused loudly.

Nothing here imports torch: the registry (and ``opzoo list``) use these types.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import CheckpointError

if TYPE_CHECKING:
    import torch


@dataclasses.dataclass(frozen=True)
class Fact:
    """One fact about a preset or its weights, and its source."""

    topic: str  # what the fact is about: "repo id", "resolution", "normalization stats", "license", ...
    value: str
    source: str  # an upstream path at a commit, or a URL
    verified: bool = True  # False: the source does not settle it (see alternatives)
    alternatives: tuple[str, ...] = ()  # the other readings a user could meet, for an unverified fact

    def __post_init__(self) -> None:
        if not self.source:
            raise ValueError(f"Fact {self.topic!r}: every fact needs a source (an upstream path at a commit, or a URL)")
        if self.verified and self.alternatives:
            raise ValueError(f"Fact {self.topic!r}: alternatives are for unverified facts")

    @property
    def status(self) -> str:
        return "verified" if self.verified else "UNVERIFIED"

    def line(self) -> str:
        """The fact on one line, for ``opzoo info``."""
        alt = f"; alternatives: {' | '.join(self.alternatives)}" if self.alternatives else ""
        return f"{self.topic}: {self.value} [{self.status}; {self.source}{alt}]"


@dataclasses.dataclass(frozen=True)
class Result:
    """One measured number of a model, for its card's Hugging Face ``model-index``: ``metric`` (e.g.
    ``"l2_full"``, ``"VRMSE"``) on ``dataset`` (its ``split``), and who measured it: ``measured_by`` is
    ``"opzoo"`` or the upstream project (a number reported by upstream is theirs, with its ``source``)."""

    dataset: str
    metric: str
    value: float
    measured_by: str
    source: str | None = None  # where the number is written: a file at a commit, or a URL
    split: str | None = None
    metric_name: str | None = None  # the metric in words, e.g. "relative L2 over the whole rollout"
    task: str = "pde-rollout"

    def __post_init__(self) -> None:
        if not self.measured_by:
            raise ValueError(f"Result {self.metric} on {self.dataset}: say who measured it (opzoo or upstream)")
        if self.measured_by != "opzoo" and not (self.source or "").startswith("https://"):
            raise ValueError(f"Result {self.metric} on {self.dataset}: a number reported by {self.measured_by} needs "
                             f"its source as a URL (the file at a commit), got {self.source!r}")

    @classmethod
    def from_eval(cls, document: Mapping[str, Any], split: str, metric: str = "l2_full",
                  source: str | None = None) -> list["Result"]:
        """opzoo's own numbers from an ``eval.json`` (``opzoo eval``'s or a run's ``eval/step-N.json``): ``metric``
        of every dataset in it."""
        out = []
        for name, doc in document.get("datasets", {}).items():
            out.append(cls(name, metric, float(doc[metric]), "opzoo", source, split,
                           "relative L2 over the whole rollout" if metric == "l2_full" else None))
        return out


@dataclasses.dataclass(frozen=True)
class PretrainedArtifacts:
    """What a :class:`PretrainedCheck` sees: the files fetched for a preset's weights (by name: the
    weights file and the source's ``extra_files``), the tensors about to be loaded (opzoo's names,
    after any converter) and the config of the model they go into."""

    preset: str
    files: Mapping[str, Path]
    state_dict: Mapping[str, "torch.Tensor"]
    model_config: Any
    revision: str | None = None  # the Hub commit the files come from, when known


@dataclasses.dataclass(frozen=True)
class PretrainedCheck:
    """An assumption about a preset's published weights, tested on the real files.

    ``run(artifacts)`` returns one line saying what it measured when the assumption holds, and raises
    :class:`CheckFailed` (saying what it measured, what it expected and what to do) when it does not.
    A check that does not apply to the loaded config returns a line starting with ``"skipped"``.
    """

    name: str
    run: Callable[[PretrainedArtifacts], str]


class CheckFailed(CheckpointError):
    """A :class:`PretrainedCheck` found that the weights are not what the preset assumes."""


@dataclasses.dataclass(frozen=True)
class CheckResult:
    check: str
    passed: bool
    message: str


def run_checks(checks: tuple[PretrainedCheck, ...], artifacts: PretrainedArtifacts) -> list[CheckResult]:
    """Every check on ``artifacts``, none skipped because another failed. A check that cannot run on these
    files (a tensor it reads is missing, say) fails, with the reason: it confirmed nothing."""
    results = []
    for check in checks:
        try:
            results.append(CheckResult(check.name, True, check.run(artifacts)))
        except CheckFailed as e:
            results.append(CheckResult(check.name, False, str(e)))
        except (KeyError, IndexError, ValueError, TypeError, AttributeError, OSError) as e:
            results.append(CheckResult(check.name, False, f"could not run on these files ({type(e).__name__}: {e})"))
    return results


def refuse_failed(preset: str, results: list[CheckResult], weights: str = "the published weights") -> None:
    """Raise one CheckFailed naming every failed check of ``preset``'s ``weights`` (the published ones, or a user's
    file given as ``checkpoint_path``)."""
    failed = [r for r in results if not r.passed]
    if failed:
        details = "; ".join(f"[{r.check}] {r.message}" for r in failed)
        raise CheckFailed(f"{preset}: {weights} fail {len(failed)} load check(s), so they are not what this "
                          f"preset assumes and nothing was loaded: {details}")


_SNAPSHOT = re.compile(r"^[0-9a-f]{40}$")


def snapshot_revision(path: Path) -> str | None:
    """The commit of a file in the Hugging Face cache (``.../snapshots/<commit>/<file>``), else None."""
    parts = Path(path).parts
    for i in range(len(parts) - 1, 0, -1):
        if parts[i - 1] == "snapshots" and _SNAPSHOT.match(parts[i]):
            return parts[i]
    return None


__all__ = ["Fact", "PretrainedArtifacts", "PretrainedCheck", "CheckFailed", "CheckResult", "run_checks",
           "refuse_failed", "snapshot_revision"]
