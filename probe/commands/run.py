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
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from probe.commands import print_json
from probe.commands._record import add_record_arguments, record
from probe.errors import ProbeError
from probe.flags import add_arguments as add_config_arguments
from probe.flags import add_sweep_arguments, check_sweep_arguments, from_args
from probe.here import device_here, shown
from probe.settings import BenchConfig, defaults_for

if TYPE_CHECKING:
    from probe.capture.pipeline import RunOutcome


def shown_defaults() -> dict[str, str]:
    """What probe run uses on this machine where a flag is absent, as its help shows it: --quick's beside it where
    that differs, and on a CPU the threads it chooses."""
    device = device_here()
    full, quick = defaults_for(device, False), defaults_for(device, True)
    out = {}
    for name in dict.fromkeys([*full, *quick]):
        a, b = shown(name, full.get(name)) or "all", shown(name, quick.get(name)) or "all"
        out[name] = a if a == b else f"{a}; --quick: {b}"
    if device == "cpu":
        out["threads"] = "the count the floor runs fastest at here, 1 when other processes take the CPU"
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, BenchConfig, overrides_only=True, defaults=shown_defaults())
    p.add_argument("--out", type=Path, help="report folder (default: runs/run-<timestamp>)")
    p.add_argument("--json", action="store_true", help="print the results JSON instead of the tables")
    p.add_argument(
        "--no-next",
        action="store_true",
        help="skip the static and batched sweeps that test the write-ups' closing predictions",
    )
    add_sweep_arguments(p)
    add_record_arguments(p, "the run's --out folder")
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
    from probe.analysis.records.runfolder import claim
    from probe.capture.pipeline import RunOptions, run_job
    from probe.commands._sweep import print_problems, resume_command, sweep_interrupts, watch_for
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
        resume_command=resume_command(args.argv, "run", out),
    )
    claim(out, resume=options.resume, force=options.force)  # a refusal is one line, before anything starts
    lines = terminal.LogProgress(terminal.line_stream(args.json), "probe run")
    with lines, sweep_interrupts(lambda: "interrupted" + left_behind(out, options.resume_command)):
        try:
            outcome = run_job(cfg, out, options, watch_for(args.json, lines))
        except Exception:  # the error itself follows (probe.cli): first, what the run kept and how to finish it
            print(f"probe: the run stopped{left_behind(out, options.resume_command)}", file=sys.stderr)
            raise
    if args.json:
        print_json(outcome.results.to_json())
    else:
        print_outcome(outcome)
    print_problems(outcome.warnings, outcome.errors)
    return record(args, "run", outcome.code, folder=out, home=out)


def left_behind(out: Path, command: str | None) -> str:
    """What a run that stopped (an interrupt, a failure) left, as the rest of a sentence: report.md with the answers
    its finished cells allow, and the command that finishes it."""
    from probe.analysis.diagnosis.report import load_report
    from probe.analysis.records.runfolder import REPORT_MD

    finish = f"; to finish: {command}" if command else ""
    try:
        report = load_report(out)
    except ProbeError:
        report = None
    if report is None:
        return f" before its first cell finished: nothing kept in {out}{finish}"
    missing = f" ({len(report.missing)} parts not measured yet)" if report.missing else ""
    return f": {out / REPORT_MD} holds the answers the finished cells allow{missing}{finish}"
