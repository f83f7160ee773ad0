"""The figure rules: a published figure next to ours, labelled exact, within rounding or mismatch.

Shared by every import format (`audit/imports/`) and by `verify`, which recomputes the figures
of an imported run from its rows with these same functions. Each layout's published summary is
decoded once into its type here (`System1Summary`, `TimingsSummary`, `Mode`, `SumsMember`), which
lists the figures it publishes next to ours. Pure functions: no file access.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import msgspec

from ..errors import EvidenceError
from ..evidence.decoding import UNSET, Count, Number, Quoted, Record, UnsetType, decode
from ..evidence.records import FigureCounts
from ..results.statistics import latency_stats, mean

__all__ = [
    "MAX_FIGURE",
    "SIGNIFICANT_DIGITS",
    "Classification",
    "Figure",
    "Mode",
    "Published",
    "Samples",
    "SumsMember",
    "System1Summary",
    "TimingsSummary",
    "baseline_and_candidates",
    "classify",
    "figure",
    "figure_counts",
    "figures_of",
    "half_unit",
    "layout_figures",
    "published_figures",
    "summary_from_figures",
]

# A binary double carries 15 significant decimal digits (DBL_DIG); digits a JSON writer
# prints past the 15th are representation noise, not precision.
SIGNIFICANT_DIGITS = 15
# The largest published figure compared as a number: latencies, counts and rates of a study are far
# below it, and its square stays a finite double (a 400-digit integer or 1e200 is a mismatch, never
# an OverflowError).
MAX_FIGURE = 1e15


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (isinstance(value, int) or math.isfinite(value)) and abs(value) <= MAX_FIGURE


class Figure(Record, frozen=True, kw_only=True):
    """One published figure next to ours: exact, within_rounding, mismatch or not_compared.

    Every format's figures are this type (`audit/imports/`), recorded in import.json's `figures`
    and recomputed by `verify` from the imported rows; `matches` says whether it reproduces."""

    arm: str | None
    pass_index: int | None = msgspec.field(name="pass")
    figure: str
    published: Quoted
    ours: Number | None
    ours_by_rule: dict[str, Number | None] | UnsetType = UNSET  # P95: one value per rank rule
    status: str
    difference: Number | None
    half_unit: Number | None
    rule: str | None
    matches: bool
    note: str | UnsetType = UNSET

    @property
    def where(self) -> str:
        """'ARM pass N FIGURE', 'ARM FIGURE' or 'FIGURE': how a line names it."""
        return " ".join(str(part) for part in (self.arm, *(("pass", self.pass_index) if self.pass_index is not None
                                                           else ()), self.figure) if part is not None)

    def line(self) -> str:
        """The figure with its published and recomputed values, on one line."""
        return f"{self.where}: published {self.published!r}, recomputed {self.ours!r} ({self.status.replace('_', ' ')})"


class NotReproduced(EvidenceError):
    """A published figure does not reproduce from the published rows: the import's verdict (exit 3)."""

    def __init__(self, figures: list[Figure]) -> None:
        self.figures = figures
        self.mismatched = [f for f in figures if f.status == "mismatch"]
        super().__init__(f"{len(self.mismatched)} of {len(figures)} published figures do not reproduce from the "
                         f"published rows ({'; '.join(f.line() for f in self.mismatched[:3])}"
                         f"{'; …' if len(self.mismatched) > 3 else ''})")

    @classmethod
    def check(cls, figures: list[Figure]) -> None:
        """Raise when any figure is a mismatch."""
        if any(f.status == "mismatch" for f in figures):
            raise cls(figures)

    def lines(self) -> list[str]:
        """The verdict, then every figure with its published and recomputed value."""
        return ["Verdict: NOT REPRODUCED", *(f.line() for f in self.figures),
                (f"{len(self.mismatched)} of {len(self.figures)} published figures do not reproduce from the "
                 "published rows; no run was written.")]


def figures_of(recorded: Any, where: str = "import.json") -> list[Figure]:
    """import.json's `figures` as records; EvidenceError naming the field that is not one."""
    return list(decode(recorded, tuple[Figure, ...], f"{where}: figures"))


