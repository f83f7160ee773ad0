"""Issue 43 on CPU: a study traces our backend with the PyTorch profiler in its trace step, writes
kernel-families.json, decides the trace gates, and `verify` recomputes the family table from the
trace files (and fails once a trace file changed, even in a run signed again afterwards)."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import shutil
from pathlib import Path

import pytest

from openjev_repro.audit.verify import verify_dir
from openjev_repro.errors import RecipeError
from openjev_repro.evidence.kernel_families import read_kernel_families, read_traces_record
from openjev_repro.evidence.recipe import load_recipe, parse_recipe
from openjev_repro.manifest.keys import generate_keypair
from openjev_repro.manifest.run_manifest import write_manifest
from openjev_repro.orchestrator.runner import StudyOptions, run_study
from openjev_repro.study.traces import TraceTarget, trace_backend

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
REQUESTS = "requests/h200-74-lengths-upstream.jsonl"
FIRST = 8  # the first 8 of the 74 published lengths: 110 113 99 98 101 100 107 104 tokens
BACKEND = ["{python}", "-m", "openjev_repro.backend", "--checkpoint", "{inputs}/checkpoint", "--mode", "fast",
           "--kernels", "reference", "--max-length", "4096", "--device", "cpu", "--threads", "1",
           "--host", "{host}", "--port", "{port}"]
TRACED = ["--trace-dir", "{run}/traces"]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _inputs(fixture_root: Path, root: Path) -> list[dict]:
    """A private inputs root: the fixture's checkpoint and requests, and the token counts of the first 8."""
    shutil.copytree(fixture_root / "checkpoint", root / "checkpoint")
    (root / "requests").mkdir()
    shutil.copyfile(fixture_root / REQUESTS, root / REQUESTS)
    from openjev_repro.backend.synthetic import H200_NOUL_INPUT_TOKENS

    (root / "tokens.json").write_text(json.dumps({"input_tokens": H200_NOUL_INPUT_TOKENS[:FIRST]}))
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return [{"path": name, "sha256": _sha256(root / name)} for name in files]


def _recipe(root: Path, files: list[dict], **traces_extra: object) -> dict:
    return {
        "format_version": 1,
        "study": {"id": "traces-cpu", "date": "2026-12-04", "purpose": "issue 43 on CPU"},
        "inputs": {"root": str(root), "files": files},
        "workloads": [{"name": "mixed", "requests": REQUESTS, "selection": {"first": FIRST}}],
        "backends": [
            {"name": "fast", "command": BACKEND + TRACED},
            {"name": "fast-fused", "command": BACKEND + TRACED + ["--fuse", "silu-mul-fp32"]},
            {"name": "untraced", "command": BACKEND},
        ],
        "protocol": {"warmup": {"longest_first": True, "requests": 1}, "feasibility_passes": 1, "measured_passes": 1,
                     "request_timeout_s": 60, "ready_timeout_s": 180, "stop_grace_s": 10},
        "traces": {"enabled": True, "profiler": "torch", "workload": "mixed", "tokens": [107, 110], "per_length": 2,
                   "token_counts": "tokens.json",
                   "families": {"silu": ["silu"], "gemm": ["^aten::(mm|addmm|bmm|linear)$"], "conv": ["conv"]},
                   **traces_extra},
        "gates": [
            {"name": "silu-time", "kind": "kernel_time_reduction", "family": "silu", "baseline": "fast",
             "candidate": "fast-fused", "tokens": 107, "min_percent": -1000.0},
            {"name": "fast-replays", "kind": "graph_replay", "backend": "fast"},
            {"name": "untraced-silu", "kind": "kernel_time_reduction", "family": "silu", "baseline": "fast",
             "candidate": "untraced", "tokens": 110, "min_percent": 0.0},
        ],
    }


@pytest.fixture(scope="module")
def traced_run(fixture_root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("traced")
    root = tmp / "inputs"
    root.mkdir()
    recipe = tmp / "traced.yaml"
    recipe.write_text(json.dumps(_recipe(root, _inputs(fixture_root, root))))
    private, public, _ = generate_keypair(tmp / "keys")
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp / "runs", key_path=private))
    return run, private, public


