"""results/statistics.py: every statistic checked against values computed by hand from synthetic rows."""

from __future__ import annotations

import json
import math

import pytest

from openjev_repro.errors import EvidenceError
from openjev_repro.evidence.recipe import parse_recipe
from openjev_repro.evidence.rows import Row
from openjev_repro.results.row_table import RowTable
from openjev_repro.results.statistics import (
    bootstrap_mean_diff_ci,
    latency_stats,
    p95_jevbench,
    p95_nearest_rank,
    summarize,
    token_bucket,
)

RECIPE = """\
format_version: 1
study: {id: synthetic, date: 2026-11-01, purpose: unit tests}
inputs:
  root: .
  files: [{path: requests.jsonl, sha256: "%s"}]
workloads:
  - {name: mixed, requests: requests.jsonl}
  - {name: fixed, requests: requests.jsonl, repeat: 3, feasibility_passes: 0, measured_passes: 1}
backends:
  - {name: hf, command: [x], description: "Raw HF"}
  - {name: native, command: [x]}
  - {name: fast, command: [x]}
protocol: {feasibility_passes: 1, measured_passes: 2}
gates:
  - {name: speed-ok, kind: mean_reduction, workload: mixed, baseline: hf, candidate: native,
     min_percent: 50, disjoint_ranges: true, every_pass: true}
  - {name: speed-too-much, kind: mean_reduction, workload: mixed, baseline: hf, candidate: native, min_percent: 80}
  - {name: speed-overlap, kind: mean_reduction, workload: mixed, baseline: native, candidate: fast,
     min_percent: -100, disjoint_ranges: true}
  - {name: speed-errors, kind: mean_reduction, workload: mixed, baseline: hf, candidate: fast, min_percent: 10}
  - {name: delta-ok, kind: max_probability_delta, workload: mixed, a: hf, b: native, max: 0.2}
  - {name: delta-bad, kind: max_probability_delta, workload: mixed, a: hf, b: native, max: 0.1}
  - {name: decisions-bad, kind: decisions_unchanged, workload: mixed, a: hf, b: native}
  - {name: decisions-ok, kind: decisions_unchanged, workload: fixed, a: hf, b: native}
  - {name: stable-hf, kind: probabilities_stable, workload: mixed, backend: hf}
  - {name: stable-native, kind: probabilities_stable, workload: mixed, backend: native}
  - {name: traces, kind: external, evidence: nsys traces}
""" % ("0" * 64)

IDS = ["c1", "c2", "c3", "c4"]
TOKENS = [100, 800, 2500, 300]
LABELS = ["yes", "no", "yes", "no"]


def recipe():
    return parse_recipe(RECIPE)


def make_pass(backend, workload, phase, pass_index, latencies_ms, probs, *, ids=IDS, tokens=TOKENS,
              labels=LABELS, errors=(), decisions=None, t0=0):
    """Rows of one pass; latency given in ms, stored as integer ns like the client does."""
    rows, clock = [], t0
    # tokens and labels default to the four mixed cases' values; a shorter pass takes the first ones
    for seq, (cid, ms, p, tok, lab) in enumerate(zip(ids, latencies_ms, probs, tokens, labels, strict=False)):
        start = clock + 1_000_000
        end = start + round(ms * 1_000_000)
        clock = end
        failed = seq in errors
        decision = None if failed else (decisions[seq] if decisions else ("yes" if p >= 0.5 else "no"))
        rows.append(Row(id=cid, backend=backend, workload=workload, phase=phase, pass_index=pass_index, seq=seq,
                        start_ns=start, end_ns=end, status=None if failed else 200,
                        body_sha256=None if failed else "ab" * 32, probability=None if failed else p,
                        decision=decision, label=lab, input_tokens=None if failed else tok,
                        error="connection reset" if failed else None))
    return rows


HF_P = [0.9, 0.2, 0.6, 0.4]
NATIVE_P = [0.91, 0.2, 0.45, 0.4]
FAST_P = [0.9, 0.2, 0.6, 0.4]


