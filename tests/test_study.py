"""The runner against real loopback backends that behave, and that misbehave in scripted ways."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from invoking import invoke
from studykit import SLOW_STARTED, scripted_backend, wait_for_line, write_study

from openjev_repro.errors import InputMismatch, RunIncomplete
from openjev_repro.evidence.rows import read_rows
from openjev_repro.evidence.rundir import RunDir
from openjev_repro.orchestrator.progress import StudyProgress
from openjev_repro.orchestrator.runner import RUN_ONLY_FIELDS, StudyOptions, run_study
from openjev_repro.study.passes import PassBudget


def _run(recipe: Path, tmp_path: Path) -> RunDir:
    return run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs"))


def _only_run(tmp_path: Path) -> RunDir:
    (path,) = list((tmp_path / "runs").iterdir())
    return RunDir.open(path)


def test_complete_study_leaves_evidence(tmp_path):
    gates = [{"name": "same", "kind": "decisions_unchanged", "workload": "mixed", "a": "one", "b": "two"}]
    run = _run(write_study(tmp_path, [scripted_backend("one"), scripted_backend("two")], gates=gates), tmp_path)
    assert run.state_record().status == "complete"
    rows = read_rows(run.rows_path)
    measured = [r for r in rows if r.phase == "measured"]
    assert len(measured) == 2 * 2 * 6  # backends x passes x requests
    assert all(r.ok and r.end_ns > r.start_ns for r in rows)
    summary = json.loads(run.file("summary.json").read_text())
    assert summary["gates"][0]["passed"] is True
    processes = json.loads(run.file("processes.json").read_text())["processes"]
    assert [p["intentional"] and p["exited"] for p in processes] == [True, True]
    for name in ("recipe.yaml", "plan.json", "inputs.json", "environment.json", "calibration.json", "report.md",
                 "manifest.dsse.json", "logs/one.log", "responses/two.jsonl"):
        assert run.file(name).is_file(), name


def test_missing_input_stops_before_a_run_directory_exists(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")])
    (tmp_path / "inputs" / "requests" / "cases.jsonl").unlink()
    with pytest.raises(InputMismatch, match=r"all 1 inputs are missing under .*; restore them under "):
        _run(recipe, tmp_path)
    assert not (tmp_path / "runs").exists()


def test_changed_input_stops_before_any_backend(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")])
    with open(tmp_path / "inputs" / "requests" / "cases.jsonl", "a") as fh:
        fh.write("\n")
    with pytest.raises(RunIncomplete, match="requests/cases.jsonl changed"):
        _run(recipe, tmp_path)
    run = _only_run(tmp_path)
    assert run.state_record().status == "incomplete"
    assert not run.file("processes.json").exists() and not run.rows_path.exists()


def test_crash_mid_pass_keeps_rows_and_is_incomplete(tmp_path):
    # 1 first + 1 warm-up + 6 feasibility + 2 measured succeed, then the process dies.
    recipe = write_study(tmp_path, [scripted_backend("one", "crash", after=10), scripted_backend("two")])
    with pytest.raises(RunIncomplete, match="died during measured pass 1"):
        _run(recipe, tmp_path)
    run = _only_run(tmp_path)
    state = run.state_record().to_json()
    assert state["status"] == "incomplete" and "backend:two" not in state["attempted"]
    rows = read_rows(run.rows_path)
    assert len(rows) == 11 and rows[-1].error and all(r.ok for r in rows[:10])
    (record,) = json.loads(run.file("processes.json").read_text())["processes"]
    assert record["exit_status"] == 3 and not record["intentional"] and record["exited"]
    assert not run.file("summary.json").exists() and not run.file("manifest.dsse.json").exists()


@pytest.mark.parametrize("fault,message", [("non_json", "response is not JSON"),
                                           ("nan", "is not a finite number"),
                                           ("slow", "Timeout")])
def test_bad_answers_become_failure_rows(tmp_path, fault, message):
    recipe = write_study(tmp_path, [scripted_backend("one", fault, after=9)], n=3)
    with pytest.raises(RunIncomplete, match="request\\(s\\) failed"):
        _run(recipe, tmp_path)
    run = _only_run(tmp_path)
    failed = [r for r in read_rows(run.rows_path) if r.error]
    assert failed and message in failed[0].error
    kept = [json.loads(ln) for ln in run.responses_path("one").read_text().splitlines()]
    if fault == "non_json":  # the raw body is kept beside the failure row
        assert any(e.get("body") == "<html>oops</html>" for e in kept)


def test_backend_never_ready(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one", "never_ready")], protocol={"ready_timeout_s": 1.5})
    with pytest.raises(RunIncomplete, match="not ready within 2 s"):
        _run(recipe, tmp_path)
    (record,) = json.loads(_only_run(tmp_path).file("processes.json").read_text())["processes"]
    assert record["intentional"] and record["exited"]


def test_measured_passes_cannot_be_added():
    budget = PassBudget({("a", "w"): 2})
    budget.claim("a", "w", 1)
    budget.claim("a", "w", 2)
    with pytest.raises(RunIncomplete, match="declares 2 measured pass"):
        budget.claim("a", "w", 3)
    with pytest.raises(RunIncomplete):
        PassBudget({("a", "w"): 2}).claim("a", "w", 2)  # skipping pass 1 is refused too


def test_ctrl_c_during_a_pass(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one", "slow", after=4)], n=6,
                         protocol={"request_timeout_s": 30.0})
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "study", "--recipe", str(recipe),
                             "--out", str(tmp_path / "runs")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    wait_for_line(tmp_path / "runs", "*/logs/one.log", SLOW_STARTED)  # inside the slow request now
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "Interrupted" in err and "marked incomplete" in err
    run = _only_run(tmp_path)
    assert run.state_record().status == "incomplete" and "Ctrl-C" in run.state_record().error
    assert len(read_rows(run.rows_path)) >= 4
    (record,) = json.loads(run.file("processes.json").read_text())["processes"]
    assert record["exited"]


def test_aux_process_starts_first_and_stops_last(tmp_path):
    worker = dict(scripted_backend("worker"))
    worker.pop("name")
    front = scripted_backend("one")
    front["env"]["SCRIPTED_UPSTREAM"] = "http://127.0.0.1:{port.worker}"
    front["aux"] = [{"name": "worker", **worker}]
    run = _run(write_study(tmp_path, [front], n=2), tmp_path)
    records = json.loads(run.file("processes.json").read_text())["processes"]
    assert [r["name"] for r in records] == ["one", "one.worker"]
    assert all(r["intentional"] and r["exited"] for r in records)
    worker_port = (run.path / "logs" / "one.worker.log").read_text().split("127.0.0.1:")[1].split()[0]
    assert f"upstream=http://127.0.0.1:{worker_port}" in (run.path / "logs" / "one.log").read_text()


def test_aux_process_dying_stops_the_run(tmp_path):
    front = scripted_backend("one")
    front["aux"] = [{"name": "worker", "command": ["{python}", "-c", "import time; time.sleep(1.5)"], "health": None}]
    with pytest.raises(RunIncomplete, match="died during"):
        _run(write_study(tmp_path, [front], n=40), tmp_path)


class _Recorder(StudyProgress):
    """An observer that keeps every event of the study (the runner draws nothing itself)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def message(self, text: str) -> None:
        self.events.append(("message", text))

    def pass_started(self, backend: str, workload: str, phase: str, index: int, total: int) -> None:
        self.events.append(("pass", backend, workload, phase, index, total))

    def request_done(self, row) -> None:
        self.events.append(("row", row.phase, row.seq))

    def pass_finished(self) -> None:
        self.events.append(("end",))


