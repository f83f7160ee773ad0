"""summary.json's shape as types, so that a key typo in a reader is a type error (mypy).

`results.statistics.summarize` builds a `Summary`; the report, the manifest statement and
`verify` read one. At run time these are plain dicts (TypedDict), so the JSON written and
read is unchanged: docs/results.md has the format with the rules behind each figure.

Keys that are Python keywords (`pass`) need TypedDict's functional form.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NotRequired, TypedDict, cast

from ..errors import EvidenceError
from .files import check_format, read_json
from .rundir import READABLE_VERSIONS

__all__ = [
    "SUMMARY_FORMAT_VERSION",
    "Agreement",
    "BackendSummary",
    "Comparison",
    "Correctness",
    "DecisionMismatch",
    "GateResult",
    "LatencyKey",
    "LatencyStats",
    "LevelPass",
    "LevelSpec",
    "LevelStats",
    "LoadSummary",
    "LoadWorkload",
    "OverallStats",
    "PassStats",
    "QueueStats",
    "ScheduleAdherence",
    "Speed",
    "Stability",
    "Summary",
    "WorkloadSummary",
    "read_summary",
]

SUMMARY_FORMAT_VERSION = 1

# The latency figures a pass or a backend's measured rows have, by key.
LatencyKey = Literal["mean_ms", "p50_ms", "p95_jevbench_ms", "p95_nearest_rank_ms", "min_ms", "max_ms"]


class LatencyStats(TypedDict):
    """Latency statistics of successful requests (n of them); None when there are none."""

    n: int
    mean_ms: float | None
    p50_ms: float | None
    p95_jevbench_ms: float | None
    p95_nearest_rank_ms: float | None
    min_ms: float | None
    max_ms: float | None


class OverallStats(LatencyStats):
    """All measured rows of one backend: requests sent, failed, and the latencies of the rest."""

    requests: int
    errors: int


_PassIndex = TypedDict("_PassIndex", {"pass": int})


class PassStats(OverallStats, _PassIndex):
    """One feasibility or measured pass (`pass`: its 1-based index)."""


DecisionMismatch = TypedDict("DecisionMismatch", {
    "id": str, "seq": int, "phase": str, "pass": int,
    "recorded": str | None,  # the row's decision
    "recomputed": str,       # "yes" when probability >= 0.5
})


class Correctness(TypedDict):
    """Thresholded decisions against labels (the first measured pass)."""

    correct: int
    labelled: int
    unanswered: int


class Stability(TypedDict):
    """Whether every (id, seq) has one bit-identical probability across the timed passes."""

    probabilities_stable: bool | None  # None: fewer than two passes, or no rows
    stability_passes: int
    stability_changed_ids: list[str]
    stability_errors: int
    stability_incomplete: int


class BackendSummary(Correctness, Stability):
    measured: list[PassStats]
    feasibility: list[PassStats]
    overall: OverallStats
    pass_mean_range_ms: list[float] | None  # [lowest, highest] pass mean
    correct_by_pass: list[int]
    decision_mismatches: list[DecisionMismatch]
    excluded_requests: dict[str, int]  # "first", "warmup": requests outside every pass


class Speed(TypedDict):
    """A candidate's measured means against a baseline's."""

    baseline_mean_ms: float | None
    candidate_mean_ms: float | None
    speedup: float | None  # baseline mean / candidate mean
    percent_lower: float | None  # (baseline - candidate) / baseline * 100
    disjoint_ranges: bool | None  # pass mean ranges do not overlap
    every_pass_lower: bool | None  # every candidate pass mean below every baseline pass mean
    measured_errors: int


class Agreement(TypedDict):
    """Two backends' first measured passes, paired by (id, seq)."""

    agreement: int
    n: int
    pair_errors: int
    unpaired: int
    differing_ids: list[str]
    max_probability_delta: float | None
    max_probability_delta_by_tokens: dict[str, float | None]  # "<500", "500-2000", ">2000"


