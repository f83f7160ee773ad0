"""Decoding the other project's rows into ours, streamed into the run being written.

An arm file `<arm>-measured-<pass>.jsonl` holds one object per request: `id, latency_s,
probability_yes, probability_delta, predicted, raw, checks, client_start_monotonic_ns,
client_end_monotonic_ns`. msgspec decodes it; the standard library re-reads a line msgspec
refuses, so what is accepted and every message are unchanged; a malformed row is one error.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import operator
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec

from ...errors import EvidenceError, InputMismatch
from ...evidence.rows import ALWAYS_WRITTEN_FIELDS, Row
from ...limits import MAX_PASSES

MAX_INT = 2**63 - 1  # what a signed 64-bit nanosecond clock holds
MAX_TOKENS = 2**31 - 1
MAX_ID = 512

__all__ = ["FILE_RE", "ArmRead", "arm_files", "collector_paused", "read_arm_files"]

FILE_RE = re.compile(r"^(?P<arm>[A-Za-z0-9][A-Za-z0-9_.-]*)-measured-(?P<pass>[1-9][0-9]{0,5})\.jsonl$")
_FIELDS = ("id", "latency_s", "probability_yes", "probability_delta", "predicted", "raw", "checks",
           "client_start_monotonic_ns", "client_end_monotonic_ns")


def _number(value: Any) -> bool:
    """A finite JSON number whose float is finite too (a 400-digit integer is not, and is refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= MAX_INT


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _TheirRow(msgspec.Struct, frozen=True):
    """One row of an arm file. msgspec checks each field's JSON type; `_checked` checks the values."""

    id: str
    latency_s: int | float
    probability_yes: int | float
    probability_delta: int | float
    predicted: str
    raw: dict[str, Any]
    checks: dict[str, bool]
    client_start_monotonic_ns: int
    client_end_monotonic_ns: int


_DECODE_ROW = msgspec.json.Decoder(_TheirRow)
# The encoders of the formats on disk, built once: `raw` as canonical JSON (a row's body, whose
# sha256 is its body_sha256), a row exactly as `Row.to_json` writes it, a responses/ entry. The
# standard library's, not msgspec's: msgspec prints some floats differently (1e-7, not 1e-07),
# which would change bodies and their digests. Decoded JSON holds no cycles to check for.
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                                   check_circular=False).encode
_ROW_JSON = json.JSONEncoder(sort_keys=True, allow_nan=False, check_circular=False).encode
_RESPONSE_JSON = json.JSONEncoder(sort_keys=True, check_circular=False).encode
_ROW_FIELDS = ALWAYS_WRITTEN_FIELDS  # an imported row has no load-level fields
_row_values = operator.attrgetter(*_ROW_FIELDS)  # what asdict(row) holds, without its deep copies
_WRITE_BUFFER = 1 << 20


def _their_row(line: str, where: str) -> _TheirRow:
    """One line of an arm file, decoded and checked; EvidenceError names the first problem.

    msgspec decodes a well-formed row in one typed pass. A line it refuses (not JSON, a missing
    field, a wrong type, NaN, a number out of its range, a lone surrogate, deep nesting) is
    parsed again by the standard library and checked field by field, so that what is accepted
    and every error message are those of `json.loads` and `_validated`. Where both decode a
    line they yield equal values (duplicate keys: the last wins in both).
    """
    try:
        row = _DECODE_ROW.decode(line)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise EvidenceError(f"{where}: not JSON ({exc}).") from None
        except RecursionError:
            raise EvidenceError(f"{where}: JSON nested too deeply.") from None
        return _validated(obj, where)
    return _checked(row, where)


def _validated(obj: Any, where: str) -> _TheirRow:
    """A row as json.loads read it: an object with every field, each checked."""
    if not isinstance(obj, dict):
        raise EvidenceError(f"{where}: a row is {type(obj).__name__}, not a JSON object.")
    missing = [k for k in _FIELDS if k not in obj]
    if missing:
        raise EvidenceError(f"{where}: lacks {', '.join(missing)}; not system1-omni evidence.")
    return _checked(_TheirRow(**{k: obj[k] for k in _FIELDS}), where)  # Struct() does not check types


def _id_problems(case: Any) -> list[str]:
    if not isinstance(case, str) or not case.strip() or len(case) > MAX_ID:
        return [f"id {str(case)[:40]!r} is not a non-empty string of at most {MAX_ID} characters"]
    if any(0xD800 <= ord(c) <= 0xDFFF or ord(c) < 0x20 for c in case):
        return [(f"id {case[:40]!r} is not a string of Unicode scalar values without control characters "
                "(a lone surrogate or a newline)")]
    return []


