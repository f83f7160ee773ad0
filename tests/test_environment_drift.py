"""The environment check on the embedded demo with the real reference backend: a recipe that
declares what the backend will not report (FLA where it binds the reference kernels, a package
that is not installed, another dtype) is refused before any inference with one `error:` line
naming each difference; with --allow-environment-drift the run records them, the report opens
with a banner naming them, and compare's verdict names them as what can explain the flips."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from openjev_repro.audit.compare import compare_runs, to_markdown
from openjev_repro.audit.verify import verify_dir
from openjev_repro.manifest.run_manifest import read_statement
from openjev_repro.orchestrator.runner import StudyOptions, run_study

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "recipes" / "demo.yaml"

pytestmark = pytest.mark.slow

DIFFERENCES = ("package flash-linear-attention: recipe 0.6.0, not installed",
               "implementations.linear_attention: recipe fla, backend reports reference",
               "dtype: recipe float32, backend reports bfloat16")


def _recipe(tmp: Path, name: str, drift: bool) -> Path:
    recipe = yaml.safe_load(DEMO.read_text())
    recipe["workloads"][0]["selection"]["first"] = 6
    recipe["protocol"].update(feasibility_passes=0, measured_passes=1)
    recipe["gates"] = []
    recipe["inputs"]["root"] = "unused"  # every run passes --inputs-root
    if drift:  # the raw backend (the first to run) will not report what its recipe now declares
        raw = recipe["backends"][0]
        raw["command"] += ["--dtype", "bfloat16"]
        raw["environment"] = {"packages": {"flash-linear-attention": "0.6.0"},
                              "implementations": {"linear_attention": "fla"}}
    path = tmp / name
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def runs(fixture_root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("drift")
    base = run_study(StudyOptions(recipe_path=_recipe(tmp, "demo-small.yaml", False), out_dir=tmp / "runs",
                                  inputs_root=fixture_root))
    drifted = _recipe(tmp, "demo-drift.yaml", True)
    allowed = run_study(StudyOptions(recipe_path=drifted, out_dir=tmp / "runs", inputs_root=fixture_root,
                                     allow_environment_drift=True))
    return tmp, drifted, base, allowed


def test_the_study_refuses_a_drifted_backend_with_one_error_line_naming_each_difference(runs, fixture_root):
    tmp, drifted, _, _ = runs
    out = tmp / "refused"
    done = subprocess.run([sys.executable, "-m", "invoke", "study", "--recipe", str(drifted), "--inputs-root",
                           str(fixture_root), "--out", str(out)], capture_output=True, text=True, cwd=REPO,
                          check=False, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    for difference in DIFFERENCES:
        assert difference in errors[0]
    assert "--allow-environment-drift" in errors[0] and "Traceback" not in done.stderr
    assert done.stdout == ""  # no run directory is announced as a result
    (run,) = out.iterdir()
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "incomplete" and "Environment drift" in state["error"]
    assert not (run / "rows.jsonl").exists() or (run / "rows.jsonl").read_text() == ""  # nothing measured
    assert not (run / "report.md").exists() and not (run / "manifest.dsse.json").exists()
    check = json.loads((run / "environment_check.json").read_text())
    assert check["allow_drift"] is False and len(check["backends"]["reference-raw"]["differences"]) == 3


def test_allowed_drift_is_recorded_in_the_manifest_and_shown_as_a_banner_at_the_top_of_the_report(runs):
    _, _, _, allowed = runs
    assert allowed.state_record().status == "complete"
    report = allowed.file("report.md").read_text()
    head = report.split("## Workload", 1)[0]
    assert "**ENVIRONMENT DRIFT**" in head.splitlines()[2]
    for difference in DIFFERENCES:
        assert f"> - reference-raw: {difference}" in head
    _, statement = read_statement(allowed.file("manifest.dsse.json"))
    recorded = statement["predicate"]["environment_check"]
    assert recorded["allow_drift"] is True
    assert recorded["differences"] == [f"reference-raw: {d}" for d in DIFFERENCES]
    assert all(c.passed is not False for c in verify_dir(allowed.path, allow_unsigned=True))


def test_a_run_without_drift_has_no_banner_and_records_the_kernels_it_ran(runs):
    _, _, base, _ = runs
    assert "ENVIRONMENT DRIFT" not in base.file("report.md").read_text()
    check = json.loads(base.file("environment_check.json").read_text())
    assert check["differences"] == [] and check["project"]["source_sha256"]
    observed = check["backends"]["reference-fast"]["observed"]
    assert observed["implementations"]["linear_attention"] == "reference"
    assert observed["source_sha256"] == check["project"]["source_sha256"]
    backends = json.loads(base.file("backends.json").read_text())["backends"]
    assert backends["reference-fast"]["kernels"]["requested"] == "reference"


def test_compare_lists_environment_differences_and_its_verdict_names_what_can_explain_them(runs):
    _, _, base, allowed = runs
    compared = compare_runs(base.path, allowed.path, tolerances={"format_version": 1, "decisions_must_match": True,
                                                                  "max_probability_delta": 0.0})
    result = compared.to_json()
    raw = next(p for p in result["pairs"] if p["baseline_backend"] == "reference-raw")
    texts = [d["text"] for d in raw["environment"]["differences"]]
    assert "dtype: float32 vs bfloat16" in texts
    assert raw["answers"]["max_abs_probability_delta"] > 0  # bfloat16 moves the probabilities
    verdict = result["verdict"]
    assert verdict["passed"] is False
    (explained,) = [e for e in verdict["explanations"] if "reference-raw" in e]
    assert "dtype: float32 vs bfloat16" in explained and "the allowed environment drift listed below" in explained
    assert "FLA kernels in one run" not in explained  # the recipe names FLA; neither run ran it
    assert any("implementations.linear_attention: recipe fla, backend reports reference" in d
               for d in verdict["environment_drift"])
    fast = next(p for p in result["pairs"] if p["baseline_backend"] == "reference-fast")
    # two runs on one host differ in their load average when the machine is busy: recorded, never a mismatch here
    assert [d for d in fast["environment"]["differences"] if d["item"] not in ("drift", "load_average")] == []
    text = to_markdown(compared)
    verdict_part = text.split("**Verdict:", 1)[1]
    assert "explained by the environment" in verdict_part and "dtype: float32 vs bfloat16" in verdict_part
    assert "Environment differences (baseline vs candidate):" in text
    assert verdict["project_code"] is None  # same source digest: no "different project code" line
