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

The two recipes are compared too (docs/manifest.md#compare): a difference in what a pair measured
(the protocol, or the pair's workload: its requests, selection, passes and load levels, the arrival
process and seed of an open-loop level included) fails the verdict, naming it; any other difference
beyond the backends' own (inputs, environment expectations, host controls, gates) is listed in the
verdict. The study's id, date and purpose, its notes and where its inputs lie are not compared.

The result is a `RunComparison`: its `Pair`s (one per backend pair: figures, answers, environment;
`failures(limits)`, `lines()`), its `CompareVerdict` and `to_json()`, the `--out` file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from ..decision import YES_THRESHOLD
from ..errors import EvidenceError, RecipeError, RunIncomplete
from ..evidence.recipe import Recipe, parse_recipe, read_yaml
from ..evidence.records import backends_of, import_of, state_of
from ..evidence.rows import Row
from ..evidence.rundir import RunDir
from ..evidence.summary import LatencyStats
from ..evidence.tolerances import LIMIT_KEYS, TOLERANCE_KEYS, Limits, Tolerances
from ..results.latency import latency_stats
from ..results.row_table import RowTable, as_table, read_table
from ..results.statistics import BOOTSTRAP_METHOD, pair_by_id_and_seq, ranges_disjoint
from ..results.tokens import TokenDifferences, token_differences, token_phrase
from .bundle import opened
from .environment_diff import RunEnvironment, environment_differences, explanations, project_note
from .load_compare import Bootstrap, LevelPair, Metric, fmt, level_columns, level_pairs, level_table, shown

__all__ = [
    "COMPARABLE_STATUSES",
    "COMPARE_FORMAT_VERSION",
    "LIMIT_KEYS",
    "NO_LIMITS",
    "TOLERANCE_KEYS",
    "CompareVerdict",
    "Pair",
    "RunComparison",
    "check_tolerances",
    "compare_rows",
    "compare_runs",
    "load_tolerances",
    "run_status",
    "to_markdown",
]

COMPARE_FORMAT_VERSION = 1
COMPARABLE_STATUSES = ("complete", "imported")  # a finished run: a study's, or an import of published evidence
NO_LIMITS = "no limits declared"
TOLERANCES_HINT = ("declare limits with --tolerances FILE (format in docs/manifest.md#compare; "
                   "example: manifests/tolerances/h200-reference-rerun.yaml)")
MARKDOWN_FLIP_IDS = 20  # the JSON (--out) lists every flip; the printed line names the first ones
MARKDOWN_RECIPE_LINES = 20  # the JSON lists every recipe difference


# --- tolerances --------------------------------------------------------------------------------------

def load_tolerances(path: Path) -> Tolerances:
    data = read_yaml(path, "tolerances file")
    if isinstance(data, dict) and "cross_host" in data:  # a collect file (docs/cluster.md), not compare's
        raise RecipeError(f"{path}: cross_host is `invoke collect`'s section (the spread across hosts); compare "
                          "two runs with the file without it, e.g. manifests/tolerances/demo.yaml.")
    return Tolerances.parse(data, path)


def check_tolerances(data: object, path: Path | str) -> dict[str, object]:
    """A tolerances mapping, checked (`Tolerances.parse`; RecipeError naming path), as parsed."""
    return Tolerances.parse(data, path).to_json()


# --- one backend pair ----------------------------------------------------------------------------------

class Overall(msgspec.Struct, frozen=True):
    """The pooled latency figures of the measured passes."""

    mean_ms: Metric
    p50_ms: Metric
    p95_jevbench_ms: Metric
    p95_nearest_rank_ms: Metric

    @classmethod
    def of(cls, b: LatencyStats, c: LatencyStats) -> Overall:
        return cls(Metric.of(b.mean_ms, c.mean_ms), Metric.of(b.p50_ms, c.p50_ms),
                   Metric.of(b.p95_jevbench_ms, c.p95_jevbench_ms),
                   Metric.of(b.p95_nearest_rank_ms, c.p95_nearest_rank_ms))


class Counts(msgspec.Struct, frozen=True):
    baseline: int
    candidate: int


class PassRanges(msgspec.Struct, frozen=True):
    """[lowest, highest] pass mean of each run, and whether they overlap."""

    baseline: list[float] | None
    candidate: list[float] | None
    overlap: bool | None

    @classmethod
    def of(cls, means_b: Iterable[float | None], means_c: Iterable[float | None]) -> PassRanges:
        range_b, range_c = _range(means_b), _range(means_c)
        disjoint = ranges_disjoint(range_b, range_c)
        return cls(range_b, range_c, None if disjoint is None else not disjoint)


def _range(means: Iterable[float | None]) -> list[float] | None:
    """[lowest, highest] pass mean; a pass with no successful request has no mean and is left out."""
    known = [m for m in means if m is not None]
    return [min(known), max(known)] if known else None


class Flip(msgspec.Struct, frozen=True):
    id: str | None
    seq: int
    baseline: str
    candidate: str


class WeightsMatch(msgspec.Struct, frozen=True):
    baseline: str | None
    candidate: str | None
    same: bool | None

    @classmethod
    def of(cls, b: str | None, c: str | None) -> WeightsMatch:
        return cls(b, c, None if b is None or c is None else b == c)

    def lines(self) -> list[str]:
        if not (self.baseline or self.candidate):
            return []
        same = {True: "same", False: "DIFFERENT", None: "not comparable"}[self.same]
        return [f"- weights fingerprint: {same} (baseline {self.baseline}, candidate {self.candidate})"]


class ImportedFigure(msgspec.Struct, frozen=True):
    """A figure an imported run's evidence publishes (import.json `figures`)."""

    arm: str
    figure: str
    published: int | float
    status: str | None = None


class PublishedBeside(msgspec.Struct, frozen=True):
    """A published reduction of an imported run's arms, beside ours."""

    published: int | float
    status: str | None
    ours: float | None


@dataclass(frozen=True)
class Answers:
    """The first measured passes paired by (id, seq): both probabilities of each answered case."""

    ids: list[str | None]
    seqs: np.ndarray
    baseline: np.ndarray  # probabilities
    candidate: np.ndarray
    unpaired: int

    @property
    def paired(self) -> int:
        return len(self.ids)

    @functools.cached_property
    def max_abs_probability_delta(self) -> float | None:
        return float(np.abs(self.candidate - self.baseline).max()) if self.paired else None

    @functools.cached_property
    def decision_flips(self) -> list[Flip]:
        yes_b, yes_c = self.baseline >= YES_THRESHOLD, self.candidate >= YES_THRESHOLD
        word = {True: "yes", False: "no"}
        return [Flip(self.ids[k], int(self.seqs[k]), word[bool(yes_b[k])], word[bool(yes_c[k])])
                for k in np.flatnonzero(yes_b != yes_c).tolist()]

    def to_json(self) -> dict[str, object]:
        delta = self.candidate - self.baseline
        by_case = [{"id": i, "seq": q, "baseline": x, "candidate": y, "delta": d} for i, q, x, y, d in
                   zip(self.ids, self.seqs.tolist(), self.baseline.tolist(), self.candidate.tolist(), delta.tolist(),
                       strict=True)]
        return {"paired": self.paired, "unpaired": self.unpaired,
                "decision_flips": msgspec.to_builtins(self.decision_flips),
                "max_abs_probability_delta": self.max_abs_probability_delta, "by_case": by_case}


class EnvironmentItem(msgspec.Struct, frozen=True):
    item: str
    text: str


class Environment(msgspec.Struct, frozen=True):
    """A pair's environment differences (audit/environment_diff.py), decoded once."""

    differences: list[EnvironmentItem]
    not_recorded: list[str]

    def drift(self) -> list[str]:
        """The environment drift a run was measured with (--allow-environment-drift)."""
        return [d.text for d in self.differences if d.item == "drift"]

    def lines(self) -> list[str]:
        lines = ["Environment differences (baseline vs candidate):", ""]
        lines += [f"- {d.text}" for d in self.differences] or ["- none recorded"]
        if self.not_recorded:
            lines.append(f"- not recorded by either run: {', '.join(self.not_recorded)}")
        return lines


@dataclass(frozen=True)
class Findings:
    """What a check found: its failures, and each limit it checked."""

    failures: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    def __add__(self, other: Findings) -> Findings:
        return Findings(self.failures + other.failures, self.checked + other.checked)


@dataclass(frozen=True)
class Pair:
    """One (workload, baseline backend → candidate backend): figures, answers and what explains them."""

    workload: str
    baseline_backend: str
    candidate_backend: str
    errors: Counts  # failed measured requests
    overall: Overall
    passes: dict[int, Metric]  # pass index -> pass mean
    pass_mean_ranges_ms: PassRanges
    bootstrap: Bootstrap
    answers: Answers
    input_tokens: TokenDifferences  # results/tokens.py's record of the paired cases' token counts
    weights_fingerprint: WeightsMatch
    levels: list[LevelPair] | None = None  # load runs only
    unmatched_levels: list[str] = field(default_factory=list)
    environment: Environment | None = None  # compare_runs: from the run directories
    published: dict[str, PublishedBeside] = field(default_factory=dict)  # an imported run against itself

    @property
    def where(self) -> str:
        return f"{self.workload}/{self.baseline_backend}→{self.candidate_backend}"

    def failures(self, limits: Limits) -> Findings:
        """The declared limits this pair exceeds (and every limit checked), at every load level too; a level
        in one run only and a failed request fail whatever the limits."""
        where = self.where
        found = self._figures_within(limits) + self._answers_and_weights(limits)
        found.failures.extend(f"{where}: level {u} has no counterpart" for u in self.unmatched_levels)
        for level in self.levels or []:
            found += Findings(*level.failures(limits, where))
        if self.errors.baseline or self.errors.candidate:
            counts = f"{{'baseline': {self.errors.baseline}, 'candidate': {self.errors.candidate}}}"
            found.failures.append(f"{where}: failed requests in the measured passes ({counts})")
        return found

    def _figures_within(self, limits: Limits) -> Findings:
        """The pooled mean and P95 ratios and the largest probability delta against their limits."""
        where, found = self.where, Findings()
        mean, delta = self.overall.mean_ms, self.answers.max_abs_probability_delta
        for limit, label, value in ((limits.max_mean_ratio, "mean ratio", mean.ratio),
                                    (limits.max_p95_ratio, "P95 (JevBench) ratio", self.overall.p95_jevbench_ms.ratio),
                                    (limits.max_probability_delta, "max probability delta", delta)):
            if limit is not UNSET:
                found.checked.append(f"{where}: {label} {shown(value)} <= {limit}")
                if value is None or value > limit:
                    found.failures.append(f"{where}: {label} {shown(value)} exceeds {limit}")
        if limits.min_mean_ratio is not UNSET:
            found.checked.append(f"{where}: mean ratio >= {limits.min_mean_ratio}")
            if mean.ratio_failure("mean ratio", limits.min_mean_ratio, above=False):
                found.failures.append(f"{where}: mean ratio {shown(mean.ratio)} is below {limits.min_mean_ratio} "
                                      "(much faster than the baseline is a finding too)")
        return found

    def _answers_and_weights(self, limits: Limits) -> Findings:
        where, found = self.where, Findings()
        if limits.decisions_must_match is True:
            flips = self.answers.decision_flips
            found.checked.append(f"{where}: decisions match ({len(flips)} flips)")
            if flips or self.answers.unpaired:
                found.failures.append(f"{where}: decisions differ ({', '.join(str(f.id) for f in flips) or 'unpaired cases'})")
        if limits.weights_must_match is True:
            w = self.weights_fingerprint
            found.checked.append(f"{where}: weights fingerprints match")
            if w.same is not True:
                found.failures.append(f"{where}: weights fingerprints differ or are missing "
                                      f"(baseline {w.baseline}, candidate {w.candidate})")
        return found

    def explanations(self) -> list[str]:
        """The recorded environment differences that can explain differing answers (environment_diff.py)."""
        flips = msgspec.to_builtins(self.answers.decision_flips)
        return explanations({"workload": self.workload, "baseline_backend": self.baseline_backend,
                             "candidate_backend": self.candidate_backend,
                             "answers": {"decision_flips": flips,
                                         "max_abs_probability_delta": self.answers.max_abs_probability_delta},
                             "environment": msgspec.to_builtins(self.environment)})

    def metrics(self) -> Iterator[tuple[str, Metric]]:
        """(name, metric) as the table and the JSON name them: overall.mean_ms, ..., pass1.mean_ms, ..."""
        yield from ((f"overall.{k}", getattr(self.overall, k)) for k in Overall.__struct_fields__)
        yield from ((f"pass{p}.mean_ms", m) for p, m in self.passes.items())

    def lines(self) -> list[str]:
        """The pair's section: its metric table, a line per finding, its environment differences."""
        lines = [f"### {self.workload}: {self.baseline_backend} (baseline) vs {self.candidate_backend} (candidate)",
                 "", "| metric | baseline (ms) | candidate (ms) | delta (ms) | ratio |",
                 "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {name} | {fmt(m.baseline)} | {fmt(m.candidate)} | {fmt(m.delta)} | {fmt(m.ratio, 4)} |"
                  for name, m in self.metrics()]
        a, b = self.answers, self.bootstrap
        interval = self.bootstrap.interval()
        lines += ["", f"- pass mean ranges overlap: {self.pass_mean_ranges_ms.overlap}",
                  (f"- bootstrap 95% interval of the mean difference: "
                   f"{interval if interval == '—' else interval + ' ms'} (seed {b.seed}, "
                   f"bootstrap method v{b.method_version})"),
                  f"- decision flips: {len(a.decision_flips)} of {a.paired} paired cases" + _flip_ids(a.decision_flips),
                  f"- max |probability delta|: {a.max_abs_probability_delta!r}",
                  f"- {token_phrase(self.input_tokens, 'candidate', 'baseline')}"]
        lines += [f"- published {figure} (imported run): {v.published!r}; ours {v.ours!r} "
                  f"({(v.status or 'unknown').replace('_', ' ')} at import)" for figure, v in self.published.items()]
        lines += self.weights_fingerprint.lines()
        if self.levels is not None:
            lines += level_table(self.levels, self.unmatched_levels)
        return lines + ["", *(self.environment.lines() if self.environment else []), ""]

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "workload": self.workload, "baseline_backend": self.baseline_backend,
            "candidate_backend": self.candidate_backend, "errors": msgspec.to_builtins(self.errors),
            "metrics": {name: msgspec.to_builtins(m) for name, m in self.metrics()},
            "pass_mean_ranges_ms": msgspec.to_builtins(self.pass_mean_ranges_ms),
            "bootstrap": msgspec.to_builtins(self.bootstrap), "answers": self.answers.to_json(),
            "input_tokens": self.input_tokens.to_json(), "weights_fingerprint": msgspec.to_builtins(self.weights_fingerprint)}
        if self.levels is not None:
            out.update(levels=msgspec.to_builtins(self.levels), unmatched_levels=self.unmatched_levels)
        if self.environment is not None:
            out.update(environment=msgspec.to_builtins(self.environment))
        if self.published:
            out.update(published=msgspec.to_builtins(self.published))
        return out


