"""Compare two engines measured interleaved in one process: they decode in lockstep, one step of each
in turn (ABBA), at every prompt length, so the machine's drift lands on both, and the same rule as
`probe compare` judges the difference: exact launch counts (any increase alerts and names the ops), and
timings that alert only when the ratio of medians passes --threshold and a Mann-Whitney U test gives
p < --alpha (a timing measured under contention is not judged). This is the timing comparison to trust on a
shared machine; a stored baseline against a later session is only good for the counts. The CPU figures of each
side's decode phases are sampled (--telemetry-ms; 0 turns them off, and with them the contention rule, so every
timing is judged). The defaults below are
this command's own (a small model on the CPU, two prompt lengths), not probe bench's. Two different engines (their
`name`s differ: naive and cached) launch different ops by design, so their counts are listed as a difference, not
gated, unless --gate-counts; two versions of one engine (a variant class keeping its `name`) are gated as probe
compare gates them. Exit codes: 0 no regression, 1 regression, 2 unusable input.
"""

from __future__ import annotations

import argparse

from engines import engine_class
from probe.analysis.regression.rules import CompareRules
from probe.commands.compare import add_output_arguments, write_outputs
from probe.flags import add_arguments as add_config_arguments
from probe.flags import from_args
from probe.settings import BenchConfig

# Why these: two prompt lengths, 32 tokens x 6 runs a side (186 step samples each) in about 20 s on 2 cores.
AB_DEFAULTS = dict(
    prompts=(16, 64), new_tokens=32, runs=6, warmup=1, model="tiny", dtype="float32", device="cpu", threads=1
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", help="the reference engine (name or module:Class)")
    p.add_argument("current", help="the engine under test (name or module:Class)")
    add_config_arguments(
        p,
        BenchConfig,
        overrides_only=True,
        skip=("engines", "allow_mismatch", "annotate"),
        defaults=AB_DEFAULTS,
    )
    add_config_arguments(p, CompareRules, skip=("window", "counts_only"))
    p.add_argument(
        "--gate-counts",
        action="store_true",
        help="alert when the current engine launches more ops than the base even when they are different engines "
        "(default: only when both are the same engine, by name)",
    )
    add_output_arguments(p)


def main(args: argparse.Namespace) -> int:
    from probe.analysis.regression.compare import compare
    from probe.capture.ab import interleaved

    cfg = from_args(BenchConfig, args, **AB_DEFAULTS)
    rules = from_args(CompareRules, args)
    base, current = interleaved(cfg, args.base, args.current)
    env = base.env
    device = f"{env.device} ({env.device_name})" if env and env.device_name != env.device else (env and env.device)
    where = f"model {cfg.model} ({cfg.dtype}) on {device}"
    shape = f"prompts {','.join(map(str, sorted(cfg.prompts)))}, {cfg.new_tokens} tokens x {cfg.runs} runs a side"
    header = f"probe ab: {args.base} (base) vs {args.current} (current), {where}, {shape}"
    gate = args.gate_counts or engine_class(args.base).name == engine_class(args.current).name
    return write_outputs(compare(base, current, rules, gate_counts=gate), args.markdown, args.json, header=header)
