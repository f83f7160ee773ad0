"""`publish`: a bundle with hashes, rows and aggregates, no bodies (aggregate-only, the default).

JevBench's terms allow publishing aggregate results only, so the bundle omits every file
that holds or may echo a request or response body: `responses/` and `logs/`. Rows carry
only each body's sha256, so they stay and `verify` can still recompute every statistic.
The run's own envelope travels as `source.dsse.json`, so a reader can check that the
bundle's files are the ones the run signed. The bundle is a deterministic `.tar.gz`, signed when a key is given.

One verification, no copies: the bundle's statement is built from the digests the run's
own manifest signs (a signed run's signature verified first, with --pubkey or the public half
of --key), and the tar is streamed from the run's files straight into the
compressed output while the run is verified once (`verify_dir`, in the other thread; zlib
and hashlib release the GIL). Each file is hashed as it streams and must equal its signed
digest, so the bundle holds exactly the bytes that were signed and verified; if either
the verification or a digest fails, the partial bundle is removed and nothing is published.

`aggregate_only=False` (`invoke publish --include-bodies`) keeps `responses/` and `logs/`: a
private archive of the whole run, never for publication under the JevBench terms.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import IO, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..errors import EvidenceError, VerificationError
from ..evidence.rundir import ENVELOPE_NAME, RunDir, guard_output, scan_tree
from ..evidence.statement import Statement
from ..manifest.dsse import Envelope, envelope_bytes, make_envelope, verify_envelope
from ..manifest.keys import keyid, load_private_key, load_public_key
from ..manifest.run_manifest import build_statement, read_statement_record
from .verify import verify_dir

__all__ = ["BUNDLE_SUFFIX", "COMPRESS_LEVEL", "OMITTED_DIRS", "SOURCE_ENVELOPE", "publish"]

BUNDLE_SUFFIX = ".tar.gz"

OMITTED_DIRS = ("responses", "logs")
SOURCE_ENVELOPE = "source.dsse.json"
COMPRESS_LEVEL = 1  # rows.jsonl: ~15% more bytes than level 6 at a third of the time (docs/benchmarks.md)


def publish(run_dir: Path, out: Path, *, aggregate_only: bool, key_path: Path | None,
            pubkey: Path | None = None) -> Path:
    out = guard_output(Path(out))  # never over a file, never inside a run
    if not out.name.endswith(BUNDLE_SUFFIX) or out.name == BUNDLE_SUFFIX:
        raise EvidenceError(f"{out}: a bundle is a gzip tarball, so its name ends in {BUNDLE_SUFFIX} "
                            f"(e.g. {out.name.split('.')[0] or 'bundle'}{BUNDLE_SUFFIX}).")
    run = RunDir.open(run_dir)
    key = load_private_key(key_path) if key_path is not None else None
    trusted = [load_public_key(pubkey)] if pubkey is not None else []
    trusted += [key.public_key()] if key is not None else []
    try:
        members, extra_bytes = _prepare(run, key, aggregate_only, trusted)
    except Exception:
        _check_source(run)  # damaged or hostile evidence: the verification names what is wrong
        raise
    return _write_verified(run, members, extra_bytes, out)


def _write_verified(run: RunDir, members: dict[str, str], extra_bytes: dict[str, bytes], out: Path) -> Path:
    """The bundle written beside `out` while the run is verified, renamed to `out` only when both succeed."""
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="publish-tar") as pool:
            writing = pool.submit(_write_tar, run, members, extra_bytes, tmp)
            try:
                _check_source(run)
            finally:
                exc = writing.exception()  # waits for the tar; a verification failure is raised first
        if exc is not None:
            raise exc
        if os.path.lexists(out):  # appeared while the bundle was written
            raise EvidenceError(f"--out {out} already exists; outputs never overwrite a file. Choose another --out.")
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def _check_signature(run: RunDir, envelope: Envelope, trusted: list[Ed25519PublicKey]) -> None:
    """A signed run is published only when its signature verifies with a key the user gave (--pubkey, or
    the public half of --key): a corrupt or foreign signature is never carried into a bundle."""
    if not envelope.signatures:
        return  # an UNSIGNED run makes an UNSIGNED-source bundle; verify says so
    ids = {keyid(k): k for k in trusted}
    by = [k for k in envelope.keyids if k in ids]
    if not by:
        raise VerificationError(f"{run.path} is signed by key {envelope.keyids[0][:16]}…; pass --pubkey with "
                                "that public key so publish can check the signature (nothing was published).")
    try:
        verify_envelope(envelope, ids[by[0]])
    except VerificationError as exc:
        raise VerificationError(f"{run.path} does not verify (signature: {exc}); only verified runs are "
                                "published.") from None


def _prepare(run: RunDir, key: Any, aggregate_only: bool = True,
             trusted: list[Ed25519PublicKey] | None = None) -> tuple[dict[str, str], dict[str, bytes]]:
    """The bundle's members (name -> signed sha256) and its two generated files, from the run's manifest
    (whose signature must verify with a `trusted` key).

    Nothing is opened before the tree is walked (evidence.scan_tree): every member is a regular
    file the walk found, so the tar thread never follows a link or blocks on a FIFO."""
    present = _present_files(run)
    source_bytes = run.file(ENVELOPE_NAME).read_bytes()
    envelope, source = read_statement_record(run.file(ENVELOPE_NAME))
    _check_signature(run, envelope, trusted or [])
    signed = source.digests
    dropped = {n for n in signed if n.split("/", 1)[0] in OMITTED_DIRS} if aggregate_only else set()  # --include-bodies keeps them all
    omitted = [{"name": n, "sha256": signed[n]} for n in signed if n in dropped]
    members = {n: d for n, d in signed.items() if n not in dropped}
    _require_members(run, members, present)
    members[SOURCE_ENVELOPE] = hashlib.sha256(source_bytes).hexdigest()
    subjects = [{"name": n, "digest": {"sha256": members[n]}} for n in sorted(members, key=PurePosixPath)]
    extra = {"omitted": omitted, "source_envelope": SOURCE_ENVELOPE, **_created(source)}
    statement = build_statement(run, signed=key is not None, aggregate_only=aggregate_only, subjects=subjects,
                                extra=extra)
    return members, {SOURCE_ENVELOPE: source_bytes, ENVELOPE_NAME: envelope_bytes(make_envelope(statement.payload(), key))}


def _present_files(run: RunDir) -> set[str]:
    """The relative names of the run's files; VerificationError when it holds anything but regular files."""
    files, problems = scan_tree(run.path)
    if problems:
        raise VerificationError(f"{run.path} does not verify (run entries: {'; '.join(problems[:6])}); "
                                "only verified runs are published.")
    return {p.relative_to(run.path).as_posix() for p in files}


