"""Writing the imported run: a new directory filled in a temporary sibling, renamed into place.

What every format writes: rows.jsonl (phase measured), responses/<arm>.jsonl, recipe.yaml,
summary.json (`results.statistics.summarize`), import.json and state.json with status
"imported". Nothing appears at `--out` until the run is complete; a failure leaves nothing
behind. Imported runs are never signed: we did not measure them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from ...errors import EvidenceError
from ...evidence.files import atomic_directory, write_json_atomic
from ...evidence.recipe import parse_recipe
from ...evidence.rows import Row
from ...evidence.rundir import RunDir, enclosing_run
from ...evidence.state import StateRecord, Status
from ...hashing import hash_file
from ...results.statistics import summarize

__all__ = ["IMPORT_FORMAT_VERSION", "REPORT_FILES", "converted_files", "imported_recipe", "new_run",
           "write_record", "write_summary"]

# Format history of import.json:
#   1  (2026-11) first version: flat source_manifest {path: sha256}, figures with `matches`.
#   2  (2026-12) manifest entries as objects, subfolders, partial downloads (`absent`),
#      converted-file digests, figure `status` (exact | within_rounding | mismatch),
#      published cleanup and reduction percentages.
#      Later in 2026-12, additively: `format` may also be provenance-json, timings-csv or
#      sha256sums; `study` (the published date, hardware, arms, hypothesis), `published_gates`,
#      `published_summary` and `provenance` ("verified" or "not verifiable: ...").
IMPORT_FORMAT_VERSION = 2
REPORT_FILES = {"report.md", "latency_vs_tokens.png", "latency_cdf.png"}


def _check_out(out: Path, root: Path) -> None:
    if out.exists() or out.is_symlink():
        raise EvidenceError(f"{out} already exists; imports go into a new directory.")
    resolved_out = out.resolve()
    if resolved_out == root or root in resolved_out.parents:
        raise EvidenceError(f"--out {out} is inside the source {root}; write the import elsewhere.")
    run = enclosing_run(out.parent)
    if run is not None:
        raise EvidenceError(f"--out {out} is inside the run directory {run}; outputs never go into a run "
                            "(its files are evidence). Choose a path outside every run.")


@contextmanager
def new_run(out: Path, root: Path) -> Iterator[Path]:
    """A temporary directory beside `out` (evidence/files.atomic_directory), renamed to `out` when the body
    finishes, every file fsynced; removed on any failure."""
    out = Path(out)
    _check_out(out, Path(root).resolve())
    started = False
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_directory(out) as tmp:
            started = True
            (tmp / "responses").mkdir()
            yield tmp
    except OSError as exc:
        if not started:
            raise EvidenceError(f"cannot create {out} for the import ({exc.strerror or exc}); "
                                "choose another --out.") from None
        raise EvidenceError(f"writing the import to {out} failed ({exc.strerror or exc}); "
                            "nothing was written.") from None


def _study_id(source: Path) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", f"imported-{source.name}".lower()).strip("-.")[:80] or "imported"


def _purpose(source: Path, folder: str, fmt: str, hypothesis: str | None) -> str:
    purpose = f"Per-request evidence imported from {source / folder if folder else source} ({fmt} format); not measured here."
    return purpose + (f" Their hypothesis (quoted): \"{hypothesis}\"" if hypothesis else "")


def imported_recipe(source: Path, folder: str, workloads: dict[str, tuple[str, int]], arms: list[str],
                    verified: list[tuple[str, str]], *, fmt: str, study: dict[str, Any] | None = None,
                    note: str) -> dict:
    """The recipe of an imported run. `workloads`: name -> (a file of its rows, measured passes).

    `study` holds what the source publishes about itself: `date` (its own, not the import's),
    `hypothesis`, and per arm a `description`. `arms` in their order: the reference (baseline) first.
    """
    study = study or {}
    passes = max(p for _, p in workloads.values())
    described = study.get("arms") or {}
    return {
        "format_version": 1,
        "study": {"id": _study_id(source), "date": study.get("date") or date.today().isoformat(),
                  "purpose": _purpose(source, folder, fmt, study.get("hypothesis")), "source": str(source)},
        "inputs": {"root": str(source),
                   "files": [{"path": n, "sha256": s, "role": "imported-evidence"} for n, s in verified]},
        "workloads": [{"name": w, "requests": first, "feasibility_passes": 0, "measured_passes": p}
                      for w, (first, p) in workloads.items()],
        "backends": [{"name": a, "command": ["imported"], "description": str(described.get(a) or "imported arm")}
                     for a in arms],  # in the order given: the reference arm first
        "protocol": {"feasibility_passes": 0, "measured_passes": passes},
        "notes": [note],
    }


def write_summary(run: Path, recipe: dict, rows: list[Row]) -> None:
    """recipe.yaml and summary.json of the run being written."""
    recipe_text = yaml.safe_dump(recipe, sort_keys=False)
    parsed = parse_recipe(recipe_text, "imported recipe")
    (run / "recipe.yaml").write_text(recipe_text, encoding="utf-8")
    write_json_atomic(run / "summary.json", summarize(rows, parsed).to_json())


def converted_files(run: Path) -> dict[str, str]:
    """sha256 of every file the import converts (everything but state.json, import.json and report outputs)."""
    out = {}
    for path in sorted(Path(run).rglob("*")):
        rel = path.relative_to(run).as_posix()
        if path.is_file() and rel not in ("state.json", "import.json") and rel not in REPORT_FILES:
            out[rel] = hash_file(path)
    return out


def write_record(run: Path, record: dict) -> None:
    """import.json, then state.json "imported": the last two files of an import."""
    write_json_atomic(run / "import.json", record)
    RunDir(run).write_state(StateRecord(Status.IMPORTED.value, attempted=("import",), finished=("import",)))
