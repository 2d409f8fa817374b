"""The host floor: a single-token forward with no cache (issue vs wait), then a cached decode step timed
piece by piece (forward ops, per-layer cache writes, sequence-length read-back, mask-size query, mask
construction, sampling, sync), so the gap between the two is measured rather than attributed.
"""

from __future__ import annotations

import argparse

from probe.capture.config import DTYPE_CHOICES, DTYPE_HELP, MODEL_HELP
from probe.commands import print_json

HELP = "measure the host floor and time a cached step's bookkeeping piece by piece"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="auto", help=f"{MODEL_HELP} (default: auto)")
    p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES, help=f"{DTYPE_HELP} (default: auto)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, ... (default: auto)")
    p.add_argument("--context", type=int, default=64, help="prompt length before the timed decode steps (64)")
    p.add_argument("--steps", type=int, default=64, help="decode steps timed piece by piece (64)")
    p.add_argument("--reps", type=int, default=50, help="single-token forwards timed for the floor (50)")
    p.add_argument("--json", action="store_true", help="print JSON")


def main(args: argparse.Namespace) -> int:
    from rich.table import Table

    from probe import render
    from probe.capture.machine import measure
    from probe.errors import ProbeError

    if args.steps < 1 or args.reps < 1 or args.context < 1:
        raise ProbeError("--context, --steps and --reps must be at least 1")
    r = measure(args.model, args.dtype, args.device, args.context, args.steps, args.reps)
    if args.json:
        print_json(r.to_json())
        return 0
    console = render.stdout()
    console.print(f"[bold]floor[/]: single-token forward, no cache, {r.model} {r.dtype} on {r.device}")
    console.print(
        f"  {r.floor_ms:.3f} ms synced, of which {r.floor_issue_ms:.3f} ms issuing (host) and "
        f"{r.floor_wait_ms:.3f} ms waiting for the device; {r.floor_unsynced_ms:.3f} ms per forward back to back "
        "with one sync at the end"
    )
    console.print(
        f"  {r.launches_per_forward} {r.launch_kind} per forward x {r.host_us_per_launch:.2f} us "
        f"= {r.launches_per_forward * r.host_us_per_launch / 1e3:.3f} ms"
    )
    table = Table(
        title=f"cached decode step at context {r.context_tokens}: {r.cached_step_ms:.3f} ms, "
        f"{r.cached_launches_per_forward} ops per forward",
        title_justify="left",
    )
    for col in ("piece", "range", "median us", "share %"):
        table.add_column(col, justify="left" if col in ("piece", "range") else "right")
    for piece in r.pieces:
        table.add_row(piece.name, piece.range, f"{piece.median_us:.1f}", f"{piece.share_pct:.1f}")
    console.print(table)
    by = {p.range: p.median_us / 1e3 for p in r.pieces}
    loop = by["sample"] + by["sync"] + by["decode"]
    console.print(
        f"gap above the floor: {r.gap_ms:.3f} ms = bookkeeping {r.bookkeeping_ms:.3f} "
        f"({r.explained_pct:.0f}%) + sampling, sync and loop {loop:.3f} + the forward's own ops beyond the "
        f"floor's {r.gap_ms - r.bookkeeping_ms - loop:+.3f} (medians, so the sum is approximate)"
    )
    device = (
        f"device busy {r.device_pct:.1f}% of the step"
        if r.device_pct is not None
        else "no device: the host does the compute too"
    )
    console.print(
        f"profiled decode step: {r.step_dispatched:g} {r.step_dispatch}; host work {r.host_pct:.1f}% of "
        f"the step; {device}; {r.compute_in_ops_pct:.1f}% inside aten ops (compute), "
        f"{100 - r.compute_in_ops_pct:.1f}% around them"
    )
    return 0
