"""evidence/files.py: the one atomic writer, the JSON/JSONL readers and the format check."""

from __future__ import annotations

import json
import os

import pytest

from openjev_repro.errors import EvidenceError, RecipeError, UnsupportedFormat
from openjev_repro.evidence.files import (
    atomic_directory,
    check_format,
    read_jsonl,
    read_versioned,
    write_bytes_atomic,
    write_json_atomic,
)


def test_atomic_file_write_replaces_whole_and_leaves_no_temp(tmp_path):
    path = tmp_path / "a.json"
    write_json_atomic(path, {"b": 1, "a": [1, 2]})
    assert path.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    write_json_atomic(path, {"b": 1, "a": 2}, indent=1, sort_keys=False)
    assert path.read_text() == '{\n "b": 1,\n "a": 2\n}\n'
    with pytest.raises(ValueError):
        write_json_atomic(path, {"x": float("nan")})  # refused before anything is written
    assert json.loads(path.read_text()) == {"b": 1, "a": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_a_failed_file_write_removes_its_temp(tmp_path, monkeypatch):
    path = tmp_path / "a.bin"
    path.write_bytes(b"old")

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError):
        write_bytes_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_atomic_directory_appears_whole(tmp_path):
    out = tmp_path / "collect"
    with atomic_directory(out) as tmp:
        (tmp / "x").write_text("1")
        assert not out.exists()
    assert (out / "x").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["collect"]


def test_atomic_directory_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "collect"
    with pytest.raises(RuntimeError), atomic_directory(out) as tmp:
        (tmp / "x").write_text("1")
        raise RuntimeError("plot failed")
    assert list(tmp_path.iterdir()) == []


def test_atomic_directory_never_replaces_what_appeared(tmp_path):
    out = tmp_path / "collect"
    with pytest.raises(EvidenceError, match="appeared while it was being written"), atomic_directory(out) as tmp:
        (tmp / "x").write_text("1")
        out.mkdir()
        (out / "theirs").write_text("keep")
    assert [p.name for p in out.iterdir()] == ["theirs"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["collect"]


@pytest.mark.parametrize("line, reason", [
    (b'{"a": ', "Expecting value"),
    (b'{"a": "\xff"}', "utf-8"),
    (b"[" * 100_000 + b"]" * 100_000, "recursion"),
])
def test_read_jsonl_names_the_line(tmp_path, line, reason):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\n' + line + b"\n")
    with pytest.raises(RecipeError, match=rf"x.jsonl:3: not a task \(.*{reason}"):
        list(read_jsonl(path, "a task", error=RecipeError))


def test_read_jsonl_numbers_from_one_and_skips_blank_lines(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n  \n[2]\r\n3')
    assert list(read_jsonl(path, "a value")) == [(1, {"a": 1}), (3, [2]), (4, 3)]
    with pytest.raises(EvidenceError, match="no such file"):
        list(read_jsonl(tmp_path / "missing.jsonl", "a value"))


@pytest.mark.parametrize("data, message", [
    ({"format_version": 2}, "format_version 2 is not a format this tool reads"),
    ({"format_version": True}, "format_version True is not a format"),
    ({}, "has no format_version"),
    ([1], "has no format_version"),
    ("text", "has no format_version"),
])
def test_check_format_refuses_other_versions(data, message):
    with pytest.raises(UnsupportedFormat, match=message):
        check_format(data, (1,), "thing.json")
    assert check_format({"format_version": 1}, (1,), "thing.json") == {"format_version": 1}


def test_read_versioned(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"format_version": 3}')
    with pytest.raises(UnsupportedFormat, match=r"r.json: format_version 3"):
        read_versioned(path, (1, 2))
    path.write_text("{")
    with pytest.raises(EvidenceError, match="is not valid JSON"):
        read_versioned(path, (1,))
