"""Statistics, correctness, agreement and gates: pure functions of (rows, recipe).

Rows come as a `row_table.RowTable` (numpy columns; a list of `Row` is converted once).
Grouping, pairing by (id, seq), agreement and stability are sorts and array comparisons,
so every step is O(n log n) at worst; the figures are the same values the pure-Python
implementation computed (docs/results.md), and the bootstrap is numpy (`BOOTSTRAP_METHOD`).

Nothing here reads files or starts processes, so `verify` can recompute `summary.json`
from `rows.jsonl` and the recipe and compare it for exact equality.

Determinism: a latency is `(end_ns - start_ns) / 1e6` (one correctly rounded division of
an integer); every mean is `math.fsum(values) / len(values)`. `fsum` is exactly rounded,
so a mean does not depend on summation order; rows of a pass are taken in `seq` order, so
no figure depends on the order of lines in rows.jsonl. Percentiles index `sorted()` values; the
median of an even count is `(a + b) / 2`. Nothing is rounded; absent values are None
(never NaN), so the result is strict JSON.

summary.json format history:
    1  (2026-11) first version (see docs/results.md; its types are in results/summary.py).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from ..decision import YES_THRESHOLD, decision_of
from ..errors import EvidenceError
from ..evidence.kernel_families import KernelFamilyFile
from ..evidence.recipe import (
    DecisionsUnchangedGate,
    ExternalGate,
    Gate,
    GpuNotThrottledGate,
    MaxProbabilityDeltaGate,
    MeanReductionGate,
    ProbabilitiesStableGate,
    Recipe,
    Workload,
)
from ..evidence.rows import Row
from ..evidence.summary import (
    SUMMARY_FORMAT_VERSION,
    BackendSummary,
    Comparison,
    DecisionMismatch,
    Energy,
    ExcludedRequests,
    GateResult,
    GpuState,
    OverallStats,
    PassStats,
    Pooled,
    Summary,
    TokenBuckets,
    WorkloadSummary,
)
from ..evidence.trace_recipe import GraphReplayGate, KernelTimeReductionGate
from .energy import GpuLog, energy_and_state
from .latency import latency_stats, overall_stats
from .load import load_summary
from .row_table import RowTable, as_table
from .trace_gates import trace_gate

__all__ = [
    "BOOTSTRAP_METHOD",
    "P95_RULES",
    "SUMMARY_FORMAT_VERSION",
    "TOKEN_BUCKETS",
    "bootstrap_mean_diff_ci",
    "decision_of",
    "latency_stats",
    "mean",
    "median",
    "p95_jevbench",
    "p95_nearest_rank",
    "pair_by_id_and_seq",
    "ranges_disjoint",
    "summarize",
    "token_bucket",
]

P95_RULES = {
    "p95_jevbench_ms": "sorted(latencies)[int(0.95 * N) - 1] (JevBench; N = 74 -> 70th value)",
    "p95_nearest_rank_ms": "sorted(latencies)[ceil(0.95 * N) - 1] (nearest rank; N = 74 -> 71st value)",
}
MEAN_RULE = "math.fsum(latencies_ms) / N with latency_ms = (end_ns - start_ns) / 1e6"
TOKEN_BUCKETS = ("<500", "500-2000", ">2000")
_MEASURED, _FEASIBILITY = "measured", "feasibility"


# --- small helpers ---------------------------------------------------------------------


def mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def median(values: Sequence[float]) -> float | None:
    s = sorted(values)
    n = len(s)
    if n == 0:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def p95_jevbench(values: Sequence[float]) -> float | None:
    """JevBench's rank: sorted[int(0.95 * N) - 1] (N = 1: index -1, the only value)."""
    if not values:
        return None
    return sorted(values)[int(0.95 * len(values)) - 1]


def p95_nearest_rank(values: Sequence[float]) -> float | None:
    """Nearest rank: sorted[ceil(0.95 * N) - 1]."""
    if not values:
        return None
    return sorted(values)[math.ceil(0.95 * len(values)) - 1]


def token_bucket(input_tokens: int | None) -> str | None:
    if input_tokens is None:
        return None
    if input_tokens < 500:
        return "<500"
    return "500-2000" if input_tokens <= 2000 else ">2000"


