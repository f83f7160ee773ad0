"""The statistics of a reproduction verdict (results/equivalence.py): the order-statistic bounds of a percentile
and the sample they need, the seeded paired bootstrap, and each outcome of an equivalence test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from openjev_repro.evidence.rows import Row
from openjev_repro.results.equivalence import (
    Outcome,
    judge_latency,
    judge_probabilities,
    minimum_sample,
    order_statistic_bounds,
    paired_passes,
)
from openjev_repro.results.row_table import RowTable


def test_minimum_samples_are_the_binomial_ones():
    # both 90% bounds of the q-quantile exist once 1 - q^n >= 0.95 and 1 - (1 - q)^n >= 0.95
    assert minimum_sample(0.95) == 59 and 0.95 ** 59 <= 0.05 < 0.95 ** 58
    assert minimum_sample(0.5) == 5


def test_order_statistic_bounds_hold_the_quantile_at_their_confidence():
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(400):
        sample = np.sort(rng.exponential(size=148))
        low, high = order_statistic_bounds(sample, 0.95)
        hits += low <= -math.log(0.05) <= high  # the exponential's true P95
    assert 0.85 <= hits / 400 <= 0.97  # 90% nominal (conservative: discrete ranks)
    assert order_statistic_bounds(np.arange(58.0), 0.95) is None
    low, high = order_statistic_bounds(np.arange(1.0, 101.0), 0.5)
    assert (low, high) == (42.0, 59.0)  # ranks 42 and 59 of 100 for the median at 90%


def _table(backend_ms: dict[int, list[float]], probabilities: list[float], ids: list[str]) -> RowTable:
    rows, clock = [], 0
    for index, latencies in backend_ms.items():
        for seq, (case, ms) in enumerate(zip(ids, latencies, strict=True)):
            p = probabilities[seq]
            rows.append(Row(id=case, backend="b", workload="w", phase="measured", pass_index=index, seq=seq,
                            start_ns=clock, end_ns=clock + int(ms * 1e6), status=200, body_sha256=None, probability=p,
                            decision="yes" if p >= 0.5 else "no", label=None, input_tokens=None, error=None))
            clock += int(ms * 1e6) + 1
    return RowTable.from_rows(rows)


IDS = [f"c{i:03d}" for i in range(80)]
BASE = np.random.default_rng(3).uniform(20, 200, size=80)
PROBS = list(np.linspace(0.05, 0.95, 80))


def _pair(scale: float, noise: float = 0.0, probs: list[float] = PROBS):
    rng = np.random.default_rng(11)
    original = _table({1: list(BASE), 2: list(BASE * 1.01)}, PROBS, IDS)
    rerun = _table({p: list(BASE * scale * (1 + noise * rng.standard_normal(80))) for p in (1, 2)}, probs, IDS)
    return paired_passes(original, rerun, "w", "b")


@pytest.mark.parametrize(("scale", "outcome"), [(1.0, Outcome.REPRODUCED), (1.3, Outcome.NOT_REPRODUCED)])
def test_a_clear_ratio_is_decided(scale, outcome):
    for metric in ("mean", "p50", "p95"):
        judged = judge_latency(_pair(scale), metric, (0.9, 1.1), seed=1)
        assert judged.outcome is outcome, (metric, judged)
        assert judged.interval[0] <= judged.point <= judged.interval[1]


def test_a_ratio_near_the_margin_is_inconclusive_and_says_how_many_requests_would_decide_it():
    judged = judge_latency(_pair(1.08, noise=0.3), "mean", (0.9, 1.1), seed=1)
    assert judged.outcome is Outcome.INCONCLUSIVE
    assert judged.needed is not None and judged.needed > min(judged.requests)
    assert "requests per run would decide it" in judged.reading


def test_the_bootstrap_is_seeded_and_pairs_cases():
    pair = _pair(1.0, noise=0.2)
    assert np.array_equal(pair.resampled_ratios("mean", 5), pair.resampled_ratios("mean", 5))
    assert not np.array_equal(pair.resampled_ratios("mean", 5), pair.resampled_ratios("mean", 6))
    same = _pair(1.0)  # rerun == original case by case (up to pass 2's 1%): paired resamples barely move
    ratios = same.resampled_ratios("mean", 5)
    assert ratios.min() > 0.985 and ratios.max() < 1.015


def test_probabilities_and_decisions_are_counted_exactly():
    moved = list(PROBS)
    moved[40] = 1 - moved[40]  # one case crosses 0.5
    judged = judge_probabilities(_pair(1.0, probs=moved), max_delta=0.0, flips=0)
    assert judged.flipped == [IDS[40]] and judged.flips_outcome is Outcome.NOT_REPRODUCED
    assert judged.max_delta == pytest.approx(abs(1 - 2 * PROBS[40]))
    assert judge_probabilities(_pair(1.0), max_delta=0.0, flips=0).delta_outcome is Outcome.REPRODUCED


def test_a_difference_between_passes_counts_as_uncertainty():
    """The rerun's second pass 20% slower than its first: resampling passes spreads the interval over both
    levels (1.0 to 1.2), where resampling cases alone would report a tight 1.1."""
    original = _table({1: list(BASE), 2: list(BASE)}, PROBS, IDS)
    rerun = _table({1: list(BASE), 2: list(BASE * 1.2)}, PROBS, IDS)
    judged = judge_latency(paired_passes(original, rerun, "w", "b"), "mean", (0.9, 1.3), seed=1)
    assert judged.point == pytest.approx(1.1)
    assert judged.interval[0] <= 1.01 and judged.interval[1] >= 1.19


def test_the_ratios_do_not_depend_on_the_batch_size(monkeypatch):
    from openjev_repro.results import equivalence

    pair = _pair(1.05, noise=0.2)
    whole = pair.resampled_ratios("p95", 9)
    monkeypatch.setattr(equivalence, "BATCH_VALUES", 1000)  # 6 resamples per batch here
    assert np.array_equal(pair.resampled_ratios("p95", 9), whole)
