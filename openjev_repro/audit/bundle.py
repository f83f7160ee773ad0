"""Bundles: a run directory, or a `.tar.gz` of one written by `publish`.

`opened(path)` yields a directory for either. A tarball is read as a stream, member by
member, by the strict reader in `tarstream` (one shape only, so GNU tar cannot extract
other files than verify reads): each header is checked before its content is written (regular files only, a safe
relative name given once, no sparse members), the member count and the total size are
capped (`limits.MAX_BUNDLE_MEMBERS`, `limits.MAX_BUNDLE_BYTES`) before anything beyond them
is extracted, and each file is written with O_EXCL|O_NOFOLLOW into a fresh temporary
directory.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from ..errors import EvidenceError
from ..limits import MAX_BUNDLE_BYTES, MAX_BUNDLE_MEMBERS
from . import tarstream

__all__ = ["extract_bundle", "opened"]

_CHUNK = 1 << 20


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Path]:
    path = Path(path)
    if path.is_dir():
        yield path
        return
    if not path.is_file():
        raise EvidenceError(f"{path} is neither a run directory nor a bundle file.")
    with tempfile.TemporaryDirectory(prefix="openjev-bundle-") as tmp:
        try:
            extract_bundle(path, Path(tmp))
        except (OSError, EOFError) as exc:
            raise EvidenceError(f"{path} is not a readable bundle (.tar.gz): {exc}.") from exc
        yield Path(tmp)


def extract_bundle(path: Path, dest: Path, *, max_bytes: int = MAX_BUNDLE_BYTES,
                   max_members: int = MAX_BUNDLE_MEMBERS) -> None:
    """Stream-extract a publish bundle into the empty directory dest, checking every header first."""
    seen: set[str] = set()
    total = 0
    try:
        with gzip.open(path, "rb") as raw:
            for member, content in tarstream.members(raw, _CHUNK):
                total += _check_member(path, member, seen, total, max_members, max_bytes)
                target = dest / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as out:
                    for data in content:
                        out.write(data)
    except tarstream.TarFormatError as exc:
        raise EvidenceError(f"{path} is not a bundle as publish writes it: {exc}; "
                            "GNU tar could extract other files than verify reads, so it is refused.") from None
    if not seen:
        raise EvidenceError(f"{path} holds no files.")


def _check_member(path: Path, member: tarstream.Member, seen: set[str], total: int,
                  max_members: int, max_bytes: int) -> int:
    """The member's size, once its name, kind and the running limits are checked."""
    if member.kind is not None:
        raise EvidenceError(f"bundle member {member.name.rstrip('/')!s} is {member.kind}; "
                            "a bundle holds only regular files.")
    name = member.name
    if not name or PurePosixPath(name).is_absolute() or any(p in ("..", ".", "") for p in name.split("/")) or "\\" in name:
        raise EvidenceError(f"bundle member {name!r} is not a plain relative path.")
    if name in seen:
        raise EvidenceError(f"bundle member {name!r} appears twice.")
    seen.add(name)
    if len(seen) > max_members:
        raise EvidenceError(f"{path} has more than {max_members} members; a bundle holds at most that many.")
    if total + member.size > max_bytes:
        raise EvidenceError(f"{path} holds more than {max_bytes} bytes once extracted "
                            f"(member {name} declares {member.size}); refused before extracting it.")
    return member.size