def _flip_ids(flips: list[Flip]) -> str:
    if not flips:
        return ""
    more = len(flips) - MARKDOWN_FLIP_IDS
    return (f" ({', '.join(str(f.id) for f in flips[:MARKDOWN_FLIP_IDS])}"
            f"{f', … and {more} more (all in the --out JSON)' if more > 0 else ''})")


# --- the pair from two runs' rows ------------------------------------------------------------------------

Passes = dict[int, np.ndarray]  # pass index -> row indices in seq order


@dataclass(frozen=True)
class Side:
    """One run's measured rows of one (workload, backend)."""

    t: RowTable
    passes: Passes

    def latencies(self, rows: np.ndarray) -> np.ndarray:
        return self.t.latency_ms[rows[self.t.ok[rows]]]

    def all_latencies(self) -> np.ndarray:
        return np.concatenate([self.latencies(self.passes[p]) for p in sorted(self.passes)])

    def pass_means(self) -> dict[int, float | None]:
        return {p: latency_stats(self.latencies(rows)).mean_ms for p, rows in self.passes.items()}

    def errors(self) -> int:
        return sum(int((~self.t.ok[rows]).sum()) for rows in self.passes.values())

    @property
    def first(self) -> np.ndarray:
        """The first measured pass: where answers are paired."""
        return self.passes[min(self.passes)]


