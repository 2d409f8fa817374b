"""Compare a current measurement with a baseline and exit 1 on a regression.

Inputs: results folders, results.json or baseline files (probe baseline), or traces (.json, .json.gz,
.sqlite). Launches per step are exact, so any increase is a regression and the alert names the ops that
appeared or grew. Timings (host time per step, cache bookkeeping per step, TTFT, decode tokens/s) alert only
when the ratio of medians is past --threshold and a Mann-Whitney U test on the raw samples gives p < --alpha.
Across torch / transformers versions or devices a loud warning is printed and counts are not gated, unless
--require-same-env makes that unusable input. With --counts-only, a current run missing any baseline cell fails.
Exit codes: 0 no regression, 1 regression, 2 unusable input (missing or corrupt file, mismatched configs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.analysis.compare import ALPHA, THRESHOLD
from probe.commands import print_json

HELP = "compare against a baseline: exact launch counts, noise-aware timings; exit 1 on a regression"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("baseline", type=Path, help="results folder, results.json, baseline file or trace")
    p.add_argument("current", type=Path, help="the same kind of input, measured now")
    p.add_argument(
        "--threshold",
        type=float,
        default=THRESHOLD,
        help=f"ratio of medians a timing must pass to alert (default: {THRESHOLD})",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=ALPHA,
        help=f"Mann-Whitney U significance level a timing must pass to alert (default: {ALPHA})",
    )
    p.add_argument(
        "--counts-only",
        action="store_true",
        help="gate only on the deterministic launch counts (CI: machines differ in speed)",
    )
    p.add_argument(
        "--require-same-env",
        action="store_true",
        help="exit 2 when torch, transformers or the device differ from the baseline's, instead of showing the "
        "counts ungated (CI: a dependency bump must not switch the gate off silently)",
    )
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write the report as Markdown (a CI comment)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")


def main(args: argparse.Namespace) -> int:
    from probe.analysis.compare import compare

    result = compare(
        args.baseline,
        args.current,
        threshold=args.threshold,
        alpha=args.alpha,
        counts_only=args.counts_only,
        require_same_env=args.require_same_env,
    )
    for w in result.warnings:  # stderr, one line each, so they stand out in a CI log whatever the format
        print(f"probe: WARNING: {w}", file=sys.stderr)
    if args.markdown is not None:
        from probe.analysis.files import atomic_write

        try:
            atomic_write(args.markdown, result.to_markdown())
        except OSError as e:
            from probe.errors import ProbeError

            raise ProbeError(f"cannot write {args.markdown}: {e.strerror or e}") from None
    if args.json:
        print_json(result.to_json())
    else:
        print_report(result)
    return 1 if result.regressed else 0


def print_report(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    from probe.analysis.compare import COLUMNS, row_cells
    from probe.render import console as render

    style = {
        "regression": "bold red",
        "improvement": "green",
        "ok": "",
        "too few samples": "yellow",
        "skipped: versions differ": "bold yellow",
    }
    table = Table(
        title=f"probe compare: {result.baseline} (baseline) vs {result.current} (current)", title_justify="left"
    )
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("cell", "metric", "verdict") else "right")
    for r in result.rows:
        cells = [escape(x) for x in row_cells(r)]
        if style[r.verdict]:
            cells[-1] = f"[{style[r.verdict]}]{cells[-1]}[/]"
        table.add_row(*cells)
    console = render.stdout()
    console.print(table)
    for note in result.notes:
        console.print(f"note: {escape(note)}")
    if result.regressed:
        console.print(f"[bold red]REGRESSION: {len(result.alerts)} alert(s)[/]")
        for a in result.alerts:
            console.print(f"  [bold]{escape(a.key)}[/] {escape(a.message)}")
    else:
        console.print("no regression")
