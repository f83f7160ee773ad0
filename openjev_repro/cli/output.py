"""Output that fits where it goes: a terminal gets rich rendering at its width; a pipe or a file
gets plain text that is never wrapped, so each path stays on one line for scripts.

rich is imported only when something is printed through it, to keep `invoke --list` light.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["UNWRAPPED_WIDTH", "console", "keep_words_whole", "print_markdown"]

UNWRAPPED_WIDTH = 100_000  # wide enough that rich never folds a line of a report or a table


def console(stderr: bool = False) -> Console:
    """A terminal (or rich's FORCE_COLOR/TTY_COMPATIBLE forcing) at its own width; otherwise unwrapped."""
    from rich.console import Console

    here = Console(stderr=stderr)
    if here.is_terminal:
        return here
    return Console(stderr=stderr, width=UNWRAPPED_WIDTH, soft_wrap=True, highlight=False)


WHOLE_WORD_LIMIT = 24  # a word up to this long is never split across lines; a longer one (a path) folds


def keep_words_whole(table: Table) -> Table:
    """A table whose columns never break a word of up to WHOLE_WORD_LIMIT characters mid-word
    (`Success / ful`), and never lose text to an ellipsis: a longer word (a path) folds."""
    for column in table.columns:
        words = [w for cell in [column.header, *column.cells] for w in _plain(cell).split()]
        column.min_width = max((min(len(w), WHOLE_WORD_LIMIT) for w in words), default=column.min_width)
        column.overflow = "fold"
    return table


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

    class FoldingTable(TableElement):
        def __rich_console__(self, console, options):
            for table in super().__rich_console__(console, options):
                if isinstance(table, Table):  # what TableElement renders to
                    keep_words_whole(table)
                    if table.columns and max((len(str(c)) for c in table.columns[0].cells), default=0) <= 24:
                        table.columns[0].no_wrap = True  # short names (the backends) stay whole
                yield table

    class FoldingMarkdown(Markdown):
        elements: ClassVar[dict[str, type]] = {**Markdown.elements, "table_open": FoldingTable}

    return FoldingMarkdown