def figure_counts(figures: list[Figure]) -> FigureCounts:
    compared = [f for f in figures if f.status != "not_compared"]
    within = [f.difference for f in compared if f.status == "within_rounding" and f.difference is not None]
    return FigureCounts(compared=len(compared), exact=sum(f.status == "exact" for f in compared),
                        within_rounding=len(within), mismatch=sum(f.status == "mismatch" for f in compared),
                        not_compared=len(figures) - len(compared),
                        largest_within_rounding_difference=max(within, default=None))


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


class Classification(msgspec.Struct, frozen=True, kw_only=True):
    """How one recomputed value compares with its published figure."""

    status: str  # exact, within_rounding or mismatch
    difference: float | None
    half_unit: float | None

    @property
    def rank(self) -> tuple[int, float]:
        """Better outcomes sort first: exact, then within rounding (smaller differences first), then mismatch."""
        return {"exact": 0, "within_rounding": 1}.get(self.status, 2), self.difference or 0


def classify(ours: float | None, published: Any, propagated: float = 0.0) -> Classification:
    """exact (bit for bit), within_rounding (|ours - published| <= half a unit) or mismatch.

    `propagated` widens the tolerance of a figure derived from other published figures by
    the change their own half units can make (see `published_figures`).
    """
    if ours is None or not _number(published):
        return Classification(status="mismatch", difference=None, half_unit=None)
    tolerance = half_unit(published) + propagated
    difference = abs(float(ours) - float(published))
    if float(ours) == float(published):
        status = "exact"
    elif isinstance(published, int) and not isinstance(published, bool):
        status = "mismatch"  # a count reproduces exactly or not at all
    else:
        status = "within_rounding" if difference <= tolerance else "mismatch"
    return Classification(status=status, difference=difference, half_unit=tolerance)


def figure(arm: str | None, pass_index: int | None, name: str, published: Any, ours: Any,
           propagated: float = 0.0) -> Figure:
    if isinstance(ours, dict):  # P95: one value per rank rule; the best-reproducing rule wins
        outcomes = {rule: classify(value, published) for rule, value in ours.items()}
        best = min(outcomes.values(), key=lambda o: o.rank)
        rules = [r for r, o in outcomes.items() if o.status == best.status != "mismatch"]
        return Figure(arm=arm, pass_index=pass_index, figure=name, published=published,
                      ours=ours[rules[0]] if rules else None, ours_by_rule=ours, status=best.status,
                      difference=best.difference, half_unit=best.half_unit, rule=" and ".join(rules) or None,
                      matches=best.status != "mismatch")
    outcome = classify(ours, published, propagated)
    return Figure(arm=arm, pass_index=pass_index, figure=name, published=published, ours=ours,
                  status=outcome.status, difference=outcome.difference, half_unit=outcome.half_unit,
                  rule=None, matches=outcome.status != "mismatch")


def _no_rows(arm: str, index: int | None) -> Figure:
    """A published arm or pass that no imported row backs: a mismatch."""
    return Figure(arm=arm, pass_index=index, figure="rows", published="present", ours=None, status="mismatch",
                  difference=None, half_unit=None, rule=None, matches=False)


def baseline_and_candidates(arms: Iterable[str]) -> tuple[str, list[str]]:
    names = list(arms)
    base = "baseline" if "baseline" in names else names[0]
    return base, [n for n in names if n != base]


# --- their published documents, decoded once ---------------------------------------------------------


