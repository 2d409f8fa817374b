"""Record one engine at one prompt length for a few decode steps: a torch.profiler chrome trace, or with
--nsys an Nsight Systems report and its SQLite export. Warmup is not recorded. Every range of the
annotation vocabulary (probe.capture.annotate) appears in both kinds of trace.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from probe.commands._record import add_record_arguments, record
from probe.errors import ProbeError
from probe.flags import add_arguments as add_config_arguments
from probe.flags import from_args
from probe.settings import ProfileConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, ProfileConfig)
    p.add_argument("--out", type=Path, default=Path("traces"), help="folder for the trace (default: traces)")
    p.add_argument("--nsys", action="store_true", help="run under Nsight Systems and export SQLite")
    p.add_argument("--force", action="store_true", help="replace a trace of the same name already in --out")
    p.add_argument("--annotated-run", action="store_true", help=argparse.SUPPRESS)  # the process nsys watches
    add_record_arguments(p, "--out")


def main(args: argparse.Namespace) -> int:
    from probe.analysis.ledger.build import analyze
    from probe.analysis.trace import load_trace
    from probe.capture import profile as capture
    from probe.render.console import stdout
    from probe.render.ledger import summary_table

    cfg = from_args(ProfileConfig, args)
    if args.annotated_run:
        capture.run_annotated(cfg)
        return 0
    if args.nsys:
        result = capture.profile_nsys(cfg, args.out, force=args.force)
    else:
        result = capture.profile_torch(cfg, args.out, force=args.force)
    for path in (result.trace, result.nsys_rep, result.sqlite, result.meta):
        if path is not None:
            print(path)
    trace = result.trace or result.sqlite
    if trace is None:  # neither capture returned a trace: it would have raised; said rather than assumed
        raise ProbeError("probe profile wrote no trace")
    stdout().print(summary_table(analyze(load_trace(trace))))
    return record(args, "profile", traces=[trace], home=args.out)
