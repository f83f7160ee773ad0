"""summary.json as one typed record: decoded once (`Summary.decode`, `read_summary`), written by `to_json()`.

`results.statistics.summarize` builds a `Summary`; the report, the manifest statement and
`verify` read its attributes, never a string key. Each part is a frozen `msgspec.Struct` that
names every key a writer of format 1 wrote, so `Summary.decode(file).to_json()` is the file's
own JSON (absent stays absent, null stays null, an int stays an int): the committed runs'
summaries rebuild byte for byte (tests/test_summary_record.py). docs/results.md has the format
with the rules behind each figure; docs/load.md the `load` section.

Keys that are not Python names (`pass`, `<500`) are renamed fields (`index`, `below_500`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ..errors import EvidenceError
from .files import check_format, read_json
from .rundir import READABLE_VERSIONS, RunDir

__all__ = [
    "SUMMARY_FORMAT_VERSION",
    "BackendEnergy",
    "BackendSummary",
    "ClockRange",
    "Comparison",
    "CounterSteps",
    "DecisionMismatch",
    "Energy",
    "ExcludedRequests",
    "GateResult",
    "GpuState",
    "LatencyKey",
    "LatencyStats",
    "LevelPass",
    "LevelSpec",
    "LevelStats",
    "LoadSummary",
    "LoadWorkload",
    "OverallStats",
    "PassEnergy",
    "PassState",
    "PassStats",
    "Pooled",
    "PowerRange",
    "QueueStats",
    "ScheduleAdherence",
    "Summary",
    "TokenBuckets",
    "WorkloadSummary",
    "read_summary",
]

SUMMARY_FORMAT_VERSION = 1

# The latency figures a pass or a backend's measured rows have, by attribute name.
LatencyKey = Literal["mean_ms", "p50_ms", "p95_jevbench_ms", "p95_nearest_rank_ms", "min_ms", "max_ms"]

Count = Annotated[int, Meta(ge=0, le=2**63 - 1)]
Number = Annotated[float, Meta(ge=-1e300, le=1e300)]  # finite: JSON has no NaN, and no figure is near 1e300
Reading = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)] | Number  # a sampled value as the driver gave it (int or float)


class _Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    def to_json(self) -> dict[str, object]:
        """The JSON object of this part, exactly as summary.json holds it."""
        out: dict[str, object] = msgspec.to_builtins(self)
        return out


class LatencyStats(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Latency statistics of successful requests (n of them); None when there are none."""

    n: Count
    mean_ms: Number | None
    p50_ms: Number | None
    p95_jevbench_ms: Number | None
    p95_nearest_rank_ms: Number | None
    min_ms: Number | None
    max_ms: Number | None

    def figure(self, key: LatencyKey) -> float | None:
        """One figure by its name (the report's per-pass columns, compare's metrics)."""
        value: float | None = getattr(self, key)
        return value


