"""`publish --aggregate-only`: no bodies, signed, verifiable, and honest about what it cannot check."""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path

import pytest
from audit_kit import signed_run
from invoking import invoke

from openjev_repro.audit.publish import publish
from openjev_repro.audit.verify import verify_path
from openjev_repro.errors import EvidenceError, VerificationError
from openjev_repro.evidence.rundir import ENVELOPE_NAME
from openjev_repro.manifest.dsse import parse_envelope, payload_of
from openjev_repro.manifest.run_manifest import read_statement

ROOT = Path(__file__).resolve().parents[1]


def names(bundle: Path) -> list[str]:
    with tarfile.open(bundle, "r:gz") as tar:
        return tar.getnames()


@pytest.fixture()
def published(tmp_path):
    run, private, public = signed_run(tmp_path)
    bundle = publish(run.path, tmp_path / "bundle.tar.gz", aggregate_only=True, key_path=private)
    return run, bundle, private, public


def test_bundle_holds_no_bodies_and_verifies(published):
    run, bundle, _, public = published
    members = names(bundle)
    assert not [n for n in members if n.startswith(("responses/", "logs/"))]
    assert {"rows.jsonl", "summary.json", "recipe.yaml", "state.json", ENVELOPE_NAME, "source.dsse.json"} <= set(members)
    for body_line in run.responses_path("hf").read_text().splitlines()[:3]:
        assert body_line.encode() not in bundle.read_bytes()
    checks = verify_path(bundle, pubkey=public)
    assert [c.name for c in checks if c.passed is False] == []
    not_checkable = {c.name: c.detail for c in checks if c.passed is None}
    assert set(not_checkable) == {"response bodies", "omitted files"}
    assert "aggregate-only" in not_checkable["response bodies"]
    assert {"statistics recomputed", "gates recomputed", "source manifest", "source signature"} <= \
        {c.name for c in checks if c.passed}


def members(bundle: Path) -> list[tuple[dict, bytes]]:
    """Every member's tar header fields (name, mode, owner, mtime, size, type...) and bytes, in order."""
    with tarfile.open(bundle, "r:gz") as tar:
        return [(m.get_info(), tar.extractfile(m).read()) for m in tar.getmembers()]


def statement_of(envelope: bytes) -> dict:
    return json.loads(payload_of(parse_envelope(envelope)))


def test_bundle_is_deterministic(published, tmp_path):
    """Two publishes of one run, seconds apart, are the same bytes: the bundle's statement carries the
    run's own signed creation time, never the clock's (issue 40 item 8)."""
    run, bundle, private, _ = published
    time.sleep(1.1)  # another second on the clock
    again = publish(run.path, tmp_path / "again.tar.gz", aggregate_only=True, key_path=private)
    assert again.read_bytes() == bundle.read_bytes()
    assert bundle.read_bytes()[4:8] == b"\0\0\0\0"  # gzip header: no mtime
    envelope = next(data for info, data in members(bundle) if info["name"] == ENVELOPE_NAME)
    _, source = read_statement(run.path / ENVELOPE_NAME)
    assert statement_of(envelope)["predicate"]["created_utc"] == source["predicate"]["created_utc"]


def test_tampered_bundle_member_fails(published, tmp_path):
    _, bundle, _, public = published
    out = tmp_path / "tampered.tar.gz"
    with tarfile.open(bundle, "r:gz") as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()
            if member.name == "summary.json":
                data = data.replace(b"1", b"2", 1)
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    assert "subject digests" in [c.name for c in verify_path(out, pubkey=public) if c.passed is False]
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(bundle.read_bytes()[:200])
    assert [c.name for c in verify_path(truncated, pubkey=public)] == ["bundle"]


