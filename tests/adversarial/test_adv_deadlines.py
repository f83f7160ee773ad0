"""Cause 9 of issue 25: deadlines are wall-clock deadlines. A /health or a response trickled one
byte at a time is cut at its deadline, and a SIGSTOPped backend is declared dead within the
request timeout (not after every remaining request has timed out)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time

import pytest
from advkit import INVOKE, invoke
from studykit import scripted_backend, write_study
from test_adv_kill_study import marked

from openjev_repro.evidence.rundir import RunDir

pytestmark = pytest.mark.slow


def _errors(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def test_a_trickling_health_is_cut_at_the_readiness_deadline(tmp_path):
    backend = scripted_backend("trickle", "trickle_health")
    # a ~70-byte /health answer takes ~210 s: the bound below is half of that, not a guess at the machine's speed
    backend["env"]["SCRIPTED_TRICKLE_S"] = "3"
    recipe = write_study(tmp_path, [backend], protocol={"ready_timeout_s": 2.0})
    started = time.monotonic()
    proc = invoke("study", "--recipe", str(recipe), "--out", str(tmp_path / "runs"), timeout=400)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [error] = _errors(proc)
    assert "was not ready within 2 s" in error and "no complete answer before the deadline" in error
    assert elapsed < 70 * 3 / 2, elapsed  # cut at the 2 s deadline, long before the trickle could end
    [run] = (tmp_path / "runs").iterdir()
    assert RunDir(run).state_record().status == "incomplete"


def test_a_trickled_response_is_a_timeout_not_a_slow_success(tmp_path):
    backend = scripted_backend("trickle", "trickle", after=2)
    backend["env"]["SCRIPTED_TRICKLE_S"] = "0.05"  # a ~200-byte answer takes ~10 s, a byte every 50 ms
    recipe = write_study(tmp_path, [backend], n=3, protocol={"request_timeout_s": 1.0})
    started = time.monotonic()
    proc = invoke("study", "--recipe", str(recipe), "--out", str(tmp_path / "runs"), timeout=120)
    assert proc.returncode == 1 and time.monotonic() - started < 120  # a guard against a hang; the rows below are the check
    [run] = (tmp_path / "runs").iterdir()
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
    assert all((r["end_ns"] - r["start_ns"]) / 1e9 < 1.0 for r in rows if r["error"] is None)
    timed_out = [r for r in rows if r["error"]]
    assert timed_out and timed_out[0]["error"].startswith("ClientTimeout: ")
    assert "did not answer a request completely within 1 s" in timed_out[0]["error"]


def _rows(runs) -> list[dict]:
    found = list(runs.glob("*/rows.jsonl"))
    if not found:
        return []
    lines = found[0].read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]  # a row being written is left out


def test_a_stopped_backend_is_declared_dead_within_the_request_timeout(tmp_path, request):
    # What is asserted is counted, not timed: after the stop exactly one request is sent (and times
    # out), then the run stops. The wall-clock bound only separates that from "every remaining request
    # timed out" (20 or more timeouts of 2 s), with room for a loaded machine.
    marker = secrets.token_hex(8)
    backend = scripted_backend("stopped")
    backend["env"].update(SCRIPTED_DELAY_S="0.1", ADV_MARKER=marker)
    recipe = write_study(tmp_path, [backend], n=8, protocol={"request_timeout_s": 2.0, "measured_passes": 3})
    proc = subprocess.Popen([*INVOKE, "study", "--recipe", str(recipe), "--out", str(tmp_path / "runs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    request.addfinalizer(lambda: [os.kill(p, signal.SIGKILL) for p in marked(marker)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_rows(tmp_path / "runs")) < 3:  # a few requests in
        time.sleep(0.05)
    [pid] = marked(marker)
    os.kill(pid, signal.SIGSTOP)
    rows_before = len(_rows(tmp_path / "runs"))
    stopped_at = time.monotonic()
    _out, err = proc.communicate(timeout=180)
    took = time.monotonic() - stopped_at
    assert proc.returncode == 1 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Backend stopped died during" in errors[0], err[-2000:]
    rows = _rows(tmp_path / "runs")
    after = rows[rows_before:]
    # the request in flight at the stop (and at most one sent just before the stop was seen) times out; none after
    assert 1 <= len(after) <= 2 and after[-1]["error"].startswith("ClientTimeout: "), after
    assert all(row["error"] is None for row in after[:-1]), after
    remaining = 8 * (1 + 3) - rows_before  # feasibility and measured passes left at the stop
    assert took < 2.0 * remaining / 2, (took, remaining)  # far below one timeout per remaining request
    assert marked(marker) == []  # the stopped backend was continued and stopped, not left behind
