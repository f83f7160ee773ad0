"""verify of a load run: the declared levels and their passes, and every per-level figure recomputed.

The run directory is real (rows through RowWriter, summary through summarize, signed with a real
key); tampering is done the way a key holder could: change the rows, recompute the summary, re-sign.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import yaml
from audit_kit import keypair
from test_load_statistics import RECIPE, run_rows

from openjev_repro.audit.verify import verify_dir
from openjev_repro.evidence.files import write_json_atomic
from openjev_repro.evidence.recipe import parse_recipe
from openjev_repro.evidence.rows import Row, RowWriter
from openjev_repro.evidence.rundir import RunDir
from openjev_repro.manifest import write_manifest
from openjev_repro.results.load_protocol import level_problems
from openjev_repro.results.row_table import RowTable
from openjev_repro.results.statistics import summarize


def _write(run: RunDir, rows: list[Row]) -> None:
    """rows.jsonl, each backend's response bodies and log, and summary.json, as the runner writes them."""
    bodies = {r: json.dumps({"case": r.id, "pass": r.pass_index, "seq": r.seq}).encode() for r in rows}
    rows = [dataclasses.replace(r, body_sha256=hashlib.sha256(bodies[r]).hexdigest()) for r in rows]
    with RowWriter(run.rows_path) as writer:
        for row in rows:
            writer.write(row)
    for backend in sorted({r.backend for r in rows}):
        run.log_path(backend).write_text(f"{backend} started\n")
        with open(run.responses_path(backend), "w", encoding="utf-8") as out:
            for r, body in zip(rows, bodies.values(), strict=True):
                if r.backend == backend:
                    out.write(json.dumps({"backend": r.backend, "workload": r.workload, "phase": r.phase,
                                          "pass_index": r.pass_index, "seq": r.seq, "id": r.id,
                                          "body": body.decode()}, sort_keys=True) + "\n")
    write_json_atomic(run.file("summary.json"), summarize(rows, parse_recipe(RECIPE)).to_json())


def signed_load_run(tmp, rows: list[Row] | None = None):
    private, public = keypair(tmp)
    run = RunDir.create(tmp / "runs", "load-synthetic")
    run.file("recipe.yaml").write_text(yaml.safe_dump(yaml.safe_load(RECIPE), sort_keys=False))
    write_json_atomic(run.file("inputs.json"), {"format_version": 1, "files": [{"path": "requests.jsonl", "sha256": "0" * 64}]})
    write_json_atomic(run.file("plan.json"), {"format_version": 1, "backends": ["a", "b"]})
    _write(run, rows if rows is not None else run_rows("a") + run_rows("b", t0=10**12))
    run.update_state(status="complete", attempted=["study"], finished=["study"])
    write_manifest(run.path, key_path=private)
    return run, private, public


def _checks(run, public) -> dict[str, tuple[bool | None, str]]:
    return {c.name: (c.passed, c.detail) for c in verify_dir(run.path, pubkey=public)}


def test_a_load_run_verifies_level_by_level(tmp_path):
    run, _, public = signed_load_run(tmp_path)
    checks = _checks(run, public)
    assert all(passed is not False for passed, _ in checks.values()), checks
    assert checks["load levels"][0] is True
    assert checks["load levels recomputed"] == (True, ("6 (backend, level) figure sets recomputed from rows.jsonl "
                                                "equal the signed ones"))


def test_a_tampered_level_figure_is_named(tmp_path):
    run, private, public = signed_load_run(tmp_path)
    summary = run.read("summary.json")
    summary["load"]["workloads"]["mixed"]["backends"]["b"][2]["goodput_per_s"] = 1e6
    write_json_atomic(run.file("summary.json"), summary)
    _resign(run, private)
    checks = _checks(run, public)
    assert checks["load levels recomputed"][0] is False
    assert "load.workloads.mixed.backends.b[2].goodput_per_s" in checks["load levels recomputed"][1]


def _resign(run: RunDir, private) -> None:
    run.file("manifest.dsse.json").unlink()
    write_manifest(run.path, key_path=private)


def test_stripped_schedules_are_caught_even_when_resigned(tmp_path):
    """Without scheduled_ns an open level's latency would silently run from the late send (coordinated omission)."""
    rows = [dataclasses.replace(r, scheduled_ns=None) if r.level == "open-r10" else r
            for r in run_rows("a") + run_rows("b", t0=10**12)]
    run, _, public = signed_load_run(tmp_path, rows)  # summary recomputed from the stripped rows, then signed
    checks = _checks(run, public)
    assert checks["load levels recomputed"][0] is True  # the figures do follow from these rows...
    assert checks["load levels"] == (False, "mixed level open-r10: 12 timed rows lack a scheduled send time")


def test_a_pass_moved_to_another_level_is_caught():
    rows = [dataclasses.replace(r, level="closed-c2") if r.level == "closed-c1" and r.pass_index == 2 else r
            for r in run_rows("a")]
    problems = level_problems(RowTable.from_rows(rows), parse_recipe(RECIPE))
    assert problems == ["mixed/a level closed-c1: measured passes [1], the recipe declares [1, 2]",
                        "mixed/a level closed-c2: measured passes [2, 3, 4], the recipe declares [3, 4]",
                        "mixed/b level closed-c1: feasibility passes none, the recipe declares [1]",
                        "mixed/b level closed-c1: measured passes none, the recipe declares [1, 2]",
                        "mixed/b level closed-c2: feasibility passes none, the recipe declares [2]",
                        "mixed/b level closed-c2: measured passes none, the recipe declares [3, 4]",
                        "mixed/b level open-r10: feasibility passes none, the recipe declares [3]",
                        "mixed/b level open-r10: measured passes none, the recipe declares [5, 6]"]


def test_an_undeclared_level_is_named():
    rows = [dataclasses.replace(r, level="closed-c8") if r.level == "closed-c2" else r for r in run_rows("a")]
    rows += run_rows("b", t0=10**12)
    problems = level_problems(RowTable.from_rows(rows), parse_recipe(RECIPE))
    assert problems[0] == "mixed: timed rows of level(s) closed-c8 (declared: closed-c1, closed-c2, open-r10)"


def test_a_signed_summary_without_its_load_section_fails_in_one_short_line(tmp_path):
    run, private, public = signed_load_run(tmp_path)
    summary = run.read("summary.json")
    del summary["load"]
    write_json_atomic(run.file("summary.json"), summary)
    _resign(run, private)
    checks = _checks(run, public)
    assert checks["load levels recomputed"] == (
        False, "recomputed from rows differs from the signed summary at load: absent from the signed summary")
    assert checks["statistics recomputed"][0] is False
