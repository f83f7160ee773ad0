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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..audit.compare import TOLERANCE_KEYS, check_tolerances
from ..errors import RecipeError
from ..evidence.files import check_format
from ..evidence.recipe import read_yaml
from ..evidence.rows import Row
from ..results.row_table import as_table
from ..results.statistics import latency_stats

__all__ = ["CROSS_HOST_KEYS", "HostRun", "backend_report", "host_means", "load_cross_host_tolerances", "spread"]

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


def _mean_ms(latencies: list[float]) -> float:
    mean = latency_stats(latencies).mean_ms
    assert mean is not None  # host_means groups only successful requests, so no list is empty
    return mean


def host_means(rows: list[Row]) -> dict[tuple[str, str], dict[str, Any]]:
    """(workload, backend) -> overall mean of the measured latencies and each measured pass's mean."""
    t = as_table(rows)
    passes = {key: {index: t.latency_ms[idx].tolist() for index, idx in by_pass.items()}
              for key, by_pass in t.by_pass("measured", ok_only=True).items()}
    out = {}
    for key, by_pass in passes.items():
        pass_means = {p: _mean_ms(v) for p, v in sorted(by_pass.items())}
        out[key] = {"mean_ms": _mean_ms([x for v in by_pass.values() for x in v]),
                    "pass_means_ms": pass_means,
                    "pass_range_ms": [min(pass_means.values()), max(pass_means.values())]}
    return out


def spread(means: list[float]) -> dict[str, float | int | None]:
    """min, max, relative range ((max - min) / mean) and coefficient of variation (ddof=1) of host means."""
    values = np.asarray(means, dtype=float)
    if values.size == 0:
        return {"n": 0, "min_ms": None, "max_ms": None, "mean_ms": None, "relative_range": None, "cv": None}
    centre = float(values.mean())
    return {"n": int(values.size), "min_ms": float(values.min()), "max_ms": float(values.max()), "mean_ms": centre,
            "relative_range": float((values.max() - values.min()) / centre) if centre else None,
            "cv": float(values.std(ddof=1) / centre) if values.size > 1 and centre else None}


def _host_entry(run: HostRun, means: dict[str, Any], pair: dict | None) -> dict[str, Any]:
    """One host's mean and pass range and, when it was compared, its ratio, flips, delta and failures."""
    entry: dict[str, Any] = {"label": run.label, "host": run.host, **means}
    if pair is not None:
        answers = pair["answers"]
        entry.update(mean_ratio=pair["metrics"]["overall.mean_ms"]["ratio"],
                     decision_flips=len(answers["decision_flips"]),
                     max_abs_probability_delta=answers["max_abs_probability_delta"],
                     weights_same=(pair.get("weights_fingerprint") or {}).get("same"),
                     failures=pair["failures"])
    return entry


def _cross_failures(workload: str, backend: str, stats: dict[str, Any], cross_tol: dict[str, float]) -> list[str]:
    """The cross-host limits (max_relative_range, max_cv) the spread exceeds, or cannot show it meets."""
    failures = []
    for key, stat in (("max_relative_range", "relative_range"), ("max_cv", "cv")):
        value = stats[stat]
        if key in cross_tol and (value is None or value > cross_tol[key]):
            failures.append(f"{workload}/{backend}: {stat.replace('_', ' ')} {'—' if value is None else f'{value:.4g}'} exceeds {cross_tol[key]}")
    return failures


def _compared_totals(per_host: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the hosts that were compared: decision flips, the largest probability delta, who is outside."""
    compared = [h for h in per_host if "decision_flips" in h]
    deltas = [h["max_abs_probability_delta"] for h in compared if h["max_abs_probability_delta"] is not None]
    return {"decision_flips": sum(h["decision_flips"] for h in compared),
            "max_abs_probability_delta": max(deltas, default=None),
            "hosts_outside_tolerances": [h["label"] for h in compared if h["failures"]]}


def backend_report(workload: str, backend: str, hosts: list[HostRun], means: dict[str, dict],
                   comparisons: dict[str, dict], cross_tol: dict[str, float]) -> dict[str, Any]:
    """One (workload, backend): every host's mean and pass range, the spread, flips, tolerance failures."""
    per_host = []
    for run in hosts:
        m = means[run.label].get((workload, backend))
        if m is not None:
            per_host.append(_host_entry(run, m, _pair_of(comparisons.get(run.label), workload, backend)))
    stats = spread([h["mean_ms"] for h in per_host])
    return {"workload": workload, "backend": backend, "hosts": per_host, "spread": stats,
            **_compared_totals(per_host), "cross_host_failures": _cross_failures(workload, backend, stats, cross_tol)}


def _pair_of(comparison: dict | None, workload: str, backend: str) -> dict | None:
    """The compare pair of this (workload, baseline backend), with the verdict failures that name it."""
    if comparison is None:
        return None
    for pair in comparison["pairs"]:
        if pair["workload"] == workload and pair["baseline_backend"] == backend:
            where = f"{workload}/{pair['baseline_backend']}→{pair['candidate_backend']}:"
            failures = [f for f in comparison["verdict"].get("failures", []) if f.startswith(where)]
            return {**pair, "failures": failures}
    return None
