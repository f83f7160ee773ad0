"""Symlink escapes: verify never opens a file outside the run, however a signed statement names it.

The outside target is a FIFO: opening it would block, so a verify that finishes (within the
subprocess timeout) has not opened it.
"""

from __future__ import annotations

import json
import os

from advkit import invoke
from test_audit_kit import signed_run

from openjev_repro.audit.publish import publish
from openjev_repro.audit.verify import verify_path
from openjev_repro.evidence.rundir import ENVELOPE_NAME
from openjev_repro.manifest.dsse import envelope_bytes, make_envelope, parse_envelope, payload_of
from openjev_repro.manifest.keys import load_private_key


def resign(path, private, change) -> None:
    """Rewrite the statement of an envelope with `change(statement)` and sign it with `private` (a key holder)."""
    statement = json.loads(payload_of(parse_envelope(path.read_bytes())))
    change(statement)
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    path.write_bytes(envelope_bytes(make_envelope(payload, load_private_key(private))))


def test_subject_through_an_in_run_symlink_to_outside_is_never_opened(tmp_path):
    run, private, public = signed_run(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.mkfifo(outside / "passwd")
    (run.path / "ext").symlink_to(outside)
    resign(run.file(ENVELOPE_NAME), private, lambda s: s["subject"].append(
        {"name": "ext/passwd", "digest": {"sha256": "0" * 64}}))
    proc = invoke("verify", "--run", str(run.path), "--pubkey", str(public), timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stdout.splitlines()[0].startswith("FAIL  run entries") and "ext is a symlink" in proc.stdout
    assert proc.stdout.strip().endswith("FAILED: 1 of 1 checks failed.")


def test_a_bundle_source_envelope_outside_the_bundle_is_not_trusted(tmp_path):
    run, private, public = signed_run(tmp_path)
    bundle = publish(run.path, tmp_path / "b.tar.gz", aggregate_only=True, key_path=private)
    import tarfile

    stage = tmp_path / "stage"
    with tarfile.open(bundle) as tar:
        tar.extractall(stage, filter="data")
    os.mkfifo(tmp_path / "elsewhere.dsse.json")
    resign(stage / ENVELOPE_NAME, private,
           lambda s: s["predicate"].update(source_envelope=str(tmp_path / "elsewhere.dsse.json")))
    checks = verify_path(stage, pubkey=public)
    bad = [(c.name, c.detail) for c in checks if c.passed is False]
    assert len(bad) == 1 and bad[0][0] == "source manifest" and "is not a signed file of this bundle" in bad[0][1]
