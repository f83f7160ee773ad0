"""`publish --aggregate-only`: a signed bundle with hashes, rows and aggregates, no bodies.

JevBench's terms allow publishing aggregate results only, so the bundle omits every file
that holds or may echo a request or response body: `responses/` and `logs/`. Rows carry
only each body's sha256, so they stay and `verify` can still recompute every statistic.
The run's own envelope travels as `source.dsse.json`, so a reader can check that the
bundle's files are the ones the run signed. The bundle is a deterministic `.tar.gz`.

One verification, no copies: the run is verified once (`verify_dir`), which leaves the
digest of every signed file; the bundle's statement is built from those digests, and the
tar is streamed from the run's files straight into the compressed output. Each file is
hashed again as it streams, so a file changed after the verification aborts the bundle
(and leaves nothing behind) instead of publishing bytes that were never verified.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

from ..errors import EvidenceError, VerificationError
from ..evidence import ENVELOPE_NAME, RunDir
from ..manifest.dsse import envelope_bytes, make_envelope
from ..manifest.keys import load_private_key
from ..manifest.statement import build_statement, read_statement
from .verify import Evidence, verify_dir

__all__ = ["OMITTED_DIRS", "SOURCE_ENVELOPE", "COMPRESS_LEVEL", "publish", "is_omitted"]

OMITTED_DIRS = ("responses", "logs")
SOURCE_ENVELOPE = "source.dsse.json"
COMPRESS_LEVEL = 6  # zlib's default: ~3x faster than gzip's 9 on rows.jsonl for a few % more bytes


def is_omitted(name: str) -> bool:
    return name.split("/", 1)[0] in OMITTED_DIRS


def publish(run_dir: Path, out: Path, *, aggregate_only: bool, key_path: Path | None) -> Path:
    if not aggregate_only:
        raise EvidenceError("Only aggregate-only bundles can be published (JevBench terms); pass --aggregate-only.")
    out = Path(out)
    if out.exists():
        raise EvidenceError(f"{out} already exists; choose another --out.")
    run = RunDir.open(run_dir)
    verified = _check_source(run)
    key = load_private_key(key_path) if key_path is not None else None
    source_bytes = run.file(ENVELOPE_NAME).read_bytes()
    _, source = read_statement(run.file(ENVELOPE_NAME))
    names = [s["name"] for s in source["subject"]]
    omitted = [{"name": n, "sha256": verified[n]} for n in names if is_omitted(n)]
    members: dict[str, str] = {n: verified[n] for n in names if not is_omitted(n)}
    members[SOURCE_ENVELOPE] = hashlib.sha256(source_bytes).hexdigest()
    subjects = [{"name": n, "digest": {"sha256": members[n]}} for n in sorted(members, key=PurePosixPath)]
    statement = build_statement(run, signed=key is not None, aggregate_only=True, subjects=subjects,
                                extra={"omitted": omitted, "source_envelope": SOURCE_ENVELOPE})
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    extra_bytes = {SOURCE_ENVELOPE: source_bytes, ENVELOPE_NAME: envelope_bytes(make_envelope(payload, key))}
    _write_tar(run, members, extra_bytes, out)
    return out


def _check_source(run: RunDir) -> dict[str, str]:
    """Publish only a run whose files, completeness and statistics verify (signature aside).

    Returns the verified sha256 of every file the run's manifest signs."""
    evidence = Evidence(run)
    checks = verify_dir(run.path, allow_unsigned=True, evidence=evidence)
    failed = [c for c in checks if c.passed is False and c.name != "signature"]
    if failed:
        raise VerificationError(
            f"{run.path} does not verify ({failed[0].name}: {failed[0].detail}); only verified runs are published."
        )
    return evidence.subjects


class _Hashing(io.RawIOBase):
    """A read-only file that hashes every byte read through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.digest = raw, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.digest.update(data)
        return data


def _member(name: str, size: int) -> tarfile.TarInfo:
    """Fixed owner, mode and time: the same bundle gives the same bytes."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_tar(run: RunDir, members: dict[str, str], extra: dict[str, bytes], out: Path) -> None:
    """Sorted members streamed into `.<out>.tmp` (gzip, mtime 0), renamed to `out` once complete."""
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with open(tmp, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=COMPRESS_LEVEL) as gz, \
                tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted([*members, *extra], key=PurePosixPath):
                if name in extra:
                    tar.addfile(_member(name, len(extra[name])), io.BytesIO(extra[name]))
                    continue
                with open(run.path / name, "rb") as fh:
                    reader = _Hashing(fh)
                    tar.addfile(_member(name, os.fstat(fh.fileno()).st_size), reader)
                if reader.digest.hexdigest() != members[name]:
                    raise VerificationError(f"{run.path / name} changed after it was verified; nothing was published.")
        if out.exists():
            raise EvidenceError(f"{out} already exists; choose another --out.")
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


