"""The figure rules: a published figure next to ours, labelled exact, within rounding or mismatch.

Shared by every import format (`audit/imports/`) and by `verify`, which recomputes the figures
of an imported run from its rows with these same functions. Pure functions: no file access.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from ..errors import EvidenceError
from ..results.statistics import latency_stats, mean

__all__ = [
    "SIGNIFICANT_DIGITS",
    "Samples",
    "arms_of",
    "baseline_and_candidates",
    "classify",
    "figure",
    "half_unit",
    "layout_figures",
    "published_figures",
    "summary_from_figures",
]

def _obj(doc: Any, key: str) -> dict[str, Any]:
    """doc[key] when doc is an object and that value is an object too; {} otherwise."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}


# A binary double carries 15 significant decimal digits (DBL_DIG); digits a JSON writer
# prints past the 15th are representation noise, not precision.
SIGNIFICANT_DIGITS = 15


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def half_unit(published: float) -> float:
    """Half a unit of the last decimal `published` prints, counting at most 15 significant digits."""
    if isinstance(published, int):
        return 0.5
    text = repr(float(published))
    value = Decimal(text)
    digits, exponent = len(value.as_tuple().digits), value.as_tuple().exponent
    assert isinstance(exponent, int)
    decimals = -exponent - max(0, digits - SIGNIFICANT_DIGITS)
    return 0.5 * 10.0 ** -decimals


def classify(ours: float | None, published: Any, propagated: float = 0.0) -> dict[str, Any]:
    """exact (bit for bit), within_rounding (|ours - published| <= half a unit) or mismatch.

    `propagated` widens the tolerance of a figure derived from other published figures by
    the change their own half units can make (see `published_figures`).
    """
    if ours is None or not _number(published):
        return {"status": "mismatch", "difference": None, "half_unit": None}
    tolerance = half_unit(published) + propagated
    difference = abs(float(ours) - float(published))
    if float(ours) == float(published):
        status = "exact"
    elif isinstance(published, int) and not isinstance(published, bool):
        status = "mismatch"  # a count reproduces exactly or not at all
    else:
        status = "within_rounding" if difference <= tolerance else "mismatch"
    return {"status": status, "difference": difference, "half_unit": tolerance}


_ORDER = {"exact": 0, "within_rounding": 1, "mismatch": 2}


def figure(arm: str, pass_index: int | None, name: str, published: Any, ours: Any,
            propagated: float = 0.0) -> dict[str, Any]:
    if isinstance(ours, dict):  # P95: one value per rank rule; the best-reproducing rule wins
        outcomes = {rule: classify(value, published) for rule, value in ours.items()}
        best = min(outcomes.values(), key=lambda o: (_ORDER[o["status"]], o["difference"] or 0))
        rules = [r for r, o in outcomes.items() if o["status"] == best["status"] != "mismatch"]
        value = ours[rules[0]] if rules else None
        return {"arm": arm, "pass": pass_index, "figure": name, "published": published, "ours": value,
                "ours_by_rule": ours, **best, "rule": " and ".join(rules) or None,
                "matches": best["status"] != "mismatch"}
    outcome = classify(ours, published, propagated)
    return {"arm": arm, "pass": pass_index, "figure": name, "published": published, "ours": ours, **outcome,
            "rule": None, "matches": outcome["status"] != "mismatch"}


def arms_of(summary: dict) -> dict[str, Any]:
    arms = summary.get("arms", summary)
    if not isinstance(arms, dict):
        raise EvidenceError("summary.json: arms is not an object.")
    return arms


def baseline_and_candidates(arms: Iterable[str]) -> tuple[str, list[str]]:
    names = list(arms)
    base = "baseline" if "baseline" in names else names[0]
    return base, [n for n in names if n != base]


def _no_rows(arm: str, index: int | None) -> dict[str, Any]:
    """A published arm or pass that no imported row backs: a mismatch."""
    return {"arm": arm, "pass": index, "figure": "rows", "published": "present", "ours": None,
            "status": "mismatch", "difference": None, "half_unit": None, "rule": None, "matches": False}


