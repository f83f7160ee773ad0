"""results/load.py: per-level figures of a load run, checked against values computed by hand."""

from __future__ import annotations

import json

from openjev_repro.evidence.recipe import parse_recipe
from openjev_repro.evidence.rows import Row
from openjev_repro.results.load import LATE_AFTER_MS, load_summary
from openjev_repro.results.row_table import RowTable
from openjev_repro.results.statistics import summarize

RECIPE = """\
format_version: 1
study: {id: load-synthetic, date: 2026-12-02, purpose: unit tests of load levels}
inputs:
  root: .
  files: [{path: requests.jsonl, sha256: "%s"}]
workloads:
  - name: mixed
    requests: requests.jsonl
    load:
      closed: [2, 1]
      open: {rates_per_s: [10.0], arrivals: fixed}
      latency_bound_ms: 25
backends:
  - {name: a, command: [x]}
  - {name: b, command: [x]}
protocol: {feasibility_passes: 1, measured_passes: 2}
""" % ("0" * 64)

PLAIN = RECIPE.replace("""    load:
      closed: [2, 1]
      open: {rates_per_s: [10.0], arrivals: fixed}
      latency_bound_ms: 25
""", "")

MS = 1_000_000


def sends(backend, level, phase, pass_index, timings, *, schedule=None, errors=(), queue=None, t0=0):
    """Rows of one pass: timings [(start ms, end ms)] from t0; schedule: scheduled send ms per request."""
    rows = []
    for seq, (start, end) in enumerate(timings):
        failed = seq in errors
        rows.append(Row(id=f"c{seq}", backend=backend, workload="mixed", phase=phase, pass_index=pass_index, seq=seq,
                        start_ns=t0 + start * MS, end_ns=t0 + end * MS, status=None if failed else 200,
                        body_sha256=None if failed else "ab" * 32, probability=None if failed else 0.75,
                        decision=None if failed else "yes", label="yes", input_tokens=None if failed else 10,
                        error="connection reset" if failed else None, level=level,
                        scheduled_ns=None if schedule is None else t0 + schedule[seq] * MS,
                        connection=seq % 2, server_queue_ms=None if queue is None else queue[seq]))
    return rows


def run_rows(backend="a", t0=0):
    """closed-c1 passes 1-3 (feasibility 1), closed-c2 4-6 (feasibility 2), open-r10 7-9 (feasibility 3)."""
    rows = []
    rows += sends(backend, "closed-c1", "feasibility", 1, [(0, 50), (50, 90)], t0=t0)
    rows += sends(backend, "closed-c1", "measured", 1, [(0, 10), (10, 30)], t0=t0 + 1000 * MS)
    rows += sends(backend, "closed-c1", "measured", 2, [(0, 20), (20, 60)], t0=t0 + 2000 * MS)
    rows += sends(backend, "closed-c2", "feasibility", 2, [(0, 50), (0, 90)], t0=t0 + 3000 * MS)
    rows += sends(backend, "closed-c2", "measured", 3, [(0, 20), (0, 30)], t0=t0 + 4000 * MS, errors=(1,))
    rows += sends(backend, "closed-c2", "measured", 4, [(0, 40), (0, 40)], t0=t0 + 5000 * MS)
    schedule = [0, 100]
    rows += sends(backend, "open-r10", "feasibility", 3, [(0, 10), (100, 110)], schedule=schedule, t0=t0 + 6000 * MS)
    # pass 5: the second request is sent 30 ms late and answered 10 ms after its send: 40 ms from schedule
    rows += sends(backend, "open-r10", "measured", 5, [(0, 10), (130, 140)], schedule=schedule, t0=t0 + 7000 * MS,
                  queue=[0.5, 1.5])
    rows += sends(backend, "open-r10", "measured", 6, [(0, 20), (100, 120)], schedule=schedule, t0=t0 + 8000 * MS,
                  queue=[2.5, 3.5])
    return rows


def test_closed_levels_measure_from_the_send_and_sum_pass_durations():
    load = load_summary(RowTable.from_rows(run_rows()), parse_recipe(RECIPE)).to_json()
    assert load is not None
    wl = load["workloads"]["mixed"]
    assert [lv["level"] for lv in wl["levels"]] == ["closed-c1", "closed-c2", "open-r10"]
    assert wl["levels"][1] == {"level": "closed-c2", "mode": "closed", "concurrency": 2, "rate_per_s": None,
                               "arrivals": None}
    c1, c2, _ = wl["backends"]["a"]
    assert c1["latency_from"] == "send" and c1["schedule"] is None and c1["server_queue"] is None
    assert (c1["n"], c1["requests"], c1["errors"]) == (4, 4, 0)  # the feasibility pass is excluded
    assert c1["mean_ms"] == (10 + 20 + 20 + 40) / 4 and c1["p50_ms"] == 20.0 and c1["max_ms"] == 40.0
    assert c1["p99_ms"] == 40.0 and c1["p95_jevbench_ms"] == 20.0 and c1["p95_nearest_rank_ms"] == 40.0
    assert [p["pass"] for p in c1["passes"]] == [1, 2] and c1["pass_mean_range_ms"] == [15.0, 30.0]
    assert c1["duration_s"] == 0.03 + 0.06 and c1["throughput_per_s"] == 4 / (0.03 + 0.06)
    assert c1["within_bound"] == 3 and c1["goodput_per_s"] == 3 / (0.03 + 0.06)  # 40 ms > the 25 ms bound
    assert c1["connections"] == 2
    # closed-c2: one failed request is counted, excluded from latencies, and not a decision per second
    assert (c2["requests"], c2["errors"], c2["n"]) == (4, 1, 3)
    assert c2["passes"][0] == {"pass": 3, "requests": 2, "errors": 1, "mean_ms": 20.0, "duration_s": 0.03,
                               "throughput_per_s": 1 / 0.03}
    assert c2["throughput_per_s"] == 3 / (0.03 + 0.04)


