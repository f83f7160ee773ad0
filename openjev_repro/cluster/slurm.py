"""Slurm through its commands' JSON output: sbatch --parsable, squeue --json, sacct --json.

Finished jobs: `sacct --json` when the cluster keeps accounting (slurmdbd); otherwise
`squeue --json --states=all`, which still lists jobs that ended within the cluster's MinJobAge.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from ..errors import ReproError

__all__ = ["TERMINAL", "JobState", "SlurmError", "job_state", "job_states", "parse_reply", "sbatch", "task_ids"]

# Slurm job states after which a task runs no more.
TERMINAL = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
_TIMEOUT_S = 60


class SlurmError(ReproError):
    """Slurm is missing, unreachable or refused a request."""


@dataclass(frozen=True)
class JobState:
    """One array task as Slurm reports it."""

    job_id: int  # this task's own job id
    array_job_id: int  # the array's id (== job_id for a plain job)
    array_task_id: int | None
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, PREEMPTED, FAILED, ...
    reason: str | None  # Slurm's state reason (why pending or why it ended), None when "None"
    node: str | None
    exit_code: int | None
    source: str  # the command the state was read from

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "array_job_id": self.array_job_id, "array_task_id": self.array_task_id,
                "state": self.state, "reason": self.reason, "node": self.node, "exit_code": self.exit_code,
                "source": self.source}


CONTROLLER_HINT = "is slurmctld running? (the local cluster starts with scripts/slurm-local.sh start)"


def _run(argv: list[str], *, check: bool = True, timeout_s: float = _TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise SlurmError(f"{argv[0]} is not installed here; run this on a Slurm login node "
                         "(or start the local cluster: scripts/slurm-local.sh start).")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {timeout_s} s; {CONTROLLER_HINT}") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        last = detail[-1] if detail else "no message"
        down = "contact slurm controller" in last.lower() or "slurmctld" in last.lower()
        raise SlurmError(f"{argv[0]} failed (exit {proc.returncode}): {last}" + (f"; {CONTROLLER_HINT}" if down else ""))
    return proc


def sbatch(options: list[str], script: str) -> int:
    """Submit a batch script; returns the job (array) id."""
    proc = _run(["sbatch", "--parsable", *options, script])
    head = proc.stdout.strip().split(";")[0]  # --parsable: "jobid[;cluster]"
    if not head.isdigit():
        raise SlurmError(f"sbatch answered {proc.stdout.strip()!r} instead of a job id.")
    return int(head)


def _number(value: Any) -> int | None:
    """A number from Slurm's JSON: an int, or {"set": bool, "number": int} in newer data parsers."""
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set") and "number" in value else None
    return int(value) if isinstance(value, int) else None


def _text(value: Any) -> str | None:
    if isinstance(value, list):  # newer data parsers: job_state is a list of flags
        value = value[0] if value else None
    if value in (None, "", "None"):
        return None
    return str(value)


def task_ids(spec: str) -> list[int]:
    """Array indices of a task string such as "1-3,5" or "2-8:2%4" (squeue's pending array record)."""
    ids: list[int] = []
    for part in spec.split("%")[0].split(","):
        if not part:
            continue
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        ids.extend(range(int(first), int(last or first) + 1, int(step or 1)))
    return ids


def _from_squeue(job: dict[str, Any], source: str) -> list[JobState]:
    job_id = _number(job.get("job_id"))
    if job_id is None:
        return []
    array_job = _number(job.get("array_job_id")) or job_id
    task = _number(job.get("array_task_id"))
    pending = _text(job.get("array_task_string"))
    tasks: list[int | None] = [task] if task is not None or not pending else list(task_ids(pending))
    return [JobState(job_id=job_id, array_job_id=array_job, array_task_id=t,
                     state=_text(job.get("job_state")) or "UNKNOWN", reason=_text(job.get("state_reason")),
                     node=_text(job.get("nodes")), exit_code=_number(job.get("exit_code")), source=source)
            for t in tasks]


