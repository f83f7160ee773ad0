"""Per-request timing rows: the source of truth of every run.

Every statistic in `summary.json`, the report, `verify` and `compare` is derived from
these rows by pure functions (`openjev_repro.results.statistics`). Rows are written one JSON object
per line to `rows.jsonl`, flushed after each request.

Format history:
    1  (2026-11) first version. Later additive field (optional when reading, so older runs read
       and verify unchanged): `reconnected` (2026-12), true when the client had to open a new
       connection for this request because the server had closed the previous one (or an error
       had); false when it reused the open connection or made the first one; null when not
       recorded (older runs, imported evidence).
       Load levels (2026-12, issue 29), written only when set, so a run without a `load` in its
       recipe writes byte for byte the rows it wrote before: `level` (the load level id,
       `closed-c{N}` or `open-r{rate:g}`), `scheduled_ns` (open loop: when the request was due to
       be sent, on the clock of `start_ns`; `start_ns` stays the actual send), `connection` (the
       index of the client connection/worker that sent it) and `server_queue_ms` (the server's
       own queue time, from its `X-Queue-Time-Ms` response header, when it sends one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, Self, get_args

from ..errors import EvidenceError
from .files import read_jsonl

__all__ = ["ALWAYS_WRITTEN_FIELDS", "OPTIONAL_FIELDS", "ROW_FORMAT_VERSION", "Phase", "Row", "RowWriter", "read_rows"]

ROW_FORMAT_VERSION = 1

# first: first inference after readiness; warmup: warm-up requests;
# feasibility: excluded full passes; measured: the passes every statistic uses.
Phase = Literal["first", "warmup", "feasibility", "measured"]


@dataclass(frozen=True)
class Row:
    """One request as the client saw it. Times are the client's monotonic clock in ns."""

    id: str  # JevBench case id
    backend: str  # backend name from the recipe
    workload: str  # workload name from the recipe
    phase: Phase
    pass_index: int  # 1-based within (backend, workload, phase)
    seq: int  # 0-based position of the request within its pass
    start_ns: int  # just before the first byte of the request was sent
    end_ns: int  # just after the last byte of the response was received
    status: int | None  # HTTP status; None when no response arrived
    body_sha256: str | None  # sha256 of the exact response body bytes
    probability: float | None  # p_yes of the noul answer
    decision: str | None  # decision.decision_of(probability): "yes" when >= YES_THRESHOLD
    label: str | None  # the case's expected answer, "yes" or "no"
    input_tokens: int | None  # usage.input_tokens of the response
    error: str | None  # why this request failed; None when it succeeded
    v: int = ROW_FORMAT_VERSION
    reconnected: bool | None = None  # a new connection was opened for it after an earlier one closed
    # Load levels (issue 29): serialized only when not None (see _SPARSE_FIELDS).
    level: str | None = None  # load level id: closed-c{N} or open-r{rate:g}
    scheduled_ns: int | None = None  # open loop: the scheduled send time (clock of start_ns)
    connection: int | None = None  # index of the client connection (worker) that sent it
    server_queue_ms: float | None = None  # the server's X-Queue-Time-Ms header, when it sent one

    @property
    def latency_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def latency_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def from_schedule_ns(self) -> int:
        """Latency from the scheduled send time (open loop), else from the actual send.

        Open-loop latency is measured from the schedule, so a client or server stall that delays
        sends is counted in the latency of every request it delayed (no coordinated omission)."""
        origin = self.start_ns if self.scheduled_ns is None else self.scheduled_ns
        return self.end_ns - origin

    @property
    def late_ns(self) -> int | None:
        """How late the request was sent against its schedule; None when it had no schedule."""
        return None if self.scheduled_ns is None else self.start_ns - self.scheduled_ns

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> str:
        # Every field is a scalar, so a shallow dict equals dataclasses.asdict (which deep-copies, ~10x slower).
        data = {name: getattr(self, name) for name in _FIELD_NAMES}
        for name in _SPARSE_FIELDS:
            if data[name] is None:
                del data[name]
        return json.dumps(data, sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict) -> Row:
        version = data.get("v")
        if version != ROW_FORMAT_VERSION:
            raise EvidenceError(
                f"Row format version {version!r} is not supported (this tool reads {ROW_FORMAT_VERSION})."
            )
        names = set(_FIELD_NAMES)
        unknown = set(data) - names
        missing = names - set(data) - OPTIONAL_FIELDS
        if unknown or missing:
            raise EvidenceError(f"Row has unknown fields {sorted(unknown)} or lacks {sorted(missing)}.")
        if data["phase"] not in _PHASES:
            raise EvidenceError(f"Row phase {data['phase']!r} is not one of {', '.join(_PHASES)}.")
        return cls(**data)


_FIELD_NAMES = tuple(f.name for f in fields(Row))
# Fields added to format 1 later: a row without them (an older run) reads with their default.
# Load-level fields are also left out of a row that does not set them (a default run's rows stay
# byte for byte what they were before load levels existed).
_SPARSE_FIELDS = ("level", "scheduled_ns", "connection", "server_queue_ms")
OPTIONAL_FIELDS = frozenset({"reconnected", *_SPARSE_FIELDS})
# The fields every row's line holds (a row without load fields holds exactly these).
ALWAYS_WRITTEN_FIELDS = tuple(name for name in _FIELD_NAMES if name not in _SPARSE_FIELDS)
_PHASES = get_args(Phase)


class RowWriter:
    """Appends rows to a JSONL file and flushes after each, so a crash loses nothing written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held for the run; close() or `with` closes it

    def write(self, row: Row) -> None:
        self._file.write(row.to_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_rows(path: Path) -> list[Row]:
    """Read every row of a rows.jsonl; a malformed line is an EvidenceError naming the line."""
    rows: list[Row] = []
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise EvidenceError(f"No rows file at {path}.") from exc
    for number, value in read_jsonl(path, "a valid row", data=data):
        try:
            rows.append(Row.from_dict(value))
        except (ValueError, TypeError, AttributeError) as exc:
            raise EvidenceError(f"{path}:{number}: not a valid row ({exc}).") from exc
        except EvidenceError as exc:
            raise EvidenceError(f"{path}:{number}: {exc}") from exc
    return rows

