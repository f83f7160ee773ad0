"""`compare`: two runs, backend by backend, against declared tolerances.

Everything is derived from each run's rows.jsonl and recipe.yaml (the source of truth)
with the functions of `openjev_repro.results.statistics`: per-metric deltas and ratios, pass-range
overlap, a seeded bootstrap 95% interval of the difference of means, and decision flips
and probability differences by case id (first measured pass, paired by id and seq).

Tolerances file (YAML, format_version 1), every key optional:

    format_version: 1
    max_mean_ratio: 1.10          # candidate mean / baseline mean
    max_p95_ratio: 1.25           # candidate / baseline, JevBench P95
    max_probability_delta: 0.01   # largest |p_candidate - p_baseline| of a case
    decisions_must_match: true
    backends: {hf: hf-new}        # baseline backend -> candidate backend, when names differ
    per_backend:                  # limits for one baseline backend, replacing the top-level ones
      hf: {max_mean_ratio: 1.08, max_probability_delta: 0.0}
    weights_must_match: true      # both runs' backends.json report the same weights_fingerprint

Backends pair by name, or as `backends` maps them; a backend that is a mapping target pairs only
with what is mapped to it (e.g. `{baseline: candidate}` compares an imported run's two arms
without an unrequested candidate-versus-candidate section).

Each pair also shows both runs' `weights_fingerprint` (backends.json, absent in older runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..decision import YES_THRESHOLD
from ..errors import EvidenceError, RecipeError, RunIncomplete
from ..evidence.files import check_format
from ..evidence.recipe import parse_recipe, read_yaml
from ..evidence.rows import Row
from ..evidence.rundir import RunDir
from ..evidence.summary import LatencyKey
from ..results.row_table import RowTable, as_table, read_table
from ..results.statistics import (
    BOOTSTRAP_METHOD,
    bootstrap_mean_diff_ci,
    latency_stats,
    pair_by_id_and_seq,
    ranges_disjoint,
)
from .bundle import opened

__all__ = [
    "COMPARABLE_STATUSES",
    "COMPARE_FORMAT_VERSION",
    "LIMIT_KEYS",
    "TOLERANCE_KEYS",
    "check_tolerances",
    "compare_rows",
    "compare_runs",
    "limits_for",
    "load_tolerances",
    "run_status",
    "to_markdown",
]

COMPARE_FORMAT_VERSION = 1
LIMIT_KEYS = {"max_mean_ratio", "max_p95_ratio", "max_probability_delta", "decisions_must_match",
              "weights_must_match"}
TOLERANCE_KEYS = {"format_version", "backends", "per_backend", *LIMIT_KEYS}
N_BOOT = 2000
_STATS: tuple[LatencyKey, ...] = ("mean_ms", "p50_ms", "p95_jevbench_ms", "p95_nearest_rank_ms")


def load_tolerances(path: Path) -> dict[str, Any]:
    return check_tolerances(read_yaml(path, "tolerances file"), path)


def check_tolerances(data: Any, path: Path) -> dict[str, Any]:
    """A parsed tolerances mapping, checked (keys, per_backend, limit types); raises RecipeError naming path."""
    check_format(data, (1,), f"{path} (a tolerances file)")
    unknown = sorted(set(data) - TOLERANCE_KEYS)
    if unknown:
        raise RecipeError(f"{path}: unknown keys {', '.join(unknown)}; known: {', '.join(sorted(TOLERANCE_KEYS))}.")
    _check_limits(path, "", data)
    per_backend = data.get("per_backend", {})
    if not isinstance(per_backend, dict):
        raise RecipeError(f"{path}: per_backend maps a baseline backend name to its limits.")
    for name, limits in per_backend.items():
        if not isinstance(limits, dict) or not limits:
            raise RecipeError(f"{path}: per_backend.{name} is a mapping of limits ({', '.join(sorted(LIMIT_KEYS))}).")
        unknown = sorted(set(limits) - LIMIT_KEYS)
        if unknown:
            raise RecipeError(f"{path}: per_backend.{name}: unknown keys {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(LIMIT_KEYS))}.")
        _check_limits(path, f"per_backend.{name}.", limits)
    return data


def _check_limits(path: Path, where: str, limits: dict) -> None:
    for key in sorted(LIMIT_KEYS & set(limits)):
        value = limits[key]
        if key in ("decisions_must_match", "weights_must_match"):
            if not isinstance(value, bool):
                raise RecipeError(f"{path}: {where}{key} must be true or false, not {value!r}.")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise RecipeError(f"{path}: {where}{key} must be a number >= 0, not {value!r}.")


def limits_for(tolerances: dict, baseline_backend: str) -> dict[str, Any]:
    """The top-level limits with the backend's own (per_backend) replacing them key by key."""
    own = (tolerances.get("per_backend") or {}).get(baseline_backend) or {}
    return {**{k: v for k, v in tolerances.items() if k in LIMIT_KEYS}, **own}


