"""Every committed run's report re-renders byte for byte: a change of the report code changes no word.

`write_report(run, out)` is what `invoke report RUN --out DIR` calls; it renders into a fresh
directory outside the run (the committed run is only read). The signed report.md of these runs
was rendered by older report code (and the run directories were renamed to run/ and rerun/
afterwards), so the reference is what the report code rendered from them on 2026-12-02, kept in
tests/fixtures/rendered/<study>--<run>.md. A deliberate change of the report regenerates them
(and says so in its commit); any other change of these bytes is a regression.
"""

from pathlib import Path

import pytest
from invoking import on_terminal

from openjev_repro.results.report import write_report

REPO = Path(__file__).resolve().parents[1]
RENDERED = REPO / "tests" / "fixtures" / "rendered"
COMMITTED = sorted(p.parent for p in (REPO / "results").glob("*/*/report.md")
                   if p.parent.name in ("run", "rerun") or p.parent.name.startswith("run-"))  # run-<date>: superseded


def test_every_committed_run_has_a_reference_rendering():
    assert len(COMMITTED) >= 4, COMMITTED  # the reference run and its rerun, the fast run and the one it superseded
    assert sorted(f"{r.parent.name}--{r.name}.md" for r in COMMITTED) == sorted(p.name for p in RENDERED.glob("*.md"))


@pytest.mark.parametrize("run", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_report_re_renders_byte_identically(run, tmp_path):
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in run.iterdir()}
    out = write_report(run, tmp_path / "out", plots=False)
    assert out == tmp_path / "out" / "report.md"
    assert out.read_bytes() == (RENDERED / f"{run.parent.name}--{run.name}.md").read_bytes()
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in run.iterdir()} == before  # only read


def _snapshot(run: Path) -> dict[Path, tuple[int, bytes]]:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in run.rglob("*") if p.is_file()}


def test_a_committed_signed_run_re_reports_in_place_printing_its_report_and_changing_nothing():
    """Issue 41 item 3: the run is named by the id the study recorded, not by the folder it was moved to
    (`run`), so `invoke report --run results/.../run` renders report.md and both plots identical to the
    signed ones: it prints the report, exits 0 and writes nothing."""
    from invoking import invoke

    run = REPO / "results" / "h200-fast-27b-shape" / "run-2026-12-02d"
    before = _snapshot(run)
    done = invoke("report", "--run", str(run), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "h200-fast-27b-shape-20261202T212525Z-04b59b, started 2026-12-02 21:25:25 UTC" in done.stdout
    assert "Run: run-2026-12-02d," not in done.stdout and f"report: {run / 'report.md'}" in done.stdout
    assert _snapshot(run) == before


def test_a_signed_run_signed_before_a_report_section_prints_the_current_report_and_changes_nothing():
    """The pinned-cache study (run/) was signed before the report gained its "Kernel caches" section: `invoke
    report --run` prints the report rendered now (the section included), says on stderr that the signed report.md
    differs and is left as it is, exits 0 and writes nothing."""
    from invoking import invoke

    run = REPO / "results" / "h200-fast-27b-shape" / "run"
    before = _snapshot(run)
    done = invoke("report", "--run", str(run), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Every pinned cache (4) was unchanged after its backend stopped" in done.stdout
    assert "Kernel caches" not in (run / "report.md").read_text()
    assert done.stderr.startswith("note: ") and "report.md differs from what the report code renders now" in done.stderr
    assert _snapshot(run) == before


def test_the_reports_tables_fit_80_columns_without_splitting_a_word_or_losing_a_column():
    """Issue 41 item 2 (invoke report): at 80 columns a table too wide for its words (the workload table's 8
    columns, the hardware floor's 14) is shown as one block per row; no line is wider than the terminal,
    no header breaks mid-word and no number is split or dropped."""
    # the run named from the checkout's root, as a user types it: the plots' paths printed then do not
    # depend on where the checkout lies (/work/lanes/integrate/results/... made one line 81 columns)
    text = "\n".join(on_terminal("report", "--run", "results/h200-fast-27b-shape/run-2026-12-02d", columns=80).lines)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    assert "Successf" not in text.replace("Successful measured requests", "")
    floor = text[text.index("Hardware floor"):text.index("Plots:")]
    assert "12.34×" in floor and "80–110-token mean ms" in floor  # the raw backend's P50 ratio, whole
    blocks = {block.split()[1]: block for block in floor.split("\n\n") if block.startswith("backend  ")}
    assert sorted(blocks) == ["reference-fast-best", "reference-fast-eager", "reference-raw"]
    assert all(block.count("ratio") == 4 for block in blocks.values())  # every column of the grid, none lost
