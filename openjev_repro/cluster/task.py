"""One array task: run the whole study for replicate-$SLURM_ARRAY_TASK_ID with `invoke study`.

    python -m openjev_repro.cluster.task --submission DIR [--replicate K]

The batch script `exec`s this module, so Slurm's SIGTERM (scancel, time limit, preemption)
reaches it as well as the study. On SIGTERM it first writes `attempt-<job id>.json` with the
Slurm state and reason (before KillWait ends in SIGKILL), then waits for the study to stop and
makes sure the run is marked incomplete, with the Slurm end recorded in its state.json, whether
or not the study handled the signal itself.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import msgspec

from ..errors import ReproError
from ..evidence.recipe import load_recipe
from ..evidence.records import SlurmGpu, SlurmPart
from ..evidence.rundir import RunDir, Status
from ..evidence.state import SlurmEnd
from ..hashing import hash_file
from ..host.allocation import allocated_gpu, slurm_record
from ..manifest.keys import load_private_key
from .slurm import TERMINAL, job_state
from .submission import SLURM_CAUSE, AttemptRecord, Submission, utc_now, with_slurm_cause

__all__ = ["GPU_SOURCE", "TaskFailed", "main", "study_argv"]

# gpu_override.source in host.json, plan.json and the manifest: the GPU was Slurm's choice.
GPU_SOURCE = "slurm"


class TaskFailed(Exception):
    """A task that cannot start its study (recorded in its attempt record)."""


def study_argv(sub: Submission, replicate_dir: Path, gpu: SlurmGpu | None) -> list[str]:
    """`invoke study` for this replicate; the allocated GPU only when the recipe has GPU controls.

    That GPU goes through the study's run-time override (`--gpu-uuid`, `--gpu-index`), recorded
    as host.json's gpu_override with source "slurm" beside the recipe's own controls.gpu."""
    record = sub.record
    argv = [record.text("python"), "-m", "invoke", "--search-root", record.text("repo"), "study",
            "--recipe", record.text("recipe"), "--out", str(replicate_dir), "--key", record.text("key")]
    if record.gpu_controls:
        if gpu is None or not gpu.uuid:
            why = "no GPU in the allocation" if gpu is None else gpu.uuid_error
            raise TaskFailed(f"the recipe pins a GPU but the allocated one is unknown ({why}); "
                              "submit with --gres gpu:1 on nodes with an NVIDIA driver")
        argv += ["--gpu-uuid", gpu.uuid, "--gpu-source", GPU_SOURCE]
        if gpu.index is not None:
            argv += ["--gpu-index", str(gpu.index)]
    return argv


class _Attempt:
    """attempt-<job id>.json beside the replicate's run directories."""

    def __init__(self, replicate_dir: Path, job_id: str) -> None:
        self.replicate_dir = replicate_dir
        slurm = slurm_record()
        self.record = AttemptRecord(job_id=job_id, started_utc=utc_now(),
                                    slurm=msgspec.convert(slurm, SlurmPart) if slurm is not None else None,
                                    outcome="running", run=None, ended_utc=None, slurm_end=None, exit_code=None,
                                    error=None)

    def write(self, **changes: Any) -> None:
        self.record = msgspec.structs.replace(self.record, **changes)
        self.record.save(self.replicate_dir)


def _new_run(replicate_dir: Path, before: set[Path]) -> Path | None:
    new = sorted(p for p in replicate_dir.iterdir() if p.is_dir() and p not in before)
    return new[-1] if new else None


def _slurm_end(job_id: str) -> SlurmEnd:
    """Why we are being stopped, as slurmctld says (CANCELLED, TIMEOUT, PREEMPTED ... and its reason)."""
    try:
        state = job_state(int(job_id), timeout_s=10)  # well inside KillWait
    except Exception as exc:  # noqa: BLE001 - the record must be written even if Slurm does not answer
        return SlurmEnd(state=None, error=f"{type(exc).__name__}: {exc}")
    if state is None:
        return SlurmEnd(state=None, error="squeue does not list this job")
    return SlurmEnd(state=state.state, reason=state.reason, source=state.source)


def _mark_incomplete(run_path: Path, slurm_end: SlurmEnd | None, why: str) -> None:
    """The run's state says incomplete, whatever the study managed to write; a Slurm termination
    (slurm_end given) comes first in its error, the study's own message (if any) after it."""
    if not (run_path / "state.json").is_file():
        return
    run = RunDir(run_path)
    state = run.state_record()
    if state.status == Status.COMPLETE:
        return
    error = state.error if state.status != Status.RUNNING else None
    changes: dict[str, Any] = {"status": Status.INCOMPLETE,
                               "error": with_slurm_cause(error, why) if slurm_end is not None else (error or why)}
    if slurm_end is not None:
        changes["slurm_end"] = slurm_end
    run.update_state(**changes)


