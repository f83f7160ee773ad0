"""The latency figures of one list of latencies, by the project's rules (docs/results.md).

Its own module so that both `statistics` (summary.json's per-backend figures) and `load` (the
per-level figures of load runs) read the same rules without importing each other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np

from ..evidence.summary import LatencyStats, OverallStats

__all__ = ["latency_stats", "overall_stats", "p99_nearest_rank"]


def latency_stats(latencies_ms: Sequence[float] | np.ndarray) -> LatencyStats:
    """n, mean, median, both P95 rules, min and max of a list of latencies (None when empty).

    The values are sorted once (numpy for an array) and every figure is read from the sorted
    Python floats with the rules above, so an array and the same values in a list give
    identical results."""
    s = np.sort(latencies_ms).tolist() if isinstance(latencies_ms, np.ndarray) else sorted(latencies_ms)
    n = len(s)
    if n == 0:
        return LatencyStats(n=0, mean_ms=None, p50_ms=None, p95_jevbench_ms=None, p95_nearest_rank_ms=None,
                            min_ms=None, max_ms=None)
    return LatencyStats(
        n=n,
        mean_ms=math.fsum(s) / n,
        p50_ms=s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2,
        p95_jevbench_ms=s[int(0.95 * n) - 1],
        p95_nearest_rank_ms=s[math.ceil(0.95 * n) - 1],
        min_ms=s[0],
        max_ms=s[-1],
    )


def overall_stats(latencies_ms: Sequence[float] | np.ndarray, requests: int) -> OverallStats:
    """`latency_stats` of the successful requests among `requests` sent (the rest failed)."""
    stats = latency_stats(latencies_ms)
    return OverallStats(requests=requests, errors=requests - stats.n, **msgspec.structs.asdict(stats))


def p99_nearest_rank(latencies_ms: Sequence[float] | np.ndarray) -> float | None:
    """Nearest rank: sorted[ceil(0.99 * N) - 1] (N < 100: the largest value); None when empty."""
    s = np.sort(np.asarray(latencies_ms, dtype=np.float64)).tolist()
    return s[math.ceil(0.99 * len(s)) - 1] if s else None
