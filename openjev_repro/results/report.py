"""The Markdown report and the two plots of a run, derived from summary, rows and recipe.

`render_report` is pure: every figure it prints comes from `results.summarize` (rounded
only here, to the digits named in `DIGITS`). `write_report` is the one function that
reads a run directory and writes `report.md`, `latency_vs_tokens.png` and `latency_cdf.png`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..decision import YES_THRESHOLD
from ..errors import EvidenceError, UnsupportedFormat
from ..evidence.files import write_bytes_atomic
from ..evidence.recipe import Recipe, load_recipe
from ..evidence.records import (
    BackendsRecord,
    EnvironmentRecord,
    ImportRecord,
    StateRecord,
    backends_of,
    environment_check_of,
    environment_of,
    host_of,
    import_of,
    servers_of,
    state_of,
)
from ..evidence.rows import Row
from ..evidence.rundir import ENVELOPE_NAME, RunDir, Status, guard_output
from ..evidence.summary import (
    GateResult,
    LatencyKey,
    PassStats,
    Pooled,
    Summary,
    WorkloadSummary,
    read_summary,
)
from ..printable import printable
from .cache_report import kernel_cache_lines
from .energy import GPU_FILE, read_gpu_events
from .floor import floor_lines
from .gpu_report import energy_lines
from .load_report import load_lines, load_plot_bytes, load_plot_lines
from .row_table import RowTable, as_table, read_table
from .servers import server_lines
from .statistics import latency_stats, pair_by_id_and_seq, summarize
from .tokens import token_differences, token_phrase
from .trace_gates import trace_inputs
from .trace_report import kernel_family_lines, kernel_family_plot_bytes

__all__ = [
    "DIGITS",
    "PLOT_NAMES",
    "ReportSection",
    "RunInfo",
    "SignedReportDiffers",
    "plot_figures",
    "render_report",
    "run_facts_of",
    "run_info",
    "write_plots",
    "write_report",
]

# Printed precision: milliseconds, speedup factor, percentages, probabilities.
@dataclass(frozen=True)
class Digits:
    ms: int = 3
    speedup: int = 2
    percent: int = 2
    probability: int = 6


DIGITS = Digits()
PLOT_NAMES = ("latency_vs_tokens.png", "latency_cdf.png")


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.{DIGITS.ms}f}"


def _prob(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.{DIGITS.probability}f}"


def _yes(v: bool | None) -> str:
    return {True: "yes", False: "no", None: "n/a"}[v]


def _per_pass(passes: list[PassStats], key: LatencyKey) -> str:
    return " / ".join(_ms(p.figure(key)) for p in passes) or "n/a"




def recorded_drift(run: RunDir) -> list[str]:
    """environment_check.json's differences (none for runs from before the check)."""
    check = environment_check_of(run)
    return [] if check is None else list(check.differences)


# --- the Markdown ----------------------------------------------------------------------


def _descriptions(recipe: Recipe, wl: WorkloadSummary) -> list[str]:
    """Each configuration's description under the table, so the table itself stays narrow."""
    lines = [f"- {name}: {recipe.backend(name).description}" for name in wl.backends
             if recipe.backend(name).description]
    return ["Configurations:", "", *lines, ""] if lines else []


