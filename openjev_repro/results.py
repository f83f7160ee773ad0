"""Statistics, correctness, agreement and gates: pure functions of (rows, recipe).

Nothing here reads files or starts processes, so `verify` can recompute `summary.json`
from `rows.jsonl` and the recipe and compare it for exact equality.

Determinism: a latency is `(end_ns - start_ns) / 1e6` (one correctly rounded division of
an integer); every mean is `math.fsum(values) / len(values)`. `fsum` is exactly rounded,
so a mean does not depend on summation order; rows of a pass are taken in `seq` order, so
no figure depends on the order of lines in rows.jsonl. Percentiles index `sorted()` values; the
median of an even count is `(a + b) / 2`. Nothing is rounded; absent values are None
(never NaN), so the result is strict JSON.

summary.json format history:
    1  (2026-11) first version (see docs/results.md).
"""

from __future__ import annotations

import math
import random
from typing import Iterable, Sequence

from .errors import EvidenceError
from .recipe import Recipe
from .rows import Row

__all__ = [
    "SUMMARY_FORMAT_VERSION",
    "P95_RULES",
    "TOKEN_BUCKETS",
    "summarize",
    "latency_stats",
    "mean",
    "median",
    "p95_jevbench",
    "p95_nearest_rank",
    "decision_of",
    "token_bucket",
    "ranges_disjoint",
    "bootstrap_mean_diff_ci",
]

SUMMARY_FORMAT_VERSION = 1
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


def latency_stats(latencies_ms: Sequence[float]) -> dict:
    """n, mean, median, both P95 rules, min and max of a list of latencies (None when empty)."""
    values = list(latencies_ms)
    return {
        "n": len(values),
        "mean_ms": mean(values),
        "p50_ms": median(values),
        "p95_jevbench_ms": p95_jevbench(values),
        "p95_nearest_rank_ms": p95_nearest_rank(values),
        "min_ms": min(values) if values else None,
        "max_ms": max(values) if values else None,
    }


def decision_of(probability: float) -> str:
    """A noul decision is "yes" when p_yes >= 0.5."""
    return "yes" if probability >= 0.5 else "no"


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