def _from_sacct(job: dict[str, Any]) -> JobState | None:
    job_id = _number(job.get("job_id"))
    if job_id is None:
        return None
    array = job.get("array") or {}
    state = job.get("state") or {}
    exit_code = job.get("exit_code") or {}
    return JobState(job_id=job_id, array_job_id=_number(array.get("job_id")) or job_id,
                    array_task_id=_number(array.get("task_id")), state=_text(state.get("current")) or "UNKNOWN",
                    reason=_text(state.get("reason")), node=_text(job.get("nodes")),
                    exit_code=_number(exit_code.get("return_code")), source="sacct --json")


def parse_reply(text: str, what: str) -> dict[str, Any]:
    """A JSON reply of squeue/sacct; its "errors" (e.g. slurmctld unreachable, exit status 0) raise."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmError(f"{what} did not print JSON ({exc}); Slurm 21.08 or newer is needed.") from None
    if not isinstance(data, dict):
        raise SlurmError(f"{what} printed JSON that is not an object.")
    errors = data.get("errors") or []
    if errors:
        first = errors[0] if isinstance(errors[0], dict) else {"description": str(errors[0])}
        raise SlurmError(f"{what}: {first.get('description') or first.get('error')} "
                         f"({first.get('source', 'slurm')}); {CONTROLLER_HINT}")
    return data


def job_states(array_ids: list[int], output_under: str | None = None) -> dict[tuple[int, int | None], JobState]:
    """The state of every task of the given arrays, keyed by (array job id, array task id).

    Live tasks from `squeue --json`; finished ones from `sacct --json` when accounting is kept,
    else from `squeue --json --states=all` (jobs still in slurmctld's memory). With output_under,
    squeue's jobs count only if their output file lies there: a cluster whose state was wiped
    counts job ids from 1 again, and another job must not pass for one of ours.
    """
    if not array_ids:
        return {}
    found = {(s.array_job_id, s.array_task_id): s for s in _accounted_states(array_ids)}
    # squeue is live: it wins over accounting for tasks still known to slurmctld.
    found.update({(s.array_job_id, s.array_task_id): s for s in _queued_states(array_ids, output_under)})
    return found


def _accounted_states(array_ids: list[int]) -> list[JobState]:
    """The arrays' tasks as `sacct --json` knows them; none without accounting (no slurmdbd)."""
    ids = ",".join(str(i) for i in sorted(set(array_ids)))
    acct = _run(["sacct", "--json", "--jobs", ids], check=False)
    try:  # without accounting (no slurmdbd) sacct answers in words, or with errors: not used
        accounted = parse_reply(acct.stdout, "sacct --json").get("jobs", []) if acct.returncode == 0 else []
    except SlurmError:
        accounted = []
    states = [_from_sacct(job) for job in accounted]
    return [s for s in states if s is not None and s.array_job_id in array_ids]


def _queued_states(array_ids: list[int], output_under: str | None) -> list[JobState]:
    """The arrays' tasks still in slurmctld's memory (`squeue --json --states=all`), ours by output path."""
    proc = _run(["squeue", "--json", "--states=all"], check=False)
    if proc.returncode != 0:
        raise SlurmError(f"squeue --json failed: {(proc.stderr or proc.stdout).strip()[:200]}")
    states: list[JobState] = []
    for job in parse_reply(proc.stdout, "squeue --json").get("jobs", []):
        if output_under and not str(job.get("standard_output") or "").startswith(output_under):
            continue
        states += [s for s in _from_squeue(job, "squeue --json --states=all") if s.array_job_id in array_ids]
    return states


def job_state(job_id: int, *, timeout_s: float = _TIMEOUT_S) -> JobState | None:
    """One job's state (a running task asking about itself)."""
    proc = _run(["squeue", "--json", "--states=all", "--jobs", str(job_id)], check=False, timeout_s=timeout_s)
    if proc.returncode != 0:
        return None
    for job in parse_reply(proc.stdout, "squeue --json").get("jobs", []):
        for state in _from_squeue(job, "squeue --json --jobs"):
            if state.job_id == job_id:
                return state
    return None
