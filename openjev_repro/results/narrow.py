"""The report's tables on a terminal too narrow for them: one block per row instead of split words.

A Markdown table of the report (the workload table, the load levels, the hardware floor) has up to 14
columns; at 80 columns a grid can only fit by splitting words and numbers ("Successf/ul", "12.3" over
"4×") or losing its last column. `stacked(table, width)` gives, for such a table, the same cells as one
block per row: the first column's header and the row's first cell as its title, then each other column's header and value on one line,
which fits any width a header does. A table that fits with every word whole is left to the grid (None).
report.md is unchanged: only the terminal's rendering of it (cli/output.py) asks here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

__all__ = ["stacked"]

_BORDER = 3  # per column: a border and one space of padding each side (rich's Markdown tables)


def _plain(cell: object) -> str:
    from rich.text import Text

    return cell.plain if isinstance(cell, Text) else str(cell)


def _longest_word(texts: list[str]) -> int:
    return max((len(word) for text in texts for word in text.split()), default=1)


def fits(table: Table, width: int) -> bool:
    """Whether the grid fits `width` with no word or number split (each column at its longest word)."""
    needed = sum(_longest_word([_plain(c.header), *map(_plain, c.cells)]) for c in table.columns)
    return needed + _BORDER * len(table.columns) + 1 <= width


def stacked(table: Table, width: int) -> RenderableType | None:
    """The table as one block per row when its grid would split words at `width`; None when it fits."""
    from rich.console import Group
    from rich.table import Table as Grid
    from rich.text import Text

    if len(table.columns) < 3 or fits(table, width):
        return None
    headers = [_plain(c.header) for c in table.columns]
    rows = list(zip(*(list(map(_plain, c.cells)) for c in table.columns), strict=True))
    blocks: list[RenderableType] = []
    for row in rows:
        title = Text.assemble((headers[0], "dim"), "  ", (row[0], "bold"))
        grid = Grid(show_header=False, box=None, padding=(0, 1, 0, 2), title=title, title_justify="left")
        grid.add_column(style="dim", overflow="fold")
        grid.add_column(overflow="fold")
        for header, value in zip(headers[1:], row[1:], strict=True):
            grid.add_row(header, value)
        blocks += [grid, Text("")]
    return Group(*blocks)
