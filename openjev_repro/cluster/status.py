"""`invoke status`: each replicate's Slurm state (squeue/sacct JSON) and evidence state.

While a task is being stopped Slurm reports it as COMPLETING, so the task's own SIGTERM record
cannot say whether it was cancelled, timed out or preempted. `settle()` (run by status, resume
and collect) records the final state and reason, once Slurm reports one, in the task's attempt
record (`slurm_final`) and in its run's state.json (`slurm_end`), and marks a run that a
SIGKILL left "running" incomplete.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from ..evidence.rundir import RunDir, Status
from ..evidence.state import SlurmEnd
from .slurm import TERMINAL, JobState, job_states
from .submission import SLURM_CAUSE, AttemptRecord, RunAttempt, Submission, utc_now, with_slurm_cause

__all__ = ["ReplicateStatus", "SlurmView", "replicate_status", "settle"]

States = dict[tuple[int, int | None], JobState]


def _final(state: JobState) -> SlurmEnd:
    return SlurmEnd(state=state.state, reason=state.reason, exit_code=state.exit_code, source=state.source,
                    recorded_utc=utc_now())


def _settle_attempt(directory: Path, attempt: AttemptRecord, states: States) -> None:
    """An attempt whose task ended without finishing: Slurm's final state recorded in it and, unless
    complete, its run marked incomplete with Slurm's cause first in its error."""
    state = attempt.ended_state(states)
    if state is None:
        return
    final = _final(state)
    outcome = "killed" if attempt.outcome == "running" else attempt.outcome  # SIGKILLed before it wrote its end
    msgspec.structs.replace(attempt, slurm_final=final, outcome=outcome).save(directory)
    if not attempt.run or not (directory / attempt.run / "state.json").is_file():
        return
    run = RunDir(directory / attempt.run)
    current = run.state_record()
    if current.status != Status.COMPLETE:
        cause = f"{SLURM_CAUSE} ({state.state}" + (f", reason {state.reason})" if state.reason else ")")
        run.update_state(status=Status.INCOMPLETE, slurm_end=final,
                         error=with_slurm_cause(current.error, cause))


def settle(sub: Submission, states: States) -> None:
    """Record how ended tasks ended, in their attempt records and runs (see the module docstring)."""
    for k in sub.replicates:
        directory = sub.replicate_dir(k)
        for attempt in sub.attempts(k):
            _settle_attempt(directory, attempt, states)
        # The replicate's latest run, when its file still says running but its Slurm task ended: incomplete.
        runs = sub.runs(k)
        job = sub.latest_job(k)
        state = states.get((job, k)) if job is not None else None
        if not runs or state is None or state.state not in TERMINAL or runs[-1].status == "unreadable":
            continue
        if RunDir(runs[-1].path).state_record().status == Status.RUNNING:  # stale or not: its file says so
            RunDir(runs[-1].path).update_state(status=Status.INCOMPLETE, slurm_end=_final(state),
                                               error=f"its Slurm task ended ({state.state}) while it was running")


class SlurmView(msgspec.Struct, frozen=True, kw_only=True):
    """A replicate's latest task as Slurm reports it, or as its last attempt record says, or unknown."""

    state: str
    reason: str | None
    node: str | None
    source: str | None
    job: str | None  # <array job id>_<replicate>
    job_id: int | str | None

    @classmethod
    def of(cls, sub: Submission, k: int, states: States) -> SlurmView:
        job = sub.latest_job(k)
        state = states.get((job, k)) if job is not None else None
        if state is not None:
            return cls(state=state.state, reason=state.reason, node=state.node, source=state.source,
                       job=f"{job}_{k}", job_id=state.job_id)
        attempts = [a for a in sub.attempts(k) if a.of_array(job)]
        if attempts:  # aged out of slurmctld and no accounting: the task's own end record
            return cls.of_attempt(attempts[-1], f"{job}_{k}")
        return cls(state="UNKNOWN", reason="not in squeue/sacct and no attempt record", node=None, source=None,
                   job=f"{job}_{k}" if job else None, job_id=None)

    @classmethod
    def of_attempt(cls, last: AttemptRecord, job: str) -> SlurmView:
        end = last.end() or SlurmEnd(state=None)
        by_outcome = "COMPLETED" if last.outcome in ("complete", "skipped") else "UNKNOWN"
        return cls(state=end.state or by_outcome, reason=end.reason, node=last.slurm.node if last.slurm else None,
                   source=last.file_name, job=job, job_id=last.job_id)


class ReplicateStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One replicate as `invoke status` shows it: its Slurm state, its evidence and how its tasks were stopped."""

    replicate: int
    slurm: SlurmView
    evidence: str  # complete, none, incomplete, unsigned, signing or the latest run's status
    runs: int
    run: str | None
    error: str | None
    terminated: list[AttemptRecord]  # attempts that Slurm stopped or that were killed

    def to_json(self) -> dict[str, object]:
        return {"replicate": self.replicate, "slurm": msgspec.to_builtins(self.slurm), "evidence": self.evidence,
                "runs": self.runs, "run": self.run, "error": self.error,
                "terminations": [{"job_id": a.job_id, **(end.to_json() if (end := a.end()) else {})}
                                 for a in self.terminated]}

    @property
    def running(self) -> bool:
        """Whether its task may still add evidence (pending or running, and no complete run yet)."""
        return self.slurm.state not in TERMINAL and self.evidence != "complete"

    @classmethod
    def of(cls, sub: Submission, k: int, states: States) -> ReplicateStatus:
        slurm = SlurmView.of(sub, k, states)
        runs = sub.runs(k)
        complete = sub.complete_run(k)
        latest = runs[-1] if runs else None
        chosen = complete or latest
        return cls(replicate=k, slurm=slurm, evidence=_evidence_word(complete, latest, slurm.state), runs=len(runs),
                   run=str(chosen.path) if chosen is not None else None,
                   error=None if complete or latest is None else latest.error,
                   terminated=[a for a in sub.attempts(k) if a.outcome in ("terminated", "killed")])


def _evidence_word(complete: RunAttempt | None, latest: RunAttempt | None, slurm_state: str) -> str:
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


def replicate_status(sub: Submission) -> list[ReplicateStatus]:
    states = job_states([r.array_job_id for r in sub.rounds], output_under=f"{sub.path}/")
    settle(sub, states)
    return [ReplicateStatus.of(sub, k, states) for k in sub.replicates]
