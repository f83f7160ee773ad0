"""results/report.py and `invoke report`: figures recomputed from rows, run directories written by hand."""

from __future__ import annotations

import hashlib
import math
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from invoking import invoke
from test_results import RECIPE, recipe, study_rows

from openjev_repro.errors import EvidenceError
from openjev_repro.evidence.files import write_json_atomic
from openjev_repro.evidence.records import StateRecord
from openjev_repro.evidence.rows import RowWriter
from openjev_repro.evidence.rundir import ENVELOPE_NAME, RunDir
from openjev_repro.results.report import PLOT_NAMES, RunInfo, plot_figures, render_report, write_plots, write_report
from openjev_repro.results.statistics import median, p95_jevbench, summarize

REPO = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_run(tmp_path: Path, status: str = "complete", summary: bool = True, error: str | None = None) -> Path:
    """A run directory as study/rundir.py lays it out, written by hand."""
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.write_state({"status": status, "attempted": [], "finished": [], "error": error})
    run.file("recipe.yaml").write_text(RECIPE, encoding="utf-8")
    with RowWriter(run.rows_path) as writer:
        for row in study_rows():
            writer.write(row)
    if summary:
        write_json_atomic(run.file("summary.json"), summarize(study_rows(), recipe()).to_json())
    return run.path


@pytest.fixture(scope="module")
def rendered():
    rows, rec = study_rows(), recipe()
    return render_report(summarize(rows, rec), rows, rec), rows


# --- every printed figure recomputed from the rows, independently of results/statistics.py


def independent(rows, workload, backend):
    """Per-pass latencies and first-pass correctness computed with the statistics module."""
    passes = {}
    for r in rows:
        if (r.workload, r.backend, r.phase) == (workload, backend, "measured") and r.error is None:
            passes.setdefault(r.pass_index, []).append((r.end_ns - r.start_ns) / 1e6)
    first = [r for r in rows if (r.workload, r.backend, r.phase, r.pass_index) == (workload, backend, "measured", 1)]
    correct = sum(1 for r in first if r.probability is not None and ("yes" if r.probability >= 0.5 else "no") == r.label)
    return [passes[k] for k in sorted(passes)], correct, len(first)


def close(printed: str, value: float, digits: int) -> bool:
    return abs(float(printed) - value) <= 0.5 * 10 ** -digits + 1e-12


def table_rows(text: str, workload: str) -> dict[str, list[str]]:
    section = text.split(f"## Workload {workload}\n", 1)[1].split("\n## ", 1)[0]
    lines = [row for row in section.splitlines() if row.startswith("| ") and not row.startswith(("| Configuration", "| ---"))]
    return {row.split(" | ")[0][2:].split(" (")[0]: [c.strip() for c in row.strip("| ").split(" | ")] for row in lines}


def test_every_table_figure_recomputes_from_rows(rendered):
    text, rows = rendered
    checked = 0
    for workload in ("mixed", "fixed"):
        table = table_rows(text, workload)
        assert set(table) == {"hf", "native", "fast"}
        for backend, cells in table.items():
            passes, correct, n = independent(rows, workload, backend)
            everything = [v for p in passes for v in p]
            assert int(cells[1]) == len(everything)
            assert close(cells[2], statistics.fmean(everything), 3)
            per_pass = {
                3: [statistics.fmean(p) for p in passes],
                4: [statistics.median(p) for p in passes],
                5: [sorted(p)[int(0.95 * len(p)) - 1] for p in passes],
                6: [sorted(p)[math.ceil(0.95 * len(p)) - 1] for p in passes],
            }
            for column, expected in per_pass.items():
                printed = cells[column].split(" / ")
                assert len(printed) == len(expected)
                for p, e in zip(printed, expected, strict=True):
                    assert close(p, e, 3), (workload, backend, column, p, e)
                    checked += 1
            assert cells[7] == f"{correct} / {n}"
    assert checked == 4 * (6 + 3)  # 4 columns; mixed: 2 passes x 3 backends; fixed: 1 pass x 3 backends