def _created(source: Statement) -> dict[str, Any]:
    """The run's own signed creation time, not the clock's: two publishes of one run are the same bytes."""
    return {"created_utc": source.predicate["created_utc"]} if "created_utc" in source.predicate else {}


def _require_members(run: RunDir, members: dict[str, str], present: set[str]) -> None:
    absent = sorted(str(n) for n in members if n not in present or n == ENVELOPE_NAME)
    if absent:
        raise VerificationError(f"{run.path} does not verify (subject digests: {', '.join(absent[:5])} "
                                "listed but absent); only verified runs are published.")


def _check_source(run: RunDir) -> None:
    """Publish only a run whose files, completeness and statistics verify (signature aside)."""
    checks = verify_dir(run.path, allow_unsigned=True)
    failed = [c for c in checks if c.passed is False and c.name != "signature"]
    if failed:
        raise VerificationError(
            f"{run.path} does not verify ({failed[0].name}: {failed[0].detail}); only verified runs are published."
        )


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


# Large copies: zlib and hashlib release the GIL per call, so few large calls let the tar thread
# run beside the verification instead of queueing for the GIL once per small block.
_COPY_BYTES = 4 << 20


def _member(name: str, size: int) -> tarfile.TarInfo:
    """Fixed owner, mode and time: the same bundle gives the same bytes."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_tar(run: RunDir, members: dict[str, str], extra: dict[str, bytes], tmp: Path) -> None:
    """Sorted members streamed into `tmp` (gzip, mtime 0); a member whose bytes differ from its digest fails."""
    with open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=COMPRESS_LEVEL) as gz, \
            tarfile.TarFile(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, copybufsize=_COPY_BYTES) as tar:
        for name in sorted({*members, *extra}, key=PurePosixPath):  # each member once
            if name in extra:
                tar.addfile(_member(name, len(extra[name])), io.BytesIO(extra[name]))
                continue
            # a regular file, never opened through a final link and never blocking on a FIFO
            fd = os.open(run.path / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise VerificationError(f"{run.path / name} is not a regular file; nothing was published.")
            with os.fdopen(fd, "rb") as fh:
                reader = _Hashing(fh)
                tar.addfile(_member(name, os.fstat(fh.fileno()).st_size), reader)
            if reader.digest.hexdigest() != members[name]:
                raise VerificationError(f"{run.path / name} differs from the file the run signed; nothing was published.")
