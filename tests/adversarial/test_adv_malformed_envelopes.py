"""Malformed envelopes and statements: one FAIL line and exit 1, never a traceback, with no key needed."""

from __future__ import annotations

import base64
import json

import pytest
from advkit import invoke, one_error_line
from audit_kit import signed_run

from openjev_repro.audit.verify import verify_path
from openjev_repro.evidence.rundir import ENVELOPE_NAME
from openjev_repro.manifest.dsse import envelope_bytes, parse_envelope, payload_of


def statement_of(run) -> dict:
    return json.loads(payload_of(parse_envelope(run.file(ENVELOPE_NAME).read_bytes())))


def write_unsigned(run, statement_text: str, signatures=None) -> None:
    envelope = {"payload": base64.standard_b64encode(statement_text.encode()).decode(),
                "payloadType": "application/vnd.in-toto+json", "signatures": signatures or []}
    run.file(ENVELOPE_NAME).write_bytes(envelope_bytes(envelope))


def envelope_failure(run, public) -> str:
    checks = verify_path(run.path, pubkey=public)
    bad = [c for c in checks if c.passed is False]
    assert bad and bad[0].name == "envelope", [(c.name, c.detail) for c in checks]
    return bad[0].detail


def test_garbage_signatures(tmp_path):
    run, _, public = signed_run(tmp_path)
    envelope = parse_envelope(run.file(ENVELOPE_NAME).read_bytes())
    for garbage in (["garbage"], [{"keyid": 5, "sig": "x"}], "garbage", [{"keyid": "a"}]):
        run.file(ENVELOPE_NAME).write_bytes(envelope_bytes(dict(envelope.to_json(), signatures=garbage)))
        assert "signatures is not a list of {keyid, sig} strings" in envelope_failure(run, public)


@pytest.mark.parametrize("field,value,message", [
    ("subject", 5, "subject is not a list"),
    ("subject", [5], "subject[0] is not {name: string, digest"),
    ("subject", [{"name": "rows.jsonl", "digest": {"sha256": 7}}], "subject[0] is not"),
    ("predicate.signed", "yes", "predicate.signed is not true or false"),
    ("predicate.state", [], "predicate.state is not an object"),
    ("predicate.summary", "x", "predicate.summary is not an object"),
])
def test_statement_fields_are_schema_checked(tmp_path, field, value, message):
    run, _, public = signed_run(tmp_path)
    statement = statement_of(run)
    if field.startswith("predicate."):
        statement["predicate"][field.split(".", 1)[1]] = value
    else:
        statement[field] = value
    write_unsigned(run, json.dumps(statement))
    assert message in envelope_failure(run, public)


def test_deep_json_and_huge_integers(tmp_path):
    run, _, public = signed_run(tmp_path)
    run.file(ENVELOPE_NAME).write_bytes(b"[" * 100_000 + b"]" * 100_000)
    assert "nested deeper than" in envelope_failure(run, public)
    write_unsigned(run, '{"_type": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "nested deeper than" in envelope_failure(run, public)
    write_unsigned(run, '{"_type": ' + "9" * 5000 + "}")
    assert "is not JSON" in envelope_failure(run, public)
    run.file(ENVELOPE_NAME).write_bytes(b"\xff\xfe{}")
    assert "is not valid JSON" in envelope_failure(run, public)


def test_cli_prints_one_fail_line_and_exits_1(tmp_path):
    run, _, public = signed_run(tmp_path)
    envelope = parse_envelope(run.file(ENVELOPE_NAME).read_bytes())
    run.file(ENVELOPE_NAME).write_bytes(envelope_bytes(dict(envelope.to_json(), signatures=["garbage"])))
    proc = invoke("verify", "--run", str(run.path), "--pubkey", str(public))
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    # the checks on stdout, one `error:` line on stderr (the shared CLI rule)
    assert proc.stderr == f"error: {run.path} does not verify (1 of 1 checks failed; FAIL lines above).\n"
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("FAIL  envelope") and lines[1] == "FAILED: 1 of 1 checks failed."


@pytest.mark.parametrize("line", [b"[" * 100_000, b'{"id": ' + b"9" * 5000 + b"}", b"[1, 2]"])
def test_hostile_rows_are_one_error_line_in_compare_and_a_fail_in_verify(tmp_path, line):
    from audit_kit import build_run

    run = build_run(tmp_path / "a")
    other = build_run(tmp_path / "b")
    run.rows_path.write_bytes(run.rows_path.read_bytes() + line + b"\n")
    message = one_error_line(invoke("compare", "--baseline", str(run.path), "--candidate", str(other.path)))
    assert message.startswith(f"error: {run.rows_path}:37: not a valid row (")
    run_signed, _, public = signed_run(tmp_path / "s")
    run_signed.rows_path.write_bytes(run_signed.rows_path.read_bytes() + line + b"\n")
    bad = {c.name for c in verify_path(run_signed.path, pubkey=public) if c.passed is False}
    assert bad == {"subject digests", "case ids", "protocol passes", "responses", "recomputed"}