def bootstrap_mean_diff_ci(
    a: Sequence[float], b: Sequence[float], seed: int, n_boot: int = 10000, confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(b) - mean(a), resampling each side independently.

    Seeded `random.Random(seed)`: the same inputs and seed always give the same interval.
    Bounds are sorted_diffs[floor(alpha * n_boot)] and sorted_diffs[ceil((1 - alpha) * n_boot) - 1]
    with alpha = (1 - confidence) / 2.
    """
    if not a or not b:
        raise ValueError("bootstrap_mean_diff_ci needs at least one value on each side")
    if n_boot < 1:
        raise ValueError("n_boot must be at least 1")
    rng = random.Random(seed)
    a, b = list(a), list(b)
    diffs = sorted(
        math.fsum(rng.choices(b, k=len(b))) / len(b) - math.fsum(rng.choices(a, k=len(a))) / len(a)
        for _ in range(n_boot)
    )
    alpha = (1 - confidence) / 2
    lo = diffs[min(int(math.floor(alpha * n_boot)), n_boot - 1)]
    hi = diffs[max(math.ceil((1 - alpha) * n_boot) - 1, 0)]
    return lo, hi


# --- grouping --------------------------------------------------------------------------


class _Index:
    """Rows of one study grouped by (workload, backend, phase, pass), in file order."""

    def __init__(self, rows: Iterable[Row], recipe: Recipe) -> None:
        backends = {b.name for b in recipe.backends}
        workloads = {w.name for w in recipe.workloads}
        self.groups: dict[tuple[str, str, str, int], list[Row]] = {}
        self.excluded: dict[tuple[str, str, str], int] = {}
        seen: set[tuple] = set()
        for r in rows:
            if r.backend not in backends or r.workload not in workloads:
                raise EvidenceError(
                    f"Row {r.id!r} belongs to backend {r.backend!r} / workload {r.workload!r}, "
                    f"which recipe {recipe.study.id} does not declare; summarize with the run's own recipe."
                )
            key = (r.workload, r.backend, r.phase, r.pass_index, r.seq)
            if key in seen:
                raise EvidenceError(
                    f"Two rows share backend {r.backend}, workload {r.workload}, {r.phase} pass "
                    f"{r.pass_index}, seq {r.seq}; the rows file is corrupt."
                )
            seen.add(key)
            if r.phase in (_MEASURED, _FEASIBILITY):
                self.groups.setdefault((r.workload, r.backend, r.phase, r.pass_index), []).append(r)
            else:
                k = (r.workload, r.backend, r.phase)
                self.excluded[k] = self.excluded.get(k, 0) + 1
        for group in self.groups.values():
            group.sort(key=lambda r: r.seq)  # request order, whatever the file order

    def passes(self, workload: str, backend: str, phase: str, expected: int) -> list[int]:
        """Expected pass indices 1..expected plus any extra index present in the rows."""
        present = {p for (w, b, ph, p) in self.groups if (w, b, ph) == (workload, backend, phase)}
        return sorted(present | set(range(1, expected + 1)))

    def rows(self, workload: str, backend: str, phase: str, pass_index: int) -> list[Row]:
        return self.groups.get((workload, backend, phase, pass_index), [])


def _pass_stats(pass_index: int, rows: list[Row]) -> dict:
    ok = [r.latency_ms for r in rows if r.ok]
    stats = latency_stats(ok)
    return {"pass": pass_index, "requests": len(rows), "errors": len(rows) - len(ok), **stats}


# --- per backend -----------------------------------------------------------------------


def _correctness(rows: list[Row]) -> dict:
    labelled = [r for r in rows if r.label is not None]
    answered = [r for r in labelled if r.ok and r.probability is not None]
    correct = sum(1 for r in answered if decision_of(r.probability) == r.label)
    return {"correct": correct, "labelled": len(labelled), "unanswered": len(labelled) - len(answered)}


def _decision_mismatches(rows: Iterable[Row]) -> list[dict]:
    """Rows whose recorded decision differs from the one recomputed from their probability."""
    out = []
    for r in rows:
        if r.probability is None:
            continue
        recomputed = decision_of(r.probability)
        if r.decision != recomputed:
            out.append({"id": r.id, "seq": r.seq, "phase": r.phase, "pass": r.pass_index,
                        "recorded": r.decision, "recomputed": recomputed})
    return out


def _stability(groups: list[list[Row]]) -> dict:
    """Whether every (id, seq) has one bit-identical probability across all given passes."""
    values: dict[tuple[str, int], set[float]] = {}
    counts: dict[tuple[str, int], int] = {}
    errors = 0
    for rows in groups:
        for r in rows:
            key = (r.id, r.seq)
            counts[key] = counts.get(key, 0) + 1
            if r.ok and r.probability is not None:
                values.setdefault(key, set()).add(r.probability)
            else:
                errors += 1
    changed = sorted({k[0] for k, v in values.items() if len(v) > 1})
    incomplete = sum(1 for c in counts.values() if c != len(groups))
    comparable = len(groups) >= 2 and bool(counts)
    stable = None if not comparable else (not changed and errors == 0 and incomplete == 0)
    return {"probabilities_stable": stable, "stability_passes": len(groups), "stability_changed_ids": changed,
            "stability_errors": errors, "stability_incomplete": incomplete}


def _backend_summary(index: _Index, recipe: Recipe, workload: str, backend: str) -> dict:
    n_feas, n_meas = recipe.passes_for(next(w for w in recipe.workloads if w.name == workload))
    meas_idx = index.passes(workload, backend, _MEASURED, n_meas)
    feas_idx = index.passes(workload, backend, _FEASIBILITY, n_feas)
    meas_rows = [index.rows(workload, backend, _MEASURED, p) for p in meas_idx]
    feas_rows = [index.rows(workload, backend, _FEASIBILITY, p) for p in feas_idx]
    measured = [_pass_stats(p, rows) for p, rows in zip(meas_idx, meas_rows)]
    all_measured = [r for rows in meas_rows for r in rows]
    overall = _pass_stats(0, all_measured)
    del overall["pass"]
    means = [p["mean_ms"] for p in measured if p["mean_ms"] is not None]
    first = meas_rows[0] if meas_rows else []
    return {
        "measured": measured,
        "feasibility": [_pass_stats(p, rows) for p, rows in zip(feas_idx, feas_rows)],
        "overall": overall,
        "pass_mean_range_ms": [min(means), max(means)] if means else None,
        **_correctness(first),
        "correct_by_pass": [_correctness(rows)["correct"] for rows in meas_rows],
        "decision_mismatches": _decision_mismatches(r for rows in feas_rows + meas_rows for r in rows),
        **_stability(feas_rows + meas_rows),
        "excluded_requests": {ph: index.excluded.get((workload, backend, ph), 0) for ph in ("first", "warmup")},
    }


# --- comparisons -----------------------------------------------------------------------


def _first_measured(index: _Index, workload: str, backend: str) -> list[Row]:
    passes = index.passes(workload, backend, _MEASURED, 1)
    return index.rows(workload, backend, _MEASURED, passes[0])


def _agreement(a_rows: list[Row], b_rows: list[Row]) -> dict:
    """Pair the first measured pass of two backends by (id, seq) and compare their answers."""
    b_by_key = {(r.id, r.seq): r for r in b_rows}
    a_keys = {(r.id, r.seq) for r in a_rows}
    agree, n, errors = 0, 0, 0
    differing: list[str] = []
    deltas: list[float] = []
    by_bucket: dict[str, list[float]] = {k: [] for k in TOKEN_BUCKETS}
    for ra in a_rows:
        rb = b_by_key.get((ra.id, ra.seq))
        if rb is None:
            continue
        if not (ra.ok and rb.ok and ra.probability is not None and rb.probability is not None):
            errors += 1
            continue
        n += 1
        if decision_of(ra.probability) == decision_of(rb.probability):
            agree += 1
        elif ra.id not in differing:
            differing.append(ra.id)
        delta = abs(ra.probability - rb.probability)
        deltas.append(delta)
        bucket = token_bucket(ra.input_tokens if ra.input_tokens is not None else rb.input_tokens)
        if bucket is not None:
            by_bucket[bucket].append(delta)
    unpaired = len(a_keys ^ set(b_by_key))
    return {
        "agreement": agree, "n": n, "pair_errors": errors, "unpaired": unpaired,
        "differing_ids": differing,
        "max_probability_delta": max(deltas) if deltas else None,
        "max_probability_delta_by_tokens": {k: (max(v) if v else None) for k, v in by_bucket.items()},
    }


def _speed(base: dict, cand: dict) -> dict:
    b, c = base["overall"]["mean_ms"], cand["overall"]["mean_ms"]
    rb, rc = base["pass_mean_range_ms"], cand["pass_mean_range_ms"]
    return {
        "baseline_mean_ms": b,
        "candidate_mean_ms": c,
        "speedup": b / c if b is not None and c else None,
        "percent_lower": (b - c) / b * 100 if b and c is not None else None,
        "disjoint_ranges": ranges_disjoint(rb, rc),
        # every candidate pass mean below every baseline pass mean
        "every_pass_lower": rb[0] > rc[1] if rb and rc else None,
        "measured_errors": base["overall"]["errors"] + cand["overall"]["errors"],
    }


def _comparison(index: _Index, workload: str, backends: dict, base: str, cand: str) -> dict:
    agreement = _agreement(_first_measured(index, workload, base), _first_measured(index, workload, cand))
    return {"baseline": base, "candidate": cand, **_speed(backends[base], backends[cand]), **agreement}


def _workload_summary(index: _Index, recipe: Recipe, workload: str) -> dict:
    names = [b.name for b in recipe.backends]
    backends = {b: _backend_summary(index, recipe, workload, b) for b in names}
    pairs = [(names[i], names[j]) for i in range(len(names)) for j in range(i + 1, len(names))]
    return {"backends": backends, "comparisons": [_comparison(index, workload, backends, a, b) for a, b in pairs]}


# --- gates -----------------------------------------------------------------------------


def _gate(gate, evaluated: bool, passed: bool | None, errors: int, detail: str) -> dict:
    if evaluated and errors:
        # A gate never passes over incomplete data: say what the data shows and why it fails.
        detail = f"{errors} failed or missing requests in the gated data, so the gate cannot pass; {detail}"
        passed = False
    return {"name": gate.name, "kind": gate.kind, "evaluated": evaluated, "passed": passed,
            "errors": errors, "detail": detail}


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _mean_reduction(gate, index: _Index, summary: dict) -> dict:
    wl = summary["workloads"][gate.workload]
    s = _speed(wl["backends"][gate.baseline], wl["backends"][gate.candidate])
    if s["percent_lower"] is None:
        return _gate(gate, True, False, s["measured_errors"], "no measured latencies for one of the backends")
    checks = [s["percent_lower"] >= gate.min_percent]
    detail = (f"{gate.candidate} mean {_fmt(s['candidate_mean_ms'])} ms is {_fmt(s['percent_lower'], 2)}% below "
              f"{gate.baseline} {_fmt(s['baseline_mean_ms'])} ms (required >= {gate.min_percent}%)")
    if gate.disjoint_ranges:
        checks.append(bool(s["disjoint_ranges"]))
        detail += f"; pass mean ranges disjoint: {s['disjoint_ranges']}"
    if gate.every_pass:
        checks.append(bool(s["every_pass_lower"]))
        detail += f"; every candidate pass mean below every baseline pass mean: {s['every_pass_lower']}"
    return _gate(gate, True, all(checks), s["measured_errors"], detail)


def _pair_gate(gate, index: _Index) -> tuple[dict, int]:
    ag = _agreement(_first_measured(index, gate.workload, gate.a), _first_measured(index, gate.workload, gate.b))
    return ag, ag["pair_errors"] + ag["unpaired"]


def _max_delta(gate, index: _Index, summary: dict) -> dict:
    ag, errors = _pair_gate(gate, index)
    delta = ag["max_probability_delta"]
    if delta is None:
        return _gate(gate, True, False, errors, f"no paired probabilities of {gate.a} and {gate.b}")
    return _gate(gate, True, delta <= gate.max, errors,
                 f"max |p({gate.a}) - p({gate.b})| = {delta!r} over {ag['n']} pairs (allowed <= {gate.max})")


def _decisions(gate, index: _Index, summary: dict) -> dict:
    ag, errors = _pair_gate(gate, index)
    if ag["n"] == 0:
        return _gate(gate, True, False, errors, f"no paired decisions of {gate.a} and {gate.b}")
    detail = f"{ag['agreement']}/{ag['n']} decisions agree"
    if ag["differing_ids"]:
        detail += f"; differing: {', '.join(ag['differing_ids'])}"
    return _gate(gate, True, ag["agreement"] == ag["n"], errors, detail)


def _stable(gate, index: _Index, summary: dict) -> dict:
    b = summary["workloads"][gate.workload]["backends"][gate.backend]
    errors = b["stability_errors"] + b["stability_incomplete"]
    if b["probabilities_stable"] is None:  # fewer than two passes, or no rows at all
        return _gate(gate, True, False, errors,
                     f"{gate.backend} has no probabilities in two or more passes to compare")
    changed = b["stability_changed_ids"]
    detail = (f"{gate.backend} probabilities across {b['stability_passes']} feasibility and measured passes: "
              + (f"changed for {', '.join(changed)}" if changed else "exactly unchanged"))
    return _gate(gate, True, not changed, errors, detail)


def _external(gate, index: _Index, summary: dict) -> dict:
    return _gate(gate, False, None, 0, f"recorded, not evaluated by the runner; evidence: {gate.evidence}")


_GATES = {
    "mean_reduction": _mean_reduction,
    "max_probability_delta": _max_delta,
    "decisions_unchanged": _decisions,
    "probabilities_stable": _stable,
    "external": _external,
}


# --- the summary -----------------------------------------------------------------------


def summarize(rows: list[Row], recipe: Recipe) -> dict:
    """The content of summary.json: a pure, deterministic function of the rows and the recipe."""
    index = _Index(rows, recipe)
    summary = {
        "format_version": SUMMARY_FORMAT_VERSION,
        "study_id": recipe.study.id,
        "p95_rules": dict(P95_RULES),
        "mean_rule": MEAN_RULE,
        "backends": [b.name for b in recipe.backends],
        "workloads": {w.name: _workload_summary(index, recipe, w.name) for w in recipe.workloads},
    }
    summary["gates"] = [_GATES[g.kind](g, index, summary) for g in recipe.gates]
    return summary