def _pass_index(p: Any, arm_name: Any) -> int:
    if not isinstance(p, dict) or not _count(p.get("pass", 0)):
        raise EvidenceError(f"summary.json: {arm_name}.passes holds {p!r}, not an object with an integer pass.")
    return int(p.get("pass", 0))


def _ours_of_pass(rows: list[float], max_delta: dict[tuple[str, int], float] | None, key: tuple[str, int]
                  ) -> dict[str, Any]:
    stats = latency_stats(rows)
    ours: dict[str, Any] = {"mean_ms": stats.mean_ms, "p50_ms": stats.p50_ms,
                            "p95_ms": {"jevbench": stats.p95_jevbench_ms,
                                       "nearest_rank": stats.p95_nearest_rank_ms},
                            "requests": stats.n}
    if max_delta is not None:
        ours["max_probability_delta"] = max_delta.get(key)
    return ours


def _pass_figures(arm: str, arm_name: Any, entry: dict, latencies: dict[tuple[str, int], list[float]],
                  max_delta: dict[tuple[str, int], float] | None) -> list[dict[str, Any]]:
    passes = entry.get("passes", [])
    if not isinstance(passes, list):
        raise EvidenceError(f"summary.json: {arm_name}.passes is not a list.")
    figures = []
    for p in passes:
        index = _pass_index(p, arm_name)
        ours = _ours_of_pass(latencies.get((arm, index), []), max_delta, (arm, index))
        figures += [figure(arm, index, name, p[name], value) for name, value in ours.items() if name in p]
    return figures


def published_figures(summary: dict, latencies: dict[tuple[str, int], list[float]],
                      max_delta: dict[tuple[str, int], float] | None = None) -> list[dict[str, Any]]:
    """Each figure their summary.json publishes next to ours, recomputed from the rows' latencies (ms)."""
    figures = []
    aggregates: dict[str, float | None] = {}
    published_aggregates: dict[str, Any] = {}
    for arm_name, entry in arms_of(summary).items():
        arm = str(arm_name).lower()
        if not isinstance(entry, dict):
            raise EvidenceError(f"summary.json: arm {arm_name!r} is not an object.")
        arm_latencies = [x for (a, _), xs in sorted(latencies.items()) if a == arm for x in xs]
        if not arm_latencies:
            figures.append(_no_rows(arm, None))
            continue
        figures += _pass_figures(arm, arm_name, entry, latencies, max_delta)
        aggregates[arm] = mean(arm_latencies)
        if "aggregate_mean_ms" in entry:
            published_aggregates[arm] = entry["aggregate_mean_ms"]
            figures.append(figure(arm, None, "aggregate_mean_ms", entry["aggregate_mean_ms"], aggregates[arm]))
    return figures + _reduction_figures(summary, aggregates, published_aggregates)


def _aggregate_half_units(pb: Any, pc: Any) -> float:
    """How far the published aggregates' own half units can move 100 * (1 - c / b):
    d/db = 100 c / b^2, d/dc = -100 / b."""
    numbers = all(isinstance(x, (int, float)) and _number(x) for x in (pb, pc))
    if not numbers or not pb:
        return 0.0
    fb, fc = float(pb), float(pc)
    return 100 * (half_unit(fc) / abs(fb) + abs(fc) * half_unit(fb) / fb ** 2)


def _aggregate_reduction(summary: dict, key: str, aggregates: dict[str, float | None],
                         published_aggregates: dict[str, Any], base: str, cand: str) -> dict[str, Any]:
    b, c = aggregates[base], aggregates[cand]
    # Their expression, 100 * (1 - candidate / baseline) of the aggregate means; the algebraically
    # equal (b - c) / b * 100 of results.statistics.summarize differs from it in the last bits.
    ours_pct = (1 - c / b) * 100 if b and c is not None else None
    propagated = _aggregate_half_units(published_aggregates.get(base), published_aggregates.get(cand))
    return figure(f"{cand} vs {base}", None, key, summary[key], ours_pct, propagated)