def _table(recipe: Recipe, wl: WorkloadSummary) -> list[str]:
    head = ["Configuration", "Successful measured requests", "Overall mean (ms)", "Mean, per pass (ms)", "P50, per pass (ms)",
            "P95 JevBench rank, per pass (ms)", "P95 nearest rank, per pass (ms)", "Correct / N"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, b in wl.backends.items():
        m = b.measured
        cells = [name, str(b.overall.n), _ms(b.overall.mean_ms), _per_pass(m, "mean_ms"),
                 _per_pass(m, "p50_ms"), _per_pass(m, "p95_jevbench_ms"), _per_pass(m, "p95_nearest_rank_ms"),
                 f"{b.correct} / {b.labelled}" if b.labelled else "n/a (no labels)"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def _latency_notes(wl: WorkloadSummary) -> list[str]:
    out = []
    feas = [f"{n} {_per_pass(b.feasibility, 'mean_ms')} ms" for n, b in wl.backends.items() if b.feasibility]
    if feas:
        out.append("Excluded feasibility pass means: " + "; ".join(feas) + ".")
    pooled = [f"{n} P50 {p50:.3f}, P95 JevBench rank {p95:.3f} ms" for n, b in wl.backends.items()
              if (p50 := b.overall.p50_ms) is not None and (p95 := b.overall.p95_jevbench_ms) is not None]
    if pooled:
        out.append("Pooled over all measured passes (the CDF plot's marks): " + "; ".join(pooled) + ".")
    for name, b in wl.backends.items():  # failed measured requests; decisions that contradict their probability
        if b.overall.errors:
            out.append(f"**{name}: {b.overall.errors} failed measured request(s)**, excluded from latency "
                       f"statistics and counted as not correct.")
        if b.decision_mismatches:
            ids = ", ".join(sorted({m.id for m in b.decision_mismatches}))
            out.append(f"**{name}: {len(b.decision_mismatches)} rows record a decision that differs from "
                       f"p >= {YES_THRESHOLD} of their probability** ({ids}); correctness uses the recomputed "
                       "decision.")
    return out


def _comparison_lines(wl: WorkloadSummary) -> list[str]:
    out = []
    for c in wl.comparisons:
        if c.speedup is None or c.percent_lower is None:  # percent_lower: None for a zero baseline mean
            out.append(f"- {c.candidate} vs {c.baseline}: no comparable measured means.")
            continue
        out.append(
            f"- {c.candidate} vs {c.baseline}: {c.speedup:.{DIGITS.speedup}f}x by mean "
            f"({_ms(c.baseline_mean_ms)} -> {_ms(c.candidate_mean_ms)} ms, "
            f"{_percent_change(c.percent_lower)}); pass mean ranges disjoint: "
            f"{_yes(c.disjoint_ranges)}; every {c.candidate} pass mean below every {c.baseline} "
            f"pass mean: {_yes(c.every_pass_lower)}."
        )
    return out


def _percent_change(percent_lower: float) -> str:
    """"4.78% lower" or "0.63% higher": the sign goes into the word, never "-0.63% lower"."""
    rounded = round(percent_lower, DIGITS.percent)
    if rounded == 0:
        return f"{0:.{DIGITS.percent}f}% difference"
    return f"{abs(rounded):.{DIGITS.percent}f}% {'lower' if rounded > 0 else 'higher'}"


def _agreement_lines(wl: WorkloadSummary, t: RowTable | None = None, workload: str = "") -> list[str]:
    """One line per comparison; with the rows, the input tokens of both backends' first measured passes
    (every row, failed ones included), paired by (id, seq) like the agreement."""
    out = []
    first = {} if t is None else {backend: passes[min(passes)] for (w, backend), passes
                                  in t.by_pass("measured").items() if w == workload}
    for c in wl.comparisons:
        tokens = ""
        if t is not None and (c.baseline not in first or c.candidate not in first):
            tokens = "; input tokens not compared (no measured rows)"
        elif t is not None:
            a_rows, b_rows = first[c.baseline], first[c.candidate]
            match, _ = pair_by_id_and_seq(t.ids.codes[a_rows], t.seq[a_rows], t.ids.codes[b_rows], t.seq[b_rows])
            x, y = a_rows[match >= 0], b_rows[match[match >= 0]]
            diff = token_differences(t.ids.strings(x), t.seq[x].tolist(), t.input_tokens[x], t.has_input_tokens[x],
                                     t.input_tokens[y], t.has_input_tokens[y])
            tokens = f"; {token_phrase(diff, c.candidate, c.baseline)}"
        buckets = "; ".join(f"{k}: {_prob(v)}" for k, v in c.max_probability_delta_by_tokens.items())
        differing = f"; differing: {', '.join(c.differing_ids)}" if c.differing_ids else ""
        missing = c.pair_errors + c.unpaired
        gaps = f"; {missing} requests failed or unpaired" if missing else ""
        out.append(
            f"- {c.baseline} / {c.candidate}: {c.agreement} / {c.n} thresholded decisions agree"
            f"{differing}; max probability difference {_prob(c.max_probability_delta)} "
            f"(input tokens {buckets}){gaps}{tokens}."
        )
    return out


def _stability_lines(wl: WorkloadSummary, passes: str = "feasibility and measured passes") -> list[str]:
    out = []
    for name, b in wl.backends.items():
        if b.probabilities_stable is None:
            why = "fewer than two passes" if b.stability_passes < 2 else "no rows"
            out.append(f"- {name}: {why}; stability not assessed.")
            continue
        what = "exactly unchanged" if b.probabilities_stable else "NOT exactly unchanged"
        extra = f" (changed: {', '.join(b.stability_changed_ids)})" if b.stability_changed_ids else ""
        gaps = b.stability_errors + b.stability_incomplete
        extra += f" ({gaps} failed or missing requests)" if gaps else ""
        out.append(f"- {name}: probabilities {what} across its {b.stability_passes} {passes}{extra}.")
    return out


_LONG_NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d{7,}(?:e[-+]?\d+)?(?![\w.])|(?<![\w.])-?\d\.\d{5,}e[-+]?\d+(?![\w.])")


def rounded_text(text: str) -> str:
    """`6.00337503842141e-06` -> `6.003e-06` in text for people (summary.json keeps every digit)."""
    return _LONG_NUMBER.sub(lambda m: f"{float(m.group()):.4g}", text)


def _gate_lines(gates: list[GateResult]) -> list[str]:
    if not gates:
        return ["No gates were declared."]
    lines = ["| Gate | Kind | Outcome | Detail |", "| --- | --- | --- | --- |"]
    for g in gates:
        detail = rounded_text(g.detail).replace("|", "\\|")  # a pipe would split the table cell
        lines.append(f"| {g.name} | {g.kind} | {g.outcome} | {detail} |")
    return lines


def _imported_lines(imported: ImportRecord) -> list[str]:
    from .imported import cleanup_line, figure_lines

    out = [*_published_study_lines(imported), "## Published figures (imported evidence)", "",
           ("Each figure their summary.json publishes, recomputed from the imported rows: EXACT bit for bit, "
           "WITHIN half a unit of its last printed decimal (at most 15 significant digits), DIFF otherwise."), "",
           "```", *figure_lines(imported.to_json()), "```", ""]
    if imported.absent:
        out += [f"Listed in their manifest but not present, not verified: {', '.join(imported.absent)}.", ""]
    cleanup = cleanup_line(imported.cleanup_quoted)
    if cleanup:
        out += [cleanup, ""]
    if imported.conclusion:
        out += [f"Their published conclusion (quoted, not ours): \"{imported.conclusion}\"", ""]
    return out


def _published_study_lines(imported: ImportRecord) -> list[str]:
    """What the published study says about itself: date, hardware, arms, hypothesis, every gate and its outcome."""
    study = imported.study
    out = ["## Published study (imported, not measured by us)", "",
           f"- Date (published): {study.date or 'not published'}"]
    out += [f"- Hardware (published): {h}" for h in study.hardware] or ["- Hardware: not published"]
    out += [f"- Arm {arm}: {description or 'no description published'}" for arm, description in study.arms.items()]
    for value, label in ((study.hypothesis, "Hypothesis"), (study.independent_variable, "Independent variable")):
        if value:
            out.append(f"- {label} (quoted): \"{value}\"")
    out += [f"- Provenance: {imported.provenance}", ""]
    if not imported.published_gates:
        return [*out, "The published evidence declares no gate or acceptance criterion.", ""]
    out += ["| published gate or criterion | published outcome | criterion |", "| --- | --- | --- |"]
    for g in imported.published_gates:
        criterion = g.criterion.replace("|", "\\|")  # a pipe would split the table cell
        out.append(f"| {g.name} | {_PUBLISHED_OUTCOME.get(g.outcome, '?')} | {criterion} |")
    return out + [""]


_PUBLISHED_OUTCOME = {True: "passed", False: "**FAILED**", None: "not published"}


@dataclass(frozen=True)
class ReportSection:
    """A section of facts after the gates and the GPU state: "## title", its lines; nothing without lines.

    The run's own sections (weights, servers, hardware floor) are these; a later kind of evidence adds its
    section here, through `render_report(sections=...)` and `_run_sections` (kernel-family tables of profiler
    traces, issue 43), while its gates are gate kinds in results/statistics.py and print in the gate table."""

    title: str
    lines: list[str]

    def markdown(self) -> list[str]:
        return [f"## {self.title}", "", *self.lines, ""] if self.lines else []


def render_report(summary: Summary, rows: RowTable | Iterable[Row], recipe: Recipe, *, state: StateRecord | None = None,
                  notes: Iterable[str] = (), run: RunInfo | None = None, imported: ImportRecord | None = None,
                  run_facts: Iterable[str] = (), floor: Iterable[str] = (), drift: Sequence[str] = (),
                  servers: Iterable[str] = (), sections: Sequence[ReportSection] = ()) -> str:
    """Markdown laid out like the published study's first table, plus agreement, determinism and gates.

    `state` is the run's state.json record: unless its status is "complete" the report opens (and
    closes) with an INCOMPLETE RUN banner. None means the summary does not come from a run
    directory (no banner). `notes` are extra warnings printed under the title. `run` names
    the run, when and where it ran (the study date is the recipe's, the run's its own). `imported`
    is an imported run's import.json record: its status "imported" is complete, and the published figures
    are listed next to ours. `run_facts` are lines about the weights and the GPU (`run_facts_of`),
    shown in their own section when present. `floor` is the hardware-floor section (`floor.floor_lines`),
    present when a backend measured the GPU. `drift` are the environment differences a study run
    with --allow-environment-drift recorded (environment_check.json): a banner under the title.
    present when a backend measured the GPU. `servers` is the servers section (`servers.server_lines`:
    launched or reached by URL, readiness, connections, whether TCP connects were timed).
    """
    done = (Status.COMPLETE, Status.IMPORTED) if imported is not None else (Status.COMPLETE,)
    banner = []
    if state is not None and state.status not in done:
        why = f" Error: {printable(state.error)}" if state.error else ""
        banner = [(f"> **INCOMPLETE RUN** - state.json status is {state.status!r}, not 'complete'. The figures below "
                   "cover only the requests that finished; they are not the study's result and must not be cited "
                   f"as such.{why}"), ""]
    out = [f"# Study {summary.study_id}", "", *banner]
    if drift:  # measured with --allow-environment-drift: every recorded difference
        out += [(f"> **ENVIRONMENT DRIFT** - measured with --allow-environment-drift; {len(drift)} difference(s) "
                 "between what the recipe declares and what the backends reported (environment_check.json):"), ">",
                *[f"> - {printable(d)}" for d in drift], ""]
    out += _header_lines(recipe, run, imported, list(notes))
    t = as_table(rows)
    out += _method_lines(t)
    # an imported run has only measured passes: its determinism line must not speak of feasibility passes
    passes_word = "feasibility and measured passes" if t.phase.equals("feasibility").any() else "measured passes"
    for name, wl in summary.workloads.items():
        out += _workload_lines(recipe, name, wl, t, passes_word)
    if imported is not None:
        out += _imported_lines(imported)
    out += load_lines(summary)  # load runs only (results/load_report.py)
    out += ["## Gates", "", *_gate_lines(summary.gates), ""]
    out += energy_lines(summary)
    facts = [ReportSection("Weights and GPU", list(run_facts)), ReportSection("Servers and connections", list(servers)),
             ReportSection("Hardware floor", list(floor)), *sections]
    for section in facts:
        out += section.markdown()  # a run without the data gets no section
    out += [("Plots: latency_vs_tokens.png (measured latency against input tokens), latency_cdf.png "
            "(CDF of measured latency)."), *load_plot_lines(summary), ""]
    if banner:
        out += [banner[0], ""]
    return "\n".join(out)


def _header_lines(recipe: Recipe, run: RunInfo | None, imported: ImportRecord | None, notes: list[str]) -> list[str]:
    """Under the title: the imported note, the purpose, the study date, the run and its hardware, the notes."""
    out = []
    if imported is not None:
        folder = imported.evidence_folder
        where = f"{imported.source}/{folder}" if folder else str(imported.source)
        checked = (f"{imported.provenance}; the sha256 of every imported file is recorded"
                   if imported.provenance != "verified"
                   else f"{imported.files_verified} files verified against their {imported.digests_file}")
        out += [f"> **Imported from {where} ({imported.format} format), not measured by us: {checked}; unsigned.**",
                ""]
    out += [recipe.study.purpose.strip(), "", f"- Study date (recipe): {recipe.study.date.isoformat()}"]
    if run is not None:
        out += [f"- Run: {run.describe()}", f"- Hardware: {run.hardware}"]
    return out + [""] + [f"> **{n}**" for n in notes] + ([""] if notes else [])


def _method_lines(t: RowTable) -> list[str]:
    excluded = int(sum(t.phase.equals(ph).sum() for ph in ("first", "warmup", "feasibility")))
    return [
        ("P50 is the median. P95 JevBench rank is `sorted[int(0.95*N)-1]`; P95 nearest rank is "
        "`sorted[ceil(0.95*N)-1]`. Means are `fsum / N` over successful measured requests; the first "
        f"inference, warm-up and feasibility passes ({excluded} requests) are excluded. Correct / N counts the "
        f"first measured pass, decision yes when p >= {YES_THRESHOLD}. Pass ranges are observed, not confidence intervals."),
        "",
    ]


def _workload_lines(recipe: Recipe, name: str, wl: WorkloadSummary, t: RowTable, passes_word: str) -> list[str]:
    if isinstance(wl.pooled, Pooled):  # its latency is per level (the Load levels section), never one pooled row
        pooled = wl.pooled
        rule = "from each request's scheduled send" if pooled.latency_from == "schedule" else "from the actual send"
        others = (f"; {', '.join(pooled.not_pooled)} (another timing rule) are in the per-level table only"
                  if pooled.not_pooled else "")
        correct = "; ".join(f"{n} {b.correct} / {b.labelled}" if b.labelled else f"{n} n/a (no labels)"
                            for n, b in wl.backends.items())
        out = [f"## Workload {name}", "",
               ("This workload ran at load levels: its latency, throughput and schedule figures are per level, in "
                "the Load levels section below. summary.json's workload figures and the gates pool only levels of "
                f"one timing rule: {', '.join(pooled.levels)} (latency {rule}){others}."), "",
               *_descriptions(recipe, wl), f"Correct / N (first measured pass): {correct}.", ""]
    else:
        out = [f"## Workload {name}", "", *_table(recipe, wl), "", *_descriptions(recipe, wl),
               *_latency_notes(wl), "", "Speed:", "", *_comparison_lines(wl), ""]
    answered = t.workload.equals(name) & t.phase.equals("measured") & t.ok
    if answered.any() and not t.has_probability[answered].any():
        # imported evidence that publishes latencies only: nothing failed, there is simply nothing to compare
        return out + [NO_PROBABILITIES_LINE, ""]
    return out + ["Agreement (first measured pass, paired by case id and position):", "",
                  *_agreement_lines(wl, t, name), "", "Determinism:", "", *_stability_lines(wl, passes_word), ""]


NO_PROBABILITIES_LINE = ("Agreement and determinism: not assessed; the rows carry no probabilities (the published "
                         "evidence records latencies only).")


# --- the run's own facts (for the report header and the plot titles) ------------------------


@dataclass(frozen=True)
class RunInfo:
    run_id: str  # the run's id as the study named it (`recorded_run_id`)
    started: str | None  # "YYYY-MM-DD HH:MM:SS UTC"; None when not recorded
    hardware: str  # the GPU the run used (the run-time override, else the pinned one), or the CPU without a GPU
    when: str = "started"  # what `started` is: the start, or (older runs) the last state update
    imported: bool = False  # evidence imported from another project: its date and hardware are the published ones

    @property
    def date(self) -> str:
        return self.started.split(" ", 1)[0] if self.started else "date unknown"

    def describe(self) -> str:
        return f"{self.run_id}, {self.when} {self.started}" if self.started else f"{self.run_id}, date not recorded"


_RUN_STAMP = re.compile(r"-(\d{8}T\d{6}Z)-[0-9a-f]+$")


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


_SIGNED_RUN_LINE = re.compile(r"^- Run: ([A-Za-z0-9][A-Za-z0-9._-]{0,200}), ", re.MULTILINE)


def recorded_run_id(run: RunDir, study_id: str) -> str:
    """The run's id as the study named it: the directory's own name while it is the study's
    `<study id>-<UTC stamp>-<hex>`; for a signed run kept under another name (results/.../run) the id its
    signed report.md names (the study wrote it there, and verify checks that file's digest); else the
    directory's name. Never the folder a copy happens to sit in when the study recorded better."""
    name = run.path.name
    if name.startswith(f"{study_id}-") and _RUN_STAMP.search(name):
        return name
    signed_report = run.file("report.md")
    if run.file(ENVELOPE_NAME).is_file() and signed_report.is_file():
        found = _SIGNED_RUN_LINE.search(signed_report.read_text(encoding="utf-8", errors="replace")[:20_000])
        if found and found.group(1).startswith(f"{study_id}-"):
            return found.group(1)
    return name


def run_info(run: RunDir, recipe: Recipe) -> RunInfo:
    """When the run started: state.json's started_utc, else the UTC stamp in the run's id; a renamed
    older run falls back to state.json's last update (labelled as such)."""
    state = run.state_record()
    hardware = _hardware(environment_of(run), recipe)
    run_id = recorded_run_id(run, recipe.study.id)
    try:
        if isinstance(state.started_utc, str):
            return RunInfo(run_id, _utc(datetime.fromisoformat(state.started_utc)), hardware)
        stamp = _RUN_STAMP.search(run_id)
        if stamp:
            moment = datetime.strptime(stamp.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
            return RunInfo(run_id, _utc(moment), hardware)
        if isinstance(state.updated_unix, float):
            moment = datetime.fromtimestamp(state.updated_unix, UTC)
            return RunInfo(run_id, _utc(moment), hardware, when="state last updated")
    except (ValueError, OverflowError, OSError):
        pass
    return RunInfo(run_id, None, hardware)


def imported_run_info(run_id: str, imported: ImportRecord) -> RunInfo:
    """An imported run's facts are the published study's: its own date and hardware, never the import's."""
    study = imported.study
    named, uuid = study.hardware_value("hardware_name", "gpu"), study.hardware_value("gpu_uuid")
    hardware = ", ".join(named[:1] + uuid[:1]) or "hardware not published"
    return RunInfo(run_id, str(study.date) if study.date else None, hardware, when="published", imported=True)


def _hardware(env: EnvironmentRecord, recipe: Recipe) -> str:
    """The GPU the run used (the run-time override, else the recipe's pin), or the CPU without a GPU."""
    pin = recipe.controls.gpu if recipe.controls else None
    pinned = env.run_time_uuid or (pin.uuid if pin is not None else None)
    names = env.gpu_names(pinned)
    if names:
        return ", ".join(names)
    if pinned is not None and env.gpu_names(None):
        return f"pinned GPU {pinned} not in environment.json"
    return f"CPU only ({env.cpu_model})" if env.cpu_model else "hardware not recorded"


# --- plots -----------------------------------------------------------------------------


PASS_MARKERS = ("o", "^", "s", "D", "v", "P", "X", "*")
PASS_LINES = ("-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (6, 2, 1, 2)))

Series = int | str  # a measured pass (a run without a load) or a load level (its measured passes together)


def _title(fig, study_id: str, run: RunInfo | None, workloads: Sequence[str], what: str) -> None:
    """Three short lines that keep a plot's context when it is shared on its own."""
    facts = [f"workload {', '.join(workloads) or 'none'}"]
    if run and run.imported:
        what = f"{what}: IMPORTED evidence, not measured by us"
        facts += [run.hardware, f"published {run.date}"]
    elif run:
        facts += [run.hardware, f"run date {run.date}"]
    where = f"study {study_id} · run {run.run_id}" if run else f"study {study_id}"
    fig.suptitle(f"{what}\n{where}\n{' · '.join(facts)}", fontsize=10)


@dataclass(frozen=True)
class _Panels:
    """What both plots draw: measured rows by workload, backend and series, one colour per backend."""

    t: RowTable
    data: dict[str, dict[str, dict[Series, np.ndarray]]]
    workloads: list[str]
    backends: list[str]
    colours: dict[str, str]
    series: list[Series]  # passes in index order, or levels in run order

    @classmethod
    def of(cls, t: RowTable) -> _Panels:
        """A series is a measured pass, or in a load run a level (its measured passes together), so every
        curve is named by its level and no two levels share a line style; all in first-seen order."""
        data: dict[str, dict[str, dict[Series, np.ndarray]]] = {}
        for (workload, backend), passes in t.by_pass("measured", ok_only=True).items():  # first-seen order
            by_series: dict[Series, np.ndarray] = {}
            for index, rows in passes.items():
                level = t.level[int(rows[0])] if len(rows) else None
                key: Series = index if level is None else level
                by_series[key] = np.concatenate([by_series[key], rows]) if key in by_series else rows
            data.setdefault(workload, {})[backend] = by_series
        backends = list(dict.fromkeys(b for wl in data.values() for b in wl))
        keys = list(dict.fromkeys(k for wl in data.values() for b in wl.values() for k in b))
        series = sorted(keys, key=lambda k: (isinstance(k, str), k if isinstance(k, int) else keys.index(k)))
        return cls(t, data, list(data) or [""], backends, {b: f"C{i % 10}" for i, b in enumerate(backends)}, series)

    @property
    def levels(self) -> bool:
        """Whether the series are load levels (pooling them would mix loads and timing rules)."""
        return any(isinstance(k, str) for k in self.series)

    def name(self, key: Series) -> str:
        return f"level {key}" if isinstance(key, str) else f"measured pass {key}"

    def figure(self) -> Any:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(max(7.5, 5.0 * len(self.workloads)), 5.0), dpi=110, layout="constrained")
        FigureCanvasAgg(fig)
        return fig

    def legend(self, ax: Any, kind: str, labels: dict[str, str] | None = None) -> None:
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], color=self.colours[b], lw=2, label=(labels or {}).get(b, b)) for b in self.backends]
        for n, key in enumerate(self.series):
            style: dict[str, Any] = ({"marker": PASS_MARKERS[n % len(PASS_MARKERS)], "ls": "none"} if kind == "scatter"
                                     else {"ls": PASS_LINES[n % len(PASS_LINES)]})
            handles.append(Line2D([], [], color="0.3", label=self.name(key), **style))
        if kind == "cdf" and self.backends and not self.levels:  # each backend's P50 and P95 over its measured passes
            pooled = f"passes {', '.join(map(str, self.series))} pooled" if len(self.series) > 1 else "the measured pass"
            handles += [Line2D([], [], color="0.3", marker="o", mfc="white", ls="none", ms=8, mew=2,
                               label=f"P50 ({pooled})"),
                        Line2D([], [], color="0.3", marker="X", ls="none", ms=9, mew=1,
                               label=f"P95 JevBench rank ({pooled})")]
        if handles:
            ax.legend(handles=handles, fontsize=8.5, loc="lower right" if kind == "cdf" else "upper left")