class Published(msgspec.Struct, frozen=True, kw_only=True):
    """A part of another project's published summary, decoded once where the figure rules meet it: the keys
    the rules read are typed (values quoted as published, numbers bounded), the keys they do not read are
    left alone (their documents carry more than we can name)."""

    def quoted(self) -> dict[str, Any]:
        """The published figures of this part, by their published names (absent ones left out)."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data

    def against(self, where: str, index: int | None, ours: dict[str, Any]) -> list[Figure]:
        """Each figure of ours that this part publishes, next to its published value, in the order of `ours`."""
        published = self.quoted()
        return [figure(where, index, name, published[name], value) for name, value in ours.items()
                if name in published]


class System1Pass(Published, frozen=True, kw_only=True):
    index: Count = msgspec.field(name="pass", default=0)
    mean_ms: Quoted | UnsetType = UNSET
    p50_ms: Quoted | UnsetType = UNSET
    p95_ms: Quoted | UnsetType = UNSET
    requests: Quoted | UnsetType = UNSET
    max_probability_delta: Quoted | UnsetType = UNSET


class System1Arm(Published, frozen=True, kw_only=True):
    passes: tuple[System1Pass, ...] = ()
    aggregate_mean_ms: Quoted | UnsetType = UNSET
    cleanup: Quoted | UnsetType = UNSET
    readiness: Quoted = None
    first_inference: Quoted | UnsetType = UNSET


class System1Summary(Published, frozen=True, kw_only=True):
    """system1-omni's summary.json: per arm its passes and aggregate, at the top `*_reduction_percent`
    figures (gathered under one field by `read`; no key of theirs has its name), cleanup and verdicts."""

    arms: dict[str, System1Arm]
    reductions: dict[str, Quoted] = msgspec.field(default_factory=dict, name="*_reduction_percent")
    cleanup: Quoted = None
    completed: Quoted | UnsetType = UNSET
    accepted_e2e_latency_gate: Quoted | UnsetType = UNSET
    conclusion: Quoted | UnsetType = UNSET

    @classmethod
    def read(cls, doc: Any, where: str = "summary.json") -> System1Summary:
        """Their summary.json (its `arms`, or without that key the document itself as the arms); each arm
        decoded on its own, so that an error names it."""
        if not isinstance(doc, dict):
            raise EvidenceError(f"{where}: not a JSON object.")
        arms = doc.get("arms", doc)
        if not isinstance(arms, dict):
            raise EvidenceError(f"{where}: arms is not an object.")
        top = {**doc, "arms": {}, "*_reduction_percent": {k: v for k, v in doc.items()
                                                           if k.endswith("_reduction_percent")}} if "arms" in doc else {"arms": {}}
        return msgspec.structs.replace(decode(top, cls, where), arms={
            name: decode(entry, System1Arm, f"{where}: arm {name[:40]!r}") for name, entry in arms.items()})

    def verdicts(self) -> dict[str, Quoted]:
        """What the summary concludes (completed, the e2e latency gate, its conclusion), as published."""
        return {k: v for k, v in (("completed", self.completed), ("accepted_e2e_latency_gate",
                self.accepted_e2e_latency_gate), ("conclusion", self.conclusion)) if v is not UNSET}

    def cleanup_record(self, cleanup_json: Any) -> dict[str, Any]:
        """Their cleanup as published (in the summary, per arm, and in cleanup.json) and whether the summary's
        agrees with cleanup.json."""
        per_arm = {a: e.cleanup for a, e in self.arms.items() if e.cleanup is not UNSET}
        both = self.cleanup is not None and cleanup_json is not None
        return {"summary": self.cleanup, "per_arm": per_arm or None, "cleanup_json": cleanup_json,
                **({"consistent": self.cleanup == cleanup_json} if both else {})}

    def reduction_figures(self, aggregates: dict[str, float | None], published: dict[str, Any]) -> list[Figure]:
        """Their `*_reduction_percent` figures: the aggregate one recomputed when there is one
        baseline/candidate pair, as their expression 100 * (1 - candidate / baseline) of the aggregate
        means (the algebraically equal (b - c) / b * 100 of results.statistics.summarize differs from it
        in the last bits), its tolerance widened by how far the published aggregates' own half units
        can move it (d/db = 100 c / b^2, d/dc = -100 / b)."""
        base, candidates = baseline_and_candidates(aggregates) if aggregates else ("", [])
        figures: list[Figure] = []
        for key, value in sorted(self.reductions.items()):
            if key == "aggregate_reduction_percent" and len(candidates) == 1 and aggregates[base]:
                b, c = aggregates[base], aggregates[candidates[0]]
                propagated = _aggregate_half_units(published.get(base), published.get(candidates[0]))
                ours = (1 - c / b) * 100 if b and c is not None else None
                figures.append(figure(f"{candidates[0]} vs {base}", None, key, value, ours, propagated))
            else:
                figures.append(Figure(arm=None, pass_index=None, figure=key, published=value, ours=None,
                                      status="not_compared", difference=None, half_unit=None, rule=None,
                                      matches=False, note="no unambiguous baseline/candidate pair to recompute it from"))
        return figures


def _aggregate_half_units(pb: Any, pc: Any) -> float:
    """How far the published aggregates' own half units can move 100 * (1 - c / b)."""
    if not (_number(pb) and _number(pc) and pb):
        return 0.0
    fb, fc = float(pb), float(pc)
    return 100 * (half_unit(fc) / abs(fb) + abs(fc) * half_unit(fb) / fb ** 2)


