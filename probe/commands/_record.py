"""--history and --no-history for the commands that measure (run, bench, baseline, profile), and recording their run
(the policy itself: probe.analysis.regression.history.record). Apart from probe.commands.history so that a measuring
command never loads DuckDB, which is optional where probe measures (the GPU machine has none), unless it records.
A run is recorded where --history or $PROBE_HISTORY says, else in the command's own --out folder, never in the
current folder unless that is what was named."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas: a command's flags come from here, and `--help` loads nothing heavy
    from probe.analysis.records.results import BenchResults
    from probe.analysis.regression.history.records import RunCommand

HISTORY_HELP = "the history file (default: $PROBE_HISTORY, else ./probe-history.duckdb)"


def add_record_arguments(p: argparse.ArgumentParser, home: str | None) -> None:
    """--history PATH and --no-history, for every command that records a run; `home` says where the history goes
    when neither names one (the command's own --out folder), None where it then records nothing."""
    where = f"probe-history.duckdb in {home}" if home else "none: the run is not recorded"
    p.add_argument(
        "--history",
        type=Path,
        metavar="PATH",
        help=f"the history file the run is appended to (default: $PROBE_HISTORY, else {where})",
    )
    p.add_argument("--no-history", action="store_true", help="do not record this run in the history")


def record(
    args: argparse.Namespace,
    command: RunCommand,
    code: int = 0,
    results: BenchResults | None = None,
    traces: Sequence[Path] = (),
    source: Path | None = None,
    folder: Path | None = None,
    home: Path | None = None,
) -> int:
    """Append this run to the history unless --no-history (probe.analysis.regression.history.record: --history,
    else $PROBE_HISTORY, else `home`, the command's own output folder, else nowhere); the exit code."""
    if args.no_history:  # before the import: --no-history must never load DuckDB
        return code
    from probe.analysis.regression.history import record as append_run

    done = append_run(args.history, command, code, results, traces, source, folder, home=home)
    print(done.message, file=sys.stderr)
    return done.code
