"""`verify`'s check of a traced run (issue 43): kernel-families.json recomputed from the trace files.

The run's `traces/traces.json` lists every trace file; each is read again, its sha256 taken and its
kernel families counted with the run's own recipe (evidence/kernel_families.py), and the result
must equal the signed kernel-families.json exactly. A trace file changed after the study (even
one re-signed with a new manifest) changes its sha256 and so fails here; a file under traces/
that traces.json does not list fails too. Runs without torch traces get no check.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..evidence.kernel_families import (
    FAMILIES_FILE,
    TRACES_RECORD,
    compute_kernel_families,
    read_kernel_families,
    read_traces_record,
)
from ..evidence.recipe import Recipe

__all__ = ["CHECK_NAME", "kernel_families_recomputed"]

CHECK_NAME = "kernel families recomputed"
# (check name, passed: True/False/None for not applicable, detail): verify wraps each into its Check.
CheckOutcome = tuple[str, bool | None, str]


def _torch_traces(recipe: Recipe) -> bool:
    traces = recipe.traces
    return traces is not None and traces.enabled and traces.profiler == "torch"


def _outcome(passed: bool | None, detail: str) -> list[CheckOutcome]:
    return [(CHECK_NAME, passed, detail)]


def _first_of(names: list[str]) -> str:
    """The first four names, then how many more."""
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def kernel_families_recomputed(run_dir: Path, recipe: Recipe, aggregate_only: bool,
                               first_difference: Callable[[Any, Any], str | None]) -> list[CheckOutcome]:
    """The check's outcome (none for a run without torch traces); `first_difference(ours, signed)` is verify's."""
    run_dir = Path(run_dir)
    signed = read_kernel_families(run_dir)
    if signed is None:
        if _torch_traces(recipe) and (run_dir / TRACES_RECORD).is_file():
            return _outcome(False, f"the run has {TRACES_RECORD} but no {FAMILIES_FILE}")
        return []
    record = read_traces_record(run_dir)
    if record is None or not _torch_traces(recipe):
        return _outcome(False, f"{FAMILIES_FILE} is there but the run has no torch-profiler {TRACES_RECORD} "
                               "or its recipe asks for no torch traces")
    if aggregate_only and not any((run_dir / name).is_file() for name in record.files()):
        return _outcome(None, "an aggregate-only bundle carries no trace files to recompute from")
    unlisted = record.unlisted(run_dir)
    if unlisted:
        return _outcome(False, f"files under traces/ that {TRACES_RECORD} does not list: {_first_of(unlisted)}")
    assert recipe.traces is not None
    ours = compute_kernel_families(run_dir, record, recipe.traces.families)
    changed = ours.changed_since(signed)
    if changed:
        return _outcome(False, f"trace files changed since {FAMILIES_FILE} was computed (sha256 differs): "
                               f"{_first_of(changed)}")
    difference = first_difference(ours.to_json(), signed.to_json())
    if difference:
        return _outcome(False, f"recomputed from the trace files, {FAMILIES_FILE} differs at {difference}")
    return _outcome(True, f"{len(ours.traces)} traces: sha256, kernel counts, launches and "
                          f"{len(ours.families)} families' device time equal {FAMILIES_FILE}")
