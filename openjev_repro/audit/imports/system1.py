"""`--format system1-omni`: a root `manifest.json` and `<arm>-measured-<pass>.jsonl` arm files.

Their layout (see ../shared/facts/upstream.md and docs/manifest.md), e.g.
`benchmarks/gdn/artifacts/20261003/`: `manifest.json` lists every file with its sha256
(`imports/manifest.py`); the evidence folder holds the arm files (`imports/arm_rows.py`),
`summary.json` (per arm `passes` with `mean_ms, p50_ms, p95_ms, requests,
max_probability_delta`, `aggregate_mean_ms`, `readiness`; at the top `cleanup` and
`*_reduction_percent`), optionally `cleanup.json` and `plan.json` (hypothesis, hardware,
acceptance criteria). Every published figure is recomputed (`audit/figures.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import EvidenceError, InputMismatch
from ...evidence.decoding import UNSET
from ..figures import NotReproduced, System1Summary, figure_counts, published_figures
from .arm_rows import arm_files, collector_paused, read_arm_files
from .manifest import (
    CheckedSource,
    SourceManifest,
    evidence_folder,
    locate_source,
    read_finite_json,
    read_source_manifest,
    verify_source,
)
from .published import published_gates, study_documents, study_facts
from .run import IMPORT_FORMAT_VERSION, Origin, converted_files, imported_recipe, new_run, write_record, write_summary

__all__ = ["detect", "import_system1"]

_NOTE = ("Imported evidence: rows come from the source's client nanoseconds; bodies are their `raw`"
         " as canonical JSON, not the original bytes; labels are inferred from checks.correct when present.")


def detect(src: Path) -> bool:
    try:
        locate_source(src)
    except InputMismatch:
        return False
    return True


def _optional_json(root: Path, name: str, verified: list[str]) -> Any:
    return read_finite_json(root / name, name) if name in verified else None


def _descriptions(plan: Any, arms: list[str]) -> dict[str, str]:
    if not isinstance(plan, dict):
        return {}
    libraries = plan.get("libraries")
    libraries = libraries if isinstance(libraries, dict) else {}
    out = {}
    for arm in arms:
        where = libraries.get(arm)
        out[arm] = f"{arm} arm of the published study" + (f" (library {where})" if isinstance(where, str) else "")
    return out


@dataclass
class _Source:
    root: Path
    manifest: SourceManifest
    checked: CheckedSource
    folder: str
    files: list[tuple[str, int, str]]
    summary_doc: dict[str, Any]  # their summary.json as published (study facts, gates)
    summary: System1Summary
    cleanup_json: Any
    plan: Any


def _read_source(src: Path, out: Path, subdir: str | None) -> _Source:
    """Their manifest checked, the evidence folder found, its summary (and cleanup, plan) read; nothing written."""
    if out.exists() or out.is_symlink():
        raise EvidenceError(f"{out} already exists; imports go into a new directory.")
    root = locate_source(src)
    resolved_out = out.resolve()
    if resolved_out == root or root in resolved_out.parents:
        raise EvidenceError(f"--out {out} is inside the source {root}; write the import elsewhere.")
    manifest = read_source_manifest(root)
    checked = verify_source(manifest)
    folder = evidence_folder(root, src.resolve(), subdir, checked.verified)
    files = arm_files(folder, checked.verified)
    prefix = f"{folder}/" if folder else ""
    summary_name = f"{prefix}summary.json"
    if summary_name not in checked.verified:
        state = "not present" if summary_name in checked.absent else "not listed in manifest.json"
        raise InputMismatch(f"{summary_name}: {state}; the published figures come from it.")
    summary_doc = read_finite_json(root / summary_name, summary_name)
    summary = System1Summary.read(summary_doc, summary_name)
    return _Source(root, manifest, checked, folder, files, summary_doc, summary,
                   _optional_json(root, f"{prefix}cleanup.json", checked.verified),
                   _optional_json(root, f"{prefix}plan.json", checked.verified))


def import_system1(src: Path, out: Path, *, workload: str = "mixed", subdir: str | None = None,
                   origin: Origin | None = None) -> dict:
    """Verify and convert their evidence into a new run directory `out`; returns import.json's content.
    NotReproduced, and nothing written, when a published figure does not reproduce from their rows."""
    src, out = Path(src), Path(out)
    source = _read_source(src, out, subdir)
    origin = Origin.of(source.root, origin)
    root, manifest, checked, folder, files = source.root, source.manifest, source.checked, source.folder, source.files
    their_summary, their_summary_doc, cleanup_json, plan = source.summary, source.summary_doc, source.cleanup_json, source.plan
    with new_run(out, root) as tmp:
        with collector_paused():
            read = read_arm_files(root, files, workload, tmp)
            verified_digests = [(n, manifest.entries[n].sha256.lower()) for n in checked.verified]
            arm_names = sorted(read.arms)
            study = study_facts(study_documents(manifest.meta, plan, their_summary_doc), arms=arm_names,
                                descriptions=_descriptions(plan, arm_names))
            recipe = imported_recipe(origin, folder, {workload: (files[0][2], max(max(p) for p in read.arms.values()))},
                                     arm_names, verified_digests, fmt="system1-omni", study=study, note=_NOTE)
            write_summary(tmp, recipe, read.rows)
        figures = published_figures(their_summary, read.latencies, read.max_delta)
        NotReproduced.check(figures)
        report = {
            "format_version": IMPORT_FORMAT_VERSION, "format": "system1-omni", "source": origin.source,
            "evidence_folder": folder, "signed": False, "measured_by_us": False,
            "provenance": "verified", "digests_file": "manifest.json",
            "files_verified": len(checked.verified), "verified": checked.verified, "absent": checked.absent,
            "source_manifest": manifest.published, "source_manifest_meta": manifest.meta,
            "normalization": [{"path": n, "note": e.normalization, "present": n in checked.verified}
                              for n, e in sorted(manifest.entries.items()) if e.normalization is not UNSET],
            "rows": len(read.rows), "converted": converted_files(tmp),
            "figures": [f.to_json() for f in figures], "figure_counts": figure_counts(figures).to_json(),
            "readiness": {a: e.readiness for a, e in their_summary.arms.items()},
            "first_inference": {a: e.first_inference for a, e in their_summary.arms.items()
                                if e.first_inference is not UNSET},
            "cleanup": their_summary.cleanup_record(cleanup_json),
            "published": their_summary.verdicts(),
            "study": study.to_json(),
            "published_gates": [g.to_json() for g in published_gates(study_documents(their_summary_doc, plan))],
            "notes": read.notes,
        }
        write_record(tmp, report)
    return report
