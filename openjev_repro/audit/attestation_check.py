"""verify's check of a run's gate attestations (issue 38): each `attestations/gate-*.dsse.json` an in-toto Test
Result signed by the given key, one per gate of the signed summary, its result that gate's outcome and its
subjects the run's files as they are. A run without attestations (every run signed before issue 38, every
unsigned study) gets no check."""

from __future__ import annotations

from pathlib import Path

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..errors import ReproError
from ..evidence.rundir import RunDir
from ..hashing import hash_file
from ..manifest.attestations import GATES_FOLDER, TEST_RESULT_TYPE, gate_outcomes
from ..manifest.dsse import parse_envelope, payload_of, verify_envelope
from ..manifest.keys import load_public_key

__all__ = ["gate_attestation_verdicts"]


class _Subject(msgspec.Struct, frozen=True):
    name: str
    digest: dict[str, str]


class _Predicate(msgspec.Struct, frozen=True):
    result: str


class _TestResult(msgspec.Struct, frozen=True):
    subject: list[_Subject]
    predicateType: str
    predicate: _Predicate


def _attestation_problems(run: RunDir, path: Path, want: str, key: Ed25519PublicKey | None) -> list[str]:
    """What is wrong with one gate's attestation: its signature, its result against the signed gate's, and
    each subject against the run's file."""
    envelope = parse_envelope(path.read_bytes(), path.name)
    if key is not None:
        verify_envelope(envelope, key)
    statement = msgspec.json.decode(payload_of(envelope), type=_TestResult)
    problems = []
    if statement.predicateType != TEST_RESULT_TYPE or statement.predicate.result != want:
        problems.append(f"{path.name}: result {statement.predicate.result!r}, the signed gate says {want!r}")
    for subject in statement.subject:
        file = run.file(subject.name)
        if not file.is_file() or subject.digest.get("sha256") != hash_file(file):
            problems.append(f"{path.name}: subject {subject.name} is not the run's file")
    return problems


def _problems(run: RunDir, pubkey: Path | None) -> tuple[list[str], int]:
    folder = run.file(GATES_FOLDER)
    expected = {outcome.file: outcome.result for outcome in gate_outcomes(run)}
    found = sorted(p.name for p in folder.iterdir())
    problems = [f"{name}: no gate of summary.json" for name in found if name not in expected]
    problems += [f"{name}: missing" for name in expected if name not in found]
    key = load_public_key(pubkey) if pubkey is not None else None
    for name in sorted(set(found) & set(expected)):
        problems += _attestation_problems(run, folder / name, expected[name], key)
    return problems, len(found)


def gate_attestation_verdicts(run: RunDir, pubkey: Path | None) -> list[tuple[str, bool, str]]:
    """(name, passed, detail) of the "gate attestations" check; none for a run without them."""
    if not run.file(GATES_FOLDER).is_dir():
        return []
    try:
        problems, count = _problems(run, pubkey)
    except (ReproError, OSError, ValueError) as exc:
        return [("gate attestations", False, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)]
    if problems:
        return [("gate attestations", False, "; ".join(problems[:6]))]
    signed = "signed by the given key" if pubkey is not None else "signatures not checked (no --pubkey)"
    return [("gate attestations", True, f"{count} in-toto Test Results, {signed}, each its gate's signed outcome")]
