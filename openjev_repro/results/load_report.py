"""The report's load-level section and its latency-versus-offered-load plot (load runs only).

Both read summary.json's `load` section (results/load.py) and nothing else, so every figure
printed or drawn is one `verify` recomputes from the rows. A summary without that section (every
run whose recipe declares no load) gets no lines and no plot: its report is byte for byte what
it was before load levels existed.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from msgspec import UnsetType

from ..evidence.summary import LevelSpec, LevelStats, LoadSummary, LoadWorkload, Summary
from .load import LATE_AFTER_MS

__all__ = ["LOAD_PLOT", "load_lines", "load_plot_bytes", "load_plot_figure", "load_plot_lines"]

LOAD_PLOT = "latency_vs_load.png"
_MS, _RATE = 3, 2  # printed digits: milliseconds, requests per second


class _Run(Protocol):
    """What the plot title reads of report.RunInfo (not imported: report imports this module)."""

    @property
    def run_id(self) -> str: ...

    @property
    def hardware(self) -> str: ...

    @property
    def imported(self) -> bool: ...

    @property
    def date(self) -> str: ...


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.{_MS}f}"


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.{_RATE}f}"


# --- the Markdown ----------------------------------------------------------------------


_HEAD = ["Configuration", "Level", "Offered load", "Successful / sent", "Mean (ms)", "P50 (ms)",
         "P95 JevBench rank (ms)", "P95 nearest rank (ms)", "P99 (ms)", "Throughput (decisions/s)",
         "Goodput (decisions/s)", "Late sends / max lag (ms)", "Server queue mean / P95 (ms)"]


def _adherence_cell(s: LevelStats) -> str:
    a = s.schedule
    if a is None:
        return "n/a (closed loop)"
    return f"{a.late_sends} of {a.scheduled} / {_ms(a.max_lag_ms)}"


def _queue_cell(s: LevelStats) -> str:
    q = s.server_queue
    return "not reported" if q is None else f"{_ms(q.mean_ms)} / {_ms(q.p95_jevbench_ms)}"


def _offered_cell(spec: LevelSpec, s: LevelStats) -> str:
    """The declared load; in open loop also the rate its seeded schedule drew (throughput follows that one)."""
    drew = s.drawn_rate()
    return spec.offered() + ("" if drew is None else f"; schedule drew {_rate(drew)}/s")


def _row(backend: str, spec: LevelSpec, s: LevelStats) -> str:
    cells = [backend, spec.level, _offered_cell(spec, s), f"{s.n} / {s.requests}", _ms(s.mean_ms),
             _ms(s.p50_ms), _ms(s.p95_jevbench_ms), _ms(s.p95_nearest_rank_ms), _ms(s.p99_ms),
             _rate(s.throughput_per_s), _rate(s.goodput_per_s), _adherence_cell(s), _queue_cell(s)]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _warnings(backend: str, s: LevelStats) -> list[str]:
    """What a reader must not miss: failed requests, and a schedule the client did not keep."""
    out = []
    if s.errors:
        out.append(f"- **{backend} at {s.level}: {s.errors} of {s.requests} measured requests failed** "
                   "(rejected or unanswered); they count in no latency, throughput or goodput.")
    a = s.schedule
    if a is not None and a.late_sends:
        out.append(f"- **{backend} at {s.level}: the client fell behind its schedule**: {a.late_sends} of "
                   f"{a.scheduled} requests were sent more than {LATE_AFTER_MS:g} ms late (max lag "
                   f"{_ms(a.max_lag_ms)} ms); their latency still counts from the scheduled time.")
    return out


def _workload_lines(name: str, wl: LoadWorkload) -> list[str]:
    bound = wl.latency_bound_ms
    goodput = (f"Goodput counts successful requests within the latency bound of {bound:g} ms." if bound is not None
               else "The recipe declares no latency bound, so no goodput is computed.")
    out = [f"### Load levels of workload {name}", "",
           ("Each level ran its own excluded feasibility pass(es) and measured passes; figures cover the measured "
            "passes. Open-loop latency runs from each request's scheduled send time (a stall counts against every "
            "request it delayed: no coordinated omission); closed-loop latency from the actual send. Throughput is "
            f"successful requests per second of the measured passes' durations; the offered load column gives, in "
            f"open loop, the rate declared and the rate the seeded schedule drew. {goodput}"), "",
           "| " + " | ".join(_HEAD) + " |", "|" + " --- |" * len(_HEAD)]
    warnings: list[str] = []
    for backend, spec, s in wl.rows():
        out.append(_row(backend, spec, s))
        warnings += _warnings(backend, s)
    return out + [""] + ([*warnings, ""] if warnings else [])


def load_lines(summary: Summary) -> list[str]:
    """The report's "Load levels" section; [] for a summary without one (a run without a load)."""
    if isinstance(summary.load, UnsetType):
        return []
    out = ["## Load levels", ""]
    for name, wl in summary.load.workloads.items():
        out += _workload_lines(name, wl)
    return out