def _not_compared(key: str, published: Any) -> dict[str, Any]:
    return {"arm": None, "pass": None, "figure": key, "published": published, "ours": None,
            "status": "not_compared", "difference": None, "half_unit": None, "rule": None,
            "matches": False, "note": "no unambiguous baseline/candidate pair to recompute it from"}


def _reduction_figures(summary: dict, aggregates: dict[str, float | None],
                       published_aggregates: dict[str, Any]) -> list[dict[str, Any]]:
    """Their `*_reduction_percent` figures: the aggregate one recomputed when there is one baseline/candidate pair."""
    base, candidates = baseline_and_candidates(aggregates) if aggregates else ("", [])
    pair = len(candidates) == 1 and bool(aggregates.get(base))
    figures: list[dict[str, Any]] = []
    for key in sorted(k for k in summary if isinstance(k, str) and k.endswith("_reduction_percent")):
        if key == "aggregate_reduction_percent" and pair:
            figures.append(_aggregate_reduction(summary, key, aggregates, published_aggregates, base, candidates[0]))
        else:
            figures.append(_not_compared(key, summary[key]))
    return figures


def summary_from_figures(figures: list[dict]) -> dict[str, Any]:
    """The part of their summary.json that import.json's figures record (to recompute them in `verify`)."""
    arms: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for f in figures:
        if f["figure"].endswith("_reduction_percent"):
            top[f["figure"]] = f["published"]
            continue
        if f["arm"] is None or f["figure"] == "rows":
            continue
        entry = arms.setdefault(f["arm"], {"passes": []})
        if f["pass"] is None:
            entry[f["figure"]] = f["published"]
            continue
        passes = {p["pass"]: p for p in entry["passes"]}
        if f["pass"] not in passes:
            entry["passes"].append({"pass": f["pass"]})
            passes[f["pass"]] = entry["passes"][-1]
        passes[f["pass"]][f["figure"]] = f["published"]
    return {"arms": arms, **top}



# --- figures of the other layouts (timings-csv, provenance-json, sha256sums) ----------------------
#
# Their rows become samples: (arm, workload, pass) -> [(seconds, decisions), ...] in file order,
# the exact floats they published. Each function lists every figure of their summary it can
# recompute from the samples, labelled with `figure`; `verify` calls it again on the samples the
# imported run's responses/ hold and expects the same list.

Samples = dict[tuple[str, str, int], list[tuple[float, int]]]


