"""Slurm through its commands' JSON output: sbatch --parsable, squeue --json, sacct --json.

Finished jobs: `sacct --json` when the cluster keeps accounting (slurmdbd); otherwise
`squeue --json --states=all`, which still lists jobs that ended within the cluster's MinJobAge.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from ..errors import ReproError
from ..printable import printable

__all__ = ["TERMINAL", "AccountedJob", "JobState", "QueuedJob", "SacctReply", "SlurmError", "SqueueReply", "job_state",
           "job_states", "parse_reply", "sbatch", "task_ids"]

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


class _SetNumber(msgspec.Struct, frozen=True):
    """A number in newer data parsers: {"set": bool, "number": int, "infinite": bool}."""

    set: bool = False
    number: int | None = None


# A number of Slurm's JSON: an int, or a _SetNumber; a text: a string, or a list of flags (job_state).
_Number = int | _SetNumber | None
_Text = str | list[str] | None


def _number(value: _Number) -> int | None:
    return (value.number if value.set else None) if isinstance(value, _SetNumber) else value


def _text(value: _Text) -> str | None:
    if isinstance(value, list):  # newer data parsers: job_state is a list of flags
        value = value[0] if value else None
    return None if value in (None, "", "None") else value


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


class _SlurmMessage(msgspec.Struct, frozen=True, kw_only=True):
    description: str | None = None
    error: str | None = None
    source: str = "slurm"


class _Reply(msgspec.Struct, frozen=True):
    """What every JSON reply of squeue/sacct holds besides its jobs: the errors Slurm reports."""

    errors: list[_SlurmMessage | str] = []

    def check(self, what: str) -> None:
        """The reply's first error (e.g. slurmctld unreachable, with exit status 0) raised as SlurmError."""
        if self.errors:
            first = self.errors[0] if isinstance(self.errors[0], _SlurmMessage) else _SlurmMessage(
                description=self.errors[0])
            raise SlurmError(f"{what}: {first.description or first.error} ({first.source}); {CONTROLLER_HINT}")


class QueuedJob(msgspec.Struct, frozen=True):
    """One job (or a pending array's record) of `squeue --json`; Slurm's other fields are not read."""

    job_id: _Number = None
    array_job_id: _Number = None
    array_task_id: _Number = None
    array_task_string: _Text = None
    job_state: _Text = None
    state_reason: _Text = None
    nodes: _Text = None
    exit_code: _Number = None
    standard_output: str | None = None

    def states(self, source: str) -> list[JobState]:
        """Its tasks' states: one, or one per index of a pending array's task string."""
        job_id = _number(self.job_id)
        if job_id is None:
            return []
        task = _number(self.array_task_id)
        pending = _text(self.array_task_string)
        tasks: list[int | None] = [task] if task is not None or not pending else list(task_ids(pending))
        return [JobState(job_id=job_id, array_job_id=_number(self.array_job_id) or job_id, array_task_id=t,
                         state=_text(self.job_state) or "UNKNOWN", reason=_text(self.state_reason),
                         node=_text(self.nodes), exit_code=_number(self.exit_code), source=source)
                for t in tasks]


class _SacctArray(msgspec.Struct, frozen=True):
    job_id: _Number = None
    task_id: _Number = None


class _SacctState(msgspec.Struct, frozen=True):
    current: _Text = None
    reason: _Text = None


class _SacctExit(msgspec.Struct, frozen=True):
    return_code: _Number = None


class AccountedJob(msgspec.Struct, frozen=True):
    """One job of `sacct --json`; Slurm's other fields are not read."""

    job_id: _Number = None
    array: _SacctArray | None = None
    state: _SacctState | None = None
    exit_code: _SacctExit | None = None
    nodes: _Text = None

    def job_state(self) -> JobState | None:
        job_id = _number(self.job_id)
        if job_id is None:
            return None
        array, state = self.array or _SacctArray(), self.state or _SacctState()
        return JobState(job_id=job_id, array_job_id=_number(array.job_id) or job_id,
                        array_task_id=_number(array.task_id), state=_text(state.current) or "UNKNOWN",
                        reason=_text(state.reason), node=_text(self.nodes),
                        exit_code=_number((self.exit_code or _SacctExit()).return_code), source="sacct --json")


class SqueueReply(_Reply, frozen=True):
    jobs: list[QueuedJob] = []

    def tasks(self, source: str, output_under: str | None = None) -> list[JobState]:
        """Every task of its jobs (with output_under, of the jobs whose output file lies there)."""
        return [state for job in self.jobs if not output_under or (job.standard_output or "").startswith(output_under)
                for state in job.states(source)]


class SacctReply(_Reply, frozen=True):
    jobs: list[AccountedJob] = []

    def tasks(self) -> list[JobState]:
        return [state for job in self.jobs if (state := job.job_state()) is not None]


ReplyT = TypeVar("ReplyT", SqueueReply, SacctReply)


def parse_reply(text: str, what: str, kind: type[ReplyT]) -> ReplyT:
    """A JSON reply of squeue/sacct, decoded once; its "errors" (e.g. slurmctld unreachable, exit status 0) raise."""
    try:
        reply = msgspec.json.decode(text, type=kind)
    except msgspec.ValidationError as exc:
        raise SlurmError(f"{what} printed JSON of another shape ({printable(str(exc))}).") from None
    except msgspec.DecodeError as exc:
        raise SlurmError(f"{what} did not print JSON ({exc}); Slurm 21.08 or newer is needed.") from None
    reply.check(what)
    return reply


def job_states(array_ids: list[int], output_under: str | None = None) -> dict[tuple[int, int | None], JobState]:
    """The state of every task of the given arrays, keyed by (array job id, array task id).

    Live tasks from `squeue --json`; finished ones from `sacct --json` when accounting is kept,
    else from `squeue --json --states=all` (jobs still in slurmctld's memory). With output_under,
    squeue's jobs count only if their output file lies there: a cluster whose state was wiped
    counts job ids from 1 again, and another job must not pass for one of ours.
    """
    if not array_ids:
        return {}
    acct = _run(["sacct", "--json", "--jobs", ",".join(str(i) for i in sorted(set(array_ids)))], check=False)
    try:  # without accounting (no slurmdbd) sacct answers in words, or with errors: not used
        accounted = parse_reply(acct.stdout, "sacct --json", SacctReply).tasks() if acct.returncode == 0 else []
    except SlurmError:
        accounted = []
    proc = _run(["squeue", "--json", "--states=all"], check=False)
    if proc.returncode != 0:
        raise SlurmError(f"squeue --json failed: {(proc.stderr or proc.stdout).strip()[:200]}")
    queued = parse_reply(proc.stdout, "squeue --json", SqueueReply).tasks("squeue --json --states=all", output_under)
    # squeue is live: it wins over accounting for tasks still known to slurmctld.
    return {(s.array_job_id, s.array_task_id): s for s in [*accounted, *queued] if s.array_job_id in array_ids}


def job_state(job_id: int, *, timeout_s: float = _TIMEOUT_S) -> JobState | None:
    """One job's state (a running task asking about itself)."""
    proc = _run(["squeue", "--json", "--states=all", "--jobs", str(job_id)], check=False, timeout_s=timeout_s)
    if proc.returncode != 0:
        return None
    tasks = parse_reply(proc.stdout, "squeue --json", SqueueReply).tasks("squeue --json --jobs")
    return next((state for state in tasks if state.job_id == job_id), None)
