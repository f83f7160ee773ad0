"""scripts/published-copies.sh: local copies of the public evidence folders from a real git mirror.

The mirror here is a real git repository holding the SYNTHETIC layouts at the paths the
public ones have; the copies must be byte-identical to what was committed and import with
--format auto. A copy already present is kept, never overwritten.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import published_layouts as layouts

from openjev_repro.audit.importer import detect_format

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "published-copies.sh"
PATHS = {"gdn-20261003": "benchmarks/gdn/artifacts/20261003",
         "prefill_batching-20261006": "benchmarks/prefill_batching/artifacts/20261006",
         "jev_vl-review-20261006": "recipe/jev_vl/evidence/review-20261006"}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                   check=True, capture_output=True, timeout=60)


def _mirror(tmp: Path, names: tuple[str, ...] = tuple(PATHS)) -> Path:
    repo = tmp / "mirror"
    makers = {"gdn-20261003": lambda d: shutil.copytree(ROOT / "tests" / "fixtures" / "system1" / "artifacts", d),
              "prefill_batching-20261006": layouts.timings_csv, "jev_vl-review-20261006": layouts.provenance_json}
    for name in names:
        makers[name](repo / PATHS[name])
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "synthetic layouts")
    return repo / ".git"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_copies_are_the_committed_bytes_and_import_with_auto(tmp_path):
    mirror = _mirror(tmp_path)
    proc = _run(str(mirror), str(tmp_path / "copies"))
    assert proc.returncode == 0, proc.stderr
    expected = {"gdn-20261003": "system1-omni", "prefill_batching-20261006": "timings-csv",
                "jev_vl-review-20261006": "provenance-json"}
    for name, fmt in expected.items():
        assert _tree(tmp_path / "copies" / name) == _tree(mirror.parent / PATHS[name])
        assert detect_format(tmp_path / "copies" / name) == fmt
        assert f"copied: {PATHS[name]}@" in proc.stdout
    imported = subprocess.run([sys.executable, "-m", "invoke", "import-evidence", "--format", "auto", "--src",
                               str(tmp_path / "copies" / "prefill_batching-20261006"), "--out", str(tmp_path / "run")],
                              cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert imported.returncode == 0 and "0 mismatch" in imported.stdout, imported.stderr


def test_an_existing_copy_is_kept_and_a_missing_folder_fails(tmp_path):
    mirror = _mirror(tmp_path, ("gdn-20261003",))
    (tmp_path / "copies" / "gdn-20261003").mkdir(parents=True)
    (tmp_path / "copies" / "gdn-20261003" / "mine.txt").write_text("kept")
    proc = _run(str(mirror), str(tmp_path / "copies"))
    assert proc.returncode == 1
    assert "kept: " in proc.stdout and (tmp_path / "copies" / "gdn-20261003" / "mine.txt").read_text() == "kept"
    assert "missing: benchmarks/prefill_batching/artifacts/20261006" in proc.stderr
    assert not (tmp_path / "copies" / "prefill_batching-20261006").exists()


def test_not_a_git_directory_is_one_error_line(tmp_path):
    proc = _run(str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"error: {tmp_path} is not a git directory with a HEAD commit"]