def _study_argv_checked(sub: Submission, replicate_dir: Path, gpu: SlurmGpu | None) -> list[str]:
    """The `invoke study` command of this replicate, once the recipe, the GPU controls and the key check out.

    Raises TaskFailed naming what differs from the submission or is not usable on this node.
    """
    recipe = sub.record.text("recipe")
    if hash_file(recipe) != sub.record.recipe_sha256:
        raise TaskFailed(f"{recipe} changed since submission")
    if bool(load_recipe(recipe).controls.gpu) != sub.record.gpu_controls:
        raise TaskFailed("the recipe's GPU controls differ from the submission's")
    try:  # the study signs at its very end: an unreadable key must fail before it measures anything
        load_private_key(Path(sub.record.text("key")))
    except ReproError as exc:
        raise TaskFailed(f"the signing key is not usable on this node: {exc}") from None
    return study_argv(sub, replicate_dir, gpu)


def _after_termination(attempt: _Attempt, run: Path | None, signal_name: str, end: SlurmEnd, code: int) -> int:
    """Slurm ended the task: the run (if any) and the attempt say so, with Slurm's own reason."""
    named = end.state if end.state in TERMINAL else None  # COMPLETING while stopping
    why = f"{SLURM_CAUSE} ({named or signal_name}" + (f", reason {end.reason}" if end.reason else "") + ")"
    if run is not None:
        _mark_incomplete(run, end, why)
    attempt.write(outcome="terminated", run=run.name if run else None, ended_utc=utc_now(), exit_code=code,
                  error=why)
    return 128 + signal.SIGTERM


def _after_exit(attempt: _Attempt, run: Path | None, code: int) -> int:
    """The study exited: complete only with status 0 and a run whose state says complete."""
    status = RunDir(run).state_record().status if run is not None else None
    if code == 0 and status == Status.COMPLETE:
        attempt.write(outcome="complete", run=run.name if run else None, ended_utc=utc_now(), exit_code=0)
        return 0
    if run is not None:
        _mark_incomplete(run, None, f"`invoke study` exited with status {code}")
    attempt.write(outcome="failed", run=run.name if run else None, ended_utc=utc_now(), exit_code=code,
                  error=f"`invoke study` exited with status {code}, run status {status}")
    return code or 1


def run_task(sub: Submission, k: int) -> int:
    replicate_dir = sub.replicate_dir(k)
    replicate_dir.mkdir(exist_ok=True)
    job_id = os.environ.get("SLURM_JOB_ID") or f"local{os.getpid()}"
    attempt = _Attempt(replicate_dir, job_id)
    attempt.write()
    done = sub.complete_run(k)
    if done is not None:  # never add measured passes to a complete replicate
        attempt.write(outcome="skipped", run=done.path.name, ended_utc=utc_now(), exit_code=0,
                      error="the replicate already has complete evidence")
        return 0
    gpu = allocated_gpu()
    try:
        argv = _study_argv_checked(sub, replicate_dir, msgspec.convert(gpu, SlurmGpu) if gpu is not None else None)
    except TaskFailed as exc:
        attempt.write(outcome="failed", ended_utc=utc_now(), exit_code=1, error=str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return 1
    before = {p for p in replicate_dir.iterdir() if p.is_dir()}
    terminated: list[tuple[str, SlurmEnd]] = []  # the signal's name and what Slurm said, once

    def on_term(signum: int, frame: FrameType | None) -> None:
        if terminated:
            return
        name = signal.Signals(signum).name
        terminated.append((name, _slurm_end(job_id)))
        run = _new_run(replicate_dir, before)
        # Written at once: SIGKILL follows after the cluster's KillWait.
        attempt.write(outcome="terminated", run=run.name if run else None, slurm_end=terminated[0][1],
                      error=f"{name} from Slurm")

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print(f"replicate {k}: {' '.join(argv)}", file=sys.stderr, flush=True)
    child = subprocess.Popen(argv, cwd=sub.record.text("repo"))
    if terminated:  # the signal came before the study started
        child.terminate()
    code = child.wait()
    run = _new_run(replicate_dir, before)
    if terminated:
        return _after_termination(attempt, run, *terminated[0], code)
    return _after_exit(attempt, run, code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m openjev_repro.cluster.task", description=__doc__.splitlines()[0])
    parser.add_argument("--submission", required=True, type=Path)
    parser.add_argument("--replicate", type=int, default=None, help="default: $SLURM_ARRAY_TASK_ID")
    args = parser.parse_args(argv)
    k = args.replicate if args.replicate is not None else int(os.environ.get("SLURM_ARRAY_TASK_ID", "0"))
    sub = Submission.open(args.submission)
    if k not in sub.replicates:
        print(f"error: replicate {k} is not one of {sub.replicates}", file=sys.stderr)
        return 1
    started = time.monotonic()
    code = run_task(sub, k)
    print(f"replicate {k}: exit {code} after {time.monotonic() - started:.1f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