def _ids_in(t: RowTable, other: RowTable, idx: np.ndarray) -> np.ndarray:
    """The id codes of `other`'s rows at idx, translated into `t`'s codes (new ids get new codes)."""
    lookup = t.ids.lookup()
    remap = np.array([lookup.setdefault(v, len(lookup)) for v in other.ids.values] or [0], dtype=np.int64)
    return remap[other.ids.codes[idx]]


def _paired_cases(b: Side, c: Side) -> tuple[Answers, TokenDifferences]:
    """The first measured passes paired by (id, seq): the answers, and the input-token differences."""
    tb, tc, base, cand = b.t, c.t, b.first, c.first
    match, unpaired = pair_by_id_and_seq(tb.ids.codes[base].astype(np.int64), tb.seq[base], _ids_in(tb, tc, cand),
                                         tc.seq[cand])
    pb, pc = base[match >= 0], cand[match[match >= 0]]
    tokens = token_differences(tb.ids.strings(pb), tb.seq[pb].tolist(), tb.input_tokens[pb], tb.has_input_tokens[pb],
                               tc.input_tokens[pc], tc.has_input_tokens[pc])
    answered = tb.has_probability[pb] & tc.has_probability[pc]
    ab, ac = pb[answered], pc[answered]
    return Answers(tb.ids.strings(ab), tb.seq[ab], tb.probability[ab], tc.probability[ac], unpaired), tokens


