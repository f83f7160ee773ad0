"""Cause 1 of issue 25: verify and GNU tar must never disagree on what a bundle holds.

Each forged bundle below is extracted by the real GNU tar (`tar -xzf`) and verified; either
verify refuses it at the `bundle` check, or GNU tar's tree is byte for byte the tree verify read.
"""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from audit_kit import signed_run

from openjev_repro.audit.bundle import extract_bundle
from openjev_repro.audit.publish import publish
from openjev_repro.audit.verify import verify_path

pytestmark = pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar is not installed")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tar")
    run, private, public = signed_run(tmp)
    return publish(run.path, tmp / "b.tar.gz", aggregate_only=True, key_path=private), public


def _tar_body(path: Path) -> bytes:
    """The members of a bundle's tar stream without its end-of-archive marker."""
    raw = gzip.decompress(path.read_bytes())
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        tar.getmembers()
        end = tar.offset  # first byte after the last member
    return raw[:end]


def _member(name: str, data: bytes, fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info.tobuf(format=fmt) + data + b"\0" * (-len(data) % 512)


def _bad_checksum_block() -> bytes:
    block = bytearray(_member("junk", b"")[:512])
    block[148:156] = b"0000000\0"
    return bytes(block)


def _attacker_members() -> bytes:
    return (_member("rows.jsonl", b'{"forged": true}\n') + _member("summary.json", b"{}\n")
            + _member(".hidden", b"attacker\n"))


END = b"\0" * 1024


def _gnu_tar_tree(path: Path, dest: Path) -> dict[str, bytes]:
    dest.mkdir()
    subprocess.run(["tar", "-xzf", str(path), "-C", str(dest)], capture_output=True, check=False, timeout=60)
    return {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}


def _forged(kind: str, body: bytes) -> bytes:
    if kind == "bad-checksum-header-then-members":
        return body + _bad_checksum_block() + _attacker_members() + END
    if kind == "trailing-garbage":
        return body + END + b"garbage after the end" + b"\0" * 512
    if kind == "member-after-end-marker":
        return body + END + _attacker_members() + END
    if kind == "lone-zero-block-then-member":
        return body + b"\0" * 512 + _attacker_members() + END
    if kind == "gnu-longname":
        return body + _member("x" * 120, b"attacker\n", tarfile.GNU_FORMAT) + END
    if kind == "pax-linkpath":
        info = tarfile.TarInfo("extra")
        info.pax_headers = {"GNU.sparse.name": "rows.jsonl"}
        return body + info.tobuf(format=tarfile.PAX_FORMAT) + END
    if kind == "base256-size":
        block = bytearray(_member("extra", b"")[:512])
        block[124:136] = b"\x80" + b"\0" * 10 + b"\x09"
        block[148:156] = b" " * 8
        block[148:155] = f"{sum(block):06o}\0".encode()
        return body + bytes(block) + b"attacker\0" + b"\0" * 503 + END
    raise AssertionError(kind)


KINDS = ["bad-checksum-header-then-members", "trailing-garbage", "member-after-end-marker",
         "lone-zero-block-then-member", "gnu-longname", "pax-linkpath", "base256-size"]


def test_the_published_bundle_extracts_identically_with_gnu_tar(bundle, tmp_path):
    path, public = bundle
    ours = tmp_path / "ours"
    ours.mkdir()
    extract_bundle(path, ours)
    tree = {p.relative_to(ours).as_posix(): p.read_bytes() for p in ours.rglob("*") if p.is_file()}
    assert _gnu_tar_tree(path, tmp_path / "gnu") == tree
    assert all(c.passed is not False for c in verify_path(path, pubkey=public))


@pytest.mark.parametrize("kind", KINDS)
def test_a_bundle_gnu_tar_reads_differently_is_refused(bundle, tmp_path, kind):
    path, public = bundle
    forged = tmp_path / "forged.tar.gz"
    forged.write_bytes(gzip.compress(_forged(kind, _tar_body(path))))
    checks = verify_path(forged, pubkey=public)
    assert [c.name for c in checks] == ["bundle"] and checks[0].passed is False, checks
    assert "GNU tar could extract other files than verify reads" in checks[0].detail
    if kind == "bad-checksum-header-then-members":  # the differential is real: GNU tar writes the attacker's files
        gnu = _gnu_tar_tree(forged, tmp_path / "gnu")
        assert gnu["rows.jsonl"] == b'{"forged": true}\n' and ".hidden" in gnu
