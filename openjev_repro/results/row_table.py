"""Rows in columnar form: `rows.jsonl` parsed once into numpy arrays, strings interned.

`read_table(path)` decodes a rows file in bounded chunks with msgspec (typed, so a field
of the wrong type is caught while decoding) and keeps one array per field: latency,
probability, decision, label, pass, phase, seq, input tokens and success as numpy arrays;
ids, backends, workloads, phases, decisions and labels as integer codes into a list of
their distinct values. `verify`, `summarize`, `compare` and `report` all take this form,
so a command parses its rows file exactly once.

The format on disk is `openjev_repro.evidence.rows` (format 1), unchanged. A file the fast decoder
refuses is read again line by line with `rows.read_rows`, so every error names the line
and says what is wrong, exactly as before; a row that the line reader accepts but whose
field types are wrong (e.g. a seq of "3") is an error naming the line too.

Exactness: a latency is `(end_ns - start_ns) / 1e6` computed on int64 then float64, the
same correctly rounded value as Python's int / float; probabilities are float64, as
Python floats are. `results` therefore computes the same figures from a table as from
`Row` objects.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np
from msgspec import Meta

from ..errors import EvidenceError
from ..evidence.rows import ROW_FORMAT_VERSION, Phase, Row, read_rows

__all__ = ["CHUNK_BYTES", "Interned", "RowTable", "as_table", "chunks", "read_table"]

CHUNK_BYTES = 8 << 20  # rows are decoded 8 MiB at a time, so memory stays bounded

_ROW_FIELDS = tuple(f for f in Row.__dataclass_fields__)
_LOAD_COLUMNS = ("level", "scheduled_ns", "connection", "server_queue_ms")  # Row's load-level fields


# Bounds checked while decoding, so no arithmetic on a column can overflow or meet a non-finite value:
# times and counts fit int64, queue times are finite and below a year.
_Int64 = Annotated[int, Meta(ge=0, le=2**63 - 1)]
_Small = Annotated[int, Meta(ge=0, le=2**31 - 1)]
_QueueMs = Annotated[float, Meta(ge=0, le=3.2e10)]


class _RowStruct(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The typed shape of one rows.jsonl line (every field required, as `Row.from_dict` demands)."""

    id: str
    backend: str
    workload: str
    phase: Phase
    pass_index: _Small
    seq: _Small
    start_ns: _Int64
    end_ns: _Int64
    status: int | None
    body_sha256: str | None
    probability: float | None
    decision: str | None
    label: str | None
    input_tokens: _Int64 | None
    error: str | None
    v: int
    reconnected: bool | None = None  # optional (rows.OPTIONAL_FIELDS): absent in older runs
    level: str | None = None  # load-level fields: optional, absent from runs without a load
    scheduled_ns: _Int64 | None = None
    connection: _Small | None = None
    server_queue_ms: _QueueMs | None = None


_DECODER = msgspec.json.Decoder(_RowStruct)


@dataclass(frozen=True, eq=False)
class Interned:
    """A string column: `codes[i]` indexes `values` (which may hold None)."""

    codes: np.ndarray
    values: list[str | None]

    @classmethod
    def of(cls, column: Sequence[str | None]) -> Interned:
        """Codes in order of first appearance; every loop runs in C (dict.fromkeys, map)."""
        values = list(dict.fromkeys(column))
        lookup = {v: i for i, v in enumerate(values)}
        codes = np.fromiter(map(lookup.__getitem__, column), dtype=np.int32, count=len(column))
        return cls(codes, values)

    def code(self, value: str | None) -> int:
        """The code of `value`, or -1 when no row holds it."""
        try:
            return self.values.index(value)
        except ValueError:
            return -1

    def lookup(self) -> dict[str | None, int]:
        """Value -> code of every distinct value."""
        return {v: i for i, v in enumerate(self.values)}

    def equals(self, value: str | None) -> np.ndarray:
        """Boolean mask of rows whose value is `value`."""
        return self.codes == self.code(value)

    def strings(self, index: np.ndarray | None = None) -> list[str | None]:
        """The values of the rows at `index` (all rows when None), in order."""
        codes = self.codes if index is None else self.codes[index]
        return list(map(self.values.__getitem__, codes.tolist()))


