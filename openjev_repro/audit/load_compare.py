"""`compare` per load level: two load runs' (workload, backend) pairs, level by level.

For each level both runs ran, the figures of `results.load` on each side (latency from the
schedule in open loop, P99, throughput, schedule adherence), their deltas and ratios, and a
seeded bootstrap 95% interval of the difference of mean latencies (`bootstrap_mean_diff_ci`,
as the overall comparison). The declared ratio limits (`max_mean_ratio`, `min_mean_ratio`,
`max_p95_ratio`) hold at every level too: a load run's pooled figures mix levels, so a
regression at one level must not hide behind the others. Runs without levels get none of this
(the compare JSON and text of every other run are unchanged).

The figure pair (`Metric`: baseline, candidate, delta, ratio) and the bootstrap record are the
ones `audit/compare.py` uses for the pooled figures too.
"""

from __future__ import annotations

import msgspec
import numpy as np

from ..evidence.tolerances import Limits
from ..results.load import LevelColumns, level_stats, spec_of
from ..results.row_table import RowTable
from ..results.statistics import BOOTSTRAP_METHOD, bootstrap_mean_diff_ci

__all__ = ["Bootstrap", "LevelPair", "LevelSide", "Metric", "level_pairs", "level_table"]

N_BOOT = 2000
METHOD_VERSION = int(str(BOOTSTRAP_METHOD["version"]))  # recorded with each interval


def fmt(value: float | None, digits: int = 3) -> str:
    """A figure in a table cell ("—" when there is none)."""
    return "—" if value is None else f"{value:.{digits}f}"


def shown(value: float | None) -> str:
    """A compared figure in a verdict line: four significant digits (the --out JSON keeps every digit)."""
    return "—" if value is None else f"{value:.4g}"


class Metric(msgspec.Struct, frozen=True):
    """One figure of both runs: candidate - baseline and candidate / baseline."""

    baseline: float | None
    candidate: float | None
    delta: float | None
    ratio: float | None

    @classmethod
    def of(cls, b: float | None, c: float | None) -> Metric:
        return cls(b, c, None if b is None or c is None else c - b, c / b if b and c is not None else None)

    def ratio_failure(self, label: str, limit: float, *, above: bool) -> str | None:
        """'LABEL R exceeds L' (above: the ratio may not exceed the limit) or 'is below', or None when it holds."""
        if self.ratio is not None and (self.ratio <= limit if above else self.ratio >= limit):
            return None
        return f"{label} {shown(self.ratio)} {'exceeds' if above else 'is below'} {limit}"


class Bootstrap(msgspec.Struct, frozen=True):
    """A seeded bootstrap 95% interval of mean(candidate) - mean(baseline)."""

    mean_diff_ci95_ms: list[float] | None
    seed: int
    n_boot: int
    method_version: int
    of: str

    @classmethod
    def of_latencies(cls, lat_b: np.ndarray, lat_c: np.ndarray, seed: int, of: str) -> Bootstrap:
        ci = bootstrap_mean_diff_ci(lat_b, lat_c, seed=seed, n_boot=N_BOOT) if len(lat_b) and len(lat_c) else None
        return cls(list(ci) if ci else None, seed, N_BOOT, METHOD_VERSION, of)

    def interval(self) -> str:
        ci = self.mean_diff_ci95_ms
        return "—" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


Level = tuple[LevelColumns, np.ndarray]  # a run's level columns and one level's measured rows


class _Schedule(msgspec.Struct, frozen=True):
    late_sends: int


class _LevelStats(msgspec.Struct, frozen=True):
    """What compare reads of `results.load.level_stats` (the rest is summary.json's)."""

    latency_from: str
    requests: int
    errors: int
    n: int
    mean_ms: float | None
    p50_ms: float | None
    p95_jevbench_ms: float | None
    p99_ms: float | None
    throughput_per_s: float | None
    schedule: _Schedule | None


class LevelSide(msgspec.Struct, frozen=True):
    """One run's figures of one level."""

    requests: int
    errors: int
    n: int
    mean_ms: float | None
    p50_ms: float | None
    p95_jevbench_ms: float | None
    p99_ms: float | None
    throughput_per_s: float | None
    late_sends: int | None  # open loop only

    @classmethod
    def of(cls, s: _LevelStats) -> LevelSide:
        return cls(s.requests, s.errors, s.n, s.mean_ms, s.p50_ms, s.p95_jevbench_ms, s.p99_ms, s.throughput_per_s,
                   None if s.schedule is None else s.schedule.late_sends)

    def late(self) -> str:
        return "n/a" if self.late_sends is None else str(self.late_sends)


class LevelMetrics(msgspec.Struct, frozen=True):
    mean_ms: Metric
    p50_ms: Metric
    p95_jevbench_ms: Metric
    p99_ms: Metric
    throughput_per_s: Metric