def _pair(workload: str, names: tuple[str, str], b: Side, c: Side, seed: int, levels: tuple[list[LevelPair], list[str]] | None,
          fingerprints: tuple[str | None, str | None]) -> Pair:
    lat_b, lat_c = b.all_latencies(), c.all_latencies()
    means_b, means_c = b.pass_means(), c.pass_means()
    answers, tokens = _paired_cases(b, c)
    return Pair(workload, *names, errors=Counts(b.errors(), c.errors()),
                overall=Overall.of(latency_stats(lat_b), latency_stats(lat_c)),
                passes={p: Metric.of(means_b.get(p), means_c.get(p)) for p in sorted(set(means_b) | set(means_c))},
                pass_mean_ranges_ms=PassRanges.of(means_b.values(), means_c.values()),
                bootstrap=Bootstrap.of_latencies(lat_b, lat_c, seed, "mean(candidate) - mean(baseline), measured latencies"),
                answers=answers, input_tokens=tokens, weights_fingerprint=WeightsMatch.of(*fingerprints),
                levels=None if levels is None else levels[0], unmatched_levels=[] if levels is None else levels[1])


# --- the recipes ---------------------------------------------------------------------------------------------

class RecipeDifference(msgspec.Struct, frozen=True):
    """One setting the two recipes hold differently (JSON text of each value; "absent" where one has none)."""

    path: str
    baseline: str
    candidate: str
    measured: bool  # a setting of what a pair measured (protocol, the pair's workload): fails the verdict

    def text(self) -> str:
        return f"{self.path}: {self.baseline} vs {self.candidate}"


