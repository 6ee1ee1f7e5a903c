#!/usr/bin/env bash
# One command on a GPU machine (issue 16): the compile and bf16 checks on CUDA, parity with the
# official DPOT code, bf16 training throughput and the benchmarks of docs/benchmarks.md, written
# as one Markdown report (default gpu_report.md; arguments go to benchmarks/gpu_report.py):
#
#   benchmarks/gpu_report.sh                      # everything, on the GPU
#   benchmarks/gpu_report.sh --out report.md --rounds 25
#   benchmarks/gpu_report.sh --device cpu --quick # the same report at tiny sizes, on any machine
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
exec "$PYTHON" benchmarks/gpu_report.py "$@"
