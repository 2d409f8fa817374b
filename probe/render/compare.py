"""probe compare's report on the terminal (probe compare, probe ab, probe history show and check print it)."""

from __future__ import annotations

import sys

from rich.markup import escape
from rich.table import Table

from probe.analysis.regression.compare import COLUMNS, Comparison, row_cells
from probe.render import console as render

# A verdict's style in the table; a verdict not named here is printed plain.
STYLE = {
    "regression": "bold red",
    "improvement": "green",
    "too few samples": "yellow",
    "skipped: versions differ": "bold yellow",
    "skipped: devices differ": "bold yellow",
    "skipped: work differs": "bold yellow",
    "contended: not judged": "bold yellow",
    "engines differ: not gated": "yellow",
}


def warnings_to_stderr(result: Comparison) -> None:
    """Loud warnings on stderr, one line each, so they stand out in a CI log whatever the format."""
    for w in result.warnings:
        print(f"probe: WARNING: {w}", file=sys.stderr)


def comparison_table(result: Comparison) -> Table:
    table = Table(
        title=f"probe compare: {result.baseline} (baseline) vs {result.current} (current)", title_justify="left"
    )
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("cell", "metric", "verdict") else "right")
    for r in result.rows:
        cells = [escape(x) for x in row_cells(r)]
        if r.verdict in STYLE:
            cells[-1] = f"[{STYLE[r.verdict]}]{cells[-1]}[/]"
        table.add_row(*cells)
    return table


def print_comparison(result: Comparison) -> None:
    console = render.stdout()
    console.print(comparison_table(result))
    if result.changes:
        console.print("what changed, per step:")
        for c in result.changes:
            console.print(f"  {escape(c.line)}")
    for note in result.notes:
        console.print(f"note: {escape(note)}")
    if result.regressed:
        console.print(f"[bold red]REGRESSION: {len(result.alerts)} alert(s)[/]")
        for a in result.alerts:
            console.print(f"  [bold]{escape(a.key)}[/] {escape(a.message)}")
    elif result.devices_differ:
        console.print("not gated: the two sides ran on different devices")
    elif result.work_differs:
        console.print("not gated: the two sides' steps did different work")
    else:
        console.print("no regression")