def _concat(parts: list[Interned]) -> Interned:
    """One Interned column of several chunks (their value lists merged)."""
    if len(parts) == 1:
        return parts[0]
    lookup: dict[str | None, int] = {}
    codes = []
    for part in parts:
        remap = np.array([lookup.setdefault(v, len(lookup)) for v in part.values], dtype=np.int32)
        codes.append(remap[part.codes] if len(remap) else part.codes)
    return Interned(np.concatenate(codes) if codes else np.zeros(0, np.int32), list(lookup))


@dataclass(eq=False)
class RowTable:
    """Every row of a run as columns; row i of every column is line i (blank lines skipped)."""

    ids: Interned
    backend: Interned
    workload: Interned
    phase: Interned
    decision: Interned
    label: Interned
    pass_index: np.ndarray  # int64
    seq: np.ndarray  # int64
    start_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64
    probability: np.ndarray  # float64, 0.0 where absent (see has_probability)
    has_probability: np.ndarray  # bool
    input_tokens: np.ndarray  # int64, 0 where absent (see has_input_tokens)
    has_input_tokens: np.ndarray  # bool
    ok: np.ndarray  # bool: error is None
    status: list[int | None]
    reconnected: list[bool | None]
    level: list[str | None]  # load-level columns (all None in a run without a load)
    scheduled_ns: list[int | None]
    connection: list[int | None]
    server_queue_ms: list[float | None]
    body_sha256: list[str | None]
    error: list[str | None]
    _latency_ms: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def latency_ms(self) -> np.ndarray:
        """Every row's latency (float64, computed once): `(end_ns - scheduled_ns) / 1e6` for a row of an
        open-loop level, which carries its scheduled send (a stall counts against every request it delayed:
        no coordinated omission, docs/load.md), else `(end_ns - start_ns) / 1e6`."""
        if self._latency_ms is None:
            scheduled, has_schedule = _optional(self.scheduled_ns, np.int64)
            self._latency_ms = (self.end_ns - np.where(has_schedule, scheduled, self.start_ns)) / 1e6
        return self._latency_ms

    # --- building ----------------------------------------------------------------------

    @classmethod
    def from_columns(cls, c: Columns) -> RowTable:
        """A table from one Python list per Row field (all of one length); EvidenceError for a load field out
        of the bounds `_RowStruct` holds a decoded line to (rows built in memory never met the decoder)."""
        c.check_bounds()
        probability, has_probability = _optional(c.probability, np.float64)
        tokens, has_tokens = _optional(c.input_tokens, np.int64)
        try:
            return cls(
                ids=Interned.of(c.id), backend=Interned.of(c.backend), workload=Interned.of(c.workload),
                phase=Interned.of(c.phase), decision=Interned.of(c.decision), label=Interned.of(c.label),
                pass_index=np.array(c.pass_index, dtype=np.int64), seq=np.array(c.seq, dtype=np.int64),
                start_ns=np.array(c.start_ns, dtype=np.int64), end_ns=np.array(c.end_ns, dtype=np.int64),
                probability=probability, has_probability=has_probability,
                input_tokens=tokens, has_input_tokens=has_tokens,
                ok=~_present(c.error), status=c.status, body_sha256=c.body_sha256, error=c.error,
                reconnected=c.reconnected, level=c.level, scheduled_ns=c.scheduled_ns, connection=c.connection,
                server_queue_ms=c.server_queue_ms,
            )
        except (TypeError, ValueError, OverflowError) as exc:
            raise EvidenceError(f"rows hold a value of the wrong type ({exc}).") from exc

    @classmethod
    def from_rows(cls, rows: Iterable[Row]) -> RowTable:
        return cls.from_columns(Columns.of(list(rows)))

    @classmethod
    def concat(cls, tables: Sequence[RowTable]) -> RowTable:
        if len(tables) == 1:
            return tables[0]
        if not tables:
            return cls.from_rows([])
        arrays: dict[str, Any] = {name: np.concatenate([getattr(t, name) for t in tables])
                  for name in ("pass_index", "seq", "start_ns", "end_ns", "probability", "has_probability",
                               "input_tokens", "has_input_tokens", "ok")}
        strings: dict[str, Any] = {name: _concat([getattr(t, name) for t in tables])
                   for name in ("ids", "backend", "workload", "phase", "decision", "label")}
        lists: dict[str, Any] = {name: [x for t in tables for x in getattr(t, name)] for name in ("status", "body_sha256", "error",
                                                                                       "reconnected", *_LOAD_COLUMNS)}
        return cls(**arrays, **strings, **lists)

    # --- reading back ------------------------------------------------------------------

    def row(self, i: int) -> Row:
        return Row(
            id=self.ids.values[self.ids.codes[i]], backend=self.backend.values[self.backend.codes[i]],
            workload=self.workload.values[self.workload.codes[i]], phase=self.phase.values[self.phase.codes[i]],
            pass_index=int(self.pass_index[i]), seq=int(self.seq[i]), start_ns=int(self.start_ns[i]),
            end_ns=int(self.end_ns[i]), status=self.status[i], body_sha256=self.body_sha256[i],
            probability=float(self.probability[i]) if self.has_probability[i] else None,
            decision=self.decision.values[self.decision.codes[i]], label=self.label.values[self.label.codes[i]],
            input_tokens=int(self.input_tokens[i]) if self.has_input_tokens[i] else None, error=self.error[i],
            reconnected=self.reconnected[i], **{name: getattr(self, name)[i] for name in _LOAD_COLUMNS},
        )

    def rows(self) -> Iterator[Row]:
        return (self.row(i) for i in range(len(self)))

    def groups(self, index: np.ndarray, by: Sequence[str]) -> dict[tuple, np.ndarray]:
        """The rows at `index` grouped by the named columns, each group's row indices in `seq` order.

        `by` names string columns ("workload", "backend", "phase", ...) or "pass_index"; keys are
        tuples of their values (strings, or int for pass_index), in no particular order."""
        cols = [self.pass_index if name == "pass_index" else getattr(self, name).codes for name in by]
        order = index[np.lexsort((self.seq[index], *(c[index] for c in reversed(cols))))]
        if not len(order):
            return {}
        change = np.zeros(len(order), dtype=bool)
        change[0] = True
        for col in cols:
            c = col[order]
            change[1:] |= c[1:] != c[:-1]
        starts = np.flatnonzero(change).tolist() + [len(order)]
        out: dict[tuple, np.ndarray] = {}
        for a, b in itertools.pairwise(starts):
            i = int(order[a])
            out[tuple(int(self.pass_index[i]) if name == "pass_index" else getattr(self, name).values[
                getattr(self, name).codes[i]] for name in by)] = order[a:b]
        return out

    def by_pass(self, phase: str = "measured", *, ok_only: bool = False) -> dict[tuple[str, str], dict[int, np.ndarray]]:
        """(workload, backend) -> pass index -> row indices of that pass in `seq` order, for one phase.

        Every level is in first-seen (file) order. `ok_only` keeps only rows without an error. The
        one grouping of rows by pass (compare, the report's plots and the cross-host means read it)."""
        mask = self.phase.equals(phase)
        if ok_only:
            mask &= self.ok
        found = sorted(self.groups(np.flatnonzero(mask), ("workload", "backend", "pass_index")).items(),
                       key=lambda kv: int(kv[1].min()))
        out: dict[tuple[str, str], dict[int, np.ndarray]] = {}
        for (workload, backend, index), rows in found:
            out.setdefault((str(workload), str(backend)), {})[int(index)] = rows
        return out


