"""The verdict and the gate attestations validate with in-toto's own Python packages (issue 38 item 4).

Each validator runs in its own virtual environment made by scripts/peers.sh (in-toto-attestation 0.9.3:
Statement v1, SLSA VSA v1 and Test Result v0.1 bindings; securesystemslib 1.6.0: DSSE signatures), never in
ours; the fixture makes them (or fails saying why), and .ci/run makes them before the suite, so this runs in CI.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from audit_kit import signed_run
from invoking import invoke

from openjev_repro.manifest.attestations import write_gate_attestations

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PEERS = Path(__file__).parent / "peers"
REFERENCE = REPO / "results" / "h200-reference-27b-shape"


def _peer(name: str) -> Path:
    result = subprocess.run(["bash", "scripts/peers.sh", name], cwd=REPO, capture_output=True, text=True,
                            timeout=900, check=False)
    assert result.returncode == 0, result.stderr
    return REPO / result.stdout.strip().splitlines()[-1] / "python"


@pytest.fixture(scope="module")
def intoto() -> Path:
    return _peer("in-toto-attestation")


@pytest.fixture(scope="module")
def sslib() -> Path:
    return _peer("securesystemslib")


@pytest.fixture(scope="module")
def attested(tmp_path_factory) -> tuple[list[Path], Path, Path]:
    """A signed verdict (the committed reference run against its rerun) and a signed run's gate attestations."""
    tmp = tmp_path_factory.mktemp("attested")
    run, private, public = signed_run(tmp)
    gates = write_gate_attestations(run.path, private)
    out = tmp / "verdict"
    proc = invoke("reproduce", "--original", str(REFERENCE / "run"), "--rerun", str(REFERENCE / "rerun"),
                  "--pubkey", str(REFERENCE / "signing-key.pub"), "--key", str(private), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return [out / "verdict.dsse.json", *gates], private, public


def _run(python: Path, script: str, *args: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), str(PEERS / script), *map(str, args)], capture_output=True, text=True,
                          timeout=120, check=False)


def test_statements_and_predicates_validate_with_in_toto_bindings(intoto, attested):
    files, _, _ = attested
    proc = _run(intoto, "intoto_validate.py", *files)
    assert proc.returncode == 0, proc.stderr
    found = [json.loads(line) for line in proc.stdout.splitlines()]
    assert found[0] == {"file": str(files[0]), "predicateType": "https://slsa.dev/verification_summary/v1",
                        "result": "PASSED"}
    assert [f["result"] for f in found[1:]] == ["PASSED", "PASSED", "PASSED"]  # audit_kit's three gates
    assert {f["predicateType"] for f in found[1:]} == {"https://in-toto.io/attestation/test-result/v0.1"}


def test_the_verdict_names_both_manifests_and_the_policy(attested):
    import base64
    import hashlib

    statement = json.loads(base64.b64decode(json.loads(attested[0][0].read_text())["payload"]))
    digests = [s["digest"]["sha256"] for s in statement["subject"]]
    assert digests == [hashlib.sha256((REFERENCE / r / "manifest.dsse.json").read_bytes()).hexdigest()
                       for r in ("run", "rerun")]
    predicate = statement["predicate"]
    assert predicate["verifier"]["id"].startswith("https://openjev-repro.dev/reproduce/v")
    assert predicate["verifiedLevels"] == ["OPENJEV_REPRODUCTION_REPRODUCED"]
    from openjev_repro.evidence.reproduction import DEFAULT_REPRODUCTION

    assert predicate["policy"]["digest"]["sha256"] == DEFAULT_REPRODUCTION.digest()


def test_signatures_verify_with_securesystemslib(sslib, attested):
    files, _, public = attested
    proc = _run(sslib, "dsse_verify.py", public, *files)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == len(files)


def test_a_changed_payload_fails_both_validators(tmp_path, sslib, intoto, attested):
    files, _, public = attested
    envelope = json.loads(files[0].read_text())
    import base64

    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["verificationResult"] = "PASSED, MAYBE"
    statement["subject"] = []
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    bad = tmp_path / "verdict.dsse.json"
    bad.write_text(json.dumps(envelope))
    assert _run(sslib, "dsse_verify.py", public, bad).returncode != 0
    assert _run(intoto, "intoto_validate.py", bad).returncode != 0


def test_an_unsigned_verdict_says_so(tmp_path):
    out = tmp_path / "verdict"
    proc = invoke("reproduce", "--original", str(REFERENCE / "run"), "--rerun", str(REFERENCE / "rerun"),
                  "--pubkey", str(REFERENCE / "signing-key.pub"), "--out", str(out))
    assert proc.returncode == 0
    assert "(UNSIGNED)" in proc.stdout
    assert json.loads((out / "verdict.dsse.json").read_text())["signatures"] == []
