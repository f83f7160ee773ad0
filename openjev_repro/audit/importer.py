"""`import-evidence --format system1-omni`: the native project's published evidence as a run.

Their layout (see ../shared/facts/upstream.md and docs/manifest.md), e.g.
`benchmarks/gdn/artifacts/20261003/`: a `manifest.json` at the root whose `files` maps each
path (possibly in a subfolder: `e2e/`, `kernel/`, `flashinfer/`) to a digest string or to an
object `{sha256, bytes, source, source_sha256?, normalization?}`; an evidence folder with
`<arm>-measured-<pass>.jsonl` (one object per request: `id, latency_s, probability_yes,
probability_delta, predicted, raw, checks, client_start_monotonic_ns,
client_end_monotonic_ns`), `summary.json` (per arm `passes` with `mean_ms, p50_ms, p95_ms,
requests, max_probability_delta`, `aggregate_mean_ms`, `readiness`; at the top `cleanup` and
`*_reduction_percent`) and optionally `cleanup.json`.

The import, in order:
1. finds `manifest.json` at `--src` or up to three folders above it, and the evidence folder
   (`--subdir`, the `--src` subfolder, or the one folder holding arm files);
2. checks every listed file that is present (bytes, then sha256): any mismatch, or a present
   file the manifest does not list, is an error and nothing is written. Listed files that are
   absent (a partial download) are recorded as "not present, not verified";
3. reads every row streaming (msgspec decodes it; the standard library re-reads a line msgspec
   refuses, so what is accepted and every message are unchanged), validating each field; a
   malformed row is one error;
4. writes our layout into a temporary directory renamed into place only when complete:
   rows.jsonl (phase measured; latency from their client nanoseconds), responses/<arm>.jsonl
   (their `raw` as canonical JSON, whose sha256 is the row's body_sha256), recipe.yaml,
   summary.json (`results.statistics.summarize`), state.json with status "imported", and import.json:
   the source manifest (every field kept), what was verified and what was absent, the digests
   of the converted files, every published figure next to ours labelled exact, within
   rounding or mismatch, the published readiness, cleanup and reduction percentages.
Imported runs are never signed: we did not measure them.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import math
import operator
import os
import re
import secrets
import shutil
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec
import yaml

from ..errors import EvidenceError, InputMismatch
from ..evidence.files import read_json, write_json_atomic
from ..evidence.recipe import parse_recipe
from ..evidence.rows import Row
from ..evidence.rundir import RunDir
from ..hashing import hash_file
from ..results.imported import cleanup_line, figure_counts, figure_lines
from ..results.statistics import latency_stats, mean, summarize

__all__ = [
    "IMPORT_FORMAT_VERSION",
    "REPORT_FILES",
    "SIGNIFICANT_DIGITS",
    "SourceManifest",
    "baseline_and_candidates",
    "classify",
    "converted_files",
    "format_import_report",
    "import_system1",
    "locate_source",
    "published_figures",
    "read_source_manifest",
    "summary_from_figures",
    "verify_source",
]

# Format history of import.json:
#   1  (2026-11) first version: flat source_manifest {path: sha256}, figures with `matches`.
#   2  (2026-12) manifest entries as objects, subfolders, partial downloads (`absent`),
#      converted-file digests, figure `status` (exact | within_rounding | mismatch),
#      published cleanup and reduction percentages.
IMPORT_FORMAT_VERSION = 2
# A binary double carries 15 significant decimal digits (DBL_DIG); digits a JSON writer
# prints past the 15th are representation noise, not precision.
SIGNIFICANT_DIGITS = 15
MANIFEST_NAME = "manifest.json"
_UPWARD = 3  # how many folders above --src may hold manifest.json
_FILE_RE = re.compile(r"^(?P<arm>[A-Za-z0-9][A-Za-z0-9_.-]*)-measured-(?P<pass>[1-9][0-9]{0,5})\.jsonl$")
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_FIELDS = ("id", "latency_s", "probability_yes", "probability_delta", "predicted", "raw", "checks",
           "client_start_monotonic_ns", "client_end_monotonic_ns")
REPORT_FILES = {"report.md", "latency_vs_tokens.png", "latency_cdf.png"}


# --- their manifest -----------------------------------------------------------------------


@dataclass(frozen=True)
class SourceManifest:
    root: Path  # the folder holding manifest.json
    entries: dict[str, dict[str, Any]]  # path -> {sha256, bytes?, source?, source_sha256?, normalization?, ...}
    meta: dict[str, Any] = field(default_factory=dict)  # every other top-level field


def _entry(path: Any, spec: Any, where: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(path, str) or not path or "\\" in path:
        raise InputMismatch(f"{where}: file name {path!r} is not a relative POSIX path.")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or str(pure) != path or path == MANIFEST_NAME:
        raise InputMismatch(f"{where}: file name {path!r} leaves the directory or is not normalised.")
    entry = {"sha256": spec} if isinstance(spec, str) else dict(spec) if isinstance(spec, dict) else None
    if entry is None:
        raise InputMismatch(f"{where}: {path}: entry is {type(spec).__name__}, not a sha256 string or an object.")
    digest = entry.get("sha256")
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise InputMismatch(f"{where}: {path}: sha256 {digest!r} is not 64 hex digits.")
    entry["sha256"] = digest.lower()
    size = entry.get("bytes")
    if "bytes" in entry and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise InputMismatch(f"{where}: {path}: bytes {size!r} is not a non-negative integer.")
    for key in ("source_sha256",):
        if key in entry and (not isinstance(entry[key], str) or not _HEX64.match(entry[key])):
            raise InputMismatch(f"{where}: {path}: {key} {entry[key]!r} is not 64 hex digits.")
    for key in ("source", "normalization"):
        if key in entry and not isinstance(entry[key], str):
            raise InputMismatch(f"{where}: {path}: {key} is not a string.")
    return path, entry


def _read_finite_json(path: Path, name: str) -> Any:
    """read_json, refusing NaN and Infinity (which import.json could not carry)."""
    data = read_json(path)
    try:
        json.dumps(data, allow_nan=False)
    except ValueError:
        raise EvidenceError(f"{name}: holds NaN or Infinity, which JSON does not allow.") from None
    except RecursionError:
        raise EvidenceError(f"{name}: nested too deeply.") from None
    return data


def read_source_manifest(root: Path) -> SourceManifest:
    """Their manifest.json: `files` as a {path: digest | object} mapping or a [{path, sha256, ...}] list."""
    where = str(Path(root) / MANIFEST_NAME)
    data = _read_finite_json(Path(root) / MANIFEST_NAME, where)
    if not isinstance(data, dict):
        raise InputMismatch(f"{where}: not a JSON object.")
    listing = data.get("files", data)
    meta = {k: v for k, v in data.items() if k != "files"} if "files" in data else {}
    entries: dict[str, dict[str, Any]] = {}
    if isinstance(listing, dict):
        items: Iterable[tuple[Any, Any]] = listing.items()
    elif isinstance(listing, list):
        items = []
        for item in listing:
            if not isinstance(item, dict):
                raise InputMismatch(f"{where}: a files entry is {type(item).__name__}, not an object.")
            rest = {k: v for k, v in item.items() if k not in ("path", "name")}
            items.append((item.get("path", item.get("name")), rest))
    else:
        raise InputMismatch(f"{where}: files is {type(listing).__name__}, not an object or a list.")
    for raw_path, spec in items:
        path, entry = _entry(raw_path, spec, where)
        if path in entries:
            raise InputMismatch(f"{where}: {path} is listed twice.")
        entries[path] = entry
    if not entries:
        raise InputMismatch(f"{where}: lists no files.")
    return SourceManifest(Path(root), entries, meta)


def locate_source(src: Path) -> Path:
    """The folder holding manifest.json: --src itself or one of the three folders above it."""
    src = Path(src).resolve()
    if not src.is_dir():
        raise InputMismatch(f"{src}: not a directory; --src names the published evidence folder.")
    for candidate in [src, *list(src.parents)[:_UPWARD]]:
        if (candidate / MANIFEST_NAME).is_file():
            return candidate
    raise InputMismatch(f"{src}: no {MANIFEST_NAME} here or in the {_UPWARD} folders above; "
                        "point --src at the folder that holds their manifest.json.")


def verify_source(manifest: SourceManifest) -> dict[str, list[str]]:
    """Every listed file that is present has its bytes and sha256; no present file is unlisted.

    Returns {"verified": [...], "absent": [...]}; raises InputMismatch naming every problem.
    """
    root = manifest.root
    problems, verified, absent = [], [], []
    for name, entry in sorted(manifest.entries.items()):
        path = root / name
        if path.is_symlink():
            problems.append(f"{name}: is a symbolic link, not a file")
        elif not path.exists():
            absent.append(name)
        elif not path.is_file():
            problems.append(f"{name}: is not a regular file")
        elif "bytes" in entry and path.stat().st_size != entry["bytes"]:
            problems.append(f"{name}: {path.stat().st_size} bytes, the manifest says {entry['bytes']}")
        else:
            got = hash_file(path)
            if got != entry["sha256"]:
                problems.append(f"{name}: sha256 {got[:12]}… differs from the manifest's {entry['sha256'][:12]}…")
            else:
                verified.append(name)
    def unreadable(exc: OSError) -> None:
        raise InputMismatch(f"{exc.filename}: cannot be listed ({exc.strerror}); nothing was imported.")

    for folder, dirs, files in os.walk(root, onerror=unreadable):
        dirs.sort()
        for item in sorted(files) + [d for d in dirs if Path(folder, d).is_symlink()]:
            rel = Path(folder, item).relative_to(root).as_posix()
            if rel != MANIFEST_NAME and rel not in manifest.entries:
                problems.append(f"{rel}: present but not in {MANIFEST_NAME}")
    if problems:
        raise InputMismatch(f"{root} does not match its {MANIFEST_NAME}: " + "; ".join(problems)
                            + ". Nothing was imported; fetch the evidence again.")
    if not verified:
        raise InputMismatch(f"{root}: none of the files {MANIFEST_NAME} lists is present.")
    return {"verified": verified, "absent": absent}


def _evidence_folder(root: Path, src: Path, subdir: str | None, verified: list[str]) -> str:
    """The evidence folder, relative to root ('' for root itself)."""
    if subdir is not None:
        pure = PurePosixPath(subdir.strip("/") or ".")
        if pure.is_absolute() or ".." in pure.parts:
            raise InputMismatch(f"--subdir {subdir!r} must be a folder inside {root}.")
        folder = "" if str(pure) == "." else str(pure)
        if not (root / folder).is_dir():
            raise InputMismatch(f"--subdir {subdir!r}: {root / folder} is not a folder.")
        return folder
    if src != root:
        return src.relative_to(root).as_posix()
    folders = sorted({str(PurePosixPath(n).parent) for n in verified if _FILE_RE.match(PurePosixPath(n).name)})
    if not folders:
        raise InputMismatch(f"{root}: no <arm>-measured-<pass>.jsonl file is present; nothing to import.")
    if len(folders) > 1:
        raise InputMismatch(f"{root}: arm files in several folders ({', '.join(folders)}); name one with --subdir.")
    return "" if folders[0] == "." else folders[0]


# --- their rows -----------------------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
_ROW_FIELDS = tuple(f.name for f in dataclasses.fields(Row))
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


def _checked(row: _TheirRow, where: str) -> _TheirRow:
    """Every field of one of their rows, checked (types too: `_validated` passes them unchecked)."""
    problems = []
    if not isinstance(row.id, str) or not row.id.strip():
        problems.append(f"id {row.id!r} is not a non-empty string")
    if not _number(row.latency_s) or row.latency_s < 0:
        problems.append(f"latency_s {row.latency_s!r} is not a finite number >= 0")
    if not _number(row.probability_yes) or not 0 <= row.probability_yes <= 1:
        problems.append(f"probability_yes {row.probability_yes!r} is not a number in [0, 1]")
    if not _number(row.probability_delta):
        problems.append(f"probability_delta {row.probability_delta!r} is not a finite number")
    if row.predicted not in ("yes", "no"):
        problems.append(f"predicted {row.predicted!r} is not 'yes' or 'no'")
    raw = row.raw
    if not isinstance(raw, dict):
        problems.append("raw is not a JSON object")
    checks = row.checks
    if not isinstance(checks, dict) or not all(isinstance(v, bool) for v in checks.values()):
        problems.append("checks is not an object of booleans")
    start, end = row.client_start_monotonic_ns, row.client_end_monotonic_ns
    if not _count(start) or not _count(end):
        problems.append(f"client_*_monotonic_ns ({start!r}, {end!r}) are not non-negative integers")
    elif end < start:
        problems.append(f"client_end_monotonic_ns {end} is before client_start_monotonic_ns {start}")
    usage = raw.get("usage") if isinstance(raw, dict) else None
    if usage is not None and not isinstance(usage, dict):
        problems.append("raw.usage is not a JSON object")
    elif usage and usage.get("input_tokens") is not None and not _count(usage["input_tokens"]):
        problems.append(f"raw.usage.input_tokens {usage['input_tokens']!r} is not a non-negative integer")
    if problems:
        raise EvidenceError(f"{where}: {'; '.join(problems)}.")
    return row


def _row(their: _TheirRow, arm: str, workload: str, pass_index: int, seq: int, where: str) -> tuple[Row, str, str]:
    """Our row, its line of rows.jsonl (byte for byte `Row.to_json`) and the body it hashes."""
    try:
        body = _CANONICAL_JSON(their.raw)
    except ValueError:
        raise EvidenceError(f"{where}: raw holds NaN or Infinity, which JSON does not allow.") from None
    except RecursionError:  # msgspec may decode a level or two deeper than json.loads: the same error
        raise EvidenceError(f"{where}: JSON nested too deeply.") from None
    checks = their.checks
    failed = sorted(k for k, v in checks.items() if v is False and k != "correct")
    predicted = "yes" if their.predicted == "yes" else "no"  # checked; one shared string each for 100k rows
    label = None
    if isinstance(checks.get("correct"), bool):
        # Their rows carry correctness, not the label: the label is what makes `correct` true.
        label = predicted if checks["correct"] else {"yes": "no", "no": "yes"}[predicted]
    usage = their.raw.get("usage") or {}
    # Rows stay in memory for `summarize`: the passes of every arm share one interned string per case id.
    row = Row(id=sys.intern(their.id), backend=arm, workload=workload, phase="measured", pass_index=pass_index, seq=seq,
              start_ns=their.client_start_monotonic_ns, end_ns=their.client_end_monotonic_ns, status=None,
              body_sha256=hashlib.sha256(body.encode("utf-8")).hexdigest(), probability=float(their.probability_yes),
              decision=predicted, label=label, input_tokens=usage.get("input_tokens"),
              error=f"checks failed: {', '.join(failed)}" if failed else None)
    return row, _ROW_JSON(dict(zip(_ROW_FIELDS, _row_values(row), strict=True))), body


@dataclass
class _Read:
    """What reading their arm files yields besides the rows written."""
    arms: dict[str, list[int]] = field(default_factory=dict)  # arm -> pass indexes
    latencies: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # (arm, pass) -> ms
    max_delta: dict[tuple[str, int], float] = field(default_factory=dict)  # (arm, pass) -> max |probability_delta|
    rows: list[Row] = field(default_factory=list)  # every row written, in file order
    notes: list[str] = field(default_factory=list)


@contextmanager
def _collector_paused() -> Iterator[None]:
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


def _read_arm_files(root: Path, files: list[tuple[str, int, str]], workload: str, run: Path) -> _Read:
    """Stream every arm file into rows.jsonl and responses/<arm>.jsonl under `run` (buffered writes: the
    run is a temporary directory renamed into place only when complete, so a crash leaves no partial run)."""
    out = _Read()
    with open(run / "rows.jsonl", "w", encoding="utf-8", buffering=_WRITE_BUFFER) as rows_file:
        for arm in sorted({a for a, _, _ in files}):
            reference: set[str] | None = None
            with open(run / "responses" / f"{arm}.jsonl", "w", encoding="utf-8",
                      buffering=_WRITE_BUFFER) as responses:
                for _, index, name in sorted(f for f in files if f[0] == arm):
                    ids: set[str] = set()
                    key = (arm, index)
                    lat, delta = out.latencies.setdefault(key, []), 0.0
                    out.arms.setdefault(arm, []).append(index)
                    try:
                        fh = open(root / name, encoding="utf-8")  # noqa: SIM115 - closed by `with fh` below
                    except OSError as exc:
                        raise EvidenceError(f"{name}: cannot be read ({exc.strerror or exc}).") from None
                    with fh:
                        for seq, line in enumerate(_lines(fh, name)):
                            where = f"{name}:{seq + 1}"
                            if not line.strip():
                                raise EvidenceError(f"{where}: empty line; a row file holds one JSON object per line.")
                            their = _their_row(line, where)
                            case = sys.intern(their.id)
                            if case in ids:
                                raise EvidenceError(f"{where}: duplicate case id {case}; "
                                                    "a pass holds each case once.")
                            ids.add(case)
                            row, row_line, body = _row(their, arm, workload, index, seq, where)
                            if abs(their.latency_s * 1e9 - row.latency_ns) > 1e6:
                                out.notes.append(f"{where}: latency_s {their.latency_s} differs from the "
                                                 "client ns by over 1 ms")
                            rows_file.write(row_line + "\n")
                            responses.write(_RESPONSE_JSON({
                                "backend": arm, "workload": workload, "phase": "measured", "pass_index": index,
                                "seq": seq, "id": row.id, "body": body,
                                "probability_delta": their.probability_delta}) + "\n")
                            out.rows.append(row)
                            lat.append(row.latency_ms)
                            delta = max(delta, abs(their.probability_delta))
                    if not ids:
                        raise EvidenceError(f"{name}: holds no rows.")
                    out.max_delta[key] = delta
                    if reference is None:
                        reference = ids
                    elif ids != reference:
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


# --- figures ------------------------------------------------------------------------------


def half_unit(published: float) -> float:
    """Half a unit of the last decimal `published` prints, counting at most 15 significant digits."""
    if isinstance(published, int):
        return 0.5
    text = repr(float(published))
    value = Decimal(text)
    digits, exponent = len(value.as_tuple().digits), value.as_tuple().exponent
    assert isinstance(exponent, int)
    decimals = -exponent - max(0, digits - SIGNIFICANT_DIGITS)
    return 0.5 * 10.0 ** -decimals


def classify(ours: float | None, published: Any, propagated: float = 0.0) -> dict[str, Any]:
    """exact (bit for bit), within_rounding (|ours - published| <= half a unit) or mismatch.

    `propagated` widens the tolerance of a figure derived from other published figures by
    the change their own half units can make (see `published_figures`).
    """
    if ours is None or not _number(published):
        return {"status": "mismatch", "difference": None, "half_unit": None}
    tolerance = half_unit(published) + propagated
    difference = abs(float(ours) - float(published))
    if float(ours) == float(published):
        status = "exact"
    elif isinstance(published, int) and not isinstance(published, bool):
        status = "mismatch"  # a count reproduces exactly or not at all
    else:
        status = "within_rounding" if difference <= tolerance else "mismatch"
    return {"status": status, "difference": difference, "half_unit": tolerance}


_ORDER = {"exact": 0, "within_rounding": 1, "mismatch": 2}


def _figure(arm: str, pass_index: int | None, name: str, published: Any, ours: Any,
            propagated: float = 0.0) -> dict[str, Any]:
    if isinstance(ours, dict):  # P95: one value per rank rule; the best-reproducing rule wins
        outcomes = {rule: classify(value, published) for rule, value in ours.items()}
        best = min(outcomes.values(), key=lambda o: (_ORDER[o["status"]], o["difference"] or 0))
        rules = [r for r, o in outcomes.items() if o["status"] == best["status"] != "mismatch"]
        value = ours[rules[0]] if rules else None
        return {"arm": arm, "pass": pass_index, "figure": name, "published": published, "ours": value,
                "ours_by_rule": ours, **best, "rule": " and ".join(rules) or None,
                "matches": best["status"] != "mismatch"}
    outcome = classify(ours, published, propagated)
    return {"arm": arm, "pass": pass_index, "figure": name, "published": published, "ours": ours, **outcome,
            "rule": None, "matches": outcome["status"] != "mismatch"}


def _arms(summary: dict) -> dict[str, Any]:
    arms = summary.get("arms", summary)
    if not isinstance(arms, dict):
        raise EvidenceError("summary.json: arms is not an object.")
    return arms


def baseline_and_candidates(arms: Iterable[str]) -> tuple[str, list[str]]:
    names = list(arms)
    base = "baseline" if "baseline" in names else names[0]
    return base, [n for n in names if n != base]


def published_figures(summary: dict, latencies: dict[tuple[str, int], list[float]],
                      max_delta: dict[tuple[str, int], float] | None = None) -> list[dict[str, Any]]:
    """Each figure their summary.json publishes next to ours, recomputed from the rows' latencies (ms)."""
    figures = []
    aggregates: dict[str, float | None] = {}
    published_aggregates: dict[str, Any] = {}
    for arm_name, entry in _arms(summary).items():
        arm = str(arm_name).lower()
        if not isinstance(entry, dict):
            raise EvidenceError(f"summary.json: arm {arm_name!r} is not an object.")
        arm_latencies = [x for (a, _), xs in sorted(latencies.items()) if a == arm for x in xs]
        if not arm_latencies:
            figures.append({"arm": arm, "pass": None, "figure": "rows", "published": "present", "ours": None,
                            "status": "mismatch", "difference": None, "half_unit": None, "rule": None,
                            "matches": False})
            continue
        passes = entry.get("passes", [])
        if not isinstance(passes, list):
            raise EvidenceError(f"summary.json: {arm_name}.passes is not a list.")
        for p in passes:
            if not isinstance(p, dict) or not _count(p.get("pass", 0)):
                raise EvidenceError(f"summary.json: {arm_name}.passes holds {p!r}, not an object with an integer pass.")
            index = int(p.get("pass", 0))
            stats = latency_stats(latencies.get((arm, index), []))
            ours: dict[str, Any] = {"mean_ms": stats["mean_ms"], "p50_ms": stats["p50_ms"],
                                    "p95_ms": {"jevbench": stats["p95_jevbench_ms"],
                                               "nearest_rank": stats["p95_nearest_rank_ms"]},
                                    "requests": stats["n"]}
            if max_delta is not None:
                ours["max_probability_delta"] = max_delta.get((arm, index))
            for name, value in ours.items():
                if name in p:
                    figures.append(_figure(arm, index, name, p[name], value))
        aggregates[arm] = mean(arm_latencies)
        if "aggregate_mean_ms" in entry:
            published_aggregates[arm] = entry["aggregate_mean_ms"]
            figures.append(_figure(arm, None, "aggregate_mean_ms", entry["aggregate_mean_ms"], aggregates[arm]))
    base, candidates = baseline_and_candidates(aggregates) if aggregates else ("", [])
    for key in sorted(k for k in summary if isinstance(k, str) and k.endswith("_reduction_percent")):
        if key == "aggregate_reduction_percent" and len(candidates) == 1 and aggregates.get(base):
            b, c = aggregates[base], aggregates[candidates[0]]
            # Their expression, 100 * (1 - candidate / baseline) of the aggregate means; the algebraically
            # equal (b - c) / b * 100 of results.statistics.summarize differs from it in the last bits.
            ours_pct = (1 - c / b) * 100 if b and c is not None else None
            # Within rounding also allows what the published aggregates' own half units can change:
            # d/db = 100 c / b^2, d/dc = -100 / b.
            pb, pc = published_aggregates.get(base), published_aggregates.get(candidates[0])
            propagated = 0.0
            if isinstance(pb, (int, float)) and isinstance(pc, (int, float)) and _number(pb) and _number(pc) and pb:
                fb, fc = float(pb), float(pc)
                propagated = 100 * (half_unit(fc) / abs(fb) + abs(fc) * half_unit(fb) / fb ** 2)
            figures.append(_figure(f"{candidates[0]} vs {base}", None, key, summary[key], ours_pct, propagated))
        else:
            figures.append({"arm": None, "pass": None, "figure": key, "published": summary[key], "ours": None,
                            "status": "not_compared", "difference": None, "half_unit": None, "rule": None,
                            "matches": False, "note": "no unambiguous baseline/candidate pair to recompute it from"})
    return figures


