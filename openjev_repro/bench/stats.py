"""Summary statistics of latency samples in nanoseconds, reported in microseconds."""

from __future__ import annotations

import math
import statistics

import msgspec

__all__ = ["Latencies", "summarize_ns"]


class Latencies(msgspec.Struct, frozen=True, kw_only=True):
    """n, p50 (median), p99 (nearest rank), mean and min, in microseconds."""

    n: int
    p50_us: float
    p99_us: float
    mean_us: float
    min_us: float


def summarize_ns(samples_ns: list[int]) -> Latencies:
    ordered = sorted(samples_ns)
    n = len(ordered)
    return Latencies(n=n, p50_us=round(statistics.median(ordered) / 1e3, 2),
                     p99_us=round(ordered[math.ceil(0.99 * n) - 1] / 1e3, 2),
                     mean_us=round(statistics.fmean(ordered) / 1e3, 2), min_us=round(ordered[0] / 1e3, 2))
