"""The two consoles every command prints through, and what makes output fit its reader. Its own module, so a command
that prints only a trace's tables (`probe analyze`) loads rich and nothing else of the render layer (no pandas).

Width: `COLUMNS` when set, else the terminal's, else NOT_A_TERMINAL_WIDTH (a file or a pipe). A table whose columns
do not all fit whole drops columns from the right and names them under it: a figure is never cut to `4…`. A line of
text wraps at word boundaries, and no line ends in spaces (rich pads a left-justified title to the table's width and
leaves a space where it breaks a line); an indented line wraps under its indent.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
from typing import TextIO

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment, Segments
from rich.table import Table

NOT_A_TERMINAL_WIDTH = 100  # a log or a pipe: wide enough for the main tables, narrow enough for a review diff
FOLD_WIDTH = 16  # the narrowest a column of names (overflow="fold") is made: a step name folds, a figure never; at
# 16 a marker and its number stay on one line (ProfilerStep#100: "ProfilerStep#1" over "00" read as two steps)


def width_for(stream: TextIO) -> int | None:
    """The width to print at: COLUMNS, else None on a terminal (rich asks the terminal), else NOT_A_TERMINAL_WIDTH."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if stream.isatty() else NOT_A_TERMINAL_WIDTH


class FittingConsole(Console):
    """A console whose every table and line fits its width (the module's docstring). Only `print(obj, ...)` fits;
    a call with print's keyword arguments is rich's own."""

    def print(self, *objects, **kwargs) -> None:  # type: ignore[override]
        if kwargs:
            return super().print(*objects, **kwargs)
        for obj in objects:
            super().print(Segments([*trimmed_lines(self, fit(self, obj)), Segment.line()]))
        return None


def stdout() -> FittingConsole:
    return FittingConsole(highlight=False, soft_wrap=False, width=width_for(sys.stdout))


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def trimmed_lines(console: Console, renderable: RenderableType) -> list[Segment]:
    """`renderable` rendered at the console's width, its lines joined by newlines, each without trailing spaces."""
    out: list[Segment] = []
    for i, line in enumerate(console.render_lines(renderable, pad=False)):
        while line and not line[-1].control and not line[-1].text.rstrip():
            line = line[:-1]
        if line and not line[-1].control:
            last = line[-1]
            line = [*line[:-1], Segment(last.text.rstrip(), last.style)]
        out += ([Segment.line()] if i else []) + line
    return out


# ---------------------------------------------------------------------------------------------------------
# tables that fit


def fit(console: Console, renderable: RenderableType) -> RenderableType:
    """A table that fits `console.width` with every cell whole; an indented line wrapped under its own indent;
    anything else as it is. A table too wide drops columns from the one before its last leftwards: its first column
    (what a row is) and its last (in this project's tables the verdict, the parity, the source) stay."""
    if isinstance(renderable, str) and (indent := len(renderable) - len(renderable.lstrip(" "))):
        return Padding(renderable[indent:], (0, 0, 0, indent))
    if not isinstance(renderable, Table) or not renderable.columns:
        return renderable
    table, columns = renderable, renderable.columns
    pad = table.padding[1] + table.padding[3]
    least = [_least_width(console, c) + pad for c in columns]
    most = [_most_width(console, c) + pad for c in columns]
    if sum(most) <= console.width - _border_width(table, len(columns)):
        return table
    kept = list(range(len(columns)))
    for i in reversed(range(1, len(columns) - 1)):
        if sum(least[k] for k in kept) <= console.width - _border_width(table, len(kept)):
            break
        kept.remove(i)
    widths = _shrunk(
        [most[k] for k in kept],
        [least[k] for k in kept],
        console.width - _border_width(table, len(kept)),
        [columns[k].overflow == "fold" for k in kept],
    )
    fitted = copy.copy(table)
    # Every data cell fits its column whole, so only a header can wrap (at a word, never inside one).
    fitted.columns = [
        dataclasses.replace(columns[k], _index=i, width=w - pad, min_width=None, max_width=None, no_wrap=False)
        for i, (k, w) in enumerate(zip(kept, widths, strict=True))
    ]
    headers = (str(c.header) for i, c in enumerate(columns) if i not in kept)
    if dropped := [name for name in headers if any(map(str.isalnum, name))]:
        note = f"not shown at {console.width} columns: {', '.join(dropped)} (a wider COLUMNS shows them)"
        fitted.caption = f"{table.caption}; {note}" if table.caption else note
        fitted.caption_justify = "left"
    return fitted


def _border_width(table: Table, columns: int) -> int:
    """The characters a table's box takes beside its cells (rich's own count): the two edges and one rule between
    each two columns."""
    if not table.box:
        return 0
    return (2 if table.show_edge else 0) + columns - 1


def _measured(console: Console, cells) -> list[Measurement]:
    return [Measurement.get(console, console.options, cell) for cell in cells]


def _least_width(console: Console, column) -> int:
    """The narrowest a column's cells stay whole: the header's longest word, and each cell's longest word (a figure
    is one word), or its whole line when the column does not wrap. A column of names that folds (overflow="fold")
    may go down to FOLD_WIDTH: a name folded onto two lines is still whole."""
    cells = _measured(console, column.cells)
    header = Measurement.get(console, console.options, column.header).minimum
    if column.no_wrap:
        return max([header, *(m.maximum for m in cells)])
    fold = FOLD_WIDTH if column.overflow == "fold" else None
    return max([header, *(m.minimum if fold is None else min(m.minimum, fold) for m in cells)])


def _most_width(console: Console, column) -> int:
    return max(m.maximum for m in _measured(console, [column.header, *column.cells]))


def _shrunk(most: list[int], least: list[int], available: int, last: list[bool]) -> list[int]:
    """Widths from `most` down toward `least` until they add up to `available` (or every column is at its least):
    one character at a time from the column with the most to spare, the columns marked `last` (names that fold)
    only once the others (whose headers wrap) are at their least."""
    widths = list(most)
    for group in (False, True):
        columns = [i for i, marked in enumerate(last) if marked == group]
        while columns and sum(widths) > available:
            spare, i = max((widths[i] - least[i], i) for i in columns)
            if spare <= 0:
                break
            widths[i] -= 1
    return widths
