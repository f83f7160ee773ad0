"""The signed result of a study: an in-toto Statement v1 in a DSSE envelope.

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "<path relative to the run>", "digest": {"sha256": "…"}}, …],
     "predicateType": PREDICATE_TYPE,
     "predicate": {…}}

Subjects are every evidence file of the run (`RunDir.evidence_files()`). The predicate
carries the full recipe, resolved pins, input hashes, environment, timing boundary, client
overhead calibration, summary.json and gate outcomes, so a reader needs nothing else.

The statement's record, its shape check and the predicate's format history are in
evidence/statement.py (`Statement`); `build_statement` returns one, `read_statement` checks with it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import EvidenceError, RunIncomplete, VerificationError
from ..evidence.files import write_bytes_atomic
from ..evidence.recipe import safe_yaml
from ..evidence.rundir import ENVELOPE_NAME, RunDir, Status
from ..evidence.statement import PREDICATE_FORMAT_VERSION, PREDICATE_TYPE, STATEMENT_TYPE, Statement
from ..evidence.summary import summary_of
from ..hashing import hash_file
from ..limits import MAX_JSON_DEPTH, loads_bounded
from .dsse import Envelope, envelope_bytes, make_envelope, parse_envelope, payload_of
from .keys import load_private_key

__all__ = [
    "OPTIONAL_FILES",
    "PREDICATE_FORMAT_VERSION",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "TIMING_BOUNDARY",
    "build_statement",
    "read_statement",
    "read_statement_record",
    "subjects_of",
    "write_manifest",
]

# What a latency row measures (the contract of openjev_repro.evidence.rows). A run's plan.json may
# state its own boundary under "timing_boundary"; this is the default.
TIMING_BOUNDARY: dict[str, Any] = {
    "clock": "client monotonic clock (time.monotonic_ns)",
    "starts": "just before the first byte of the request is sent",
    "ends": "just after the last byte of the response is received",
    "includes": ["localhost HTTP", "server tokenization", "model execution", "response encoding"],
    "excludes": [
        "client request serialization",
        "client response JSON parsing",
        "process start to readiness",
        "first inference after readiness",
        "warm-up requests",
        "feasibility passes",
    ],
    "concurrency": 1,
}

# Run files copied into the predicate; each may be absent, which the predicate records.
OPTIONAL_FILES = {
    "plan": "plan.json",
    "inputs": "inputs.json",
    "environment": "environment.json",
    "calibration": "calibration.json",
    "host": "host.json",
    "processes": "processes.json",
    "backends": "backends.json",   # weights fingerprint and threads per backend (runs from 2026-12 on)
    "environment_check": "environment_check.json",  # declared vs reported environment, drift (2026-12 on)
    "servers": "servers.json",     # launched or reached by URL, readiness, connections (runs from 2026-12 on)
}


def subjects_of(run: RunDir) -> list[dict[str, Any]]:
    return [
        {"name": p.relative_to(run.path).as_posix(), "digest": {"sha256": hash_file(p)}}
        for p in run.evidence_files()
    ]


def _optional_json(run: RunDir, name: str) -> Any:
    document = run.as_written(name)
    return {"available": False, "reason": f"the run has no {name}"} if document is None else document


def recipe_json(data: bytes) -> Any:
    """The recipe as the predicate records it: YAML's dates become ISO strings (the predicate is JSON)."""
    return json.loads(json.dumps(safe_yaml(data.decode("utf-8")), default=_iso))


def _iso(value: Any) -> str:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} in recipe.yaml cannot be recorded in a manifest")


def _timing_boundary(plan: object, calibration: object) -> Any:
    """The run's own statement of what a latency includes (plan.json's, else calibration.json's, copied as
    the predicate copies those files); the row contract when neither states one."""
    for source in (plan, calibration):
        if isinstance(source, dict) and "timing_boundary" in source:
            return source["timing_boundary"]
    return TIMING_BOUNDARY


