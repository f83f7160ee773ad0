"""The environment of a subprocess that runs Triton kernels on CPU under Triton's interpreter.

triton comes from OPENJEV_TRITON_PATH (.ci/run installs triton 3.6.0 into .cache/triton-interpreter);
the tests that need it skip where it cannot be imported, or fail with OPENJEV_REQUIRE_TRITON=1 (CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def interpreter_env() -> dict[str, str]:
    """The environment of a subprocess that runs Triton kernels under the interpreter; skip (or, with
    OPENJEV_REQUIRE_TRITON=1, fail) where triton cannot be imported."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("OPENJEV_TRITON_PATH", "")) if p)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    probe = subprocess.run([sys.executable, "-c", "import triton"], capture_output=True, text=True, env=env, check=False)
    if probe.returncode != 0:
        if os.environ.get("OPENJEV_REQUIRE_TRITON") == "1":
            pytest.fail(f"OPENJEV_REQUIRE_TRITON=1 but triton does not import from {path}: {probe.stderr[-300:]}")
        pytest.skip("triton is not importable (set OPENJEV_TRITON_PATH; .ci/run installs it)")
    return env
