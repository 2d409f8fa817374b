"""probe compare's rule, as knobs: one definition of each default, scipy-free, so that building a command's flags
(`probe compare --help`, `probe ab --help`, `probe history check --help`) loads no statistics.

`CompareRules` is what `probe.analysis.regression.compare.compare` and the history's judge
(`probe.analysis.regression.history.judge`) read; its flags come from `probe.flags` (`add_arguments(parser,
CompareRules, skip=...)`), so the help text and the default live in the field. A value out of range is a one-line
ProbeError when the rules are built.
"""

from __future__ import annotations

from dataclasses import dataclass

from probe.errors import ProbeError
from probe.flags import knob

THRESHOLD = 1.10  # asv's default factor: a 10% move of the median is the smallest one worth a look
ALPHA = 0.01  # two-sided Mann-Whitney U significance level
MIN_SAMPLES = 5  # per side; with 5 and 5 the smallest two-sided p is 2/252 = 0.008, just under ALPHA
WINDOW = 5  # earlier runs whose timings the latest run is held against (the counts: against the previous one)


@dataclass(frozen=True)
class CompareRules:
    threshold: float = knob(THRESHOLD, "ratio of medians a timing must pass to alert")
    alpha: float = knob(ALPHA, "Mann-Whitney U significance level a timing must pass to alert")
    min_samples: int = knob(MIN_SAMPLES, "samples each side needs before a timing is judged")
    counts_only: bool = knob(False, "gate only on the deterministic launch counts (CI: machines differ in speed)")
    window: int = knob(WINDOW, "probe history: earlier runs whose timing samples are pooled")

    def __post_init__(self):
        if not self.threshold > 1:
            raise ProbeError(f"--threshold must be above 1 (a ratio such as 1.10), got {self.threshold}")
        if not 0 < self.alpha < 1:
            raise ProbeError(f"--alpha must be between 0 and 1, got {self.alpha}")
        if self.min_samples < 1:
            raise ProbeError(f"--min-samples must be at least 1, got {self.min_samples}")
        if self.window < 1:
            raise ProbeError(f"--window must be at least 1, got {self.window}")

    def to_json(self) -> dict:
        return {
            "threshold": self.threshold,
            "alpha": self.alpha,
            "min_samples": self.min_samples,
            "counts_only": self.counts_only,
            "window": self.window,
        }


DEFAULTS = CompareRules()
ONE_RUN = CompareRules(window=1)  # probe history show: a run against its predecessor alone