class Comparison(Speed, Agreement):
    """One pair of backends, in recipe order: the earlier one is the baseline."""

    baseline: str
    candidate: str


class WorkloadSummary(TypedDict):
    backends: dict[str, BackendSummary]
    comparisons: list[Comparison]


class GateResult(TypedDict):
    name: str
    kind: str
    evaluated: bool
    passed: bool | None  # None: not evaluated (an external gate)
    errors: int
    detail: str


# --- load runs only (recipes with a workload `load`; results/load.py, docs/load.md) -----------


class LevelSpec(TypedDict):
    """One declared load level: a closed-loop concurrency or an open-loop arrival rate."""

    level: str  # closed-c{N} or open-r{rate:g}
    mode: Literal["closed", "open"]
    concurrency: int | None  # closed loop: N workers, each with its own connection
    rate_per_s: float | None  # open loop: offered arrivals per second
    arrivals: str | None  # open loop: poisson or fixed


_LevelPassIndex = TypedDict("_LevelPassIndex", {"pass": int})


class LevelPass(_LevelPassIndex):
    """One measured pass of a level: its requests, failures, mean latency and throughput."""

    requests: int
    errors: int
    mean_ms: float | None
    duration_s: float | None  # last end - first scheduled (open) or first send (closed)
    throughput_per_s: float | None


class ScheduleAdherence(TypedDict):
    """Open loop: how far the client kept the schedule (lag = actual send - scheduled send)."""

    scheduled: int  # timed rows with a scheduled send time
    late_sends: int  # sent more than load.LATE_AFTER_MS after their scheduled time
    max_lag_ms: float | None
    mean_lag_ms: float | None
    scheduled_rate_per_s: float | None  # the arrival rate the seeded schedule drew over the measured passes


class QueueStats(TypedDict):
    """The server's own queue time (its X-Queue-Time-Ms header) over successful requests that carry one."""

    n: int
    mean_ms: float | None
    p95_jevbench_ms: float | None


class LevelStats(OverallStats):
    """One (backend, level): latency (from the schedule in open loop), throughput, goodput, adherence."""

    level: str
    latency_from: Literal["schedule", "send"]
    p99_ms: float | None
    passes: list[LevelPass]
    pass_mean_range_ms: list[float] | None
    duration_s: float | None  # the measured passes' durations summed
    throughput_per_s: float | None  # successful requests / duration_s
    within_bound: int | None  # successful requests with latency <= latency_bound_ms; None without a bound
    goodput_per_s: float | None  # within_bound / duration_s
    connections: int  # distinct client connections that sent the level's measured requests
    schedule: ScheduleAdherence | None  # None in closed loop
    server_queue: QueueStats | None  # None when no response carried a queue time


class LoadWorkload(TypedDict):
    latency_bound_ms: float | None
    levels: list[LevelSpec]  # in the recipe's order: closed ladder ascending, then open rates ascending
    backends: dict[str, list[LevelStats]]  # one entry per level, in `levels` order


class LoadSummary(TypedDict):
    rules: dict[str, str]
    workloads: dict[str, LoadWorkload]  # only the workloads that declare a load


class Summary(TypedDict):
    format_version: int
    study_id: str
    p95_rules: dict[str, str]
    mean_rule: str
    backends: list[str]
    workloads: dict[str, WorkloadSummary]
    gates: list[GateResult]
    energy: NotRequired[dict]  # runs from 2026-12 on (results/energy.py); absent in older summaries
    gpu_state: NotRequired[dict]
    load: NotRequired[LoadSummary]  # only runs whose recipe declares a load (results/load.py)


def read_summary(path: Path) -> Summary:
    """A run's summary.json; EvidenceError unless it is a JSON object of a format this tool reads.

    The keys inside are not checked here: `verify` recomputes the whole summary from the rows."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise EvidenceError(f"{path} is not a JSON object.")
    return cast(Summary, check_format(data, READABLE_VERSIONS["summary.json"], str(path)))
