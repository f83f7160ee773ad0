"""The one way tests run `invoke TASK ...`: a real subprocess of this interpreter, output captured.

    invoke("verify", "--run", str(run), "--pubkey", str(key))
    invoke("plan", "--recipe", str(recipe), "--json", cwd=tmp_path, timeout=60)

Runs `python -m invoke` in `cwd` (the repository by default, where tasks.py is) with stdin closed,
text output captured and the exit status left to the test to assert; COLUMNS=100 gives rich output
a fixed width, and no .pyc files are written into the tree. `env` adds to (never replaces) this
process's environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["INVOKE", "REPO", "invoke"]

REPO = Path(__file__).resolve().parents[1]
INVOKE = [sys.executable, "-m", "invoke"]


def invoke(*args: str, cwd: Path = REPO, timeout: float = 120, env: Mapping[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    """`invoke ARGS...` as a subprocess; returns the finished process (returncode, stdout, stderr)."""
    full_env = {**os.environ, "COLUMNS": "100", "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    return subprocess.run([*INVOKE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=full_env, stdin=subprocess.DEVNULL, check=False)
