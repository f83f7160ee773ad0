"""Run directories: one per study, never overwritten, with an atomically replaced state file.

Layout of a run directory (every file except the envelope is a manifest subject):

    recipe.yaml            the recipe exactly as given (bytes)
    plan.json              the resolved plan: backends, commands, passes, pins
    inputs.json            every declared input with its verified sha256
    state.json             status running|complete|incomplete, steps attempted and finished
    rows.jsonl             one Row per request (openjev_repro.rows), flushed after each
    responses/<backend>.jsonl  response bodies: {"backend","workload","phase","pass_index","seq","id","body"}
    logs/<backend>.log     the backend's stdout and stderr
    processes.json         exit record of every process or container we started
    calibration.json       client overhead against our own no-op endpoint (p50/p99)
    environment.json       host, GPUs, packages, git commit (openjev_repro.manifest.environment)
    memory.jsonl           device memory samples, when a GPU is controlled
    host.json              reservation, device checks, bindings (openjev_repro.host)
    summary.json           statistics and gate outcomes, pure function of rows.jsonl + recipe
    report.md, latency_vs_tokens.png, latency_cdf.png
    manifest.dsse.json     the signed in-toto statement (written last; not its own subject)

Format history of state.json:
    1  (2026-11) first version.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import EvidenceError

__all__ = ["RunDir", "STATE_FORMAT_VERSION", "write_json_atomic", "read_json", "ENVELOPE_NAME"]

STATE_FORMAT_VERSION = 1
ENVELOPE_NAME = "manifest.dsse.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temporary file in the same directory, fsync, then rename over `path`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, allow_nan=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise EvidenceError(f"Missing evidence file {path}.") from exc
    except json.JSONDecodeError as exc:
        raise EvidenceError(f"{path} is not valid JSON ({exc}).") from exc


class RunDir:
    """A study's run directory and its state file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, parent: Path, study_id: str) -> "RunDir":
        """A new directory `<study_id>-<UTC time>-<random>` under parent; never reuses one."""
        now = datetime.now(timezone.utc)
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        path = Path(parent) / f"{study_id}-{stamp}-{secrets.token_hex(3)}"
        path.mkdir(parents=True, exist_ok=False)
        (path / "logs").mkdir()
        (path / "responses").mkdir()
        run = cls(path)
        run.write_state({"status": "running", "attempted": [], "finished": [], "error": None,
                         "started_utc": now.isoformat(timespec="seconds")})
        return run

    @classmethod
    def open(cls, path: Path) -> "RunDir":
        run = cls(Path(path))
        if not (run.path / "state.json").is_file():
            raise EvidenceError(f"{path} is not a run directory (no state.json).")
        return run

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def rows_path(self) -> Path:
        return self.path / "rows.jsonl"

    def log_path(self, backend: str) -> Path:
        return self.path / "logs" / f"{backend}.log"

    def responses_path(self, backend: str) -> Path:
        return self.path / "responses" / f"{backend}.jsonl"

    # --- state -------------------------------------------------------------------
    def state(self) -> dict:
        return read_json(self.path / "state.json")

    def write_state(self, state: dict) -> None:
        state = dict(state, format_version=STATE_FORMAT_VERSION, updated_unix=round(time.time(), 3))
        write_json_atomic(self.path / "state.json", state)

    def update_state(self, **changes: Any) -> dict:
        state = self.state()
        state.update(changes)
        self.write_state(state)
        return state

    def attempt(self, step: str) -> None:
        state = self.state()
        state["attempted"].append(step)
        self.write_state(state)

    def finish(self, step: str) -> None:
        state = self.state()
        state["finished"].append(step)
        self.write_state(state)

    @property
    def complete(self) -> bool:
        return self.state().get("status") == "complete"

    def evidence_files(self) -> list[Path]:
        """Every file of the run except the envelope, sorted by relative path."""
        return sorted(
            p for p in self.path.rglob("*")
            if p.is_file() and p.name != ENVELOPE_NAME and not p.name.startswith(".")
        )