def _median(xs: list[float]) -> float:
    s, n = sorted(xs), len(xs)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _nearest_rank(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[max(math.ceil(q / 100 * len(s)) - 1, 0)]


def _fmean(xs: list[float]) -> float:
    return math.fsum(xs) / len(xs)


def _pass_metrics(samples: list[tuple[float, int]]) -> dict[str, Any]:
    ms = [s * 1000 for s, _ in samples]
    seconds = math.fsum(s for s, _ in samples)
    return {"requests": len(ms), "mean_ms": _fmean(ms), "p50_ms": _median(ms), "p95_ms": _nearest_rank(ms, 95),
            "successful_decisions_per_second": sum(d for _, d in samples) / seconds if seconds else None}


def _pass_half_units(pb: list[Any], pc: list[Any]) -> float:
    """How far the published pass metrics' own half units can move 100 * (1 - mean(c) / mean(b))."""
    if not (pb and pc and all(_number(x) for x in pb + pc)):
        return 0.0
    fb, fc = _fmean([float(x) for x in pb]), _fmean([float(x) for x in pc])
    hb, hc = max(half_unit(x) for x in pb), max(half_unit(x) for x in pc)
    return 100 * (hc / abs(fb) + abs(fc) * hb / fb ** 2) if fb else 0.0


def _reduction(base: list[float], cand: list[float], pb: list[Any], pc: list[Any]) -> tuple[float | None, float]:
    """100 * (1 - mean(candidate pass metrics) / mean(baseline pass metrics)), and how far the published
    pass metrics' own half units can move it (d/db = 100 c / b^2, d/dc = -100 / b)."""
    b, c = _fmean(base), _fmean(cand)
    if not b:
        return None, 0.0
    return 100 * (1 - c / b), _pass_half_units(pb, pc)


def _workload_figures(arm: str, workload: str, passes: Any, samples: Samples,
                      ours_by: dict[tuple[str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One arm and workload: each pass's published metrics against ours (kept in ours_by for reductions)."""
    if not isinstance(passes, list):
        raise EvidenceError(f"summary.json: results.{arm}.{workload} is not a list of passes.")
    figures: list[dict[str, Any]] = []
    for index, published in enumerate(passes, start=1):
        rows = samples.get((str(arm), str(workload), index))
        if not isinstance(published, dict) or not rows:
            figures.append(_no_rows(f"{arm} {workload}", index))
            continue
        ours = _pass_metrics(rows)
        ours_by.setdefault((str(arm), str(workload)), []).append(ours)
        figures += [figure(f"{arm} {workload}", index, name, published[name], value)
                    for name, value in ours.items() if name in published]
    return figures


def timings_figures(summary: dict, samples: Samples) -> list[dict[str, Any]]:
    """prefill_batching layout: results[arm][workload][pass] metrics, reductions[workload], totals."""
    figures: list[dict[str, Any]] = []
    results = _obj(summary, "results")
    ours_by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for arm, workloads in sorted(results.items()):
        for workload, passes in sorted(workloads.items()) if isinstance(workloads, dict) else []:
            figures += _workload_figures(arm, workload, passes, samples, ours_by)
    figures += _timings_reductions(summary, results, ours_by)
    figures += _timings_totals(summary, samples)
    return figures


def _metric_reduction(results: dict, ours_by: dict, arms: tuple[str, str], workload: str, key: str,
                      value: Any) -> dict[str, Any] | None:
    """One published `<metric>_reduction_percent` of a workload against ours; None if we lack that metric."""
    base, cand = arms
    metric = key.replace("_reduction_percent", "_ms")
    b_ours, c_ours = ours_by.get((base, workload)), ours_by.get((cand, workload))
    if not b_ours or not c_ours or metric not in b_ours[0]:
        return None
    pb = [p.get(metric) for p in results[base][workload] if isinstance(p, dict)]
    pc = [p.get(metric) for p in results[cand][workload] if isinstance(p, dict)]
    ours, propagated = _reduction([m[metric] for m in b_ours], [m[metric] for m in c_ours], pb, pc)
    return figure(f"{cand} vs {base} {workload}", None, key, value, ours, propagated)


def _timings_reductions(summary: dict, results: dict, ours_by: dict) -> list[dict[str, Any]]:
    base, candidates = baseline_and_candidates(sorted(results, key=lambda a: a != "baseline")) if results else ("", [])
    if len(candidates) != 1:
        return []
    found = [_metric_reduction(results, ours_by, (base, candidates[0]), workload, key, value)
             for workload, published in sorted(_obj(summary, "reductions").items()) if isinstance(published, dict)
             for key, value in sorted(published.items())]
    return [f for f in found if f is not None]


def _timings_totals(summary: dict, samples: Samples) -> list[dict[str, Any]]:
    everything = [r for rows in samples.values() for r in rows]
    ours = {"measured_requests": len(everything), "measured_decisions": sum(d for _, d in everything)}
    return [figure("all", None, k, summary[k], v) for k, v in ours.items() if k in summary]


def _seconds_of(samples: Samples, mode: str, their_pass: int | None = None) -> list[float]:
    """Every published latency of one mode, or of one of its passes (theirs count from 0, ours from 1)."""
    return [s for (a, _, index), xs in sorted(samples.items())
            if a == mode and (their_pass is None or index == their_pass + 1) for s, _ in xs]


def _mode_figures(key: str, published: dict, seconds: list[float], pass_index: int | None) -> list[dict[str, Any]]:
    ours = {"n": len(seconds), "median_s": _median(seconds), "mean_s": _fmean(seconds)}
    return [figure(key, pass_index, k, published[k], v) for k, v in ours.items() if k in published]


def _mode_passes(key: str, published: dict, samples: Samples, mode: str) -> list[dict[str, Any]]:
    figures: list[dict[str, Any]] = []
    passes = published.get("passes") or []
    if not isinstance(passes, list):
        raise EvidenceError(f"summary.json: {key}.passes is {str(passes)[:80]}, not a list of passes.")
    for p in passes:
        if not isinstance(p, dict) or not _count(p.get("pass")):
            raise EvidenceError(f"summary.json: {key}.passes holds {str(p)[:80]}, not an object with a pass.")
        seconds = _seconds_of(samples, mode, p["pass"])
        if seconds:
            figures += _mode_figures(key, p, seconds, p["pass"])
    return figures


def provenance_figures(summary: dict, samples: Samples) -> list[dict[str, Any]]:
    """jev_vl review layout: per mode (cache_<mode>) n, median_s, mean_s over all passes and per pass,
    and `<a>_div_<b>_median` ratios of the modes' medians."""
    figures: list[dict[str, Any]] = []
    medians: dict[str, float] = {}
    for mode in sorted({arm for arm, _, _ in samples}):
        key = f"cache_{mode}" if f"cache_{mode}" in summary else mode
        published = summary.get(key)
        if not isinstance(published, dict):
            continue
        every = _seconds_of(samples, mode)
        medians[mode] = _median(every)
        figures += _mode_figures(key, published, every, None) + _mode_passes(key, published, samples, mode)
    return figures + _ratio_figures(summary, medians)


def _ratio_figures(summary: dict, medians: dict[str, float]) -> list[dict[str, Any]]:
    """Their `<a>_div_<b>_median` ratios against the ratio of our medians."""
    figures: list[dict[str, Any]] = []
    for key in sorted(k for k in summary if isinstance(k, str) and k.endswith("_median") and "_div_" in k):
        a, b = key[: -len("_median")].split("_div_", 1)
        if a in medians and b in medians and medians[b]:
            figures.append(figure(f"{a} / {b}", None, key, summary[key], medians[a] / medians[b]))
    return figures


def layout_figures(fmt: str, summary: dict, samples: Samples) -> list[dict[str, Any]]:
    """The figures of `fmt`'s summary recomputed from `samples` (every format but system1-omni)."""
    if fmt == "timings-csv":
        return timings_figures(summary, samples)
    if fmt == "provenance-json":
        return provenance_figures(summary, samples)
    if fmt == "sha256sums":
        return sums_figures(summary, samples)
    raise EvidenceError(f"no figure rules for format {fmt!r}.")


def sums_figures(summaries: dict, samples: Samples) -> list[dict[str, Any]]:
    """lfm2 layout: `<stem>.summary.json` members, each with summary.variants[variant][cell] =
    {n, p50_ms, p95_ms} over that member's rows (`summaries` maps stem -> summary)."""
    figures: list[dict[str, Any]] = []
    for stem, doc in sorted(summaries.items()):
        inner = doc.get("summary") if isinstance(doc, dict) else None
        variants = inner.get("variants") if isinstance(inner, dict) else None
        if not isinstance(variants, dict):
            continue
        for variant, cells in sorted(variants.items()):
            if isinstance(cells, dict):
                figures += _cell_figures(stem, str(variant), cells, samples)
    return figures


def _cell_figures(stem: str, variant: str, cells: dict, samples: Samples) -> list[dict[str, Any]]:
    figures: list[dict[str, Any]] = []
    for cell, published in sorted(cells.items()):
        ms = [s * 1000 for (a, w, _), xs in samples.items() if a == f"{stem}.{variant}" and w == cell for s, _ in xs]
        if isinstance(published, dict) and ms:
            ours = {"n": len(ms), "p50_ms": _median(ms), "p95_ms": _nearest_rank(ms, 95)}
            figures += [figure(f"{stem} {variant} {cell}", None, k, published[k], v)
                        for k, v in ours.items() if k in published]
    return figures
