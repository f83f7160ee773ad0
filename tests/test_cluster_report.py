"""The cross-host report from per-host figures (no Slurm needed): backend_report's totals and failures,
and the Markdown and PNG that collect signs."""

from __future__ import annotations

from pathlib import Path

from openjev_repro.audit.compare import RunComparison, compare_rows
from openjev_repro.cluster.collect import (
    Baseline,
    CollectTolerances,
    CollectVerdict,
    CrossHostSummary,
    Replicate,
    plot_means,
    to_markdown,
)
from openjev_repro.cluster.crosshost import BackendReport, HostMeans, HostRun, backend_report
from openjev_repro.evidence.rows import Row


def _means(mean: float) -> dict:
    return {("w", "b"): HostMeans(mean_ms=mean, pass_means_ms={1: mean - 0.5, 2: mean + 0.5},
                                  pass_range_ms=(mean - 0.5, mean + 0.5))}


def _rows(ms: float, probabilities: list[float]) -> list[Row]:
    return [Row(id=f"c{i}", backend="b", workload="w", phase="measured", pass_index=1, seq=i, start_ns=0,
                end_ns=round(ms * 1e6), status=200, body_sha256="0" * 64, probability=p,
                decision="yes" if p >= 0.5 else "no", label=None, input_tokens=None, error=None)
            for i, p in enumerate(probabilities)]


BASELINE = _rows(10.0, [0.25, 0.375, 0.625, 0.75])


def _comparison(probabilities: list[float], max_mean_ratio: float) -> RunComparison:
    """compare's own result for a candidate 5% slower than the baseline, with these answers."""
    return compare_rows(BASELINE, _rows(10.5, probabilities),
                        tolerances={"format_version": 1, "max_mean_ratio": max_mean_ratio},
                        fingerprints=({"b": "sha256:w"}, {"b": "sha256:w"}))


def _report(cross_tol: dict) -> BackendReport:
    hosts = [HostRun(f"replicate-{k}", f"node{k}", Path(f"/runs/{k}"), []) for k in (1, 2, 3, 4)]
    means = {"replicate-1": _means(10.0), "replicate-2": _means(11.0), "replicate-3": {}, "replicate-4": _means(12.0)}
    comparisons = {"replicate-2": _comparison([0.625, 0.375, 0.375, 0.75], 1.01),  # c0 and c2 flip, delta 0.375
                   "replicate-4": _comparison([0.25, 0.625, 0.625, 0.75], 1.5)}  # c1 flips, delta 0.25
    return backend_report("w", "b", hosts, means, comparisons, cross_tol)


def test_backend_report_sums_the_compared_hosts_and_names_the_limits_crossed() -> None:
    report = _report({"max_relative_range": 0.1, "max_cv": 0.5})
    assert [h.label for h in report.hosts] == ["replicate-1", "replicate-2", "replicate-4"]  # 3 has no rows
    assert not report.hosts[0].compared  # the baseline itself
    assert report.decision_flips == 3 and report.max_abs_probability_delta == 0.375
    assert report.hosts_outside_tolerances == ["replicate-2"]
    assert report.hosts[1].failures == ["w/b→b: mean ratio 1.05 exceeds 1.01"]  # compare's own words
    assert report.cross_host_failures == ["w/b: relative range 0.1818 exceeds 0.1"]
    assert _report({}).cross_host_failures == []


def test_markdown_and_figure_of_a_summary() -> None:
    summary = CrossHostSummary(
        format_version=1, study="s", submission="sub-1", created_utc="2026-12-02T00:00:00Z",
        replicates=[Replicate(label="replicate-1", host="node1", run="/nonexistent", manifest_sha256="0" * 64,
                              verified=True)],
        baseline=Baseline(label="replicate-1", path="/nonexistent", host="node1"),
        tolerances=CollectTolerances(file=None, compare={}, cross_host={"max_cv": 0.01}),
        backends=[_report({"max_cv": 0.01})],
        verdict=CollectVerdict(passed=False, failures=["replicate-2: w/b→b: mean ratio 1.0512345 exceeds 1.01"]))
    text = to_markdown(summary)
    assert text.startswith("# Cross-host report: s\n") and "**Verdict: FAIL**" in text
    assert "| replicate-1 | node1 | 10.000 | 9.500 – 10.500 | — | — | — | — | baseline |" in text
    assert "| replicate-2 | node2 | 11.000 | 10.500 – 11.500 | 1.0500 | 2 | 0.37500000 | same | no: mean ratio 1.05 exceeds 1.01 |" in text
    assert "| replicate-4 | node4 | 12.000 | 11.500 – 12.500 | 1.0500 | 1 | 0.25000000 | same | yes |" in text
    assert "- cross-host: w/b: cv 0.09091 exceeds 0.01" in text
    assert plot_means(summary).startswith(b"\x89PNG")
    written = summary.to_json()  # summary.json: the baseline's row has no compared fields, not nulls
    assert "mean_ratio" not in written["backends"][0]["hosts"][0] and written["backends"][0]["hosts"][1]["mean_ratio"] == 1.05
    assert CrossHostSummary.decode(written) == summary
