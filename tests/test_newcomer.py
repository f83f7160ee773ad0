"""What a new user stumbled on (issue 27), each held by a test: tolerances files that the
commands accept, a collect summary that `invoke verify` checks, UNSIGNED wording, rounding,
exit codes for failed gates, hints. Real subprocesses of `invoke` where the command is the point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_repro.audit.compare import load_tolerances
from openjev_repro.cluster.crosshost import load_cross_host_tolerances
from openjev_repro.errors import RecipeError

REPO = Path(__file__).resolve().parents[1]
TOLERANCES = REPO / "manifests" / "tolerances"


def invoke(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL, check=False)


def test_the_demo_ships_a_tolerances_file_compare_accepts_and_collect_has_the_same_limits_plus_cross_host():
    compare_limits = load_tolerances(TOLERANCES / "demo.yaml")
    collect_limits, cross_host = load_cross_host_tolerances(TOLERANCES / "demo-cross-host.yaml")
    assert collect_limits == compare_limits and cross_host
    with pytest.raises(RecipeError, match=r"cross_host is `invoke collect`'s section.*manifests/tolerances/demo.yaml"):
        load_tolerances(TOLERANCES / "demo-cross-host.yaml")
