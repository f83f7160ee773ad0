"""What every verification checks, signed or imported: the evidence read once, the shared checks.

`Evidence` reads the recipe and the rows once (as a RowTable). `Check` is one line of the
verdict. The checks a signed run and an imported run share live here: case ids (each timed
pass holds the same cases, `repeat` times, in the planned order) and response bodies against
their rows' sha256. `run_step` turns damaged evidence into a failed check, never a crash.
`verify_signed.py` and `verify_imported.py` hold what each kind of run checks besides.
"""

from __future__ import annotations

import base64
import hashlib
import operator
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import yaml

from ..errors import EvidenceError, ReproError, UnsupportedFormat
from ..evidence.decoding import Count, Finite
from ..evidence.recipe import Recipe, parse_recipe
from ..evidence.records import plan_of
from ..evidence.rows import Row
from ..evidence.rundir import ENVELOPE_NAME, RESPONSE_VERSIONS, RunDir, check_response_entry
from ..results.row_table import CHUNK_BYTES, RowTable, as_table, chunks, read_table

__all__ = [
    "BAD_EVIDENCE",
    "DAMAGE",
    "Check",
    "Evidence",
    "KeyedEntry",
    "case_ids_check",
    "check_case_ids",
    "check_planned_order",
    "first_difference",
    "responses_check",
    "run_step",
    "safe_name",
]


# What damaged files raise while being read (JSON, UTF-8 and base64 errors are ValueErrors; a number too
# large for a column is an OverflowError). A KeyError, TypeError or AttributeError is a bug of this tool,
# never damaged evidence: it is not caught, so it shows as one (every field a check reads is decoded into
# its record first, raising EvidenceError).
BAD_EVIDENCE = (ReproError, ValueError, yaml.YAMLError, OSError, OverflowError)
# What a content check may meet besides: evidence nested or sized to exhaust the reader.
DAMAGE = (*BAD_EVIDENCE, RecursionError, MemoryError)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool | None  # None: this bundle cannot make the check
    detail: str
    unsigned: bool = False  # the signature check of an UNSIGNED manifest accepted with --allow-unsigned

    @property
    def mark(self) -> str:
        if self.unsigned:
            return "UNSIGNED"
        return {True: "PASS", False: "FAIL", None: "N/A "}[self.passed]


