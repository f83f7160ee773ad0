"""state.json's record: the run's `Status` and the steps attempted and finished (format history in rundir.py).

`StateRecord.from_json(data).to_json()` gives back `data` for every state this tool writes:
the keys the record does not name (a cluster's `slurm_end`, ...) travel in `extra`, and an
optional key that was absent stays absent. `RunDir` writes `to_json()` through
`files.write_json_atomic`, so state.json's bytes are what the dict writers wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

__all__ = ["STATE_FORMAT_VERSION", "StateRecord", "Status"]

STATE_FORMAT_VERSION = 1


class Status(StrEnum):
    """state.json's status. A str: it is written, read and compared as the plain word."""

    RUNNING = "running"  # the study is (or was, if stale) writing the run
    COMPLETE = "complete"  # every pass done, summary and report written; the manifest follows
    INCOMPLETE = "incomplete"  # stopped before the end: never reported, compared or signed as complete
    IMPORTED = "imported"  # another project's published evidence, converted (audit/importer.py)


# The keys StateRecord names; `stale` is never written (RunDir.effective_state adds it when reading).
_NAMED = frozenset({"status", "attempted", "finished", "error", "started_utc", "updated_unix", "owner",
                    "signing_requested", "stale", "format_version"})


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class StateRecord:
    """state.json, as written and read; `status` is the plain word written."""

    status: str
    attempted: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    error: str | None = None
    started_utc: str | None = None  # absent before 2026-11's additive field
    updated_unix: float | None = None
    stale: bool = False  # a "running" state whose study died, reported incomplete (RunDir.effective_state)
    format_version: int = 1
    owner: dict[str, Any] | None = None  # the study writing the run (rundir.stale_reason)
    signing_requested: bool | None = None  # written (True) when the study was started with --key
    extra: dict[str, Any] = field(default_factory=dict)  # keys other writers add (cluster: slurm_end)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StateRecord:
        owner, signing = data.get("owner"), data.get("signing_requested")
        return cls(status=str(data.get("status", "unknown")), attempted=tuple(data.get("attempted") or ()),
                   finished=tuple(data.get("finished") or ()), error=data.get("error") or None,
                   started_utc=str(data["started_utc"]) if data.get("started_utc") else None,
                   updated_unix=_number(data.get("updated_unix")), stale=bool(data.get("stale")),
                   format_version=int(data.get("format_version", 1)),
                   owner=dict(owner) if isinstance(owner, Mapping) else None,
                   signing_requested=signing if isinstance(signing, bool) else None,
                   extra={key: value for key, value in data.items() if key not in _NAMED})

    def to_json(self) -> dict[str, Any]:
        """The dict state.json holds (`stale` is a reading, never written)."""
        optional = {"started_utc": self.started_utc, "updated_unix": self.updated_unix, "owner": self.owner,
                    "signing_requested": self.signing_requested}
        return {**self.extra, "status": self.status, "attempted": list(self.attempted),
                "finished": list(self.finished), "error": self.error, "format_version": self.format_version,
                **{key: value for key, value in optional.items() if value is not None}}

    @property
    def known_status(self) -> Status | None:
        """The status as a `Status`, None for a word this tool does not write."""
        return Status(self.status) if self.status in Status._value2member_map_ else None

    def as_status(self, status: str) -> StateRecord:
        """The same state with another status (the runner renders the report of a run it is about to complete)."""
        return replace(self, status=str(status))

    def changed(self, **changes: Any) -> StateRecord:
        """The state with `changes` applied, named fields and others alike (what `RunDir.update_state` writes)."""
        return StateRecord.from_json({**self.to_json(), **changes})

    def attempting(self, step: str) -> StateRecord:
        return replace(self, attempted=(*self.attempted, step))

    def finishing(self, step: str) -> StateRecord:
        return replace(self, finished=(*self.finished, step))