def load_plot_lines(summary: Summary) -> list[str]:
    """The plot's line under the report's list of plots; [] without a load section."""
    if isinstance(summary.load, UnsetType):
        return []
    return [f"Load plot: {LOAD_PLOT} (P50, P95 and P99 latency and throughput against offered load, per level)."]


# --- the plot --------------------------------------------------------------------------


_MODES = (("closed", "concurrency (closed loop)"), ("open", "offered rate (requests/s, open loop)"))
_Stat = Literal["p50_ms", "p95_jevbench_ms", "p99_ms", "throughput_per_s", "goodput_per_s"]
_CURVES: tuple[tuple[_Stat, str, str, str], ...] = (
    ("p50_ms", "P50", "-", "o"), ("p95_jevbench_ms", "P95 JevBench rank", "--", "X"), ("p99_ms", "P99", ":", "s"))


def _panels(load: LoadSummary) -> list[tuple[str, str, str]]:
    """(workload, mode, x label) of every panel: one per workload and loop mode it declares."""
    return [(name, mode, label) for name, wl in load.workloads.items() for mode, label in _MODES
            if any(spec.mode == mode for spec in wl.levels)]


def _x(spec: LevelSpec) -> float:
    return float((spec.concurrency if spec.mode == "closed" else spec.rate_per_s) or 0)


def _points(wl: LoadWorkload, backend: str, mode: str) -> list[tuple[float, LevelStats]]:
    return [(_x(spec), s) for spec, s in zip(wl.levels, wl.backends[backend], strict=True) if spec.mode == mode]


def _values(points: list[tuple[float, LevelStats]], stat: _Stat) -> list[float]:
    """One figure of every point, NaN where absent (matplotlib leaves a gap)."""
    found: list[float | None] = [getattr(s, stat) for _, s in points]
    return [float("nan") if v is None else float(v) for v in found]


def _draw(axes: Sequence[Any], wl: LoadWorkload, mode: str, colours: dict[str, str]) -> None:
    """One panel pair: latency curves on top, throughput (and goodput) below, one colour per backend."""
    top, bottom = axes
    bound = wl.latency_bound_ms
    for backend in wl.backends:
        points = _points(wl, backend, mode)
        xs, colour = [x for x, _ in points], colours[backend]
        for stat, label, style, marker in _CURVES:
            top.plot(xs, _values(points, stat), ls=style, marker=marker, color=colour, label=f"{backend} {label}")
        bottom.plot(xs, _values(points, "throughput_per_s"), marker="o", color=colour, label=f"{backend} throughput")
        if bound is not None:
            bottom.plot(xs, _values(points, "goodput_per_s"), ls="--", marker="^", color=colour,
                        label=f"{backend} goodput (<= {bound:g} ms)")
        if mode == "open":  # what the seeded schedule offered: a short Poisson pass draws its own rate
            drawn = [float("nan") if (rate := s.drawn_rate()) is None else rate for _, s in points]
            bottom.plot(xs, drawn, ls="none", marker="d", ms=8, mfc="white", color=colour,
                        label=f"{backend} rate the schedule drew")
    _references(axes, wl, mode)
    _level_ticks(axes, wl, mode)


