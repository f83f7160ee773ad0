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
    min_mean_ratio: 0.90          # candidate mean / baseline mean at least this (two-sided with max_mean_ratio)

Backends pair by name, or as `backends` maps them; a backend that is a mapping target pairs only
with what is mapped to it (e.g. `{baseline: candidate}` compares an imported run's two arms
without an unrequested candidate-versus-candidate section).

Each pair also shows both runs' `weights_fingerprint` (backends.json, absent in older runs), and
its "Environment differences" (audit/environment_diff.py); the verdict names the recorded
differences that can explain differing decisions or probabilities, and says when the two runs ran
different project code.
`input_tokens`: each paired case's usage.input_tokens in both runs and the difference (candidate -
baseline), beside the probability differences (a changed prompt shows as a token offset).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..decision import YES_THRESHOLD
from ..errors import EvidenceError, RecipeError, RunIncomplete
from ..evidence.recipe import parse_recipe, read_yaml
from ..evidence.rows import Row
from ..evidence.rundir import RunDir
from ..evidence.summary import LatencyKey
from ..evidence.tolerances import LIMIT_KEYS, TOLERANCE_KEYS, Tolerances
from ..results.row_table import RowTable, as_table, read_table
from ..results.statistics import (
    BOOTSTRAP_METHOD,
    bootstrap_mean_diff_ci,
    latency_stats,
    pair_by_id_and_seq,
    ranges_disjoint,
)
from ..results.tokens import TokenDifferences, token_differences, token_phrase
from .bundle import opened
from .environment_diff import RunEnvironment, environment_differences, explanations, project_note
from .load_compare import level_failures, level_lines, level_pairs

