"""Per (workload, backend) across hosts: spread of the means, decision flips and probability
differences against the baseline, and which hosts sit outside the tolerances.

Tolerances file: compare's keys (applied to each replicate against the baseline, see
audit/compare.py) plus an optional `cross_host` section on the spread across hosts:

    format_version: 1
    max_mean_ratio: 1.5              # each host's mean / the baseline's mean
    max_probability_delta: 1.0e-6
    decisions_must_match: true
    cross_host:
      max_relative_range: 0.5        # (max - min) / mean of the per-host means
      max_cv: 0.25                   # sample standard deviation / mean of the per-host means
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..audit.compare import TOLERANCE_KEYS, RunComparison, check_tolerances
from ..errors import RecipeError
from ..evidence.files import check_format
from ..evidence.recipe import read_yaml
from ..evidence.rows import Row
from ..results.row_table import as_table
from ..results.statistics import latency_stats

__all__ = ["CROSS_HOST_KEYS", "BackendReport", "HostEntry", "HostMeans", "HostRun", "HostSpread", "backend_report",
           "fmt", "host_means", "load_cross_host_tolerances", "spread"]

CROSS_HOST_KEYS = {"max_relative_range", "max_cv"}


def load_cross_host_tolerances(path: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """(compare tolerances, cross-host tolerances) from one YAML file; the first checked as compare checks them."""
    data = check_format(read_yaml(path, "tolerances file"), (1,), f"{path} (a tolerances file)")
    cross = data.pop("cross_host", None) or {}
    unknown = sorted(set(data) - TOLERANCE_KEYS)
    if unknown:
        raise RecipeError(f"{path}: unknown keys {', '.join(unknown)}; known: "
                          f"{', '.join(sorted(TOLERANCE_KEYS | {'cross_host'}))}.")
    if not isinstance(cross, dict) or set(cross) - CROSS_HOST_KEYS:
        raise RecipeError(f"{path}: cross_host takes only {', '.join(sorted(CROSS_HOST_KEYS))}.")
    for key, value in cross.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise RecipeError(f"{path}: cross_host.{key} must be a non-negative number, not {value!r}.")
    return check_tolerances(data, path), {k: float(v) for k, v in cross.items()}


@dataclass(frozen=True)
class HostRun:
    """One verified replicate (or the external baseline) and where it ran."""

    label: str  # replicate-<k> or "baseline"
    host: str  # Slurm node name, else the environment's hostname
    path: Path
    rows: list[Row]


class HostMeans(msgspec.Struct, frozen=True, kw_only=True):
    """One run's figures for one (workload, backend): the overall mean and each measured pass's."""

    mean_ms: float
    pass_means_ms: dict[int, float]
    pass_range_ms: tuple[float, float]  # the lowest and highest pass mean


class HostSpread(msgspec.Struct, frozen=True, kw_only=True):
    """The per-host means of one (workload, backend) across hosts."""

    n: int
    min_ms: float | None
    max_ms: float | None
    mean_ms: float | None
    relative_range: float | None  # (max - min) / mean
    cv: float | None  # sample standard deviation (ddof=1) / mean

    def failures(self, where: str, limits: dict[str, float]) -> list[str]:
        """The cross-host limits (max_relative_range, max_cv) this spread exceeds, or cannot show it meets."""
        found = []
        for key, name, value in (("max_relative_range", "relative range", self.relative_range),
                                 ("max_cv", "cv", self.cv)):
            if key in limits and (value is None or value > limits[key]):
                found.append(f"{where}: {name} {'—' if value is None else f'{value:.4g}'} exceeds {limits[key]}")
        return found


class HostEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One host's row of a (workload, backend): its means and, when it was compared with the
    baseline, the ratio, flips, largest probability difference, weights and limits crossed."""

    label: str
    host: str
    mean_ms: float
    pass_means_ms: dict[int, float]
    pass_range_ms: tuple[float, float]
    mean_ratio: float | None | msgspec.UnsetType = msgspec.UNSET
    decision_flips: int | msgspec.UnsetType = msgspec.UNSET
    max_abs_probability_delta: float | None | msgspec.UnsetType = msgspec.UNSET
    weights_same: bool | None | msgspec.UnsetType = msgspec.UNSET
    failures: list[str] | msgspec.UnsetType = msgspec.UNSET

    @property
    def compared(self) -> bool:
        return self.decision_flips is not msgspec.UNSET

    def within(self, rounded_text: Callable[[str], str]) -> str:
        """The "within tolerances" cell: baseline, yes, or no with the limits it crossed."""
        if not self.compared:
            return "baseline"
        if not self.failures:
            return "yes"
        return "no: " + "; ".join(rounded_text(x.split(": ", 1)[1]) for x in self.failures or [])

    def row(self, rounded_text: Callable[[str], str]) -> str:
        lo, hi = self.pass_range_ms
        ratio = None if self.mean_ratio is msgspec.UNSET else self.mean_ratio
        delta = None if self.max_abs_probability_delta is msgspec.UNSET else self.max_abs_probability_delta
        same = None if self.weights_same is msgspec.UNSET else self.weights_same
        flips = "—" if self.decision_flips is msgspec.UNSET else self.decision_flips
        return (f"| {self.label} | {self.host} | {fmt(self.mean_ms)} | {fmt(lo)} – {fmt(hi)} | {fmt(ratio, 4)} | "
                f"{flips} | {fmt(delta, 8)} | {WEIGHTS[same]} | {self.within(rounded_text)} |")


