"""Triton's group files in their location-free forms (openjev_repro/kernel_cache_files.py): the same
cache in two folders has one digest; relocation points every child at the group's own folder; anything
that is not a group file is hashed and kept as it is."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from openjev_repro.hashing import tree_digest
from openjev_repro.kernel_cache_files import cache_digest, cache_file_sha256, is_group_file, relative_form, relocated


def _cache(root: Path) -> Path:
    """One Triton-shaped kernel entry with its group file, as Triton writes it under `root`."""
    entry = root / "ABC123"
    entry.mkdir(parents=True)
    for name in ("k.cubin", "k.json"):
        (entry / name).write_text(f"{name} bytes\n")
    children = {name: str(entry / name) for name in ("k.cubin", "k.json")}
    (entry / "__grp__k.json").write_text(json.dumps({"child_paths": children}))
    return root


def test_one_cache_in_two_folders_has_one_digest_where_plain_tree_digests_differ(tmp_path):
    a, b = _cache(tmp_path / "a"), _cache(tmp_path / "host-b" / "b")
    assert cache_digest(a)["sha256"] == cache_digest(b)["sha256"] and cache_digest(a)["files"] == 3
    assert tree_digest(a)["sha256"] != tree_digest(b)["sha256"]  # the absolute paths in the group file
    (b / "ABC123" / "k.cubin").write_text("another kernel\n")
    assert cache_digest(a)["sha256"] != cache_digest(b)["sha256"]  # a changed kernel still counts


def test_relocation_points_every_child_at_the_group_files_folder_and_round_trips(tmp_path):
    group = _cache(tmp_path / "a") / "ABC123" / "__grp__k.json"
    free = relative_form(group.read_bytes())
    assert json.loads(free) == {"child_paths": {"k.cubin": "k.cubin", "k.json": "k.json"}}
    there = relocated(free, tmp_path / "z" / "ABC123")
    assert json.loads(there)["child_paths"]["k.cubin"] == str(tmp_path / "z" / "ABC123" / "k.cubin")
    assert relative_form(there) == free and relocated(group.read_bytes(), group.parent) == group.read_bytes()


def test_files_that_are_not_group_files_are_left_as_they_are(tmp_path):
    odd = [b"not json", b'{"child_paths": "x"}', b'{"child_paths": {"a": 1}}', b'{"child_paths": {}, "more": 1}', b"[]"]
    for data in odd:
        assert relative_form(data) == data and relocated(data, tmp_path) == data
    assert not is_group_file("ABC/k.json") and not is_group_file("__grp__k.cubin") and is_group_file("A/__grp__k.json")
    plain = tmp_path / "k.autotune.json"
    plain.write_bytes(b'{"child_paths": {"k": "/x/k"}}')  # a group's shape under another name: as written
    assert cache_file_sha256(plain) == hashlib.sha256(plain.read_bytes()).hexdigest()


def test_an_oversized_group_file_is_left_as_written_by_every_form(tmp_path):
    """Packing and comparisons (relative_form) and digests (cache_file_sha256) agree on a group file too
    large to be Triton's: all take it as written."""
    from openjev_repro.kernel_cache_files import MAX_GROUP_BYTES

    data = json.dumps({"child_paths": {"k": "/x/" + "k" * MAX_GROUP_BYTES}}).encode()
    path = tmp_path / "__grp__k.json"
    path.write_bytes(data)
    assert relative_form(data) == data and relocated(data, tmp_path) == data
    assert cache_file_sha256(path) == hashlib.sha256(data).hexdigest()