def _scatter_figure(panels: _Panels, study_id: str, run: RunInfo | None) -> Any:
    t = panels.t
    fig = panels.figure()
    for k, name in enumerate(panels.workloads):
        ax = fig.add_subplot(1, len(panels.workloads), k + 1)
        for b, by_series in panels.data.get(name, {}).items():
            for n, key in enumerate(panels.series):
                rs = by_series.get(key, np.zeros(0, dtype=np.int64))
                rs = rs[t.has_input_tokens[rs]]
                ax.scatter(t.input_tokens[rs], t.latency_ms[rs], s=22, alpha=0.75, color=panels.colours[b],
                           marker=PASS_MARKERS[n % len(PASS_MARKERS)], linewidths=0)
        ax.set(xlabel="input tokens", ylabel="latency (ms)", title=f"workload {name}" if name else "no measured requests")
        if name and not any(len(c.get_offsets()) for c in ax.collections):
            # no point (e.g. imported timings that publish no token counts): no axes, and why
            ax.set_axis_off()
            ax.text(0.5, 0.5, "No plot: no measured row of this workload\ncarries an input token count\n"
                    "(the evidence publishes latencies only).", transform=ax.transAxes, ha="center", va="center")
        else:
            panels.legend(ax, "scatter")
    _title(fig, study_id, run, [w for w in panels.workloads if w], "Measured latency against input tokens")
    return fig


