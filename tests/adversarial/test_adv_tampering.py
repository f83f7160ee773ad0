"""Tampering: a changed byte, swapped rows, or a re-signature by another key never verifies."""

from __future__ import annotations

from test_audit_kit import keypair, signed_run

from openjev_repro.audit.verify import verify_path
from openjev_repro.evidence.rundir import ENVELOPE_NAME
from openjev_repro.manifest import write_manifest


def failed(checks) -> list[str]:
    return [c.name for c in checks if c.passed is False]


def test_a_flipped_byte_in_rows_summary_or_envelope_fails(tmp_path):
    run, _, public = signed_run(tmp_path)
    # a flip in the envelope either breaks its form ("envelope") or, inside the base64 payload or
    # signature, leaves a well-formed envelope whose signature no longer holds: which one depends
    # on the byte that lands in the middle, so either check failing is the required outcome.
    expected = {"rows.jsonl": {"subject digests"}, "summary.json": {"subject digests"},
                ENVELOPE_NAME: {"envelope", "signature"}}
    for name, checks in expected.items():
        path = run.file(name)
        original = path.read_bytes()
        mutated = bytearray(original)
        mutated[len(original) // 2] ^= 0x01
        path.write_bytes(bytes(mutated))
        try:
            assert checks & set(failed(verify_path(run.path, pubkey=public))), name
        finally:
            path.write_bytes(original)
    assert failed(verify_path(run.path, pubkey=public)) == []


def test_swapped_rows_fail_the_digest(tmp_path):
    run, _, public = signed_run(tmp_path)
    lines = run.rows_path.read_bytes().splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    run.rows_path.write_bytes(b"".join(lines))
    assert "subject digests" in failed(verify_path(run.path, pubkey=public))


def test_re_signed_by_another_key_fails_the_signature(tmp_path):
    run, _, public = signed_run(tmp_path)
    other_private, _ = keypair(tmp_path / "attacker")
    run.file(ENVELOPE_NAME).unlink()
    write_manifest(run.path, key_path=other_private)
    assert failed(verify_path(run.path, pubkey=public)) == ["signature"]
