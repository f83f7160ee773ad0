"""The signed manifest: keys, DSSE PAE, statement content, refusal of incomplete runs."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat

import pytest
from audit_kit import build_run, keypair, signed_run
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from openjev_repro.errors import EvidenceError, RunIncomplete, VerificationError
from openjev_repro.evidence.rundir import ENVELOPE_NAME
from openjev_repro.manifest import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    generate_keypair,
    keyid,
    load_private_key,
    load_public_key,
    pae,
    read_statement,
    verify_envelope,
    write_manifest,
)


def test_pae_is_exactly_the_dsse_encoding():
    assert pae("application/vnd.in-toto+json", b"hello") == b"DSSEv1 28 application/vnd.in-toto+json 5 hello"
    # lengths are bytes, not characters
    assert pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"
    assert pae("", b"") == b"DSSEv1 0  0 "


def test_keygen_modes_keyid_and_no_overwrite(tmp_path):
    private, public, kid = generate_keypair(tmp_path / "k")
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    raw = load_public_key(public).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert len(raw) == 32 and kid == hashlib.sha256(raw).hexdigest() == keyid(load_private_key(private).public_key())
    with pytest.raises(VerificationError, match="already exists"):
        generate_keypair(tmp_path / "k")


def test_signed_manifest_lists_every_evidence_file_and_carries_the_study(tmp_path):
    run, _private, public = signed_run(tmp_path)
    envelope, statement = read_statement(run.file(ENVELOPE_NAME))
    assert envelope.payload_type == PAYLOAD_TYPE
    assert statement["_type"] == STATEMENT_TYPE and statement["predicateType"] == PREDICATE_TYPE
    names = [s["name"] for s in statement["subject"]]
    assert names == [p.relative_to(run.path).as_posix() for p in run.evidence_files()]
    assert {"rows.jsonl", "summary.json", "recipe.yaml", "state.json", "responses/hf.jsonl", "logs/native.log"} <= set(names)
    for s in statement["subject"]:
        assert s["digest"]["sha256"] == hashlib.sha256((run.path / s["name"]).read_bytes()).hexdigest()
    pred = statement["predicate"]
    assert pred["signed"] is True and pred["summary"] == json.loads(run.file("summary.json").read_text())
    assert pred["gates"] == pred["summary"]["gates"] and len(pred["gates"]) == 3
    assert pred["pins"] == json.loads(run.file("plan.json").read_text())["pins"]  # the plan's, copied as is
    assert pred["host"] == {"available": False, "reason": "the run has no host.json"}
    assert pred["recipe_sha256"] == hashlib.sha256(run.file("recipe.yaml").read_bytes()).hexdigest()
    assert verify_envelope(envelope, load_public_key(public)) == keyid(load_public_key(public))
    # the signature is standard base64 of an Ed25519 signature over PAE
    sig = base64.standard_b64decode(envelope.signatures[0].sig)
    load_public_key(public).verify(sig, pae(PAYLOAD_TYPE, base64.standard_b64decode(envelope.payload)))


def test_no_private_material_in_the_manifest(tmp_path):
    run, private, _ = signed_run(tmp_path)
    text = run.file(ENVELOPE_NAME).read_bytes()
    payload = base64.b64decode(json.loads(text)["payload"])
    raw = load_private_key(private).private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                                  serialization.NoEncryption())
    for blob in (text, payload):
        assert raw not in blob and base64.b64encode(raw) not in blob and b"PRIVATE KEY" not in blob


def test_unsigned_manifest_says_so(tmp_path):
    run = build_run(tmp_path)
    write_manifest(run.path, key_path=None)
    envelope, statement = read_statement(run.file(ENVELOPE_NAME))
    assert envelope.signatures == () and statement["predicate"]["signed"] is False


def test_incomplete_run_is_never_signed(tmp_path):
    private, _ = keypair(tmp_path)
    run = build_run(tmp_path / "runs", status="incomplete")
    with pytest.raises(RunIncomplete, match="only a complete study"):
        write_manifest(run.path, key_path=private)
    assert not run.file(ENVELOPE_NAME).exists()


def test_manifest_is_written_once(tmp_path):
    run, private, _ = signed_run(tmp_path)
    before = run.file(ENVELOPE_NAME).read_bytes()
    with pytest.raises(EvidenceError, match="written once"):
        write_manifest(run.path, key_path=private)
    assert run.file(ENVELOPE_NAME).read_bytes() == before


def test_wrong_kind_of_key_is_refused(tmp_path):
    bad = tmp_path / "not-a-key.pem"
    bad.write_text("hello\n")
    run = build_run(tmp_path / "runs")
    with pytest.raises(VerificationError, match="not an unencrypted PEM private key"):
        write_manifest(run.path, key_path=bad)
    other = tmp_path / "pub-as-private.pem"
    other.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(VerificationError):
        write_manifest(run.path, key_path=other)


def test_exported_names_exist():
    from openjev_repro import audit, manifest

    for module in (manifest, audit):
        assert all(hasattr(module, name) for name in module.__all__)