def test_speed_and_agreement_lines_recompute(rendered):
    text, rows = rendered
    section = text.split("## Workload mixed\n", 1)[1].split("\n## ", 1)[0]
    speed = re.search(r"- native vs hf: ([\d.]+)x by mean \(([\d.]+) -> ([\d.]+) ms, ([\d.]+)% lower\)", section)
    hf = [v for p in independent(rows, "mixed", "hf")[0] for v in p]
    native = [v for p in independent(rows, "mixed", "native")[0] for v in p]
    b, c = statistics.fmean(hf), statistics.fmean(native)
    assert close(speed.group(1), b / c, 2) and close(speed.group(2), b, 3) and close(speed.group(3), c, 3)
    assert close(speed.group(4), (b - c) / b * 100, 2)
    assert "pass mean ranges disjoint: yes" in speed.string[speed.end():].split("\n")[0]
    agree = re.search(r"- hf / native: (\d+) / (\d+) thresholded decisions agree; differing: (\S+); "
                      r"max probability difference ([\d.]+) \(input tokens <500: ([\d.]+); 500-2000: ([\d.]+); "
                      r">2000: ([\d.]+)\)", section)
    assert agree.groups()[:3] == ("3", "4", "c3")
    assert close(agree.group(4), 0.15, 6) and close(agree.group(5), 0.01, 6) and close(agree.group(7), 0.15, 6)
    assert "- native: probabilities NOT exactly unchanged" in section and "(changed: c2)" in section
    assert "- hf: probabilities exactly unchanged across its 3" in section


def test_report_states_rules_gates_and_failures(rendered):
    text, _ = rendered
    assert "sorted[int(0.95*N)-1]" in text and "sorted[ceil(0.95*N)-1]" in text
    assert "| speed-ok | mean_reduction | PASSED |" in text
    assert "| decisions-bad | decisions_unchanged | FAILED |" in text
    assert "| traces | external | not evaluated |" in text
    assert "**fast: 1 failed measured request(s)**" in text
    assert "INCOMPLETE" not in text
    assert "Raw HF" in text  # backend description from the recipe


def test_incomplete_state_gets_a_banner_at_top_and_bottom():
    rows, rec = study_rows(), recipe()
    text = render_report(summarize(rows, rec), rows, rec, state=StateRecord("running"))
    lines = [row for row in text.splitlines() if row.strip()]
    assert lines[1].startswith("> **INCOMPLETE RUN**") and lines[-1].startswith("> **INCOMPLETE RUN**")


# --- plots -----------------------------------------------------------------------------


def test_write_plots_writes_two_pngs(tmp_path):
    paths = write_plots(study_rows(), tmp_path / "plots")
    assert [p.name for p in paths] == list(PLOT_NAMES)
    first = [p.read_bytes() for p in paths]
    assert all(b.startswith(PNG_MAGIC) and len(b) > 5000 for b in first)
    assert not [p.name for p, b in zip(paths, first, strict=True) if b"Software" in b or b"matplotlib" in b]  # no version stamp
    # Required (with one matplotlib version): `invoke report` on a signed run rewrites nothing, so it
    # succeeds only when the plots it renders now equal the signed ones byte for byte, also in a new
    # process (another hash seed) as a later `invoke report` is.
    digests = [hashlib.sha256(b).hexdigest() for b in first]
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in write_plots(study_rows(), tmp_path / "plots")] == digests
    code = ("import sys; from pathlib import Path; from openjev_repro.results.report import write_plots; "
            "from test_results import study_rows; write_plots(study_rows(), Path(sys.argv[1]))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "other")], cwd=Path(__file__).parent, check=True,
                   env={**os.environ, "PYTHONHASHSEED": "12345"}, timeout=120)
    assert [hashlib.sha256((tmp_path / "other" / p.name).read_bytes()).hexdigest() for p in paths] == digests
    empty = write_plots([], tmp_path / "empty")
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in empty)


