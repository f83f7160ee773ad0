"""Issue 40's items of the study runner: a port-0 url, a huge X-Queue-Time-Ms, SIGTERM in load mode, a
near-zero open-loop rate and a huge answer (decisions in docs/security.md and docs/load.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from advkit import invoke, one_error_line
from invoking import INVOKE
from studykit import SLOW_STARTED, scripted_backend, wait_for_line, write_study

from openjev_repro.evidence.records import servers_of
from openjev_repro.evidence.rows import read_rows
from openjev_repro.evidence.rundir import RunDir

pytestmark = pytest.mark.slow


def _load_study(tmp_path: Path, env: dict[str, str], load: dict, protocol: dict | None = None, n: int = 4) -> Path:
    backend = scripted_backend("one")
    backend["env"].update(env)
    recipe = write_study(tmp_path, [backend], n=n, protocol=protocol)
    data = __import__("yaml").safe_load(recipe.read_text())
    data["workloads"][0]["load"] = load
    recipe.write_text(__import__("yaml").safe_dump(data, sort_keys=False))
    return recipe


def _study(tmp_path: Path, recipe: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return invoke("study", "--recipe", str(recipe), "--out", str(tmp_path / "runs"), timeout=timeout)


def test_a_url_on_port_0_is_refused_by_plan_and_study(tmp_path):
    recipe = write_study(tmp_path, [{"name": "theirs", "url": "http://127.0.0.1:0"}])
    for task in ("plan", "study"):
        line = one_error_line(invoke(task, "--recipe", str(recipe), "--out", str(tmp_path / f"out-{task}"))
                              if task == "study" else invoke(task, "--recipe", str(recipe)))
        assert "port 0" in line and "1 to 65535" in line, line
    assert not (tmp_path / "out-study").exists()


def test_an_absurd_queue_time_header_is_recorded_absent_and_the_study_completes(tmp_path):
    recipe = _load_study(tmp_path, {"SCRIPTED_HEADER": "X-Queue-Time-Ms: 1e308"}, {"closed": [1]})
    proc = _study(tmp_path, recipe)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = RunDir.open(proc.stdout.strip().splitlines()[-1])
    timed = [r for r in read_rows(run.rows_path) if r.level is not None]
    assert timed and all(r.ok and r.server_queue_ms is None for r in timed)
    servers = servers_of(run)
    assert servers is not None and servers.backends["one"].queue_times_refused == len(timed)
    assert "X-Queue-Time-Ms value(s) longer than their request" in proc.stderr


def test_sigterm_in_load_mode_ends_within_seconds_not_a_request_timeout(tmp_path):
    env = {"SCRIPTED_FAULT": "slow", "SCRIPTED_AFTER": "3", "SCRIPTED_SLOW_S": "40"}
    recipe = _load_study(tmp_path, env, {"closed": [2]}, protocol={"request_timeout_s": 60.0})
    proc = subprocess.Popen([*INVOKE, "study", "--recipe", str(recipe), "--out", str(tmp_path / "runs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "runs").glob("*/logs/one.log")) and time.monotonic() < deadline:
            time.sleep(0.1)
        (run_path,) = list((tmp_path / "runs").iterdir())
        wait_for_line(run_path, "logs/one.log", SLOW_STARTED)  # two requests in flight, each 40 s long
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        _out, err = proc.communicate(timeout=90)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 20, f"the study took {took:.1f} s to stop after SIGTERM"
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "stopped by SIGTERM" in errors[0], err[-2000:]
    assert RunDir(run_path).state_record().status == "incomplete"


def test_an_open_loop_rate_whose_pass_would_last_hours_is_refused_before_a_run_exists(tmp_path):
    recipe = _load_study(tmp_path, {}, {"open": {"rates_per_s": [0.001], "arrivals": "fixed"}}, n=3)
    line = one_error_line(_study(tmp_path, recipe))
    assert "open-r0.001" in line and "2000 s" in line and "600 s" in line, line
    assert not (tmp_path / "runs").exists()


def test_an_answer_over_the_response_size_limit_fails_its_request_clearly(tmp_path):
    backend = scripted_backend("one")
    backend["env"]["SCRIPTED_PAD_BYTES"] = str(3 << 20)
    recipe = write_study(tmp_path, [backend], n=2, protocol={"max_response_bytes": 1 << 20})
    proc = _study(tmp_path, recipe)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]  # the console log is stderr too
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    line = errors[0]
    assert "first inference" in line and "larger than max_response_bytes (1048576)" in line, line
    (run_path,) = list((tmp_path / "runs").iterdir())
    assert RunDir(run_path).state_record().status == "incomplete"
    rows = [json.loads(x) for x in (run_path / "rows.jsonl").read_text().splitlines()]
    assert rows and "larger than max_response_bytes" in rows[0]["error"]
