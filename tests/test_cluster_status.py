"""cluster/status.py on a real submission directory, with Slurm's answers scripted (no Slurm runs here):
how `settle` records an ended task in its attempt record and run, and what `invoke status` shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openjev_repro.cluster import status
from openjev_repro.cluster.slurm import JobState
from openjev_repro.cluster.submission import ATTEMPT_FORMAT_VERSION, Submission
from openjev_repro.evidence.files import write_json_atomic
from openjev_repro.evidence.rundir import RunDir

ELSEWHERE = {"pid": 1, "host": "another-host"}  # a study on another machine: never called stale here


def _state(job: int, array: int, task: int, state: str, reason: str | None = None) -> JobState:
    return JobState(job, array, task, state, reason, "n1", 0, "sacct")


@pytest.fixture
def sub(tmp_path: Path) -> Submission:
    sub = Submission.create(tmp_path, "s", {"replicates": 5})
    sub.add_round(100, [1, 2, 3, 4, 5], tmp_path / "job-1.sh", [])
    return sub


def _run(sub: Submission, k: int, name: str, state: str, **extra: object) -> RunDir:
    (sub.replicate_dir(k) / name).mkdir()
    run = RunDir(sub.replicate_dir(k) / name)
    run.write_state({"status": state, **extra})
    return run


def _attempt(sub: Submission, k: int, job: int, outcome: str, run: str | None, **extra: object) -> Path:
    path = sub.replicate_dir(k) / f"attempt-{job}.json"
    slurm = {"job_id": str(job), "array_job_id": "100", "array_task_id": k, "node": "n1", "partition": None, "gpu": None,
             "env": {}}
    write_json_atomic(path, {"format_version": ATTEMPT_FORMAT_VERSION, "job_id": job, "outcome": outcome, "run": run,
                             "slurm": slurm, **extra})
    return path


def test_an_ended_task_is_settled_in_its_attempt_record_and_its_run(sub: Submission, monkeypatch) -> None:
    cancelled = _run(sub, 1, "r", "running", owner=ELSEWHERE)
    killed = _attempt(sub, 1, 1001, "running", "r")
    timed_out = _run(sub, 2, "r", "incomplete", error="the study stopped")
    _attempt(sub, 2, 1002, "terminated", "r")
    complete = _run(sub, 3, "r", "complete")
    finished = _attempt(sub, 3, 1003, "complete", "r")
    still = _run(sub, 4, "r", "running", owner=ELSEWHERE)
    _attempt(sub, 4, 1004, "running", "r")
    states = {(100, 1): _state(1001, 100, 1, "CANCELLED", "user"), (100, 2): _state(1002, 100, 2, "TIMEOUT"),
              (100, 3): _state(1003, 100, 3, "COMPLETED"), (100, 4): _state(1004, 100, 4, "RUNNING")}
    monkeypatch.setattr(status, "job_states", lambda ids, output_under: states)

    rows = {row.replicate: row for row in status.replicate_status(sub)}

    record = json.loads(killed.read_text())
    assert record["outcome"] == "killed" and record["slurm_final"]["state"] == "CANCELLED"
    assert cancelled.state_record().status == "incomplete"
    assert cancelled.state_record().error == "terminated by Slurm (CANCELLED, reason user)"
    assert timed_out.state_record().error == "terminated by Slurm (TIMEOUT); the study stopped"  # Slurm's cause first
    assert "slurm_final" not in json.loads(finished.read_text()) and complete.state_record().status == "complete"
    assert still.state_record().status == "running"  # Slurm says it still runs: nothing to settle
    assert [rows[k].evidence for k in range(1, 6)] == ["incomplete", "incomplete", "unsigned", "running", "none"]
    assert rows[1].to_json()["terminations"][0]["state"] == "CANCELLED" and rows[4].terminated == []
    assert rows[5].slurm.state == "UNKNOWN" and rows[5].runs == 0


def test_an_aged_out_task_is_shown_from_its_own_end_record(sub: Submission, monkeypatch) -> None:
    _attempt(sub, 1, 1001, "killed", None, slurm_final={"state": "PREEMPTED", "reason": None})
    _attempt(sub, 2, 1002, "skipped", None)
    monkeypatch.setattr(status, "job_states", lambda ids, output_under: {})

    rows = {row.replicate: row for row in status.replicate_status(sub)}

    assert rows[1].slurm.state == "PREEMPTED" and rows[1].slurm.source == "attempt-1001.json"
    assert rows[2].slurm.state == "COMPLETED"  # skipped: it had complete evidence already
    assert rows[3].slurm.reason == "not in squeue/sacct and no attempt record"


@pytest.mark.slow  # runs squeue (a real Slurm client) that does not answer: tests/tiers.py's rule does not see it
def test_a_task_stopped_while_slurm_does_not_answer_still_marks_its_run_incomplete(sub: Submission) -> None:
    """At SIGTERM the task asks Slurm why; when Slurm cannot say (no such job, slurmctld down, no Slurm
    here), the run's state.json still records the end, with the error of asking and no state."""
    from openjev_repro.cluster import task

    run = _run(sub, 1, "r", "running", owner=ELSEWHERE)
    end = task._slurm_end("999999999")
    task._mark_incomplete(run.path, end, "terminated by Slurm (SIGTERM)")

    state = run.state_record()
    assert state.status == "incomplete" and state.error == "terminated by Slurm (SIGTERM)"
    assert state.slurm_end == end and end.state is None and end.error
    assert json.loads(run.file("state.json").read_text())["slurm_end"].keys() == {"state", "reason", "error"}