def _cdf_backend(ax: Any, panels: _Panels, b: str, by_series: dict[Series, np.ndarray]) -> str | None:
    """One backend's CDF lines (one per series) and, unless the series are load levels, its pooled P50/P95
    marks; returns its legend label."""
    t, colour = panels.t, panels.colours[b]
    for n, key in enumerate(panels.series):
        lat = np.sort(t.latency_ms[by_series[key]]) if key in by_series else np.zeros(0)
        if len(lat):
            ax.step(lat, np.arange(1, len(lat) + 1) / len(lat), where="post", color=colour,
                    ls=PASS_LINES[n % len(PASS_LINES)], lw=1.6)
    if panels.levels:
        return None
    stats = latency_stats(t.latency_ms[np.concatenate(list(by_series.values()))])
    p50, p95 = stats.p50_ms, stats.p95_jevbench_ms
    if p50 is None or p95 is None:
        return None
    ax.plot([p50], [YES_THRESHOLD], marker="o", mfc="white", ms=8, mew=2, color=colour, ls="none", zorder=5)
    ax.plot([p95], [0.95], marker="X", ms=10, mew=1, mec="white", color=colour, ls="none", zorder=5)
    return f"{b}: P50 {p50:.1f}, P95 {p95:.1f} ms (pooled)"