def test_plots_carry_their_context_passes_and_percentiles():
    rows = study_rows()
    run = RunInfo(run_id="synthetic-20261201T000000Z-abc123", started="2026-12-01 00:00:00 UTC", hardware="NVIDIA H200")
    figs = plot_figures(rows, "synthetic", run)
    measured = [r for r in rows if r.phase == "measured" and r.ok]
    workloads = list(dict.fromkeys(r.workload for r in measured))
    for name, fig in figs.items():
        title = fig._suptitle.get_text()
        for fact in ("study synthetic", f"run {run.run_id}", "NVIDIA H200", "2026-12-01", ", ".join(workloads)):
            assert fact in title, (name, fact, title)
        assert [ax.get_title() for ax in fig.axes] == [f"workload {w}" for w in workloads]
        width, height = fig.get_size_inches() * fig.dpi
        assert 800 <= width <= 1700 and height >= 500  # legible at README width
    scatter = figs[PLOT_NAMES[0]].axes[0]
    passes = {r.pass_index for r in measured}
    paths = {tuple(map(tuple, c.get_paths()[0].vertices.round(3))) for c in scatter.collections}
    assert len(paths) == len(passes) >= 2  # one marker shape per measured pass
    cdf = next(ax for ax in figs[PLOT_NAMES[1]].axes if ax.get_title() == f"workload {workloads[0]}")
    marks = {(round(float(curve.get_xdata()[0]), 9), float(curve.get_ydata()[0])) for curve in cdf.lines if len(curve.get_xdata()) == 1}
    for backend in {r.backend for r in measured if r.workload == workloads[0]}:
        lat = [r.latency_ms for r in measured if r.workload == workloads[0] and r.backend == backend]
        assert (round(median(lat), 9), 0.5) in marks and (round(p95_jevbench(lat), 9), 0.95) in marks
    styles = {curve.get_linestyle() for curve in cdf.lines if len(curve.get_xdata()) > 1}
    assert len(styles) >= 2  # one line style per measured pass


def test_run_info_dates_the_run_itself(tmp_path):
    from openjev_repro.results.report import run_info

    created = RunDir.create(tmp_path / "runs", "synthetic")
    created.file("recipe.yaml").write_text(RECIPE, encoding="utf-8")
    info = run_info(created, recipe())
    started = created.state_record().to_json()["started_utc"]
    assert info.when == "started" and info.started.startswith(started[:10]) and info.started.endswith(" UTC")
    assert info.describe() == f"{created.path.name}, started {info.started}"
    assert info.hardware == "hardware not recorded"


def test_run_info_names_the_gpu_the_run_used(tmp_path):
    """The run-time GPU override (issue 11) decides which device is the run's hardware."""
    from openjev_repro.evidence.recipe import parse_recipe
    from openjev_repro.results.report import run_info

    pinned = "GPU-00000000-0000-0000-0000-000000000001"
    used = "GPU-00000000-0000-0000-0000-000000000002"
    text = RECIPE + f"controls:\n  gpu:\n    uuid: {pinned}\n    index: 0\n"
    created = RunDir.create(tmp_path / "runs", "synthetic")
    created.file("recipe.yaml").write_text(text, encoding="utf-8")
    parsed = parse_recipe(text, source="test")
    devices = [{"uuid": used, "name": "NVIDIA H200"}, {"uuid": "GPU-other", "name": "NVIDIA A100"}]
    env = {"format_version": 2, "gpus": {"devices": devices}}
    write_json_atomic(created.file("environment.json"), env)
    assert run_info(created, parsed).hardware == f"pinned GPU {pinned} not in environment.json"
    env["gpu_override"] = {"recipe": {"uuid": pinned, "index": 0}, "run_time": {"uuid": used, "index": None},
                           "source": "cli"}
    write_json_atomic(created.file("environment.json"), env)
    assert run_info(created, parsed).hardware == "NVIDIA H200"


def test_percent_change_reads_naturally():
    from openjev_repro.results.report import _percent_change

    assert _percent_change(4.781) == "4.78% lower"
    assert _percent_change(-0.634) == "0.63% higher"
    assert _percent_change(-0.001) == "0.00% difference"


# --- run directories -------------------------------------------------------------------


def test_write_report_on_a_complete_run(tmp_path):
    run = make_run(tmp_path)
    path = write_report(run)
    assert path == run / "report.md"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# Study synthetic") and "INCOMPLETE" not in text and "MISMATCH" not in text
    assert "- Study date (recipe): " in text and f"- Run: {run.name}, state last updated 20" in text
    assert all((run / n).read_bytes().startswith(PNG_MAGIC) for n in PLOT_NAMES)


