"""Cause 8 of issue 25: the terminating path is idempotent, and a study started with --key is
complete only once its manifest is written."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time

import pytest
from advkit import invoke, one_error_line
from audit_kit import build_run, keypair
from test_adv_kill_study import marked, start_study

from openjev_repro.evidence.rundir import RunDir

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_burst_of_signals_ends_incomplete_with_one_error_line(tmp_path, sig):
    marker = secrets.token_hex(8)
    proc, run_path = start_study(tmp_path, marker)
    for _ in range(40):  # a burst: the later ones land in the middle of the terminating path
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            break
        time.sleep(0.005)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, (proc.returncode, err[-2000:])
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: Interrupted: "), err[-2000:]
    state = RunDir(run_path).state_record()
    assert state.status == "incomplete", state
    assert marked(marker) == []


def test_a_study_started_with_a_key_records_it(tmp_path):
    from studykit import scripted_backend, write_study

    private, public = keypair(tmp_path / "k")
    recipe = write_study(tmp_path, [scripted_backend("scripted")], n=2)
    proc = invoke("study", "--recipe", str(recipe), "--out", str(tmp_path / "runs"), "--key", str(private),
                  timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [run] = (tmp_path / "runs").iterdir()
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "complete" and state["signing_requested"] is True
    assert invoke("verify", "--run", str(run), "--pubkey", str(public)).returncode == 0


def test_complete_without_the_requested_manifest_reads_incomplete(tmp_path):
    """What kill -9 between "complete" and the manifest leaves: every reader says incomplete."""
    run = build_run(tmp_path / "runs")
    gone = subprocess.Popen(["true"])
    gone.wait()
    run.update_state(signing_requested=True, owner=dict(run.state_record().to_json()["owner"], pid=gone.pid))
    effective = run.effective_state_record().to_json()
    assert effective["status"] == "incomplete"
    assert effective["error"].startswith("state.json says complete, but the study was started with --key")
    compare = one_error_line(invoke("compare", "--baseline", str(run.path), "--candidate", str(run.path)))
    assert "is not a complete run (status 'incomplete')" in compare
    sign = one_error_line(invoke("sign", "--run", str(run.path)))
    assert f"{run.path} has status 'incomplete'" in sign
    report = invoke("report", "--run", str(run.path), "--out", str(tmp_path / "report"))
    assert report.returncode == 1 and "INCOMPLETE RUN" in report.stdout
