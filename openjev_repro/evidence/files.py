"""The one way files of ours are written and read back: atomic writes, JSON and JSONL readers, format check.

    write_bytes_atomic, write_json_atomic   temp file in the same directory, fsync, rename; no temp survives
    atomic_directory                        a directory that appears whole (fsynced) or not at all
    read_json                               a JSON file, every failure one EvidenceError naming the file
    read_jsonl                              (line number, value) of each non-blank line, errors name path:line
    check_format, read_versioned            refuse a format_version this tool does not read (UnsupportedFormat)

Every writer of a file that must never be seen half-written (run files, locks, records, results)
goes through these; every reader of a file we wrote checks its version with `check_format`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import EvidenceError, ReproError, UnsupportedFormat

__all__ = [
    "atomic_directory",
    "check_format",
    "fsync_directory",
    "json_text",
    "read_json",
    "read_jsonl",
    "read_versioned",
    "write_bytes_atomic",
    "write_json_atomic",
]


def fsync_directory(path: Path) -> None:
    """fsync a directory, so the names created or renamed in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, rename over `path`; no temp file survives."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def json_text(data: Any, *, indent: int = 2, sort_keys: bool = True) -> str:
    """The JSON text we write: indented, newline-terminated, NaN and infinities refused (ValueError)."""
    return json.dumps(data, indent=indent, sort_keys=sort_keys, allow_nan=False) + "\n"


def write_json_atomic(path: Path, data: Any, *, indent: int = 2, sort_keys: bool = True) -> None:
    """Write JSON to a temporary file in the same directory, fsync, then rename over `path`."""
    write_bytes_atomic(path, json_text(data, indent=indent, sort_keys=sort_keys).encode("utf-8"))


@contextmanager
def atomic_directory(out: Path) -> Iterator[Path]:
    """A temporary directory next to `out`, renamed to `out` when the block ends without an exception.

    Every file in it is fsynced before the rename; `out` must not exist (EvidenceError when it
    appeared meanwhile). On any failure the temporary directory is removed: nothing half-written
    stays behind.
    """
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.mkdir()
    try:
        yield tmp
        for directory, _, names in os.walk(tmp):
            for name in names:
                fd = os.open(Path(directory) / name, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            fsync_directory(Path(directory))
        if os.path.lexists(out):
            raise EvidenceError(f"{out} appeared while it was being written; nothing was written there.")
        os.rename(tmp, out)
        fsync_directory(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_json(path: Path) -> Any:
    from ..limits import loads_bounded

    try:
        return loads_bounded(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise EvidenceError(f"Missing evidence file {path}.") from exc
    except ValueError as exc:  # syntax, depth, huge integers, bad UTF-8
        raise EvidenceError(f"{path} is not valid JSON ({exc}).") from exc


def read_jsonl(path: Path, what: str, *, error: type[ReproError] = EvidenceError, data: bytes | None = None,
               ) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each non-blank line of a JSONL file, numbered from 1.

    A line that is not JSON (syntax, bad UTF-8, nesting too deep, huge integers) raises `error`
    "PATH:N: not WHAT (reason)."; a missing file raises it too. `data` is the file's bytes when
    the caller has them already (then `path` only names it).
    """
    if data is None:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError as exc:
            raise error(f"{path}: no such file; expected {what} per line.") from exc
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # syntax, bad UTF-8, depth, huge integers
            raise error(f"{path}:{number}: not {what} ({exc}).") from exc
        yield number, value


def check_format(data: Any, supported: Collection[int], where: str, *, key: str = "format_version",
                 absent: int | None = None) -> Any:
    """`data` unchanged when its `key` is one of `supported`; else UnsupportedFormat naming `where`.

    Every reader of a file we write calls this before it trusts a field. `absent` is the version
    a record without `key` has (formats that gained the key later); None: the key is required.
    """
    version = data.get(key, absent) if isinstance(data, dict) else None
    if isinstance(version, bool) or version not in supported:
        reads = " or ".join(str(v) for v in sorted(supported))
        if isinstance(data, dict) and key in data:
            raise UnsupportedFormat(f"{where}: {key} {version!r} is not a format this tool reads ({key} {reads}); "
                                    "a newer openjev-repro wrote it, or it is not our file.")
        raise UnsupportedFormat(f"{where}: has no {key}, so it is not a file this tool reads ({key} {reads}); "
                                "every file openjev-repro writes carries one.")
    return data


def read_versioned(path: Path, supported: Collection[int], *, absent: int | None = None) -> Any:
    """A JSON file we wrote, refused (UnsupportedFormat) unless its format_version is one of `supported`."""
    return check_format(read_json(path), supported, str(path), absent=absent)