def summary_from_figures(figures: list[dict]) -> dict[str, Any]:
    """The part of their summary.json that import.json's figures record (to recompute them in `verify`)."""
    arms: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for f in figures:
        if f["figure"].endswith("_reduction_percent"):
            top[f["figure"]] = f["published"]
            continue
        if f["arm"] is None or f["figure"] == "rows":
            continue
        entry = arms.setdefault(f["arm"], {"passes": []})
        if f["pass"] is None:
            entry[f["figure"]] = f["published"]
            continue
        passes = {p["pass"]: p for p in entry["passes"]}
        if f["pass"] not in passes:
            entry["passes"].append({"pass": f["pass"]})
            passes[f["pass"]] = entry["passes"][-1]
        passes[f["pass"]][f["figure"]] = f["published"]
    return {"arms": arms, **top}


# --- cleanup, readiness -------------------------------------------------------------------


def _cleanup(summary: dict, cleanup_json: Any) -> dict[str, Any]:
    published = summary.get("cleanup")
    per_arm = {a: e.get("cleanup") for a, e in _arms(summary).items() if isinstance(e, dict) and "cleanup" in e}
    record: dict[str, Any] = {"summary": published, "per_arm": per_arm or None, "cleanup_json": cleanup_json}
    if published is not None and cleanup_json is not None:
        record["consistent"] = published == cleanup_json
    return record


