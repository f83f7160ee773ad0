"""Summary statistics of latency samples in nanoseconds, reported in microseconds."""

from __future__ import annotations

import math
import statistics

__all__ = ["summarize_ns"]


def summarize_ns(samples_ns: list[int]) -> dict[str, float]:
    """n, p50 (median), p99 (nearest rank), mean and min, in microseconds."""
    ordered = sorted(samples_ns)
    n = len(ordered)
    return {
        "n": n,
        "p50_us": round(statistics.median(ordered) / 1e3, 2),
        "p99_us": round(ordered[math.ceil(0.99 * n) - 1] / 1e3, 2),
        "mean_us": round(statistics.fmean(ordered) / 1e3, 2),
        "min_us": round(ordered[0] / 1e3, 2),
    }
