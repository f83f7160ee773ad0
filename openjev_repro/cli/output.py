"""Output that fits where it goes: a terminal gets rich rendering at its width; a pipe or a file
gets plain text that is never wrapped, so each path stays on one line for scripts.

rich is imported only when something is printed through it, to keep `invoke --list` light.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["UNWRAPPED_WIDTH", "console", "echo", "keep_words_whole", "print_markdown"]

UNWRAPPED_WIDTH = 100_000  # wide enough that rich never folds a line of a report or a table


def console(stderr: bool = False) -> Console:
    """A terminal (or rich's FORCE_COLOR/TTY_COMPATIBLE forcing) at its own width; otherwise unwrapped.

    A closed pipe raises BrokenPipeError, which the task wrapper (`user_errors`) turns into a quiet
    exit 141; rich's own answer would be a silent exit 1, as if the command had failed."""
    from rich.console import Console

    here = Console(stderr=stderr)
    if not here.is_terminal:
        here = Console(stderr=stderr, width=UNWRAPPED_WIDTH, soft_wrap=True, highlight=False)
    here.on_broken_pipe = _broken_pipe  # type: ignore[method-assign]
    return here


def _broken_pipe() -> None:
    raise BrokenPipeError("the reader of the output went away")


def echo(text: str) -> None:
    """Print plain lines (a check list, a claims table). Through a pipe or into a file, as they are; on
    a terminal, a line wider than it is folded at spaces, never inside a word, each continuation
    indented under the line's last column (where two or more spaces end in its first half)."""
    import shutil
    import textwrap

    if not sys.stdout.isatty():
        print(text)
        return
    width = shutil.get_terminal_size().columns
    for line in text.splitlines():
        if len(line) <= width:
            print(line)
            continue
        gaps = [m.end() for m in re.finditer(r" {2,}", line[: width // 2])]
        hang = " " * (gaps[-1] if gaps else 2)
        print(textwrap.fill(line, width, subsequent_indent=hang, break_long_words=False, break_on_hyphens=False))


WHOLE_WORD_LIMIT = 24  # a word up to this long is never split across lines; a longer one (a path) folds


def keep_words_whole(table: Table, width: int | None = None) -> Table:
    """A table whose columns never break a word of up to WHOLE_WORD_LIMIT characters mid-word
    (`Success / ful`), and never lose text to an ellipsis: a longer word (a path) folds. With
    `width` (the console's), each column gets a width that fits it: the widest give way first,
    none below its longest word (a no_wrap column keeps its whole width); when that is still too
    wide, the padding shrinks to one space between columns, then the limit on a whole word."""
    natural, longest = _measure(table)
    if width is None:
        mins = [min(n, WHOLE_WORD_LIMIT) for n in longest]
        _set_widths(table, mins, [max(n, m) for n, m in zip(natural, mins, strict=True)])
        return table
    no_wrap = [c.no_wrap for c in table.columns]
    if sum(_least(natural, longest, no_wrap, WHOLE_WORD_LIMIT)) > _room(table, width):
        blank_divider = table.box is None or table.box.head_vertical == " "
        table.padding = (0, 0, 0, 0) if blank_divider else (0, 1, 0, 0)  # one space between columns, not two
    limit = WHOLE_WORD_LIMIT
    while limit > 4 and sum(_least(natural, longest, no_wrap, limit)) > _room(table, width):
        limit -= 1
    mins = _least(natural, longest, no_wrap, limit)
    _set_widths(table, mins, _give_way(natural, mins, _room(table, width)))
    return table


def _measure(table: Table) -> tuple[list[int], list[int]]:
    """Per column: its widest line, and its longest word (header included)."""
    texts = [[_plain(cell) for cell in [column.header, *column.cells]] for column in table.columns]
    natural = [max((len(line) for text in cells for line in text.splitlines()), default=1) for cells in texts]
    longest = [max((len(w) for text in cells for w in text.split()), default=1) for cells in texts]
    return natural, longest


def _least(natural: list[int], longest: list[int], no_wrap: list[bool], limit: int) -> list[int]:
    return [n if whole else min(w, limit) for n, w, whole in zip(natural, longest, no_wrap, strict=True)]


def _room(table: Table, width: int) -> int:
    """What the cells may take of `width`: the table's borders and each column's padding off."""
    padding = sum(table._get_padding_width(i) for i in range(len(table.columns)))
    return width - table._extra_width - padding


def _set_widths(table: Table, mins: list[int], widths: list[int]) -> None:
    for column, least, most in zip(table.columns, mins, widths, strict=True):
        column.min_width = least
        column.max_width = max(most, least)
        column.overflow = "fold"


def _give_way(natural: list[int], mins: list[int], room: int) -> list[int]:
    """Narrow the widest column, one character at a time, until the widths fit `room` (or all are at their minimum)."""
    widths = [max(n, m) for n, m in zip(natural, mins, strict=True)]
    while sum(widths) > room:
        wider = [i for i, w in enumerate(widths) if w > mins[i]]
        if not wider:
            break
        widths[max(wider, key=lambda i: widths[i])] -= 1
    return widths


def _plain(cell: object) -> str:
    from rich.errors import MarkupError
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    if not isinstance(cell, str):
        return ""
    try:
        return Text.from_markup(cell).plain
    except MarkupError:  # text that only looks like markup
        return cell


def print_markdown(text: str) -> None:
    """Rendered Markdown (tables, headings) on a terminal; the Markdown itself, verbatim, elsewhere."""
    out = console()
    if not out.is_terminal:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        return
    out.print(_markdown_class()(text))


def _markdown_class():
    """rich's Markdown, except that a table cell never loses text to an ellipsis: a word too long
    for its column folds onto the next line, and a first column of short names is never split."""
    from rich.markdown import Markdown, TableElement
    from rich.table import Table

    from ..results.narrow import stacked

    class FoldingTable(TableElement):
        def __rich_console__(self, console, options):
            for table in super().__rich_console__(console, options):
                if isinstance(table, Table) and (rows := stacked(table, options.max_width)) is not None:
                    yield rows  # too wide to keep words whole: one block per row (results/narrow.py)
                    continue
                if isinstance(table, Table):  # what TableElement renders to
                    if table.columns and max((len(str(c)) for c in table.columns[0].cells), default=0) <= 24:
                        table.columns[0].no_wrap = True  # short names (the backends) stay whole
                    keep_words_whole(table, options.max_width)
                yield table

    class FoldingMarkdown(Markdown):
        elements: ClassVar[dict[str, type]] = {**Markdown.elements, "table_open": FoldingTable}

    return FoldingMarkdown