_NOT_COMPARED = ("study.", "notes", "backends[", "inputs.root")  # descriptive, the backends' own, where inputs lie
_ABSENT = object()


def _named(items: object) -> dict[str, object] | None:
    """A list of settings that each have a name (or a path), by it; None for any other value."""
    if not isinstance(items, list) or not items or not all(isinstance(v, dict) and ("name" in v or "path" in v)
                                                            for v in items):
        return None
    return {str(v.get("name", v.get("path"))): v for v in items}


def _children(b: object, c: object, path: str) -> dict[str, tuple[object, object]] | None:
    """The settings under two values of a recipe dump, by path (_ABSENT where one has none); None for two
    values that are single settings (numbers, text, lists without names)."""
    if isinstance(b, dict) and isinstance(c, dict):
        return {f"{path}.{_key(k)}" if path else _key(k): (b.get(k, _ABSENT), c.get(k, _ABSENT)) for k in [*b, *c]}
    named_b, named_c = _named(b), _named(c)
    if named_b is None or named_c is None:
        return None
    return {f"{path}[{_key(k)}]": (named_b.get(k, _ABSENT), named_c.get(k, _ABSENT)) for k in [*named_b, *named_c]}


def _key(key: object) -> str:
    """A key or a name as one printable line (a recipe's own text: control characters escaped)."""
    return json.dumps(str(key), ensure_ascii=False)[1:-1]


