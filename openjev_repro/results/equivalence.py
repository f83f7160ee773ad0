"""The statistics of a reproduction verdict (issue 38): equivalence of a rerun to its original, per backend.

Latency (mean, P50, P95 of the pooled measured requests) is judged as the ratio rerun / original against
a band of ratios. Its uncertainty comes from a seeded bootstrap that keeps the study's design:

- requests are paired by case id (a case sent k times in a pass is paired by its k-th sending), and one
  resample of case ids is applied to both runs, so a rerun is compared with the same mix of requests;
- each run's passes are resampled too (with replacement, each run on its own), and the cases within
  every chosen pass, so a difference between passes counts as uncertainty, not as signal.

The interval is the central 90% of the resampled ratios: a two one-sided tests equivalence at 5% each.
REPRODUCED when the whole interval lies inside the band, NOT REPRODUCED when it lies wholly outside,
INCONCLUSIVE otherwise (with how many requests per pass would shrink the interval enough to decide, the
interval narrowing as 1/sqrt(n)).

A percentile also carries its distribution-free (order-statistic) 90% bounds in each run, and needs a
minimum number of requests for them to exist (59 for P95, 5 for P50; below it the percentile is
INCONCLUSIVE, never judged from the bootstrap alone). Probabilities and decisions are counted exactly, no statistics: the largest
|Δp| of a paired case against its margin, the cases whose decision differs against theirs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from ..decision import YES_THRESHOLD
from .row_table import RowTable

__all__ = [
    "CONFIDENCE",
    "RESAMPLES",
    "Judgement",
    "LatencyJudgement",
    "Outcome",
    "Paired",
    "ProbabilityJudgement",
    "minimum_sample",
    "order_statistic_bounds",
    "paired_passes",
]

CONFIDENCE = 0.90  # two-sided interval; each side a one-sided test at 5%
RESAMPLES = 2000
BATCH_VALUES = 4_000_000  # latencies gathered at once by the bootstrap (32 MB of float64)
_QUANTILES = {"p50": 0.5, "p95": 0.95}


class Outcome(StrEnum):
    REPRODUCED = "REPRODUCED"
    NOT_REPRODUCED = "NOT REPRODUCED"
    INCONCLUSIVE = "INCONCLUSIVE"


def minimum_sample(q: float, confidence: float = CONFIDENCE) -> int:
    """The fewest values for which both distribution-free bounds of the q-quantile exist at `confidence`."""
    tail = (1 - confidence) / 2
    return max(math.ceil(math.log(tail) / math.log(q)), math.ceil(math.log(tail) / math.log(1 - q)))


def _binomial_cdf(n: int, p: float) -> np.ndarray:
    """P(Bin(n, p) <= k) for k = 0..n (log space, so n in the millions stays finite)."""
    k = np.arange(n + 1)
    log_pmf = (math.lgamma(n + 1) - np.array([math.lgamma(i + 1) + math.lgamma(n - i + 1) for i in k])
               + k * math.log(p) + (n - k) * math.log1p(-p))
    return np.minimum(np.cumsum(np.exp(log_pmf)), 1.0)


def order_statistic_bounds(sorted_values: np.ndarray, q: float,
                           confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Distribution-free bounds [x_(l), x_(u)] of the q-quantile (1-based ranks from the binomial); None when
    there are too few values (`minimum_sample`)."""
    n = len(sorted_values)
    if n < minimum_sample(q, confidence):
        return None
    tail = (1 - confidence) / 2
    cdf = _binomial_cdf(n, q)
    lower = int(np.searchsorted(cdf, tail, side="right"))  # P(Bin <= l - 1) <= tail: rank l (1-based) = index l-1+1
    upper = int(np.searchsorted(cdf, 1 - tail, side="left")) + 1  # P(Bin <= u - 1) >= 1 - tail
    lower = max(lower, 1)
    return float(sorted_values[lower - 1]), float(sorted_values[min(upper, n) - 1])


def _statistic(values: np.ndarray, metric: str) -> np.ndarray:
    """mean, median or JevBench's P95 (sorted[int(0.95 N) - 1]) along the last axis."""
    if metric == "mean":
        return values.mean(axis=-1)
    if metric == "p50":
        return np.median(values, axis=-1)
    k = int(0.95 * values.shape[-1]) - 1
    return np.partition(values, k, axis=-1)[..., k]


