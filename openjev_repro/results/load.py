"""Per-level statistics of load runs: a pure function of (rows, recipe), like `statistics`.

A workload that declares a `load` in its recipe runs at several levels (a closed-loop
concurrency ladder, open-loop arrival rates); every row of such a run names its `level`.
For each (workload, backend, level) this module computes, over the level's measured passes
(its feasibility passes excluded, as everywhere):

- latency: n, errors, mean, P50, both P95 rules, P99, min, max. In open loop a request's
  latency runs from its *scheduled* send time (`Row.from_schedule_ns`), so a stall that delays
  sends is counted in the latency of every request it delayed (no coordinated omission); in
  closed loop it runs from the actual send, as in every other run;
- throughput: successful requests per second of the measured passes' summed durations, a pass
  lasting from its first scheduled (open) or actual (closed) send to its last response;
- goodput: successful requests within the workload's `latency_bound_ms`, per second of the same
  durations (None when the recipe declares no bound);
- schedule adherence (open loop): late sends (more than `LATE_AFTER_MS` after schedule), max
  and mean lag;
- the server's own queue time (its X-Queue-Time-Ms header) where responses carry it.

docs/load.md explains the load model and these rules. Nothing here reads files, so `verify`
recomputes this section of summary.json from the rows and the recipe and compares it exactly;
every mean is `math.fsum` over values, so no figure depends on row order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from ..evidence.recipe import Recipe, Workload
from ..evidence.summary import (
    LevelPass,
    LevelSpec,
    LevelStats,
    LoadSummary,
    LoadWorkload,
    QueueStats,
    ScheduleAdherence,
)
from .latency import latency_stats, overall_stats, p99_nearest_rank
from .row_table import Interned, RowTable

__all__ = [
    "LATE_AFTER_MS",
    "LOAD_RULES",
    "LevelColumns",
    "declared_levels",
    "has_load",
    "latency_bound_ms",
    "level_stats",
    "load_summary",
    "spec_of",
]

LATE_AFTER_MS = 1.0  # an open-loop send more than this after its scheduled time counts as late
LOAD_RULES = {
    "latency": "open loop: (end_ns - scheduled_ns) / 1e6, from each request's scheduled send (no coordinated "
               "omission); closed loop: (end_ns - start_ns) / 1e6",
    "p99_ms": "sorted(latencies)[ceil(0.99 * N) - 1] (nearest rank)",
    "duration_s": "per pass (last end_ns - first scheduled_ns, else first start_ns) / 1e9; per level the seconds "
                  "the measured passes' spans cover together (an overlap counted once); a request that failed "
                  "before it was timed (start_ns = end_ns = 0) adds no time",
    "throughput_per_s": "successful measured requests / duration_s",
    "goodput_per_s": "successful measured requests with latency <= latency_bound_ms / duration_s",
    "scheduled_rate_per_s": "open loop: sum over measured passes of (scheduled sends - 1) / sum of (last - first "
                            "scheduled_ns) / 1e9, the rate the seeded schedule drew",
    "late_sends": f"open loop: requests sent more than {LATE_AFTER_MS:g} ms after their scheduled time "
                  "(lag = start_ns - scheduled_ns, over requests that were timed)",
}
_MEASURED = "measured"


# --- the recipe's levels ---------------------------------------------------------------


def has_load(recipe: Recipe) -> bool:
    """Whether any workload of the recipe declares a load (a default run declares none)."""
    return any(w.load is not None for w in recipe.workloads)


def declared_levels(workload: Workload) -> list[LevelSpec]:
    """The workload's levels in run order (the recipe's: closed ladder ascending, then open rates ascending)."""
    return [LevelSpec(level=level.id, mode=level.kind, concurrency=level.concurrency, rate_per_s=level.rate_per_s,
                      arrivals=level.arrivals) for level in workload.levels() or []]


def latency_bound_ms(workload: Workload) -> float | None:
    return None if workload.load is None or workload.load.latency_bound_ms is None else workload.load.latency_bound_ms


# --- the load columns as arrays --------------------------------------------------------


def _filled(column: Sequence[Any], dtype: type, absent: Any) -> tuple[np.ndarray, np.ndarray]:
    """(values with `absent` where None, mask of present values)."""
    present = np.fromiter((v is not None for v in column), dtype=bool, count=len(column))
    values: np.ndarray = np.array([absent if v is None else v for v in column], dtype=dtype)
    return values, present


@dataclass(frozen=True, eq=False)
class LevelColumns:
    """The table's load-level columns as numpy arrays, built once per summary."""

    t: RowTable
    level: Interned
    origin_ns: np.ndarray  # scheduled_ns where the row has one, else start_ns
    lag_ns: np.ndarray  # start_ns - scheduled_ns (0 where no schedule)
    has_schedule: np.ndarray
    connection: np.ndarray  # -1 where not recorded
    queue_ms: np.ndarray
    has_queue: np.ndarray

    @classmethod
    def of(cls, t: RowTable) -> LevelColumns:
        scheduled, has_schedule = _filled(t.scheduled_ns, np.int64, 0)
        connection, _ = _filled(t.connection, np.int64, -1)
        queue, has_queue = _filled(t.server_queue_ms, np.float64, 0.0)
        origin = np.where(has_schedule, scheduled, t.start_ns)
        return cls(t, Interned.of(t.level), origin, np.where(has_schedule, t.start_ns - scheduled, 0), has_schedule,
                   connection, queue, has_queue)

    def measured(self, workload: str, backend: str, level: str) -> np.ndarray:
        """Row indices of one (workload, backend, level)'s measured passes (file order)."""
        t = self.t
        mask = t.workload.equals(workload) & t.backend.equals(backend) & t.phase.equals(_MEASURED)
        return np.flatnonzero(mask & self.level.equals(level))

    def latency_ms(self, idx: np.ndarray) -> np.ndarray:
        """From the schedule where the row has one, else from the actual send (`RowTable.latency_ms`)."""
        return self.t.latency_ms[idx]

    def timed(self, idx: np.ndarray) -> np.ndarray:
        """The rows at idx that carry times (a request that failed before it was timed records 0 and 0)."""
        return idx[self.t.end_ns[idx] > 0]

    def span_ns(self, idx: np.ndarray) -> tuple[int, int] | None:
        """(first scheduled or actual send, last response) of some rows; None when none was timed."""
        timed = self.timed(idx)
        if not len(timed):
            return None
        origins = self.origin_ns[idx[self.has_schedule[idx] | (self.t.end_ns[idx] > 0)]]
        return int(origins.min()), int(self.t.end_ns[timed].max())

    def duration_s(self, idx: np.ndarray) -> float | None:
        """First scheduled (or actual) send to last response of some rows, in seconds; None when none was timed."""
        span = self.span_ns(idx)
        return None if span is None else (span[1] - span[0]) / 1e9

    def covered_s(self, passes: list[np.ndarray]) -> float | None:
        """The seconds the passes' spans cover together: a stall across a pass boundary makes the next pass's
        schedule start before the previous pass's last response, and that overlap is counted once."""
        spans = sorted(span for idx in passes if (span := self.span_ns(idx)) is not None)
        if not spans:
            return None
        total, (start, end) = 0, spans[0]
        for s, e in spans[1:]:
            if s > end:
                total, start = total + end - start, s
            end = max(end, e)
        return (total + end - start) / 1e9