def _load(directory: Path) -> tuple[RowTable, Any, dict[str, str | None]]:
    recipe_path = Path(directory) / "recipe.yaml"
    if not recipe_path.is_file():
        raise EvidenceError(f"{directory} has no recipe.yaml; compare reads run directories or bundles.")
    return (read_table(Path(directory) / "rows.jsonl"),
            parse_recipe(recipe_path.read_text(encoding="utf-8"), str(recipe_path)),
            _fingerprints(Path(directory) / "backends.json"))


def _fingerprints(path: Path) -> dict[str, str | None]:
    """backend -> weights_fingerprint from a run's backends.json ({} when the run has none)."""
    if not path.is_file():
        return {}
    backends = RunDir(path.parent).read(path.name).get("backends") or {}
    return {name: info.get("weights_fingerprint") if isinstance(info.get("weights_fingerprint"), str) else None
            for name, info in backends.items() if isinstance(info, dict)}


# Statuses of a finished run: a study's, or an import of published evidence.
COMPARABLE_STATUSES = ("complete", "imported")


def run_status(directory: Path) -> str:
    """The run's status; a "running" run whose study died reads "incomplete"; no state.json reads "unknown"."""
    if not (Path(directory) / "state.json").is_file():
        return "unknown"
    return str(RunDir(Path(directory)).effective_state().get("status"))


def compare_runs(baseline: Path, candidate: Path, *, tolerances: dict | None = None, seed: int = 20261003,
                 allow_incomplete: bool = False) -> dict:
    """Compare two runs; an incomplete one is refused unless allow_incomplete, and then named in the verdict."""
    incomplete = []
    with contextlib.ExitStack() as stack:
        loaded = []
        for role, path in (("baseline", baseline), ("candidate", candidate)):
            directory = stack.enter_context(opened(path))
            status = run_status(directory)
            if status not in COMPARABLE_STATUSES:
                if not allow_incomplete:
                    raise RunIncomplete(f"The {role} {path} is not a complete run (status {status!r}); its passes "
                                        "may be partial. Pass --allow-incomplete to compare it anyway.")
                incomplete.append(f"{role} {path} (status {status!r})")
            loaded.append(_load(directory))
        base, cand = loaded
        record = Path(baseline) / "import.json"
        same_import = Path(baseline).resolve() == Path(candidate).resolve() and record.is_file()
        published = RunDir(Path(baseline)).read("import.json").get("figures", []) if same_import else []
    result = compare_rows(base[0], cand[0], tolerances=tolerances, seed=seed, fingerprints=(base[2], cand[2]))
    result.update(baseline=str(baseline), candidate=str(candidate),
                  baseline_study=base[1].study.id, candidate_study=cand[1].study.id)
    if incomplete:
        result["verdict"]["incomplete_runs"] = incomplete
    for pair in result["pairs"]:  # an imported run's arms against each other: their published reduction too
        name = f"{pair['candidate_backend']} vs {pair['baseline_backend']}"
        ratio = pair["metrics"]["overall.mean_ms"]["ratio"]
        for f in published:
            if f.get("arm") == name and f.get("figure", "").endswith("_reduction_percent"):
                pair.setdefault("published", {})[f["figure"]] = {
                    "published": f["published"], "status": f.get("status"),
                    "ours": None if ratio is None else (1 - ratio) * 100}
    return result


