"""`--format timings-csv`: `timings.csv` plus `summary.json`, with no published digests.

The layout of system1-omni's `benchmarks/prefill_batching/artifacts/<date>/`: one CSV row per
case, `workload,request_id,decisions,<arm>_pass_<n>_s,...` (seconds, one column per arm and
pass), and a `summary.json` with `results[arm][workload]` (a list of per-pass `requests,
mean_ms, p50_ms, p95_ms, successful_decisions_per_second`), `reductions[workload]`
(`*_reduction_percent`), `gates`, `controls` (GPU, acceptance) and totals. Nothing publishes
digests, so the run records "provenance not verifiable: no published digests" and the
sha256 of every file it imported.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from ...errors import EvidenceError, InputMismatch
from .layout import Layout, finish
from .manifest import read_finite_json
from .run import Origin
from .samples import MAX_INT, Sample, check_id, check_seconds

__all__ = ["detect", "import_timings"]

CSV_NAME, SUMMARY_NAME = "timings.csv", "summary.json"
_COLUMN = re.compile(r"^(?P<arm>[a-z0-9][a-z0-9_.-]*?)_pass_(?P<pass>[1-9][0-9]{0,5})_s$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
MAX_CSV_BYTES = 256 << 20
NOT_VERIFIABLE = "provenance not verifiable: no published digests"


def detect(src: Path) -> bool:
    return (Path(src) / CSV_NAME).is_file() and (Path(src) / SUMMARY_NAME).is_file()


def _columns(header: list[str]) -> list[tuple[str, int, int]]:
    """(arm, pass, column index) of every timing column; the first three columns are fixed."""
    if header[:3] != ["workload", "request_id", "decisions"]:
        raise EvidenceError(f"{CSV_NAME}: header starts {header[:3]}, not workload,request_id,decisions.")
    out = []
    for index, name in enumerate(header[3:], start=3):
        match = _COLUMN.match(name)
        if not match:
            raise EvidenceError(f"{CSV_NAME}: column {name[:60]!r} is not <arm>_pass_<n>_s.")
        out.append((match["arm"], int(match["pass"]), index))
    if not out or len({(a, p) for a, p, _ in out}) != len(out):
        raise EvidenceError(f"{CSV_NAME}: no timing columns, or one arm and pass twice.")
    return out


def _float(text: str, where: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise EvidenceError(f"{where}: {name} {text[:40]!r} is not a number.") from None
    return check_seconds(value, where, name)


def _decisions(text: str, where: str) -> int:
    if not text.isdigit() or len(text) > 19:
        raise EvidenceError(f"{where}: decisions {text[:40]!r} is not a non-negative integer.")
    if int(text) > MAX_INT:
        raise EvidenceError(f"{where}: decisions {text} is not an integer in [0, {MAX_INT}].")
    return int(text)


def _csv_table(path: Path) -> list[list[str]]:
    """The CSV's cells, row by row: a regular UTF-8 file under MAX_CSV_BYTES with at least a header."""
    if path.is_symlink() or not path.is_file():
        raise InputMismatch(f"{path}: not a regular file.")
    if path.stat().st_size > MAX_CSV_BYTES:
        raise EvidenceError(f"{path}: over {MAX_CSV_BYTES >> 20} MiB; not a timings file.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise EvidenceError(f"{CSV_NAME}: not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    table = list(csv.reader(text.splitlines()))
    if not table:
        raise EvidenceError(f"{CSV_NAME}: empty.")
    return table


def _case(cells: list[str], width: int, where: str, seen: set[tuple[str, str]]) -> tuple[str, str]:
    """(workload, request id) of one CSV row, checked and not seen before."""
    if len(cells) != width:
        raise EvidenceError(f"{where}: {len(cells)} cells, the header has {width}.")
    workload, case = cells[0], check_id(cells[1], where)
    if not _NAME.match(workload):
        raise EvidenceError(f"{where}: workload {workload[:40]!r} is not a name (letters, digits, _ . -).")
    if (workload, case) in seen:
        raise EvidenceError(f"{where}: request {case} of workload {workload} appears twice.")
    seen.add((workload, case))
    return workload, case


def _read_csv(path: Path) -> list[Sample]:
    table = _csv_table(path)
    header = table[0]
    columns = _columns(header)
    samples: list[Sample] = []
    seen: set[tuple[str, str]] = set()
    for number, cells in enumerate(table[1:], start=2):
        where = f"{CSV_NAME}:{number}"
        workload, case = _case(cells, len(header), where, seen)
        decisions = _decisions(cells[2], where)
        for arm, index, column in columns:
            seconds = _float(cells[column], where, header[column])
            samples.append(Sample(id=case, arm=arm, workload=workload, pass_index=index, seconds=seconds,
                                  decisions=decisions, body={"workload": workload, "request_id": case,
                                                             "decisions": decisions, "seconds": seconds}))
    if not samples:
        raise EvidenceError(f"{CSV_NAME}: holds no rows.")
    # Our rows go arm by arm, pass by pass, in their case order.
    return sorted(samples, key=lambda s: (s.arm, s.pass_index))


def import_timings(src: Path, out: Path, *, workload: str = "mixed", subdir: str | None = None,
                   origin: Origin | None = None) -> dict:
    """Convert `timings.csv` + `summary.json` at `src` into the new run `out` (nothing is verifiable)."""
    root = Path(src).resolve()
    if not detect(root):
        raise InputMismatch(f"{src}: no {CSV_NAME} with {SUMMARY_NAME}; not the timings-csv layout.")
    summary = read_finite_json(root / SUMMARY_NAME, SUMMARY_NAME)
    if not isinstance(summary, dict):
        raise EvidenceError(f"{SUMMARY_NAME}: not a JSON object.")
    samples = _read_csv(root / CSV_NAME)
    layout = Layout(fmt="timings-csv", root=root, samples=samples, summary=summary,
                    files=[CSV_NAME, SUMMARY_NAME], provenance=NOT_VERIFIABLE, digests_file=None,
                    documents=[summary], meta={k: summary[k] for k in ("date", "raw_evidence_url") if k in summary},
                    note=("Imported evidence (timings-csv): latencies are their published seconds; no digests were "
                          "published, so their provenance is not verifiable; the sha256 of each imported file is "
                          "recorded in import.json."))
    return finish(layout, out, origin)