def _differing(b: object, c: object, path: str) -> Iterator[tuple[str, str, str]]:
    """(path, baseline text, candidate text) of each setting the two recipe dumps hold differently; a
    setting present in one only is one difference, not one per field."""
    children = _children(b, c, path)
    if children is None:
        yield from [(path, _text(b), _text(c))] if b != c else []
        return
    for sub, (x, y) in children.items():
        if x is _ABSENT or y is _ABSENT:
            yield sub, _text(x), _text(y)
        else:
            yield from _differing(x, y, sub)


def _text(value: object) -> str:
    """A setting as JSON (control characters escaped), at most 60 characters; "absent" where there is none."""
    if value is _ABSENT:
        return "absent"
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:59] + "…"


def recipe_differences(base: Recipe, cand: Recipe, workloads: Iterable[str]) -> list[RecipeDifference]:
    """Every setting beyond the backends' own that the two recipes hold differently, in the baseline's order;
    those of what a compared pair measured (the protocol, its workloads) fail the verdict."""
    measured = ("protocol.", *(f"workloads[{w}]" for w in workloads))
    return [RecipeDifference(path, b, c, path.startswith(measured))
            for path, b, c in _differing(base.model_dump(mode="json"), cand.model_dump(mode="json"), "")
            if not path.startswith(_NOT_COMPARED)]


# --- the verdict ---------------------------------------------------------------------------------------------

class CompareVerdict(msgspec.Struct, frozen=True, omit_defaults=True):
    """PASS/FAIL against the declared limits; a missing counterpart, a failed measured request or a recipe
    difference in what was measured fails whether limits are declared or not; with no limit declared and
    nothing failed, passed is None."""

    passed: bool | None
    failures: list[str]
    checked: list[str]
    note: str | UnsetType = UNSET
    tolerances: dict[str, object] | UnsetType = UNSET
    incomplete_runs: list[str] | UnsetType = UNSET
    recipe_differences: list[RecipeDifference] | UnsetType = UNSET
    explanations: list[str] | UnsetType = UNSET  # from the run directories (compare_runs)
    project_code: str | None | UnsetType = UNSET
    environment_drift: list[str] | UnsetType = UNSET

    @classmethod
    def of(cls, found: Findings, tolerances: Tolerances | None, recipes: list[RecipeDifference]) -> CompareVerdict:
        """FAIL on any failure; else PASS when a limit was checked; else no verdict, and where limits come from."""
        passed = False if found.failures else (True if found.checked else None)
        note = UNSET if found.checked else NO_LIMITS if tolerances else f"{NO_LIMITS}: {TOLERANCES_HINT}"
        return cls(passed, found.failures, found.checked, note=note,
                   tolerances=tolerances.to_json() if tolerances else UNSET, recipe_differences=recipes or UNSET)

    def _recipe_lines(self) -> list[str]:
        listed = [d.text() for d in self.recipe_differences or [] if not d.measured]
        lines = [f"- the recipes differ beyond their backends: {text}" for text in listed[:MARKDOWN_RECIPE_LINES]]
        more = len(listed) - MARKDOWN_RECIPE_LINES
        return lines + ([f"- … and {more} more recipe differences (all in the --out JSON)"] if more > 0 else [])

    @property
    def headline(self) -> str:
        verdict = NO_LIMITS if self.passed is None else ("PASS" if self.passed else "FAIL")
        if self.incomplete_runs:
            verdict += " over INCOMPLETE runs (--allow-incomplete): " + "; ".join(self.incomplete_runs)
        return verdict

    def lines(self) -> list[str]:
        """The verdict, its failures, and on PASS every limit checked; with no limit, where limits come from;
        then what else differs: the recipes beyond what was measured, and the environment."""
        lines = [f"**Verdict: {self.headline}**", *(f"- {f}" for f in self.failures)]
        if self.passed and self.checked:
            lines += ["", "Limits checked:", *(f"- {c}" for c in self.checked)]
        if not self.checked:
            lines.append(f"- {NO_LIMITS if self.note is UNSET else self.note}")
        return lines + self.differences()

    def differences(self) -> list[str]:
        """The recipe differences that do not fail it (the first ones), the environment's explanations,
        drift and project code."""
        lines = self._recipe_lines()
        lines += [f"- explained by the environment: {e}" for e in self.explanations or []]
        lines += [f"- {d}" for d in self.environment_drift or []]
        return lines + ([f"- {self.project_code}"] if self.project_code else [])