def test_plan_json_is_what_invoke_plan_prints_plus_the_run_only_fields(tmp_path):
    recipe = write_study(tmp_path, [scripted_backend("one")])
    progress = _Recorder()
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=tmp_path / "runs", progress=progress))
    recorded = json.loads(run.file("plan.json").read_text())
    printed = invoke("plan", "--recipe", str(recipe), "--json")
    assert printed.returncode == 0, printed.stderr
    assert {k: v for k, v in recorded.items() if k not in RUN_ONLY_FIELDS} == json.loads(printed.stdout)
    assert sorted(set(recorded) - set(json.loads(printed.stdout))) == ["case_ids"]  # no GPU override here
    assert recorded["case_ids"] == {"mixed": [json.loads(line)["id"] for line in
                                              (tmp_path / "inputs" / "requests" / "cases.jsonl").read_text().splitlines()]}
    # The observer saw every timed pass begin, each of its requests, and the pass end; nothing else drew.
    passes = [e for e in progress.events if e[0] == "pass"]
    assert [(p[3], p[4]) for p in passes] == [("feasibility", 1), ("measured", 1), ("measured", 2)]
    timed = [e for e in progress.events if e[0] == "row" and e[1] in ("feasibility", "measured")]
    assert len(timed) == sum(p[5] for p in passes) and progress.events.count(("end",)) == len(passes)
    assert any(e[0] == "message" and "study complete" in e[1] for e in progress.events)
