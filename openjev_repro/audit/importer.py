"""`import-evidence`: another project's published evidence as an (unsigned, imported) run.

One interface, several formats (`--format`, or `--format auto` to detect the layout):

- `system1-omni`: a root `manifest.json` (files with sha256 and bytes) and
  `<arm>-measured-<pass>.jsonl` arm files (`imports/system1.py`);
- `provenance-json`: a `provenance.json` listing `files: [{file, sha256, ...}]` and
  `raw-<mode>-c<concurrency>-p<pass>.jsonl` rows with `summary.json` (`imports/provenance_json.py`);
- `timings-csv`: `timings.csv` (seconds per arm and pass for each case) and `summary.json`,
  with no published digests (`imports/timings.py`);
- `sha256sums`: a `SHA256SUMS` file (sha256sum format) over gzip members, with the digests of
  the uncompressed originals in `provenance.json` where published (`imports/sha256sums.py`).

Every format reads the other project's digests (`imports/manifest.py` and each format's
own), decodes their rows into ours, recomputes every published figure it can with the
shared figure rules (`audit/figures.py`, which `verify` uses too) and writes the run
(`imports/run.py`): rows.jsonl, responses/, recipe.yaml, summary.json, import.json and
state.json "imported". Imported runs are never signed: we did not measure them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import InputMismatch
from ..evidence.decoding import UnsetType
from ..evidence.records import ImportRecord
from ..results.imported import cleanup_line, figure_lines
from .figures import (
    SIGNIFICANT_DIGITS,
    baseline_and_candidates,
    classify,
    figures_of,
    half_unit,
    published_figures,
    summary_from_figures,
)
from .imports import provenance_json, sha256sums, system1, timings
from .imports.manifest import SourceManifest, locate_source, read_source_manifest, verify_source
from .imports.run import IMPORT_FORMAT_VERSION, REPORT_FILES, Origin, converted_files
from .imports.system1 import import_system1

__all__ = [
    "FORMATS",
    "IMPORT_FORMAT_VERSION",
    "REPORT_FILES",
    "SIGNIFICANT_DIGITS",
    "SourceManifest",
    "baseline_and_candidates",
    "classify",
    "converted_files",
    "detect_format",
    "format_import_report",
    "half_unit",
    "import_evidence",
    "import_system1",
    "locate_source",
    "published_figures",
    "read_source_manifest",
    "summary_from_figures",
    "verify_source",
]

Importer = Callable[..., dict]
# name -> (detect(src) -> bool, import(src, out, workload=, subdir=) -> import.json); auto tries them in order.
FORMATS: dict[str, tuple[Callable[[Path], bool], Importer]] = {
    "system1-omni": (system1.detect, import_system1),
    "provenance-json": (provenance_json.detect, provenance_json.import_provenance),
    "sha256sums": (sha256sums.detect, sha256sums.import_sha256sums),
    "timings-csv": (timings.detect, timings.import_timings),
}


def detect_format(src: Path) -> str:
    """The one format whose layout `src` holds; InputMismatch when none or several fit (never a guess)."""
    src = Path(src)
    if not src.is_dir():
        raise InputMismatch(f"{src}: not a directory; --src names the published evidence folder.")
    found = [name for name, (detect, _) in FORMATS.items() if detect(src)]
    if not found:
        raise InputMismatch(f"{src}: no known layout (manifest.json, provenance.json with raw-*.jsonl, SHA256SUMS, "
                            f"or timings.csv with summary.json); name one with --format ({', '.join(FORMATS)}).")
    if len(found) > 1:
        raise InputMismatch(f"{src}: holds the layouts of {' and '.join(found)}; --format auto picks none of "
                            f"them, name the one you mean with --format.")
    return found[0]


def import_evidence(src: Path, out: Path, *, fmt: str = "auto", workload: str = "mixed",
                    subdir: str | None = None, origin: Origin | None = None) -> dict:
    """Import `src` in format `fmt` ("auto": detected) into the new run directory `out`.

    NotReproduced (nothing written) when a published figure does not reproduce from the published rows."""
    name = detect_format(Path(src)) if fmt == "auto" else fmt
    if name not in FORMATS:
        raise InputMismatch(f"unknown --format {fmt!r}; supported: auto, {', '.join(FORMATS)}.")
    _, importer = FORMATS[name]
    return importer(Path(src), Path(out), workload=workload, subdir=subdir, origin=origin)


def _provenance_line(record: ImportRecord, where: str) -> str:
    head = f"imported {record.rows} rows from {where} ({record.format})"
    if record.provenance == "verified":
        how = "sha256" if record.format != "system1-omni" else "bytes and sha256"
        return (f"{head}: {record.files_verified} files verified ({how}) against "
                f"{record.source}/{record.digests_file or 'manifest.json'}; UNSIGNED, not measured by us")
    return (f"{head}: {record.provenance}; the digests of what was imported are recorded in import.json; "
            "UNSIGNED, not measured by us")


def _study_lines(record: ImportRecord) -> list[str]:
    study = record.study
    lines = [f"published study date: {study.date or 'not published'}"]
    lines += [f"published hardware: {h}" for h in study.hardware] or ["published hardware: not published"]
    for gate in record.published_gates:
        outcome = {True: "passed", False: "FAILED", None: "outcome not published"}[gate.outcome]
        criterion = f" ({gate.criterion})" if gate.criterion else ""
        lines.append(f"published gate {gate.name}: {outcome}{criterion}")
    return lines


def format_import_report(report: dict) -> str:
    """What an import prints: where the rows came from, what was verified, the published study's facts, every
    figure against ours, and the verdict (an import that writes a run reproduced every figure)."""
    record = ImportRecord.from_json(report)
    where = f"{record.source}/{record.evidence_folder}" if record.evidence_folder else record.source
    lines = [_provenance_line(record, where)]
    lines += [f"{name}: not present, not verified" for name in record.absent]
    for n in record.normalization if not isinstance(record.normalization, UnsetType) else ():
        lines.append(f"normalization note, {n.path} ({'verified' if n.present else 'not present'}): {n.note}")
    lines += _study_lines(record)
    lines += figure_lines(report)
    cleanup = cleanup_line(record.cleanup_quoted)
    if cleanup:
        lines.append(cleanup)
    lines += [f"note: {n}" for n in record.notes]
    figures = figures_of(list(record.figures))
    reproduced = sum(f.matches for f in figures)
    compared = sum(f.status != "not_compared" for f in figures)
    lines.append(f"Verdict: REPRODUCED: {reproduced} of {compared} published figures reproduce from the published rows.")
    return "\n".join(lines)