class LevelPair(msgspec.Struct, frozen=True):
    """One level both runs ran: each side's figures, their metrics and the bootstrap interval."""

    level: str
    latency_from: str
    baseline: LevelSide
    candidate: LevelSide
    metrics: LevelMetrics
    bootstrap: Bootstrap

    @classmethod
    def of(cls, level: str, base: Level, cand: Level, seed: int) -> LevelPair:
        spec = spec_of(level)
        sb, sc = (msgspec.convert(level_stats(cols, spec, idx, None).to_json(), _LevelStats) for cols, idx in (base, cand))
        lat_b, lat_c = (cols.latency_ms(idx[cols.t.ok[idx]]) for cols, idx in (base, cand))
        b, c = LevelSide.of(sb), LevelSide.of(sc)
        metrics = LevelMetrics(*(Metric.of(getattr(b, k), getattr(c, k)) for k in LevelMetrics.__struct_fields__))
        return cls(level, sb.latency_from, b, c, metrics,
                   Bootstrap.of_latencies(lat_b, lat_c, seed, "mean(candidate) - mean(baseline), this level's "
                                                              "measured latencies"))

    def failures(self, limits: Limits, where: str) -> tuple[list[str], list[str]]:
        """(failures, limits checked) of this level: the ratio limits hold here too; a failed request fails."""
        at = f"{where} level {self.level}"
        failures, checked = [], []
        for limit, metric, label, above in ((limits.max_mean_ratio, self.metrics.mean_ms, "mean ratio", True),
                                            (limits.min_mean_ratio, self.metrics.mean_ms, "mean ratio", False),
                                            (limits.max_p95_ratio, self.metrics.p95_jevbench_ms,
                                             "P95 (JevBench) ratio", True)):
            if isinstance(limit, (int, float)):
                checked.append(f"{at}: {label} {'<=' if above else '>='} {limit}")
                failure = metric.ratio_failure(label, limit, above=above)
                failures += [f"{at}: {failure}"] if failure else []
        if self.baseline.errors or self.candidate.errors:
            failures.append(f"{at}: failed requests (baseline {self.baseline.errors}, "
                            f"candidate {self.candidate.errors})")
        return failures, checked

    def row(self) -> str:
        m = self.metrics
        cells = [self.level, *(f"{fmt(x.baseline, d)} → {fmt(x.candidate, d)}"
                               for x, d in ((m.mean_ms, 3), (m.p95_jevbench_ms, 3), (m.p99_ms, 3),
                                            (m.throughput_per_s, 2))),
                 fmt(m.mean_ms.ratio, 4), self.bootstrap.interval(),
                 f"{self.baseline.late()} / {self.candidate.late()}"]
        return "| " + " | ".join(cells) + " |"


def _levels(cols: LevelColumns | None, workload: str, backend: str) -> dict[str, Level]:
    """level -> its measured rows of one (workload, backend), levels in first-seen order ({} without levels)."""
    if cols is None:
        return {}
    t = cols.t
    rows = np.flatnonzero(t.workload.equals(workload) & t.backend.equals(backend) & t.phase.equals("measured"))
    found: dict[str, Level] = {}
    for code in dict.fromkeys(cols.level.codes[rows].tolist()):
        level = cols.level.values[code]
        if level is not None:
            found[level] = (cols, rows[cols.level.codes[rows] == code])
    return found


def level_pairs(cb: LevelColumns | None, cc: LevelColumns | None, workload: str, base_name: str, cand_name: str,
                seed: int) -> tuple[list[LevelPair], list[str]] | None:
    """(levels both runs ran, "baseline LEVEL" / "candidate LEVEL" of the others) of one pair; None when
    neither run has load levels (`cb`, `cc`: the runs' level columns, None for a run without levels)."""
    base, cand = _levels(cb, workload, base_name), _levels(cc, workload, cand_name)
    if not base and not cand:
        return None
    levels = [LevelPair.of(level, base[level], cand[level], seed) for level in base if level in cand]
    unmatched = [f"baseline {level}" for level in base if level not in cand]
    unmatched += [f"candidate {level}" for level in cand if level not in base]
    return levels, unmatched


def level_columns(t: RowTable) -> LevelColumns | None:
    """The table's load-level columns, None for a run without load levels (most runs: nothing to build)."""
    return LevelColumns.of(t) if any(level is not None for level in t.level) else None


def level_table(levels: list[LevelPair], unmatched: list[str]) -> list[str]:
    """A pair's per-level table for compare's Markdown."""
    return ["", "Per load level (open loop: latency from the scheduled send):", "",
            ("| level | mean (ms) b → c | P95 JevBench (ms) b → c | P99 (ms) b → c | throughput (/s) b → c "
             "| mean ratio | bootstrap 95% mean diff (ms) | late sends b / c |"),
            "| --- | --- | --- | --- | --- | ---: | --- | --- |",
            *(lv.row() for lv in levels), *(f"- level only in the {u}" for u in unmatched)]
