"""The statistics compare judges timings with: the ratio of medians, its bootstrap interval, and the Mann-Whitney U
test (scipy, imported where a timing row with enough samples first needs it: building a command's flags or a
counts-only gate does not pay for it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

import numpy as np

CONFIDENCE = 0.95  # of the bootstrap interval around the ratio
RESAMPLES = 2000  # bootstrap resamples: enough for a stable 95% percentile interval
SEED = 0  # the bootstrap's, so that the same inputs always print the same interval


def median(values: Iterable[float]) -> float:
    return float(statistics.median(values))


def can_reach(n_a: int, n_b: int, alpha: float) -> bool:
    """asv's condition: the sample sizes allow a two-sided exact U test p below alpha at all."""
    return 2 / math.comb(n_a + n_b, min(n_a, n_b)) < alpha


def ratio_of_medians(base: Sequence[float], cur: Sequence[float]) -> float | None:
    b = median(base)
    return median(cur) / b if b > 0 else None


def bootstrap_ratio(base: Sequence[float], cur: Sequence[float]) -> tuple[float, float] | tuple[None, None]:
    """Percentile bootstrap interval of median(current) / median(baseline), the two sides resampled apart."""
    from scipy import stats

    a, b = np.asarray(base, float), np.asarray(cur, float)
    if np.median(a) <= 0:
        return None, None

    def statistic(x, y, axis=-1):
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    seed = {"rng": np.random.default_rng(SEED)}
    if "rng" not in stats.bootstrap.__code__.co_varnames:  # scipy < 1.15 names it random_state
        seed = {"random_state": np.random.default_rng(SEED)}
    with np.errstate(divide="ignore", invalid="ignore"):
        res = stats.bootstrap(
            (a, b),
            statistic,
            n_resamples=RESAMPLES,
            vectorized=True,
            paired=False,
            confidence_level=CONFIDENCE,
            method="percentile",
            batch=500,
            **seed,
        )
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (low, high) if math.isfinite(low) and math.isfinite(high) else (None, None)


def mann_whitney_p(base: Sequence[float], cur: Sequence[float]) -> float:
    from scipy import stats

    if len(set(base) | set(cur)) == 1:
        return 1.0  # every value equal: nothing to rank
    return float(stats.mannwhitneyu(base, cur, alternative="two-sided").pvalue)
