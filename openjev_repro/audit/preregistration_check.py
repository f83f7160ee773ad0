"""verify's check of a pre-registration (issue 38): a run that holds `preregistration.dsse.json` must have
been signed by the same key, and its signed recipe (its bytes; its protocol, gates and `reproduction:`
margins named apart), its inputs lock and its plan's case order must be exactly the pre-registered ones; an
RFC 3161 timestamp beside it must carry the sha256 of its bytes (the authority's signature is checked with
`openssl ts -verify`, docs/reproduce.md). A run without one (every run signed before issue 38, and unsigned
studies) gets no check, so its verdict and check count are what they were."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import ReproError
from ..evidence.recipe import parse_recipe
from ..evidence.records import inputs_of, plan_of
from ..evidence.rundir import RunDir
from ..manifest.preregistration import (
    PREREGISTRATION_NAME,
    TIMESTAMP_NAME,
    read_preregistration,
)

__all__ = ["preregistration_verdicts"]


def _differences(run: RunDir, pubkey: Path | None) -> list[str]:
    registered = read_preregistration(run, pubkey)
    recipe_bytes = run.file("recipe.yaml").read_bytes()
    recipe = parse_recipe(recipe_bytes.decode("utf-8"), "recipe.yaml")
    plan, lock = plan_of(run), inputs_of(run)
    planned = None if plan is None or plan.case_ids is None else {k: list(v) for k, v in plan.case_ids.items()}
    checked = [(f.path, f.actual) for f in lock.files] if lock is not None else []
    found = registered.recipe_differences(recipe, recipe_bytes) + registered.run_differences(checked, planned)
    stamp = run.file(TIMESTAMP_NAME)
    if stamp.is_file() and hashlib.sha256(run.file(PREREGISTRATION_NAME).read_bytes()).digest() not in stamp.read_bytes():
        found.append(f"{TIMESTAMP_NAME} does not timestamp these bytes of {PREREGISTRATION_NAME}")
    return found


def preregistration_verdicts(run: RunDir, pubkey: Path | None) -> list[tuple[str, bool, str]]:
    """(name, passed, detail) of the "pre-registration" check; none for a run without one."""
    if not run.file(PREREGISTRATION_NAME).is_file():
        return []
    try:
        found = _differences(run, pubkey)
    except (ReproError, OSError, ValueError) as exc:  # damaged, or signed by another key
        return [("pre-registration", False, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)]
    if found:
        return [("pre-registration", False, "; ".join(found))]
    signed = "signed by the given key" if pubkey is not None else "signature not checked (no --pubkey)"
    return [("pre-registration", True,
             f"{signed}; recipe, gates, protocol, margins, inputs and case order as pre-registered")]
