"""Benchmark engines across prompt lengths: TTFT, ITL, decode tokens/s, peak memory and token parity.

A cell that raises (an OOM, an engine that refuses the shape, a dead Ray worker) is recorded as failed with its
error and the sweep goes on; the command then exits 1. --out into a folder that already holds results is refused
unless --resume (run only the cells it lacks) or --force (clear probe's files first). --executor ray spreads the
cells over a Ray cluster: a local instance, or the one at --address.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path

from probe.capture.config import BenchConfig
from probe.commands import print_json
from probe.commands.history import add_record_arguments, record
from probe.flags import add_arguments as add_config_arguments
from probe.flags import from_args

HELP = "time engines across prompt lengths, with token parity against naive"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, BenchConfig)
    p.add_argument("--out", type=Path, help="folder for results.json and cells.parquet")
    p.add_argument("--json", action="store_true", help="print the results JSON to stdout instead of a table")
    add_sweep_arguments(p)
    add_record_arguments(p)


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """Where the cells run, and what to do with an --out folder that already holds results (bench and run)."""
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: every cell in this process; ray: a cell per GPU (or per node on CPUs) of a Ray cluster",
    )
    p.add_argument("--address", help="--executor ray: the cluster to join (default: start a local Ray instance)")
    p.add_argument("--resume", action="store_true", help="keep the cells --out already holds and run the others")
    p.add_argument("--force", action="store_true", help="clear probe's own files from --out before the sweep")


def check_sweep_arguments(args: argparse.Namespace) -> None:
    from probe.errors import ProbeError

    if args.address and args.executor != "ray":
        raise ProbeError("--address names a Ray cluster: use it with --executor ray")
    if (args.resume or args.force) and args.out is None:
        raise ProbeError("--resume and --force act on an --out folder")


@contextlib.contextmanager
def _terminate_as_interrupt(got: list[int]):
    """SIGTERM raises KeyboardInterrupt like SIGINT does, so a killed sweep says what it kept; `got` (a one-item
    list, SIGINT until then) is set to the signal that stopped it."""

    def handler(signum, frame):
        got[0] = signum
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave SIGTERM alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupted_message(out: Path | None, done: int, total: int) -> str:
    """What an interrupted sweep kept: the finished cells in results.json as it now stands on disk."""
    from probe.analysis.results import RESULTS_FILE, load_results
    from probe.errors import ProbeError

    if out is None:
        return f"interrupted: {done} of {total} cells finished, none kept (no --out)"
    try:
        kept = len(load_results(out).cells)
    except ProbeError:
        kept = 0
    return f"interrupted: {kept} of {total} cells kept in {out / RESULTS_FILE}; rerun with --resume to finish"


def execute(
    cfg: BenchConfig,
    out: Path | None,
    output: str = "table",
    title: str | None = None,
    model=None,
    resume: bool = False,
    executor: str = "local",
    address: str | None = None,
):
    """Run a sweep (on `model` when given, already built from cfg's model and dtype; here or on Ray); print its
    "table" (with a progress bar), its "json", or "none" (with a progress bar). Returns (results, exit code)."""
    from engines.models import resolve_device
    from probe import render
    from probe.capture.config import validate
    from probe.capture.sweep import (
        bench,
        cell_count,
        check_writable,
        mismatches,
        precheck_resume,
        runs_per_cell,
        settle_here,
    )

    if executor == "local":
        cfg = settle_here(cfg)
    validate(settle_here(cfg))  # bad input fails here, before Ray starts or a model loads
    if out is not None:
        check_writable(out)
        if resume and executor == "local":  # on Ray, "auto" is settled by the cluster's devices: checked there
            precheck_resume(cfg, out)
    total = cell_count(cfg)
    partial, stopped = {}, [signal.SIGINT]

    def keep(results) -> None:  # the last saved state, for the interrupt's message
        partial["results"] = results

    try:
        with _terminate_as_interrupt(stopped):
            if executor == "ray":
                from probe.capture.raysweep import bench_on_ray

                with render.CellsProgress(total, enabled=output != "json") as bar:
                    results = bench_on_ray(cfg, out, address, bar, on_cell=keep, resume=resume)
            else:
                runs = total * runs_per_cell(cfg, resolve_device(cfg.device))
                with render.ProgressBar(runs, enabled=output != "json") as bar:
                    results = bench(cfg, out, progress=bar, on_cell=keep, model=model, resume=resume)
    except KeyboardInterrupt:
        done = len(partial["results"].cells) if partial else 0
        print(f"probe: {interrupted_message(out, done, total)}", file=sys.stderr)
        raise SystemExit(128 + stopped[0]) from None
    if output == "json":
        print_json(results.to_json())
    elif output == "table":
        console = render.stdout()
        console.print(render.cells_table(results, title))
        if (telemetry := render.telemetry_table(results)) is not None:
            console.print(telemetry)
    code = 0
    if contended := [c for c in results.cells if c.contended]:
        names = ", ".join(f"{c.label} ({c.other_cpu_cores:.2f})" for c in contended)
        print(
            f"probe: warning: {len(contended)} of {len(results.cells)} cells ran while other processes used the CPU "
            f"(cores beside this one: {names}); their timings are unreliable (README, Contention)",
            file=sys.stderr,
        )
    if results.failed:
        names = "; ".join(f"{f.label} on {f.host}: {f.error}" for f in results.failed[:3])
        names += "; ..." if len(results.failed) > 3 else ""
        print(f"probe: error: {len(results.failed)} of {total} cells failed: {names}", file=sys.stderr)
        code = 1
    bad = mismatches(results)
    if bad and not cfg.allow_mismatch:
        names = ", ".join(c.label for c in bad)
        print(f"probe: error: tokens differ from naive for {names} (use --allow-mismatch to accept)", file=sys.stderr)
        code = 1
    return results, code


def main(args: argparse.Namespace) -> int:
    from probe.analysis.runfolder import claim

    check_sweep_arguments(args)
    cfg = from_args(BenchConfig, args)
    if args.out is not None:
        claim(args.out, resume=args.resume, force=args.force)
    results, code = execute(
        cfg,
        args.out,
        "json" if args.json else "table",
        resume=args.resume,
        executor=args.executor,
        address=args.address,
    )
    return record(args, "bench", code, results=results, source=args.out)
