"""Builders for small real studies in a temporary directory (inputs, request files, recipes)."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import yaml

SCRIPTED = Path(__file__).parent / "servers" / "scripted_backend.py"
SLOW_STARTED = "scripted backend: slow answer started"  # servers/scripted_backend.py prints it


def wait_for_line(root: Path, pattern: str, text: str, timeout_s: float = 60) -> Path:
    """The first file under `root` matching `pattern` that holds a line containing `text`, once it does.

    Polls (the event is a line another process writes); fails the test after `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in sorted(Path(root).glob(pattern)):
            if text in path.read_text(errors="replace"):
                return path
        time.sleep(0.05)
    raise AssertionError(f"no {pattern} under {root} said {text!r} within {timeout_s:.0f} s")


def write_requests(path: Path, n: int = 6) -> Path:
    """n JevBench-format noul tasks with growing states, labels alternating."""
    lines = []
    for i in range(n):
        task = {"id": f"case-{i:02d}", "family": "synthetic", "question": {"type": "noul", "instructions": f"Is item {i} valid?"},
                "state": {"item": i, "text": "word " * (5 + 20 * i)}, "labels": ["no", "yes"],
                "expected": "yes" if i % 2 else "no", "split": "test", "group": "g", "provenance": "test", "topic": "t"}
        lines.append(json.dumps(task, sort_keys=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def scripted_backend(name: str, fault: str = "none", after: int = 0) -> dict:
    return {"name": name, "command": ["{python}", str(SCRIPTED), "--port", "{port}"],
            "env": {"SCRIPTED_FAULT": fault, "SCRIPTED_AFTER": str(after)}}


def write_study(tmp: Path, backends: list[dict], *, n: int = 6, protocol: dict | None = None,
                gates: list | None = None, extra: dict | None = None) -> Path:
    """A recipe with one workload over n requests; returns the recipe path."""
    inputs = tmp / "inputs"
    req = write_requests(inputs / "requests" / "cases.jsonl", n)
    recipe = {
        "format_version": 1,
        "study": {"id": "test-study", "date": "2026-11-29", "purpose": "test"},
        "inputs": {"root": "inputs", "scan": ["requests"],
                   "files": [{"path": "requests/cases.jsonl", "sha256": sha256(req), "role": "requests"}]},
        "workloads": [{"name": "mixed", "requests": "requests/cases.jsonl"}],
        "backends": backends,
        "protocol": {"feasibility_passes": 1, "measured_passes": 2, "request_timeout_s": 2.0,
                     "ready_timeout_s": 15.0, "stop_grace_s": 2.0, "warmup": {"requests": 1}, **(protocol or {})},
        "gates": gates or [],
        **(extra or {}),
    }
    path = tmp / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


PYTHON = sys.executable