# --- one level -------------------------------------------------------------------------


def _per_second(count: int | None, seconds: float | None) -> float | None:
    return count / seconds if count is not None and seconds else None


def _pass(cols: LevelColumns, pass_index: int, idx: np.ndarray) -> LevelPass:
    ok = idx[cols.t.ok[idx]]
    duration = cols.duration_s(idx)
    return LevelPass(index=pass_index, requests=len(idx), errors=len(idx) - len(ok),
                     mean_ms=latency_stats(cols.latency_ms(ok)).mean_ms, duration_s=duration,
                     throughput_per_s=_per_second(len(ok), duration))


def _adherence(cols: LevelColumns, idx: np.ndarray) -> ScheduleAdherence:
    sent = cols.timed(idx)
    lag_ms = cols.lag_ns[sent[cols.has_schedule[sent]]] / 1e6
    values = lag_ms.tolist()
    return ScheduleAdherence(scheduled=len(values), late_sends=int((lag_ms > LATE_AFTER_MS).sum()),
                             max_lag_ms=max(values) if values else None,
                             mean_lag_ms=math.fsum(values) / len(values) if values else None,
                             scheduled_rate_per_s=_scheduled_rate(cols, idx))


def _scheduled_rate(cols: LevelColumns, idx: np.ndarray) -> float | None:
    """The arrival rate the seeded schedule actually drew: gaps / seconds between each pass's first and last
    scheduled send, summed over passes (a short Poisson pass can draw well above or below its declared rate)."""
    scheduled = idx[cols.has_schedule[idx]]
    passes = cols.t.pass_index[scheduled]
    gaps, span_ns = 0, 0
    for p in np.unique(passes).tolist():
        times = cols.origin_ns[scheduled[passes == p]]
        gaps, span_ns = gaps + len(times) - 1, span_ns + int(times.max() - times.min())
    return gaps / (span_ns / 1e9) if span_ns > 0 else None


