"""Running code in a fresh interpreter of this environment (for env-dependent behaviour)."""

import os
import subprocess
import sys


def run_python(code: str, env: dict | None = None, cwd=None, timeout=300):
    """Run ``code`` in a fresh interpreter of this environment; returns CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", code], env=full_env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
