"""The host floor: a single-token forward with no cache (issue vs wait), then a cached decode step timed
piece by piece (forward ops, per-layer cache writes, sequence-length read-back, mask-size query, mask
construction, sampling, sync), so the gap between the two is measured rather than attributed.
"""

from __future__ import annotations

import argparse

from probe.commands import print_json
from probe.errors import ProbeError
from probe.settings import DTYPE_CHOICES, DTYPE_HELP, MODEL_HELP


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="auto", help=f"{MODEL_HELP} (default: auto)")
    p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES, help=f"{DTYPE_HELP} (default: auto)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, ... (default: auto)")
    p.add_argument("--context", type=int, default=64, help="prompt length before the timed decode steps (64)")
    p.add_argument("--steps", type=int, default=64, help="decode steps timed piece by piece (64)")
    p.add_argument("--reps", type=int, default=50, help="single-token forwards timed for the floor (50)")
    p.add_argument("--json", action="store_true", help="print JSON")


def main(args: argparse.Namespace) -> int:
    if args.steps < 1 or args.reps < 1 or args.context < 1:
        raise ProbeError("--context, --steps and --reps must be at least 1")
    from probe.capture.machine import measure
    from probe.render import terminal
    from probe.render.console import stdout

    r = measure(args.model, args.dtype, args.device, args.context, args.steps, args.reps)
    if args.json:
        print_json(r.to_json())
        return 0
    console = stdout()
    for item in terminal.overhead_output(r):
        console.print(item)
    return 0
