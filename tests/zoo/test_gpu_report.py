"""benchmarks/gpu_report.py: the one-command GPU report, run at tiny sizes on CPU (issue 16)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_report  # noqa: E402

SECTIONS = [
    "## Checks on the device",
    "## Parity: opzoo dpot vs the official DPOT code, same weights",
    "## opzoo vs the official DPOT code: forward + backward per training step",
    "## bf16 training throughput (opzoo bf16 autocast vs the official code in float32)",
    "## aot-pot-t vs dpot-ti at batch 1",
    "## opzoo FNO vs neuraloperator",
    "## MoE presets vs dpot-ti",
]


def table_rows(report: str, section: str) -> list[list[str]]:
    """The body rows of the first Markdown table after heading ``section``, as cells."""
    body = report.split(section, 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in body.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in rows[2:]]


def check_report(report: str) -> None:
    positions = [report.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    parity = table_rows(report, SECTIONS[1])
    assert [r[:2] for r in parity] == [["dpot-ti", "1"], ["dpot-ti", "2"]]
    assert all(float(r[2]) < float(r[3]) for r in parity)  # the same function, within the tolerance
    timing = table_rows(report, SECTIONS[2])
    assert [(r[0], r[2]) for r in timing] == [("dpot-ti", "1"), ("dpot-ti", "2"), ("aot-pot-t", "1"), ("aot-pot-t", "2")]
    for r in timing:  # official ms, opzoo ms, ratio of medians = opzoo / official
        official, ours, ratio = float(r[3]), float(r[4]), float(r[5])
        assert official > 0 and ours > 0 and ratio == pytest.approx(ours / official, rel=2e-2, abs=2e-3)
    throughput = table_rows(report, SECTIONS[3])
    assert [r[0] for r in throughput] == ["official dpot-ti, float32", "opzoo dpot-ti, float32",
                                          "opzoo dpot-ti, bf16 autocast"]
    assert throughput[0][4] == "1.00x"
    aot = table_rows(report, SECTIONS[4])
    assert [r[0] for r in aot] == ["dpot-ti", "aot-pot-t", "aot-pot-t, eager PyTorch path"] and aot[0][3] == "1.000"
    assert re.search(r"\| aot-pot-t \| 1 \| [\d.]+ \| [\d.]+ \|", report)


@pytest.mark.slow  # 8 s: a benchmark script's whole report
def test_quick_report_without_checks(tmp_path):
    """The whole report at tiny sizes in this process (the pytest checks are the slow test's)."""
    out = tmp_path / "report.md"
    assert gpu_report.main(["--device", "cpu", "--quick", "--skip-checks", "--rounds", "1", "--out", str(out)]) == 0
    report = out.read_text()
    check_report(report)
    assert "Skipped (`--skip-checks`)." in report
    assert "- device: CPU" in report and "--quick" in report


def test_pytest_summary_reads_the_last_summary_line():
    stdout = "....F\n=== short test summary info ===\nFAILED t.py::x\n==== 1 failed, 4 passed in 3.1s ====\n"
    assert gpu_report.pytest_summary(stdout) == "1 failed, 4 passed in 3.1s"
    assert gpu_report.pytest_summary("") == "no output"


@pytest.mark.slow
def test_gpu_report_sh_quick_on_cpu(tmp_path):
    """The shell entry point end to end, with the pytest checks on a small selection."""
    out = tmp_path / "report.md"
    result = subprocess.run([str(ROOT / "benchmarks" / "gpu_report.sh"), "--device", "cpu", "--quick", "--out", str(out)],
                            cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = out.read_text()
    check_report(report)
    checks = table_rows(report, SECTIONS[0])
    assert [c[0] for c in checks] == [f"`pytest {p} -k 'simple-op and not inductor' -m 'slow or not slow'`" for p in gpu_report.CHECK_FILES]
    assert all(c[1].startswith("ok: ") and " passed" in c[1] and "failed" not in c[1] for c in checks), checks