__all__ = [
    "COMPARABLE_STATUSES",
    "COMPARE_FORMAT_VERSION",
    "LIMIT_KEYS",
    "NO_LIMITS",
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
N_BOOT = 2000
_STATS: tuple[LatencyKey, ...] = ("mean_ms", "p50_ms", "p95_jevbench_ms", "p95_nearest_rank_ms")


def load_tolerances(path: Path) -> dict[str, Any]:
    data = read_yaml(path, "tolerances file")
    if isinstance(data, dict) and "cross_host" in data:  # a collect file (docs/cluster.md), not compare's
        raise RecipeError(f"{path}: cross_host is `invoke collect`'s section (the spread across hosts); compare "
                          "two runs with the file without it, e.g. manifests/tolerances/demo.yaml.")
    return check_tolerances(data, path)


def check_tolerances(data: Any, path: Path) -> dict[str, Any]:
    """A parsed tolerances mapping, checked (`evidence.tolerances.Tolerances.parse`); RecipeError naming path."""
    return Tolerances.parse(data, path).to_json()


def limits_for(tolerances: dict, baseline_backend: str) -> dict[str, Any]:
    """The top-level limits with the backend's own (per_backend) replacing them key by key."""
    return Tolerances.of(tolerances).limits_for(baseline_backend).to_json()


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
    incomplete: list[str] = []
    environments: list[RunEnvironment] = []
    with contextlib.ExitStack() as stack:
        loaded = []
        for role, path in (("baseline", baseline), ("candidate", candidate)):
            directory = stack.enter_context(opened(path))
            incomplete += _incomplete(role, path, directory, allow_incomplete)
            loaded.append(_load(directory))
            environments.append(RunEnvironment(directory))
        base, cand = loaded
        same_run = Path(baseline).resolve() == Path(candidate).resolve()
        published = _published_figures(Path(baseline)) if same_run else []
    result = compare_rows(base[0], cand[0], tolerances=tolerances, seed=seed, fingerprints=(base[2], cand[2]))
    result.update(baseline=str(baseline), candidate=str(candidate),
                  baseline_study=base[1].study.id, candidate_study=cand[1].study.id)
    if incomplete:
        result["verdict"]["incomplete_runs"] = incomplete
    _explain(result, *environments)
    for pair in result["pairs"]:  # an imported run's arms against each other: their published reduction too
        _add_published(pair, published)
    return result


def _incomplete(role: str, path: Path, directory: Path, allow_incomplete: bool) -> list[str]:
    """[] for a complete run; RunIncomplete for another, unless allowed: then the line naming it."""
    status = run_status(directory)
    if status in COMPARABLE_STATUSES:
        return []
    if not allow_incomplete:
        raise RunIncomplete(f"The {role} {path} is not a complete run (status {status!r}); its passes "
                            "may be partial. Pass --allow-incomplete to compare it anyway.")
    return [f"{role} {path} (status {status!r})"]


def _add_published(pair: dict[str, Any], published: list[dict[str, Any]]) -> None:
    """The published reductions of this pair's arms (an imported run), beside ours."""
    name = f"{pair['candidate_backend']} vs {pair['baseline_backend']}"
    ratio = pair["metrics"]["overall.mean_ms"]["ratio"]
    for f in published:
        if f["arm"] == name and f["figure"].endswith("_reduction_percent"):
            pair.setdefault("published", {})[f["figure"]] = {
                "published": f["published"], "status": f.get("status"),
                "ours": None if ratio is None else (1 - ratio) * 100}


def _published_figures(directory: Path) -> list[dict[str, Any]]:
    """An imported run's published figures ({arm, figure, published, status}); entries of another shape are skipped."""
    if not (directory / "import.json").is_file():
        return []
    record = RunDir(directory).read("import.json")
    figures = record.get("figures") if isinstance(record, dict) else None
    return [f for f in figures if _is_figure(f)] if isinstance(figures, list) else []


def _is_figure(f: Any) -> bool:
    if not isinstance(f, dict) or not isinstance(f.get("arm"), str) or not isinstance(f.get("figure"), str):
        return False
    published = f.get("published")
    return isinstance(published, (int, float)) and not isinstance(published, bool) and \
        isinstance(f.get("status"), (str, type(None)))


def _explain(result: dict, base: RunEnvironment, cand: RunEnvironment) -> None:
    """Environment differences per pair; the verdict's explanation and project-code lines."""
    for pair in result["pairs"]:
        pair["environment"] = environment_differences(base, cand, pair["baseline_backend"], pair["candidate_backend"])
    verdict = result["verdict"]
    verdict["explanations"] = [line for pair in result["pairs"] for line in explanations(pair)]
    verdict["project_code"] = project_note(base, cand)
    drift = sorted({d["text"] for p in result["pairs"] for d in p["environment"]["differences"] if d["item"] == "drift"})
    verdict["environment_drift"] = drift


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
    means_b, means_c = _pass_means(tb, base), _pass_means(tc, cand)
    return {
        "workload": workload, "baseline_backend": base_name, "candidate_backend": cand_name,
        "errors": {"baseline": _errors(tb, base), "candidate": _errors(tc, cand)},
        "metrics": _pair_metrics(lat_b, lat_c, means_b, means_c),
        "pass_mean_ranges_ms": _pass_mean_ranges(means_b, means_c),
        "bootstrap": _bootstrap(lat_b, lat_c, seed),
        **_answers(tb, base[min(base)], tc, cand[min(cand)]),
        "input_tokens": _input_tokens(tb, base[min(base)], tc, cand[min(cand)]),
    }


def _pass_means(t: RowTable, passes: _Passes) -> dict[int, float | None]:
    return {p: latency_stats(_ok_latencies(t, rows)).mean_ms for p, rows in passes.items()}


def _errors(t: RowTable, passes: _Passes) -> int:
    return sum(int((~t.ok[rows]).sum()) for rows in passes.values())


def _pair_metrics(lat_b: np.ndarray, lat_c: np.ndarray, means_b: dict[int, float | None],
                  means_c: dict[int, float | None]) -> dict[str, dict[str, float | None]]:
    sb, sc = latency_stats(lat_b), latency_stats(lat_c)
    metrics = {f"overall.{k}": _metric(sb.figure(k), sc.figure(k)) for k in _STATS}
    for p in sorted(set(means_b) | set(means_c)):
        metrics[f"pass{p}.mean_ms"] = _metric(means_b.get(p), means_c.get(p))
    return metrics


def _pass_mean_ranges(means_b: dict[int, float | None], means_c: dict[int, float | None]) -> dict[str, Any]:
    range_b, range_c = _range(means_b.values()), _range(means_c.values())
    disjoint = ranges_disjoint(range_b, range_c)
    return {"baseline": range_b, "candidate": range_c, "overlap": None if disjoint is None else not disjoint}


def _bootstrap(lat_b: np.ndarray, lat_c: np.ndarray, seed: int) -> dict[str, Any]:
    ci = bootstrap_mean_diff_ci(lat_b, lat_c, seed=seed, n_boot=N_BOOT) if len(lat_b) and len(lat_c) else None
    return {"mean_diff_ci95_ms": list(ci) if ci else None, "seed": seed, "n_boot": N_BOOT,
            "method_version": BOOTSTRAP_METHOD["version"],
            "of": "mean(candidate) - mean(baseline), measured latencies"}


def _input_tokens(tb: RowTable, base: np.ndarray, tc: RowTable, cand: np.ndarray) -> dict[str, Any]:
    """Input-token counts of the first measured passes by case (paired by id and seq, as the answers)."""
    match, _ = pair_by_id_and_seq(tb.ids.codes[base].astype(np.int64), tb.seq[base], _ids_in(tb, tc, cand), tc.seq[cand])
    b, c = base[match >= 0], cand[match[match >= 0]]
    return token_differences(tb.ids.strings(b), tb.seq[b].tolist(), tb.input_tokens[b], tb.has_input_tokens[b],
                             tc.input_tokens[c], tc.has_input_tokens[c]).to_json()


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


def _mean_floor(where: str, limits: dict, ratio: float | None) -> list[str]:
    """min_mean_ratio: the lower of the two-sided mean limits (much faster than the baseline is a finding too)."""
    if "min_mean_ratio" not in limits or (ratio is not None and ratio >= limits["min_mean_ratio"]):
        return []
    return [(f"{where}: mean ratio {_shown(ratio)} is below {limits['min_mean_ratio']} (much faster than the baseline "
             "is a finding too)")]


_LIMIT_LABELS = {"max_mean_ratio": "mean ratio", "max_p95_ratio": "P95 (JevBench) ratio",
                 "max_probability_delta": "max probability delta"}
NO_LIMITS = "no limits declared"
TOLERANCES_HINT = ("declare limits with --tolerances FILE (format in docs/manifest.md#compare; "
                   "example: manifests/tolerances/h200-reference-rerun.yaml)")


def _pair_values(p: dict) -> dict[str, Any]:
    return {"max_mean_ratio": p["metrics"]["overall.mean_ms"]["ratio"],
            "max_p95_ratio": p["metrics"]["overall.p95_jevbench_ms"]["ratio"],
            "max_probability_delta": p["answers"]["max_abs_probability_delta"]}


def _shown(value: float | None) -> str:
    """A compared figure in a verdict line: four significant digits (the --out JSON keeps every digit)."""
    return "—" if value is None else f"{value:.4g}"


def _check_pair(p: dict, limits: dict, where: str) -> tuple[list[str], list[str]]:
    """(failures, limits checked) of one pair against its limits."""
    failures, checked = [], []
    for key, value in _pair_values(p).items():
        if key in limits:
            shown = "—" if value is None else f"{value:.4g}"
            checked.append(f"{where}: {_LIMIT_LABELS[key]} {shown} <= {limits[key]}")
            if value is None or value > limits[key]:
                failures.append(f"{where}: {_LIMIT_LABELS[key]} {_shown(value)} exceeds {limits[key]}")
    if "min_mean_ratio" in limits:
        checked.append(f"{where}: mean ratio >= {limits['min_mean_ratio']}")
        failures += _mean_floor(where, limits, p["metrics"]["overall.mean_ms"]["ratio"])
    for check in (_decisions_match, _weights_match):
        check(p, limits, where, failures, checked)
    return failures, checked


def _decisions_match(p: dict, limits: dict, where: str, failures: list[str], checked: list[str]) -> None:
    if limits.get("decisions_must_match"):
        checked.append(f"{where}: decisions match ({len(p['answers']['decision_flips'])} flips)")
        if p["answers"]["decision_flips"] or p["answers"]["unpaired"]:
            ids = ", ".join(f["id"] for f in p["answers"]["decision_flips"]) or "unpaired cases"
            failures.append(f"{where}: decisions differ ({ids})")


def _weights_match(p: dict, limits: dict, where: str, failures: list[str], checked: list[str]) -> None:
    if limits.get("weights_must_match"):
        w = p.get("weights_fingerprint", {})
        checked.append(f"{where}: weights fingerprints match")
        if w.get("same") is not True:
            failures.append(f"{where}: weights fingerprints differ or are missing "
                            f"(baseline {w.get('baseline')}, candidate {w.get('candidate')})")


def _verdict(pairs: list[dict], tolerances: dict | None, unmatched: list[str]) -> dict[str, Any]:
    """PASS/FAIL against the declared limits; a missing counterpart or a failed measured request fails
    whether limits are declared or not; with no limit declared and nothing failed, passed is None."""
    failures = [f"backend {name} has no counterpart in the other run" for name in unmatched]
    checked: list[str] = []
    for p in pairs:
        where = f"{p['workload']}/{p['baseline_backend']}→{p['candidate_backend']}"
        pair_failures, pair_checked = _check_pair(p, limits_for(tolerances or {}, p["baseline_backend"]), where)
        level_failed, level_checked = level_failures(p, limits_for(tolerances or {}, p["baseline_backend"]), where)
        failures += pair_failures + level_failed
        checked += pair_checked + level_checked
        if p["errors"]["candidate"] or p["errors"]["baseline"]:
            failures.append(f"{where}: failed requests in the measured passes ({p['errors']})")
    return _verdict_record(failures, checked, tolerances)


def _verdict_record(failures: list[str], checked: list[str], tolerances: dict | None) -> dict[str, Any]:
    passed = False if failures else (True if checked else None)
    verdict: dict[str, Any] = {"passed": passed, "failures": failures, "checked": checked}
    if not checked:
        verdict["note"] = NO_LIMITS if tolerances else f"{NO_LIMITS}: {TOLERANCES_HINT}"
    if tolerances:
        verdict["tolerances"] = tolerances
    return verdict


def compare_rows(base_rows: RowTable | Iterable[Row], cand_rows: RowTable | Iterable[Row], *,
                 tolerances: dict | None = None, seed: int = 20261003,
                 fingerprints: tuple[dict[str, str | None], dict[str, str | None]] = ({}, {})) -> dict[str, Any]:
    """Compare two runs' rows (RowTables, or iterables of Row) backend by backend."""
    tb, tc = as_table(base_rows), as_table(cand_rows)
    base, cand = tb.by_pass("measured"), tc.by_pass("measured")
    mapping = dict((tolerances or {}).get("backends") or {})
    pairs, unmatched = [], []
    for (workload, name) in base:  # the runs' own order (the recipe's: backends run one after another)
        if name not in mapping and name in mapping.values():
            continue  # a mapping target pairs only with what the user mapped to it, not with its namesake
        other = mapping.get(name, name)
        if (workload, other) in cand:
            pair = _pair(workload, name, other, tb, base[(workload, name)], tc, cand[(workload, other)], seed)
            pair.update(level_pairs(tb, tc, workload, name, other, seed))  # load runs only
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


def _environment_verdict(v: dict[str, Any]) -> list[str]:
    """The verdict's lines on the environment: explanations, recorded drift, different project code."""
    lines = [f"- explained by the environment: {e}" for e in v.get("explanations") or []]
    lines += [f"- {d}" for d in v.get("environment_drift") or []]
    return lines + ([f"- {v['project_code']}"] if v.get("project_code") else [])


def _environment_lines(env: dict[str, Any] | None) -> list[str]:
    if env is None:
        return []
    lines = ["Environment differences (baseline vs candidate):", ""]
    lines += [f"- {d['text']}" for d in env["differences"]] or ["- none recorded"]
    if env["not_recorded"]:
        lines.append(f"- not recorded by either run: {', '.join(env['not_recorded'])}")
    return lines


def to_markdown(result: dict[str, Any]) -> str:
    lines = []
    for p in result["pairs"]:
        lines += _pair_lines(p)
    return "\n".join(lines + _verdict_lines(result["verdict"])) + "\n"


def _pair_lines(p: dict[str, Any]) -> list[str]:
    """One pair's section: its metric table, then one line per finding, then its environment differences."""
    lines = [f"### {p['workload']}: {p['baseline_backend']} (baseline) vs {p['candidate_backend']} (candidate)", "",
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
    if "input_tokens" in p:  # absent from compare JSON written before token counts were compared
        lines.append(f"- {token_phrase(TokenDifferences.decode(p['input_tokens']), 'candidate', 'baseline')}")
    lines += _published_lines(p.get("published") or {}) + _weights_lines(p.get("weights_fingerprint") or {})
    lines += level_lines(p)  # load runs only
    return lines + ["", *_environment_lines(p.get("environment")), ""]


def _published_lines(published: dict[str, Any]) -> list[str]:
    return [f"- published {figure} (imported run): {v['published']!r}; ours {v['ours']!r} "
            f"({(v['status'] or 'unknown').replace('_', ' ')} at import)" for figure, v in published.items()]


def _weights_lines(w: dict[str, Any]) -> list[str]:
    if not (w.get("baseline") or w.get("candidate")):
        return []
    same = {True: "same", False: "DIFFERENT", None: "not comparable"}[w.get("same")]
    return [f"- weights fingerprint: {same} (baseline {w.get('baseline')}, candidate {w.get('candidate')})"]


def _verdict_lines(v: dict[str, Any]) -> list[str]:
    """The verdict, its failures, and on PASS every limit checked; with no limit, where limits come from."""
    verdict = NO_LIMITS if v["passed"] is None else ("PASS" if v["passed"] else "FAIL")
    if v.get("incomplete_runs"):
        verdict += " over INCOMPLETE runs (--allow-incomplete): " + "; ".join(v["incomplete_runs"])
    lines = [f"**Verdict: {verdict}**"]
    lines += [f"- {f}" for f in v["failures"]]
    if v["passed"] and v.get("checked"):
        lines += ["", "Limits checked:", *(f"- {c}" for c in v["checked"])]
    if not v.get("checked"):
        lines.append(f"- {v.get('note', NO_LIMITS)}")
    lines += _environment_verdict(v)
    return lines
