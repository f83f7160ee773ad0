"""The import steps every sample-based format shares: rows written, figures recomputed, record kept.

A format module reads its digests and rows into `Sample`s and the published summary; `finish`
writes the run through `imports/run.py` and records, in import.json, what was verified (or
why provenance is not verifiable), the digests of every source file imported, the published
study's own facts and gates, and every published figure labelled by `audit/figures.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import EvidenceError
from ...hashing import hash_file
from ...limits import MAX_PASSES
from ..figures import NotReproduced, figure_counts, layout_figures
from .published import published_gates, study_documents, study_facts
from .run import IMPORT_FORMAT_VERSION, Origin, converted_files, imported_recipe, new_run, write_record, write_summary
from .samples import Sample, samples_of, write_samples

__all__ = ["Layout", "finish"]


@dataclass
class Layout:
    """What a format read from the source, before anything is written."""

    fmt: str
    root: Path
    samples: list[Sample]
    summary: dict[str, Any]  # the published summary the figures come from (sha256sums: stem -> summary)
    files: list[str]  # every source file read, relative to root
    provenance: str  # "verified" or "not verifiable: ..."
    digests_file: str | None  # the file holding their digests, when there is one
    verified: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)  # listed with a digest, not present
    source_digests: dict[str, dict[str, Any]] = field(default_factory=dict)  # their digests, as published
    documents: list[Any] = field(default_factory=list)  # published JSON documents describing the study
    meta: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    note: str = ""
    arm_descriptions: dict[str, str] = field(default_factory=dict)  # what the published study says each arm is
    arm_order: list[str] = field(default_factory=list)  # the study's reference arm first, when it says which


def folder_date(name: str) -> str | None:
    """The date a folder is named for (review-20261006, 20261003), as YYYY-MM-DD; None if none."""
    match = re.search(r"(?<![0-9])(20[0-9]{2})(0[1-9]|1[0-2])(0[1-9]|[12][0-9]|3[01])(?![0-9])", name)
    return f"{match[1]}-{match[2]}-{match[3]}" if match else None


def _check_passes(samples: list[Sample]) -> None:
    """The samples are passes a run can hold, as verify checks them: at most MAX_PASSES, each case once in a
    pass, and every pass (of every arm) of a workload the same cases. EvidenceError naming the first that is not."""
    passes: dict[tuple[str, str, int], list[str]] = {}
    for s in samples:
        if s.pass_index > MAX_PASSES:
            raise EvidenceError(f"{s.arm} {s.workload}: pass {s.pass_index} is above the {MAX_PASSES} passes a run "
                                "may hold; not imported.")
        passes.setdefault((s.arm, s.workload, s.pass_index), []).append(s.id)
    reference: dict[str, tuple[tuple[str, str, int], set[str]]] = {}
    for key, ids in sorted(passes.items()):
        arm, workload, index = key
        cases = set(ids)
        if len(cases) != len(ids):
            raise EvidenceError(f"{arm} {workload} pass {index}: a case appears twice (two files of one arm and "
                                "pass, say at two concurrencies); a pass holds each case once. Not imported.")
        first, ref = reference.setdefault(workload, (key, cases))
        if cases != ref:
            missing, extra = sorted(ref - cases), sorted(cases - ref)
            raise EvidenceError(f"{arm} {workload} pass {index} holds other cases than {first[0]} pass {first[2]} "
                                f"(missing {', '.join(missing[:3]) or 'none'}; extra {', '.join(extra[:3]) or 'none'}); "
                                "every pass of a workload must hold the same cases. Not imported.")


def finish(layout: Layout, out: Path, origin: Origin | None = None) -> dict:
    """Write the imported run at `out`; returns import.json's content. NotReproduced, and nothing
    written, when a published figure does not reproduce from the published rows."""
    _check_passes(layout.samples)
    origin = Origin.of(layout.root, origin)
    imported = {name: hash_file(layout.root / name) for name in layout.files}
    arms = sorted({s.arm for s in layout.samples})
    if sorted(layout.arm_order) == arms:
        arms = list(layout.arm_order)
    documents = study_documents(*layout.documents)
    study = study_facts(documents, arms=arms, date=folder_date(Path(origin.source).name),
                        descriptions={a: layout.arm_descriptions.get(a, f"arm {a} of the published study")
                                      for a in arms})
    with new_run(out, layout.root) as tmp:
        rows = write_samples(tmp, layout.samples)
        passes: dict[str, int] = {}
        for s in layout.samples:
            passes[s.workload] = max(passes.get(s.workload, 0), s.pass_index)
        workloads = {w: (layout.files[0], p) for w, p in passes.items()}
        recipe = imported_recipe(origin, "", workloads, arms, sorted(imported.items()), fmt=layout.fmt,
                                 study=study, note=layout.note or f"Imported evidence ({layout.fmt}); not measured here.")
        write_summary(tmp, recipe, rows)
        figures = layout_figures(layout.fmt, layout.summary, samples_of(layout.samples))
        NotReproduced.check(figures)
        record = {
            "format_version": IMPORT_FORMAT_VERSION, "format": layout.fmt, "source": origin.source,
            "evidence_folder": "", "signed": False, "measured_by_us": False,
            "provenance": layout.provenance, "digests_file": layout.digests_file,
            "files_verified": len(layout.verified), "verified": layout.verified, "absent": layout.absent,
            "source_manifest": layout.source_digests, "source_manifest_meta": layout.meta,
            "imported_files": imported, "rows": len(rows), "converted": converted_files(tmp),
            "figures": [f.to_json() for f in figures], "figure_counts": figure_counts(figures).to_json(),
            "published_summary": layout.summary,
            "study": study.to_json(), "published_gates": [g.to_json() for g in published_gates(documents)],
            "notes": layout.notes,
        }
        write_record(tmp, record)
    return record
