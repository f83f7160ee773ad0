"""Device memory samples on a background thread, with pass boundaries marked by the runner.

These are periodic samples, not peaks: a short allocation between two samples is never seen.
Every summary says so. memory.jsonl holds a header line, then one line per sample or mark:

    {"format_version": 1, "kind": "header", "uuid": ..., "period_s": 0.1, "note": "samples, not peaks"}
    {"kind": "sample", "t_ns": ..., "used_mib": 50947}
    {"kind": "begin"|"end"|"mark", "t_ns": ..., "label": "hf/mixed/measured-1"}
    {"kind": "error", "t_ns": ..., "error": "..."}

Format history: 1 (2026-11) first version.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from ..errors import EvidenceError
from ..evidence.records import MemoryPart, MemoryPass
from .driver import GpuDriver
from .periodic import PeriodicSampler

__all__ = ["MEMORY_FORMAT_VERSION", "NOTE", "MemoryEvent", "MemorySampler"]

MEMORY_FORMAT_VERSION = 1
NOTE = "samples, not peaks"


@dataclass(frozen=True)
class MemoryEvent:
    """One line of memory.jsonl after the header: a sample, a pass boundary or mark, or a failed read."""

    kind: Literal["sample", "begin", "end", "mark", "error"]
    t_ns: int
    used_mib: int | None = None  # sample
    label: str | None = None  # begin, end, mark
    error: str | None = None  # error

    def to_json(self) -> dict[str, object]:
        return {key: value for key, value in asdict(self).items() if value is not None}


class MemorySampler(PeriodicSampler):
    """Sample `driver.memory_used_mib(uuid)` every `period_s` until stopped."""

    def __init__(self, driver: GpuDriver, uuid: str, period_s: float = 0.1) -> None:
        self.driver, self.uuid, self.period_s = driver, uuid, period_s
        self._events: list[MemoryEvent] = []
        self._lock = threading.Lock()
        self._init_periodic("memory sampler")

    def _tick(self) -> None:
        self.sample()

    # --- recording ---------------------------------------------------------------------

    def _add(self, kind: Literal["sample", "begin", "end", "mark", "error"], **fields: int | str) -> None:
        event = MemoryEvent(kind, time.monotonic_ns(), **fields)  # type: ignore[arg-type]
        with self._lock:
            self._events.append(event)

    def sample(self) -> int | None:
        """Take one sample now (the thread calls this; begin/end call it too)."""
        try:
            used = self.driver.memory_used_mib(self.uuid)
        except Exception as exc:  # noqa: BLE001 - keep sampling: one failed read must not end the record
            self._add("error", error=str(exc))
            return None
        self._add("sample", used_mib=used)
        return used

    def mark(self, label: str) -> None:
        self._add("mark", label=label)

    def begin(self, label: str) -> None:
        self._add("begin", label=label)
        self.sample()

    def end(self, label: str) -> None:
        """Close a pass; the sample taken right here is the pass's 'after' value."""
        self.sample()
        self._add("end", label=label)

    # --- results -----------------------------------------------------------------------

    def events(self) -> list[MemoryEvent]:
        with self._lock:
            return list(self._events)

    def passes(self) -> list[MemoryPass]:
        """Per begin/end pair: the largest sample inside it and the last one (after the pass)."""
        result: list[MemoryPass] = []
        open_at: dict[str, int] = {}
        events = self.events()
        for i, event in enumerate(events):
            if event.kind == "begin" and event.label is not None:
                open_at[event.label] = i
            elif event.kind == "end" and event.label in open_at:
                inside = [e.used_mib for e in events[open_at.pop(event.label): i] if e.used_mib is not None]
                result.append(MemoryPass(label=event.label, samples=len(inside), max_sample_mib=max(inside, default=None),
                                         after_mib=inside[-1] if inside else None, note=NOTE))
        return result

    def summary(self) -> MemoryPart:
        """host.json's `memory`."""
        events = self.events()
        samples = [e.used_mib for e in events if e.used_mib is not None]
        return MemoryPart(format_version=MEMORY_FORMAT_VERSION, uuid=self.uuid, period_s=self.period_s, note=NOTE,
                          samples=len(samples), max_sample_mib=max(samples, default=None),
                          errors=sum(e.kind == "error" for e in events), passes=self.passes())

    def write(self, path: Path) -> None:
        """Write memory.jsonl; refuses to overwrite an existing file."""
        header = {"format_version": MEMORY_FORMAT_VERSION, "kind": "header", "uuid": self.uuid,
                  "period_s": self.period_s, "note": NOTE}
        lines = [header, *(e.to_json() for e in self.events())]
        try:
            with open(path, "x", encoding="utf-8") as fh:
                fh.writelines(json.dumps(line, sort_keys=True) + "\n" for line in lines)
        except FileExistsError as exc:
            raise EvidenceError(f"{path} already exists; memory samples are never overwritten.") from exc
