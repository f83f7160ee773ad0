"""`invoke status`: each replicate's Slurm state (squeue/sacct JSON) and evidence state."""

from __future__ import annotations

from typing import Any

from .slurm import TERMINAL, job_states
from .submission import Submission

__all__ = ["replicate_status"]


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
    else:
        evidence = latest.status
    return {"evidence": evidence, "runs": len(runs),
            "run": str((complete or latest).path) if (complete or latest) else None,
            "error": None if complete or latest is None else latest.error}


def replicate_status(sub: Submission) -> list[dict[str, Any]]:
    states = job_states([r["array_job_id"] for r in sub.rounds])
    rows = []
    for k in sub.replicates:
        job = sub.latest_job(k)
        state = states.get((job, k)) if job is not None else None
        attempts = [a for a in sub.attempts(k) if (a.get("slurm") or {}).get("array_job_id") == str(job)]
        last = attempts[-1] if attempts else None
        if state is not None:
            slurm = {"state": state.state, "reason": state.reason, "node": state.node, "source": state.source,
                     "job": f"{job}_{k}", "job_id": state.job_id}
        elif last is not None:  # aged out of slurmctld and no accounting: the task's own end record
            end = last.get("slurm_end") or {}
            slurm = {"state": end.get("state") or {"complete": "COMPLETED"}.get(last.get("outcome"), "UNKNOWN"),
                     "reason": end.get("reason"), "node": (last.get("slurm") or {}).get("node"),
                     "source": f"attempt-{last.get('job_id')}.json", "job": f"{job}_{k}", "job_id": last.get("job_id")}
        else:
            slurm = {"state": "UNKNOWN", "reason": "not in squeue/sacct and no attempt record", "node": None,
                     "source": None, "job": f"{job}_{k}" if job else None, "job_id": None}
        ended = [a for a in sub.attempts(k) if a.get("outcome") == "terminated"]
        rows.append({"replicate": k, "slurm": slurm, **_evidence(sub, k, slurm["state"]),
                     "terminations": [{"job_id": a.get("job_id"), **(a.get("slurm_end") or {})} for a in ended]})
    return rows