def study_rows():
    rows = []
    # hf: a first inference and warm-up (excluded), feasibility, two measured passes.
    rows += make_pass("hf", "mixed", "first", 1, [500], [0.9], ids=["c3"], tokens=[2500], labels=["yes"])
    rows += make_pass("hf", "mixed", "warmup", 1, [400, 300], [0.6, 0.9], ids=["c3", "c1"])
    rows += make_pass("hf", "mixed", "feasibility", 1, [50, 50, 50, 50], HF_P)
    rows += make_pass("hf", "mixed", "measured", 1, [10, 20, 30, 40], HF_P)
    rows += make_pass("hf", "mixed", "measured", 2, [12, 22, 32, 42], HF_P)
    # native: feasibility probability of c2 differs from its measured one -> not stable
    rows += make_pass("native", "mixed", "feasibility", 1, [9, 9, 9, 9], [0.91, 0.2000001, 0.45, 0.4])
    rows += make_pass("native", "mixed", "measured", 1, [2, 4, 6, 8], NATIVE_P)
    rows += make_pass("native", "mixed", "measured", 2, [3, 5, 7, 9], NATIVE_P)
    # fast: one failed request in measured pass 2
    rows += make_pass("fast", "mixed", "feasibility", 1, [9, 9, 9, 9], FAST_P)
    rows += make_pass("fast", "mixed", "measured", 1, [3, 5, 7, 9], FAST_P)
    rows += make_pass("fast", "mixed", "measured", 2, [2, 4, 6, 8], FAST_P, errors=(3,))
    # fixed workload: one case id repeated three times; pairs by (id, seq)
    fixed = {"ids": ["f1"] * 3, "tokens": [107] * 3, "labels": ["yes"] * 3}
    rows += make_pass("hf", "fixed", "measured", 1, [20, 20, 21], [0.7, 0.7, 0.7], **fixed)
    rows += make_pass("native", "fixed", "measured", 1, [19, 19, 19], [0.7, 0.75, 0.7], **fixed)
    rows += make_pass("fast", "fixed", "measured", 1, [18, 18, 18], [0.7, 0.7, 0.4], **fixed)
    return rows


@pytest.fixture(scope="module")
def summary():
    return summarize(study_rows(), recipe()).to_json()


def gate(summary, name):
    return next(g for g in summary["gates"] if g["name"] == name)


# --- helpers ---------------------------------------------------------------------------


def test_p95_rules_for_74_values_pick_70th_and_71st():
    values = [float(v) for v in range(74, 0, -1)]  # 74..1, unsorted on purpose
    assert p95_jevbench(values) == 70.0
    assert p95_nearest_rank(values) == 71.0
    stats = latency_stats(values)
    assert stats.p95_jevbench_ms == 70.0 and stats.p95_nearest_rank_ms == 71.0
    assert stats.p50_ms == 37.5 and stats.mean_ms == 37.5
    assert (stats.min_ms, stats.max_ms, stats.n) == (1.0, 74.0, 74)


def test_p95_rules_agree_when_095n_is_whole():
    values = [float(v) for v in range(1, 21)]
    assert p95_jevbench(values) == 19.0 == p95_nearest_rank(values)


def test_latency_stats_odd_and_empty():
    assert latency_stats([3.0, 1.0, 2.0]).p50_ms == 2.0
    assert latency_stats([5.0]).p95_jevbench_ms == 5.0  # index clamps to the first value
    empty = latency_stats([])
    assert empty.n == 0 and all(v is None for k, v in empty.to_json().items() if k != "n")


def test_mean_is_exactly_rounded_and_order_independent():
    values = [0.1] * 10 + [1e16, -1e16]
    assert latency_stats(values).mean_ms == math.fsum(values) / 12
    assert latency_stats(list(reversed(values))).mean_ms == latency_stats(values).mean_ms


def test_token_buckets_edges():
    assert [token_bucket(t) for t in (499, 500, 2000, 2001, None)] == ["<500", "500-2000", "500-2000", ">2000", None]


def test_bootstrap_is_seeded_and_brackets_the_difference():
    # values off a grid, so that two seeds cannot land on the same percentile by coincidence
    a = [10.0 + (i % 7) + math.sin(i) / 10 for i in range(60)]
    b = [5.0 + (i % 5) + math.cos(i) / 10 for i in range(60)]
    lo, hi = bootstrap_mean_diff_ci(a, b, seed=7, n_boot=2000)
    assert (lo, hi) == bootstrap_mean_diff_ci(a, b, seed=7, n_boot=2000)
    assert lo < (sum(b) / 60 - sum(a) / 60) < hi < 0
    assert bootstrap_mean_diff_ci(a, b, seed=8, n_boot=2000) != (lo, hi)
    with pytest.raises(ValueError):
        bootstrap_mean_diff_ci([], b, seed=1)


