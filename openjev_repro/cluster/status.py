"""`invoke status`: each replicate's Slurm state (squeue/sacct JSON) and evidence state.

While a task is being stopped Slurm reports it as COMPLETING, so the task's own SIGTERM record
cannot say whether it was cancelled, timed out or preempted. `settle()` (run by status, resume
and collect) records the final state and reason, once Slurm reports one, in the task's attempt
record (`slurm_final`) and in its run's state.json (`slurm_end`), and marks a run that a
SIGKILL left "running" incomplete.
"""

from __future__ import annotations

from typing import Any

from ..evidence.files import write_json_atomic
from ..evidence.rundir import RunDir
from .slurm import TERMINAL, JobState, job_states
from .submission import SLURM_CAUSE, Submission, utc_now, with_slurm_cause

__all__ = ["replicate_status", "settle"]


def _final(state: JobState) -> dict[str, Any]:
    return {"state": state.state, "reason": state.reason, "exit_code": state.exit_code, "source": state.source,
            "recorded_utc": utc_now()}


def settle(sub: Submission, states: dict[tuple[int, int | None], JobState]) -> None:
    """Record how ended tasks ended, in their attempt records and runs (see the module docstring)."""
    for k in sub.replicates:
        directory = sub.replicate_dir(k)
        for attempt in sub.attempts(k):
            slurm = attempt.get("slurm") or {}
            if attempt.get("slurm_final") or not slurm.get("array_job_id"):
                continue
            state = states.get((int(slurm["array_job_id"]), slurm.get("array_task_id")))
            if state is None or state.state not in TERMINAL or attempt.get("outcome") in ("complete", "skipped"):
                continue
            final = _final(state)
            attempt["slurm_final"] = final
            if attempt.get("outcome") == "running":  # SIGKILLed before it could write its end
                attempt["outcome"] = "killed"
            write_json_atomic(directory / f"attempt-{attempt['job_id']}.json", attempt)
            run_name = attempt.get("run")
            if run_name and (directory / run_name / "state.json").is_file():
                run = RunDir(directory / run_name)
                current = run.state()
                if current.get("status") != "complete":
                    cause = f"{SLURM_CAUSE} ({state.state}" + (f", reason {state.reason})" if state.reason else ")")
                    run.update_state(status="incomplete", slurm_end=final,
                                     error=with_slurm_cause(current.get("error"), cause))
        runs = sub.runs(k)
        job = sub.latest_job(k)
        state = states.get((job, k)) if job is not None else None
        if runs and state is not None and state.state in TERMINAL and runs[-1].status != "unreadable" \
                and RunDir(runs[-1].path).state().get("status") == "running":  # stale or not: its file says so
            RunDir(runs[-1].path).update_state(status="incomplete", slurm_end=_final(state),
                                               error=f"its Slurm task ended ({state.state}) while it was running")


def _evidence(sub: Submission, k: int, slurm_state: str | None) -> dict[str, Any]:
    runs = sub.runs(k)
    complete = sub.complete_run(k)
    latest = runs[-1] if runs else None
    if complete is not None:
        evidence = "complete"
    elif latest is None:
        evidence = "none"
    elif latest.status == "running" and slurm_state in TERMINAL:
        evidence = "incomplete"  # the task was killed before it could write its state
    elif latest.status == "complete":  # every pass done, the manifest not (yet) written
        evidence = "unsigned" if slurm_state in TERMINAL else "signing"
    else:
        evidence = latest.status
    chosen = complete or latest
    return {"evidence": evidence, "runs": len(runs), "run": str(chosen.path) if chosen is not None else None,
            "error": None if complete or latest is None else latest.error}


def replicate_status(sub: Submission) -> list[dict[str, Any]]:
    states = job_states([r["array_job_id"] for r in sub.rounds], output_under=f"{sub.path}/")
    settle(sub, states)
    rows = []
    for k in sub.replicates:
        job = sub.latest_job(k)
        state = states.get((job, k)) if job is not None else None
        attempts = [a for a in sub.attempts(k) if (a.get("slurm") or {}).get("array_job_id") == str(job)]
        last = attempts[-1] if attempts else None
        slurm: dict[str, Any]
        if state is not None:
            slurm = {"state": state.state, "reason": state.reason, "node": state.node, "source": state.source,
                     "job": f"{job}_{k}", "job_id": state.job_id}
        elif last is not None:  # aged out of slurmctld and no accounting: the task's own end record
            end = last.get("slurm_final") or last.get("slurm_end") or {}
            by_outcome = {"complete": "COMPLETED", "skipped": "COMPLETED"}.get(str(last.get("outcome")), "UNKNOWN")
            slurm = {"state": end.get("state") or by_outcome,
                     "reason": end.get("reason"), "node": (last.get("slurm") or {}).get("node"),
                     "source": f"attempt-{last.get('job_id')}.json", "job": f"{job}_{k}", "job_id": last.get("job_id")}
        else:
            slurm = {"state": "UNKNOWN", "reason": "not in squeue/sacct and no attempt record", "node": None,
                     "source": None, "job": f"{job}_{k}" if job else None, "job_id": None}
        ended = [a for a in sub.attempts(k) if a.get("outcome") in ("terminated", "killed")]
        rows.append({"replicate": k, "slurm": slurm, **_evidence(sub, k, slurm["state"]),
                     "terminations": [{"job_id": a.get("job_id"), **(a.get("slurm_final") or a.get("slurm_end") or {})}
                                      for a in ended]})
    return rows