def test_missing_or_wrong_summary_is_said(tmp_path):
    run = make_run(tmp_path, summary=False)
    assert "summary.json is absent" in write_report(run).read_text(encoding="utf-8")
    data = summarize(study_rows(), recipe()).to_json()
    data["workloads"]["mixed"]["backends"]["hf"]["overall"]["mean_ms"] = 1.0
    write_json_atomic(run / "summary.json", data)
    assert "SUMMARY MISMATCH" in write_report(run).read_text(encoding="utf-8")


def test_incomplete_run_is_never_reported_as_complete(tmp_path):
    run = make_run(tmp_path, status="incomplete", summary=False, error="backend fast crashed")
    text = write_report(run).read_text(encoding="utf-8")
    assert text.splitlines()[2].startswith("> **INCOMPLETE RUN**") and "backend fast crashed" in text


def test_incomplete_run_without_rows_still_reports(tmp_path):
    run = make_run(tmp_path, status="running", summary=False)
    (run / "rows.jsonl").unlink()
    text = write_report(run).read_text(encoding="utf-8")
    assert "INCOMPLETE RUN" in text and "| hf | 0 | n/a |" in text and "- hf: Raw HF" in text


@pytest.mark.slow  # renders a whole run and its plots twice: about 3 s of CPU
def test_signed_run_is_not_changed(tmp_path):
    run = make_run(tmp_path)
    write_report(run)
    (run / ENVELOPE_NAME).write_text("{}", encoding="utf-8")
    write_report(run)  # identical files: allowed, nothing written
    (run / "report.md").write_text("edited\n", encoding="utf-8")
    with pytest.raises(EvidenceError, match="is signed"):
        write_report(run)
    assert (run / "report.md").read_text(encoding="utf-8") == "edited\n"
    other = write_report(run, tmp_path / "elsewhere")
    assert other.parent == tmp_path / "elsewhere" and (other.parent / PLOT_NAMES[1]).exists()


def test_not_a_run_dir_is_an_evidence_error(tmp_path):
    with pytest.raises(EvidenceError, match="not a run directory"):
        write_report(tmp_path)


# --- the task, as a user runs it -------------------------------------------------------


def test_task_prints_report_and_plot_paths(tmp_path):
    run = make_run(tmp_path)
    done = invoke("report", "--run", str(run))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# Study synthetic")
    assert f"report: {run / 'report.md'}" in done.stdout
    assert all(f"plot: {run / n}" in done.stdout for n in PLOT_NAMES)


def test_task_on_incomplete_run_is_loud_and_fails(tmp_path):
    run = make_run(tmp_path, status="incomplete")
    done = invoke("report", "--run", str(run))
    assert done.returncode == 1
    assert "> **INCOMPLETE RUN**" in done.stdout.splitlines()[2]
    assert "INCOMPLETE RUN" in done.stderr


def test_task_on_missing_dir_prints_one_line(tmp_path):
    done = invoke("report", "--run", str(tmp_path / "nope"))
    assert done.returncode == 1 and "not a run directory" in done.stderr and "Traceback" not in done.stderr


def test_rows_without_token_counts_draw_no_scatter_and_say_why():
    """Issue 41 item 11: imported timings publish no token counts; the scatter draws no empty axes and no
    legend of absent points, and says why."""
    import dataclasses

    rows = [dataclasses.replace(r, input_tokens=None) for r in study_rows()]
    ax = plot_figures(rows, "synthetic")[PLOT_NAMES[0]].axes[0]
    assert not ax.axison and ax.get_legend() is None
    assert [t.get_text() for t in ax.texts] == [
        "No plot: no measured row of this workload\ncarries an input token count\n(the evidence publishes latencies only)."]
    with_tokens = plot_figures(study_rows(), "synthetic")[PLOT_NAMES[0]].axes[0]
    assert with_tokens.axison and not with_tokens.texts


def test_a_further_section_prints_after_the_runs_own_facts_and_an_empty_one_not_at_all():
    """The place issue 43's kernel-family tables take: after the hardware floor, before the plots."""
    from openjev_repro.results.report import ReportSection

    rows, rec = study_rows(), recipe()
    text = render_report(summarize(rows, rec), rows, rec, floor=["floor line"],
                         sections=[ReportSection("Kernel families", ["| family | ms |"]), ReportSection("Empty", [])])
    assert text.index("## Hardware floor") < text.index("## Kernel families\n\n| family | ms |\n") < text.index("Plots:")
    assert "## Empty" not in text