def test_the_study_traces_our_backend_and_counts_kernel_families(traced_run):
    run, _, _ = traced_run
    assert run.state_record().status == "complete"
    record = read_traces_record(run.path)
    assert record is not None
    done = [e for e in record.entries if e.status == "done"]
    assert [(e.backend, e.tokens, e.repeat) for e in done] == [
        (b, t, r) for b in ("fast", "fast-fused") for t in (107, 110) for r in (1, 2)]
    skipped = [e for e in record.entries if e.status == "skipped"]
    assert len(skipped) == 4 and all("--trace-dir" in e.reason for e in skipped)
    table = read_kernel_families(run.path)
    assert table is not None and len(table.traces) == 8
    for trace in table.traces:
        assert trace.device_events == "cpu_op" and trace.kernels > 100 and trace.graph_launches == 0
        assert trace.families["gemm"].kernels > 0 and trace.families["silu"].kernels > 0
        assert trace.sha256 == _sha256(run.path / trace.file)
    # Traced requests are never timed: rows hold the timed passes only (8 requests, 1 feasibility + 1 measured).
    rows = [json.loads(line) for line in run.rows_path.read_text().splitlines()]
    assert sum(1 for r in rows if r["backend"] == "fast" and r["phase"] in ("feasibility", "measured")) == 2 * FIRST


def test_the_trace_gates_are_decided_by_the_study(traced_run):
    run, _, _ = traced_run
    gates = {g["name"]: g for g in json.loads(run.file("summary.json").read_text())["gates"]}
    # decided from the run's own traces: the silu time each backend's 107-token traces recorded (CPU op times,
    # which a loaded machine stretches at random: the outcome is the rule applied to them, whichever it is)
    table = read_kernel_families(run.path)
    assert table is not None
    silu_ms = {b: sum(t.families["silu"].time_us for t in table.traces if t.backend == b and t.tokens == 107) / 2 / 1000
               for b in ("fast", "fast-fused")}
    percent = (silu_ms["fast"] - silu_ms["fast-fused"]) / silu_ms["fast"] * 100
    assert gates["silu-time"]["evaluated"] and gates["silu-time"]["passed"] is (percent >= -1000.0)
    assert (f"silu at 107 tokens: fast-fused {silu_ms['fast-fused']:.3f} ms is {percent:.2f}% below fast "
            f"{silu_ms['fast']:.3f} ms (mean of 2 and 2 traces; required >= -1000.0%)") == gates["silu-time"]["detail"]
    assert gates["fast-replays"]["passed"] is False  # no CUDA Graph on a CPU
    assert "0 graph launches, 0 kernel launches, 0 captures" in gates["fast-replays"]["detail"]
    assert gates["untraced-silu"]["passed"] is False and "no trace of untraced" in gates["untraced-silu"]["detail"]


def test_verify_recomputes_the_family_table(traced_run):
    run, _, public = traced_run
    checks = {c.name: c for c in verify_dir(run.path, pubkey=public)}
    assert checks["kernel families recomputed"].passed is True, checks["kernel families recomputed"].detail
    assert checks["gates recomputed"].passed is True
    assert all(c.passed is not False for c in checks.values()), [c for c in checks.values() if c.passed is False]


