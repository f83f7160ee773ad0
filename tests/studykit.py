"""Builders for small real studies in a temporary directory (inputs, request files, recipes)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import yaml

SCRIPTED = Path(__file__).parent / "servers" / "scripted_backend.py"


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