def _level_ticks(axes: Sequence[Any], wl: LoadWorkload, mode: str) -> None:
    """Every point's x tick names its level: "4\nclosed-c4", so no curve is read without its level."""
    specs = [spec for spec in wl.levels if spec.mode == mode]
    for ax in axes:
        ax.set_xticks([_x(spec) for spec in specs], labels=[f"{_x(spec):g}\n{spec.level}" for spec in specs],
                      fontsize=8)


def _references(axes: Sequence[Any], wl: LoadWorkload, mode: str) -> None:
    """The latency bound (top) and, in open loop, the offered rate: what a server that keeps up delivers (bottom)."""
    top, bottom = axes
    bound = wl.latency_bound_ms
    if mode == "open":
        rates = sorted({_x(spec) for spec in wl.levels if spec.mode == "open"})
        bottom.plot(rates, rates, color="0.5", lw=0.8, ls="-.", marker="_", ms=24, mew=1.5, label="offered rate (declared)")
    if bound is not None:
        top.axhline(bound, color="0.5", lw=0.8, ls="-.", label=f"latency bound {bound:g} ms")


def _title(study_id: str, run: _Run | None, workloads: Sequence[str]) -> str:
    what = "Latency and throughput against offered load (measured passes of each level)"
    facts = [f"workload {', '.join(workloads)}"]
    if run is not None and run.imported:
        what += ": IMPORTED evidence, not measured by us"
        facts += [run.hardware, f"published {run.date}"]
    elif run is not None:
        facts += [run.hardware, f"run date {run.date}"]
    where = f"study {study_id} · run {run.run_id}" if run is not None else f"study {study_id}"
    return f"{what}\n{where}\n{' · '.join(facts)}"


def load_plot_figure(summary: Summary, run: _Run | None = None) -> Any:
    """The plot as a matplotlib Figure (Agg canvas, no pyplot state); None without a load section.

    One column per (workload, loop mode): the closed ladder against concurrency, the open levels
    against offered rate. Top: P50, P95 (JevBench rank) and P99 latency, open loop from the
    schedule; bottom: throughput and, with a latency bound, goodput. One colour per backend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    load = summary.load
    if isinstance(load, UnsetType):
        return None
    panels = _panels(load)
    backends = list(dict.fromkeys(b for wl in load.workloads.values() for b in wl.backends))
    colours = {b: f"C{i % 10}" for i, b in enumerate(backends)}
    fig = Figure(figsize=(max(7.5, 5.5 * len(panels)), 8.0), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.subplots(2, max(1, len(panels)), squeeze=False)
    for k, (name, mode, label) in enumerate(panels):
        top, bottom = grid[0][k], grid[1][k]
        _draw((top, bottom), load.workloads[name], mode, colours)
        top.set(ylabel="latency (ms)", title=f"workload {name}, {mode} loop", xlabel=label)
        bottom.set(ylabel="successful decisions per second", xlabel=label)
        for ax in (top, bottom):
            ax.set_ylim(0, ax.get_ylim()[1] * 1.08)  # from zero: a small difference is not drawn as a large one
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8, loc="best")
    fig.suptitle(_title(summary.study_id, run, list(load.workloads)), fontsize=10)
    return fig


def load_plot_bytes(summary: Summary, run: _Run | None = None, *, enabled: bool = True) -> dict[str, bytes]:
    """{LOAD_PLOT: PNG bytes} (metadata stripped); {} without a load section or when not `enabled`."""
    fig = load_plot_figure(summary, run) if enabled else None
    if fig is None:
        return {}
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return {LOAD_PLOT: buf.getvalue()}