def _queue(cols: LevelColumns, ok: np.ndarray) -> QueueStats | None:
    values = cols.queue_ms[ok[cols.has_queue[ok]]]
    if not len(values):
        return None
    stats = latency_stats(values)
    return QueueStats(n=stats.n, mean_ms=stats.mean_ms, p95_jevbench_ms=stats.p95_jevbench_ms)


def _pass_rows(cols: LevelColumns, idx: np.ndarray) -> list[np.ndarray]:
    passes = cols.t.pass_index[idx]
    return [idx[passes == p] for p in np.unique(passes).tolist()]


def _passes(cols: LevelColumns, idx: np.ndarray) -> list[LevelPass]:
    passes = cols.t.pass_index[idx]
    return [_pass(cols, p, idx[passes == p]) for p in np.unique(passes).tolist()]




def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def spec_of(level: str) -> LevelSpec:
    """What a level id alone says (for rows without their recipe): open-r{rate} is open loop, else closed."""
    if level.startswith("open-r"):
        return LevelSpec(level=level, mode="open", concurrency=None, rate_per_s=_number(level[6:]), arrivals=None)
    concurrency = level[8:] if level.startswith("closed-c") else ""
    return LevelSpec(level=level, mode="closed", concurrency=int(concurrency) if concurrency.isdigit() else None,
                     rate_per_s=None, arrivals=None)


def level_stats(cols: LevelColumns, spec: LevelSpec, idx: np.ndarray, bound: float | None) -> LevelStats:
    """Every figure of one level from its measured rows `idx` (`bound`: the goodput's latency bound, or None)."""
    ok = idx[cols.t.ok[idx]]
    latencies = cols.latency_ms(ok)
    passes = _passes(cols, idx)
    means = [p.mean_ms for p in passes if p.mean_ms is not None]
    connections = cols.connection[idx]
    duration = cols.covered_s(_pass_rows(cols, idx))
    within = None if bound is None else int((latencies <= bound).sum())
    return LevelStats(
        level=spec.level,
        latency_from="schedule" if spec.open_loop else "send",
        **msgspec.structs.asdict(overall_stats(latencies, len(idx))),
        p99_ms=p99_nearest_rank(latencies),
        passes=passes,
        pass_mean_range_ms=[min(means), max(means)] if means else None,
        duration_s=duration, throughput_per_s=_per_second(len(ok), duration),
        within_bound=within, goodput_per_s=_per_second(within, duration),
        connections=len(np.unique(connections[connections >= 0])),
        schedule=_adherence(cols, idx) if spec.open_loop else None,
        server_queue=_queue(cols, ok),
    )


# --- the summary section ---------------------------------------------------------------


def _workload(cols: LevelColumns, recipe: Recipe, workload: Workload) -> LoadWorkload:
    levels = declared_levels(workload)
    bound = latency_bound_ms(workload)
    backends = {b.name: [level_stats(cols, spec, cols.measured(workload.name, b.name, spec.level), bound)
                         for spec in levels] for b in recipe.backends}
    return LoadWorkload(latency_bound_ms=bound, levels=levels, backends=backends)


def load_summary(t: RowTable, recipe: Recipe) -> LoadSummary | None:
    """summary.json's `load` section; None for a recipe without a load (its summary has no such key)."""
    if not has_load(recipe):
        return None
    cols = LevelColumns.of(t)
    workloads = {w.name: _workload(cols, recipe, w) for w in recipe.workloads if w.load is not None}
    return LoadSummary(rules=dict(LOAD_RULES), workloads=workloads)