# --- per backend -----------------------------------------------------------------------


def test_per_pass_statistics(summary):
    hf = summary["workloads"]["mixed"]["backends"]["hf"]
    p1, p2 = hf["measured"]
    assert p1 == {"pass": 1, "requests": 4, "errors": 0, "n": 4, "mean_ms": 25.0, "p50_ms": 25.0,
                  "p95_jevbench_ms": 30.0, "p95_nearest_rank_ms": 40.0, "min_ms": 10.0, "max_ms": 40.0}
    assert (p2["mean_ms"], p2["p50_ms"], p2["max_ms"]) == (27.0, 27.0, 42.0)
    assert hf["feasibility"][0]["mean_ms"] == 50.0 and hf["feasibility"][0]["pass"] == 1
    assert hf["overall"]["mean_ms"] == 26.0 and hf["overall"]["n"] == 8
    assert hf["overall"]["p50_ms"] == 26.0  # median of 10,12,20,22,30,32,40,42
    assert hf["overall"]["p95_jevbench_ms"] == 40.0  # int(7.6) - 1 = 6 -> 7th of 8
    assert hf["overall"]["p95_nearest_rank_ms"] == 42.0
    assert hf["pass_mean_range_ms"] == [25.0, 27.0]
    assert hf["excluded_requests"] == {"first": 1, "warmup": 2}


def test_failed_rows_are_counted_but_not_timed(summary):
    fast = summary["workloads"]["mixed"]["backends"]["fast"]
    p2 = fast["measured"][1]
    assert (p2["requests"], p2["errors"], p2["n"]) == (4, 1, 3)
    assert p2["mean_ms"] == 4.0 and p2["max_ms"] == 6.0
    assert fast["overall"]["errors"] == 1 and fast["overall"]["n"] == 7
    assert fast["overall"]["mean_ms"] == 36 / 7


def test_correctness_uses_recomputed_decisions_and_flags_mismatches():
    rows = make_pass("hf", "mixed", "measured", 1, [1, 1, 1, 1], [0.5, 0.49, 0.9, 0.1],
                     decisions=["no", "no", "yes", "no"])
    s = summarize(rows, recipe()).to_json()["workloads"]["mixed"]["backends"]["hf"]
    # labels yes,no,yes,no; recomputed decisions yes,no,yes,no -> 4 correct despite the bad record
    assert (s["correct"], s["labelled"], s["unanswered"]) == (4, 4, 0)
    assert s["decision_mismatches"] == [{"id": "c1", "seq": 0, "phase": "measured", "pass": 1,
                                         "recorded": "no", "recomputed": "yes"}]


def test_correct_counts(summary):
    b = summary["workloads"]["mixed"]["backends"]
    assert (b["hf"]["correct"], b["hf"]["labelled"]) == (4, 4)
    assert (b["native"]["correct"], b["native"]["labelled"]) == (3, 4)  # c3 0.45 -> no, label yes
    assert b["fast"]["correct_by_pass"] == [4, 3]  # failed request is labelled but unanswered
    assert b["hf"]["decision_mismatches"] == []


def test_stability(summary):
    b = summary["workloads"]["mixed"]["backends"]
    assert b["hf"]["probabilities_stable"] is True and b["hf"]["stability_passes"] == 3
    assert b["native"]["probabilities_stable"] is False
    assert b["native"]["stability_changed_ids"] == ["c2"]
    assert b["fast"]["probabilities_stable"] is False and b["fast"]["stability_errors"] == 1
    assert summary["workloads"]["fixed"]["backends"]["hf"]["probabilities_stable"] is None  # one pass only


# --- comparisons -----------------------------------------------------------------------


def comparison(summary, workload, base, cand):
    return next(c for c in summary["workloads"][workload]["comparisons"]
                if (c["baseline"], c["candidate"]) == (base, cand))


def test_comparisons_cover_every_pair_in_recipe_order(summary):
    pairs = [(c["baseline"], c["candidate"]) for c in summary["workloads"]["mixed"]["comparisons"]]
    assert pairs == [("hf", "native"), ("hf", "fast"), ("native", "fast")]


def test_speedup_percent_lower_and_disjointness(summary):
    c = comparison(summary, "mixed", "hf", "native")
    assert c["speedup"] == 26.0 / 5.5
    assert c["percent_lower"] == (26.0 - 5.5) / 26.0 * 100
    assert c["disjoint_ranges"] is True and c["every_pass_lower"] is True
    nf = comparison(summary, "mixed", "native", "fast")
    assert nf["disjoint_ranges"] is False  # native [5, 6] vs fast [4, 6]
    assert nf["percent_lower"] == (5.5 - 36 / 7) / 5.5 * 100


