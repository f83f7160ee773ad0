"""Output fits where it goes: a terminal gets rendered text no wider than itself; a pipe gets
unwrapped text whose last line is exactly the run directory. A real study (scripted loopback
backends) runs under a real pseudo-terminal 100 columns wide, then through a pipe."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import invoking
import pytest
from invoking import invoke
from rich.cells import cell_len
from studykit import scripted_backend, write_study

REPO = Path(__file__).resolve().parents[1]
COLUMNS = 100


def on_terminal(args: list[str], columns: int = COLUMNS) -> tuple[int, list[str]]:
    """Run under a pty of `columns` columns; the exit status and the screen lines."""
    screen = invoking.on_terminal(*args, columns=columns)
    return screen.code, screen.lines


def piped(args: list[str]) -> subprocess.CompletedProcess:
    return invoke(*args, cwd=REPO, env={"COLUMNS": None, "FORCE_COLOR": None, "TTY_COMPATIBLE": None})


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("output")
    return write_study(tmp, [scripted_backend("one"), scripted_backend("two")])


def test_study_and_report_on_a_terminal_fit_its_width(study):
    code, lines = on_terminal(["study", "--recipe", str(study), "--out", str(study.parent / "runs")])
    assert code == 0, "\n".join(lines)
    run = next((study.parent / "runs").iterdir())
    too_wide = [line for line in lines if cell_len(line) > COLUMNS and str(run) not in line]  # paths: never folded
    assert not too_wide, too_wide
    assert any("last request" in line for line in lines), lines  # the latency column says what it is
    assert [line for line in lines if line.strip()][-1] == str(run)

    code, lines = on_terminal(["report", "--run", str(run), "--out", str(study.parent / "report")])
    assert code == 0, "\n".join(lines)
    too_wide = [line for line in lines if cell_len(line) > COLUMNS]
    assert not too_wide, too_wide
    assert not [line for line in lines if line.startswith("| ") or "\\|" in line]  # rendered, not raw Markdown
    assert any(line.startswith(" Configuration ") for line in lines) and any("━" in line or "─" in line for line in lines)


def test_a_pipe_gets_unwrapped_lines_and_the_run_directory_last(study, tmp_path):
    deep = tmp_path / ("a-long-folder-name-" * 6) / "runs"  # the run path is far wider than 80 columns
    done = piped(["study", "--recipe", str(study), "--out", str(deep)])
    assert done.returncode == 0, done.stderr
    run = next(deep.iterdir())
    assert len(str(run)) > 150
    assert done.stdout.splitlines()[-1] == str(run)
    assert f"run directory {run}" in done.stderr  # rich on a pipe: the path is not folded
    report = piped(["report", "--run", str(run), "--out", str(tmp_path / "report")])
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith((tmp_path / "report" / "report.md").read_text(encoding="utf-8"))
    assert report.stdout.splitlines()[-1] == f"plot: {tmp_path / 'report' / 'latency_cdf.png'}"


def test_at_80_columns_hand_off_lines_stay_whole_and_progress_keeps_count_and_time(tmp_path):
    long_names = write_study(tmp_path, [scripted_backend("reference-fast-graphs-64"), scripted_backend("raw")], n=12)
    deep = tmp_path / ("a-long-folder-name-" * 4) / "runs"  # the run path alone is wider than 80 columns
    code, lines = on_terminal(["study", "--recipe", str(long_names), "--out", str(deep)], columns=80)
    assert code == 0, "\n".join(lines)
    run = next(deep.iterdir())
    assert len(str(run)) > 80
    # one line each on the terminal's stream: the terminal may fold them on screen, but a copy is one line
    assert any(line.endswith(f"→ run directory {run}") for line in lines), lines
    assert f"report: {run / 'report.md'}" in lines and any(line.startswith(f"manifest: {run}") for line in lines)
    progress = [line for line in lines if "last request" in line]
    assert progress and all(re.search(r"\d+/\d+ last request +\S+ ms elapsed \d:\d\d:\d\d$", line) for line in progress), progress
    assert all(cell_len(line) <= 80 for line in progress), progress
    assert any(re.search(r" feasibility 1 .*12/12", line) for line in progress), progress  # phase and pass stay
    others = [line for line in lines if str(run) not in line]
    assert not [line for line in others if cell_len(line) > 80], others


def test_at_80_columns_report_tables_keep_words_whole_and_compare_is_rendered(study, tmp_path):
    piped_study = piped(["study", "--recipe", str(study), "--out", str(tmp_path / "runs")])
    assert piped_study.returncode == 0, piped_study.stderr
    run = Path(piped_study.stdout.splitlines()[-1])
    code, lines = on_terminal(["report", "--run", str(run), "--out", str(tmp_path / "report")], columns=80)
    assert code == 0, "\n".join(lines)
    words = {w for line in lines for w in line.split()}
    assert {"Successful", "measured", "requests", "Configuration", "JevBench", "nearest"} <= words, sorted(words)
    assert not [line for line in lines if cell_len(line) > 80 and str(tmp_path) not in line]  # paths stay whole
    code, lines = on_terminal(["compare", "--baseline", str(run), "--candidate", str(run)], columns=80)
    assert code == 0, "\n".join(lines)
    assert not [line for line in lines if line.startswith(("| ", "#"))], lines  # rendered
    assert not [line for line in lines if cell_len(line) > 80 and str(run) not in line]
    raw = piped(["compare", "--baseline", str(run), "--candidate", str(run)])
    assert raw.returncode == 0 and any(line.startswith("| ") for line in raw.stdout.splitlines())  # verbatim in a pipe
