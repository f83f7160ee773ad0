"""`publish --aggregate-only`: a signed bundle with hashes, rows and aggregates, no bodies.

JevBench's terms allow publishing aggregate results only, so the bundle omits every file
that holds or may echo a request or response body: `responses/` and `logs/`. Rows carry
only each body's sha256, so they stay and `verify` can still recompute every statistic.
The run's own envelope travels as `source.dsse.json`, so a reader can check that the
bundle's files are the ones the run signed. The bundle is a deterministic `.tar.gz`.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

from ..errors import EvidenceError, VerificationError
from ..evidence import ENVELOPE_NAME, RunDir, guard_output
from ..manifest.dsse import envelope_bytes, make_envelope
from ..manifest.keys import load_private_key
from ..manifest.statement import build_statement, read_statement
from .verify import verify_dir

__all__ = ["OMITTED_DIRS", "SOURCE_ENVELOPE", "publish", "is_omitted"]

OMITTED_DIRS = ("responses", "logs")
SOURCE_ENVELOPE = "source.dsse.json"


def is_omitted(name: str) -> bool:
    return name.split("/", 1)[0] in OMITTED_DIRS


def publish(run_dir: Path, out: Path, *, aggregate_only: bool, key_path: Path | None) -> Path:
    if not aggregate_only:
        raise EvidenceError("Only aggregate-only bundles can be published (JevBench terms); pass --aggregate-only.")
    out = guard_output(Path(out))  # never over a file, never inside a run
    run = RunDir.open(run_dir)
    _check_source(run)
    key = load_private_key(key_path) if key_path is not None else None
    with tempfile.TemporaryDirectory(prefix="openjev-publish-") as tmp:
        stage = Path(tmp) / "bundle"
        omitted = _stage(run, stage)
        statement = build_statement(RunDir(stage), signed=key is not None, aggregate_only=True,
                                    extra={"omitted": omitted, "source_envelope": SOURCE_ENVELOPE})
        payload = json.dumps(statement, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
        (stage / ENVELOPE_NAME).write_bytes(envelope_bytes(make_envelope(payload, key)))
        _write_tar(stage, out)
    return out


def _check_source(run: RunDir) -> None:
    """Publish only a run whose files, completeness and statistics verify (signature aside)."""
    checks = verify_dir(run.path, allow_unsigned=True)
    failed = [c for c in checks if c.passed is False and c.name != "signature"]
    if failed:
        raise VerificationError(
            f"{run.path} does not verify ({failed[0].name}: {failed[0].detail}); only verified runs are published."
        )


def _stage(run: RunDir, stage: Path) -> list[dict]:
    """Copy the publishable files; return the omitted ones with their signed sha256."""
    _, source = read_statement(run.file(ENVELOPE_NAME))
    omitted = []
    for subject in source["subject"]:
        name = subject["name"]
        if is_omitted(name):
            omitted.append({"name": name, "sha256": subject["digest"]["sha256"]})
            continue
        target = stage / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run.path / name, target)
    shutil.copyfile(run.file(ENVELOPE_NAME), stage / SOURCE_ENVELOPE)
    return omitted


def _write_tar(stage: Path, out: Path) -> None:
    """Sorted members, fixed owner and times: the same bundle gives the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in stage.rglob("*") if p.is_file()):
            info = tar.gettarinfo(path, arcname=path.relative_to(stage).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o644
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(buffer.getvalue())
        tmp.replace(out)
    except BaseException:  # a full disk or Ctrl-C leaves no partial bundle behind
        tmp.unlink(missing_ok=True)
        raise