def _verdict(pairs: list[Pair], tolerances: Tolerances | None, unmatched: list[str],
             recipes: list[RecipeDifference]) -> CompareVerdict:
    found = Findings([f"backend {name} has no counterpart in the other run" for name in unmatched])
    for p in pairs:
        found += p.failures(tolerances.limits_for(p.baseline_backend) if tolerances else Limits())
    found.failures.extend(f"the recipes measure differently: {d.text()}" for d in recipes if d.measured)
    return CompareVerdict.of(found, tolerances, recipes)


# --- the comparison ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunComparison:
    """Two runs compared: every backend pair, the backends without a counterpart, and the verdict."""

    pairs: list[Pair]
    unmatched: list[str]
    verdict: CompareVerdict
    runs: dict[str, str] = field(default_factory=dict)  # baseline, candidate and their study ids (compare_runs)

    def to_json(self) -> dict[str, object]:
        """The --out file."""
        return {"format_version": COMPARE_FORMAT_VERSION, "pairs": [p.to_json() for p in self.pairs],
                "unmatched": self.unmatched, "bootstrap_method": dict(BOOTSTRAP_METHOD, numpy=np.__version__),
                "verdict": msgspec.to_builtins(self.verdict), **self.runs}

    def markdown(self) -> str:
        return "\n".join([line for p in self.pairs for line in p.lines()] + self.verdict.lines()) + "\n"


def to_markdown(result: RunComparison) -> str:
    return result.markdown()


def _tolerances(tolerances: Tolerances | Mapping[str, object] | None) -> Tolerances | None:
    """A caller's tolerances as the record (a mapping is checked as a file's would be)."""
    if tolerances is None or isinstance(tolerances, Tolerances):
        return tolerances
    return Tolerances.parse(dict(tolerances), "<tolerances>")


def compare_rows(base_rows: RowTable | Iterable[Row], cand_rows: RowTable | Iterable[Row], *,
                 tolerances: Tolerances | Mapping[str, object] | None = None, seed: int = 20261003,
                 fingerprints: tuple[Mapping[str, str | None], Mapping[str, str | None]] = ({}, {}),
                 recipes: tuple[Recipe, Recipe] | None = None) -> RunComparison:
    """Compare two runs' rows (RowTables, or iterables of Row) backend by backend."""
    tol = _tolerances(tolerances)
    tb, tc = as_table(base_rows), as_table(cand_rows)
    base, cand = tb.by_pass("measured"), tc.by_pass("measured")
    levels_b, levels_c = level_columns(tb), level_columns(tc)
    pairs, unmatched = [], []
    for (workload, name) in base:  # the runs' own order (the recipe's: backends run one after another)
        other = tol.candidate_for(name) if tol else name
        if other is None:
            continue  # a mapping target pairs only with what the user mapped to it, not with its namesake
        if (workload, other) not in cand:
            unmatched.append(f"{workload}/{name}")
            continue
        levels = level_pairs(levels_b, levels_c, workload, name, other, seed)  # load runs only
        pairs.append(_pair(workload, (name, other), Side(tb, base[(workload, name)]), Side(tc, cand[(workload, other)]),
                           seed, levels, (fingerprints[0].get(name), fingerprints[1].get(other))))
    if not pairs:
        raise EvidenceError("The two runs share no (workload, backend) pair; map backend names in the tolerances file.")
    differences = recipe_differences(*recipes, dict.fromkeys(p.workload for p in pairs)) if recipes else []
    return RunComparison(pairs, unmatched, _verdict(pairs, tol, unmatched, differences))


# --- two run directories ------------------------------------------------------------------------------------------

def run_status(directory: Path, shown: Path) -> str:
    """The run's status (a "running" run whose study died reads "incomplete"); EvidenceError naming `shown`,
    the path as the user gave it, for a directory that is no run."""
    if not (Path(directory) / "state.json").is_file():
        raise EvidenceError(f"{shown} is not a run directory (no state.json); compare reads run directories or "
                            "bundles.")
    return str(state_of(RunDir(Path(directory))).status)


