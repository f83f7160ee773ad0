"""`compare` per load level: two load runs' (workload, backend) pairs, level by level.

For each level both runs ran, the figures of `results.load` on each side (latency from the
schedule in open loop, P99, throughput, schedule adherence), their deltas and ratios, and a
seeded bootstrap 95% interval of the difference of mean latencies (`bootstrap_mean_diff_ci`,
as the overall comparison). The declared ratio limits (`max_mean_ratio`, `min_mean_ratio`,
`max_p95_ratio`) hold at every level too: a load run's pooled figures mix levels, so a
regression at one level must not hide behind the others. Runs without levels get none of this
(the compare JSON and text of every other run are unchanged).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..results.load import LevelColumns, level_stats, spec_of
from ..results.row_table import RowTable
from ..results.statistics import BOOTSTRAP_METHOD, bootstrap_mean_diff_ci

__all__ = ["level_failures", "level_lines", "level_pairs"]

N_BOOT = 2000
_FIGURES = ("mean_ms", "p50_ms", "p95_jevbench_ms", "p99_ms", "throughput_per_s")
_SIDE = ("requests", "errors", "n", *_FIGURES)


def _levels(cols: LevelColumns, workload: str, backend: str) -> dict[str, np.ndarray]:
    """level -> measured row indices of one (workload, backend), levels in first-seen order."""
    t = cols.t
    rows = np.flatnonzero(t.workload.equals(workload) & t.backend.equals(backend) & t.phase.equals("measured"))
    found: dict[str, np.ndarray] = {}
    for code in dict.fromkeys(cols.level.codes[rows].tolist()):
        level = cols.level.values[code]
        if level is not None:
            found[level] = rows[cols.level.codes[rows] == code]
    return found


def _metric(b: float | None, c: float | None) -> dict[str, float | None]:
    return {"baseline": b, "candidate": c, "delta": None if b is None or c is None else c - b,
            "ratio": c / b if b and c is not None else None}


def _side(stats: dict[str, Any]) -> dict[str, Any]:
    schedule = stats["schedule"]
    return {**{k: stats[k] for k in _SIDE}, "late_sends": None if schedule is None else schedule["late_sends"]}


def _level_pair(level: str, base: tuple[LevelColumns, np.ndarray], cand: tuple[LevelColumns, np.ndarray],
                seed: int) -> dict[str, Any]:
    spec = spec_of(level)
    sb: dict[str, Any] = level_stats(base[0], spec, base[1], None).to_json()
    sc: dict[str, Any] = level_stats(cand[0], spec, cand[1], None).to_json()
    lat_b, lat_c = (cols.latency_ms(idx[cols.t.ok[idx]]) for cols, idx in (base, cand))
    ci = bootstrap_mean_diff_ci(lat_b, lat_c, seed=seed, n_boot=N_BOOT) if len(lat_b) and len(lat_c) else None
    return {"level": level, "latency_from": sb["latency_from"], "baseline": _side(sb), "candidate": _side(sc),
            "metrics": {k: _metric(sb[k], sc[k]) for k in _FIGURES},
            "bootstrap": {"mean_diff_ci95_ms": list(ci) if ci else None, "seed": seed, "n_boot": N_BOOT,
                          "method_version": BOOTSTRAP_METHOD["version"],
                          "of": "mean(candidate) - mean(baseline), this level's measured latencies"}}


def level_pairs(tb: RowTable, tc: RowTable, workload: str, base_name: str, cand_name: str,
                seed: int) -> dict[str, Any]:
    """{"levels": [...], "unmatched_levels": [...]} of one pair; {} when neither run has load levels."""
    cb, cc = LevelColumns.of(tb), LevelColumns.of(tc)
    base, cand = _levels(cb, workload, base_name), _levels(cc, workload, cand_name)
    if not base and not cand:
        return {}
    levels = [_level_pair(level, (cb, base[level]), (cc, cand[level]), seed) for level in base if level in cand]
    unmatched = [f"baseline {level}" for level in base if level not in cand]
    unmatched += [f"candidate {level}" for level in cand if level not in base]
    return {"levels": levels, "unmatched_levels": unmatched}


def _ratio_check(where: str, label: str, ratio: float | None, limit: float, above: bool) -> str | None:
    """The failure of one ratio against one limit (above: the ratio may not exceed it), or None."""
    if ratio is not None and (ratio <= limit if above else ratio >= limit):
        return None
    shown = "—" if ratio is None else f"{ratio:.4g}"
    return f"{where}: {label} {shown} {'exceeds' if above else 'is below'} {limit}"


_LIMITS = (("max_mean_ratio", "mean_ms", "mean ratio", True), ("min_mean_ratio", "mean_ms", "mean ratio", False),
           ("max_p95_ratio", "p95_jevbench_ms", "P95 (JevBench) ratio", True))


def level_failures(pair: dict[str, Any], limits: dict[str, Any], where: str) -> tuple[list[str], list[str]]:
    """(failures, limits checked) of every level of a pair; ([], []) for a pair without levels."""
    failures, checked = [f"{where}: level {u} has no counterpart" for u in pair.get("unmatched_levels", [])], []
    for lv in pair.get("levels", []):
        at = f"{where} level {lv['level']}"
        for key, figure, label, above in _LIMITS:
            if key in limits:
                checked.append(f"{at}: {label} {'<=' if above else '>='} {limits[key]}")
                failure = _ratio_check(at, label, lv["metrics"][figure]["ratio"], limits[key], above)
                failures += [failure] if failure else []
        if lv["baseline"]["errors"] or lv["candidate"]["errors"]:
            failures.append(f"{at}: failed requests (baseline {lv['baseline']['errors']}, "
                            f"candidate {lv['candidate']['errors']})")
    return failures, checked


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def level_lines(pair: dict[str, Any]) -> list[str]:
    """The pair's per-level table for compare's Markdown; [] for a pair without levels."""
    if "levels" not in pair:
        return []
    lines = ["", "Per load level (open loop: latency from the scheduled send):", "",
             ("| level | mean (ms) b → c | P95 JevBench (ms) b → c | P99 (ms) b → c | throughput (/s) b → c "
             "| mean ratio | bootstrap 95% mean diff (ms) | late sends b / c |"),
             "| --- | --- | --- | --- | --- | ---: | --- | --- |"]
    for lv in pair["levels"]:
        m, ci = lv["metrics"], lv["bootstrap"]["mean_diff_ci95_ms"]
        cells = [lv["level"], *(f"{_fmt(m[k]['baseline'], d)} → {_fmt(m[k]['candidate'], d)}"
                                for k, d in (("mean_ms", 3), ("p95_jevbench_ms", 3), ("p99_ms", 3),
                                             ("throughput_per_s", 2))),
                 _fmt(m["mean_ms"]["ratio"], 4), "—" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]",
                 f"{_late(lv['baseline'])} / {_late(lv['candidate'])}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [f"- level only in the {u}" for u in pair["unmatched_levels"]]


def _late(side: dict[str, Any]) -> str:
    return "n/a" if side["late_sends"] is None else str(side["late_sends"])
