"""Compare two engines measured interleaved in one process: they decode in lockstep, one step of each
in turn (ABBA), at every prompt length, so the machine's drift lands on both, and the same rule as
`probe compare` judges the difference: exact launch counts (any increase alerts and names the ops), and
timings that alert only when the ratio of medians passes --threshold and a Mann-Whitney U test gives
p < --alpha. This is the timing comparison to trust on a shared machine; a stored baseline against a later
session is only good for the counts. Exit codes: 0 no regression, 1 regression, 2 unusable input.
"""

from __future__ import annotations

import argparse
import sys

from probe.analysis.compare import ALPHA, THRESHOLD
from probe.capture.config import BenchConfig
from probe.commands import print_json
from probe.flags import add_arguments as add_config_arguments
from probe.flags import from_args

HELP = "A/B two engines interleaved in one process; exit 1 if the second regressed"
# Why these: two prompt lengths, 32 tokens x 6 runs a side (186 step samples each) in about 20 s on 2 cores.
AB_DEFAULTS = dict(
    prompts=(16, 64), new_tokens=32, runs=6, warmup=1, model="tiny", dtype="float32", device="cpu", threads=1
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", help="the reference engine (name or module:Class)")
    p.add_argument("current", help="the engine under test (name or module:Class)")
    add_config_arguments(
        p, BenchConfig, overrides_only=True, skip=("engines", "allow_mismatch", "annotate", "telemetry_ms")
    )
    p.add_argument("--threshold", type=float, default=THRESHOLD, help=f"ratio of medians (default: {THRESHOLD})")
    p.add_argument("--alpha", type=float, default=ALPHA, help=f"U test significance level (default: {ALPHA})")
    p.add_argument("--markdown", help="also write the report as Markdown")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")


def main(args: argparse.Namespace) -> int:
    from probe.analysis.compare import compare
    from probe.analysis.files import atomic_write
    from probe.capture.ab import interleaved
    from probe.commands.compare import print_report

    cfg = from_args(BenchConfig, args, **AB_DEFAULTS)
    base, current = interleaved(cfg, args.base, args.current)
    result = compare(base, current, threshold=args.threshold, alpha=args.alpha)
    for w in result.warnings:
        print(f"probe: WARNING: {w}", file=sys.stderr)
    if args.markdown:
        from pathlib import Path

        atomic_write(Path(args.markdown), result.to_markdown())
    if args.json:
        print_json(result.to_json())
    else:
        print_report(result)
    return 1 if result.regressed else 0
