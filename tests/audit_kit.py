"""Builders of small, real run directories for the manifest and audit tests (no tests here).

A run is written the way the runner writes one: rows through RowWriter, response bodies
beside them, state through RunDir, summary.json through results.statistics.summarize.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import yaml

from openjev_repro.evidence.files import write_json_atomic
from openjev_repro.evidence.recipe import parse_recipe
from openjev_repro.evidence.rows import Row, RowWriter, read_rows
from openjev_repro.evidence.rundir import RunDir
from openjev_repro.manifest import generate_keypair, write_manifest
from openjev_repro.results.statistics import summarize
from openjev_repro.study.planner import resolve_plan
from openjev_repro.study.resolved import resolve_recipe

IDS = [f"case-{i:02d}" for i in range(6)]
LABELS = ["no", "yes", "no", "yes", "yes", "no"]
TOKENS = [80, 400, 900, 1500, 2500, 3399]


def recipe_dict(backends=("hf", "native"), gates: list | None = None) -> dict:
    return {
        "format_version": 1,
        "study": {"id": "audit-test", "date": "2026-11-29", "purpose": "audit tests"},
        "inputs": {"root": "inputs", "files": [{"path": "requests.jsonl", "sha256": "0" * 64, "role": "requests"}]},
        "workloads": [{"name": "mixed", "requests": "requests.jsonl"}],
        "backends": [{"name": b, "command": ["serve", b]} for b in backends],
        "protocol": {"feasibility_passes": 1, "measured_passes": 2},
        "gates": gates if gates is not None else [
            {"name": "faster", "kind": "mean_reduction", "workload": "mixed", "baseline": backends[0],
             "candidate": backends[1], "min_percent": 50.0, "disjoint_ranges": True},
            {"name": "same-decisions", "kind": "decisions_unchanged", "workload": "mixed", "a": backends[0], "b": backends[1]},
            {"name": "close", "kind": "max_probability_delta", "workload": "mixed", "a": backends[0], "b": backends[1], "max": 0.05},
        ],
    }


def _body(case_id: str, p: float, tokens: int) -> bytes:
    return json.dumps({"model": "open-jev", "answers": {"q": {"type": "noul", "noul": p}},
                       "usage": {"input_tokens": tokens, "output_tokens": 0}, "case": case_id}).encode()


def write_rows(run: RunDir, backends: dict[str, float], seed: int = 3, ids=IDS) -> None:
    """Timed passes per backend: base latency (ms) per backend, jittered by a seeded RNG."""
    rng = random.Random(seed)
    clock = 1_000_000_000
    with RowWriter(run.rows_path) as rows:
        for backend, base_ms in backends.items():
            probs = [round(0.2 + 0.12 * i + (0.01 if backend != "hf" else 0.0), 6) for i in range(len(ids))]
            with open(run.responses_path(backend), "a", encoding="utf-8") as bodies:
                for phase, index in (("feasibility", 1), ("measured", 1), ("measured", 2)):
                    for seq, case_id in enumerate(ids):
                        p, tokens = probs[seq], TOKENS[seq % len(TOKENS)]
                        body = _body(case_id, p, tokens)
                        latency_ns = int((base_ms + tokens / 100 + rng.random()) * 1e6)
                        row = Row(id=case_id, backend=backend, workload="mixed", phase=phase, pass_index=index,
                                  seq=seq, start_ns=clock, end_ns=clock + latency_ns, status=200,
                                  body_sha256=hashlib.sha256(body).hexdigest(), probability=p,
                                  decision="yes" if p >= 0.5 else "no", label=LABELS[seq % len(LABELS)],
                                  input_tokens=tokens, error=None)
                        clock += latency_ns + 1000
                        rows.write(row)
                        bodies.write(json.dumps({"backend": backend, "workload": "mixed", "phase": phase,
                                                 "pass_index": index, "seq": seq, "id": case_id,
                                                 "body": body.decode()}, sort_keys=True) + "\n")


def build_run(parent: Path, *, backends: dict[str, float] | None = None, status: str = "complete",
              seed: int = 3, recipe: dict | None = None) -> RunDir:
    """A finished run directory with every file the runner writes (summary from the real rows)."""
    backends = backends or {"hf": 300.0, "native": 40.0}
    run = RunDir.create(parent, "audit-test")
    recipe = recipe or recipe_dict(tuple(backends))
    run.file("recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    write_json_atomic(run.file("inputs.json"), {"format_version": 1, "files": [{"path": "requests.jsonl", "sha256": "0" * 64}]})
    write_plan(run)
    write_json_atomic(run.file("environment.json"), {"format_version": 1, "gpus": {"available": False, "reason": "test"}})
    write_json_atomic(run.file("calibration.json"), {"format_version": 1, "p50_us": 40.0, "p99_us": 90.0})
    write_json_atomic(run.file("processes.json"), {"format_version": 1, "processes": []})
    for b in backends:
        run.log_path(b).write_text(f"{b} started\n{b} stopped\n")
    write_rows(run, backends, seed=seed)
    summary = summarize(read_rows(run.rows_path), parse_recipe(run.file("recipe.yaml").read_text())).to_json()
    write_json_atomic(run.file("summary.json"), summary)
    run.update_state(status=status, attempted=["study"], finished=["study"] if status == "complete" else [])
    return run


def write_plan(run: RunDir) -> None:
    """plan.json as the runner writes it: the plan of the run's recipe.yaml (verify reads its pass schedule)."""
    write_json_atomic(run.file("plan.json"), resolve_plan(resolve_recipe(run.file("recipe.yaml"), apply_lock=False)).to_json())


def keypair(tmp: Path) -> tuple[Path, Path]:
    private, public, _ = generate_keypair(tmp / "keys")
    return private, public


def signed_run(tmp: Path, **kwargs) -> tuple[RunDir, Path, Path]:
    private, public = keypair(tmp)
    run = build_run(tmp / "runs", **kwargs)
    write_manifest(run.path, key_path=private)
    return run, private, public