def ranges_disjoint(a: Sequence[float] | None, b: Sequence[float] | None) -> bool | None:
    """Whether closed ranges [lo, hi] do not overlap; None when either is unknown."""
    if a is None or b is None:
        return None
    return a[1] < b[0] or b[1] < a[0]


BOOTSTRAP_METHOD = {
    "version": 2,
    "name": "percentile bootstrap of mean(b) - mean(a), each side resampled independently with replacement",
    "generator": "numpy PCG64; resamples drawn in chunks, chunk c from SeedSequence(seed).spawn(chunks)[c], "
                 "indices by Generator.integers (int32), b's then a's",
    "chunk": "floor(2**22 / max(len(a), len(b))) resamples (at least 1); at most ~4M indices held per thread",
    "mean": "numpy mean of each resample (pairwise summation)",
    "bounds": "sorted_diffs[floor(alpha * n_boot)] and sorted_diffs[ceil((1 - alpha) * n_boot) - 1], "
              "alpha = (1 - confidence) / 2",
    "history": "1: random.Random(seed).choices and math.fsum (pure Python, until 2026-12); "
               "2: the same estimator in numpy, statistically equivalent, not bit-identical to 1",
}
BOOTSTRAP_CHUNK_VALUES = 1 << 22  # resampled indices per chunk: 16 MiB of int32, 32 MiB gathered