# --- the import ---------------------------------------------------------------------------


def _recipe(source: Path, folder: str, arms: dict[str, list[int]], workload: str, first: str,
            verified: list[tuple[str, str]]) -> dict:
    passes = max(max(p) for p in arms.values())
    study_id = re.sub(r"[^a-z0-9_.-]+", "-", f"imported-{source.name}".lower()).strip("-.")[:80] or "imported"
    return {
        "format_version": 1,
        "study": {"id": study_id, "date": date.today().isoformat(),
                  "purpose": f"Per-request evidence imported from {source / folder if folder else source} "
                             "(system1-omni format); not measured here.",
                  "source": str(source)},
        "inputs": {"root": str(source),
                   "files": [{"path": n, "sha256": s, "role": "imported-evidence"} for n, s in verified]},
        "workloads": [{"name": workload, "requests": first, "feasibility_passes": 0, "measured_passes": passes}],
        "backends": [{"name": a, "command": ["imported"], "description": "imported arm"} for a in sorted(arms)],
        "protocol": {"feasibility_passes": 0, "measured_passes": passes},
        "notes": [("Imported evidence: rows come from the source's client nanoseconds; bodies are their `raw`"
                  " as canonical JSON, not the original bytes; labels are inferred from checks.correct when present.")],
    }


