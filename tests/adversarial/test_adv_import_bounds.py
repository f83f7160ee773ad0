"""Cause 7 (issue 25): import-evidence bounds every integer, refuses ids that are not Unicode scalar
strings, and never writes --out inside a run (signed or not). Each is one `error:` line, nothing written."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from advkit import REPO, invoke, one_error_line

ARTIFACTS = REPO / "tests" / "fixtures" / "system1" / "artifacts"
ROW = "e2e/baseline-measured-1.jsonl"


def source_with_first_row(tmp_path: Path, change) -> Path:
    src = Path(shutil.copytree(ARTIFACTS, tmp_path / "src"))
    path = src / ROW
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[0] = change(lines[0])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    manifest = json.loads((src / "manifest.json").read_text())
    data = path.read_bytes()
    manifest["files"][ROW].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (src / "manifest.json").write_text(json.dumps(manifest))
    return src


def set_field(line: str, path: list[str], value_json: str) -> str:
    row = json.loads(line)
    target = row
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = "@@V@@"
    return json.dumps(row).replace('"@@V@@"', value_json)


@pytest.mark.parametrize("path, value, message", [
    (["raw", "usage", "input_tokens"], str(2**70),
     f"raw.usage.input_tokens {2**70} is not an integer in [0, 2147483647]."),
    (["client_end_monotonic_ns"], str(2**64), "are not integers in [0, 2**63)."),
    (["id"], '"case-\\ud800"', "(a lone surrogate or a newline)."),
    (["id"], '"case-\\nsecond-line"', "(a lone surrogate or a newline)."),
])
def test_bounded_integers_and_scalar_ids(tmp_path, path, value, message):
    src = source_with_first_row(tmp_path, lambda line: set_field(line, path, value))
    line = one_error_line(invoke("import-evidence", "--src", str(src), "--out", str(tmp_path / "run")))
    assert line.startswith(f"error: {ROW}:1: ") and line.endswith(message), line
    assert not (tmp_path / "run").exists() and [p.name for p in tmp_path.iterdir()] == ["src"]


def test_out_inside_a_run_is_refused(tmp_path):
    first = invoke("import-evidence", "--src", str(ARTIFACTS), "--out", str(tmp_path / "run"))
    assert first.returncode == 0, first.stderr
    before = sorted(p.name for p in (tmp_path / "run").iterdir())
    line = one_error_line(invoke("import-evidence", "--src", str(ARTIFACTS), "--out", str(tmp_path / "run" / "nested")))
    assert line == (f"error: --out {tmp_path / 'run' / 'nested'} is inside the run directory {tmp_path / 'run'}; "
                    "outputs never go into a run (its files are evidence). Choose a path outside every run.")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == before


def test_out_inside_a_signed_run_is_refused(tmp_path):
    signed = Path(shutil.copytree(REPO / "results" / "h200-reference-27b-shape" / "run", tmp_path / "signed"))
    before = {p.name: p.read_bytes() for p in signed.iterdir() if p.is_file()}
    line = one_error_line(invoke("import-evidence", "--src", str(ARTIFACTS), "--out", str(signed / "imported")))
    assert line.startswith(f"error: --out {signed / 'imported'} is inside the run directory {signed}; ")
    assert {p.name: p.read_bytes() for p in signed.iterdir() if p.is_file()} == before
    assert not (signed / "imported").exists()