def published_figures(summary: System1Summary, latencies: dict[tuple[str, int], list[float]],
                      max_delta: dict[tuple[str, int], float] | None = None) -> list[Figure]:
    """Each figure their summary.json publishes next to ours, recomputed from the rows' latencies (ms)."""
    figures = []
    aggregates: dict[str, float | None] = {}
    published_aggregates: dict[str, Any] = {}
    for arm_name, entry in summary.arms.items():
        arm = arm_name.lower()
        arm_latencies = [x for (a, _), xs in sorted(latencies.items()) if a == arm for x in xs]
        if not arm_latencies:
            figures.append(_no_rows(arm, None))
            continue
        for p in entry.passes:
            stats = latency_stats(latencies.get((arm, p.index), []))
            ours: dict[str, Any] = {"mean_ms": stats.mean_ms, "p50_ms": stats.p50_ms,
                                    "p95_ms": {"jevbench": stats.p95_jevbench_ms,
                                               "nearest_rank": stats.p95_nearest_rank_ms},
                                    "requests": stats.n}
            if max_delta is not None:
                ours |= {"max_probability_delta": max_delta.get((arm, p.index))}
            figures += p.against(arm, p.index, ours)
        aggregates[arm] = mean(arm_latencies)
        if entry.aggregate_mean_ms is not UNSET:
            published_aggregates[arm] = entry.aggregate_mean_ms
            figures.append(figure(arm, None, "aggregate_mean_ms", entry.aggregate_mean_ms, aggregates[arm]))
    return figures + summary.reduction_figures(aggregates, published_aggregates)


def summary_from_figures(figures: list[Figure]) -> System1Summary:
    """The part of their summary.json that import.json's figures record (to recompute them in `verify`)."""
    arms: dict[str, tuple[dict[str, Any], dict[int, dict[str, Any]]]] = {}
    reductions: dict[str, Any] = {}
    for f in figures:
        if f.figure.endswith("_reduction_percent"):
            reductions[f.figure] = f.published
        elif f.arm is not None and f.figure != "rows":
            aggregate, passes = arms.setdefault(f.arm, ({}, {}))
            target = aggregate if f.pass_index is None else passes.setdefault(f.pass_index, {"pass": f.pass_index})
            target[f.figure] = f.published
    return System1Summary.read({"arms": {arm: {**aggregate, "passes": list(passes.values())}
                                         for arm, (aggregate, passes) in arms.items()}, **reductions},
                               "import.json: figures")


# --- figures of the other layouts (timings-csv, provenance-json, sha256sums) ----------------------
#
# Their rows become samples: (arm, workload, pass) -> [(seconds, decisions), ...] in file order,
# the exact floats they published. Each layout's summary type lists every figure it can recompute
# from the samples, labelled with `figure`; `verify` calls it again on the samples the imported
# run's responses/ hold and expects the same list.

Samples = dict[tuple[str, str, int], list[tuple[float, int]]]