@dataclass(frozen=True)
class Columns:
    """One Python list per Row field, all of one length: what a table is built from."""

    id: list[str]
    backend: list[str]
    workload: list[str]
    phase: list[str]
    pass_index: list[int]
    seq: list[int]
    start_ns: list[int]
    end_ns: list[int]
    status: list[int | None]
    body_sha256: list[str | None]
    probability: list[float | None]
    decision: list[str | None]
    label: list[str | None]
    input_tokens: list[int | None]
    error: list[str | None]
    v: list[int]
    reconnected: list[bool | None]
    level: list[str | None]
    scheduled_ns: list[int | None]
    connection: list[int | None]
    server_queue_ms: list[float | None]

    @classmethod
    def of(cls, rows: Sequence[Row] | Sequence[_RowStruct]) -> Columns:
        """The columns of Row objects or decoded lines (both name every field)."""
        return cls(**{name: list(map(operator.attrgetter(name), rows)) for name in _ROW_FIELDS})

    def check_bounds(self) -> None:
        """The bounds `_RowStruct` decodes with, for rows built in memory."""
        for name, (low, high) in _BOUNDS.items():
            values: list[int | float | None] = getattr(self, name)
            bad = next((v for v in values if v is not None and not low <= v <= high), None)
            if bad is not None:
                raise EvidenceError(f"a row's {name} is {bad!r}, outside {low}..{high:g}; the rows are not a run's.")


