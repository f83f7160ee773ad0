"""Rows of the layouts without client nanoseconds (provenance-json, timings-csv, sha256sums).

Each of their rows becomes a `Sample`: case id, arm, workload, pass, the seconds they
published and the decisions it carries. `write_samples` writes rows.jsonl (latency in whole
nanoseconds) and responses/<arm>.jsonl whose entries keep the exact published seconds and
decisions, from which `verify` recomputes every figure with `audit/figures.py`.
Every field is bounded: ids are valid Unicode scalar strings, integers fit 63 bits.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import EvidenceError
from ...evidence.rows import Row
from ..figures import Samples

__all__ = ["MAX_INT", "MAX_TOKENS", "Sample", "check_id", "check_seconds", "samples_of",
           "write_samples"]

MAX_INT = 2**63 - 1  # nanosecond clocks and counts: what a signed 64-bit integer holds
MAX_TOKENS = 2**31 - 1  # token counts
MAX_ID = 512  # characters of a case id
MAX_SECONDS = 86_400.0  # one request's latency
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_ENTRY = json.JSONEncoder(sort_keys=True).encode


def check_id(value: Any, where: str) -> str:
    """A case id: a non-empty string of Unicode scalar values (no lone surrogates), no control characters."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID:
        raise EvidenceError(f"{where}: id {str(value)[:40]!r} is not a non-empty string of at most {MAX_ID} characters.")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise EvidenceError(f"{where}: id {value[:40]!r} holds a lone surrogate, not a Unicode scalar value.")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise EvidenceError(f"{where}: id {value[:40]!r} holds a control character.")
    return value


def check_seconds(value: Any, where: str, name: str) -> float:
    # compared as it is (never a bool), so a 400-digit integer is out of range rather than an OverflowError
    number = not isinstance(value, bool) and isinstance(value, int | float)
    if not (number and (isinstance(value, int) or math.isfinite(value)) and 0 <= value <= MAX_SECONDS):
        raise EvidenceError(f"{where}: {name} {str(value)[:40]} is not a finite number of seconds in [0, {MAX_SECONDS:g}].")
    return float(value)


@dataclass(frozen=True)
class Sample:
    id: str
    arm: str
    workload: str
    pass_index: int
    seconds: float
    decisions: int = 1
    input_tokens: int | None = None
    start_ns: int | None = None  # their start clock where published
    body: dict[str, Any] = field(default_factory=dict)  # their row, kept as canonical JSON in responses/


def samples_of(samples: list[Sample]) -> Samples:
    out: Samples = {}
    for s in samples:
        out.setdefault((s.arm, s.workload, s.pass_index), []).append((s.seconds, s.decisions))
    return out


def write_samples(run: Path, samples: list[Sample]) -> list[Row]:
    """rows.jsonl and responses/<arm>.jsonl of the run being written; returns the rows."""
    rows: list[Row] = []
    seqs: dict[tuple[str, str, int], int] = {}
    clock = 0
    responses: dict[str, list[str]] = {}
    lines = []
    for s in samples:
        key = (s.arm, s.workload, s.pass_index)
        seq = seqs[key] = seqs.get(key, -1) + 1
        start = s.start_ns if s.start_ns is not None else clock
        end = start + round(s.seconds * 1e9)
        clock = end + 1
        body = _CANONICAL(s.body)
        row = Row(id=s.id, backend=s.arm, workload=s.workload, phase="measured", pass_index=s.pass_index, seq=seq,
                  start_ns=start, end_ns=end, status=200, body_sha256=hashlib.sha256(body.encode()).hexdigest(),
                  probability=None, decision=None, label=None, input_tokens=s.input_tokens, error=None)
        rows.append(row)
        lines.append(row.to_json())
        responses.setdefault(s.arm, []).append(_ENTRY({
            "backend": s.arm, "workload": s.workload, "phase": "measured", "pass_index": s.pass_index, "seq": seq,
            "id": s.id, "body": body, "seconds": s.seconds, "decisions": s.decisions}))
    (run / "rows.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    for arm, entries in responses.items():
        (run / "responses" / f"{arm}.jsonl").write_text("".join(e + "\n" for e in entries), encoding="utf-8")
    return rows