@dataclass(frozen=True)
class Paired:
    """One backend of one workload in both runs: measured latencies and probabilities, pass by pass, on the
    case keys (id, k-th sending) both runs hold in every pass."""

    keys: list[tuple[str, int]]
    original: np.ndarray  # (passes, keys) latency in ms
    rerun: np.ndarray
    p_original: np.ndarray  # (passes, keys) probability, NaN where absent
    p_rerun: np.ndarray

    @property
    def requests(self) -> tuple[int, int]:
        return self.original.size, self.rerun.size

    def statistic(self, metric: str) -> tuple[float, float]:
        return float(_statistic(self.original.ravel(), metric)), float(_statistic(self.rerun.ravel(), metric))

    def resampled_ratios(self, metric: str, seed: int, resamples: int = RESAMPLES) -> np.ndarray:
        """rerun / original of `metric` over `resamples` paired resamples, drawn in batches so that memory stays
        near BATCH_VALUES floats whatever the run's size (the draws, and so the ratios, do not depend on it)."""
        rng = np.random.default_rng(seed)
        n = len(self.keys)
        passes = {side: rng.integers(0, grid.shape[0], size=(resamples, grid.shape[0]))
                  for side, grid in (("original", self.original), ("rerun", self.rerun))}
        case_rng = np.random.default_rng([seed, 1])
        per_resample = n * max(self.original.shape[0], self.rerun.shape[0])
        batch = max(1, BATCH_VALUES // per_resample)
        out = []
        for start in range(0, resamples, batch):
            size = min(batch, resamples - start)
            cases = case_rng.integers(0, n, size=(size, n))
            stats = [_statistic(grid[passes[side][start:start + size, :, None], cases[:, None, :]].reshape(size, -1),
                                metric) for side, grid in (("original", self.original), ("rerun", self.rerun))]
            out.append(stats[1] / stats[0])
        return np.concatenate(out)


def _keyed(table: RowTable, rows: np.ndarray) -> dict[tuple[str, int], int]:
    """(id, k-th sending) -> row index, for the rows of one pass in sending order."""
    seen: dict[str, int] = {}
    out = {}
    for i in rows.tolist():
        case = table.ids.values[table.ids.codes[i]]
        k = seen.get(case, 0)
        seen[case] = k + 1
        out[(str(case), k)] = i
    return out


def _passes(table: RowTable, workload: str, backend: str) -> list[dict[tuple[str, int], int]]:
    by_pass = table.by_pass("measured", ok_only=True).get((workload, backend), {})
    return [_keyed(table, by_pass[index]) for index in sorted(by_pass)]


def paired_passes(original: RowTable, rerun: RowTable, workload: str, backend: str) -> Paired | None:
    """The paired measurements of one backend; None when either run measured none of it."""
    a, b = _passes(original, workload, backend), _passes(rerun, workload, backend)
    if not a or not b:
        return None
    common = set.intersection(*(set(p) for p in a + b))
    keys = sorted(common)
    if not keys:
        return None

    def grid(table: RowTable, passes: list[dict[tuple[str, int], int]]) -> tuple[np.ndarray, np.ndarray]:
        index = np.array([[p[k] for k in keys] for p in passes])
        probability = np.where(table.has_probability[index], table.probability[index], np.nan)
        return table.latency_ms[index], probability

    (la, pa), (lb, pb) = grid(original, a), grid(rerun, b)
    return Paired(keys, la, lb, pa, pb)


@dataclass(frozen=True)
class LatencyJudgement:
    metric: str
    band: tuple[float, float]
    point: float  # rerun / original on every request
    interval: tuple[float, float] | None  # central CONFIDENCE of the resampled ratios
    outcome: Outcome
    original: float
    rerun: float
    requests: tuple[int, int]
    bounds: tuple[tuple[float, float] | None, tuple[float, float] | None] = (None, None)
    minimum: int | None = None  # the requests a percentile's bounds need
    needed: int | None = None  # INCONCLUSIVE: requests per run that would decide it (None: none would)

    @property
    def reading(self) -> str:
        if self.interval is None:
            return f"needs >= {self.minimum} requests per run for its bounds, has {min(self.requests)}"
        low, high = self.band
        if self.outcome is Outcome.REPRODUCED:
            return f"inside [{low:g}, {high:g}]"
        if self.outcome is Outcome.NOT_REPRODUCED:
            way = "slower" if self.point > high else "faster"
            return f"{abs(self.point - 1) * 100:.1f}% {way}, outside [{low:g}, {high:g}]"
        decide = f"~{self.needed} requests per run would decide it" if self.needed else \
            "the estimate sits on the margin: no sample size decides it"
        return f"straddles [{low:g}, {high:g}]; {decide}"


def _percentile_bounds(pair: Paired, metric: str) -> tuple[tuple[tuple[float, float] | None, ...], int | None]:
    """Each run's order-statistic bounds of a percentile (P50, P95) and the requests they need; none for
    the mean."""
    if metric not in _QUANTILES:
        return (None, None), None
    q = _QUANTILES[metric]
    return tuple(order_statistic_bounds(np.sort(side.ravel()), q) for side in (pair.original, pair.rerun)), \
        minimum_sample(q)


def _outcome(interval: tuple[float, float], band: tuple[float, float]) -> Outcome:
    if band[0] <= interval[0] and interval[1] <= band[1]:
        return Outcome.REPRODUCED
    if interval[1] < band[0] or interval[0] > band[1]:
        return Outcome.NOT_REPRODUCED
    return Outcome.INCONCLUSIVE


def judge_latency(pair: Paired, metric: str, band: tuple[float, float], seed: int) -> LatencyJudgement:
    original, rerun = pair.statistic(metric)
    point = rerun / original if original > 0 else math.inf
    n = min(pair.requests)
    bounds, minimum = _percentile_bounds(pair, metric)
    base = LatencyJudgement(metric=metric, band=band, point=point, interval=None, outcome=Outcome.INCONCLUSIVE,
                            original=original, rerun=rerun, requests=pair.requests, bounds=(bounds[0], bounds[1]),
                            minimum=minimum)
    if minimum is not None and n < minimum:
        return base  # a percentile without its bounds is not judged from the bootstrap alone
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = (float(v) for v in np.percentile(pair.resampled_ratios(metric, seed), [tail, 100 - tail]))
    interval = (min(low, point), max(high, point))
    outcome = _outcome(interval, band)
    needed = _requests_to_decide(point, interval, band, n) if outcome is Outcome.INCONCLUSIVE else None
    return replace(base, interval=interval, outcome=outcome, needed=needed)


def _requests_to_decide(point: float, interval: tuple[float, float], band: tuple[float, float], n: int) -> int | None:
    """Requests per run at which the interval (narrowing as 1/sqrt(n) about the estimate) no longer crosses
    the nearest edge of the band."""
    distance = min(abs(point - band[0]), abs(point - band[1]))
    half = max(point - interval[0], interval[1] - point)
    if distance <= 0 or half <= 0:
        return None
    return math.ceil(n * (half / distance) ** 2)


@dataclass(frozen=True)
class ProbabilityJudgement:
    """The exact counts: largest |Δp| of a paired case and the cases whose decision differs."""

    max_delta: float | None
    flipped: list[str]
    max_delta_margin: float
    flips_margin: int

    @property
    def delta_outcome(self) -> Outcome | None:
        """None when neither run recorded a probability of a paired case (nothing to judge)."""
        if self.max_delta is None:
            return None
        return Outcome.REPRODUCED if self.max_delta <= self.max_delta_margin else Outcome.NOT_REPRODUCED

    @property
    def outcomes(self) -> list[Outcome]:
        judged = self.delta_outcome
        return [self.flips_outcome] if judged is None else [judged, self.flips_outcome]

    @property
    def flips_outcome(self) -> Outcome:
        return Outcome.REPRODUCED if len(self.flipped) <= self.flips_margin else Outcome.NOT_REPRODUCED


def judge_probabilities(pair: Paired, max_delta: float, flips: int) -> ProbabilityJudgement:
    """Pass k of the rerun against pass k of the original (as many passes as both have)."""
    passes = min(pair.p_original.shape[0], pair.p_rerun.shape[0])
    a, b = pair.p_original[:passes], pair.p_rerun[:passes]
    both = ~np.isnan(a) & ~np.isnan(b)
    delta = float(np.max(np.abs(a - b)[both])) if both.any() else None
    differs = both & ((a >= YES_THRESHOLD) != (b >= YES_THRESHOLD))
    flipped = sorted({pair.keys[k][0] for k in np.flatnonzero(differs.any(axis=0)).tolist()})
    return ProbabilityJudgement(delta, flipped, max_delta, flips)


Judgement = LatencyJudgement | ProbabilityJudgement
METRICS: Sequence[str] = ("mean", "p50", "p95")
