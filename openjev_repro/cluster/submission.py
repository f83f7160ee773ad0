"""The submission directory of one job array and its resubmissions.

    <study-id>-<UTC time>-<hex>/        on storage every node mounts at the same path
      submission.json                  recipe (path and SHA256), replicates, key, sbatch options,
                                       every sbatch round: job id, replicates, script, argv
      openjev-repro.pub                the public key of --key, to verify every replicate
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
from typing import Any

from ..errors import EvidenceError
from ..evidence.files import read_versioned, write_json_atomic
from ..evidence.rundir import ENVELOPE_NAME, RunDir

__all__ = [
    "ATTEMPT_FORMAT_VERSION",
    "SLURM_CAUSE",
    "SUBMISSION_FORMAT_VERSION",
    "RunAttempt",
    "Submission",
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
    """One run directory inside a replicate, as its state.json says (RunDir.effective_state)."""

    path: Path
    status: str  # running | complete | incomplete | unreadable
    error: str | None
    signed: bool  # a manifest envelope exists (signature checked by collect)

    @property
    def complete(self) -> bool:
        return self.status == "complete" and self.signed


class Submission:
    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = Path(path)
        self.data = data

    # --- create / open ------------------------------------------------------------
    @classmethod
    def create(cls, parent: Path, study_id: str, data: dict[str, Any]) -> Submission:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = Path(parent).resolve() / f"{study_id}-{stamp}-{secrets.token_hex(3)}"
        path.mkdir(parents=True, exist_ok=False)
        sub = cls(path, dict(data, format_version=SUBMISSION_FORMAT_VERSION, id=path.name, study_id=study_id,
                             created_utc=utc_now(), rounds=[]))
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
        return cls(path, read_versioned(file, (SUBMISSION_FORMAT_VERSION,)))

    def save(self) -> None:
        write_json_atomic(self.path / SUBMISSION_FILE, self.data)

    # --- layout -------------------------------------------------------------------
    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def replicates(self) -> list[int]:
        return list(range(1, int(self.data["replicates"]) + 1))

    @property
    def pubkey(self) -> Path:
        return self.path / str(self.data["pubkey"])

    def replicate_dir(self, k: int) -> Path:
        return self.path / f"replicate-{k}"

    def script_path(self, round_number: int) -> Path:
        return self.path / f"job-{round_number}.sh"

    def add_round(self, array_job_id: int, replicates: list[int], script: Path, argv: list[str]) -> None:
        self.data["rounds"].append({"round": len(self.data["rounds"]) + 1, "array_job_id": array_job_id,
                                    "replicates": replicates, "script": script.name, "sbatch": argv,
                                    "submitted_utc": utc_now()})
        self.save()

    @property
    def rounds(self) -> list[dict[str, Any]]:
        return list(self.data.get("rounds", []))

    def latest_job(self, k: int) -> int | None:
        """The array job id of the last round that submitted replicate k."""
        jobs = [r["array_job_id"] for r in self.rounds if k in r["replicates"]]
        return jobs[-1] if jobs else None

    # --- evidence -----------------------------------------------------------------
    def runs(self, k: int) -> list[RunAttempt]:
        """Every run directory of replicate k, oldest first (their names start with the UTC time)."""
        directory = self.replicate_dir(k)
        found = []
        for path in sorted(p for p in directory.iterdir() if p.is_dir()) if directory.is_dir() else []:
            try:  # a "running" run whose study died on this host reads incomplete (stale)
                state = RunDir(path).effective_state()
                status, error = str(state.get("status")), state.get("error")
            except (EvidenceError, OSError) as exc:
                status, error = "unreadable", str(exc)
            found.append(RunAttempt(path, status, error, (path / ENVELOPE_NAME).is_file()))
        return found

    def complete_run(self, k: int) -> RunAttempt | None:
        """The replicate's first complete, manifest-carrying run (there is at most one: resume skips them)."""
        return next((r for r in self.runs(k) if r.complete), None)

    def attempts(self, k: int) -> list[dict[str, Any]]:
        """The end records the tasks wrote beside the replicate's runs, oldest job first."""
        directory = self.replicate_dir(k)
        records = []
        def job_order(path: Path) -> tuple[int, str]:  # Slurm job ids grow; others (tests) last
            job = path.stem.removeprefix("attempt-")
            return (int(job), "") if job.isdigit() else (2**63, job)

        for path in sorted(directory.glob("attempt-*.json"), key=job_order):
            try:
                records.append(read_versioned(path, (ATTEMPT_FORMAT_VERSION,)))
            except EvidenceError as exc:
                records.append({"file": path.name, "error": str(exc)})
        return records
