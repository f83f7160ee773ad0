"""Cause 11 (issue 25): a forged import.json never makes verify read a file outside the run.

An imported run is unsigned, so the `source` path in its import.json is the run's word: verify
re-hashes published files only in a folder the user names with --source."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from advkit import REPO, invoke

ARTIFACTS = REPO / "tests" / "fixtures" / "system1" / "artifacts"


def test_a_forged_import_source_is_never_read(tmp_path: Path):
    run = tmp_path / "run"
    assert invoke("import-evidence", "--src", str(ARTIFACTS), "--out", str(run)).returncode == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the run's\n")
    record = json.loads((run / "import.json").read_text())
    record["source"] = str(outside)
    record["verified"] = ["secret.txt"]
    record["source_manifest"] = {"secret.txt": {"sha256": "0" * 64}}
    (run / "import.json").write_text(json.dumps(record))
    proc = invoke("verify", "--run", str(run))
    assert "secret.txt" not in proc.stdout, proc.stdout
    assert "N/A   source files" in proc.stdout and "not re-hashed" in proc.stdout
    # the user's own --source is followed, and a mismatch there is named
    copy = Path(shutil.copytree(ARTIFACTS, tmp_path / "mine"))
    checked = invoke("verify", "--run", str(run), "--source", str(copy))
    assert "FAIL  source files" in checked.stdout and "import.json" in checked.stdout  # edited after import