WEIGHTS = {True: "same", False: "DIFFER", None: "—"}


def fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


class BackendReport(msgspec.Struct, frozen=True, kw_only=True):
    """One (workload, backend) across hosts: every host's row, the spread, flips and failures."""

    workload: str
    backend: str
    hosts: list[HostEntry]
    spread: HostSpread
    decision_flips: int
    max_abs_probability_delta: float | None
    hosts_outside_tolerances: list[str]
    cross_host_failures: list[str]

    def section(self, rounded_text: Callable[[str], str]) -> list[str]:
        """The Markdown section: the spread in a sentence, a row per host, the cross-host failures."""
        s = self.spread
        lines = [f"## {self.workload} / {self.backend}", "",
                 (f"Per-host means: min {fmt(s.min_ms)} ms, max {fmt(s.max_ms)} ms, relative range "
                  f"{fmt(s.relative_range, 4)}, coefficient of variation {fmt(s.cv, 4)} (n={s.n}). "
                  f"Decision flips against the baseline: {self.decision_flips}; largest probability difference: "
                  f"{fmt(self.max_abs_probability_delta, 8)}."), "",
                 ("| run | host | mean (ms) | pass means range (ms) | mean / baseline | flips | max Δp | weights "
                 "| within tolerances |"),
                 "| --- | --- | ---: | --- | ---: | ---: | ---: | --- | --- |"]
        lines += [h.row(rounded_text) for h in self.hosts]
        if self.cross_host_failures:
            lines += ["", *(f"- cross-host: {f}" for f in self.cross_host_failures)]
        return [*lines, ""]


def _mean_ms(latencies: list[float]) -> float:
    mean = latency_stats(latencies).mean_ms
    assert mean is not None  # host_means groups only successful requests, so no list is empty
    return mean


def host_means(rows: list[Row]) -> dict[tuple[str, str], HostMeans]:
    """(workload, backend) -> overall mean of the measured latencies and each measured pass's mean."""
    t = as_table(rows)
    out = {}
    for key, by_pass in t.by_pass("measured", ok_only=True).items():
        latencies = {index: t.latency_ms[idx].tolist() for index, idx in sorted(by_pass.items())}
        pass_means = {p: _mean_ms(v) for p, v in latencies.items()}
        out[key] = HostMeans(mean_ms=_mean_ms([x for v in latencies.values() for x in v]), pass_means_ms=pass_means,
                             pass_range_ms=(min(pass_means.values()), max(pass_means.values())))
    return out


def spread(means: list[float]) -> HostSpread:
    """min, max, relative range ((max - min) / mean) and coefficient of variation (ddof=1) of host means."""
    values = np.asarray(means, dtype=float)
    if values.size == 0:
        return HostSpread(n=0, min_ms=None, max_ms=None, mean_ms=None, relative_range=None, cv=None)
    centre = float(values.mean())
    return HostSpread(n=int(values.size), min_ms=float(values.min()), max_ms=float(values.max()), mean_ms=centre,
                  relative_range=float((values.max() - values.min()) / centre) if centre else None,
                  cv=float(values.std(ddof=1) / centre) if values.size > 1 and centre else None)


def _host_entry(run: HostRun, means: HostMeans, comparison: RunComparison | None, workload: str,
                backend: str) -> HostEntry:
    """One host's mean and pass range and, when it was compared, its ratio, flips, delta and the
    compare verdict's failures that name its pair."""
    entry = HostEntry(label=run.label, host=run.host, mean_ms=means.mean_ms, pass_means_ms=means.pass_means_ms,
                      pass_range_ms=means.pass_range_ms)
    pairs = comparison.pairs if comparison is not None else []
    pair = next((p for p in pairs if p.workload == workload and p.baseline_backend == backend), None)
    if comparison is None or pair is None:
        return entry
    return msgspec.structs.replace(
        entry, mean_ratio=pair.overall.mean_ms.ratio, decision_flips=len(pair.answers.decision_flips),
        max_abs_probability_delta=pair.answers.max_abs_probability_delta, weights_same=pair.weights_fingerprint.same,
        failures=[f for f in comparison.verdict.failures if f.startswith(f"{pair.where}:")])


def backend_report(workload: str, backend: str, hosts: list[HostRun], means: dict[str, dict[tuple[str, str], HostMeans]],
                   comparisons: dict[str, RunComparison], cross_tol: dict[str, float]) -> BackendReport:
    """One (workload, backend): every host's mean and pass range, the spread, flips, tolerance failures."""
    per_host = [_host_entry(run, m, comparisons.get(run.label), workload, backend)
                for run in hosts if (m := means[run.label].get((workload, backend))) is not None]
    stats = spread([h.mean_ms for h in per_host])
    compared = [h for h in per_host if h.compared]
    deltas = [h.max_abs_probability_delta for h in compared if isinstance(h.max_abs_probability_delta, float)]
    return BackendReport(workload=workload, backend=backend, hosts=per_host, spread=stats,
                         decision_flips=sum(h.decision_flips for h in compared if isinstance(h.decision_flips, int)),
                         max_abs_probability_delta=max(deltas, default=None),
                         hosts_outside_tolerances=[h.label for h in compared if h.failures],
                         cross_host_failures=stats.failures(f"{workload}/{backend}", cross_tol))
