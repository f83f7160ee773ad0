"""Standard in-toto attestations (issue 38), beside our own study-result statement.

- A reproduction verdict: an in-toto Statement v1 whose subjects are the sha256 of each run's
  `manifest.dsse.json` file bytes, with an SLSA Verification Summary (VSA v1) predicate: the verifier (this
  project and version), the policy (the margins' sha256), PASSED only for REPRODUCED, and the verdict itself
  as a verified level `OPENJEV_REPRODUCTION_<VERDICT>`.
- Gate outcomes: one in-toto Test Result (v0.1) statement per gate of a signed run, written by the study
  when it signs (`write_gate_attestations`, before the manifest, so the manifest lists them); its subjects
  are the run's rows.jsonl and summary.json, its result PASSED, FAILED or WARNED (a gate not evaluated).

Each is a DSSE envelope in the form manifest/dsse.py writes (signed with the key, or with no signature).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .. import __version__
from ..evidence.rundir import RunDir
from ..evidence.summary import read_summary
from ..hashing import hash_file
from .dsse import envelope_bytes, make_envelope
from .keys import load_private_key

__all__ = ["GATES_FOLDER", "TEST_RESULT_TYPE", "VERIFIER_ID", "VSA_TYPE", "GateOutcome", "gate_outcomes",
           "gate_statements", "signed_envelope", "verification_summary", "write_gate_attestations"]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
VSA_TYPE = "https://slsa.dev/verification_summary/v1"
TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
VERIFIER_ID = f"https://openjev-repro.dev/reproduce/v{__version__}"
GATES_FOLDER = "attestations"
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def signed_envelope(statement: dict, key_path: Path | None) -> bytes:
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return envelope_bytes(make_envelope(payload, load_private_key(key_path) if key_path is not None else None))


def verification_summary(subjects: list[tuple[str, str]], *, verdict: str, policy_sha256: str, policy_uri: str,
                         input_attestations: list[tuple[str, str]]) -> dict:
    """The VSA statement of a verdict: subjects (name, sha256 of a manifest.dsse.json)."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": sha}} for name, sha in subjects],
        "predicateType": VSA_TYPE,
        "predicate": {
            "verifier": {"id": VERIFIER_ID},
            "timeVerified": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "resourceUri": subjects[-1][0],
            "policy": {"uri": policy_uri, "digest": {"sha256": policy_sha256}},
            "inputAttestations": [{"uri": uri, "digest": {"sha256": sha}} for uri, sha in input_attestations],
            "verificationResult": "PASSED" if verdict == "REPRODUCED" else "FAILED",
            "verifiedLevels": ["OPENJEV_REPRODUCTION_" + verdict.replace(" ", "_")],
        },
    }


@dataclass(frozen=True)
class GateOutcome:
    """One gate of a run's summary as its attestation records it."""

    file: str  # gate-<name>.dsse.json under attestations/
    gate: str
    result: str  # PASSED, FAILED or WARNED (not evaluated)

    def statement(self, subjects: list[dict]) -> dict:
        return {
            "_type": STATEMENT_TYPE, "subject": subjects, "predicateType": TEST_RESULT_TYPE,
            "predicate": {
                "result": self.result,
                "configuration": [{"name": "recipe.yaml", "digest": subjects[-1]["digest"]}],
                "passedTests": [self.gate] if self.result == "PASSED" else [],
                "failedTests": [self.gate] if self.result == "FAILED" else [],
                "warnedTests": [self.gate] if self.result == "WARNED" else [],
            },
        }


def gate_outcomes(run: RunDir) -> list[GateOutcome]:
    """Every gate of the run's summary.json, with the file its attestation has."""
    path = run.file("summary.json")  # decoded by its record, Summary
    return [GateOutcome(f"gate-{_SAFE.sub('_', g.name)[:100]}.dsse.json", g.name,
                        "WARNED" if not g.evaluated else ("PASSED" if g.passed else "FAILED"))
            for g in read_summary(path).gates]


def gate_statements(run: RunDir) -> list[tuple[str, dict]]:
    """(file name, Test Result statement) for every gate of the run's summary.json; the subjects are the run's
    rows.jsonl, summary.json and recipe.yaml."""
    subjects = [{"name": name, "digest": {"sha256": hash_file(run.file(name))}}
                for name in ("rows.jsonl", "summary.json", "recipe.yaml") if run.file(name).is_file()]
    return [(outcome.file, outcome.statement(subjects)) for outcome in gate_outcomes(run)]


def write_gate_attestations(run_dir: Path, key_path: Path | None) -> list[Path]:
    """The study's signing step: one signed Test Result per gate under attestations/ (nothing unsigned)."""
    if key_path is None:
        return []
    from ..evidence.files import write_bytes_atomic

    run = RunDir(Path(run_dir))
    statements = gate_statements(run)
    if not statements:
        return []
    folder = run.file(GATES_FOLDER)
    folder.mkdir(exist_ok=True)
    written = []
    for name, statement in statements:
        write_bytes_atomic(folder / name, signed_envelope(statement, key_path))
        written.append(folder / name)
    return written
