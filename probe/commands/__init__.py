"""One module a subcommand: `add_arguments(parser)` and `main(args) -> exit code`; its help line is in probe.cli.
What several commands share lives here: the --json writer and the interrupt a sweep turns into its exit."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from probe.analysis.results import RESULTS_FILE, load_results
from probe.errors import ProbeError


def print_json(doc) -> None:
    """A command's --json document on stdout, indented: msgspec writes 1000 steps' ledger several times faster than
    the json module, and a NaN as null (valid JSON) rather than NaN."""
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=1).decode() + "\n")


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
