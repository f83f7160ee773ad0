"""`compare`: two runs, backend by backend, against declared tolerances.

Everything is derived from each run's rows.jsonl and recipe.yaml (the source of truth)
with the functions of `openjev_repro.results`: per-metric deltas and ratios, pass-range
overlap, a seeded bootstrap 95% interval of the difference of means, and decision flips
and probability differences by case id (first measured pass, paired by id and seq).

Tolerances file (YAML, format_version 1), every key optional:

    format_version: 1
    max_mean_ratio: 1.10          # candidate mean / baseline mean
    max_p95_ratio: 1.25           # candidate / baseline, JevBench P95
    max_probability_delta: 0.01   # largest |p_candidate - p_baseline| of a case
    decisions_must_match: true
    backends: {hf: hf-new}        # baseline backend -> candidate backend, when names differ
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..errors import EvidenceError, RecipeError
from ..recipe import parse_recipe, read_yaml
from ..results import BOOTSTRAP_METHOD, bootstrap_mean_diff_ci, latency_stats, pair_by_id_and_seq, ranges_disjoint
from ..row_table import RowTable, as_table, read_table
from ..rows import Row
from .bundle import opened

__all__ = ["COMPARE_FORMAT_VERSION", "TOLERANCE_KEYS", "load_tolerances", "compare_runs", "compare_rows",
           "to_markdown"]

COMPARE_FORMAT_VERSION = 1
TOLERANCE_KEYS = {"format_version", "max_mean_ratio", "max_p95_ratio", "max_probability_delta",
                  "decisions_must_match", "backends"}
N_BOOT = 2000
_STATS = ("mean_ms", "p50_ms", "p95_jevbench_ms", "p95_nearest_rank_ms")


def load_tolerances(path: Path) -> dict[str, Any]:
    data = read_yaml(path, "tolerances file")
    if not isinstance(data, dict) or data.get("format_version") != 1:
        raise RecipeError(f"{path}: a tolerances file is a mapping with format_version: 1.")
    unknown = sorted(set(data) - TOLERANCE_KEYS)
    if unknown:
        raise RecipeError(f"{path}: unknown keys {', '.join(unknown)}; known: {', '.join(sorted(TOLERANCE_KEYS))}.")
    return data


def _load(directory: Path) -> tuple[RowTable, Any]:
    recipe_path = Path(directory) / "recipe.yaml"
    if not recipe_path.is_file():
        raise EvidenceError(f"{directory} has no recipe.yaml; compare reads run directories or bundles.")
    return read_table(Path(directory) / "rows.jsonl"), parse_recipe(recipe_path.read_text(encoding="utf-8"),
                                                                    str(recipe_path))


def compare_runs(baseline: Path, candidate: Path, *, tolerances: dict | None = None, seed: int = 20261003) -> dict:
    with contextlib.ExitStack() as stack:
        base = _load(stack.enter_context(opened(baseline)))
        cand = _load(stack.enter_context(opened(candidate)))
    result = compare_rows(base[0], cand[0], tolerances=tolerances, seed=seed)
    result.update(baseline=str(baseline), candidate=str(candidate),
                  baseline_study=base[1].study.id, candidate_study=cand[1].study.id)
    return result


_Passes = dict[int, np.ndarray]  # pass index -> row indices in seq order


def _measured(t: RowTable) -> dict[tuple[str, str], _Passes]:
    """Measured rows grouped by (workload, backend) and pass, each pass in seq order."""
    groups: dict[tuple[str, str], _Passes] = {}
    for (workload, backend, index), rows in t.groups(np.flatnonzero(t.phase.equals("measured")),
                                                     ("workload", "backend", "pass_index")).items():
        groups.setdefault((workload, backend), {})[index] = rows
    return groups


def _metric(b: float | None, c: float | None) -> dict[str, float | None]:
    return {"baseline": b, "candidate": c, "delta": None if b is None or c is None else c - b,
            "ratio": c / b if b and c is not None else None}


def _range(means: Iterable[float | None]) -> list[float] | None:
    """[lowest, highest] pass mean; a pass with no successful request has no mean and is left out."""
    known = [m for m in means if m is not None]
    return [min(known), max(known)] if known else None


def _ok_latencies(t: RowTable, idx: np.ndarray) -> np.ndarray:
    return t.latency_ms[idx[t.ok[idx]]]


def _pair(workload: str, base_name: str, cand_name: str, tb: RowTable, base: _Passes, tc: RowTable, cand: _Passes,
          seed: int) -> dict[str, Any]:
    lat_b = np.concatenate([_ok_latencies(tb, base[p]) for p in sorted(base)])
    lat_c = np.concatenate([_ok_latencies(tc, cand[p]) for p in sorted(cand)])
    sb, sc = latency_stats(lat_b), latency_stats(lat_c)
    metrics = {f"overall.{k}": _metric(sb[k], sc[k]) for k in _STATS}
    means_b = {p: latency_stats(_ok_latencies(tb, rows))["mean_ms"] for p, rows in base.items()}
    means_c = {p: latency_stats(_ok_latencies(tc, rows))["mean_ms"] for p, rows in cand.items()}
    for p in sorted(set(means_b) | set(means_c)):
        metrics[f"pass{p}.mean_ms"] = _metric(means_b.get(p), means_c.get(p))
    range_b, range_c = _range(means_b.values()), _range(means_c.values())
    disjoint = ranges_disjoint(range_b, range_c)
    ci = bootstrap_mean_diff_ci(lat_b, lat_c, seed=seed, n_boot=N_BOOT) if len(lat_b) and len(lat_c) else None
    return {
        "workload": workload, "baseline_backend": base_name, "candidate_backend": cand_name,
        "errors": {"baseline": sum(int((~tb.ok[rows]).sum()) for rows in base.values()),
                   "candidate": sum(int((~tc.ok[rows]).sum()) for rows in cand.values())},
        "metrics": metrics,
        "pass_mean_ranges_ms": {"baseline": range_b, "candidate": range_c,
                                "overlap": None if disjoint is None else not disjoint},
        "bootstrap": {"mean_diff_ci95_ms": list(ci) if ci else None, "seed": seed, "n_boot": N_BOOT,
                      "method_version": BOOTSTRAP_METHOD["version"],
                      "of": "mean(candidate) - mean(baseline), measured latencies"},
        **_answers(tb, base[min(base)], tc, cand[min(cand)]),
    }


def _ids_in(t: RowTable, other: RowTable, idx: np.ndarray) -> np.ndarray:
    """The id codes of `other`'s rows at idx, translated into `t`'s codes (new ids get new codes)."""
    lookup = t.ids.lookup()
    remap = np.array([lookup.setdefault(v, len(lookup)) for v in other.ids.values] or [0], dtype=np.int64)
    return remap[other.ids.codes[idx]]


def _answers(tb: RowTable, base: np.ndarray, tc: RowTable, cand: np.ndarray) -> dict[str, Any]:
    """Pair the first measured passes by (id, seq); probabilities, deltas and decision flips by case."""
    match, unpaired = pair_by_id_and_seq(tb.ids.codes[base].astype(np.int64), tb.seq[base],
                                         _ids_in(tb, tc, cand), tc.seq[cand])
    paired = match >= 0
    b, c = base[paired], cand[match[paired]]
    answered = tb.has_probability[b] & tc.has_probability[c]
    b, c = b[answered], c[answered]
    pb, pc = tb.probability[b], tc.probability[c]
    delta = pc - pb
    ids, seqs = tb.ids.strings(b), tb.seq[b].tolist()
    cases = [{"id": i, "seq": q, "baseline": x, "candidate": y, "delta": d}
             for i, q, x, y, d in zip(ids, seqs, pb.tolist(), pc.tolist(), delta.tolist())]
    yes_b, yes_c = pb >= 0.5, pc >= 0.5
    flips = [{"id": ids[k], "seq": seqs[k], "baseline": "yes" if yes_b[k] else "no",
              "candidate": "yes" if yes_c[k] else "no"} for k in np.flatnonzero(yes_b != yes_c).tolist()]
    return {"answers": {"paired": len(cases), "unpaired": unpaired, "decision_flips": flips,
                        "max_abs_probability_delta": max(np.abs(delta).tolist(), default=None),
                        "by_case": cases}}


def _verdict(pairs: list[dict], tolerances: dict | None, unmatched: list[str]) -> dict[str, Any]:
    if not tolerances:
        return {"passed": None, "failures": [], "note": "no tolerances declared"}
    failures = [f"backend {name} has no counterpart in the other run" for name in unmatched]
    for p in pairs:
        where = f"{p['workload']}/{p['baseline_backend']}→{p['candidate_backend']}"
        checks = [("max_mean_ratio", p["metrics"]["overall.mean_ms"]["ratio"], "mean ratio"),
                  ("max_p95_ratio", p["metrics"]["overall.p95_jevbench_ms"]["ratio"], "P95 (JevBench) ratio"),
                  ("max_probability_delta", p["answers"]["max_abs_probability_delta"], "max probability delta")]
        for key, value, label in checks:
            if key in tolerances and (value is None or value > tolerances[key]):
                failures.append(f"{where}: {label} {value!r} exceeds {tolerances[key]}")
        if tolerances.get("decisions_must_match") and (p["answers"]["decision_flips"] or p["answers"]["unpaired"]):
            ids = ", ".join(f["id"] for f in p["answers"]["decision_flips"]) or "unpaired cases"
            failures.append(f"{where}: decisions differ ({ids})")
        if p["errors"]["candidate"] or p["errors"]["baseline"]:
            failures.append(f"{where}: failed requests in the measured passes ({p['errors']})")
    return {"passed": not failures, "failures": failures, "tolerances": tolerances}


def compare_rows(base_rows: RowTable | Iterable[Row], cand_rows: RowTable | Iterable[Row], *,
                 tolerances: dict | None = None, seed: int = 20261003) -> dict[str, Any]:
    """Compare two runs' rows (RowTables, or iterables of Row) backend by backend."""
    tb, tc = as_table(base_rows), as_table(cand_rows)
    base, cand = _measured(tb), _measured(tc)
    mapping = dict((tolerances or {}).get("backends") or {})
    pairs, unmatched = [], []
    for (workload, name) in sorted(base):
        other = mapping.get(name, name)
        if (workload, other) in cand:
            pairs.append(_pair(workload, name, other, tb, base[(workload, name)], tc, cand[(workload, other)], seed))
        else:
            unmatched.append(f"{workload}/{name}")
    if not pairs:
        raise EvidenceError("The two runs share no (workload, backend) pair; map backend names in the tolerances file.")
    return {"format_version": COMPARE_FORMAT_VERSION, "pairs": pairs, "unmatched": unmatched,
            "bootstrap_method": dict(BOOTSTRAP_METHOD, numpy=np.__version__),
            "verdict": _verdict(pairs, tolerances, unmatched)}