def test_publish_refuses_other_names_tampered_runs_and_overwrites(published, tmp_path):
    run, bundle, private, _ = published
    for name in ("bundle.json", "bundle.tar", ".tar.gz"):
        with pytest.raises(EvidenceError, match=r"ends in \.tar\.gz"):
            publish(run.path, tmp_path / name, aggregate_only=True, key_path=private)
        assert not (tmp_path / name).exists()
    with pytest.raises(EvidenceError, match="already exists"):
        publish(run.path, bundle, aggregate_only=True, key_path=private)
    run.file("summary.json").write_bytes(run.file("summary.json").read_bytes().replace(b"1", b"2", 1))
    with pytest.raises(VerificationError, match="does not verify"):
        publish(run.path, tmp_path / "other.tar.gz", aggregate_only=True, key_path=private)


def test_cli_publish_then_verify(tmp_path):
    run, private, public = signed_run(tmp_path)
    out = tmp_path / "pub.tar.gz"
    proc = invoke("publish", "--run", str(run.path), "--aggregate-only", "--out", str(out), "--key", str(private), cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ver = invoke("verify", "--run", str(out), "--pubkey", str(public), cwd=ROOT, timeout=120)
    assert ver.returncode == 0, ver.stdout
    assert "N/A   response bodies" in ver.stdout and "VERIFIED" in ver.stdout
    assert proc.stdout.startswith("signed aggregate-only bundle:")


def test_cli_publish_defaults_to_aggregate_only_and_says_unsigned(tmp_path):
    run, _, public = signed_run(tmp_path)
    out = tmp_path / "pub.tar.gz"
    proc = invoke("publish", "--run", str(run.path), "--out", str(out), "--pubkey", str(public), cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"UNSIGNED aggregate-only bundle: {out}")
    with tarfile.open(out, "r:gz") as tar:
        names = tar.getnames()
    assert names and not [n for n in names if n.startswith(("responses/", "logs/"))], names
    refused = invoke("publish", "--run", str(run.path), "--out", str(tmp_path / "x.json"), cwd=ROOT, timeout=120)
    assert refused.returncode == 1 and refused.stderr.startswith("error: ") and ".tar.gz" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.json").exists()


def test_include_bodies_writes_a_private_archive_that_verifies(published, tmp_path):
    run, _, private, public = published
    bundle = publish(run.path, tmp_path / "private.tar.gz", aggregate_only=False, key_path=private)
    with tarfile.open(bundle, "r:gz") as tar:
        names = tar.getnames()
    assert any(n.startswith("responses/") for n in names), names
    failed = [c for c in verify_path(bundle, pubkey=public) if c.passed is False]
    assert failed == [], failed


def test_each_bundle_member_is_written_once(published):
    _, bundle, _, _ = published
    members = names(bundle)
    assert len(members) == len(set(members)), sorted(n for n in members if members.count(n) > 1)


def _publish_in_thread(run_dir: Path, out: Path, private: Path) -> BaseException | None:
    """publish in a thread joined with a deadline: a FIFO opened for reading would block forever."""
    import threading

    caught: list[BaseException | None] = [None]

    def target() -> None:
        try:
            publish(run_dir, out, aggregate_only=True, key_path=private)
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            caught[0] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "publish blocked on a member that is not a regular file"
    return caught[0]


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_publish_refuses_a_member_that_is_not_a_regular_file_without_blocking(tmp_path, kind):
    import os

    run, private, _ = signed_run(tmp_path)
    member = run.file("rows.jsonl")  # opened only by the tar thread and the verification
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(member.read_bytes())  # the same bytes: only the entry's kind is wrong
    member.unlink()
    if kind == "fifo":
        os.mkfifo(member)
    else:
        member.symlink_to(outside)
    out = tmp_path / "bundle.tar.gz"
    exc = _publish_in_thread(run.path, out, private)
    assert isinstance(exc, VerificationError), exc
    assert "rows.jsonl is a" in str(exc) and "only verified runs are published" in str(exc)
    assert not out.exists() and not list(tmp_path.glob(".bundle.tar.gz*"))