def test_agreement_and_probability_deltas(summary):
    c = comparison(summary, "mixed", "hf", "native")
    assert (c["agreement"], c["n"], c["differing_ids"]) == (3, 4, ["c3"])
    assert c["max_probability_delta"] == abs(0.6 - 0.45)
    assert c["max_probability_delta_by_tokens"] == {"<500": abs(0.9 - 0.91), "500-2000": 0.0, ">2000": abs(0.6 - 0.45)}
    hf_fast = comparison(summary, "mixed", "hf", "fast")
    assert (hf_fast["agreement"], hf_fast["n"], hf_fast["max_probability_delta"]) == (4, 4, 0.0)


def test_repeated_ids_pair_by_id_and_seq(summary):
    c = comparison(summary, "fixed", "hf", "native")
    assert (c["agreement"], c["n"], c["unpaired"]) == (3, 3, 0)
    assert c["max_probability_delta"] == abs(0.7 - 0.75)
    assert c["max_probability_delta_by_tokens"] == {"<500": abs(0.7 - 0.75), "500-2000": None, ">2000": None}
    f = comparison(summary, "fixed", "hf", "fast")
    assert (f["agreement"], f["differing_ids"]) == (2, ["f1"])


# --- gates -----------------------------------------------------------------------------


def test_gates(summary):
    assert [g["name"] for g in summary["gates"]][:2] == ["speed-ok", "speed-too-much"]
    expect = {
        "speed-ok": True, "speed-too-much": False, "speed-overlap": False, "speed-errors": False,
        "delta-ok": True, "delta-bad": False, "decisions-bad": False, "decisions-ok": True,
        "stable-hf": True, "stable-native": False, "traces": None,
    }
    assert {g["name"]: g["passed"] for g in summary["gates"]} == expect
    assert gate(summary, "traces")["evaluated"] is False
    assert all(g["evaluated"] for g in summary["gates"] if g["kind"] != "external")
    assert "disjoint: False" in gate(summary, "speed-overlap")["detail"]
    assert "c3" in gate(summary, "decisions-bad")["detail"]


def test_gate_over_data_with_errors_says_so(summary):
    g = gate(summary, "speed-errors")
    # fast is far faster than hf (would pass), but a failed request keeps the gate from passing
    assert g["errors"] == 1 and g["passed"] is False
    assert "1 failed or missing requests" in g["detail"]


def test_missing_backend_data_fails_gates_not_crashes():
    rows = [r for r in study_rows() if r.backend != "native"]
    s = summarize(rows, recipe()).to_json()
    assert gate(s, "speed-ok")["passed"] is False
    assert gate(s, "delta-ok")["passed"] is False and gate(s, "delta-ok")["errors"] == 4
    assert s["workloads"]["mixed"]["backends"]["native"]["measured"][0]["mean_ms"] is None


# --- the whole summary -----------------------------------------------------------------


def test_summary_is_strict_json_and_deterministic(summary):
    text = json.dumps(summary, sort_keys=True, allow_nan=False)
    again = summarize(study_rows(), recipe()).to_json()
    assert json.loads(text) == again
    assert summary["format_version"] == 1 and summary["study_id"] == "synthetic"
    assert set(summary["p95_rules"]) == {"p95_jevbench_ms", "p95_nearest_rank_ms"}


def test_rows_in_another_order_give_the_same_summary(summary):
    assert summarize(list(reversed(study_rows())), recipe()).to_json() == summary


def test_unknown_backend_or_duplicate_row_is_an_evidence_error():
    rows = make_pass("other", "mixed", "measured", 1, [1], [0.5], ids=["c1"])
    with pytest.raises(EvidenceError, match="does not declare"):
        summarize(rows, recipe()).to_json()
    dup = make_pass("hf", "mixed", "measured", 1, [1], [0.5], ids=["c1"])
    with pytest.raises(EvidenceError, match="share"):
        summarize(dup + dup, recipe()).to_json()


