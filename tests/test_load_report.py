"""results/load_report.py: the report's load-level table, its warnings, and the latency-versus-load plot."""

from __future__ import annotations

from test_load_statistics import PLAIN, RECIPE, run_rows

from openjev_repro.evidence.recipe import parse_recipe
from openjev_repro.results.load_report import LOAD_PLOT, load_lines, load_plot_bytes, load_plot_figure
from openjev_repro.results.report import RunInfo, render_report
from openjev_repro.results.statistics import summarize


def _load_run():
    rows = run_rows("a") + run_rows("b", t0=10**12)
    recipe = parse_recipe(RECIPE)
    return summarize(rows, recipe), rows, recipe


def test_the_report_has_one_row_per_backend_and_level_with_its_figures():
    summary, rows, recipe = _load_run()
    text = render_report(summary, rows, recipe)
    section = text[text.index("## Load levels"):text.index("## Gates")]
    table = [line for line in section.splitlines() if line.startswith(("| a ", "| b "))]
    assert [line.split(" | ")[1] for line in table] == ["closed-c1", "closed-c2", "open-r10"] * 2
    c1 = table[0].split(" | ")
    assert c1[2:10] == ["concurrency 1 (closed loop)", "4 / 4", "22.500", "20.000", "20.000", "40.000", "40.000",
                        f"{4 / 0.09:.2f}"]
    assert table[2].split(" | ")[2] == "10 requests/s, fixed arrivals (open loop); schedule drew 10.00/s"
    assert table[2].split(" | ")[-2:] == ["1 of 4 / 30.000", "2.000 / 2.500 |"]
    assert "latency bound of 25 ms" in section
    assert "- **a at open-r10: the client fell behind its schedule**: 1 of 4 requests" in section
    assert "- **a at closed-c2: 1 of 4 measured requests failed**" in section
    assert f"Load plot: {LOAD_PLOT}" in text


def test_a_run_without_a_load_gets_no_section_and_no_plot():
    rows = [r for r in run_rows() if r.level == "closed-c1"]
    summary = summarize(rows, parse_recipe(PLAIN))
    assert load_lines(summary) == [] and load_plot_bytes(summary) == {} and load_plot_figure(summary) is None
    text = render_report(summary, rows, parse_recipe(PLAIN))
    assert "Load levels" not in text and LOAD_PLOT not in text


def test_the_plot_is_a_png_with_one_column_per_loop_mode_and_says_when_imported():
    summary, _, _ = _load_run()
    png = load_plot_bytes(summary)[LOAD_PLOT]
    assert png.startswith(b"\x89PNG") and b"Software" not in png
    fig = load_plot_figure(summary, RunInfo("run-1", "2026-12-02 04:00:00 UTC", "CPU only (x)"))
    assert [ax.get_title() for ax in fig.axes[:2]] == ["workload mixed, closed loop", "workload mixed, open loop"]
    assert len(fig.axes) == 4  # latency on top, throughput below
    title = fig.get_suptitle()
    assert "run run-1" in title and "run date 2026-12-02" in title and "IMPORTED" not in title
    imported = RunInfo("x", "2026-10-06", "H200", when="published", imported=True)
    assert "IMPORTED evidence, not measured by us" in load_plot_figure(summary, imported).get_suptitle()
    assert load_plot_bytes(summary, enabled=False) == {}


def test_the_servers_section_of_a_load_run_names_its_connections():
    from openjev_repro.evidence.records import BackendsRecord, ServersRecord
    from openjev_repro.results.servers import server_lines

    conn = {"connections_opened": 16, "closed_by_server": 0, "reconnected_requests": 0, "requests": 292,
            "http_versions": ["1.1"]}
    entry = {"connections": conn, "launched": True, "owned": True, "url": None, "readiness_kind": "status-ready",
             "health": "/health", "endpoint": "/v1/systemone", "model": None}
    lines = server_lines(ServersRecord.from_json({"format_version": 1, "backends": {"one": entry}}), BackendsRecord(),
                         ["one"])
    assert "16 connections for 292 requests, each kept open (HTTP/1.1)" in lines[0]
    assert "over one persistent connection" not in lines[-1]
    assert lines[-1].endswith("No server closed a connection: every request went out on a connection already open "
                              "(load levels open theirs before their first pass).")


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_every_curve_names_its_level_and_the_open_panel_shows_the_rate_the_schedule_drew():
    """Issue 41 item 8: the CDF and scatter of a load run have one curve per (backend, level), named by level
    (not "measured pass 1..8" in four line styles), with no pooled marks over levels; the load plot's ticks
    name each level, and its open panel shows the drawn rate beside the declared one."""
    from openjev_repro.results.report import plot_figures

    summary, rows, _ = _load_run()
    figures = plot_figures(rows, "load-synthetic")
    for fig in figures.values():
        labels = _legend(fig.axes[0])
        assert [label for label in labels if label.startswith(("level", "measured"))] == [
            "level closed-c1", "level closed-c2", "level open-r10"]
        assert not any("pooled" in label for label in labels)
    styles = {line.get_linestyle() for line in figures["latency_cdf.png"].axes[0].get_lines() if len(line.get_xdata()) > 1}
    assert len(styles) == 3
    load = load_plot_figure(summary)
    ticks = [[t.get_text() for t in ax.get_xticklabels()] for ax in load.axes]
    assert ticks[0] == ["1\nclosed-c1", "2\nclosed-c2"] and ticks[1] == ["10\nopen-r10"]
    open_bottom = _legend(load.axes[3])
    assert "a rate the schedule drew" in open_bottom and "offered rate (declared)" in open_bottom