def _cdf_figure(panels: _Panels, study_id: str, run: RunInfo | None):
    fig = panels.figure()
    for k, name in enumerate(panels.workloads):
        ax = fig.add_subplot(1, len(panels.workloads), k + 1)
        marks: dict[str, str] = {}
        for b, by_series in panels.data.get(name, {}).items():
            label = _cdf_backend(ax, panels, b, by_series)
            if label is not None:
                marks[b] = label
        ax.axhline(YES_THRESHOLD, color="0.6", lw=0.6, ls=":")
        ax.axhline(0.95, color="0.6", lw=0.6, ls=":")
        ax.set(xlabel="latency (ms)", ylabel="fraction of measured requests", ylim=(0, 1.02),
               title=f"workload {name}" if name else "no measured requests")
        panels.legend(ax, "cdf", marks)
    _title(fig, study_id, run, [w for w in panels.workloads if w], "Latency CDF")
    return fig


def plot_figures(rows: RowTable | Iterable[Row], study_id: str = "", run: RunInfo | None = None) -> dict:
    """Both plots as matplotlib Figures (Agg canvas, no pyplot state), by file name.

    One panel per workload; one colour per backend; one marker (scatter) or line style (CDF)
    per measured pass. The CDF marks each backend's P50 and P95 (JevBench rank,
    sorted[int(0.95 N) - 1], the report's headline rule) over all its measured requests."""
    panels = _Panels.of(as_table(rows))
    figs = {PLOT_NAMES[0]: _scatter_figure(panels, study_id, run), PLOT_NAMES[1]: _cdf_figure(panels, study_id, run)}
    for fig in figs.values():
        for ax in fig.axes:
            ax.grid(True, alpha=0.3)
    return figs


