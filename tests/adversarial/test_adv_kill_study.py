"""kill -9, SIGTERM and SIGHUP of `invoke study`: no backend survives, and no reader calls the run complete.

The backend is the scripted test server (tests/servers) started through `sh -c '… & wait'`, so
its server is a grandchild in the backend's process group (what a forking server looks like),
plus an aux worker: the leader's parent-death signal alone would not reach the grandchild,
the study's reaper must. Each backend process carries a marker in its environment, found
afterwards in /proc.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest
from advkit import invoke, one_error_line
from invoking import INVOKE
from studykit import SCRIPTED, SLOW_STARTED, wait_for_line, write_study

from openjev_repro.evidence.rundir import RunDir

pytestmark = pytest.mark.slow


def marked(marker: str) -> list[int]:
    """Live pids whose environment holds ADV_MARKER=marker."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if f"ADV_MARKER={marker}".encode() in env.split(b"\0") and state != "Z":
            pids.append(int(entry.name))
    return pids


def start_study(tmp_path: Path, marker: str) -> tuple[subprocess.Popen, Path]:
    env = {"SCRIPTED_FAULT": "slow", "SCRIPTED_AFTER": "3", "ADV_MARKER": marker}
    backend = {"name": "one", "command": ["sh", "-c", '"$0" "$1" --port "$2" & wait', "{python}", str(SCRIPTED),
                                          "{port}"], "env": env,
               "aux": [{"name": "worker", "command": ["{python}", str(SCRIPTED), "--port", "{port}"],
                        "env": {"ADV_MARKER": marker}}]}
    recipe = write_study(tmp_path, [backend], n=4, protocol={"request_timeout_s": 30.0})
    proc = subprocess.Popen([*INVOKE, "study", "--recipe", str(recipe), "--out", str(tmp_path / "runs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = list((tmp_path / "runs").glob("*/rows.jsonl"))
        if rows and len(rows[0].read_text().splitlines()) >= 3 and len(marked(marker)) >= 3:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    else:
        pytest.fail("the study never reached its slow request")
    wait_for_line(rows[0].parent, "logs/one.log", SLOW_STARTED)  # inside the slow request now
    return proc, rows[0].parent


def wait_gone(marker: str, seconds: float = 10) -> list[int]:
    deadline = time.monotonic() + seconds
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return marked(marker)


def test_kill_9_leaves_no_backend_and_a_stale_run(tmp_path):
    marker = secrets.token_hex(8)
    proc, run_path = start_study(tmp_path, marker)
    assert len(marked(marker)) == 3  # sh, its server child, and the aux worker
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert wait_gone(marker) == []
    run = RunDir(run_path)
    assert run.state_record().status == "running"  # kill -9 cannot write; every reader must see through it
    effective = run.effective_state_record().to_json()
    assert effective["status"] == "incomplete" and effective["error"].startswith("stale run: state.json says running")
    report = invoke("report", "--run", str(run_path), "--out", str(tmp_path / "report"))
    assert report.returncode == 1 and "INCOMPLETE RUN" in report.stdout and "stale run" in report.stdout
    assert report.stderr.startswith("error: INCOMPLETE RUN")
    sign = one_error_line(invoke("sign", "--run", str(run_path)))
    assert sign.startswith(f"error: {run_path} has status 'incomplete' (stale run: state.json says running, but ")
    compare = one_error_line(invoke("compare", "--baseline", str(run_path), "--candidate", str(run_path)))
    assert "is not a complete run (status 'incomplete')" in compare
    verify = one_error_line(invoke("verify", "--run", str(run_path), "--allow-unsigned"))
    assert "is an incomplete run (status 'incomplete')" in verify


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_are_handled_like_ctrl_c(tmp_path, sig):
    marker = secrets.token_hex(8)
    proc, run_path = start_study(tmp_path, marker)
    os.kill(proc.pid, sig)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # the console log is stderr too
    assert len(errors) == 1 and errors[0].startswith(f"error: Interrupted: stopped by {sig.name} (handled like Ctrl-C)")
    assert marked(marker) == []  # stopped by the study itself, before it exited
    state = RunDir(run_path).state_record()
    assert state.status == "incomplete" and f"stopped by {sig.name}" in state.error
    assert not list(run_path.rglob(".*.tmp"))
