"""What `probe bench` and `probe run` share, and no other command: progress as the output allows, the sweep's
tables and problems, and the interrupt a sweep turns into its exit. Not a subcommand."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from probe.analysis.records.results import RESULTS_FILE, BenchResults, load_results
from probe.capture.pipeline import Watch
from probe.errors import ProbeError
from probe.render import terminal
from probe.render.console import stdout


def watch_for(json_out: bool, lines: terminal.Lines) -> Watch:
    """Progress as the output allows: a bar on a terminal (not under --json), a flushed line a cell and a phase
    when the output is a file or a pipe."""

    def bar(total: int, cells: bool):
        kind = terminal.CellsProgress if cells else terminal.ProgressBar
        return kind(total, enabled=not json_out)

    return Watch(phase=lines.phase, bar=bar, cell=lines.cells)


def print_problems(warnings: list[str], errors: list[str]) -> None:
    for w in warnings:
        print(f"probe: warning: {w}", file=sys.stderr)
    for e in errors:
        print(f"probe: error: {e}", file=sys.stderr)


def print_sweep(results: BenchResults, title: str | None = None) -> None:
    console = stdout()
    console.print(terminal.cells_table(results, title))
    if (telemetry := terminal.telemetry_table(results)) is not None:
        console.print(telemetry)


def interrupted_message(out: Path | None, done: int, total: int) -> str:
    """What an interrupted sweep kept: the finished cells in results.json as it now stands on disk."""
    if out is None:
        return f"interrupted: {done} of {total} cells finished, none kept (no --out)"
    try:
        kept = len(load_results(out).cells)
    except ProbeError:
        kept = 0
    return f"interrupted: {kept} of {total} cells kept in {out / RESULTS_FILE}; rerun with --resume to finish"


@contextlib.contextmanager
def sweep_interrupts(out: Path | None, total: int, done: Callable[[], int]) -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt as SIGINT does; either ends the command with what the sweep kept (`done()`
    cells finished of `total`) and exit 128 + the signal."""
    got = [signal.SIGINT]

    def handler(signum, frame):
        got[0] = signum
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave SIGTERM alone
        previous = None
    try:
        yield
    except KeyboardInterrupt:
        print(f"probe: {interrupted_message(out, done(), total)}", file=sys.stderr)
        raise SystemExit(128 + got[0]) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
