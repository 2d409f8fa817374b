"""The telemetry sampler's cost to the tiny model's decode step, measured side by side in one process.

Runs alternate with and without a Sampler in ABBA order (on/off, then off/on), so slow drift lands on both sides
equally, and runs are short so the two halves of a pair sit a fraction of a second apart. A 10 ms sampler
touches one step in (10 ms / step time), so the median step can hide it: the headline is the mean step (decode
time / steps), as the median over pairs of the on/off ratio, with a bootstrap 95% interval.

On a shared machine other processes slow whole runs by 2x to 50x for seconds at a time. Pairs where either run's
mean step is over QUIET_LIMIT x the median of all runs (both arms pooled, so the cut is the same for both) are
reported separately as "quiet pairs"; the all-pairs figure is printed too. The sampler thread's own CPU time is
printed as well: with a core to spare it is the whole cost. Target: at most 1% at the default 10 ms.

    python -m benchmarks.telemetry_overhead [--pairs 200] [--interval-ms 10] [--device cpu] [--threads N]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.paired import report, run_pairs
from engines import engine_class
from engines.models import load_model, prompt_ids
from probe.capture.loop import generate
from probe.capture.telemetry.backends import open_backends
from probe.capture.telemetry.samplers import DEFAULT_INTERVAL_MS, ProcessSampler, Sampler

MODEL = "tiny"  # a step of a few ms on CPU, the host-bound regime where a thread hurts most
ENGINE = "cached"
PROMPT_TOKENS = 16
NEW_TOKENS = 32  # short runs keep both halves of a pair close in time; 31 steps still span ~10 samples
PAIRS = 200  # many short pairs: on a shared 2-core box, bursts from other processes dominate the spread
WARMUP = 3  # unrecorded runs: allocator, caches and thread pools settle


def run(engine, prompt, new_tokens: int, interval_ms: float | None, samplers: list, mode: str):
    """One generation; with `interval_ms`, inside a sampler (set up outside the timed steps, as bench does):
    a thread of this process, or a child process (what bench uses on Linux)."""
    if interval_ms is None:
        return generate(engine, prompt, new_tokens)
    if mode == "process":
        sampler = ProcessSampler(interval_ms, prompt.device, on_note=lambda note: None)
    else:
        sampler = Sampler(interval_ms, open_backends(prompt.device)[0])
    with sampler:
        gen = generate(engine, prompt, new_tokens)
    samplers.append(sampler)
    return gen


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=PAIRS)
    p.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    p.add_argument("--interval-ms", type=float, default=DEFAULT_INTERVAL_MS)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's, one per core)")
    p.add_argument(
        "--mode",
        choices=("process", "thread"),
        default="process",
        help="sampler in a child process (bench's default on Linux) or a thread of this one",
    )
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = load_model(MODEL, device=args.device)
    engine = engine_class(ENGINE)(model)
    prompt = prompt_ids(PROMPT_TOKENS, 1, model.config.vocab_size).to(args.device)
    for _ in range(WARMUP):
        generate(engine, prompt, args.new_tokens)

    samplers: list = []
    pairs = run_pairs(
        lambda: run(engine, prompt, args.new_tokens, args.interval_ms, samplers, args.mode),
        lambda: run(engine, prompt, args.new_tokens, None, samplers, args.mode),
        args.pairs,
    )
    print(
        f"{MODEL}/{ENGINE} p{PROMPT_TOKENS} +{args.new_tokens} on {args.device}, torch threads "
        f"{torch.get_num_threads()}, interval {args.interval_ms:g} ms, sampler in a {args.mode}, ABBA pairs"
    )
    report(pairs)
    rows = sum(len(s.samples) for s in samplers)
    span_ns = sum(s.samples[-1]["t_ns"] - s.samples[0]["t_ns"] for s in samplers)
    thread_pct = 100 * sum(s.thread_cpu_ns for s in samplers) / span_ns
    print(
        f"sampler: {rows / span_ns * 1e9:.1f} rows/s; sampling thread CPU {thread_pct:.2f}% of one core; "
        f"{sum(s.missed for s in samplers)} ticks missed"
    )


if __name__ == "__main__":
    main()
