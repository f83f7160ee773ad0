"""scripts/serving-stages.py: the served path timed stage by stage in an instrumented copy, end to end on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "serving-stages.py"


def test_stages_add_up_to_the_latency_and_the_checkout_is_not_touched(fixture_root: Path, tmp_path: Path) -> None:
    requests = tmp_path / "five.jsonl"
    requests.write_text("".join((fixture_root / "requests" / "demo-noul-upstream.jsonl").read_text().splitlines(True)[:5]))
    server = REPO / "openjev_repro" / "backend" / "server.py"
    before = server.read_bytes()
    out = tmp_path / "stages.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--requests", str(requests), "--passes", "1", "--out", str(out),
                           "--", "--checkpoint", str(fixture_root / "checkpoint"), "--mode", "fast", "--threads", "1",
                           "--prompt-ids", "cached"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert server.read_bytes() == before
    result = json.loads(out.read_text())
    assert result["requests"] == 5
    stages = result["stages"]
    parts = ("head+body", "parse_body", "parse_request", "candidates", "turn", "inference", "metadata", "rest")
    assert abs(sum(stages[p]["mean_ms"] for p in parts) - stages["latency"]["mean_ms"]) < 0.01   # rest is the remainder
    assert all(stages[p]["median_ms"] >= 0 for p in parts if p != "rest")
    assert stages["candidates"]["mean_ms"] > 0 and stages["inference"]["mean_ms"] > stages["turn"]["mean_ms"]
    served = stages["served overhead"]["mean_ms"]
    assert abs(served - (stages["latency"]["mean_ms"] - stages["inference"]["mean_ms"])) < 0.01
    assert "| candidates |" in done.stdout


def test_a_server_that_no_longer_matches_the_edits_is_one_error_line(tmp_path: Path) -> None:
    code = (f"import importlib.util, pathlib, sys\n"
            f"spec = importlib.util.spec_from_file_location('stages', {str(SCRIPT)!r})\n"
            f"m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            f"m.EDITS = (('this line is not in server.py', ''),)\n"
            f"m.instrumented_copy(pathlib.Path({str(tmp_path)!r}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: server.py changed") and "Traceback" not in done.stderr
