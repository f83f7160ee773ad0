"""state.json's record: the run's `Status` and the steps attempted and finished (format history in rundir.py).

`StateRecord.from_json(data).to_json()` gives back `data` for every state this tool writes:
every key any writer wrote is a field (a cluster's `slurm_end` included), and an optional key
that was absent stays absent (UNSET). `RunDir` writes `to_json()` through
`files.write_json_atomic`, so state.json's bytes are what the dict writers wrote. Read a run's
state with `records.state_of(run)` (stale runs reported incomplete) or `RunDir.state_record()`.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

from .decoding import UNSET, Count, Finite, Number, Record, Text, UnsetType, decode

__all__ = ["STATE_FORMAT_VERSION", "Owner", "SlurmEnd", "StateRecord", "Status"]

STATE_FORMAT_VERSION = 1


class Status(StrEnum):
    """state.json's status. A str: it is written, read and compared as the plain word."""

    RUNNING = "running"  # the study is (or was, if stale) writing the run
    COMPLETE = "complete"  # every pass done, summary and report written; the manifest follows
    INCOMPLETE = "incomplete"  # stopped before the end: never reported, compared or signed as complete
    IMPORTED = "imported"  # another project's published evidence, converted (audit/importer.py)


class Owner(Record, frozen=True, kw_only=True):
    """The study writing the run (rundir.stale_reason): its pid, the boot, when it started, where."""

    pid: Count
    boot_id: Text | None = None
    start_ticks: Count | None = None
    host: Text | None = None


class SlurmEnd(Record, frozen=True, kw_only=True):
    """How Slurm ended the task of a cluster run: what the task heard at SIGTERM (cluster/task.py: state and
    reason, or the error of asking) or the final state `settle` recorded (cluster/status.py). In state.json
    and in the task's attempt record (cluster/submission.py)."""

    state: Text | None
    reason: Text | None = None
    exit_code: Text | Number | None | UnsetType = UNSET
    source: Text | None | UnsetType = UNSET
    recorded_utc: Text | None | UnsetType = UNSET
    error: Text | UnsetType = UNSET


class StateRecord(Record, frozen=True, kw_only=False):
    """state.json, as written and read; `status` is the plain word written."""

    status: Text
    attempted: tuple[Text, ...] = ()
    finished: tuple[Text, ...] = ()
    error: Text | None = None
    format_version: int = STATE_FORMAT_VERSION
    started_utc: Text | UnsetType = UNSET  # absent before 2026-11's additive field
    updated_unix: Finite | UnsetType = UNSET
    owner: Owner | UnsetType = UNSET  # the study writing the run (rundir.stale_reason)
    signing_requested: bool | UnsetType = UNSET  # written (True) when the study was started with --key
    slurm_end: SlurmEnd | UnsetType = UNSET  # cluster/status.py: how Slurm ended the task
    stale: bool | UnsetType = UNSET  # never written: RunDir.effective_state_record's reading of a dead "running" study

    @classmethod
    def from_json(cls, data: object, where: str = "state.json") -> StateRecord:
        return decode(data, cls, where)

    @property
    def is_stale(self) -> bool:
        return self.stale is True

    @property
    def known_status(self) -> Status | None:
        """The status as a `Status`, None for a word this tool does not write."""
        return Status(self.status) if self.status in Status._value2member_map_ else None

    def as_status(self, status: str) -> StateRecord:
        """The same state with another status (the runner renders the report of a run it is about to complete)."""
        return msgspec.structs.replace(self, status=str(status))

    def changed(self, **changes: object) -> StateRecord:
        """The state with `changes` applied (what `RunDir.update_state` writes); a SlurmEnd or Owner may be a dict."""
        plain = {key: str(value) if isinstance(value, StrEnum) else value for key, value in changes.items()}
        return StateRecord.from_json({**self.to_json(), **plain})

    def attempting(self, step: str) -> StateRecord:
        return msgspec.structs.replace(self, attempted=(*self.attempted, step))

    def finishing(self, step: str) -> StateRecord:
        return msgspec.structs.replace(self, finished=(*self.finished, step))
