"""Record a baseline: the default CPU configuration's launch counts and timings, in one JSON file to commit.

The file is a results file (probe bench's results.json) with a "baseline" marker, so `probe compare` reads
it like any results folder. CI reruns this same command (`probe baseline --out /tmp/current.json`) and
compares with `--counts-only`: the counts are exact on any machine with the same torch and transformers,
the timings only mean something on the machine that recorded them. A cell that ran while other processes took the
CPU is warned of on stderr, as probe bench does: its timings are unreliable (its counts are exact under any load).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from probe.commands._record import add_record_arguments, record
from probe.errors import ProbeError
from probe.flags import add_arguments as add_config_arguments
from probe.flags import from_args
from probe.settings import BenchConfig

DEFAULT_OUT = Path("baselines/cpu-tiny.json")
# Why these: both engines (the cache's bookkeeping is what regresses, naive is the reference), two prompt
# lengths so a count that depends on the context shows up, 32 tokens x 5 runs = 155 step samples a cell
# (plenty for the U test; TTFT and tok/s get 5, the fewest that can reach p < 0.01), all well under a
# minute on 2 cores.
# One intra-op thread: on a shared 2-core machine two threads stall at every op's barrier whenever another
# job holds a core (measured here: cached p16 steps of 264 ms with 2 threads, 8 ms with 1, same load).
BASELINE_DEFAULTS = dict(
    engines=("naive", "cached"),
    prompts=(16, 64),
    new_tokens=32,
    runs=5,
    warmup=1,
    model="tiny",
    dtype="float32",
    device="cpu",
    threads=1,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, BenchConfig, overrides_only=True, defaults=BASELINE_DEFAULTS)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"baseline file to write (default: {DEFAULT_OUT})")
    add_record_arguments(p, None)


def baseline_json(results) -> dict:
    """A results file with the marker `probe compare` recognises; the bench config is in "config"."""
    return results.to_json() | {"baseline": {"by": "probe baseline", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}}


def main(args: argparse.Namespace) -> int:
    from probe.analysis.records.files import atomic_write
    from probe.capture.pipeline import sweep_problems
    from probe.capture.sweep import bench, check_writable, mismatches
    from probe.commands._sweep import print_problems

    cfg = from_args(BenchConfig, args, **BASELINE_DEFAULTS)
    check_writable(args.out.parent)
    start = time.perf_counter()
    results = bench(cfg)
    bad = mismatches(results)
    if bad and not cfg.allow_mismatch:
        raise ProbeError(
            f"tokens differ from naive for {', '.join(c.engine for c in bad)}: not a baseline", exit_code=1
        )
    atomic_write(args.out, json.dumps(baseline_json(results), indent=1) + "\n")
    for c in results.cells:
        print(
            f"{c.engine:>8} p{c.prompt_tokens:<5} launches/decode step {c.decode_ops}  "
            f"host {c.itl_p50_ms * 1e3:,.0f} us/step  TTFT {c.ttft_ms:.2f} ms  {c.decode_tok_s:,.1f} tok/s"
        )
    print(f"baseline written to {args.out} ({time.perf_counter() - start:.0f} s)")
    print_problems(sweep_problems(cfg, results)[0], [])  # contended cells, as probe bench warns of them
    return record(args, "baseline", results=results, source=args.out)
