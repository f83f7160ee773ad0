"""Deterministic root-filesystem tarballs and their member manifests.

Docker records a layer by the sha256 of its uncompressed tar (the diff ID). A tar written here
has members sorted by name, mtimes clamped to SOURCE_DATE_EPOCH, numeric owners only, no pax
extras, hard links turned into copies, and the files that hold build-time state (logs, caches,
machine id, the resolver files docker adds) emptied or dropped. Two builds of the same inputs
therefore give byte-identical tars, hence identical diff IDs; where they do not, the member
manifests name the differing files.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MemberDiff", "diff_members", "normalize_tar", "read_members"]

# Dropped entirely (their content depends on when or where the build ran).
_DROP = [
    r"^\.dockerenv$",
    r"^(dev|proc|sys|run|tmp)/.+",
    r"^var/log/.+",
    r"^var/cache/apt/.+",
    r"^var/lib/apt/lists/.+",
    r"^var/cache/ldconfig/aux-cache$",
    r"^var/cache/debconf/.+-old$",
    r"^var/lib/dpkg/.+-old$",
    r"^root/\.cache(/.*)?$",
    r"^debootstrap(/.*)?$",
]
# Kept as empty files (docker bind-mounts them at run time; the image must only have the path).
_EMPTY = {"etc/hostname", "etc/hosts", "etc/resolv.conf", "etc/machine-id"}
_SHADOW = {"etc/shadow", "etc/shadow-"}
_DROP_RE = re.compile("|".join(_DROP))


class _HashingWriter(io.RawIOBase):
    def __init__(self, fh):
        self.fh, self.digest = fh, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.digest.update(data)
        return self.fh.write(data)


def _clean_name(name: str) -> str:
    name = name.lstrip("/")
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/") if name not in ("", ".") else ""


def _shadow(data: bytes, epoch: int) -> bytes:
    # Field 3 is "days since 1970 of the last password change": the build date unless fixed.
    day = str(epoch // 86400)
    lines = []
    for line in data.decode().splitlines():
        fields = line.split(":")
        if len(fields) > 2 and fields[2]:
            fields[2] = day
        lines.append(":".join(fields))
    return ("\n".join(lines) + "\n").encode()


def _member_bytes(tin: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """The bytes of a regular file or a hard link to one (tarfile gives None for anything else)."""
    fh = tin.extractfile(member)
    if fh is None:
        raise ValueError(f"{member.name}: not a regular file in the tar")
    with fh:
        return fh.read()


def _entries(src: tarfile.TarFile) -> Iterator[tuple[str, tarfile.TarInfo]]:
    seen: dict[str, tarfile.TarInfo] = {}
    for member in src.getmembers():
        name = _clean_name(member.name)
        if name and not _DROP_RE.match(name):
            seen[name] = member  # a later entry of the same name wins, as when extracting
    for name in sorted(seen):
        yield name, seen[name]


def _normalized(tin: tarfile.TarFile, name: str, member: tarfile.TarInfo,
                epoch: int) -> tuple[tarfile.TarInfo, bytes | None] | None:
    """The deterministic header (and bytes, for a file) of one member; None for a member we drop.

    A file's bytes are emptied, or shadow's dates clamped, where they vary from build to build; another
    member keeps its type (and link or device numbers)."""
    info = tarfile.TarInfo(name)
    info.mode, info.uid, info.gid = member.mode, member.uid, member.gid
    info.uname = info.gname = ""
    info.mtime = min(int(member.mtime), epoch)
    if member.isfile() or member.islnk():
        data = _member_bytes(tin, member)
        data = b"" if name in _EMPTY else _shadow(data, epoch) if name in _SHADOW else data
        info.type, info.size = tarfile.REGTYPE, len(data)
        return info, data
    if member.issym():
        info.type, info.linkname = tarfile.SYMTYPE, member.linkname
    elif member.isdir():
        info.type = tarfile.DIRTYPE
    elif member.ischr() or member.isblk() or member.isfifo():
        info.type, info.devmajor, info.devminor = member.type, member.devmajor, member.devminor
    else:
        return None
    return info, None


def normalize_tar(src: Path, dest: Path, epoch: int, members_out: Path | None = None) -> str:
    """Write the deterministic form of tar `src` to `dest`; returns its sha256 (= docker diff ID)."""
    manifest: dict[str, dict] = {}
    with tarfile.open(src, "r:") as tin, open(dest, "wb") as raw:
        writer = _HashingWriter(raw)
        with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tout:
            for name, member in _entries(tin):
                entry = _normalized(tin, name, member, epoch)
                if entry is None:
                    continue
                info, data = entry
                tout.addfile(info, io.BytesIO(data) if data is not None else None)
                manifest[name] = _describe(info, data)
    if members_out is not None:
        members_out.write_text(json.dumps(manifest, sort_keys=True, indent=0))
    return writer.digest.hexdigest()


def _describe(info: tarfile.TarInfo, data: bytes | None) -> dict:
    return {"type": info.type.decode(), "mode": oct(info.mode), "uid": info.uid, "gid": info.gid, "mtime": info.mtime,
            **({"sha256": hashlib.sha256(data).hexdigest()} if data is not None else {}),
            **({"link": info.linkname} if info.linkname else {})}


def read_members(path: Path) -> dict[str, dict]:
    """Member manifest written by normalize_tar, or computed from any tar (e.g. a `docker export`)."""
    path = Path(path)
    if path.suffix == ".json":
        return json.loads(path.read_text())
    out = {}
    with tarfile.open(path, "r:") as tin:
        for name, member in _entries(tin):
            data = _member_bytes(tin, member) if (member.isfile() or member.islnk()) else None
            info = tarfile.TarInfo(name)
            info.type = tarfile.REGTYPE if data is not None else member.type
            info.mode, info.uid, info.gid, info.mtime, info.linkname = member.mode, member.uid, member.gid, int(member.mtime), member.linkname
            out[name] = _describe(info, data)
    return out


@dataclass(frozen=True)
class MemberDiff:
    path: str
    what: str  # "only in first", "only in second", or the differing fields

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


def diff_members(a: dict[str, dict], b: dict[str, dict]) -> list[MemberDiff]:
    """Files that differ between two member manifests, sorted by path."""
    out = []
    for path in sorted(set(a) | set(b)):
        if path not in b:
            out.append(MemberDiff(path, "only in first"))
        elif path not in a:
            out.append(MemberDiff(path, "only in second"))
        elif a[path] != b[path]:
            fields = sorted(k for k in set(a[path]) | set(b[path]) if a[path].get(k) != b[path].get(k))
            out.append(MemberDiff(path, "differs in " + ", ".join(fields)))
    return out
