"""`invoke study --plan FILE` runs the plan as written: what `invoke plan --out` printed, edits included."""

import json

import pytest
from invoking import invoke
from studykit import scripted_backend, write_study

from openjev_repro.evidence.records import plan_of
from openjev_repro.evidence.rows import read_rows
from openjev_repro.evidence.rundir import RunDir


def _plan_file(tmp_path, recipe):
    plan_path = tmp_path / "plan.json"
    made = invoke("plan", "--recipe", str(recipe), "--out", str(plan_path))
    assert made.returncode == 0, made.stderr
    return plan_path, json.loads(plan_path.read_text())


def _study(tmp_path, plan_path, *extra):
    proc = invoke("study", "--plan", str(plan_path), "--out", str(tmp_path / "runs"), *extra)
    return proc, (RunDir.open(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None)


def test_an_edited_plan_is_exactly_what_runs(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3)
    plan_path, plan = _plan_file(tmp_path, recipe)
    steps = plan["passes"][0]["steps"]
    assert [s.get("pass") for s in steps if s["phase"] == "measured"] == [1, 2]
    plan["passes"][0]["steps"] = steps[:-1]  # the second measured pass removed
    plan["backends"][0]["command"]["env"]["SCRIPTED_UPSTREAM"] = "edited-in-the-plan"  # an env value added
    plan_path.write_text(json.dumps(plan))
    proc, run = _study(tmp_path, plan_path)
    assert proc.returncode == 0, proc.stderr
    measured = [r for r in read_rows(run.rows_path) if r.phase == "measured"]
    assert {r.pass_index for r in measured} == {1} and len(measured) == 3
    assert "upstream=edited-in-the-plan" in run.file("logs/one.log").read_text()
    recorded = plan_of(run)
    assert recorded is not None and recorded.case_ids is not None
    assert {k: v for k, v in recorded.to_json().items() if k != "case_ids"} == plan  # plan.json is the plan run


def _edited_run(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3)
    plan_path, plan = _plan_file(tmp_path, recipe)
    plan["passes"][0]["steps"] = plan["passes"][0]["steps"][:-1]  # the second measured pass removed
    plan_path.write_text(json.dumps(plan))
    proc, run = _study(tmp_path, plan_path)
    assert proc.returncode == 0, proc.stderr
    return run


def test_verify_accepts_a_run_of_an_edited_plan(tmp_path):
    run = _edited_run(tmp_path)
    verified = invoke("verify", "--run", str(run.path), "--allow-unsigned")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_unedited_plan_file_runs_what_the_recipe_runs(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3)
    plan_path, _ = _plan_file(tmp_path, recipe)
    proc, run = _study(tmp_path, plan_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted({(r.phase, r.pass_index) for r in read_rows(run.rows_path)}) == [
        ("feasibility", 1), ("first", 1), ("measured", 1), ("measured", 2), ("warmup", 1)]
    verified = invoke("verify", "--run", str(run.path), "--allow-unsigned")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_plan_whose_recipe_changed_is_refused_with_one_line_and_no_run(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3)
    plan_path, _ = _plan_file(tmp_path, recipe)
    recipe.write_text(recipe.read_text() + "\n# edited\n")
    proc, _ = _study(tmp_path, plan_path)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "changed since the plan" in proc.stderr and not (tmp_path / "runs").exists()


def _without_measured_pass_1(steps):
    return [s for s in steps if s.get("pass") != 1 or s["phase"] != "measured"]


def _first_inference_moved_last(steps):
    return steps[1:] + steps[:1]


def _warm_up_moved_last(steps):
    return [s for s in steps if s["phase"] != "warmup"] + [s for s in steps if s["phase"] == "warmup"]


def _no_measured_pass(steps):
    return [s for s in steps if s["phase"] != "measured"]


CONTRADICTIONS = {
    _without_measured_pass_1: "passes are numbered 1, 2",
    _first_inference_moved_last: "it can only be the first step",
    _warm_up_moved_last: "a warm-up comes before the passes it warms up",
    _no_measured_pass: "one measures no pass of mixed: every backend measures every workload",
}


@pytest.mark.parametrize("edit", CONTRADICTIONS, ids=lambda edit: edit.__name__.strip("_"))
def test_a_plan_out_of_the_protocols_order_is_refused_before_anything_runs(tmp_path, edit):
    """Counts and levels are the plan's to edit; the protocol's order and a measured pass of every workload
    on every backend are not: one `error:` line and no run directory."""
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3)
    plan_path, plan = _plan_file(tmp_path, recipe)
    plan["passes"][0]["steps"] = edit(plan["passes"][0]["steps"])
    plan_path.write_text(json.dumps(plan))
    proc, _ = _study(tmp_path, plan_path)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert CONTRADICTIONS[edit] in proc.stderr and not (tmp_path / "runs").exists()


def test_plan_and_recipe_together_or_neither_are_refused(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3)
    plan_path, _ = _plan_file(tmp_path, recipe)
    for args in (("--recipe", str(recipe), "--plan", str(plan_path)), ()):
        proc = invoke("study", *args, "--out", str(tmp_path / "runs"))
        assert proc.returncode == 1 and proc.stderr.startswith("error: give either --recipe"), proc.stderr
    again = invoke("plan", "--recipe", str(recipe), "--out", str(plan_path))
    assert again.returncode == 1 and "exists" in again.stderr


def test_a_plan_with_a_placeholder_launch_does_not_fill_is_refused_before_anything_runs(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")], n=3)
    plan_path, plan = _plan_file(tmp_path, recipe)
    plan["backends"][0]["command"]["argv"].append("{inputs}")  # filled at plan time, never at launch
    plan_path.write_text(json.dumps(plan))
    proc, _ = _study(tmp_path, plan_path)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "unknown placeholder {inputs}" in proc.stderr and not (tmp_path / "runs").exists()