def _plot_bytes(rows: RowTable | Iterable[Row], study_id: str = "", run: RunInfo | None = None) -> dict[str, bytes]:
    """Both PNGs as bytes; PNG metadata stripped."""
    out = {}
    for name, fig in plot_figures(rows, study_id, run).items():
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
        out[name] = buf.getvalue()
    return out


def _write_atomic(path: Path, data: bytes) -> None:
    write_bytes_atomic(path, data)  # fsynced; no temporary file survives a failure


def write_plots(rows: RowTable | Iterable[Row], out_dir: Path, study_id: str = "", run: RunInfo | None = None) -> list[Path]:
    """latency_vs_tokens.png and latency_cdf.png of measured, successful rows (one colour per backend)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in _plot_bytes(rows, study_id, run).items():
        _write_atomic(out_dir / name, data)
        paths.append(out_dir / name)
    return paths


# --- a run directory -------------------------------------------------------------------


def run_facts_of(run: RunDir, backends: BackendsRecord, order: Sequence[str] = ()) -> list[str]:
    """Report lines from backends.json (weights fingerprints, threads; an empty record when the run
    has none) and host.json's gpu_override.

    Runs from before these files had them give no lines, so their signed reports render unchanged.
    """
    host = host_of(run)
    override = host.override if host is not None else None
    out = [] if override is None else [
        (f"- GPU override ({override.source}): ran on index {override.run_time.index} `{override.run_time.uuid}`; "
         f"the recipe pins index {override.recipe_gpu.index} `{override.recipe_gpu.uuid}` (recipe unchanged).")]
    rank = {name: k for k, name in enumerate(order)}  # the recipe's order, then any other by name
    for name, facts in sorted(backends.backends.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])):
        if facts.weights_fingerprint is None:
            out.append(f"- {name}: no weights fingerprint reported")
            continue
        merged = facts.merged_weights_fingerprint
        extra = f", merged `{merged[:17]}…`" if merged is not None else ""
        out.append(f"- {name}: weights `{facts.weights_fingerprint[:17]}…` ({facts.weights_fingerprint_scope}{extra}), "
                   f"torch threads {facts.torch_threads}/{facts.torch_interop_threads} (intra/inter-op)")
    return out


def _summary_notes(run: RunDir, summary: Summary) -> list[str]:
    path = run.file("summary.json")
    if not path.exists():
        return ["summary.json is absent; every figure below was computed from rows.jsonl."]
    try:
        same = read_summary(path) == summary
    except UnsupportedFormat:
        raise
    except EvidenceError:  # a summary of another shape: it differs
        same = False
    if not same:
        return [("SUMMARY MISMATCH: summary.json differs from the summary recomputed from rows.jsonl and "
                "recipe.yaml; this report shows the recomputation. Run `invoke verify` on this run.")]
    return []


def _render_run(run: RunDir, as_status: str | None) -> tuple[str, RowTable, Summary, RunInfo]:
    """report.md's text of a run directory, with what its plots need."""
    state = state_of(run)  # a "running" run whose study died is reported incomplete
    recipe = load_recipe(run.file("recipe.yaml"))
    if run.rows_path.exists() or state.status == Status.COMPLETE:
        rows = read_table(run.rows_path)
    else:
        rows = RowTable.from_rows([])  # a run that stopped before its first request
    if as_status is not None:  # the runner renders the report of a run it is about to call complete
        state = state.as_status(as_status)
    summary = summarize(rows, recipe, gpu=read_gpu_events(run.file(GPU_FILE)) if run.file(GPU_FILE).is_file() else None,
                        **trace_inputs(run.path))  # the trace gates' kernel-families.json (results/trace_gates.py)
    imported = import_of(run)
    info = imported_run_info(run.path.name, imported) if imported is not None else run_info(run, recipe)
    backends = backends_of(run)
    text = render_report(summary, rows, recipe, state=state, notes=_summary_notes(run, summary), run=info,
                         imported=imported, run_facts=run_facts_of(run, backends, [b.name for b in recipe.backends]),
                         floor=floor_lines(backends, rows), drift=recorded_drift(run),
                         servers=server_lines(servers_of(run), backends, [b.name for b in recipe.backends]),
                         sections=[ReportSection("Kernel caches", kernel_cache_lines(run.path)),
                                   ReportSection("Kernel families (traces)", kernel_family_lines(run.path))])
    return text, rows, summary, info