def test_the_report_shows_the_kernel_families_as_a_table_and_a_plot(traced_run, tmp_path):
    from openjev_repro.results.report import write_report

    run, _, _ = traced_run
    text = run.file("report.md").read_text()
    section = text.split("## Kernel families (traces)", 1)[1].split("\n## ", 1)[0]
    assert "107 tokens (2 traces of fast, 2 traces of fast-fused):" in section
    assert "| family | fast ms (CPU ops) | fast-fused ms (CPU ops) | fast-fused vs fast |" in section
    table = read_kernel_families(run.path)
    assert table is not None
    silu = [t.families["silu"] for t in table.at("fast", 110)]
    mean_ms = sum(f.time_us for f in silu) / len(silu) / 1000
    assert f"| silu | {mean_ms:.3f} (" in section.split("110 tokens", 1)[1]
    assert "graph launches / kernel launches / graph captures: fast 0 / 0 / 0; fast-fused 0 / 0 / 0." in section
    assert run.file("kernel_families.png").read_bytes()[:4] == b"\x89PNG"
    rendered = write_report(run.path, tmp_path / "again")  # the signed report and plot render again byte for byte
    assert rendered.read_bytes() == run.file("report.md").read_bytes()
    assert (tmp_path / "again/kernel_families.png").read_bytes() == run.file("kernel_families.png").read_bytes()


def _changed_copy(run_path: Path, tmp_path: Path) -> Path:
    """A copy of the run whose first trace has one kernel event 1 µs longer (a valid trace, other numbers)."""
    copy = tmp_path / "copy"
    shutil.copytree(run_path, copy)
    table = read_kernel_families(copy)
    assert table is not None
    path = copy / table.traces[0].file
    trace = json.loads(gzip.decompress(path.read_bytes()))
    event = next(e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and "silu" in e["name"])
    event["dur"] += 1
    path.write_bytes(gzip.compress(json.dumps(trace).encode(), mtime=0))
    return copy


def test_verify_fails_on_a_changed_trace_file(traced_run, tmp_path):
    run, _, public = traced_run
    copy = _changed_copy(run.path, tmp_path)
    checks = {c.name: c for c in verify_dir(copy, pubkey=public)}
    assert checks["kernel families recomputed"].passed is False
    assert "sha256 differs" in checks["kernel families recomputed"].detail
    assert checks["subject digests"].passed is False


def test_verify_fails_on_a_changed_trace_file_signed_again(traced_run, tmp_path):
    run, private, public = traced_run
    copy = _changed_copy(run.path, tmp_path)
    (copy / "manifest.dsse.json").unlink()
    write_manifest(copy, key_path=private)  # every digest matches the changed file now
    checks = {c.name: c for c in verify_dir(copy, pubkey=public)}
    assert checks["signature"].passed is True
    assert checks["kernel families recomputed"].passed is False
    table = read_kernel_families(copy)
    assert table is not None
    assert f"trace files changed since kernel-families.json was computed (sha256 differs): {table.traces[0].file}" \
        in checks["kernel families recomputed"].detail


def test_an_unlisted_trace_file_fails_verify(traced_run, tmp_path):
    run, private, public = traced_run
    copy = tmp_path / "copy"
    shutil.copytree(run.path, copy)
    shutil.copyfile(copy / "traces/fast-107tok-1.pt.trace.json.gz", copy / "traces/extra.pt.trace.json.gz")
    (copy / "manifest.dsse.json").unlink()
    write_manifest(copy, key_path=private)
    check = {c.name: c for c in verify_dir(copy, pubkey=public)}["kernel families recomputed"]
    assert check.passed is False and "traces/extra.pt.trace.json.gz" in check.detail


def test_a_backend_without_the_control_is_recorded_as_not_traceable(tmp_path, fixture_root):
    root = tmp_path / "inputs"
    root.mkdir()
    recipe = parse_recipe(json.dumps(_recipe(root, _inputs(fixture_root, root))), "traced.yaml")
    from openjev_repro.study.workload import build_requests, load_tasks

    requests = {"mixed": build_requests(load_tasks(root / REQUESTS)[:FIRST], None)}
    said: list[str] = []
    target = TraceTarget(tmp_path, root, recipe, "fast", "127.0.0.1", 9, {"status": "ready"}, requests)
    trace_backend(target, said.append)  # a foreign backend: no `tracing` in /health, nothing is sent
    record = read_traces_record(tmp_path)
    assert record is not None and {e.status for e in record.entries} == {"skipped"}
    assert "cannot be traced from outside" in record.entries[0].reason and "skipped" in said[0]


