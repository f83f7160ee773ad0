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
        self.console.print(text, soft_wrap=True)  # never folded: its paths (→ run directory) are copied

    def pass_started(self, backend: str, workload: str, phase: str, index: int, total: int) -> None:
        """A line that fits the console: the count, the last latency and the elapsed time always show,
        and so does the label's tail (phase and pass); the bar narrows or goes first, then the label's
        head (backend, workload) is shortened with …."""
        assert self.console is not None
        head, tail, width = f"{backend} {workload}", f" {phase} {index}", self.console.width
        count = len(f"{total}/{total}")
        fixed = count + len("last request 12345.67 ms") + len("elapsed 0:00:00") + 4  # + the gaps between columns
        label = head + tail
        bar = max(0, min(40, width - fixed - len(label) - 2))
        room = width - fixed - (bar + 1 if bar >= 5 else 0) - 1
        if len(label) > room:
            keep = max(room - len(tail) - 1, 1)
            label = (head[:keep] + "…" + tail) if len(tail) < room else label[: max(room - 1, 1)] + "…"
        columns: list = [TextColumn(label.replace("[", "\\["))]
        if bar >= 5:
            columns.append(BarColumn(bar_width=bar))
        columns += [MofNCompleteColumn(), TextColumn("last request {task.fields[last]}"), TextColumn("elapsed"),
                    TimeElapsedColumn()]
        # No refresh thread: the bar is redrawn between requests, never while one is being timed.
        self._bar = Progress(*columns, console=self.console, transient=False, auto_refresh=False)
        self._bar.start()
        self._task = self._bar.add_task("pass", total=total, last="       - ms")

    def request_done(self, row: Row) -> None:
        if self._bar is None or self._task is None:
            return
        last = f"{row.latency_ms:8.2f} ms" if row.ok else "[red]     failed[/]"  # the error is in the row
        self._bar.update(self._task, advance=1, last=last, refresh=True)

    def pass_finished(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        self._bar = self._task = None
