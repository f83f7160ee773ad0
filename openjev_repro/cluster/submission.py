"""The submission directory of one job array and its resubmissions.

    <study-id>-<UTC time>-<hex>/        on storage every node mounts at the same path
      submission.json                  recipe (path and SHA256), replicates, key, sbatch options,
                                       every sbatch round: job id, replicates, script, argv
      openjev-repro.pub                the public key of --key (informational: collect trusts only --pubkey)
      job-<round>.sh                   the batch script of each round (kept, never rewritten)
      replicate-<k>/
        <study-id>-<time>-<hex>/       one run directory per attempt (written by `invoke study`)
        attempt-<job id>.json          how that Slurm task ended: state, reason, run, exit
        slurm-<array id>_<k>.out       the task's stdout/stderr
      collect-<time>/                  each `invoke collect` (summary.md/json/png, signed envelope)
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec

from ..errors import EvidenceError
from ..evidence.decoding import UNSET, Count, Record, Text, UnsetType, decode
from ..evidence.files import read_versioned, write_json_atomic
from ..evidence.records import SlurmPart
from ..evidence.rundir import ENVELOPE_NAME, RunDir, Status
from ..evidence.state import SlurmEnd
from ..printable import printable
from .jobscript import SbatchOptions
from .slurm import TERMINAL, JobState

__all__ = [
    "ATTEMPT_FORMAT_VERSION",
    "SLURM_CAUSE",
    "SUBMISSION_FORMAT_VERSION",
    "AttemptRecord",
    "Round",
    "RunAttempt",
    "Submission",
    "SubmissionRecord",
    "utc_now",
    "with_slurm_cause",
]

SUBMISSION_FORMAT_VERSION = 1
ATTEMPT_FORMAT_VERSION = 1  # attempt-<job id>.json, written by cluster/task.py
SUBMISSION_FILE = "submission.json"


SLURM_CAUSE = "terminated by Slurm"


def with_slurm_cause(error: str | None, cause: str) -> str:
    """A run's error with the Slurm termination first; the study's own message (if any) kept after it."""
    rest = error or ""
    if rest.startswith(SLURM_CAUSE):  # an earlier, less precise Slurm cause: replaced
        rest = rest.partition("; ")[2]
    return f"{cause}; {rest}" if rest else cause


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class RunAttempt:
    """One run directory inside a replicate, as its state.json says (RunDir.effective_state_record)."""

    path: Path
    status: str  # running | complete | incomplete | unreadable
    error: str | None
    signed: bool  # a manifest envelope exists (signature checked by collect)

    @property
    def complete(self) -> bool:
        return self.status == Status.COMPLETE and self.signed


class AttemptRecord(Record, frozen=True, kw_only=True):
    """attempt-<job id>.json: how one Slurm task of a replicate went (written by cluster/task.py at
    its start, on SIGTERM and at its end; `slurm_final` added by `settle`)."""

    format_version: int = ATTEMPT_FORMAT_VERSION
    job_id: Text | Count
    started_utc: Text | UnsetType = UNSET
    slurm: SlurmPart | None = None
    outcome: Text  # running | complete | skipped | failed | terminated | killed
    run: Text | None = None
    ended_utc: Text | None | UnsetType = UNSET
    slurm_end: SlurmEnd | None | UnsetType = UNSET
    exit_code: int | None | UnsetType = UNSET
    error: Text | None | UnsetType = UNSET
    slurm_final: SlurmEnd | UnsetType = UNSET

    @property
    def file_name(self) -> str:
        return f"attempt-{self.job_id}.json"

    def save(self, replicate_dir: Path) -> None:
        write_json_atomic(replicate_dir / self.file_name, self.to_json())

    def of_array(self, job: int | None) -> bool:
        """Whether this attempt ran as a task of array job `job`."""
        return self.slurm is not None and self.slurm.array_job_id == str(job)

    def end(self) -> SlurmEnd | None:
        """How Slurm ended it: the settled final state, else what the task heard at SIGTERM."""
        final = self.slurm_final if isinstance(self.slurm_final, SlurmEnd) else None
        return final or (self.slurm_end if isinstance(self.slurm_end, SlurmEnd) else None)

    def ended_state(self, states: dict[tuple[int, int | None], JobState]) -> JobState | None:
        """Slurm's final state when this attempt is not yet settled and its task ended without finishing."""
        if self.slurm_final is not UNSET or self.slurm is None or not self.slurm.array_job_id:
            return None
        state = states.get((int(self.slurm.array_job_id), self.slurm.array_task_id))
        if state is None or state.state not in TERMINAL or self.outcome in ("complete", "skipped"):
            return None
        return state


MAX_REPLICATES = 10_000
_JOB_ID = msgspec.Meta(ge=0, le=2**63 - 1)


