"""`import-evidence --format system1-omni` on synthetic evidence in the native project's format."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_repro.audit.importer import import_system1
from openjev_repro.errors import EvidenceError, InputMismatch, RunIncomplete
from openjev_repro.evidence import RunDir
from openjev_repro.manifest import write_manifest
from openjev_repro.rows import read_rows

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "system1" / "evidence"


def copy_fixture(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "src"))


def relist(src: Path) -> None:
    """Rewrite their manifest.json after a deliberate edit, as a consistent (but bad) source would be."""
    files = sorted(p for p in src.iterdir() if p.name != "manifest.json")
    (src / "manifest.json").write_text(json.dumps(
        {"files": [{"path": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in files]}))


def test_import_writes_our_layout_and_reports_each_published_figure(tmp_path):
    report = import_system1(FIXTURE, tmp_path / "run")
    run = RunDir.open(tmp_path / "run")
    assert run.state()["status"] == "imported" and report["signed"] is False and report["files_verified"] == 5
    rows = read_rows(run.rows_path)
    assert len(rows) == 20 and {r.backend for r in rows} == {"native", "fast"}
    first = next(r for r in rows if r.backend == "native" and r.pass_index == 1 and r.seq == 0)
    assert first.id == "syn-a-01" and first.latency_ms == 20.125 and first.input_tokens == 80 and first.label == "yes"
    body = next(json.loads(line) for line in run.responses_path("native").read_text().splitlines())["body"]
    assert hashlib.sha256(body.encode()).hexdigest() == first.body_sha256
    figures = {(f["arm"], f["pass"], f["figure"]): f for f in report["figures"]}
    assert [k for k, f in figures.items() if not f["matches"]] == [("fast", 2, "mean_ms")]
    assert figures[("native", 1, "p95_ms")]["rule"] == "jevbench"
    assert figures[("fast", 1, "p95_ms")]["rule"] == "nearest_rank"
    summary = json.loads(run.file("summary.json").read_text())["workloads"]["mixed"]["backends"]
    assert (summary["native"]["correct"], summary["fast"]["correct"]) == (5, 4)
    assert json.loads(run.file("import.json").read_text())["cleanup"]["native"]["exit_code"] == 0


def test_imported_run_is_never_signed(tmp_path):
    import_system1(FIXTURE, tmp_path / "run")
    with pytest.raises(RunIncomplete, match="'imported'"):
        write_manifest(tmp_path / "run", key_path=None)


def test_file_whose_sha256_differs_from_their_manifest_is_refused(tmp_path):
    src = copy_fixture(tmp_path)
    path = src / "native-measured-2.jsonl"
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(InputMismatch, match="native-measured-2.jsonl: sha256 .* differs from the manifest"):
        import_system1(src, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_unlisted_or_absent_files_are_refused(tmp_path):
    src = copy_fixture(tmp_path)
    (src / "extra-measured-1.jsonl").write_text("{}\n")
    with pytest.raises(InputMismatch, match="extra-measured-1.jsonl: present but not in manifest.json"):
        import_system1(src, tmp_path / "run")
    (src / "extra-measured-1.jsonl").unlink()
    (src / "fast-measured-2.jsonl").unlink()
    with pytest.raises(InputMismatch, match="fast-measured-2.jsonl: listed but absent"):
        import_system1(src, tmp_path / "run")


@pytest.mark.parametrize("edit, message", [
    (lambda lines: lines[:2] + [lines[1]] + lines[3:], "duplicate case ids syn-a-02"),
    (lambda lines: lines[:4], "missing syn-c-01"),
])
def test_duplicate_or_missing_case_ids_are_refused(tmp_path, edit, message):
    src = copy_fixture(tmp_path)
    path = src / "native-measured-2.jsonl"
    path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")
    relist(src)
    with pytest.raises(EvidenceError, match=message):
        import_system1(src, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_cli_import_refuses_existing_out(tmp_path):
    (tmp_path / "run").mkdir()
    proc = subprocess.run([sys.executable, "-m", "invoke", "import-evidence", "--src", str(FIXTURE),
                           "--out", str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "already exists" in proc.stderr
    ok = subprocess.run([sys.executable, "-m", "invoke", "import-evidence", "--src", str(FIXTURE),
                         "--out", str(tmp_path / "new")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "17 of 18 published figures reproduce." in ok.stdout
    assert "DIFF   fast pass 2    mean_ms" in ok.stdout
