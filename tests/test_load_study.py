"""A study with load levels end to end against a real loopback backend: passes per level, rows that
name their level and connection, verify passing; a default recipe keeps writing what it did; a bad
`load` is one error line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from invoking import REPO, invoke
from studykit import SLOW_STARTED, scripted_backend, wait_for_line, write_study

from openjev_repro.errors import RecipeError, RunIncomplete
from openjev_repro.evidence.recipe import parse_recipe
from openjev_repro.evidence.rows import read_rows
from openjev_repro.evidence.rundir import RunDir
from openjev_repro.manifest.keys import generate_keypair
from openjev_repro.orchestrator.runner import StudyOptions, run_study

LOAD = {"closed": [2, 1], "open": {"rates_per_s": [40.0], "arrivals": "poisson", "seed": 3}, "latency_bound_ms": 250}


def _load_recipe(tmp_path: Path, load: dict | None = LOAD) -> Path:
    recipe = write_study(tmp_path, [scripted_backend("one")], n=6)
    data = yaml.safe_load(recipe.read_text())
    if load is not None:
        data["workloads"][0]["load"] = load
    recipe.write_text(json.dumps(data))
    return recipe


PLANNED = [("closed-c1", "feasibility", 1), ("closed-c1", "measured", 1), ("closed-c1", "measured", 2),
           ("closed-c2", "feasibility", 2), ("closed-c2", "measured", 3), ("closed-c2", "measured", 4),
           ("open-r40", "feasibility", 3), ("open-r40", "measured", 5), ("open-r40", "measured", 6)]


def _timed(rows):
    return [r for r in rows if r.phase in ("feasibility", "measured")]


def _check_level_rows(rows):
    timed = _timed(rows)
    assert sorted({(r.level, r.phase, r.pass_index) for r in timed}) == sorted(PLANNED)
    assert {r.ok for r in rows} == {True} and len(timed) == 9 * 6
    assert {r.connection for r in timed if r.level == "closed-c2"} == {0, 1}


def _check_schedules(rows):
    scheduled = {(r.level == "open-r40", r.scheduled_ns is not None) for r in _timed(rows)}
    assert scheduled == {(True, True), (False, False)}  # only the open loop has a schedule
    untimed = {(r.level, r.connection) for r in rows if r.phase in ("first", "warmup")}
    assert untimed == {(None, None)}


def test_each_level_runs_its_feasibility_and_measured_passes_and_verifies(tmp_path):
    keys = tmp_path / "keys"
    generate_keypair(keys)
    run = run_study(StudyOptions(recipe_path=_load_recipe(tmp_path), out_dir=tmp_path / "runs",
                                 key_path=keys / "openjev-repro.key"))
    rows = read_rows(run.rows_path)
    _check_level_rows(rows)
    _check_schedules(rows)
    connections = json.loads(run.file("servers.json").read_text())["backends"]["one"]["connections"]
    assert connections["connections_opened"] == 1 + 1 + 2 + 6  # the main one, then each level's (open: one per request here)
    assert connections["requests"] == len(rows)
    result = invoke("verify", "--run", str(run.path), "--pubkey", str(keys / "openjev-repro.pub"), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    plan = json.loads(run.file("plan.json").read_text())
    steps = [s for s in plan["passes"][0]["steps"] if s["phase"] in ("feasibility", "measured")]
    assert [s["level"] for s in steps] == ["closed-c1"] * 3 + ["closed-c2"] * 3 + ["open-r40"] * 3
    assert steps[-1]["load"] == {"id": "open-r40", "kind": "open", "rate_per_s": 40.0, "arrivals": "poisson", "seed": 3}


def test_a_recipe_without_load_plans_and_writes_no_load_fields(tmp_path):
    recipe = _load_recipe(tmp_path, None)
    plan = invoke("plan", "--recipe", str(recipe), "--json", timeout=60)
    steps = json.loads(plan.stdout)["passes"][0]["steps"]
    assert plan.returncode == 0 and not any("level" in s or "load" in s for s in steps)
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))
    lines = run.rows_path.read_text().splitlines()
    assert lines and not any(name in line for line in lines
                             for name in ('"level"', '"scheduled_ns"', '"connection"', '"server_queue_ms"'))


@pytest.mark.parametrize(("load", "message"), [
    ({}, "load declares no level"),
    ({"closed": [1, 1]}, "load levels repeat: closed-c1"),
    ({"closed": [0]}, "greater than or equal to 1"),
    ({"open": {"rates_per_s": [5], "arrivals": "gamma"}}, "'poisson' or 'fixed'"),
    ({"open": {"rates_per_s": []}}, "at least 1 item"),
    ({"closed": [1], "latency_bound_ms": -1}, "greater than 0"),
    ({"closed": [1], "burst": 3}, "burst"),
])
def test_a_bad_load_is_a_recipe_error_naming_the_field(tmp_path, load, message):
    text = _load_recipe(tmp_path, load).read_text()
    with pytest.raises(RecipeError, match=message) as caught:
        parse_recipe(text, "recipe.yaml")
    assert "workloads" in str(caught.value) and "load" in str(caught.value)


def test_a_bad_load_is_one_error_line_from_invoke_plan(tmp_path):
    recipe = _load_recipe(tmp_path, {"closed": [1, 1]})
    result = invoke("plan", "--recipe", str(recipe), timeout=60)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        line for line in result.stderr.splitlines() if line.strip()][:1]


def test_ctrl_c_during_a_load_level_stops_its_senders_and_marks_the_run_incomplete(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one", "slow", after=4)], n=6,
                         protocol={"request_timeout_s": 30.0})
    data = yaml.safe_load(recipe.read_text())
    data["workloads"][0]["load"] = {"closed": [2]}
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "study", "--recipe", str(recipe),
                             "--out", str(tmp_path / "runs")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO)
    wait_for_line(tmp_path / "runs", "*/logs/one.log", SLOW_STARTED)  # a sender is inside a slow request
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "Interrupted" in err and "Traceback" not in err
    (path,) = list((tmp_path / "runs").iterdir())
    run = RunDir.open(path)
    assert run.state_record().status == "incomplete" and "Ctrl-C" in run.state_record().error
    # the 4 answered before the slow ones, plus at most the 2 in flight: no sender took another request
    assert 4 <= len(read_rows(run.rows_path)) <= 4 + 2
    (record,) = json.loads(run.file("processes.json").read_text())["processes"]
    assert record["exited"]


def test_a_backend_dying_during_an_open_level_stops_the_run_with_its_rows_kept(tmp_path):
    # 1 first inference + 2 warm-up (the longest, then the first) + 3 of the open level's feasibility
    # pass are answered, then the server dies: the senders' failure rows are kept and the run stops.
    recipe = _load_recipe(tmp_path, {"open": {"rates_per_s": [50.0], "arrivals": "fixed"}})
    data = yaml.safe_load(recipe.read_text())
    data["backends"] = [scripted_backend("one", "crash", after=6)]
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(RunIncomplete, match="died during feasibility pass 1"):
        run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))
    (path,) = list((tmp_path / "runs").iterdir())
    run = RunDir.open(path)
    rows = read_rows(run.rows_path)
    assert run.state_record().status == "incomplete" and not run.file("summary.json").exists()
    assert [r.ok for r in rows if r.phase in ("first", "warmup")] == [True] * 3
    failed = [r for r in rows if not r.ok]
    assert failed and {(r.level, r.phase) for r in failed} == {("open-r50", "feasibility")}
    assert all(r.scheduled_ns is not None for r in failed)