class Round(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One sbatch of the submission: which replicates, as which array job, with which script and argv."""

    round: int | msgspec.UnsetType = msgspec.UNSET
    array_job_id: Annotated[int, _JOB_ID]
    replicates: list[Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLICATES)]]
    script: str = ""
    sbatch: list[str] = msgspec.field(default_factory=list)
    submitted_utc: str | msgspec.UnsetType = msgspec.UNSET


class SubmissionRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """submission.json, decoded once. Fields an older `submit` did not write are UNSET; what a new
    sbatch round needs is asked for by `Submission.resumable`."""

    format_version: int
    replicates: Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLICATES)]
    id: str | msgspec.UnsetType = msgspec.UNSET
    study_id: str | msgspec.UnsetType = msgspec.UNSET
    created_utc: str | msgspec.UnsetType = msgspec.UNSET
    recipe: str | msgspec.UnsetType = msgspec.UNSET
    recipe_sha256: str | msgspec.UnsetType = msgspec.UNSET
    key: str | msgspec.UnsetType = msgspec.UNSET
    pubkey: str | msgspec.UnsetType = msgspec.UNSET
    sbatch_options: SbatchOptions | msgspec.UnsetType = msgspec.UNSET
    job_name: str | msgspec.UnsetType = msgspec.UNSET
    comment: str | msgspec.UnsetType = msgspec.UNSET
    repo: str | msgspec.UnsetType = msgspec.UNSET
    python: str | msgspec.UnsetType = msgspec.UNSET
    gpu_controls: bool = False
    rounds: list[Round] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        for number, entry in enumerate(self.rounds, 1):
            if any(k > self.replicates for k in entry.replicates):
                raise ValueError(f"round {number}: replicates must be replicate numbers 1..{self.replicates}")

    def missing(self, *names: str) -> list[str]:
        """Which of these fields an older `submit` did not write."""
        return [name for name in names if getattr(self, name) is msgspec.UNSET]

    def text(self, name: str) -> str:
        """A text field that must be there (EvidenceError when an older submission lacks it)."""
        value = getattr(self, name)
        if not isinstance(value, str):
            raise EvidenceError(f"submission.json has no {name}; only `invoke submit` writes it, so this "
                                "submission cannot be used for that.")
        return value


class Submission:
    """A submission directory and its record (submission.json)."""

    def __init__(self, path: Path, record: SubmissionRecord) -> None:
        self.path = Path(path)
        self.record = record

    # --- create / open ------------------------------------------------------------
    @classmethod
    def create(cls, parent: Path, study_id: str, data: dict[str, Any]) -> Submission:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = Path(parent).resolve() / f"{study_id}-{stamp}-{secrets.token_hex(3)}"
        path.mkdir(parents=True, exist_ok=False)
        record = msgspec.convert(dict(data, format_version=SUBMISSION_FORMAT_VERSION, id=path.name, study_id=study_id,
                                      created_utc=utc_now(), rounds=[]), SubmissionRecord)
        sub = cls(path, record)
        for k in sub.replicates:
            sub.replicate_dir(k).mkdir()
        sub.save()
        return sub

    @classmethod
    def open(cls, path: Path | str) -> Submission:
        path = Path(path).resolve()
        file = path / SUBMISSION_FILE
        if not file.is_file():
            raise EvidenceError(f"{path} is not a submission directory (no {SUBMISSION_FILE}); "
                                "pass the directory `invoke submit` printed.")
        data = read_versioned(file, (SUBMISSION_FORMAT_VERSION,))
        try:
            record = msgspec.convert(data, SubmissionRecord)
        except msgspec.ValidationError as exc:
            raise EvidenceError(f"{file} is damaged ({printable(str(exc))}); only `invoke submit` writes it.") from None
        return cls(path, record)

    def save(self) -> None:
        write_json_atomic(self.path / SUBMISSION_FILE, msgspec.to_builtins(self.record))

    # --- layout -------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.record.text("id")

    @property
    def replicates(self) -> list[int]:
        return list(range(1, self.record.replicates + 1))

    @property
    def pubkey(self) -> Path:
        return self.path / self.record.text("pubkey")

    def replicate_dir(self, k: int) -> Path:
        return self.path / f"replicate-{k}"

    def script_path(self, round_number: int) -> Path:
        return self.path / f"job-{round_number}.sh"

    def add_round(self, array_job_id: int, replicates: list[int], script: Path, argv: list[str]) -> None:
        new = Round(round=len(self.record.rounds) + 1, array_job_id=array_job_id, replicates=replicates,
                    script=script.name, sbatch=argv, submitted_utc=utc_now())
        self.record = msgspec.structs.replace(self.record, rounds=[*self.record.rounds, new])
        self.save()

    @property
    def rounds(self) -> list[Round]:
        return list(self.record.rounds)

    def latest_job(self, k: int) -> int | None:
        """The array job id of the last round that submitted replicate k."""
        jobs = [r.array_job_id for r in self.rounds if k in r.replicates]
        return jobs[-1] if jobs else None

    # --- evidence -----------------------------------------------------------------
    def runs(self, k: int) -> list[RunAttempt]:
        """Every run directory of replicate k, oldest first (their names start with the UTC time)."""
        directory = self.replicate_dir(k)
        found = []
        for path in sorted(p for p in directory.iterdir() if p.is_dir()) if directory.is_dir() else []:
            try:  # a "running" run whose study died on this host reads incomplete (stale)
                state = RunDir(path).effective_state_record()
                status, error = state.status, state.error
            except (EvidenceError, OSError) as exc:
                status, error = "unreadable", str(exc)
            found.append(RunAttempt(path, status, error, (path / ENVELOPE_NAME).is_file()))
        return found

    def complete_run(self, k: int) -> RunAttempt | None:
        """The replicate's first complete, manifest-carrying run (there is at most one: resume skips them)."""
        return next((r for r in self.runs(k) if r.complete), None)

    def attempts(self, k: int) -> list[AttemptRecord]:
        """The records the tasks wrote beside the replicate's runs, oldest job first (Slurm job ids grow;
        others, as in tests, last). A file this tool cannot read (a later format, damage) is left as it is
        and not listed."""
        def job_order(path: Path) -> tuple[int, str]:
            job = path.stem.removeprefix("attempt-")
            return (int(job), "") if job.isdigit() else (2**63, job)

        records = []
        for path in sorted(self.replicate_dir(k).glob("attempt-*.json"), key=job_order):
            try:
                records.append(decode(read_versioned(path, (ATTEMPT_FORMAT_VERSION,)), AttemptRecord, str(path)))
            except EvidenceError:
                continue
        return records
