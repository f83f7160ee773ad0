"""Helpers of the adversarial suite: run `invoke` for real, and check the bad-input contract."""

from __future__ import annotations

import subprocess
from pathlib import Path

import invoking

REPO = Path(__file__).resolve().parents[2]
INVOKE = invoking.INVOKE


def invoke(*args: str, timeout: float = 60, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `invoke ARGS` as a real subprocess (tests/invoking.py); returns the completed process (text)."""
    return invoking.invoke(*args, cwd=cwd, timeout=timeout, env=env)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """Assert the bad-input contract: exit 1, no traceback, exactly one stderr line, starting `error:`."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    return lines[0]