# Each value check of one of their rows: (holds, what is wrong when it does not).
_VALUE_CHECKS: tuple[tuple[Callable[[_TheirRow], bool], Callable[[_TheirRow], str]], ...] = (
    (lambda r: _number(r.latency_s) and r.latency_s >= 0,
     lambda r: f"latency_s {r.latency_s!r} is not a finite number >= 0"),
    (lambda r: _number(r.probability_yes) and 0 <= r.probability_yes <= 1,
     lambda r: f"probability_yes {r.probability_yes!r} is not a number in [0, 1]"),
    (lambda r: _number(r.probability_delta),
     lambda r: f"probability_delta {r.probability_delta!r} is not a finite number"),
    (lambda r: r.predicted in ("yes", "no"), lambda r: f"predicted {r.predicted!r} is not 'yes' or 'no'"),
    (lambda r: isinstance(r.raw, dict), lambda r: "raw is not a JSON object"),
    (lambda r: isinstance(r.checks, dict) and all(isinstance(v, bool) for v in r.checks.values()),
     lambda r: "checks is not an object of booleans"),
)


def _clock_problems(start: Any, end: Any) -> list[str]:
    if not _count(start) or not _count(end) or start > MAX_INT or end > MAX_INT:
        return [f"client_*_monotonic_ns ({str(start)[:30]}, {str(end)[:30]}) are not integers in [0, 2**63)"]
    if end < start:
        return [f"client_end_monotonic_ns {end} is before client_start_monotonic_ns {start}"]
    return []


def _usage_problems(raw: Any) -> list[str]:
    usage = raw.get("usage") if isinstance(raw, dict) else None
    if usage is not None and not isinstance(usage, dict):
        return ["raw.usage is not a JSON object"]
    tokens = usage.get("input_tokens") if usage else None
    if tokens is not None and (not _count(tokens) or tokens > MAX_TOKENS):
        return [f"raw.usage.input_tokens {str(tokens)[:30]} is not an integer in [0, {MAX_TOKENS}]"]
    return []


def _checked(row: _TheirRow, where: str) -> _TheirRow:
    """Every field of one of their rows, checked (types too: `_validated` passes them unchecked)."""
    problems = (_id_problems(row.id) + [message(row) for holds, message in _VALUE_CHECKS if not holds(row)]
                + _clock_problems(row.client_start_monotonic_ns, row.client_end_monotonic_ns) + _usage_problems(row.raw))
    if problems:
        raise EvidenceError(f"{where}: {'; '.join(problems)}.")
    return row


def _body(raw: Any, where: str) -> str:
    """Their raw response as canonical JSON (what the row's body_sha256 hashes)."""
    try:
        return _CANONICAL_JSON(raw)
    except ValueError:
        raise EvidenceError(f"{where}: raw holds NaN or Infinity, which JSON does not allow.") from None
    except RecursionError:  # msgspec may decode a level or two deeper than json.loads: the same error
        raise EvidenceError(f"{where}: JSON nested too deeply.") from None


def _label(checks: dict[str, Any], predicted: str) -> str | None:
    """Their rows carry correctness, not the label: the label is what makes `correct` true."""
    if not isinstance(checks.get("correct"), bool):
        return None
    return predicted if checks["correct"] else {"yes": "no", "no": "yes"}[predicted]


def _row(their: _TheirRow, arm: str, workload: str, pass_index: int, seq: int, where: str) -> tuple[Row, str, str]:
    """Our row, its line of rows.jsonl (byte for byte `Row.to_json`) and the body it hashes."""
    body = _body(their.raw, where)
    failed = sorted(k for k, v in their.checks.items() if v is False and k != "correct")
    predicted = "yes" if their.predicted == "yes" else "no"  # checked; one shared string each for 100k rows
    usage = their.raw.get("usage") or {}
    # Rows stay in memory for `summarize`: the passes of every arm share one interned string per case id.
    row = Row(id=sys.intern(their.id), backend=arm, workload=workload, phase="measured", pass_index=pass_index, seq=seq,
              start_ns=their.client_start_monotonic_ns, end_ns=their.client_end_monotonic_ns, status=None,
              body_sha256=hashlib.sha256(body.encode("utf-8")).hexdigest(), probability=float(their.probability_yes),
              decision=predicted, label=_label(their.checks, predicted), input_tokens=usage.get("input_tokens"),
              error=f"checks failed: {', '.join(failed)}" if failed else None)
    return row, _ROW_JSON(dict(zip(_ROW_FIELDS, _row_values(row), strict=True))), body


@dataclass
class ArmRead:
    """What reading their arm files yields besides the rows written."""
    arms: dict[str, list[int]] = field(default_factory=dict)  # arm -> pass indexes
    latencies: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # (arm, pass) -> ms
    max_delta: dict[tuple[str, int], float] = field(default_factory=dict)  # (arm, pass) -> max |probability_delta|
    rows: list[Row] = field(default_factory=list)  # every row written, in file order
    notes: list[str] = field(default_factory=list)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while rows pile up: each full collection would walk every row kept
    so far, and no row builds a reference cycle (reference counting frees what a row leaves behind);
    the few cycles made elsewhere meanwhile are collected once collection resumes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class _PassWriter:
    """Where one arm's rows go while its pass files are read."""
    out: ArmRead
    rows_file: Any
    responses: Any
    arm: str
    workload: str


def _open_row_file(root: Path, name: str) -> Any:
    try:
        return open(root / name, encoding="utf-8")  # the caller closes it (`with`)
    except OSError as exc:
        raise EvidenceError(f"{name}: cannot be read ({exc.strerror or exc}).") from None


