"""`invoke status`: each replicate's Slurm state (squeue/sacct JSON) and evidence state.

While a task is being stopped Slurm reports it as COMPLETING, so the task's own SIGTERM record
cannot say whether it was cancelled, timed out or preempted. `settle()` (run by status, resume
and collect) records the final state and reason, once Slurm reports one, in the task's attempt
record (`slurm_final`) and in its run's state.json (`slurm_end`), and marks a run that a
SIGKILL left "running" incomplete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..evidence.files import write_json_atomic
from ..evidence.rundir import RunDir, Status
from .slurm import TERMINAL, JobState, job_states
from .submission import SLURM_CAUSE, Submission, utc_now, with_slurm_cause

__all__ = ["replicate_status", "settle"]


def _final(state: JobState) -> dict[str, Any]:
    return {"state": state.state, "reason": state.reason, "exit_code": state.exit_code, "source": state.source,
            "recorded_utc": utc_now()}


def _ended_state(attempt: dict, states: dict[tuple[int, int | None], JobState]) -> JobState | None:
    """Slurm's final state of an attempt not yet settled whose task ended without finishing; else None."""
    slurm = attempt.get("slurm") or {}
    if attempt.get("slurm_final") or not slurm.get("array_job_id"):
        return None
    state = states.get((int(slurm["array_job_id"]), slurm.get("array_task_id")))
    if state is None or state.state not in TERMINAL or attempt.get("outcome") in ("complete", "skipped"):
        return None
    return state


def _mark_attempt_run(directory: Path, attempt: dict, state: JobState, final: dict[str, Any]) -> None:
    """The attempt's run, unless complete, marked incomplete with Slurm's cause first in its error."""
    run_name = attempt.get("run")
    if not run_name or not (directory / run_name / "state.json").is_file():
        return
    run = RunDir(directory / run_name)
    current = run.state_record()
    if current.status != Status.COMPLETE:
        cause = f"{SLURM_CAUSE} ({state.state}" + (f", reason {state.reason})" if state.reason else ")")
        run.update_state(status=Status.INCOMPLETE, slurm_end=final, error=with_slurm_cause(current.error, cause))


def _settle_attempt(directory: Path, attempt: dict, states: dict[tuple[int, int | None], JobState]) -> None:
    state = _ended_state(attempt, states)
    if state is None:
        return
    final = _final(state)
    attempt["slurm_final"] = final
    if attempt.get("outcome") == "running":  # SIGKILLed before it could write its end
        attempt["outcome"] = "killed"
    write_json_atomic(directory / f"attempt-{attempt['job_id']}.json", attempt)
    _mark_attempt_run(directory, attempt, state, final)


def _settle_latest_run(sub: Submission, k: int, states: dict[tuple[int, int | None], JobState]) -> None:
    """The replicate's latest run, when its file still says running but its Slurm task ended, marked incomplete."""
    runs = sub.runs(k)
    job = sub.latest_job(k)
    state = states.get((job, k)) if job is not None else None
    if not runs or state is None or state.state not in TERMINAL or runs[-1].status == "unreadable":
        return
    if RunDir(runs[-1].path).state_record().status == Status.RUNNING:  # stale or not: its file says so
        RunDir(runs[-1].path).update_state(status=Status.INCOMPLETE, slurm_end=_final(state),
                                           error=f"its Slurm task ended ({state.state}) while it was running")


def settle(sub: Submission, states: dict[tuple[int, int | None], JobState]) -> None:
    """Record how ended tasks ended, in their attempt records and runs (see the module docstring)."""
    for k in sub.replicates:
        directory = sub.replicate_dir(k)
        for attempt in sub.attempts(k):
            _settle_attempt(directory, attempt, states)
        _settle_latest_run(sub, k, states)


def _evidence_word(complete: Any, latest: Any, slurm_state: str | None) -> str:
    """What the replicate's evidence is: complete, none, incomplete, unsigned, signing or the latest run's status."""
    if complete is not None:
        return "complete"
    if latest is None:
        return "none"
    if latest.status == Status.RUNNING and slurm_state in TERMINAL:
        return "incomplete"  # the task was killed before it could write its state
    if latest.status == Status.COMPLETE:  # every pass done, the manifest not (yet) written
        return "unsigned" if slurm_state in TERMINAL else "signing"
    return latest.status


def _evidence(sub: Submission, k: int, slurm_state: str | None) -> dict[str, Any]:
    runs = sub.runs(k)
    complete = sub.complete_run(k)
    latest = runs[-1] if runs else None
    chosen = complete or latest
    return {"evidence": _evidence_word(complete, latest, slurm_state), "runs": len(runs),
            "run": str(chosen.path) if chosen is not None else None,
            "error": None if complete or latest is None else latest.error}


def _slurm_from_attempt(last: dict, job: int | None, k: int) -> dict[str, Any]:
    """Aged out of slurmctld and no accounting: the task's own end record."""
    end = last.get("slurm_final") or last.get("slurm_end") or {}
    by_outcome = {"complete": "COMPLETED", "skipped": "COMPLETED"}.get(str(last.get("outcome")), "UNKNOWN")
    return {"state": end.get("state") or by_outcome,
            "reason": end.get("reason"), "node": (last.get("slurm") or {}).get("node"),
            "source": f"attempt-{last.get('job_id')}.json", "job": f"{job}_{k}", "job_id": last.get("job_id")}


def _slurm_view(sub: Submission, k: int, states: dict[tuple[int, int | None], JobState]) -> dict[str, Any]:
    """The replicate's latest task as Slurm reports it, or as its last attempt record says, or unknown."""
    job = sub.latest_job(k)
    state = states.get((job, k)) if job is not None else None
    if state is not None:
        return {"state": state.state, "reason": state.reason, "node": state.node, "source": state.source,
                "job": f"{job}_{k}", "job_id": state.job_id}
    attempts = [a for a in sub.attempts(k) if (a.get("slurm") or {}).get("array_job_id") == str(job)]
    if attempts:
        return _slurm_from_attempt(attempts[-1], job, k)
    return {"state": "UNKNOWN", "reason": "not in squeue/sacct and no attempt record", "node": None,
            "source": None, "job": f"{job}_{k}" if job else None, "job_id": None}


def _terminations(sub: Submission, k: int) -> list[dict[str, Any]]:
    ended = [a for a in sub.attempts(k) if a.get("outcome") in ("terminated", "killed")]
    return [{"job_id": a.get("job_id"), **(a.get("slurm_final") or a.get("slurm_end") or {})} for a in ended]


def replicate_status(sub: Submission) -> list[dict[str, Any]]:
    states = job_states([r.array_job_id for r in sub.rounds], output_under=f"{sub.path}/")
    settle(sub, states)
    rows = []
    for k in sub.replicates:
        slurm = _slurm_view(sub, k, states)
        rows.append({"replicate": k, "slurm": slurm, **_evidence(sub, k, slurm["state"]),
                     "terminations": _terminations(sub, k)})
    return rows