_BOUNDS = {"scheduled_ns": (0, 2**63 - 1), "connection": (0, 2**31 - 1), "server_queue_ms": (0, 3.2e10)}


def _present(column: Sequence[object]) -> np.ndarray:
    """Boolean mask: the value is not None (a C loop over the list)."""
    return np.fromiter(map(operator.is_not, column, itertools.repeat(None)), dtype=bool, count=len(column))


def _optional(column: Sequence[object], dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """(values with 0 where None, mask of present values) of a column that may hold None."""
    present = _present(column)
    if present.all():
        return np.array(column, dtype=dtype), present
    filled = np.array(column, dtype=object)
    filled[~present] = 0
    return filled.astype(dtype), present


def as_table(rows: RowTable | Iterable[Row]) -> RowTable:
    """A RowTable as is; any iterable of Row objects converted once."""
    return rows if isinstance(rows, RowTable) else RowTable.from_rows(rows)


def chunks(path: Path, size: int) -> Iterator[bytes]:
    """The file in pieces of about `size` bytes, each ending at a line break (or the file's end)."""
    with open(path, "rb") as fh:
        while block := fh.read(size):
            if not block.endswith(b"\n"):
                block += fh.readline()
            yield block


def _table_of(structs: list[_RowStruct]) -> RowTable:
    return RowTable.from_columns(Columns.of(structs))


def read_table(path: Path, *, chunk_bytes: int = CHUNK_BYTES) -> RowTable:
    """Every row of a rows.jsonl as a RowTable; a malformed line is an EvidenceError naming the line."""
    path = Path(path)
    if not path.is_file():
        raise EvidenceError(f"No rows file at {path}.")
    tables = []
    try:
        for chunk in chunks(path, chunk_bytes):
            structs = _DECODER.decode_lines(chunk)
            if any(s.v != ROW_FORMAT_VERSION for s in structs):
                raise ValueError("row format version")
            tables.append(_table_of(structs))
    except (msgspec.DecodeError, ValueError, EvidenceError):
        return _slow_table(path)
    return RowTable.concat(tables)


def _slow_table(path: Path) -> RowTable:
    """The line-by-line reader: the same messages as `read_rows`, plus field types checked per line."""
    rows = read_rows(path)  # raises EvidenceError naming the first line it refuses
    text = path.read_text(encoding="utf-8")
    number = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            _DECODER.decode(line)
        except msgspec.DecodeError as exc:
            raise EvidenceError(f"{path}:{number}: not a valid row ({exc}).") from exc
    return RowTable.from_rows(rows)
