"""compare per load level: figures, bootstrap interval and limits at every level; other runs unchanged."""

from __future__ import annotations

import dataclasses

from test_load_statistics import MS, run_rows
from test_load_verify import signed_load_run

from openjev_repro.audit.compare import compare_rows, compare_runs, to_markdown
from openjev_repro.evidence.rows import Row


def _slower_at(rows: list[Row], level: str, extra_ms: int) -> list[Row]:
    """The same rows with every answer of one level `extra_ms` later."""
    return [dataclasses.replace(r, end_ns=r.end_ns + extra_ms * MS) if r.level == level and r.end_ns else r
            for r in rows]


def test_each_level_is_compared_on_its_own():
    base = run_rows("a")
    result = compare_rows(base, _slower_at(base, "closed-c2", 30), seed=7).to_json()
    (pair,) = result["pairs"]
    assert [lv["level"] for lv in pair["levels"]] == ["closed-c1", "closed-c2", "open-r10"]
    assert pair["unmatched_levels"] == []
    c1, c2, op = pair["levels"]
    low, high = c1["bootstrap"]["mean_diff_ci95_ms"]
    assert c1["metrics"]["mean_ms"]["ratio"] == 1.0 and low < 0 < high
    assert c2["metrics"]["mean_ms"]["delta"] == 30.0  # (20 + 40 + 40) / 3 -> + 30 ms
    assert c2["metrics"]["throughput_per_s"]["baseline"] == 3 / 0.07
    assert c2["baseline"]["errors"] == 1 and c2["bootstrap"]["seed"] == 7
    assert op["latency_from"] == "schedule" and op["baseline"]["late_sends"] == 1
    assert op["metrics"]["p99_ms"]["baseline"] == 40.0  # from the schedule, not from the late send


def test_a_regression_at_one_level_fails_the_limit_there():
    """The pooled mean (ratio 1.64) passes a 1.7 limit; the open level alone (2.78) does not."""
    base = [r for r in run_rows("a") if r.error is None]
    cand = _slower_at(base, "open-r10", 40)
    result = compare_rows(base, cand, tolerances={"format_version": 1, "max_mean_ratio": 1.7})
    assert result.pairs[0].overall.mean_ms.ratio < 1.7
    assert result.verdict.passed is False
    assert result.verdict.failures == ["mixed/a→a level open-r10: mean ratio 2.778 exceeds 1.7"]
    assert "mixed/a→a level closed-c1: mean ratio <= 1.7" in result.verdict.checked


def test_the_markdown_has_a_table_per_level():
    base = run_rows("a")
    text = to_markdown(compare_rows(base, _slower_at(base, "closed-c2", 30), seed=7))
    assert "Per load level (open loop: latency from the scheduled send):" in text
    row = next(line for line in text.splitlines() if line.startswith("| closed-c2 |"))
    assert row.split(" | ")[1] == f"{100 / 3:.3f} → {100 / 3 + 30:.3f}"


def test_runs_without_levels_compare_as_before():
    plain = [dataclasses.replace(r, level=None, scheduled_ns=None, connection=None, server_queue_ms=None)
             for r in run_rows("a") if r.level == "closed-c1"]
    result = compare_rows(plain, plain)
    assert "levels" not in result.to_json()["pairs"][0] and "Per load level" not in to_markdown(result)


def test_two_signed_load_runs_compare_level_by_level(tmp_path):
    base, _, _ = signed_load_run(tmp_path / "one")
    cand, _, _ = signed_load_run(tmp_path / "two")
    result = compare_runs(base.path, cand.path, tolerances={"format_version": 1, "max_p95_ratio": 1.01})
    assert [len(p.levels or []) for p in result.pairs] == [3, 3]
    assert result.verdict.failures == [
        "mixed/a→a level closed-c2: failed requests (baseline 1, candidate 1)",
        "mixed/a→a: failed requests in the measured passes ({'baseline': 1, 'candidate': 1})",
        "mixed/b→b level closed-c2: failed requests (baseline 1, candidate 1)",
        "mixed/b→b: failed requests in the measured passes ({'baseline': 1, 'candidate': 1})"]