def _write_line(w: _PassWriter, their: _TheirRow, index: int, seq: int, where: str) -> float:
    """One of their rows into rows.jsonl and responses/<arm>.jsonl; returns its |probability_delta|."""
    row, row_line, body = _row(their, w.arm, w.workload, index, seq, where)
    if abs(their.latency_s * 1e9 - row.latency_ns) > 1e6:
        w.out.notes.append(f"{where}: latency_s {their.latency_s} differs from the client ns by over 1 ms")
    w.rows_file.write(row_line + "\n")
    w.responses.write(_RESPONSE_JSON({
        "backend": w.arm, "workload": w.workload, "phase": "measured", "pass_index": index,
        "seq": seq, "id": row.id, "body": body, "probability_delta": their.probability_delta}) + "\n")
    w.out.rows.append(row)
    w.out.latencies[(w.arm, index)].append(row.latency_ms)
    return abs(their.probability_delta)


def _read_pass(root: Path, name: str, index: int, w: _PassWriter) -> set[str]:
    """One pass file of an arm: every row written; returns its case ids."""
    ids: set[str] = set()
    key = (w.arm, index)
    w.out.latencies.setdefault(key, [])
    w.out.arms.setdefault(w.arm, []).append(index)
    delta = 0.0
    with _open_row_file(root, name) as fh:
        for seq, line in enumerate(_lines(fh, name)):
            where = f"{name}:{seq + 1}"
            if not line.strip():
                raise EvidenceError(f"{where}: empty line; a row file holds one JSON object per line.")
            their = _their_row(line, where)
            case = sys.intern(their.id)
            if case in ids:
                raise EvidenceError(f"{where}: duplicate case id {case}; a pass holds each case once.")
            ids.add(case)
            delta = max(delta, _write_line(w, their, index, seq, where))
    if not ids:
        raise EvidenceError(f"{name}: holds no rows.")
    w.out.max_delta[key] = delta
    return ids


def read_arm_files(root: Path, files: list[tuple[str, int, str]], workload: str, run: Path) -> ArmRead:
    """Stream every arm file into rows.jsonl and responses/<arm>.jsonl under `run` (buffered writes: the
    run is a temporary directory renamed into place only when complete, so a crash leaves no partial run)."""
    out = ArmRead()
    with open(run / "rows.jsonl", "w", encoding="utf-8", buffering=_WRITE_BUFFER) as rows_file:
        for arm in sorted({a for a, _, _ in files}):
            reference: set[str] | None = None
            with open(run / "responses" / f"{arm}.jsonl", "w", encoding="utf-8",
                      buffering=_WRITE_BUFFER) as responses:
                writer = _PassWriter(out, rows_file, responses, arm, workload)
                for _, index, name in sorted(f for f in files if f[0] == arm):
                    ids = _read_pass(root, name, index, writer)
                    reference = ids if reference is None else reference
                    if ids != reference:
                        missing, extra = sorted(reference - ids), sorted(ids - reference)
                        raise EvidenceError(f"{name}: case ids differ from the arm's first pass "
                                            f"(missing {', '.join(missing[:5]) or 'none'}; "
                                            f"extra {', '.join(extra[:5]) or 'none'}).")
    return out


def _lines(fh: Any, name: str) -> Iterable[str]:
    try:
        for line in fh:
            yield line.rstrip("\n")
    except UnicodeDecodeError as exc:
        raise EvidenceError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start}).") from None



def _check_passes(files: list[tuple[str, int, str]]) -> None:
    """Every arm has passes 1..N, and every arm the same N."""
    by_arm: dict[str, list[int]] = {}
    for arm, index, _ in files:
        by_arm.setdefault(arm, []).append(index)
    counts = {arm: sorted(p) for arm, p in by_arm.items()}
    for arm, passes in counts.items():
        if passes[-1] > MAX_PASSES:
            raise EvidenceError(f"arm {arm} has pass {passes[-1]}, above the {MAX_PASSES} passes a run may hold; "
                                "not imported.")
        if passes != list(range(1, len(passes) + 1)):
            raise EvidenceError(f"arm {arm} has passes {passes}; they must be 1..N with none missing.")
    if len({len(p) for p in counts.values()}) != 1:
        raise EvidenceError(f"arms have different numbers of passes ({counts}); the import needs them equal.")


def arm_files(folder: str, verified: list[str]) -> list[tuple[str, int, str]]:
    files, seen = [], set()
    for name in verified:
        pure = PurePosixPath(name)
        match = FILE_RE.match(pure.name)
        if match and (str(pure.parent) if str(pure.parent) != "." else "") == folder:
            key = (match["arm"].lower(), int(match["pass"]))
            if key in seen:
                raise EvidenceError(f"{name}: arm {key[0]} pass {key[1]} appears twice (arm names ignore case).")
            seen.add(key)
            files.append((key[0], key[1], name))
    if not files:
        raise InputMismatch(f"{folder or '.'}: holds no verified <arm>-measured-<pass>.jsonl file.")
    _check_passes(files)
    return files
