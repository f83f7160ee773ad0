"""Per-request timing rows: the source of truth of every run.

Every statistic in `summary.json`, the report, `verify` and `compare` is derived from
these rows by pure functions (`openjev_repro.results.statistics`). Rows are written one JSON object
per line to `rows.jsonl`, flushed after each request.

Format history:
    1  (2026-11) first version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, Self, get_args

from ..errors import EvidenceError
from .files import read_jsonl

__all__ = ["ROW_FORMAT_VERSION", "Phase", "Row", "RowWriter", "read_rows"]

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

    @property
    def latency_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def latency_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> str:
        # Every field is a scalar, so a shallow dict equals dataclasses.asdict (which deep-copies, ~10x slower).
        return json.dumps({name: getattr(self, name) for name in _FIELD_NAMES}, sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict) -> Row:
        version = data.get("v")
        if version != ROW_FORMAT_VERSION:
            raise EvidenceError(
                f"Row format version {version!r} is not supported (this tool reads {ROW_FORMAT_VERSION})."
            )
        names = set(_FIELD_NAMES)
        unknown = set(data) - names
        missing = names - set(data)
        if unknown or missing:
            raise EvidenceError(f"Row has unknown fields {sorted(unknown)} or lacks {sorted(missing)}.")
        if data["phase"] not in _PHASES:
            raise EvidenceError(f"Row phase {data['phase']!r} is not one of {', '.join(_PHASES)}.")
        return cls(**data)


_FIELD_NAMES = tuple(f.name for f in fields(Row))
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