class OverallStats(LatencyStats, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """All measured rows of one backend: requests sent, failed, and the latencies of the rest."""

    requests: Count
    errors: Count


class PassStats(OverallStats, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One feasibility or measured pass (`pass`: its 1-based index)."""

    index: Count = msgspec.field(name="pass")


class DecisionMismatch(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: str
    seq: int
    phase: str
    index: int = msgspec.field(name="pass")
    recorded: str | None  # the row's decision
    recomputed: str  # "yes" when probability >= 0.5


class ExcludedRequests(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Requests outside every pass: the first inference and the warm-up."""

    first: Count
    warmup: Count


class BackendSummary(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    measured: list[PassStats]
    feasibility: list[PassStats]
    overall: OverallStats
    pass_mean_range_ms: list[Number] | None  # [lowest, highest] pass mean
    correct: Count  # thresholded decisions against labels, first measured pass
    labelled: Count
    unanswered: Count
    correct_by_pass: list[Count]
    decision_mismatches: list[DecisionMismatch]
    probabilities_stable: bool | None  # None: fewer than two passes, or no rows
    stability_passes: Count
    stability_changed_ids: list[str]
    stability_errors: Count
    stability_incomplete: Count
    excluded_requests: ExcludedRequests


class TokenBuckets(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The largest probability difference of the pairs in each input-token bucket."""

    below_500: Number | None = msgspec.field(name="<500")
    from_500_to_2000: Number | None = msgspec.field(name="500-2000")
    above_2000: Number | None = msgspec.field(name=">2000")

    def items(self) -> list[tuple[str, float | None]]:
        return [("<500", self.below_500), ("500-2000", self.from_500_to_2000), (">2000", self.above_2000)]


class Comparison(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One pair of backends, in recipe order: the earlier one is the baseline."""

    baseline: str
    candidate: str
    # speed: the candidate's measured means against the baseline's
    baseline_mean_ms: Number | None
    candidate_mean_ms: Number | None
    speedup: Number | None  # baseline mean / candidate mean
    percent_lower: Number | None  # (baseline - candidate) / baseline * 100
    disjoint_ranges: bool | None  # pass mean ranges do not overlap
    every_pass_lower: bool | None  # every candidate pass mean below every baseline pass mean
    measured_errors: Count
    # agreement: the two first measured passes, paired by (id, seq)
    agreement: Count
    n: Count
    pair_errors: Count
    unpaired: Count
    differing_ids: list[str]
    max_probability_delta: Number | None
    max_probability_delta_by_tokens: TokenBuckets


class Pooled(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a load workload's pooled figures cover: levels of one timing rule only (docs/load.md)."""

    levels: list[str]  # the levels whose measured passes the workload's figures pool
    latency_from: Literal["schedule", "send"]
    not_pooled: list[str]  # levels of the other rule: read them in the `load` section only


class WorkloadSummary(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    backends: dict[str, BackendSummary]
    comparisons: list[Comparison]
    pooled: Pooled | UnsetType = UNSET  # load workloads only (runs without a load have no such key)


class GateResult(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    kind: str
    evaluated: bool
    passed: bool | None  # None: not evaluated (an external gate)
    errors: Count
    detail: str

    @property
    def outcome(self) -> str:
        return "not evaluated" if not self.evaluated else ("PASSED" if self.passed else "FAILED")


# --- energy and GPU state (runs from 2026-12 on; results/energy.py) --------------------------


class CounterSteps(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    unit: str
    smallest_step_mj: Reading
    median_ms_between_changes: Number | None
    note: str


class PassEnergy(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    label: str  # <backend>/<workload>/measured-<i>
    requests: Count
    seconds: Number
    method: Literal["counter", "integrated"]
    joules: Number | None
    joules_per_decision: Number | None
    mean_power_w: Number | None
    above_idle_joules_per_decision: Number | None


class BackendEnergy(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    passes: list[PassEnergy]
    requests: Count
    joules: Number | None
    joules_per_decision: Number | None
    idle_power_w: Number | None
    above_idle_joules_per_decision: Number | None


class Energy(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`available: false` with its reason, or the figures of every measured pass."""

    available: bool
    reason: str | UnsetType = UNSET
    driver: str | None | UnsetType = UNSET
    sample_period_s: Reading | None | UnsetType = UNSET
    method: str | UnsetType = UNSET
    idle_method: str | UnsetType = UNSET
    counter: CounterSteps | None | UnsetType = UNSET
    workloads: dict[str, dict[str, BackendEnergy]] | UnsetType = UNSET


class ClockRange(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    min: Reading
    max: Reading
    median: Reading | UnsetType = UNSET  # SM clocks only


class PowerRange(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    mean: Number
    max: Reading


class PassState(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    label: str
    readings: Count
    sm_clock_mhz: ClockRange | None
    mem_clock_mhz: ClockRange | None
    temperature_c_max: Reading | None
    power_w: PowerRange | None
    clock_event_reasons: list[str]
    clock_event_mask: int
    slowdown: bool


class GpuState(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    available: bool
    reason: str | UnsetType = UNSET
    slowdown_reasons: list[str] | UnsetType = UNSET
    passes: list[PassState] | UnsetType = UNSET
    idle: list[PassState] | UnsetType = UNSET

    def measured_passes(self, backend: str | None) -> list[PassState]:
        """The measured passes' state of one backend (None: of every backend)."""
        found = [] if isinstance(self.passes, UnsetType) else self.passes
        return [p for p in found if "/measured-" in p.label and backend in (None, p.label.split("/", 1)[0])]


# --- load runs only (recipes with a workload `load`; results/load.py, docs/load.md) -----------


class LevelSpec(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One declared load level: a closed-loop concurrency or an open-loop arrival rate."""

    level: str  # closed-c{N} or open-r{rate:g}
    mode: Literal["closed", "open"]
    concurrency: Count | None  # closed loop: N workers, each with its own connection
    rate_per_s: Number | None  # open loop: offered arrivals per second
    arrivals: str | None  # open loop: poisson or fixed

    @property
    def open_loop(self) -> bool:
        return self.mode == "open"

    def offered(self) -> str:
        """"concurrency 4 (closed loop)" or "20 requests/s, poisson arrivals (open loop)"."""
        if self.mode == "closed":
            return f"concurrency {self.concurrency} (closed loop)"
        return f"{self.rate_per_s or 0:g} requests/s, {self.arrivals} arrivals (open loop)"


class LevelPass(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One measured pass of a level: its requests, failures, mean latency and throughput."""

    index: Count = msgspec.field(name="pass")
    requests: Count
    errors: Count
    mean_ms: Number | None
    duration_s: Number | None  # last end - first scheduled (open) or first send (closed)
    throughput_per_s: Number | None


class ScheduleAdherence(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Open loop: how far the client kept the schedule (lag = actual send - scheduled send)."""

    scheduled: Count  # timed rows with a scheduled send time
    late_sends: Count  # sent more than load.LATE_AFTER_MS after their scheduled time
    max_lag_ms: Number | None
    mean_lag_ms: Number | None
    scheduled_rate_per_s: Number | None  # the arrival rate the seeded schedule drew over the measured passes


class QueueStats(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The server's own queue time (its X-Queue-Time-Ms header) over successful requests that carry one."""

    n: Count
    mean_ms: Number | None
    p95_jevbench_ms: Number | None


class LevelStats(OverallStats, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One (backend, level): latency (from the schedule in open loop), throughput, goodput, adherence."""

    level: str
    latency_from: Literal["schedule", "send"]
    p99_ms: Number | None
    passes: list[LevelPass]
    pass_mean_range_ms: list[Number] | None
    duration_s: Number | None  # the measured passes' durations summed
    throughput_per_s: Number | None  # successful requests / duration_s
    within_bound: Count | None  # successful requests with latency <= latency_bound_ms; None without a bound
    goodput_per_s: Number | None  # within_bound / duration_s
    connections: Count  # distinct client connections that sent the level's measured requests
    schedule: ScheduleAdherence | None  # None in closed loop
    server_queue: QueueStats | None  # None when no response carried a queue time

    def drawn_rate(self) -> float | None:
        """The arrival rate the open-loop schedule drew (None in closed loop)."""
        return None if self.schedule is None else self.schedule.scheduled_rate_per_s


class LoadWorkload(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    latency_bound_ms: Number | None
    levels: list[LevelSpec]  # in the recipe's order: closed ladder ascending, then open rates ascending
    backends: dict[str, list[LevelStats]]  # one entry per level, in `levels` order

    def rows(self) -> list[tuple[str, LevelSpec, LevelStats]]:
        """(backend, level, its figures) in the report's order: by backend, then the levels in run order."""
        return [(b, spec, s) for b, found in self.backends.items() for spec, s in zip(self.levels, found, strict=True)]


class LoadSummary(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    rules: dict[str, str]
    workloads: dict[str, LoadWorkload]  # only the workloads that declare a load


class Summary(_Record, frozen=True, kw_only=True, forbid_unknown_fields=True):
    format_version: int
    study_id: str
    p95_rules: dict[str, str]
    mean_rule: str
    backends: list[str]
    workloads: dict[str, WorkloadSummary]
    gates: list[GateResult]
    energy: Energy | UnsetType = UNSET  # runs from 2026-12 on (results/energy.py); absent in older summaries
    gpu_state: GpuState | UnsetType = UNSET
    load: LoadSummary | UnsetType = UNSET  # only runs whose recipe declares a load (results/load.py)

    @classmethod
    def decode(cls, data: object, where: str = "summary.json") -> Summary:
        """The record of a summary.json object; EvidenceError naming the field msgspec refused."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            raise EvidenceError(f"{where} is not a summary this tool reads: {exc}") from None

    def load_workload(self, name: str) -> LoadWorkload | None:
        """The `load` section of one workload; None for a workload (or a run) without a load."""
        return None if isinstance(self.load, UnsetType) else self.load.workloads.get(name)


def read_summary(path: Path) -> Summary:
    """A run's summary.json, decoded once; EvidenceError unless it is a summary of a format this tool reads."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise EvidenceError(f"{path} is not a JSON object.")
    return Summary.decode(check_format(data, READABLE_VERSIONS["summary.json"], str(path)), str(path))


def summary_of(run: RunDir) -> Summary:
    """The run's summary.json as its record (read_summary's refusals)."""
    return read_summary(run.file("summary.json"))