def _fmt(value: Any, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


MARKDOWN_FLIP_IDS = 20  # the JSON (--out) lists every flip; the printed line names the first ones


def _flip_ids(flips: list[dict[str, Any]]) -> str:
    if not flips:
        return ""
    shown = ", ".join(f["id"] for f in flips[:MARKDOWN_FLIP_IDS])
    more = len(flips) - MARKDOWN_FLIP_IDS
    return f" ({shown}{f', … and {more} more (all in the --out JSON)' if more > 0 else ''})"


def to_markdown(result: dict[str, Any]) -> str:
    lines = []
    for p in result["pairs"]:
        lines += [f"### {p['workload']}: {p['baseline_backend']} (baseline) vs {p['candidate_backend']} (candidate)", "",
                  "| metric | baseline (ms) | candidate (ms) | delta (ms) | ratio |", "| --- | ---: | ---: | ---: | ---: |"]
        for name, m in p["metrics"].items():
            lines.append(f"| {name} | {_fmt(m['baseline'])} | {_fmt(m['candidate'])} | {_fmt(m['delta'])} | {_fmt(m['ratio'], 4)} |")
        ci = p["bootstrap"]["mean_diff_ci95_ms"]
        r = p["pass_mean_ranges_ms"]
        a = p["answers"]
        lines += ["", f"- pass mean ranges overlap: {r['overlap']}",
                  f"- bootstrap 95% interval of the mean difference: "
                  f"{'—' if ci is None else f'[{ci[0]:.3f}, {ci[1]:.3f}] ms'} (seed {p['bootstrap']['seed']}, "
                  f"bootstrap method v{p['bootstrap'].get('method_version', 1)})",
                  f"- decision flips: {len(a['decision_flips'])} of {a['paired']} paired cases"
                  + _flip_ids(a["decision_flips"]),
                  f"- max |probability delta|: {a['max_abs_probability_delta']!r}", ""]
    v = result["verdict"]
    verdict = "no tolerances declared" if v["passed"] is None else ("PASS" if v["passed"] else "FAIL")
    lines.append(f"**Verdict: {verdict}**")
    lines += [f"- {f}" for f in v["failures"]]
    return "\n".join(lines) + "\n"