_Passes = dict[int, np.ndarray]  # pass index -> row indices in seq order


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
             for i, q, x, y, d in zip(ids, seqs, pb.tolist(), pc.tolist(), delta.tolist(), strict=True)]
    yes_b, yes_c = pb >= YES_THRESHOLD, pc >= YES_THRESHOLD
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
        limits = limits_for(tolerances, p["baseline_backend"])
        checks = [("max_mean_ratio", p["metrics"]["overall.mean_ms"]["ratio"], "mean ratio"),
                  ("max_p95_ratio", p["metrics"]["overall.p95_jevbench_ms"]["ratio"], "P95 (JevBench) ratio"),
                  ("max_probability_delta", p["answers"]["max_abs_probability_delta"], "max probability delta")]
        for key, value, label in checks:
            if key in limits and (value is None or value > limits[key]):
                failures.append(f"{where}: {label} {value!r} exceeds {limits[key]}")
        if limits.get("decisions_must_match") and (p["answers"]["decision_flips"] or p["answers"]["unpaired"]):
            ids = ", ".join(f["id"] for f in p["answers"]["decision_flips"]) or "unpaired cases"
            failures.append(f"{where}: decisions differ ({ids})")
        if limits.get("weights_must_match") and p.get("weights_fingerprint", {}).get("same") is not True:
            w = p.get("weights_fingerprint", {})
            failures.append(f"{where}: weights fingerprints differ or are missing "
                            f"(baseline {w.get('baseline')}, candidate {w.get('candidate')})")
        if p["errors"]["candidate"] or p["errors"]["baseline"]:
            failures.append(f"{where}: failed requests in the measured passes ({p['errors']})")
    return {"passed": not failures, "failures": failures, "tolerances": tolerances}


def compare_rows(base_rows: RowTable | Iterable[Row], cand_rows: RowTable | Iterable[Row], *,
                 tolerances: dict | None = None, seed: int = 20261003,
                 fingerprints: tuple[dict[str, str | None], dict[str, str | None]] = ({}, {})) -> dict[str, Any]:
    """Compare two runs' rows (RowTables, or iterables of Row) backend by backend."""
    tb, tc = as_table(base_rows), as_table(cand_rows)
    base, cand = tb.by_pass("measured"), tc.by_pass("measured")
    mapping = dict((tolerances or {}).get("backends") or {})
    pairs, unmatched = [], []
    for (workload, name) in sorted(base):
        if name not in mapping and name in mapping.values():
            continue  # a mapping target pairs only with what the user mapped to it, not with its namesake
        other = mapping.get(name, name)
        if (workload, other) in cand:
            pair = _pair(workload, name, other, tb, base[(workload, name)], tc, cand[(workload, other)], seed)
            fb, fc = fingerprints[0].get(name), fingerprints[1].get(other)
            pair["weights_fingerprint"] = {"baseline": fb, "candidate": fc,
                                           "same": None if fb is None or fc is None else fb == fc}
            pairs.append(pair)
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
                  (f"- bootstrap 95% interval of the mean difference: "
                  f"{'—' if ci is None else f'[{ci[0]:.3f}, {ci[1]:.3f}] ms'} (seed {p['bootstrap']['seed']}, "
                  f"bootstrap method v{p['bootstrap'].get('method_version', 1)})"),
                  f"- decision flips: {len(a['decision_flips'])} of {a['paired']} paired cases"
                  + _flip_ids(a["decision_flips"]),
                  f"- max |probability delta|: {a['max_abs_probability_delta']!r}"]
        for figure, v in (p.get("published") or {}).items():
            lines.append(f"- published {figure} (imported run): {v['published']!r}; ours {v['ours']!r} "
                         f"({(v['status'] or 'unknown').replace('_', ' ')} at import)")
        w = p.get("weights_fingerprint") or {}
        if w.get("baseline") or w.get("candidate"):
            same = {True: "same", False: "DIFFERENT", None: "not comparable"}[w.get("same")]
            lines.append(f"- weights fingerprint: {same} (baseline {w.get('baseline')}, candidate {w.get('candidate')})")
        lines.append("")
    v = result["verdict"]
    verdict = "no tolerances declared" if v["passed"] is None else ("PASS" if v["passed"] else "FAIL")
    if v.get("incomplete_runs"):
        verdict += " over INCOMPLETE runs (--allow-incomplete): " + "; ".join(v["incomplete_runs"])
    lines.append(f"**Verdict: {verdict}**")
    lines += [f"- {f}" for f in v["failures"]]
    return "\n".join(lines) + "\n"