def converted_files(run: Path) -> dict[str, str]:
    """sha256 of every file the import converts (everything but state.json, import.json and report outputs)."""
    out = {}
    for path in sorted(Path(run).rglob("*")):
        rel = path.relative_to(run).as_posix()
        if path.is_file() and rel not in ("state.json", "import.json") and rel not in REPORT_FILES:
            out[rel] = hash_file(path)
    return out


def _arm_files(folder: str, verified: list[str]) -> list[tuple[str, int, str]]:
    files, seen = [], set()
    for name in verified:
        pure = PurePosixPath(name)
        match = _FILE_RE.match(pure.name)
        if match and (str(pure.parent) if str(pure.parent) != "." else "") == folder:
            key = (match["arm"].lower(), int(match["pass"]))
            if key in seen:
                raise EvidenceError(f"{name}: arm {key[0]} pass {key[1]} appears twice (arm names ignore case).")
            seen.add(key)
            files.append((key[0], key[1], name))
    if not files:
        raise InputMismatch(f"{folder or '.'}: holds no verified <arm>-measured-<pass>.jsonl file.")
    by_arm: dict[str, list[int]] = {}
    for arm, index, _ in files:
        by_arm.setdefault(arm, []).append(index)
    counts = {arm: sorted(p) for arm, p in by_arm.items()}
    for arm, passes in counts.items():
        if passes != list(range(1, len(passes) + 1)):
            raise EvidenceError(f"arm {arm} has passes {passes}; they must be 1..N with none missing.")
    if len({len(p) for p in counts.values()}) != 1:
        raise EvidenceError(f"arms have different numbers of passes ({counts}); the import needs them equal.")
    return files