def _median(xs: list[float]) -> float:
    s, n = sorted(xs), len(xs)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _nearest_rank(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[max(math.ceil(q / 100 * len(s)) - 1, 0)]


def _fmean(xs: list[float]) -> float:
    return math.fsum(xs) / len(xs)


def _pass_metrics(rows: list[tuple[float, int]]) -> dict[str, Any]:
    """One pass's figures from its rows' seconds and decisions, by their published names."""
    ms = [s * 1000 for s, _ in rows]
    seconds = math.fsum(s for s, _ in rows)
    return {"requests": len(ms), "mean_ms": _fmean(ms), "p50_ms": _median(ms), "p95_ms": _nearest_rank(ms, 95),
            "successful_decisions_per_second": sum(d for _, d in rows) / seconds if seconds else None}


class TimingsPass(Published, frozen=True, kw_only=True):
    requests: Quoted | UnsetType = UNSET
    mean_ms: Quoted | UnsetType = UNSET
    p50_ms: Quoted | UnsetType = UNSET
    p95_ms: Quoted | UnsetType = UNSET
    successful_decisions_per_second: Quoted | UnsetType = UNSET


class TimingsSummary(Published, frozen=True, kw_only=True):
    """prefill_batching's summary.json: results[arm][workload][pass] metrics, reductions[workload] and
    the measured totals."""

    results: dict[str, dict[str, tuple[TimingsPass, ...]]] = {}
    reductions: dict[str, dict[str, Quoted]] = {}
    measured_requests: Quoted | UnsetType = UNSET
    measured_decisions: Quoted | UnsetType = UNSET

    def figures(self, samples: Samples) -> list[Figure]:
        figures: list[Figure] = []
        ours_by: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for arm, workloads in sorted(self.results.items()):
            for workload, passes in sorted(workloads.items()):
                for index, published in enumerate(passes, start=1):
                    rows = samples.get((arm, workload, index))
                    if not rows:
                        figures.append(_no_rows(f"{arm} {workload}", index))
                        continue
                    ours = _pass_metrics(rows)
                    ours_by.setdefault((arm, workload), []).append(ours)
                    figures += published.against(f"{arm} {workload}", index, ours)
        everything = [r for rows in samples.values() for r in rows]
        totals = {"measured_requests": len(everything), "measured_decisions": sum(d for _, d in everything)}
        return figures + self.reduction_figures(ours_by) + self.against("all", None, totals)

    def reduction_figures(self, ours_by: dict[tuple[str, str], list[dict[str, Any]]]) -> list[Figure]:
        """Each published `<metric>_reduction_percent` of a workload against ours: 100 * (1 - mean(candidate
        pass metrics) / mean(baseline pass metrics)), its tolerance widened by how far the published pass
        metrics' own half units can move it (d/db = 100 c / b^2, d/dc = -100 / b)."""
        arms = sorted(self.results, key=lambda a: a != "baseline")
        base, candidates = baseline_and_candidates(arms) if arms else ("", [])
        if len(candidates) != 1:
            return []
        cand = candidates[0]
        found = [self.metric_reduction(base, cand, workload, key, value, ours_by)
                 for workload, published in sorted(self.reductions.items()) for key, value in sorted(published.items())]
        return [f for f in found if f is not None]

    def metric_reduction(self, base: str, cand: str, workload: str, key: str, value: Quoted,
                         ours_by: dict[tuple[str, str], list[dict[str, Any]]]) -> Figure | None:
        """One published `<metric>_reduction_percent` of a workload against ours; None if we lack that metric."""
        metric = key.replace("_reduction_percent", "_ms")
        b_ours, c_ours = ours_by.get((base, workload)), ours_by.get((cand, workload))
        if not b_ours or not c_ours or metric not in b_ours[0]:
            return None
        pb = [p.quoted().get(metric) for p in self.results[base][workload]]
        pc = [p.quoted().get(metric) for p in self.results[cand][workload]]
        b, c = _fmean([m[metric] for m in b_ours]), _fmean([m[metric] for m in c_ours])
        ours, propagated = (100 * (1 - c / b), _pass_half_units(pb, pc)) if b else (None, 0.0)
        return figure(f"{cand} vs {base} {workload}", None, key, value, ours, propagated)


def _pass_half_units(pb: list[Any], pc: list[Any]) -> float:
    """How far the published pass metrics' own half units can move 100 * (1 - mean(c) / mean(b))."""
    if not (pb and pc and all(_number(x) for x in pb + pc)):
        return 0.0
    fb, fc = _fmean([float(x) for x in pb]), _fmean([float(x) for x in pc])
    hb, hc = max(half_unit(x) for x in pb), max(half_unit(x) for x in pc)
    return 100 * (hc / abs(fb) + abs(fc) * hb / fb ** 2) if fb else 0.0


class ModePass(Published, frozen=True, kw_only=True):
    index: Count = msgspec.field(name="pass")  # theirs count from 0, ours from 1
    n: Quoted | UnsetType = UNSET
    median_s: Quoted | UnsetType = UNSET
    mean_s: Quoted | UnsetType = UNSET


class Mode(Published, frozen=True, kw_only=True):
    """One mode of jev_vl's review summary.json (`cache_<mode>`): n, median_s, mean_s over all passes
    and per pass."""

    passes: tuple[ModePass, ...] | None = None
    n: Quoted | UnsetType = UNSET
    median_s: Quoted | UnsetType = UNSET
    mean_s: Quoted | UnsetType = UNSET

    def figures(self, key: str, mode: str, samples: Samples) -> list[Figure]:
        """n, median_s and mean_s over every row of the mode, then over each pass's (theirs count from 0)."""
        figures = _seconds_figures(self, key, None, _seconds_of(samples, mode))
        for p in self.passes or ():
            seconds = _seconds_of(samples, mode, p.index)
            figures += _seconds_figures(p, key, p.index, seconds) if seconds else []
        return figures


def _seconds_of(samples: Samples, mode: str, their_pass: int | None = None) -> list[float]:
    """Every published latency of one mode, or of one of its passes (theirs count from 0, ours from 1)."""
    return [s for (a, _, index), xs in sorted(samples.items())
            if a == mode and (their_pass is None or index == their_pass + 1) for s, _ in xs]


def _seconds_figures(published: Published, key: str, index: int | None, seconds: list[float]) -> list[Figure]:
    return published.against(key, index, {"n": len(seconds), "median_s": _median(seconds), "mean_s": _fmean(seconds)})


def provenance_figures(summary: dict[str, Any], samples: Samples) -> list[Figure]:
    """jev_vl review layout: per mode (cache_<mode>) n, median_s, mean_s over all passes and per pass,
    and `<a>_div_<b>_median` ratios of the modes' medians."""
    figures: list[Figure] = []
    medians: dict[str, float] = {}
    for mode in sorted({a for a, _, _ in samples}):
        key = f"cache_{mode}" if f"cache_{mode}" in summary else mode
        if isinstance(summary.get(key), dict):
            figures += decode(summary[key], Mode, f"summary.json: {key}").figures(key, mode, samples)
            medians[mode] = _median(_seconds_of(samples, mode))
    return figures + _ratio_figures(summary, medians)


def _ratio_figures(summary: dict[str, Any], medians: dict[str, float]) -> list[Figure]:
    """Their `<a>_div_<b>_median` ratios against the ratio of our medians."""
    figures: list[Figure] = []
    for key in sorted(k for k in summary if k.endswith("_median") and "_div_" in k):
        a, b = key[: -len("_median")].split("_div_", 1)
        if a in medians and b in medians and medians[b]:
            figures.append(figure(f"{a} / {b}", None, key, summary[key], medians[a] / medians[b]))
    return figures


class SumsCell(Published, frozen=True, kw_only=True):
    n: Quoted | UnsetType = UNSET
    p50_ms: Quoted | UnsetType = UNSET
    p95_ms: Quoted | UnsetType = UNSET


class SumsVariants(Published, frozen=True, kw_only=True):
    variants: dict[str, dict[str, SumsCell]] = {}


class SumsMember(Published, frozen=True, kw_only=True):
    """lfm2's `<stem>.summary.json` member: summary.variants[variant][cell] = {n, p50_ms, p95_ms}."""

    summary: SumsVariants = msgspec.field(default_factory=SumsVariants)


def sums_figures(summaries: dict[str, Any], samples: Samples) -> list[Figure]:
    """lfm2 layout: each member's cells recomputed over that member's rows (`summaries` maps stem -> summary)."""
    figures: list[Figure] = []
    for stem, doc in sorted(summaries.items()):
        member = decode(doc, SumsMember, f"{stem}.summary.json.gz")
        for variant, cells in sorted(member.summary.variants.items()):
            for cell, published in sorted(cells.items()):
                ms = [s * 1000 for (a, w, _), xs in samples.items() if a == f"{stem}.{variant}" and w == cell
                      for s, _ in xs]
                if ms:
                    figures += published.against(f"{stem} {variant} {cell}", None, {
                        "n": len(ms), "p50_ms": _median(ms), "p95_ms": _nearest_rank(ms, 95)})
    return figures


def layout_figures(fmt: str, summary: dict[str, Any], samples: Samples) -> list[Figure]:
    """The figures of `fmt`'s summary recomputed from `samples` (every format but system1-omni)."""
    if fmt == "timings-csv":
        return decode(summary, TimingsSummary, "summary.json").figures(samples)
    if fmt == "provenance-json":
        return provenance_figures(summary, samples)
    if fmt == "sha256sums":
        return sums_figures(summary, samples)
    raise EvidenceError(f"no figure rules for format {fmt!r}.")
