"""Benchmark engines across prompt lengths: TTFT, ITL, decode tokens/s, peak memory and token parity.

A cell that raises (an OOM, an engine that refuses the shape, a dead Ray worker) is recorded as failed with its
error and the sweep goes on; the command then exits 1. --out into a folder that already holds results is refused
unless --resume (run only the cells it lacks) or --force (clear probe's files first). --executor ray spreads the
cells over a Ray cluster: a local instance, or the one at --address. With output to a file or a pipe, a line a
finished cell shows the progress the terminal's bar would.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from probe.commands import print_json
from probe.commands._record import add_record_arguments, record
from probe.flags import add_arguments as add_config_arguments
from probe.flags import add_sweep_arguments, check_sweep_arguments, from_args
from probe.settings import BenchConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, BenchConfig)
    p.add_argument("--out", type=Path, help="folder for results.json and cells.parquet")
    p.add_argument("--json", action="store_true", help="print the results JSON to stdout instead of a table")
    add_sweep_arguments(p)
    add_record_arguments(p, "--out (when given)")


def main(args: argparse.Namespace) -> int:
    from probe.analysis.records.runfolder import claim
    from probe.capture.pipeline import sweep, sweep_problems
    from probe.capture.sweep import cell_count
    from probe.commands._sweep import (
        interrupted_message,
        print_problems,
        print_sweep,
        resume_command,
        sweep_interrupts,
        watch_for,
    )
    from probe.render import terminal

    check_sweep_arguments(args)
    cfg = from_args(BenchConfig, args)
    if args.out is not None:
        claim(args.out, resume=args.resume, force=args.force)
    lines = terminal.LogProgress(terminal.line_stream(args.json), "probe bench")
    finish = resume_command(args.argv, "bench", args.out)
    with lines, sweep_interrupts(lambda: interrupted_message(args.out, cell_count(cfg), finish)):
        results = sweep(cfg, args.out, watch_for(args.json, lines), None, args.resume, args.executor, args.address)
    if args.json:
        print_json(results.to_json())
    else:
        print_sweep(results)
    warnings, errors = sweep_problems(cfg, results)
    print_problems(warnings, errors)
    return record(args, "bench", 1 if errors else 0, results=results, source=args.out, home=args.out)