@dataclass(frozen=True)
class Run:
    """What compare reads of one run directory: its rows, recipe, fingerprints and recorded environment."""

    table: RowTable
    recipe: Recipe
    fingerprints: dict[str, str | None]
    environment: RunEnvironment

    @classmethod
    def at(cls, directory: Path) -> Run:
        recipe_path = Path(directory) / "recipe.yaml"
        if not recipe_path.is_file():
            raise EvidenceError(f"{directory} has no recipe.yaml; compare reads run directories or bundles.")
        return cls(read_table(Path(directory) / "rows.jsonl"),
                   parse_recipe(recipe_path.read_text(encoding="utf-8"), str(recipe_path)),
                   backends_of(RunDir(Path(directory))).fingerprints(), RunEnvironment(directory))


def _incomplete(role: str, path: Path, directory: Path, allow_incomplete: bool) -> list[str]:
    """[] for a complete run; RunIncomplete for another, unless allowed: then the line naming it."""
    status = run_status(directory, path)
    if status in COMPARABLE_STATUSES:
        return []
    if not allow_incomplete:
        raise RunIncomplete(f"The {role} {path} is not a complete run (status {status!r}); its passes "
                            "may be partial. Pass --allow-incomplete to compare it anyway.")
    return [f"{role} {path} (status {status!r})"]


def _published_figures(directory: Path) -> list[ImportedFigure]:
    """An imported run's published figures (none for a study's run); entries of another shape are skipped."""
    record = import_of(RunDir(directory))
    return [f for f in map(_figure, record.figures if record else ()) if f is not None]


def _figure(entry: object) -> ImportedFigure | None:
    with contextlib.suppress(msgspec.ValidationError):
        return msgspec.convert(entry, ImportedFigure)
    return None


def _published_beside(pair: Pair, figures: list[ImportedFigure]) -> dict[str, PublishedBeside]:
    """The published reductions of this pair's arms (an imported run compared with itself), beside ours."""
    name, ratio = f"{pair.candidate_backend} vs {pair.baseline_backend}", pair.overall.mean_ms.ratio
    return {f.figure: PublishedBeside(f.published, f.status, None if ratio is None else (1 - ratio) * 100)
            for f in figures if f.arm == name and f.figure.endswith("_reduction_percent")}


def compare_runs(baseline: Path, candidate: Path, *, tolerances: Tolerances | Mapping[str, object] | None = None,
                 seed: int = 20261003, allow_incomplete: bool = False) -> RunComparison:
    """Compare two runs; an incomplete one is refused unless allow_incomplete, and then named in the verdict."""
    incomplete: list[str] = []
    with contextlib.ExitStack() as stack:
        runs = []
        for role, path in (("baseline", baseline), ("candidate", candidate)):
            directory = stack.enter_context(opened(path))
            incomplete += _incomplete(role, path, directory, allow_incomplete)
            runs.append(Run.at(directory))
        same_run = Path(baseline).resolve() == Path(candidate).resolve()
        published = _published_figures(Path(baseline)) if same_run else []
    b, c = runs
    compared = compare_rows(b.table, c.table, tolerances=tolerances, seed=seed,
                            fingerprints=(b.fingerprints, c.fingerprints), recipes=(b.recipe, c.recipe))
    pairs = [_with_environment(p, b.environment, c.environment, published) for p in compared.pairs]
    drift = sorted({text for p in pairs if p.environment for text in p.environment.drift()})
    verdict = msgspec.structs.replace(
        compared.verdict, incomplete_runs=incomplete or UNSET, explanations=[e for p in pairs for e in p.explanations()],
        project_code=project_note(b.environment, c.environment), environment_drift=drift)
    return RunComparison(pairs, compared.unmatched, verdict,
                      {"baseline": str(baseline), "candidate": str(candidate), "baseline_study": b.recipe.study.id,
                       "candidate_study": c.recipe.study.id})


def _with_environment(pair: Pair, base: RunEnvironment, cand: RunEnvironment,
                      published: list[ImportedFigure]) -> Pair:
    """The pair with its environment differences (environment_diff.py) and any published figures beside it."""
    found = environment_differences(base, cand, pair.baseline_backend, pair.candidate_backend)
    return dataclasses.replace(pair, environment=msgspec.convert(found, Environment, from_attributes=True),
                   published=_published_beside(pair, published))

