"""Benchmark engines across prompt lengths: TTFT, ITL, decode tokens/s, peak memory and token parity."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from probe.capture.config import BenchConfig
from probe.commands.history import add_record_arguments, record
from probe.flags import add_arguments as add_config_arguments
from probe.flags import from_args

HELP = "time engines across prompt lengths, with token parity against naive"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, BenchConfig)
    p.add_argument("--out", type=Path, help="folder for results.json and cells.parquet")
    p.add_argument("--json", action="store_true", help="print the results JSON to stdout instead of a table")
    add_record_arguments(p)


def execute(cfg: BenchConfig, out: Path | None, output: str = "table", title: str | None = None, model=None):
    """Run a sweep (on `model` when given, already built from cfg's model and dtype); print its "table" (with a
    progress bar), its "json", or "none" (with a progress bar). Returns (results, exit code)."""
    from engines.models import resolve_device
    from probe import render
    from probe.capture.bench import bench, cell_count, check_writable, mismatches, runs_per_cell, settled
    from probe.capture.config import validate

    cfg = settled(cfg)
    validate(cfg)
    device = resolve_device(cfg.device)
    if out is not None:
        check_writable(out)
    total = cell_count(cfg) * runs_per_cell(cfg, device)
    partial = {}
    try:
        with render.ProgressBar(total, enabled=output != "json") as bar:
            results = bench(cfg, out, progress=bar, on_cell=lambda r: partial.update(results=r), model=model)
    except KeyboardInterrupt:
        kept = len(partial["results"].cells) if partial else 0
        where = f" in {out}" if out else ""
        print(f"probe: interrupted; {kept} finished cell(s) kept{where}", file=sys.stderr)
        raise SystemExit(130) from None
    if output == "json":
        print(json.dumps(results.to_json(), indent=1))
    elif output == "table":
        console = render.stdout()
        console.print(render.cells_table(results, title))
        if (telemetry := render.telemetry_table(results)) is not None:
            console.print(telemetry)
    bad = mismatches(results)
    if bad and not cfg.allow_mismatch:
        names = ", ".join(f"{c.engine}@p{c.prompt_tokens}" + (f"b{c.batch}" if c.batch > 1 else "") for c in bad)
        print(f"probe: error: tokens differ from naive for {names} (use --allow-mismatch to accept)", file=sys.stderr)
        return results, 1
    return results, 0


def main(args: argparse.Namespace) -> int:
    cfg = from_args(BenchConfig, args)
    results, code = execute(cfg, args.out, "json" if args.json else "table")
    return record(args, "bench", code, results=results, source=args.out)
