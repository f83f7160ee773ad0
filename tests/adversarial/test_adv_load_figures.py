"""Issue 40 items 1-2 (report side): no figure of a load run hides a stall, and hostile load rows or
gpu.jsonl events are one `error:` line from `invoke report`, never a traceback (exit 70).

The runs are real run directories (rows through RowWriter, state through RunDir); the stall is written
into the rows the way a real open-loop pass records it (tests/test_load_client.py measures one against a
stalling loopback server): requests due during the stall are sent late and answered after it."""

from __future__ import annotations

import json

import pytest
import yaml
from advkit import invoke, one_error_line
from test_load_statistics import RECIPE, run_rows

from openjev_repro.evidence.recipe import parse_recipe
from openjev_repro.evidence.rows import Row, RowWriter
from openjev_repro.evidence.rundir import RunDir
from openjev_repro.results.report import render_report
from openjev_repro.results.statistics import summarize

MS = 1_000_000
OPEN_ONLY = RECIPE.replace("      closed: [2, 1]\n", "")


def _stalled_pass() -> tuple[list[Row], float, float]:
    """One measured open-r10 pass of 20 fixed arrivals (every 100 ms) through a 3 s server stall: the first
    request is answered at 3000 ms; the 19 due meanwhile go out late, at 3000 ms, the k-th answered 10*k ms
    after that. Returns the rows, the mean from the schedule and the mean from the actual send."""
    rows, from_schedule, from_send = [], [], []
    for seq in range(20):
        due = seq * 100
        sent = 0 if seq == 0 else max(due, 3000)
        end = 3000 if seq == 0 else max(due, 3000) + 10 * seq
        rows.append(Row(id=f"c{seq}", backend="a", workload="mixed", phase="measured", pass_index=1, seq=seq,
                        start_ns=sent * MS, end_ns=end * MS, status=200, body_sha256="ab" * 32, probability=0.75,
                        decision="yes", label="yes", input_tokens=10, error=None, level="open-r10",
                        scheduled_ns=due * MS, connection=seq % 8))
        from_schedule.append(end - due)
        from_send.append(end - sent)
    return rows, sum(from_schedule) / 20, sum(from_send) / 20


def test_an_open_loop_runs_pooled_figures_equal_its_levels_and_count_the_stall():
    rows, schedule_mean, send_mean = _stalled_pass()
    # by hand: (3000 + sum over k=1..19 of (3000 - 90 k)) / 20 from the schedule, (3000 + sum of 10 k) / 20 from the send
    assert (schedule_mean, send_mean) == (2145.0, 245.0)  # the send-based mean hides 1.9 s of the stall
    recipe = parse_recipe(OPEN_ONLY)
    summary = summarize(rows, recipe)
    level = summary.load.workloads["mixed"].backends["a"][0]
    pooled = summary.workloads["mixed"]
    assert level.mean_ms == pytest.approx(schedule_mean) and level.latency_from == "schedule"
    assert pooled.backends["a"].overall.mean_ms == level.mean_ms  # the same figure, not 245 ms
    assert pooled.backends["a"].measured[0].mean_ms == level.mean_ms
    assert pooled.pooled.to_json() == {"levels": ["open-r10"], "latency_from": "schedule", "not_pooled": []}
    text = render_report(summary, rows, recipe)
    assert "Overall mean (ms)" not in text and "245.000" not in text
    assert "| a | open-r10 | 10 requests/s, fixed arrivals (open loop); schedule drew 10.00/s | 20 / 20 | 2145.000" in text


def test_a_run_of_closed_and_open_levels_never_pools_the_two_timing_rules():
    recipe = parse_recipe(RECIPE)
    summary = summarize(run_rows("a") + run_rows("b", t0=10**12), recipe)
    wl = summary.workloads["mixed"]
    assert wl.pooled.to_json() == {"levels": ["open-r10"], "latency_from": "schedule",
                                   "not_pooled": ["closed-c1", "closed-c2"]}
    assert [p.index for p in wl.backends["a"].measured] == [5, 6]  # the open level's measured passes only
    assert wl.backends["a"].overall.mean_ms == summary.load.workloads["mixed"].backends["a"][2].mean_ms
    text = render_report(summary, run_rows("a") + run_rows("b", t0=10**12), recipe)
    assert "Overall mean (ms)" not in text and "pool only levels of one timing rule: open-r10" in text


def _run(tmp_path, lines: list[str], gpu: list[str] | None = None) -> RunDir:
    run = RunDir.create(tmp_path / "runs", "load-synthetic")
    run.file("recipe.yaml").write_text(yaml.safe_dump(yaml.safe_load(RECIPE), sort_keys=False))
    with RowWriter(run.rows_path) as writer:
        for row in run_rows("a") + run_rows("b", t0=10**12):
            writer.write(row)
    with open(run.rows_path, "a", encoding="utf-8") as out:
        out.writelines(line + "\n" for line in lines)
    if gpu is not None:
        header = {"format_version": 1, "kind": "header", "available": True, "driver": "nvml", "period_s": 0.1}
        run.file("gpu.jsonl").write_text("\n".join([json.dumps(header), *gpu]) + "\n")
    run.update_state(status="complete", attempted=["study"], finished=["study"])
    return run


def _row(**edit) -> str:
    return json.dumps({**json.loads(run_rows("a")[-1].to_json()), "seq": 7, **edit})


@pytest.mark.parametrize(("edit", "field"), [
    ({"scheduled_ns": 2**63}, "$.scheduled_ns"),
    ({"connection": 2**63}, "$.connection"),
    ({"server_queue_ms": 1e308}, "$.server_queue_ms"),
])
def test_a_load_row_out_of_bounds_is_one_error_line_from_report(tmp_path, edit, field):
    run = _run(tmp_path, [_row(**edit)])
    line = one_error_line(invoke("report", "--run", str(run.path), "--out", str(tmp_path / "out"), timeout=120))
    assert line.startswith(f"error: {run.rows_path}:") and "not a valid row" in line and field in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("event", "says"), [
    ({"kind": "sample", "power_w": 300.0}, "gpu.jsonl line 2: a sample event without t_ns"),
    ({"kind": "begin", "t_ns": 5}, "gpu.jsonl line 2: a begin event without a label"),
])
def test_a_gpu_event_without_its_time_or_label_is_one_error_line_from_report(tmp_path, event, says):
    run = _run(tmp_path, [], gpu=[json.dumps(event)])
    line = one_error_line(invoke("report", "--run", str(run.path), "--out", str(tmp_path / "out"), timeout=120))
    assert line == f"error: {says}", line