def test_mean_reduction_fails_on_overlapping_pass_ranges_alone():
    rec = parse_recipe(RECIPE.replace("min_percent: 50", "min_percent: 5"))
    rows = make_pass("hf", "mixed", "measured", 1, [10, 20, 30, 40], HF_P)  # mean 25
    rows += make_pass("hf", "mixed", "measured", 2, [12, 22, 32, 42], HF_P)  # mean 27
    rows += make_pass("native", "mixed", "measured", 1, [16, 18, 20, 26], NATIVE_P)  # mean 20
    rows += make_pass("native", "mixed", "measured", 2, [20, 24, 28, 32], NATIVE_P)  # mean 26
    s = summarize(rows, rec).to_json()
    g = gate(s, "speed-ok")
    assert g["errors"] == 0 and g["passed"] is False  # 11.5% >= 5% but [20, 26] overlaps [25, 27]
    assert "disjoint: False" in g["detail"] and "every baseline pass mean: False" in g["detail"]
    c = comparison(s, "mixed", "hf", "native")
    assert c["percent_lower"] == (26.0 - 23.0) / 26.0 * 100 and c["disjoint_ranges"] is False


def test_no_rows_pass_no_gate():
    s = summarize([], recipe()).to_json()
    assert {g["name"]: g["passed"] for g in s["gates"]} == {
        g: (None if g == "traces" else False) for g in [g["name"] for g in s["gates"]]}
    assert s["workloads"]["mixed"]["backends"]["hf"]["probabilities_stable"] is None
    assert all(c["speedup"] is None for c in s["workloads"]["mixed"]["comparisons"])



def _row(backend, workload, phase, pass_index, seq, ms, failed=False):
    return Row(id=f"c{seq}", backend=backend, workload=workload, phase=phase, pass_index=pass_index, seq=seq,
               start_ns=0, end_ns=round(ms * 1e6), status=None if failed else 200, body_sha256=None,
               probability=None if failed else 0.5, decision=None, label=None, input_tokens=None,
               error="reset" if failed else None)


def test_rows_grouped_by_pass_once():
    """RowTable.by_pass: (workload, backend) -> pass -> indices in seq order, first-seen order at each level."""
    rows = [_row("b2", "w", "measured", 2, 1, 5.0), _row("b2", "w", "measured", 2, 0, 6.0),
            _row("b1", "w", "measured", 1, 0, 7.0), _row("b2", "w", "measured", 1, 0, 8.0, failed=True),
            _row("b2", "w", "feasibility", 1, 0, 9.0)]
    t = RowTable.from_rows(rows)
    grouped = t.by_pass("measured")
    assert list(grouped) == [("w", "b2"), ("w", "b1")]
    assert list(grouped[("w", "b2")]) == [2, 1]
    assert grouped[("w", "b2")][2].tolist() == [1, 0]  # seq 0 (row 1) before seq 1 (row 0)
    assert grouped[("w", "b1")][1].tolist() == [2]
    assert list(t.by_pass("measured", ok_only=True)[("w", "b2")]) == [2]  # pass 1's only row failed
    assert {k: {i: v.tolist() for i, v in p.items()} for k, p in t.by_pass("feasibility").items()} == {("w", "b2"): {1: [4]}}


def test_decisions_gate_min_margin_excludes_close_cases_and_lists_them():
    # c3 flips (hf 0.6 -> native 0.45): hf's margin |0.6 - 0.5| is 0.1
    extra = """
  - {name: margin-covers, kind: decisions_unchanged, workload: mixed, a: hf, b: native, min_margin: 0.1}
  - {name: margin-short, kind: decisions_unchanged, workload: mixed, a: hf, b: native, min_margin: 0.05}
"""
    s = summarize(study_rows(), parse_recipe(RECIPE + extra)).to_json()
    covers, short = gate(s, "margin-covers"), gate(s, "margin-short")
    assert covers["passed"] is True and "excluded by the margin: c3 (margin 0.1000)" in covers["detail"]
    assert short["passed"] is False and "differing there: c3 (margin 0.1000)" in short["detail"]
    assert "excluded" not in short["detail"]
    assert gate(s, "decisions-bad")["passed"] is False   # no min_margin: every decision counts


@pytest.mark.parametrize("value", ["-0.1", "0.6", ".nan", "'x'"])
def test_decisions_gate_min_margin_refuses_bad_values(value):
    extra = f"\n  - {{name: m, kind: decisions_unchanged, workload: mixed, a: hf, b: native, min_margin: {value}}}\n"
    with pytest.raises(Exception, match="min_margin"):
        parse_recipe(RECIPE + extra)