def test_open_levels_measure_from_the_schedule_and_count_late_sends():
    load = load_summary(RowTable.from_rows(run_rows()), parse_recipe(RECIPE)).to_json()
    assert load is not None
    op = load["workloads"]["mixed"]["backends"]["a"][2]
    assert op["latency_from"] == "schedule"
    # pass 5: 10 ms and 140 - 100 = 40 ms (not the 10 ms from its late send); pass 6: 20 and 20 ms
    assert op["mean_ms"] == 90 / 4 and op["max_ms"] == 40.0 and op["within_bound"] == 3
    assert op["schedule"] == {"scheduled": 4, "late_sends": 1, "max_lag_ms": 30.0, "mean_lag_ms": 7.5,
                              "scheduled_rate_per_s": 10.0}  # 2 passes x 2 sends 100 ms apart: 2 gaps in 0.2 s
    assert op["duration_s"] == 0.14 + 0.12  # first scheduled send to last response, per pass
    assert op["server_queue"] == {"n": 4, "mean_ms": 2.0, "p95_jevbench_ms": 2.5}


def test_a_lag_within_the_tolerance_is_not_late():
    rows = run_rows()
    shifted = [r if r.scheduled_ns is None or r.seq == 0 else
               Row(**{**r.__dict__, "start_ns": r.scheduled_ns + int(LATE_AFTER_MS * MS)}) for r in rows]
    load = load_summary(RowTable.from_rows(shifted), parse_recipe(RECIPE)).to_json()
    assert load is not None
    assert load["workloads"]["mixed"]["backends"]["a"][2]["schedule"]["late_sends"] == 0


def test_the_summary_has_a_load_section_only_for_load_recipes():
    rows = run_rows("a") + run_rows("b", t0=10**12)
    summary = summarize(rows, parse_recipe(RECIPE)).to_json()
    assert set(summary["load"]["workloads"]["mixed"]["backends"]) == {"a", "b"}
    json.dumps(summary, allow_nan=False)  # strict JSON: no NaN anywhere
    plain = [Row(**{**r.__dict__, "level": None, "scheduled_ns": None, "connection": None, "server_queue_ms": None})
             for r in rows if r.level == "closed-c1"]
    assert "load" not in summarize(plain, parse_recipe(PLAIN)).to_json()


def test_a_level_without_rows_has_no_figures():
    rows = [r for r in run_rows() if r.level != "closed-c2"]
    load = load_summary(RowTable.from_rows(rows), parse_recipe(RECIPE)).to_json()
    assert load is not None
    c2 = load["workloads"]["mixed"]["backends"]["a"][1]
    assert (c2["n"], c2["requests"], c2["mean_ms"], c2["throughput_per_s"], c2["passes"]) == (0, 0, None, None, [])


def test_row_order_does_not_change_any_figure():
    rows = run_rows("a") + run_rows("b", t0=10**12)
    recipe = parse_recipe(RECIPE)
    assert load_summary(RowTable.from_rows(rows[::-1]), recipe).to_json() == load_summary(RowTable.from_rows(rows), recipe).to_json()


def test_a_request_that_failed_before_it_was_timed_adds_no_time():
    """The runner records start_ns = end_ns = 0 for a request that got no response (a reset, a refused connect)."""
    def untimed(r: Row) -> Row:
        return Row(**{**r.__dict__, "start_ns": 0, "end_ns": 0, "status": None, "error": "ConnectionResetError"})

    rows = [untimed(r) if r.pass_index in (3, 5) and r.seq == 1 and r.phase == "measured" else r for r in run_rows()]
    load = load_summary(RowTable.from_rows(rows), parse_recipe(RECIPE)).to_json()
    assert load is not None
    _, c2, op = load["workloads"]["mixed"]["backends"]["a"]
    assert c2["passes"][0]["duration_s"] == 0.02 and c2["errors"] == 1
    # open loop: the pass lasts from the first schedule to the last response (10 ms); the unanswered
    # request has no lag (it was never timed) and is counted as an error
    assert op["passes"][0]["duration_s"] == 0.01 and op["errors"] == 1
    assert op["schedule"] == {"scheduled": 3, "late_sends": 0, "max_lag_ms": 0.0, "mean_lag_ms": 0.0,
                              "scheduled_rate_per_s": 10.0}  # the untimed request keeps its scheduled time


def test_passes_whose_spans_overlap_in_a_stall_count_the_overlap_once():
    """A level's passes continue one schedule: after a stall the next pass's first sends are due before the
    previous pass's last response. Pass 5 spans 0-3000 ms, pass 6 2000-4000 ms: the level lasted 4 s, not 5."""
    rows = sends("a", "open-r10", "measured", 5, [(0, 3000), (3000, 3010)], schedule=[0, 100], t0=7000 * MS)
    rows += sends("a", "open-r10", "measured", 6, [(3000, 3500), (3500, 4000)], schedule=[2000, 2100], t0=7000 * MS)
    level = load_summary(RowTable.from_rows(rows), parse_recipe(RECIPE)).to_json()["workloads"]["mixed"]["backends"]["a"][2]
    assert [p["duration_s"] for p in level["passes"]] == [3.01, 2.0]
    assert level["duration_s"] == 4.0 and level["throughput_per_s"] == 1.0
