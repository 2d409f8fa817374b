"""What `probe bench` and `probe run` share, and no other command: progress as the output allows, the sweep's
tables and problems, and the interrupt a sweep turns into its exit. Not a subcommand."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from probe.analysis.records.results import RESULTS_FILE, BenchResults, load_results
from probe.capture.pipeline import Watch
from probe.errors import ProbeError
from probe.render import terminal
from probe.render.console import stdout


def watch_for(json_out: bool, lines: terminal.LogProgress) -> Watch:
    """Progress as the output allows: a bar where stderr is a terminal (not under --json), a flushed line a cell and
    a phase when the output is a file or a pipe. Never a bar into a file: rich prints its last frame there."""

    def bar(total: int, cells: bool):
        kind = terminal.CellsProgress if cells else terminal.ProgressBar
        return kind(total, enabled=not json_out and sys.stderr.isatty())

    return Watch(phase=lines.phase, cells=lines.sweep, bar=bar, cell=lines.cells, note=lines.note)


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


def resume_command(argv: Sequence[str] | None, command: str, out: Path | None) -> str | None:
    """The whole command line that finishes an interrupted sweep into `out`: the one given (`argv`, the
    subcommand first), less --out, --resume and --force, with --out of the same folder and --resume; None without
    a folder."""
    if out is None:
        return None
    args, rest = [], list(argv or [command])[1:]
    while rest:
        arg = rest.pop(0)
        if arg == "--out":
            rest = rest[1:]
        elif not (arg.startswith("--out=") or arg in ("--resume", "--force")):
            args.append(arg)
    return shlex.join([_program(), command, *args, "--out", str(out), "--resume"])


def _program() -> str:
    """How to call probe again: `probe` where that is on PATH (or it is not this console script at all: python -m
    probe), else the console script as it was typed (.venv/bin/probe, the venv not activated)."""
    typed = Path(sys.argv[0])
    on_path = shutil.which("probe")
    if typed.name != "probe" or (on_path is not None and Path(on_path).resolve() == typed.resolve()):
        return "probe"
    return str(typed)


def interrupted_message(out: Path | None, total: int, command: str | None) -> str:
    """What an interrupted sweep kept: the finished cells in results.json as it now stands on disk, and the command
    that runs the rest."""
    if out is None:
        return f"interrupted: none of {total} cells kept (no --out)"
    try:
        kept = len(load_results(out).cells)
    except ProbeError:
        kept = 0
    return f"interrupted: {kept} of {total} cells kept in {out / RESULTS_FILE}; to finish: {command}"


@contextlib.contextmanager
def sweep_interrupts(message: Callable[[], str]) -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt as SIGINT does; either ends the command with `message()` (what the sweep
    kept, how to finish) and exit 128 + the signal."""
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
        print(f"probe: {message()}", file=sys.stderr)
        raise SystemExit(128 + got[0]) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
