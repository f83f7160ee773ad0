"""Task of the report: report."""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Exit, task

from ..printable import printable
from . import FAIL_ON_GATES_HELP, exit_on_failed_gates, user_errors

__all__ = ["report_task"]


@task(name="report", help={
    "run": "run directory written by `invoke study`",
    "out": "write report.md and the plots here instead of into the run directory (needed for a signed run "
           "whose report would change)",
    "fail_on_gates": FAIL_ON_GATES_HELP,
})
@user_errors
def report_task(c, run, out=None, fail_on_gates=False):
    """Print a run's Markdown report and write report.md and two plots. Exit 1 if the run is not complete."""
    from ..evidence.records import state_of
    from ..evidence.rundir import RunDir, Status
    from ..results.report import PLOT_NAMES, SignedReportDiffers, write_report
    from .output import print_markdown

    try:
        path = write_report(Path(run), Path(out) if out else None)
        print_markdown(path.read_text(encoding="utf-8"))
    except SignedReportDiffers as newer:  # rendered now, written nowhere: the signed files stay as they are
        path = newer.report
        print_markdown(newer.text)
        sys.stderr.write(f"note: {printable(str(newer))}\n")
    sys.stdout.write(f"\nreport: {path}\n")
    for name in PLOT_NAMES:
        sys.stdout.write(f"plot: {path.parent / name}\n")
    status = state_of(RunDir.open(Path(run))).status
    imported = status == Status.IMPORTED and (Path(run) / "import.json").is_file()  # complete, not measured by us
    if status != Status.COMPLETE and not imported:
        raise Exit(f"error: INCOMPLETE RUN: {printable(str(run))} has status {status!r}; the report above is partial.", code=1)
    if fail_on_gates:
        exit_on_failed_gates(Path(run) / "summary.json", str(run))
