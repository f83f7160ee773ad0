"""A strict reader of the tar streams `publish` writes: POSIX ustar headers, pax `x` records.

Python's `tarfile` and GNU tar disagree on damaged archives (tarfile stops at a header
with a bad checksum, GNU tar skips it and extracts what follows), so verify does not use
tarfile to read bundles. This reader accepts one narrow shape and refuses everything else:

- every header block is POSIX ustar (`ustar\\0` `00`) with a correct unsigned checksum and
  numeric fields that are plain octal (no base-256, no garbage after the terminator);
- a member is a regular file (`0`) with exactly the mode (0644), owner (0:0, no user or
  group name) and time (0) that `publish` writes, optionally preceded by one pax `x` header
  (mode 0) whose records are well formed, only `path` or `size`, without control characters;
- content is followed by zero padding to the 512-byte block;
- the archive ends with two zero blocks, and everything after them is zero bytes.

A bad header, a lone zero block followed by data, anything after the end marker or a
truncated member is a `TarFormatError`, so nothing GNU tar would extract differently is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

__all__ = ["BLOCK", "Member", "TarFormatError", "members"]

BLOCK = 512
_PAX_KEYS = {"path", "size"}
PUBLISHED_MODE = 0o644  # every member as publish writes it: mode 0644, owner 0:0 with no names, mtime 0
_MAX_PAX_BYTES = 64 << 10
_KINDS = {b"1": "a hard link", b"2": "a link", b"3": "a special file", b"4": "a special file",
          b"5": "a directory", b"6": "a special file", b"7": "a special file", b"S": "a sparse file"}


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class TarFormatError(ValueError):
    """The stream is not a tar archive in the one shape a bundle may have."""


@dataclass(frozen=True)
class Member:
    """A header as read: its name, its content size and its kind (None for a regular file)."""

    name: str
    size: int
    kind: str | None
    offset: int  # the header's byte offset, for messages


def _octal(field: bytes, what: str, offset: int) -> int:
    digits = field.rstrip(b"\0 ").lstrip(b" ")  # POSIX: octal digits, padded with spaces or NULs
    if not digits or any(c not in b"01234567" for c in digits):
        raise TarFormatError(f"header at byte {offset}: the {what} field is not a plain octal number")
    return int(digits, 8)


def _text(field: bytes, what: str, offset: int) -> str:
    head, _, tail = field.partition(b"\0")
    if tail.strip(b"\0"):
        raise TarFormatError(f"header at byte {offset}: the {what} field holds bytes after its terminator")
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError:
        raise TarFormatError(f"header at byte {offset}: the {what} field is not UTF-8") from None


def _pax_record(rest: bytes, offset: int) -> tuple[str, bytes, bytes]:
    """One `LEN key=value\n` record: its key, value, and the bytes after it."""
    length_text, space, _ = rest.partition(b" ")
    length = int(length_text) if space and length_text.isdigit() and len(length_text) <= 6 else 0
    record = rest[:length]
    if length <= len(length_text) + 1 or len(record) != length or not record.endswith(b"\n"):
        raise TarFormatError(f"pax header at byte {offset} has a malformed record")
    key, equals, value = record[len(length_text) + 1: -1].partition(b"=")
    name = key.decode("ascii", "replace")
    if not equals or name not in _PAX_KEYS:
        raise TarFormatError(f"pax header at byte {offset}: keyword {name!r} is not accepted in a bundle")
    return name, value, rest[length:]


def _pax_records(data: bytes, offset: int) -> dict[str, str]:
    records: dict[str, str] = {}
    rest = data
    while rest:
        name, value, rest = _pax_record(rest, offset)
        if name in records:
            raise TarFormatError(f"pax header at byte {offset}: keyword {name!r} is given twice")
        try:
            records[name] = value.decode("utf-8")
        except UnicodeDecodeError:
            raise TarFormatError(f"pax header at byte {offset}: {name} is not UTF-8") from None
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in records[name]):  # a NUL ends the name GNU tar extracts
            raise TarFormatError(f"pax header at byte {offset}: {name} holds a NUL or another control character")
    if not records:
        raise TarFormatError(f"pax header at byte {offset} is empty")
    return records


class _Blocks:
    """The stream in 512-byte blocks, counting bytes read."""

    def __init__(self, raw: Readable) -> None:
        self.raw, self.offset = raw, 0

    def read(self, size: int) -> bytes:
        data = self.raw.read(size)
        self.offset += len(data)
        return data

    def block(self) -> bytes | None:
        data = self.read(BLOCK)
        if not data:
            return None
        if len(data) != BLOCK:
            raise TarFormatError(f"the archive ends inside a block at byte {self.offset}")
        return data

    def content(self, size: int, chunk: int) -> Iterator[bytes]:
        left = size
        while left:
            data = self.read(min(left, chunk))
            if not data:
                raise TarFormatError(f"the archive ends inside a member at byte {self.offset}")
            left -= len(data)
            yield data
        pad = -size % BLOCK
        if pad and self.read(pad) != b"\0" * pad:
            raise TarFormatError(f"the padding before byte {self.offset} is not zero bytes")


def _check_published_fields(block: bytes, offset: int, mode: int) -> None:
    """Mode, owner and time exactly as publish writes them: GNU tar, run as root, restores a set-uid
    bit, an owner or a time, so a bundle that carries any other is not one publish wrote."""
    for field, what, want in ((block[100:108], "mode", mode), (block[108:116], "uid", 0), (block[116:124], "gid", 0),
                              (block[136:148], "mtime", 0)):
        value = _octal(field, what, offset)
        if value != want:
            shown = (f"{value:04o}", f"{want:04o}") if what == "mode" else (str(value), str(want))
            raise TarFormatError(f"header at byte {offset}: {what} {shown[0]} is not the {shown[1]} publish writes")
    _text(block[157:257], "linkname", offset)  # a link member is refused by its kind, with its own message
    for field, what in ((block[265:297], "uname"), (block[297:329], "gname")):
        if _text(field, what, offset):
            raise TarFormatError(f"header at byte {offset}: the {what} field is not empty, as publish writes it")


def _header_member(block: bytes, offset: int, pax: dict[str, str], mode: int = PUBLISHED_MODE) -> Member:
    if block[257:265] != b"ustar\x0000":
        raise TarFormatError(f"header at byte {offset} is not a POSIX ustar header")
    if _octal(block[148:156], "checksum", offset) != sum(block[:148]) + 8 * 32 + sum(block[156:]):
        raise TarFormatError(f"header at byte {offset} has a bad checksum")
    _check_published_fields(block, offset, mode)
    size = _octal(block[124:136], "size", offset)
    name, prefix = _text(block[0:100], "name", offset), _text(block[345:500], "prefix", offset)
    if block[500:].strip(b"\0"):
        raise TarFormatError(f"header at byte {offset} holds bytes past its prefix field")
    name = f"{prefix}/{name}" if prefix else name
    if "path" in pax:
        name = pax["path"]
    if "size" in pax:
        if not pax["size"].isdigit() or len(pax["size"]) > 18:
            raise TarFormatError(f"pax header before byte {offset}: size is not a plain number")
        size = int(pax["size"])
    flag = block[156:157]
    kind = None if flag in (b"0", b"\0") else _KINDS.get(flag, f"of unknown type {flag!r}")
    return Member(name, size, kind, offset)


def _end(blocks: _Blocks, pax: dict[str, str], offset: int) -> None:
    """A zero block: the end marker only if a second follows, no pax header is pending, and zeros follow."""
    if pax or blocks.block() != b"\0" * BLOCK:
        raise TarFormatError(f"a lone zero block at byte {offset} is not an end-of-archive marker")
    while data := blocks.read(1 << 20):
        if data.strip(b"\0"):
            raise TarFormatError("data follows the end-of-archive marker")


def members(raw: Readable, chunk: int = 1 << 20) -> Iterator[tuple[Member, Iterator[bytes]]]:
    """Each member with an iterator over its content (consume it before the next member)."""
    blocks = _Blocks(raw)
    pax: dict[str, str] = {}
    while True:
        offset = blocks.offset
        block = blocks.block()
        if block is None:
            raise TarFormatError("the archive has no end-of-archive marker")
        if block == b"\0" * BLOCK:
            return _end(blocks, pax, offset)
        if block[156:157] == b"x":
            if pax:
                raise TarFormatError(f"header at byte {offset}: two pax headers in a row")
            size = _header_member(block, offset, {}, mode=0).size
            if size > _MAX_PAX_BYTES:
                raise TarFormatError(f"pax header at byte {offset} declares {size} bytes")
            pax = _pax_records(b"".join(blocks.content(size, chunk)), offset)
            continue
        member = _header_member(block, offset, pax)
        if member.kind is not None and member.size:
            raise TarFormatError(f"header at byte {offset}: a non-regular member declares content")
        pax = {}
        yield member, blocks.content(member.size, chunk)