def _bootstrap_chunk(xa: np.ndarray, xb: np.ndarray, seed: np.random.SeedSequence, k: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mean_b = xb[rng.integers(0, len(xb), size=(k, len(xb)), dtype=np.int32)].mean(axis=1)
    mean_a = xa[rng.integers(0, len(xa), size=(k, len(xa)), dtype=np.int32)].mean(axis=1)
    return mean_b - mean_a


def bootstrap_mean_diff_ci(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, seed: int, n_boot: int = 10000,
    confidence: float = 0.95, threads: int | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(b) - mean(a), resampling each side independently.

    Method version 2 (`BOOTSTRAP_METHOD`): chunks of resamples, each from its own generator
    spawned from `seed`, so memory stays bounded whatever the sample size and the result does
    not depend on how many threads run the chunks (numpy releases the GIL while drawing and
    gathering). The same inputs, seed and platform always give the same interval.
    """
    xa, xb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not len(xa) or not len(xb):
        raise ValueError("bootstrap_mean_diff_ci needs at least one value on each side")
    if n_boot < 1:
        raise ValueError("n_boot must be at least 1")
    if max(len(xa), len(xb)) >= 2**31:
        raise ValueError("bootstrap_mean_diff_ci takes fewer than 2**31 values a side")
    per_chunk = max(1, BOOTSTRAP_CHUNK_VALUES // max(len(xa), len(xb)))
    sizes = [min(per_chunk, n_boot - start) for start in range(0, n_boot, per_chunk)]
    seeds = np.random.SeedSequence(seed).spawn(len(sizes))
    workers = max(1, min(threads or _usable_cpus(), len(sizes)))
    if workers == 1:
        parts = [_bootstrap_chunk(xa, xb, s, k) for s, k in zip(seeds, sizes, strict=True)]
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bootstrap") as pool:
            parts = list(pool.map(lambda sk: _bootstrap_chunk(xa, xb, *sk), zip(seeds, sizes, strict=True)))
    diffs = np.sort(np.concatenate(parts))
    alpha = (1 - confidence) / 2
    lo = diffs[min(math.floor(alpha * n_boot), n_boot - 1)]
    hi = diffs[max(math.ceil((1 - alpha) * n_boot) - 1, 0)]
    return float(lo), float(hi)


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# --- grouping --------------------------------------------------------------------------


class _Index:
    """Row indices of one study grouped by (workload, backend, phase, pass), each in `seq` order."""

    def __init__(self, table: RowTable, recipe: Recipe) -> None:
        self.table = table
        self.agreements: dict[tuple[str, str, str], _Agreement] = {}
        self.gpu_state: GpuState | None = None  # summary.json's gpu_state, when the run recorded one
        self.kernel_families: KernelFamilyFile | None = None  # kernel-families.json, when the run took traces
        self._check(table, recipe)
        t = table
        timed = t.phase.equals(_MEASURED) | t.phase.equals(_FEASIBILITY)
        self.groups = t.groups(np.flatnonzero(timed), ("workload", "backend", "phase", "pass_index"))
        self.excluded = {k: len(v) for k, v in t.groups(np.flatnonzero(~timed), ("workload", "backend", "phase")).items()}

    @staticmethod
    def _check(t: RowTable, recipe: Recipe) -> None:
        """The first row (in file order) of an undeclared backend or workload, or repeating a key, is an error."""
        if not len(t):
            return
        first_unknown, first_repeat = _Index._first_undeclared(t, recipe), _Index._first_repeat(t)
        if first_unknown < len(t) and first_unknown <= first_repeat:
            r = t.row(first_unknown)
            raise EvidenceError(
                f"Row {r.id!r} belongs to backend {r.backend!r} / workload {r.workload!r}, "
                f"which recipe {recipe.study.id} does not declare; summarize with the run's own recipe."
            )
        if first_repeat < len(t):
            r = t.row(first_repeat)
            raise EvidenceError(
                f"Two rows share backend {r.backend}, workload {r.workload}, {r.phase} pass "
                f"{r.pass_index}, seq {r.seq}; the rows file is corrupt."
            )

    @staticmethod
    def _first_undeclared(t: RowTable, recipe: Recipe) -> int:
        """The file position of the first row of a backend or workload the recipe does not declare (len(t): none)."""
        known_b = np.array([v in {b.name for b in recipe.backends} for v in t.backend.values])
        known_w = np.array([v in {w.name for w in recipe.workloads} for v in t.workload.values])
        unknown = ~(known_b[t.backend.codes] & known_w[t.workload.codes])
        return int(np.argmax(unknown)) if unknown.any() else len(t)

    @staticmethod
    def _first_repeat(t: RowTable) -> int:
        """The file position of the first row repeating an earlier row's (workload, backend, phase, pass, seq)."""
        order = np.lexsort((np.arange(len(t)), t.seq, t.pass_index, t.phase.codes, t.backend.codes, t.workload.codes))
        same = np.ones(len(t) - 1, dtype=bool)
        for col in (t.seq, t.pass_index, t.phase.codes, t.backend.codes, t.workload.codes):
            same &= col[order[1:]] == col[order[:-1]]
        repeats = order[1:][same]
        return int(repeats.min()) if len(repeats) else len(t)

    def passes(self, workload: str, backend: str, phase: str, expected: int) -> list[int]:
        """Expected pass indices 1..expected plus any extra index present in the rows."""
        present = {p for (w, b, ph, p) in self.groups if (w, b, ph) == (workload, backend, phase)}
        return sorted(present | set(range(1, expected + 1)))

    def rows(self, workload: str, backend: str, phase: str, pass_index: int) -> np.ndarray:
        return self.groups.get((workload, backend, phase, pass_index), _NONE)


_NONE = np.zeros(0, dtype=np.int64)


def _overall_stats(t: RowTable, idx: np.ndarray) -> OverallStats:
    return overall_stats(t.latency_ms[idx[t.ok[idx]]], len(idx))


def _pass_stats(t: RowTable, pass_index: int, idx: np.ndarray) -> PassStats:
    return PassStats(index=pass_index, **msgspec.structs.asdict(_overall_stats(t, idx)))


# --- per backend -----------------------------------------------------------------------


def _decides_yes(t: RowTable, idx: np.ndarray) -> np.ndarray:
    return t.probability[idx] >= YES_THRESHOLD  # decision_of, vectorised


@dataclass(frozen=True)
class _Correctness:
    """Thresholded decisions against labels (the first measured pass)."""

    correct: int
    labelled: int
    unanswered: int

    @classmethod
    def of(cls, t: RowTable, idx: np.ndarray) -> _Correctness:
        labelled = ~t.label.equals(None)[idx]
        answered = labelled & t.ok[idx] & t.has_probability[idx]
        yes = _decides_yes(t, idx)
        label_yes, label_no = t.label.equals("yes")[idx], t.label.equals("no")[idx]
        correct = answered & ((yes & label_yes) | (~yes & label_no))
        return cls(int(correct.sum()), int(labelled.sum()), int(labelled.sum() - answered.sum()))


def _decision_mismatches(t: RowTable, idx: np.ndarray) -> list[DecisionMismatch]:
    """Rows whose recorded decision differs from the one recomputed from their probability."""
    has = t.has_probability[idx]
    yes = _decides_yes(t, idx)
    recorded_yes, recorded_no = t.decision.equals("yes")[idx], t.decision.equals("no")[idx]
    wrong = np.flatnonzero(has & ~((yes & recorded_yes) | (~yes & recorded_no)))
    out: list[DecisionMismatch] = []
    for i in idx[wrong].tolist():
        r = t.row(i)
        out.append(DecisionMismatch(id=r.id, seq=r.seq, phase=r.phase, index=r.pass_index, recorded=r.decision,
                                    recomputed="no" if r.probability is None else decision_of(r.probability)))
    return out


@dataclass(frozen=True)
class _Stability:
    """Whether every (id, seq) has one bit-identical probability across the timed passes."""

    stable: bool | None  # None: fewer than two passes, or no rows
    passes: int
    changed_ids: list[str]
    errors: int
    incomplete: int


def _stability(t: RowTable, groups: list[np.ndarray]) -> _Stability:
    """Whether every (id, seq) has one bit-identical probability across all given passes."""
    idx = np.concatenate(groups) if groups else _NONE
    answered = t.ok[idx] & t.has_probability[idx]
    errors = int(len(idx) - answered.sum())
    keys = np.stack([t.ids.codes[idx].astype(np.int64), t.seq[idx]], axis=1)
    if len(idx):
        _, counts = np.unique(keys, axis=0, return_counts=True)
    else:
        counts = _NONE
    incomplete = int((counts != len(groups)).sum())
    values = idx[answered]
    order = np.lexsort((t.probability[values], t.seq[values], t.ids.codes[values]))
    v = values[order]
    same_key = (t.ids.codes[v][1:] == t.ids.codes[v][:-1]) & (t.seq[v][1:] == t.seq[v][:-1])
    differs = same_key & (t.probability[v][1:] != t.probability[v][:-1])
    changed = sorted({str(case) for case in t.ids.strings(v[1:][differs])})
    comparable = len(groups) >= 2 and len(counts) > 0
    stable = None if not comparable else (not changed and errors == 0 and incomplete == 0)
    return _Stability(stable, len(groups), changed, errors, incomplete)


def _pass_rows(index: _Index, workload: str, backend: str, phase: str, expected: int) -> dict[int, np.ndarray]:
    """pass index -> its row indices, for the expected passes and any extra one present."""
    return {p: index.rows(workload, backend, phase, p) for p in index.passes(workload, backend, phase, expected)}


def _joined(rows: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(rows) if rows else _NONE


def _mean_range(passes: list[PassStats]) -> list[float] | None:
    """[lowest, highest] pass mean, None when no pass has one."""
    means = [p.mean_ms for p in passes if p.mean_ms is not None]
    return [min(means), max(means)] if means else None


def pooled_levels(workload: Workload) -> Pooled | None:
    """Which levels a load workload's pooled figures cover: never levels of two timing rules. The open
    levels (latency from the schedule) when it declares any, else its closed ladder (from the send); None
    for a workload without a load (its figures pool its measured passes, as always)."""
    levels = workload.levels()
    if levels is None:
        return None
    open_levels = [level.id for level in levels if level.kind == "open"]
    pooled = open_levels or [level.id for level in levels]
    return Pooled(levels=pooled, latency_from="schedule" if open_levels else "send",
                  not_pooled=[level.id for level in levels if level.id not in pooled])


def _pooled_passes(recipe: Recipe, workload: Workload, pooled: Pooled | None, phase: str) -> set[int] | None:
    """The pass indexes of the pooled levels (a level's passes follow the previous level's); None: every pass."""
    if pooled is None:
        return None
    per_level = recipe.passes_per_level(workload)[0 if phase == _FEASIBILITY else 1]
    ids = [level.id for level in workload.levels() or []]
    return {k * per_level + i for k, level in enumerate(ids) if level in pooled.levels for i in range(1, per_level + 1)}


def _latency_rows(index: _Index, recipe: Recipe, workload: Workload, backend: str, phase: str) -> dict[int, np.ndarray]:
    """pass index -> row indices of the passes whose latencies the workload's figures pool."""
    expected = recipe.passes_for(workload)[0 if phase == _FEASIBILITY else 1]
    found = _pass_rows(index, workload.name, backend, phase, expected)
    keep = _pooled_passes(recipe, workload, pooled_levels(workload), phase)
    return found if keep is None else {p: rows for p, rows in found.items() if p in keep}


def _backend_summary(index: _Index, recipe: Recipe, workload: Workload, backend: str) -> BackendSummary:
    t = index.table
    meas = _latency_rows(index, recipe, workload, backend, _MEASURED)
    feas = _latency_rows(index, recipe, workload, backend, _FEASIBILITY)
    measured = [_pass_stats(t, p, rows) for p, rows in meas.items()]
    meas_rows = list(meas.values())
    n_feas, n_meas = recipe.passes_for(workload)
    timed = [*_pass_rows(index, workload.name, backend, _FEASIBILITY, n_feas).values(),
             *_pass_rows(index, workload.name, backend, _MEASURED, n_meas).values()]
    first = _Correctness.of(t, _first_measured(index, workload.name, backend))
    stability = _stability(t, timed)
    return BackendSummary(
        measured=measured,
        feasibility=[_pass_stats(t, p, rows) for p, rows in feas.items()],
        overall=_overall_stats(t, _joined(meas_rows)),
        pass_mean_range_ms=_mean_range(measured),
        correct=first.correct, labelled=first.labelled, unanswered=first.unanswered,
        correct_by_pass=[_Correctness.of(t, rows).correct for rows in meas_rows],
        decision_mismatches=_decision_mismatches(t, _joined(timed)),
        probabilities_stable=stability.stable, stability_passes=stability.passes,
        stability_changed_ids=stability.changed_ids, stability_errors=stability.errors,
        stability_incomplete=stability.incomplete,
        excluded_requests=ExcludedRequests(first=index.excluded.get((workload.name, backend, "first"), 0),
                                           warmup=index.excluded.get((workload.name, backend, "warmup"), 0)),
    )


# --- comparisons -----------------------------------------------------------------------


def _first_measured(index: _Index, workload: str, backend: str) -> np.ndarray:
    passes = index.passes(workload, backend, _MEASURED, 1)
    return index.rows(workload, backend, _MEASURED, passes[0])


def pair_by_id_and_seq(a_ids: np.ndarray, a_seq: np.ndarray, b_ids: np.ndarray, b_seq: np.ndarray
                       ) -> tuple[np.ndarray, int]:
    """For each a row, the position of the b row with the same (id code, seq) (the last one), or -1;
    and how many (id, seq) keys occur on one side only. Sort-based: O(n log n), no membership scans."""
    keys = np.concatenate([np.stack([a_ids, a_seq], axis=1), np.stack([b_ids, b_seq], axis=1)]).astype(np.int64)
    if not len(keys):
        return np.zeros(0, dtype=np.int64), 0
    _, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    ka, kb = inverse[:len(a_ids)], inverse[len(a_ids):]
    last_b = np.full(int(inverse.max()) + 1, -1, dtype=np.int64)
    np.maximum.at(last_b, kb, np.arange(len(kb), dtype=np.int64))
    in_a = np.zeros(len(last_b), dtype=bool)
    in_a[ka] = True
    unpaired = int((in_a != (last_b >= 0)).sum())
    return last_b[ka], unpaired


def _bucket_of(tokens: np.ndarray) -> np.ndarray:
    """token_bucket, vectorised: 0 "<500", 1 "500-2000", 2 ">2000"."""
    return np.where(tokens < 500, 0, np.where(tokens <= 2000, 1, 2))


def _max(values: np.ndarray) -> float | None:
    return max(values.tolist()) if len(values) else None


def _paired(t: RowTable, a_rows: np.ndarray, b_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Rows of a and b paired by (id, seq), both answered with a probability; (a, b, pair errors, unpaired)."""
    match, unpaired = pair_by_id_and_seq(t.ids.codes[a_rows], t.seq[a_rows], t.ids.codes[b_rows], t.seq[b_rows])
    paired = match >= 0
    a, b = a_rows[paired], b_rows[match[paired]]
    valid = t.ok[a] & t.ok[b] & t.has_probability[a] & t.has_probability[b]
    return a[valid], b[valid], int((~valid).sum()), unpaired


@dataclass(frozen=True)
class _Agreement:
    """Two backends' first measured passes, paired by (id, seq)."""

    agreement: int
    n: int
    pair_errors: int
    unpaired: int
    differing_ids: list[str]
    max_probability_delta: float | None
    by_tokens: TokenBuckets

    @property
    def missing(self) -> int:
        return self.pair_errors + self.unpaired


def _agreement(t: RowTable, a_rows: np.ndarray, b_rows: np.ndarray) -> _Agreement:
    """Pair the first measured pass of two backends by (id, seq) and compare their answers."""
    a, b, errors, unpaired = _paired(t, a_rows, b_rows)
    same = (t.probability[a] >= YES_THRESHOLD) == (t.probability[b] >= YES_THRESHOLD)
    differing = list(dict.fromkeys(str(case) for case in t.ids.strings(a[~same])))
    deltas = np.abs(t.probability[a] - t.probability[b])
    has_a, has_b = t.has_input_tokens[a], t.has_input_tokens[b]
    tokens = np.where(has_a, t.input_tokens[a], t.input_tokens[b])
    bucket = np.where(has_a | has_b, _bucket_of(tokens), -1)
    below, middle, above = (_max(deltas[bucket == i]) for i in range(len(TOKEN_BUCKETS)))
    return _Agreement(int(same.sum()), len(a), errors, unpaired, differing, _max(deltas),
                      TokenBuckets(below_500=below, from_500_to_2000=middle, above_2000=above))


@dataclass(frozen=True)
class _Speed:
    """A candidate's measured means against a baseline's."""

    baseline_mean_ms: float | None
    candidate_mean_ms: float | None
    speedup: float | None  # baseline mean / candidate mean
    percent_lower: float | None  # (baseline - candidate) / baseline * 100
    disjoint_ranges: bool | None  # pass mean ranges do not overlap
    every_pass_lower: bool | None  # every candidate pass mean below every baseline pass mean
    measured_errors: int

    @classmethod
    def of(cls, base: BackendSummary, cand: BackendSummary) -> _Speed:
        b, c = base.overall.mean_ms, cand.overall.mean_ms
        rb, rc = base.pass_mean_range_ms, cand.pass_mean_range_ms
        return cls(
            baseline_mean_ms=b,
            candidate_mean_ms=c,
            speedup=b / c if b is not None and c else None,
            percent_lower=(b - c) / b * 100 if b and c is not None else None,
            disjoint_ranges=ranges_disjoint(rb, rc),
            every_pass_lower=rb[0] > rc[1] if rb and rc else None,
            measured_errors=base.overall.errors + cand.overall.errors,
        )


def _agreement_of(index: _Index, workload: str, a: str, b: str) -> _Agreement:
    """_agreement of two backends' first measured passes, computed once per summary."""
    key = (workload, a, b)
    if key not in index.agreements:
        index.agreements[key] = _agreement(index.table, _first_measured(index, workload, a),
                                           _first_measured(index, workload, b))
    return index.agreements[key]


def _comparison(index: _Index, workload: str, backends: dict[str, BackendSummary], base: str, cand: str) -> Comparison:
    ag = _agreement_of(index, workload, base, cand)
    speed = _Speed.of(backends[base], backends[cand])
    return Comparison(baseline=base, candidate=cand, **dataclasses.asdict(speed), agreement=ag.agreement, n=ag.n,
                      pair_errors=ag.pair_errors, unpaired=ag.unpaired, differing_ids=ag.differing_ids,
                      max_probability_delta=ag.max_probability_delta, max_probability_delta_by_tokens=ag.by_tokens)


def _workload_summary(index: _Index, recipe: Recipe, workload: Workload) -> WorkloadSummary:
    names = [b.name for b in recipe.backends]
    backends = {b: _backend_summary(index, recipe, workload, b) for b in names}
    pairs = [(names[i], names[j]) for i in range(len(names)) for j in range(i + 1, len(names))]
    pooled = pooled_levels(workload)
    return WorkloadSummary(backends=backends,
                           comparisons=[_comparison(index, workload.name, backends, a, b) for a, b in pairs],
                           pooled=UNSET if pooled is None else pooled)


# --- gates -----------------------------------------------------------------------------


def _gate(gate: Gate, evaluated: bool, passed: bool | None, errors: int, detail: str) -> GateResult:
    if evaluated and errors:
        # A gate never passes over incomplete data: say what the data shows and why it fails.
        detail = f"{errors} failed or missing requests in the gated data, so the gate cannot pass; {detail}"
        passed = False
    return GateResult(name=gate.name, kind=gate.kind, evaluated=evaluated, passed=passed, errors=errors, detail=detail)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _mean_reduction(gate: MeanReductionGate, workloads: dict[str, WorkloadSummary]) -> GateResult:
    wl = workloads[gate.workload]
    s = _Speed.of(wl.backends[gate.baseline], wl.backends[gate.candidate])
    if s.percent_lower is None:
        return _gate(gate, True, False, s.measured_errors, "no measured latencies for one of the backends")
    checks = [s.percent_lower >= gate.min_percent]
    detail = (f"{gate.candidate} mean {_fmt(s.candidate_mean_ms)} ms is {_fmt(s.percent_lower, 2)}% below "
              f"{gate.baseline} {_fmt(s.baseline_mean_ms)} ms (required >= {gate.min_percent}%)")
    if gate.disjoint_ranges:
        checks.append(bool(s.disjoint_ranges))
        detail += f"; pass mean ranges disjoint: {s.disjoint_ranges}"
    if gate.every_pass:
        checks.append(bool(s.every_pass_lower))
        detail += f"; every candidate pass mean below every baseline pass mean: {s.every_pass_lower}"
    return _gate(gate, True, all(checks), s.measured_errors, detail)


def _max_delta(gate: MaxProbabilityDeltaGate, index: _Index) -> GateResult:
    ag = _agreement_of(index, gate.workload, gate.a, gate.b)
    delta = ag.max_probability_delta
    if delta is None:
        return _gate(gate, True, False, ag.missing, f"no paired probabilities of {gate.a} and {gate.b}")
    return _gate(gate, True, delta <= gate.max, ag.missing,
                 f"max |p({gate.a}) - p({gate.b})| = {delta!r} over {ag.n} pairs (allowed <= {gate.max})")


def _differing_margins(index: _Index, gate: DecisionsUnchangedGate) -> list[tuple[str, float]]:
    """(id, a's margin |p - 0.5|) of every paired case whose decisions differ, in row order."""
    t = index.table
    a, b, _errors, _unpaired = _paired(t, _first_measured(index, gate.workload, gate.a),
                                       _first_measured(index, gate.workload, gate.b))
    differ = (t.probability[a] >= YES_THRESHOLD) != (t.probability[b] >= YES_THRESHOLD)
    margins = np.abs(t.probability[a[differ]] - YES_THRESHOLD)
    return [(str(case), float(m)) for case, m in zip(t.ids.strings(a[differ]), margins, strict=True)]


def _margin_detail(gate: DecisionsUnchangedGate, margin: float, differing: list[tuple[str, float]],
                   counted: list[tuple[str, float]]) -> str:
    """The decision gate's detail under `min_margin`: the cases that count and each one excluded, with margins."""
    excluded = [(case, m) for case, m in differing if m <= margin]
    detail = f"; gated where |p({gate.a}) - 0.5| > {margin}"
    if counted:
        detail += "; differing there: " + ", ".join(f"{case} (margin {m:.4f})" for case, m in counted)
    if excluded:
        detail += "; excluded by the margin: " + ", ".join(f"{case} (margin {m:.4f})" for case, m in excluded)
    return detail


def _decisions(gate: DecisionsUnchangedGate, index: _Index) -> GateResult:
    ag = _agreement_of(index, gate.workload, gate.a, gate.b)
    if ag.n == 0:
        return _gate(gate, True, False, ag.missing, f"no paired decisions of {gate.a} and {gate.b}")
    detail = f"{ag.agreement}/{ag.n} decisions agree"
    margin = gate.min_margin
    if margin is None:
        if ag.differing_ids:
            detail += f"; differing: {', '.join(ag.differing_ids)}"
        return _gate(gate, True, ag.agreement == ag.n, ag.missing, detail)
    differing = _differing_margins(index, gate)
    counted = [(case, m) for case, m in differing if m > margin]
    detail += _margin_detail(gate, margin, differing, counted)
    return _gate(gate, True, not counted, ag.missing, detail)


def _stable(gate: ProbabilitiesStableGate, workloads: dict[str, WorkloadSummary]) -> GateResult:
    b = workloads[gate.workload].backends[gate.backend]
    errors = b.stability_errors + b.stability_incomplete
    if b.probabilities_stable is None:  # fewer than two passes, or no rows at all
        return _gate(gate, True, False, errors,
                     f"{gate.backend} has no probabilities in two or more passes to compare")
    changed = b.stability_changed_ids
    detail = (f"{gate.backend} probabilities across {b.stability_passes} feasibility and measured passes: "
              + (f"changed for {', '.join(changed)}" if changed else "exactly unchanged"))
    return _gate(gate, True, not changed, errors, detail)


def _not_throttled(gate: GpuNotThrottledGate, state: GpuState | None) -> GateResult:
    if state is None or not state.available:
        reason = "this run recorded no GPU state (no gpu.jsonl)" if state is None else state.reason
        return _gate(gate, True, False, 0, f"no GPU state to judge: {reason}")
    passes = state.measured_passes(gate.backend)
    if not passes:
        return _gate(gate, True, False, 0, "no measured pass has GPU state readings")
    slowed = [f"{p.label} ({', '.join(p.clock_event_reasons)})" for p in passes if p.slowdown]
    detail = (f"thermal or hardware slowdown in {len(slowed)} of {len(passes)} measured passes: {'; '.join(slowed)}"
              if slowed else f"no thermal or hardware slowdown reason in {len(passes)} measured passes")
    return _gate(gate, True, not slowed, 0, detail)


def _external(gate: ExternalGate) -> GateResult:
    return _gate(gate, False, None, 0, f"recorded, not evaluated by the runner; evidence: {gate.evidence}")


def _evaluate(gate: Gate, index: _Index, workloads: dict[str, WorkloadSummary]) -> GateResult:
    """The gate's result by its kind (docs/results.md, Gates)."""
    match gate:
        case MeanReductionGate():
            return _mean_reduction(gate, workloads)
        case MaxProbabilityDeltaGate():
            return _max_delta(gate, index)
        case DecisionsUnchangedGate():
            return _decisions(gate, index)
        case ProbabilitiesStableGate():
            return _stable(gate, workloads)
        case GpuNotThrottledGate():
            return _not_throttled(gate, index.gpu_state)
        case ExternalGate():
            return _external(gate)
        case KernelTimeReductionGate() | GraphReplayGate():
            return trace_gate(gate, index.kernel_families)


# --- the summary -----------------------------------------------------------------------


def _measured_requests(index: _Index, recipe: Recipe) -> dict[str, int]:
    """Rows of each measured pass, by the label the runner gives the pass's boundaries."""
    found = {}
    for w in recipe.workloads:
        for b in recipe.backends:
            for i in index.passes(w.name, b.name, _MEASURED, recipe.passes_for(w)[1]):
                found[f"{b.name}/{w.name}/measured-{i}"] = len(index.rows(w.name, b.name, _MEASURED, i))
    return found


def summarize(rows: RowTable | Iterable[Row], recipe: Recipe, gpu: GpuLog | None = None,
              kernel_families: KernelFamilyFile | None = None) -> Summary:
    """summary.json's record: a pure, deterministic function of the rows and the recipe
    (and of gpu.jsonl's events where the run has one: `energy` and `gpu_state`).

    `rows` is a RowTable (`row_table.read_table`) or any iterable of Row objects. `kernel_families` is
    the run's kernel-families.json (`trace_gates.trace_inputs`), read by the trace gates only."""
    index = _Index(as_table(rows), recipe)
    index.kernel_families = kernel_families  # the trace gates' data (results/trace_gates.trace_inputs)
    workloads = {w.name: _workload_summary(index, recipe, w) for w in recipe.workloads}
    energy: Energy | UnsetType = UNSET
    if gpu is not None:  # runs from 2026-12 on; older runs' summaries have neither key
        energy, index.gpu_state = energy_and_state(gpu, _measured_requests(index, recipe),
                                                   [b.name for b in recipe.backends])
    load = load_summary(index.table, recipe)  # recipes with a workload `load` only (results/load.py)
    return Summary(
        format_version=SUMMARY_FORMAT_VERSION,
        study_id=recipe.study.id,
        p95_rules=dict(P95_RULES),
        mean_rule=MEAN_RULE,
        backends=[b.name for b in recipe.backends],
        workloads=workloads,
        gates=[_evaluate(g, index, workloads) for g in recipe.gates],
        energy=energy,
        gpu_state=UNSET if index.gpu_state is None else index.gpu_state,
        load=UNSET if load is None else load,
    )
