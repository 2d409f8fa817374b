"""The main job: the default naive-vs-cached sweep, sized for the machine, written to a report folder,
with the write-ups' method on top: this machine's floor and bandwidth, the predicted step beside the
measured one, and the write-ups' two closing predictions checked against a static and a batched sweep.

On a CPU: the tiny preset with a prompt and token budget that finishes in minutes. On a GPU: the 1.5B
preset in the write-ups' full configuration. Any bench flag overrides the default.

--quick: every experiment at reduced size, in one process on one model: naive, cached and static across the
prompt range (naive at fewer lengths on a GPU), the batched check, the floor with and without a sync, the
measured bandwidth beside the datasheet's, one profiled trace per engine (and an Nsight Systems one where nsys
is installed), telemetry, and the report with every figure the write-ups measured by hand, each with its source.

Before the timed work a profiler self-check counts kernels before and after as many sessions as the run opens.
The report is written as each part finishes; a part that fails is named in it with its error and the rest goes on.
Warnings (a trace's ledger, the self-check) reach report.md and stderr; a failed part, a failed or mismatched cell,
or a GPU trace whose launches hold no kernel makes the exit status 1. The pipeline: probe.capture.pipeline.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from probe.commands import print_json
from probe.commands._record import add_record_arguments, record
from probe.flags import add_arguments as add_config_arguments
from probe.flags import add_sweep_arguments, check_sweep_arguments, from_args
from probe.settings import BenchConfig

if TYPE_CHECKING:
    from probe.capture.pipeline import RunOutcome


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, BenchConfig, overrides_only=True)
    p.add_argument("--out", type=Path, help="report folder (default: runs/run-<timestamp>)")
    p.add_argument("--json", action="store_true", help="print the results JSON instead of the tables")
    p.add_argument(
        "--no-next",
        action="store_true",
        help="skip the static and batched sweeps that test the write-ups' closing predictions",
    )
    add_sweep_arguments(p)
    add_record_arguments(p)
    p.add_argument("--quick", action="store_true", help="every experiment at reduced size, the whole report")
    p.add_argument("--no-nsys", action="store_true", help="--quick: skip the Nsight Systems traces")


def print_outcome(o: RunOutcome) -> None:
    """The run's tables, in the order the job measured them."""
    from probe.commands._sweep import print_sweep
    from probe.render import terminal
    from probe.render.console import stdout

    console = stdout()
    print_sweep(o.results, f"probe run: {o.results.config.model} {o.results.dtype}")
    console.print(terminal.serving_table(o.results))
    if o.next_results:
        extra = o.combined.cells[len(o.results.cells) :]
        shown = type(o.results)(extra, o.results.env, o.results.config)
        console.print(terminal.cells_table(shown, "the next steps: " + " and ".join(o.next_results)))
    report = o.report
    if (line := terminal.self_check_line(report)) is not None:
        console.print(line)
    console.print(terminal.digest_table(report.ledgers))
    console.print(terminal.figures_table(o.figures))
    for line in terminal.floor_lines(report):
        console.print(line)
    if report.machine is not None:
        console.print(terminal.predictions_table(report.predictions, report.machine))
    for line in terminal.diagnosis_lines(report):
        console.print(line)
    for line in terminal.verdict_lines(report.verdicts):
        console.print(line)
    for line in terminal.problem_lines(report):
        console.print(line)
    console.print(f"report folder: {o.out}  ({o.seconds:.0f} s)")


def main(args: argparse.Namespace) -> int:
    from engines.models import resolve_device
    from probe.capture.pipeline import RunOptions, defaults_for, run_job
    from probe.capture.sweep import cell_count
    from probe.commands._sweep import print_problems, sweep_interrupts, watch_for
    from probe.render import terminal

    check_sweep_arguments(args)
    device = resolve_device(getattr(args, "device", "auto"))
    base = defaults_for(device.type, args.quick)
    if hasattr(args, "prompts"):  # the user's prompt lengths: naive is timed at all of them unless told otherwise
        base = {k: v for k, v in base.items() if k != "naive_prompts"}
    cfg = from_args(BenchConfig, args, **base)
    out = args.out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    options = RunOptions(
        quick=args.quick,
        next_sweeps=not args.no_next,
        nsys=not args.no_nsys,
        resume=args.resume,
        force=args.force,
        executor=args.executor,
        address=args.address,
    )
    lines = terminal.Lines(terminal.line_stream(args.json), "probe run")
    with sweep_interrupts(out, cell_count(cfg), lambda: lines.done):
        outcome = run_job(cfg, out, options, watch_for(args.json, lines))
    if args.json:
        print_json(outcome.results.to_json())
    else:
        print_outcome(outcome)
    print_problems(outcome.warnings, outcome.errors)
    return record(args, "run", outcome.code, folder=out)