def build_statement(run: RunDir, *, signed: bool, aggregate_only: bool = False,
                    extra: dict[str, Any] | None = None, subjects: list[dict[str, Any]] | None = None
                    ) -> Statement:
    """The statement for a run directory as it is on disk now (its record; `.payload()` is what is signed).

    `subjects` replaces hashing every evidence file, for a caller that already holds the
    digests (publish, after one verification); it must list every file, as `subjects_of` would."""
    try:
        recipe_bytes = run.file("recipe.yaml").read_bytes()
    except FileNotFoundError as exc:
        raise EvidenceError(f"{run.path} has no recipe.yaml; it is not a complete run.") from exc
    if not run.file("summary.json").is_file():
        raise EvidenceError(f"{run.path} has no summary.json; the study did not finish its results step.")
    summary = summary_of(run)  # a summary of an unknown format is never signed
    copied = {key: _optional_json(run, name) for key, name in OPTIONAL_FILES.items()}
    predicate: dict[str, Any] = {
        "format_version": PREDICATE_FORMAT_VERSION,
        "signed": signed,
        "aggregate_only": aggregate_only,
        "study_id": summary.study_id,  # the recipe's study id, as summarize recorded it
        "recipe": recipe_json(recipe_bytes),
        "recipe_sha256": hashlib.sha256(recipe_bytes).hexdigest(),
        "pins": copied["plan"].get("pins", {"available": False, "reason": "plan.json states no pins"}),  # copied as is
        **copied,
        "timing_boundary": _timing_boundary(copied["plan"], copied["calibration"]),
        "summary": summary.to_json(),
        "gates": [g.to_json() for g in summary.gates],
        "state": run.state_record().to_json(),
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    predicate.update(extra or {})
    return Statement.parse({
        "_type": STATEMENT_TYPE,
        "subject": subjects if subjects is not None else subjects_of(run),
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }, str(run.file(ENVELOPE_NAME)))


def write_manifest(run_dir: Path, *, key_path: Path | None) -> Path:
    """Sign (or, without a key, write unsigned) the manifest of a complete run; returns its path."""
    run = RunDir.open(run_dir)
    state = run.effective_state_record()  # a "running" run whose study died reads incomplete (stale)
    status = state.status
    if status != Status.COMPLETE:
        stale = f" ({state.error})" if state.is_stale else ""
        raise RunIncomplete(
            f"{run.path} has status {status!r}{stale}; only a complete study gets a manifest. "
            "Re-run the study; an incomplete run is never signed."
        )
    out = run.file(ENVELOPE_NAME)
    if out.exists():
        raise EvidenceError(f"{out} already exists; a run's manifest is written once and never replaced.")
    key = load_private_key(key_path) if key_path is not None else None
    envelope = make_envelope(build_statement(run, signed=key is not None).payload(), key)
    write_bytes_atomic(out, envelope_bytes(envelope))  # fsynced; no temporary file survives a failure
    return out


def read_statement(envelope_path: Path) -> tuple[Envelope, dict[str, Any]]:
    """(envelope, statement) of an envelope file, checked for shape (`Statement.parse`) but not for signature."""
    envelope, statement, _ = _read(envelope_path)
    return envelope, statement


def read_statement_record(envelope_path: Path) -> tuple[Envelope, Statement]:
    """(envelope, the statement's record) of an envelope file, checked for shape but not for signature."""
    envelope, _, record = _read(envelope_path)
    return envelope, record


def _read(envelope_path: Path) -> tuple[Envelope, dict[str, Any], Statement]:
    try:
        data = Path(envelope_path).read_bytes()
    except FileNotFoundError as exc:
        raise EvidenceError(f"No manifest at {envelope_path}; sign the run with `invoke sign` first.") from exc
    except OSError as exc:
        raise EvidenceError(f"Cannot read the manifest {envelope_path} ({exc.strerror or exc}).") from None
    envelope = parse_envelope(data, source=str(envelope_path))
    try:
        statement = loads_bounded(payload_of(envelope).decode("utf-8"), max_depth=MAX_JSON_DEPTH)
    except ValueError as exc:  # bad UTF-8, syntax, nesting, huge integers
        raise VerificationError(f"The payload of {envelope_path} is not JSON ({exc}).") from None
    return envelope, statement, Statement.parse(statement, str(envelope_path))
