"""Side-by-side overhead measurement shared by the overhead benchmarks.

Runs alternate between two arms in ABBA order (on/off, then off/on), so slow drift lands on both sides
equally, and runs are short so the two halves of a pair sit a fraction of a second apart. The headline is the
median over pairs of the on/off ratio of a run's mean step, with a bootstrap 95% interval. On a shared machine
other processes slow whole runs by 2x to 50x for seconds at a time, so pairs where either run's mean step is
over QUIET_LIMIT x the pooled median are reported apart as "quiet pairs", beside all pairs.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable

BOOTSTRAP = 2000  # resamples for the interval on the median ratio
QUIET_LIMIT = 1.2  # a run slower than this x the pooled median was hit by something far bigger than 1%


def mean_step_ms(gen) -> float:
    return gen.decode_ns / len(gen.step_ns) / 1e6


def median_step_ms(gen) -> float:
    return statistics.median(gen.step_ns) / 1e6


def run_pairs(on: Callable[[], object], off: Callable[[], object], pairs: int) -> list[tuple]:
    """`pairs` (on, off) generations in ABBA order."""
    out = []
    for i in range(pairs):
        if i % 2 == 0:
            a = on()
            b = off()
        else:
            b = off()
            a = on()
        out.append((a, b))
    return out


def overhead_pct(pairs: list, stat) -> tuple[float, float, float]:
    """Median over pairs of stat(on) / stat(off) - 1, in %, with a bootstrap 95% interval."""
    ratios = [stat(on) / stat(off) for on, off in pairs]
    rng = random.Random(0)
    boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(BOOTSTRAP))
    lo, hi = boot[int(0.025 * BOOTSTRAP)], boot[int(0.975 * BOOTSTRAP) - 1]
    return 100 * (statistics.median(ratios) - 1), 100 * (lo - 1), 100 * (hi - 1)


def report(pairs: list) -> None:
    """Print the quiet pairs' and all pairs' overhead on the mean and the median step."""
    limit = QUIET_LIMIT * statistics.median(mean_step_ms(g) for pair in pairs for g in pair)
    quiet = [pair for pair in pairs if max(map(mean_step_ms, pair)) <= limit]
    for label, chosen in ((f"quiet pairs: both runs' mean step <= {limit:.3f} ms", quiet), ("all pairs", pairs)):
        print(f"{label} ({len(chosen)} pairs)")
        for name, stat in (("mean step  ", mean_step_ms), ("median step", median_step_ms)):
            mid, lo, hi = overhead_pct(chosen, stat)
            off = statistics.median(stat(p[1]) for p in chosen)
            on = statistics.median(stat(p[0]) for p in chosen)
            print(f"  {name}  off {off:.4f} ms  on {on:.4f} ms  overhead {mid:+.2f}% (95% CI {lo:+.2f}% .. {hi:+.2f}%)")
