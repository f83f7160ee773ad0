"""The kernel cache files whose bytes say where the cache lay: Triton's group files.

Triton lists each compiled kernel's files in a group file beside them, `__grp__<kernel>.json` =
`{"child_paths": {name: absolute path}}`, and counts a kernel as cached only when every one of those
paths exists. A cache unpacked anywhere but where it was made (another run's folder, another host)
therefore misses every kernel: Triton compiles them all again and rewrites the group files with its
own paths. Found on 2026-12-05 from the archives themselves: the pinned fast-eager cache's 226 group
files named the folder of the run that produced it (on host A that folder still existed, so host A's
study hit it; host B's rerun "changed" the pinned cache while its answers and autotune choices stayed).

So the project treats a group file in one location-free form:
- `relative_form` names each child by its file name alone: what `invoke kernel-cache` packs and what
  every kernel cache digest hashes, so the same cache has the same archive and digest in any folder;
- `relocated` points each child at the folder the group file lies in: what unpacking a pinned archive
  writes, so the backend's Triton finds every kernel where the study put it.
A file that is not a group file, or a group file that does not parse as one, is left as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import msgspec

from .hashing import hash_file, tree_digest

__all__ = ["MAX_GROUP_BYTES", "cache_digest", "cache_file_sha256", "is_group_file", "relative_form", "relocated"]

GROUP_PREFIX = "__grp__"
MAX_GROUP_BYTES = 1 << 20  # Triton's are ~2 KB; a larger "group file" is hashed as it is


def is_group_file(name: str) -> bool:
    base = PurePosixPath(name).name
    return base.startswith(GROUP_PREFIX) and base.endswith(".json")


class _Group(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A Triton group file: each child file's name -> its path."""

    child_paths: dict[str, str]


def _with_children(data: bytes, place: Callable[[str], str]) -> bytes:
    """The group file with each child path replaced by `place(its file name)`; `data` when not a group
    (larger than MAX_GROUP_BYTES included, so packing, digests and comparisons treat such a file alike)."""
    if len(data) > MAX_GROUP_BYTES:
        return data
    try:
        group = msgspec.json.decode(data, type=_Group)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return data
    moved = {name: place(PurePosixPath(path).name) for name, path in group.child_paths.items()}
    return json.dumps({"child_paths": moved}).encode()  # Triton's own layout (json.dumps defaults)


def relative_form(data: bytes) -> bytes:
    return _with_children(data, lambda name: name)


def relocated(data: bytes, folder: Path) -> bytes:
    return _with_children(data, lambda name: os.path.join(folder, name))


def cache_file_sha256(path: Path) -> str:
    """sha256 of a cache file as the digests count it: a group file in its relative form."""
    if not is_group_file(path.name) or path.stat().st_size > MAX_GROUP_BYTES:
        return hash_file(path)
    return hashlib.sha256(relative_form(path.read_bytes())).hexdigest()


def cache_digest(folder: Path) -> dict:
    """hashing.tree_digest of a kernel cache folder, its group files counted in their relative form."""
    found = tree_digest(folder, file_sha256=cache_file_sha256)
    return {**found, "method": found["method"] + "; Triton group files with their child paths relative"}