def test_trace_gates_name_declared_families_lengths_and_traced_backends(tmp_path, fixture_root):
    root = tmp_path / "inputs"
    root.mkdir()
    files = _inputs(fixture_root, root)
    data = _recipe(root, files)
    data["gates"][0]["family"] = "attention"
    with pytest.raises(RecipeError, match="family 'attention' is not declared"):
        parse_recipe(json.dumps(data), "traced.yaml")
    data = _recipe(root, files)
    data["gates"][0]["tokens"] = 936
    with pytest.raises(RecipeError, match="936 tokens is not a traced length"):
        parse_recipe(json.dumps(data), "traced.yaml")
    data = _recipe(root, files, families={"silu": ["(unclosed"]})
    with pytest.raises(RecipeError, match="not a regular expression"):
        parse_recipe(json.dumps(data), "traced.yaml")


def test_the_trace_control_is_refused_unless_allowed(start_server, fixture_checkpoint, tmp_path):
    server = start_server(["--checkpoint", str(fixture_checkpoint), "--mode", "fast", "--device", "cpu"])
    server.wait_ready()
    body = json.dumps({"model": "open-jev", "state": "s", "questions": {"q": {"type": "noul", "instructions": "ok?"}}})
    connection = http.client.HTTPConnection("127.0.0.1", server.wait_port(), timeout=30)
    connection.request("POST", "/v1/systemone", body=body, headers={"X-OpenJev-Trace": "x"})
    response = connection.getresponse()
    assert response.status == 403 and json.loads(response.read())["error"]["type"] == "tracing_not_allowed"
    connection.request("GET", "/health")
    assert json.loads(connection.getresponse().read())["tracing"]["allowed"] is False


def test_the_committed_packed_silu_recipe_loads():
    recipe = load_recipe(REPO / "recipes" / "h200-packed-silu-27b-shape.yaml")
    assert recipe.traces is not None and recipe.traces.profiler == "torch"
    kinds = {g.kind for g in recipe.gates}
    assert {"kernel_time_reduction", "graph_replay", "decisions_unchanged", "max_probability_delta",
            "mean_reduction"} <= kinds


def test_nsys_traces_are_recorded_as_not_taken(tmp_path, fixture_root, monkeypatch):
    from openjev_repro.study.traces import write_trace_families

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no nsys here, even on a host with Nsight
    root = tmp_path / "inputs"
    root.mkdir()
    recipe = parse_recipe(json.dumps(_recipe(root, _inputs(fixture_root, root), profiler="nsys")), "traced.yaml")
    run = tmp_path / "run"
    run.mkdir()
    write_trace_families(run, recipe, root)
    skipped = json.loads((run / "traces/skipped.json").read_text())
    assert skipped["status"] == "skipped" and "not on PATH" in skipped["reason"]
    assert len(skipped["planned"]) == 3 * 2 * 2  # 3 backends, 2 lengths, 2 each
    assert not (run / "kernel-families.json").exists()


@pytest.mark.parametrize(("content", "message"), [
    ('{"input_tokens": [107, "936"]}', r"\$\.input_tokens\[1\]"),
    ('{"input_tokens": [107, -1]}', r"\$\.input_tokens\[1\]"),
    ('[107]', "Expected `object`"),
    ('{"input_tokens": [1e999]}', "input_tokens"),
])
def test_a_bad_token_counts_file_is_one_recipe_error(tmp_path, fixture_root, content, message):
    root = tmp_path / "inputs"
    root.mkdir()
    recipe = parse_recipe(json.dumps(_recipe(root, _inputs(fixture_root, root))), "traced.yaml")
    (root / "tokens.json").write_text(content)
    target = TraceTarget(tmp_path, root, recipe, "fast", "127.0.0.1", 9, {"status": "ready"}, {"mixed": []})
    with pytest.raises(RecipeError, match=message) as caught:
        trace_backend(target, print)
    assert "\n" not in str(caught.value)