def import_system1(src: Path, out: Path, *, workload: str = "mixed", subdir: str | None = None) -> dict:
    """Verify and convert their evidence into a new run directory `out`; returns import.json's content."""
    src, out = Path(src), Path(out)
    if out.exists() or out.is_symlink():
        raise EvidenceError(f"{out} already exists; imports go into a new directory.")
    root = locate_source(src)
    resolved_out = out.resolve()
    if resolved_out == root or root in resolved_out.parents:
        raise EvidenceError(f"--out {out} is inside the source {root}; write the import elsewhere.")
    manifest = read_source_manifest(root)
    checked = verify_source(manifest)
    folder = _evidence_folder(root, src.resolve(), subdir, checked["verified"])
    files = _arm_files(folder, checked["verified"])
    prefix = f"{folder}/" if folder else ""
    summary_name = f"{prefix}summary.json"
    if summary_name not in checked["verified"]:
        state = "not present" if summary_name in checked["absent"] else "not listed in manifest.json"
        raise InputMismatch(f"{summary_name}: {state}; the published figures come from it.")
    their_summary = _read_finite_json(root / summary_name, summary_name)
    if not isinstance(their_summary, dict):
        raise EvidenceError(f"{summary_name}: not a JSON object.")
    _arms(their_summary)
    cleanup_name = f"{prefix}cleanup.json"
    cleanup_json = _read_finite_json(root / cleanup_name, cleanup_name) if cleanup_name in checked["verified"] else None
    tmp = out.parent / f".{out.name}.importing-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as exc:
        raise EvidenceError(f"cannot create {tmp} for the import ({exc.strerror or exc}); "
                            "choose another --out.") from None
    try:
        (tmp / "responses").mkdir()
        with _collector_paused():
            read = _read_arm_files(root, files, workload, tmp)
            verified_digests = [(n, manifest.entries[n]["sha256"]) for n in checked["verified"]]
            recipe = _recipe(root, folder, read.arms, workload, files[0][2], verified_digests)
            recipe_text = yaml.safe_dump(recipe, sort_keys=False)
            parsed = parse_recipe(recipe_text, "imported recipe")
            (tmp / "recipe.yaml").write_text(recipe_text, encoding="utf-8")
            write_json_atomic(tmp / "summary.json", summarize(read.rows, parsed))
        figures = published_figures(their_summary, read.latencies, read.max_delta)
        arms = _arms(their_summary)
        report = {
            "format_version": IMPORT_FORMAT_VERSION, "format": "system1-omni", "source": str(root),
            "evidence_folder": folder, "signed": False, "measured_by_us": False,
            "files_verified": len(checked["verified"]), "verified": checked["verified"], "absent": checked["absent"],
            "source_manifest": manifest.entries, "source_manifest_meta": manifest.meta,
            "normalization": [{"path": n, "note": e["normalization"], "present": n in checked["verified"]}
                              for n, e in sorted(manifest.entries.items()) if "normalization" in e],
            "rows": len(read.rows), "converted": converted_files(tmp),
            "figures": figures, "figure_counts": figure_counts(figures),
            "readiness": {a: e.get("readiness") for a, e in arms.items() if isinstance(e, dict)},
            "first_inference": {a: e.get("first_inference") for a, e in arms.items()
                                if isinstance(e, dict) and "first_inference" in e},
            "cleanup": _cleanup(their_summary, cleanup_json),
            "published": {k: their_summary[k] for k in ("completed", "accepted_e2e_latency_gate", "conclusion")
                          if k in their_summary},
            "notes": read.notes,
        }
        write_json_atomic(tmp / "import.json", report)
        RunDir(tmp).write_state({"status": "imported", "attempted": ["import"], "finished": ["import"], "error": None})
        if out.exists() or out.is_symlink():
            raise EvidenceError(f"{out} appeared during the import; nothing was written there.")
        os.rename(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise EvidenceError(f"writing the import to {out} failed ({exc.strerror or exc}); "
                            "nothing was written.") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report


# --- output -------------------------------------------------------------------------------


def format_import_report(report: dict) -> str:
    folder = report.get("evidence_folder") or ""
    where = f"{report['source']}/{folder}" if folder else report["source"]
    lines = [(f"imported {report.get('rows', '?')} rows from {where}: {report['files_verified']} files verified "
             f"(bytes and sha256) against {report['source']}/manifest.json; UNSIGNED, not measured by us")]
    lines += [f"{name}: not present, not verified" for name in report.get("absent", [])]
    for n in report.get("normalization", []):
        lines.append(f"normalization note, {n['path']} ({'verified' if n['present'] else 'not present'}): {n['note']}")
    lines += figure_lines(report)
    cleanup = cleanup_line(report.get("cleanup") or {})
    if cleanup:
        lines.append(cleanup)
    lines += [f"note: {n}" for n in report.get("notes", [])]
    return "\n".join(lines)
