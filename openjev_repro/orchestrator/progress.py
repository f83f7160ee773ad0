"""What a study shows while it runs: an observer the caller passes in (`StudyOptions.progress`).

The runner only reports events (a line of news, a timed pass starting, a request done, the pass
over); what is drawn, and where, is the observer's business. `StudyProgress` shows nothing (for
callers that want no output); `ConsoleProgress` prints lines and one progress bar per timed
pass on a rich console, redrawn between requests and never while one is being timed.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ..evidence.rows import Row

__all__ = ["ConsoleProgress", "StudyProgress"]


class StudyProgress:
    """The events of a study; this base shows nothing."""

    console: Console | None = None  # where input hashing draws its bar (None: no bar)

    def message(self, text: str) -> None:
        """One line of news (rich markup allowed)."""

    def pass_started(self, backend: str, workload: str, phase: str, index: int, total: int) -> None:
        """A timed pass of `total` requests begins."""

    def request_done(self, row: Row) -> None:
        """One request of the current timed pass was answered (or failed)."""

    def pass_finished(self) -> None:
        """The current timed pass ended (normally or by an exception)."""


class ConsoleProgress(StudyProgress):
    """Lines and per-pass progress bars on a rich console (stderr by default)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def message(self, text: str) -> None:
        assert self.console is not None
        self.console.print(text)

    def pass_started(self, backend: str, workload: str, phase: str, index: int, total: int) -> None:
        columns = (TextColumn(f"{backend} {workload} {phase} {index}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("last request {task.fields[last]}"), TextColumn("elapsed"), TimeElapsedColumn())
        # No refresh thread: the bar is redrawn between requests, never while one is being timed.
        self._bar = Progress(*columns, console=self.console, transient=False, auto_refresh=False)
        self._bar.start()
        self._task = self._bar.add_task("pass", total=total, last="       - ms")

    def request_done(self, row: Row) -> None:
        if self._bar is None or self._task is None:
            return
        last = f"{row.latency_ms:8.2f} ms" if row.ok else f"[red]failed: {(row.error or '')[:40]}[/]"
        self._bar.update(self._task, advance=1, last=last, refresh=True)

    def pass_finished(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        self._bar = self._task = None
