"""How often `probe compare` cries wolf on this machine, and the smallest per-step slowdown it reliably catches.

(a) False positives: N comparisons of the cached engine against itself, each between two fresh measurements
    with the baseline's configuration (`probe baseline`: prompts, tokens, runs, warmup, threads): the share
    of comparisons with any timing alert, and the share of single timing tests (a cell's host us/step, TTFT
    or tokens/s) that alerted.
(b) Detection: for each injected delay (tests.variants:SlowCachedEngine busy-waits that many us per decode
    step), R comparisons of a fresh cached measurement against a fresh slowed one. A delay counts as caught
    when the cell's host us/step verdict is "regression"; reliable = caught in >= 95% of the repeats, in every
    cell, and every larger delay tried is too. The order of the two measurements alternates between repeats,
    so drift favours neither side.

Every verdict is computed at several thresholds from the same samples (the default first), so one run shows
the trade between false alarms and sensitivity. Two ways to measure a pair:

- `sessions` (default): two separate bench runs, one after the other, as a baseline recorded earlier and a
  CI run would be. In-process calls of probe.capture.sweep.bench (a fresh model, engine and warmup each time; a
  fresh process would add ~5 s of imports and measure nothing more).
- `interleaved`: both engines in one session, runs alternating A B A B, so the machine's drift hits both.

    python benchmarks/compare_noise.py [--mode sessions|interleaved] [--self-runs 20] [--repeats 10]
                                       [--delays 0,100,200,400,800,1600,3200] [--thresholds 1.10,1.25,1.5]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW = "tests.variants:SlowCachedEngine"
SLOW_US_VAR = "PROBE_SLOW_US"  # tests.variants.SLOW_US_VAR, read when the engine is built


def session(cfg, engine: str):
    from probe.analysis.regression.samples import from_results
    from probe.capture.sweep import bench

    return from_results(bench(dataclasses.replace(cfg, engines=(engine,))), engine)


def measure_sessions(cfg, base: str, cur: str, flip: bool):
    """Two bench runs, one after the other (the current one first when `flip`); returns (baseline, current)."""
    if flip:
        c = session(cfg, cur)
        return session(cfg, base), c
    b = session(cfg, base)
    return b, session(cfg, cur)


def measure_interleaved(cfg, base: str, cur: str, flip: bool):
    """Both engines in one session, runs alternating (probe ab); returns (baseline, current)."""
    from probe.capture.ab import interleaved

    return interleaved(cfg, base, cur, flip)


def timing_alerts(result) -> list:
    return [r for r in result.rows if r.kind == "timing" and r.verdict == "regression"]


def self_noise(cfg, measure, runs: int, thresholds: list[float]) -> None:
    from probe.analysis.regression.compare import compare
    from probe.analysis.regression.rules import CompareRules

    print(f"(a) {runs} comparisons of the cached engine against itself")
    print(
        f"{'#':>3} {'cell':<16} {'metric':<14} {'base':>9} {'current':>9} {'ratio':>7} {'95% CI':>13} {'p':>9} "
        f"verdict at {thresholds[0]:g}"
    )
    flagged = dict.fromkeys(thresholds, 0)
    alerted = dict.fromkeys(thresholds, 0)
    tests = count_alerts = 0
    for i in range(runs):
        base, cur = measure(cfg, "cached", "cached", flip=i % 2 == 1)
        results = {t: compare(base, cur, CompareRules(threshold=t)) for t in thresholds}
        for t, result in results.items():
            flagged[t] += bool(timing_alerts(result))
            alerted[t] += len(timing_alerts(result))
        first = results[thresholds[0]]
        count_alerts += sum(r.kind == "count" and r.verdict == "regression" for r in first.rows)
        tests += sum(r.kind == "timing" and r.verdict != "too few samples" for r in first.rows)
        for r in first.rows:
            if r.kind == "timing":
                ci = f"{r.ci_low:.3f}..{r.ci_high:.3f}" if r.ci_low is not None else "-"
                p = f"{r.p_value:.2g}" if r.p_value is not None else "-"
                print(
                    f"{i:>3} {r.key:<16} {r.label:<14} {r.baseline:>9.1f} {r.current:>9.1f} {r.ratio:>7.3f} "
                    f"{ci:>13} {p:>9} {r.verdict}",
                    flush=True,
                )
    for t in thresholds:
        print(
            f"threshold {t:g}: {flagged[t]}/{runs} comparisons raised a timing alert "
            f"({100 * flagged[t] / runs:.0f}%); {alerted[t]}/{tests} timing tests alerted "
            f"({100 * alerted[t] / max(tests, 1):.1f}%)"
        )
    print(f"count alerts: {count_alerts}")


def detection(cfg, measure, delays: list[float], repeats: int, thresholds: list[float]) -> None:
    from probe.analysis.regression.compare import compare
    from probe.analysis.regression.rules import CompareRules

    print(f"\n(b) busy-wait injected per decode step, {repeats} baseline/slowed pairs per delay")
    print(
        f"{'delay us':>8} {'cell':<16} {'base step us':>12} {'delay %':>8} {'ratio p5':>8} {'median':>7} "
        f"{'p95':>6}  " + " ".join(f"{'caught@' + format(t, 'g'):>12}" for t in thresholds)
    )
    reliable: dict[float, list[bool]] = {t: [] for t in thresholds}
    for delay in delays:
        os.environ[SLOW_US_VAR] = str(delay)
        caught: dict[tuple[float, str], int] = {}
        ratios: dict[str, list[float]] = {}
        steps: dict[str, list[float]] = {}
        for i in range(repeats):
            base, cur = measure(cfg, "cached", SLOW, flip=i % 2 == 1)
            for t in thresholds:
                for r in compare(base, cur, CompareRules(threshold=t)).rows:
                    if r.metric == "host_us_per_step":
                        caught[(t, r.key)] = caught.get((t, r.key), 0) + (r.verdict == "regression")
                        if t == thresholds[0]:
                            ratios.setdefault(r.key, []).append(r.ratio)
                            steps.setdefault(r.key, []).append(r.baseline)
        for key in ratios:
            step = statistics.median(steps[key])
            rs = sorted(ratios[key])
            lo, hi = rs[int(0.05 * (len(rs) - 1))], rs[round(0.95 * (len(rs) - 1))]
            print(
                f"{delay:>8g} {key:<16} {step:>12,.0f} {100 * delay / step:>7.1f}% {lo:>8.3f} "
                f"{statistics.median(rs):>7.3f} {hi:>6.3f}  "
                + " ".join(f"{str(caught[(t, key)]) + '/' + str(repeats):>12}" for t in thresholds),
                flush=True,
            )
        for t in thresholds:
            reliable[t].append(delay > 0 and all(caught[(t, k)] >= 0.95 * repeats for k in ratios))
    for t in thresholds:
        # Reliable from d on: d and every larger delay tried are caught in >= 95% of repeats in every cell.
        found = next((d for i, d in enumerate(delays) if all(reliable[t][i:])), None)
        print(
            f"threshold {t:g}: smallest delay from which every delay tried is caught in >= 95% of repeats "
            f"in every cell: {'none' if found is None else f'{found:g} us per decode step'}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("sessions", "interleaved"), default="sessions")
    p.add_argument("--self-runs", type=int, default=20)
    p.add_argument("--delays", default="0,100,200,400,800,1600,3200", help="us per decode step")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--thresholds", default="1.10,1.25,1.5", help="the first one is reported in full")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: probe baseline's)")
    p.add_argument("--skip-self", action="store_true")
    p.add_argument("--skip-sweep", action="store_true")
    args = p.parse_args()

    sys.path.insert(0, str(ROOT))  # the slowed engine lives in tests.variants
    import torch

    from probe.analysis.regression.rules import ALPHA, MIN_SAMPLES
    from probe.capture.config import BenchConfig
    from probe.commands.baseline import BASELINE_DEFAULTS

    torch.set_num_threads(args.threads or BASELINE_DEFAULTS["threads"])
    cfg = BenchConfig(**{**BASELINE_DEFAULTS, "engines": ("cached",)})
    thresholds = [float(t) for t in args.thresholds.split(",")]
    measure = measure_sessions if args.mode == "sessions" else measure_interleaved
    print(
        f"mode {args.mode}; probe baseline's configuration: prompts {cfg.prompts}, {cfg.new_tokens} tokens, "
        f"{cfg.runs} runs + {cfg.warmup} warmup, {torch.get_num_threads()} thread(s); alpha {ALPHA}, "
        f"min samples {MIN_SAMPLES}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    start = time.perf_counter()
    if not args.skip_self:
        self_noise(cfg, measure, args.self_runs, thresholds)
    if not args.skip_sweep:
        detection(cfg, measure, [float(d) for d in args.delays.split(",")], args.repeats, thresholds)
    print(f"\n{time.perf_counter() - start:.0f} s; load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
