"""verify and report never crash on a one-file edit of a run's evidence (issue 40 item 2).

Each reader bounds numbers and types before any arithmetic: a gpu.jsonl event without `t_ns` or
`label`, a load row whose `scheduled_ns` or `connection` is at least 2**63, a `server_queue_ms` of
1e308. The edited run fails verify (exit 1, a FAIL line naming the file and line) and `report` gives
one `error:` line: never exit 70 and a traceback. The runs are real: a committed H200 run with
gpu.jsonl, and a load run signed with a real key (tests/test_load_verify.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from advkit import REPO, invoke, one_error_line
from test_load_verify import signed_load_run

COMMITTED = REPO / "results" / "h200-fast-27b-shape" / "run-2026-12-02"
COMMITTED_KEY = REPO / "results" / "h200-fast-27b-shape" / "signing-key-2026-12-02.pub"


def _edit_gpu(run: Path, kind: str, key: str) -> int:
    """Drop `key` from the first `kind` event of gpu.jsonl; returns its line number."""
    lines = (run / "gpu.jsonl").read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        event = json.loads(line)
        if event["kind"] == kind:
            del event[key]
            lines[number - 1] = json.dumps(event, sort_keys=True)
            (run / "gpu.jsonl").write_text("\n".join(lines) + "\n")
            return number
    raise AssertionError(f"no {kind} event")


@pytest.mark.parametrize(("kind", "key", "problem"), [
    ("sample", "t_ns", "a sample event without t_ns"),
    ("begin", "label", "a begin event without a label"),
    ("idle_end", "label", "a idle_end event without a label"),
])
def test_a_gpu_event_without_its_clock_or_label_is_a_failed_check(tmp_path, kind, key, problem):
    run = Path(shutil.copytree(COMMITTED, tmp_path / "run"))
    number = _edit_gpu(run, kind, key)
    proc = invoke("verify", "--run", str(run), "--pubkey", str(COMMITTED_KEY))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"FAIL  recomputed         EvidenceError: gpu.jsonl line {number}: {problem}" in proc.stdout, proc.stdout
    line = one_error_line(invoke("report", "--run", str(run), "--out", str(tmp_path / "report.md")))
    assert line == f"error: gpu.jsonl line {number}: {problem}"


@pytest.mark.parametrize(("field", "value"), [
    ("scheduled_ns", 2**63), ("connection", 2**63), ("scheduled_ns", 10**30), ("server_queue_ms", 1e308),
])
def test_a_load_row_number_out_of_range_is_a_failed_check(tmp_path, field, value):
    run, _, public = signed_load_run(tmp_path)
    lines = run.rows_path.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, start=1) if json.loads(line).get("level"))
    row = json.loads(lines[number - 1])
    row[field] = value
    lines[number - 1] = json.dumps(row, sort_keys=True)
    run.rows_path.write_text("\n".join(lines) + "\n")
    proc = invoke("verify", "--run", str(run.path), "--pubkey", str(public))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL  recomputed")]
    assert failed and f"rows.jsonl:{number}: not a valid row" in failed[0] and f"$.{field}" in failed[0], proc.stdout
    line = one_error_line(invoke("report", "--run", str(run.path), "--out", str(tmp_path / "report.md")))
    assert f"rows.jsonl:{number}: not a valid row" in line and f"$.{field}" in line
