"""The embedded demo study end to end with the real reference backend on the fixture model."""

import json
import math
import statistics
from pathlib import Path

import pytest
from invoking import invoke
from test_report import close, table_rows

from openjev_repro.evidence.recipe import load_recipe
from openjev_repro.evidence.rows import read_rows
from openjev_repro.manifest.keys import generate_keypair
from openjev_repro.orchestrator.runner import StudyOptions, run_study
from openjev_repro.study.inputs import verify_inputs

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "recipes" / "demo.yaml"

pytestmark = pytest.mark.slow


def test_fixture_bytes_match_the_demo_recipe_pins(fixture_root):
    checks = verify_inputs(load_recipe(DEMO), fixture_root)
    assert {c.path: c.status for c in checks if c.status != "ok"} == {}


@pytest.fixture(scope="module")
def demo_run(fixture_root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    private, public, _ = generate_keypair(tmp / "keys")
    run = run_study(StudyOptions(recipe_path=DEMO, out_dir=tmp / "runs", inputs_root=fixture_root, key_path=private))
    return run, public


def test_demo_completes_signed_and_verifies(demo_run):
    run, public = demo_run
    assert run.state_record().status == "complete"
    for name in ("summary.json", "report.md", "latency_vs_tokens.png", "latency_cdf.png", "manifest.dsse.json"):
        assert run.file(name).stat().st_size > 0, name
    verify = invoke("verify", "--run", str(run.path), "--pubkey", str(public), cwd=REPO, timeout=None)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    summary = json.loads(run.file("summary.json").read_text())
    assert all(g["passed"] for g in summary["gates"]), summary["gates"]


def test_every_report_figure_recomputes_from_rows(demo_run):
    run, _ = demo_run
    text = run.file("report.md").read_text()
    rows = [r for r in read_rows(run.rows_path) if r.phase == "measured"]
    table = table_rows(text, "mixed")
    assert set(table) == {"reference-raw", "reference-fast"}
    for backend, cells in table.items():
        passes = [[r.latency_ms for r in rows if r.backend == backend and r.pass_index == i] for i in (1, 2)]
        assert [len(p) for p in passes] == [24, 24]
        everything = passes[0] + passes[1]
        assert close(cells[2], statistics.fmean(everything), 3)
        expected = {3: [statistics.fmean(p) for p in passes], 4: [statistics.median(p) for p in passes],
                    5: [sorted(p)[int(0.95 * 24) - 1] for p in passes],
                    6: [sorted(p)[math.ceil(0.95 * 24) - 1] for p in passes]}
        for column, values in expected.items():
            for printed, value in zip(cells[column].split(" / "), values, strict=True):
                assert close(printed, value, 3), (backend, column, printed, value)
        first = [r for r in rows if r.backend == backend and r.pass_index == 1]
        correct = sum((r.probability >= 0.5) == (r.label == "yes") for r in first)
        assert cells[7] == f"{correct} / 24"


def test_demo_workload_spans_a_tenfold_length_range(demo_run):
    run, _ = demo_run
    tokens = [r.input_tokens for r in read_rows(run.rows_path) if r.phase == "measured"]
    assert max(tokens) >= 10 * min(tokens)
    labels = {r.label for r in read_rows(run.rows_path)}
    assert labels == {"yes", "no"}


def test_backends_json_and_manifest_record_each_backends_weights_fingerprint(demo_run):
    from openjev_repro.manifest.run_manifest import read_statement

    run, _ = demo_run
    backends = json.loads(run.file("backends.json").read_text())["backends"]
    raw, fast = backends["reference-raw"], backends["reference-fast"]
    assert raw["weights_fingerprint"].startswith("wfp1:") and raw["weights_fingerprint_scope"] == "unmerged"
    assert raw["weights_fingerprint"] == fast["weights_fingerprint"]   # one checkpoint, before merging
    assert fast["merged_weights_fingerprint"] != fast["weights_fingerprint"]
    assert raw["torch_threads"] >= 1 and "OMP_NUM_THREADS" in raw["thread_env"]
    assert raw["prompt_format"] == fast["prompt_format"] == "upstream"   # the demo runs upstream's contract
    _, statement = read_statement(run.file("manifest.dsse.json"))
    assert statement["predicate"]["backends"]["backends"] == backends
    assert "cpufreq" in statement["predicate"]["environment"]["cpu"]


def test_report_shows_each_backends_weights(demo_run):
    run, _ = demo_run
    text = run.file("report.md").read_text()
    backends = json.loads(run.file("backends.json").read_text())["backends"]
    assert "## Weights and GPU" in text and "GPU override" not in text
    fingerprint = backends["reference-raw"]["weights_fingerprint"]
    assert f"- reference-raw: weights `{fingerprint[:17]}…` (unmerged)" in text