def write_report(run_dir: Path, out_dir: Path | None = None, *, as_status: str | None = None,
                 plots: bool = True) -> Path:
    """Read a run directory, write report.md and both plots (into out_dir, default the run), return report.md.

    A signed run (manifest.dsse.json present) is never changed: writing into it is refused
    when a file would differ from the signed one; pass out_dir to write elsewhere.
    """
    run = RunDir.open(Path(run_dir))
    if out_dir is not None and Path(out_dir).resolve() != run.path.resolve():
        guard_output(Path(out_dir), directory=True)  # never into another run (signed or not) or over a file
    text, rows, summary, info = _render_run(run, as_status)
    target = Path(out_dir) if out_dir is not None else run.path
    target.mkdir(parents=True, exist_ok=True)
    files = {"report.md": text.encode("utf-8"), **(_plot_bytes(rows, summary.study_id, info) if plots else {})}
    files.update(load_plot_bytes(summary, info, enabled=plots))  # load runs only
    files.update(kernel_family_plot_bytes(run.path, summary.study_id, enabled=plots))  # traced runs only
    if target.resolve() != run.path.resolve() or not run.file(ENVELOPE_NAME).exists():
        for name, data in files.items():
            _write_atomic(target / name, data)
        return target / "report.md"
    # the signed run itself: nothing is written; what the current code renders differently is said
    differing = [name for name, data in files.items()
                 if not ((target / name).exists() and (target / name).read_bytes() == data)]
    if "report.md" in differing and not run.file("report.md").is_file():
        raise EvidenceError(f"{run.path} is signed and holds no report.md; pass an output directory "
                            "(invoke report --out DIR) instead of changing signed evidence.")
    if differing:
        raise SignedReportDiffers(run.file("report.md"), differing, text)
    return target / "report.md"


class SignedReportDiffers(EvidenceError):
    """A signed run's report files differ from what the report code renders now (a newer section, or an edit
    of the signed files, which verify names): nothing is written. `text` is the report rendered now from the
    run's data, `names` the files that differ."""

    def __init__(self, report: Path, names: list[str], text: str) -> None:
        super().__init__(f"{report.parent} is signed and its {', '.join(names)} "
                         f"{'differs' if len(names) == 1 else 'differ'} from what the report code renders now "
                         "(shown above); the signed files are left as they are (invoke verify checks "
                         "them; invoke report --out DIR writes the current rendering).")
        self.report, self.names, self.text = report, names, text