class Evidence:
    """What one verification reads, each read once: the recipe and the rows (as a RowTable)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        # file name -> its responses/ lines, kept by `responses_check` when every line decoded typed
        # (an imported run's figures read them again; None: not decoded, or not every line typed)
        self.response_entries: dict[str, list[KeyedEntry]] | None = None

    @cached_property
    def recipe(self) -> Recipe:
        return parse_recipe(self.run.file("recipe.yaml").read_text(encoding="utf-8"), "recipe.yaml")

    @cached_property
    def table(self) -> RowTable:
        return read_table(self.run.rows_path)

    def preload(self) -> None:
        """Parse the rows now; a damaged file is reported later by the check that reads it."""
        try:
            self.table  # noqa: B018 (the cached property parses on first access)
        except BAD_EVIDENCE:
            pass


def run_step(name: str, step: Callable[[], list[Check]]) -> list[Check]:
    """One content check; damaged evidence (never a bug of this tool) is its failed check.

    UnsupportedFormat (a file in a format this tool does not read) is no verdict: it is raised."""
    try:
        return step()
    except UnsupportedFormat:
        raise
    except DAMAGE as exc:
        return [Check(name, False, f"{type(exc).__name__}: {exc}")]


def safe_name(name: Any) -> bool:
    """A relative POSIX name inside the run (no `..`, no leading slash, not the envelope)."""
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        return False
    parts = name.split("/")
    return not name.startswith("/") and not {"..", ".", ""} & set(parts) and name != ENVELOPE_NAME


# --- case ids ----------------------------------------------------------------------------


def _timed_passes(t: RowTable) -> dict[tuple, np.ndarray]:
    timed = np.flatnonzero(t.phase.equals("measured") | t.phase.equals("feasibility"))
    return t.groups(timed, ("workload", "backend", "phase", "pass_index"))


def _first(codes: Iterable[int], t: RowTable, n: int = 5) -> str:
    """The first n ids (sorted) of some id codes, comma separated."""
    return ", ".join(sorted(str(t.ids.values[c]) for c in codes)[:n])


def check_case_ids(rows: RowTable | Iterable[Row], repeats: dict[str, int]) -> list[str]:
    """Problems with case ids: each timed pass holds the same ids, each `repeat` times, seq 0..n-1."""
    t = as_table(rows)
    passes = _timed_passes(t)
    reference: dict[str, set[int]] = {}
    problems = []
    for key in sorted(passes):
        workload, backend, phase, index = key
        group = passes[key]
        where = f"{backend}/{workload} {phase} pass {index}"
        if not np.array_equal(t.seq[group], np.arange(len(group))):
            problems.append(f"{where}: seq is not 0..{len(group) - 1}")
        codes, counts = np.unique(t.ids.codes[group], return_counts=True)
        repeat = repeats.get(workload, 1)
        dupes, short = codes[counts > repeat].tolist(), codes[counts < repeat].tolist()
        if dupes:
            problems.append(f"{where}: duplicate case ids {_first(dupes, t)}")
        if short:
            problems.append(f"{where}: case ids seen fewer than {repeat} times {_first(short, t)}")
        present = set(codes.tolist())
        ref = reference.setdefault(workload, present)
        missing, extra = ref - present, present - ref
        if missing:
            problems.append(f"{where}: missing case ids {_first(missing, t)}")
        if extra:
            problems.append(f"{where}: case ids absent from other passes {_first(extra, t)}")
    return problems


def check_planned_order(rows: RowTable | Iterable[Row], planned: dict[str, list[str]] | None) -> list[str]:
    """Each timed pass holds exactly the planned case ids in the planned order (plan.json case_ids)."""
    if not planned:
        return []
    t = as_table(rows)
    lookup = t.ids.lookup()
    expected_codes = {w: np.array([lookup.get(i, -1) for i in ids], dtype=np.int64) for w, ids in planned.items()}
    problems = []
    for (workload, backend, phase, index), group in sorted(_timed_passes(t).items()):
        expected = planned.get(workload)
        if expected is not None and not np.array_equal(t.ids.codes[group], expected_codes[workload]):
            missing = sorted(set(expected) - set(t.ids.strings(group)))
            detail = f"missing {', '.join(missing[:5])}" if missing else "order or count differs"
            problems.append(f"{backend}/{workload} {phase} pass {index}: not the planned requests ({detail})")
    return problems



def case_ids_check(ev: Evidence) -> list[Check]:
    """Each timed pass holds the same case ids (and, where plan.json records them, the planned ones in order)."""
    run, rows = ev.run, ev.table
    problems = check_case_ids(rows, {w.name: w.repeat for w in ev.recipe.workloads})
    plan = plan_of(run)  # EvidenceError naming the field when plan.json is not a plan
    problems += check_planned_order(rows, None if plan is None or plan.case_ids is None else
                                    {w: list(ids) for w, ids in plan.case_ids.items()})
    return [Check("case ids", not problems, "; ".join(problems[:6]) if problems
                  else f"{len(rows)} rows; every timed pass holds the same case ids")]


# --- response bodies ------------------------------------------------------------------


class _ResponseEntry(msgspec.Struct):
    """The fields of a responses/*.jsonl line that verify reads (others are ignored)."""

    backend: Any = msgspec.UNSET
    workload: Any = msgspec.UNSET
    phase: Any = msgspec.UNSET
    pass_index: Any = msgspec.UNSET
    seq: Any = msgspec.UNSET
    body: Any = msgspec.UNSET
    body_base64: Any = msgspec.UNSET
    v: Any = msgspec.UNSET  # absent in format 1


class KeyedEntry(msgspec.Struct, frozen=True, gc=False):
    """A responses/*.jsonl line as the runner and the import write it: every key field of its row, typed.

    A chunk whose lines all decode as this needs no check line by line (msgspec checked every type in
    C); a chunk with any other line is decoded as `_ResponseEntry` and checked entry by entry."""

    backend: str
    workload: str
    phase: str
    pass_index: int
    seq: int
    body: str | msgspec.UnsetType = msgspec.UNSET
    body_base64: str | msgspec.UnsetType = msgspec.UNSET
    v: int | msgspec.UnsetType = msgspec.UNSET
    # what an imported run's lines add, for the figure rules (verify_imported.py)
    probability_delta: Finite | msgspec.UnsetType = msgspec.UNSET  # system1-omni
    seconds: Finite | msgspec.UnsetType = msgspec.UNSET  # the formats without client nanoseconds
    decisions: Count | msgspec.UnsetType = msgspec.UNSET


_RESPONSE = msgspec.json.Decoder(_ResponseEntry)
_KEYED = msgspec.json.Decoder(KeyedEntry)
_KEY_FIELDS = ("backend", "workload", "phase", "pass_index", "seq")
_Entry = _ResponseEntry | KeyedEntry

def responses_check(ev: Evidence, aggregate_only: bool = False) -> list[Check]:
    """Every response body's sha256 equals its row's body_sha256."""
    if aggregate_only:
        return [Check("response bodies", None, "aggregate-only bundle: bodies are omitted (JevBench terms), "
                      "so row body_sha256 values cannot be checked against them")]
    t = ev.table
    keys = zip(t.backend.strings(), t.workload.strings(), t.phase.strings(), t.pass_index.tolist(), t.seq.tolist(), strict=True)
    hashes = dict(zip(keys, t.body_sha256, strict=True))
    wrong, seen = [], 0
    kept: dict[str, list[KeyedEntry]] | None = {}
    for path in sorted(ev.run.path.glob("responses/*.jsonl")):
        for before, entries, keyed in _response_chunks(path):
            at = _body_lines(path, before, entries, keyed)
            seen += len(at)
            wrong += _wrong_bodies(path, before, at, [entries[i] for i in at], hashes)
            if kept is not None and keyed:
                kept.setdefault(path.name, []).extend(entries)  # type: ignore[arg-type]
            else:
                kept = None
    ev.response_entries = kept
    return [Check("response bodies", not wrong, f"bodies whose sha256 differs from their row: {', '.join(wrong[:5])}"
                  if wrong else f"{seen} bodies match their rows' body_sha256")]


def _body_lines(path: Path, before: int, entries: list[_Entry], keyed: bool) -> list[int]:
    """Indices of the chunk's entries that carry a body, each checked for the fields that find its row
    (already checked when the chunk decoded as `KeyedEntry`s).

    UnsupportedFormat for an entry in a newer format; EvidenceError for one that lacks a key field or
    whose body or key is not a JSON value of the kind written."""
    _check_versions(path, before, entries)
    at = [i for i, e in enumerate(entries) if e.body is not msgspec.UNSET or e.body_base64 is not msgspec.UNSET]
    for i in [] if keyed else at:
        problem = _entry_problem(entries[i])
        if problem:
            raise EvidenceError(f"{path.name}:{before + i + 1} {problem}")
    return at


def _check_versions(path: Path, before: int, entries: list[_Entry]) -> None:
    """UnsupportedFormat for the first entry in a format this tool does not read."""
    newer = next((i for i, e in enumerate(entries) if e.v is not msgspec.UNSET and e.v not in RESPONSE_VERSIONS), None)
    if newer is not None:
        check_response_entry({"v": entries[newer].v}, f"{path.name}:{before + newer + 1}")


def _entry_problem(e: _Entry) -> str | None:
    keys = tuple(getattr(e, name) for name in _KEY_FIELDS)
    if msgspec.UNSET in keys:
        return f"lacks one of {', '.join(_KEY_FIELDS)}"
    if any(isinstance(k, (list, dict)) for k in keys):
        return f"has an array or object as one of {', '.join(_KEY_FIELDS)}"
    body = e.body if e.body is not msgspec.UNSET else e.body_base64
    if not isinstance(body, str):
        return "has a body that is not a string"
    return None


def _wrong_bodies(path: Path, before: int, at: list[int], have: list[_Entry], hashes: dict) -> list[str]:
    """'FILE:LINE' of each body whose sha256 is not its row's body_sha256 (C loops throughout: encode, hash,
    look up, compare)."""
    bodies = [str(e.body).encode("utf-8") if e.body is not msgspec.UNSET else base64.b64decode(str(e.body_base64)) for e in have]
    digests = map(operator.methodcaller("hexdigest"), map(hashlib.sha256, bodies))
    expected = map(hashes.get, zip(*(map(operator.attrgetter(name), have) for name in _KEY_FIELDS), strict=True))
    return [f"{path.name}:{before + i + 1}" for i, got, want in zip(at, digests, expected, strict=True) if got != want]


def _response_chunks(path: Path) -> Iterator[tuple[int, list[_Entry], bool]]:
    """(lines before the chunk, entries of its lines, whether they decoded as `KeyedEntry`s), decoded
    8 MiB at a time with one entry per line.

    A chunk with a blank or undecodable line is decoded line by line instead, so the error
    names its line, as it always did."""
    before = 0
    for chunk in chunks(path, CHUNK_BYTES):
        n_lines = chunk.count(b"\n") + (not chunk.endswith(b"\n"))
        keyed = _decoded_lines(_KEYED, chunk)
        if len(keyed) == n_lines:
            yield before, list(keyed), True
            before += n_lines
            continue
        entries: list[_Entry] = list(_decoded_lines(_RESPONSE, chunk))
        if len(entries) != n_lines:
            entries = []
            for offset, line in enumerate(chunk.splitlines()):
                try:
                    entries.append(_RESPONSE.decode(line))
                except msgspec.DecodeError as exc:
                    raise EvidenceError(f"{path.name}:{before + offset + 1}: not a JSON object ({exc})") from exc
        yield before, entries, False
        before += n_lines


def _decoded_lines(decoder: msgspec.json.Decoder, chunk: bytes) -> list:
    """Every line of the chunk decoded; [] when any line does not decode."""
    try:
        return decoder.decode_lines(chunk)
    except msgspec.DecodeError:
        return []



# --- comparing what was recomputed ------------------------------------------------------


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The first JSON path where two values differ, with both values; None when equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        return _first_key_difference(a, b, path)
    if isinstance(a, list) and isinstance(b, list):
        return _first_item_difference(a, b, path)
    return None if (a == b and type(a) is type(b)) else f"{path or '(top)'}: {a!r} vs {b!r}"


def _first_key_difference(a: dict, b: dict, path: str) -> str | None:
    for key in sorted(set(a) | set(b), key=str):
        if key not in a or key not in b:
            return f"{path}.{key}: present on one side only"
        diff = first_difference(a[key], b[key], f"{path}.{key}")
        if diff:
            return diff
    return None


def _first_item_difference(a: list, b: list, path: str) -> str | None:
    if len(a) != len(b):
        return f"{path}: {len(a)} vs {len(b)} items"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        diff = first_difference(x, y, f"{path}[{i}]")
        if diff:
            return diff
    return None
