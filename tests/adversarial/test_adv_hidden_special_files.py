"""Hidden and special files: nothing unlisted, no link, FIFO, device or empty directory passes verify."""

from __future__ import annotations

import io
import os
import tarfile

import pytest
from audit_kit import signed_run

from openjev_repro.audit.bundle import extract_bundle
from openjev_repro.audit.publish import publish
from openjev_repro.audit.verify import verify_path
from openjev_repro.errors import EvidenceError


def failed(checks) -> list[tuple[str, str]]:
    return [(c.name, c.detail) for c in checks if c.passed is False]


@pytest.fixture()
def signed(tmp_path):
    return signed_run(tmp_path)


def test_a_dotfile_in_a_run_is_unlisted(signed):
    run, _, public = signed
    (run.path / ".full-requests.jsonl").write_text('{"body": "secret"}\n')
    assert failed(verify_path(run.path, pubkey=public)) == [
        ("no unlisted files", "not in the manifest: .full-requests.jsonl")]
    (run.path / "logs" / ".x").write_text("hidden\n")
    assert ("no unlisted files", "not in the manifest: .full-requests.jsonl, logs/.x") in failed(
        verify_path(run.path, pubkey=public))


@pytest.mark.parametrize("kind", ["fifo", "symlinked-dir", "empty-dir", "symlink-to-file"])
def test_special_entries_fail_before_anything_is_read(signed, tmp_path, kind):
    run, _, public = signed
    target = run.path / "logs" / "extra"
    if kind == "fifo":
        os.mkfifo(target)
        want = "logs/extra is a FIFO"
    elif kind == "symlinked-dir":
        target.symlink_to(tmp_path)
        want = "logs/extra is a symlink"
    elif kind == "empty-dir":
        target.mkdir()
        want = "logs/extra/ is an empty directory"
    else:
        target.symlink_to(run.file("rows.jsonl"))
        want = "logs/extra is a symlink"
    checks = verify_path(run.path, pubkey=public)
    assert [c.name for c in checks] == ["run entries"] and checks[0].passed is False
    assert want in checks[0].detail


def _rewrite(bundle, out, extra: list[tuple[tarfile.TarInfo, bytes | None]]):
    with tarfile.open(bundle, "r:gz") as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member))
        for info, data in extra:
            dst.addfile(info, io.BytesIO(data) if data is not None else None)
    return out


def test_a_dotfile_in_a_bundle_is_unlisted(signed, tmp_path):
    run, private, public = signed
    bundle = publish(run.path, tmp_path / "b.tar.gz", aggregate_only=True, key_path=private)
    data = run.file("responses/hf.jsonl").read_bytes()
    info = tarfile.TarInfo(".hidden-bodies.jsonl")
    info.size = len(data)
    forged = _rewrite(bundle, tmp_path / "forged.tar.gz", [(info, data)])
    assert failed(verify_path(forged, pubkey=public)) == [
        ("no unlisted files", "not in the manifest: .hidden-bodies.jsonl")]


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo", "directory"])
def test_bundle_members_other_than_regular_files_are_refused(signed, tmp_path, kind):
    run, private, public = signed
    bundle = publish(run.path, tmp_path / "b.tar.gz", aggregate_only=True, key_path=private)
    info = tarfile.TarInfo("extra")
    info.type = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE,
                 "directory": tarfile.DIRTYPE}[kind]
    info.linkname = "summary.json" if kind in ("symlink", "hardlink") else ""
    forged = _rewrite(bundle, tmp_path / "forged.tar.gz", [(info, None)])
    checks = verify_path(forged, pubkey=public)
    assert [c.name for c in checks] == ["bundle"] and checks[0].passed is False
    assert "bundle member extra is a" in checks[0].detail and "only regular files" in checks[0].detail


def test_size_and_member_limits_are_checked_before_extraction(signed, tmp_path):
    run, private, _ = signed
    bundle = publish(run.path, tmp_path / "b.tar.gz", aggregate_only=True, key_path=private)
    with pytest.raises(EvidenceError, match="more than 3 members"):
        extract_bundle(bundle, tmp_path / "few", max_members=3)
    (tmp_path / "small").mkdir()
    with pytest.raises(EvidenceError, match="more than 1000 bytes once extracted"):
        extract_bundle(bundle, tmp_path / "small", max_bytes=1000)
    # A 2 MB-style bomb: a header declaring 2 GiB is refused from the header alone (nothing is written).
    info = tarfile.TarInfo("summary-huge.json")
    info.size = 2 << 30
    raw = io.BytesIO()
    raw.write(info.tobuf(format=tarfile.PAX_FORMAT))
    raw.write(b"\0" * 4096)  # the declared content is absent: the header alone must be refused
    import gzip

    bomb = tmp_path / "bomb.tar.gz"
    bomb.write_bytes(gzip.compress(raw.getvalue()))
    (tmp_path / "bomb").mkdir()
    with pytest.raises(EvidenceError, match="more than 1073741824 bytes once extracted"):
        extract_bundle(bomb, tmp_path / "bomb")
    assert list((tmp_path / "bomb").iterdir()) == []


def test_sign_refuses_a_run_holding_a_special_entry(tmp_path):
    from advkit import invoke, one_error_line
    from audit_kit import build_run

    run = build_run(tmp_path / "runs")
    (run.path / "logs" / "ext").symlink_to("/etc")
    line = one_error_line(invoke("sign", "--run", str(run.path)))
    assert line == (f"error: {run.path} holds entries that are not regular files: logs/ext is a symlink.")
    assert not (run.path / "manifest.dsse.json").exists()
