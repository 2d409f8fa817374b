"""What two measurements can be held to each other: the one rule `probe compare`, the explorer's Compare and its
Alerts share, and the words they say it in.

Two sides compare when they are of one family (results with results, traces with traces), their recorded
configurations agree (the model and dtype; a trace's sidecar adds the prompt and the batch), and they share a key:
a bench cell (engine, prompt, new tokens, batch) or a trace's step kind. Anything else is refused in one line
(`ProbeError`). Nothing is held across step kinds: a prefill is not a slower decode.

Within a shared kind, a step's work is what its engine marker says it processed (its sequences, new tokens and
cached context: `Unit.work`). Where the two sides' work differs (two engines serving two models, two batch sizes)
their figures are shown and the difference is said, but nothing is judged and no change is a percentage: a
launch count that grew is another workload, not a regression.
"""

from __future__ import annotations

from dataclasses import dataclass

from probe.analysis.regression.samples import SampleSet
from probe.errors import ProbeError


@dataclass(frozen=True)
class Comparable:
    """What two sides share (keys in the baseline's order) and, per shared key, how their work differs."""

    keys: tuple[str, ...]
    differs: tuple[str, ...] = ()  # "decode: 32 sequences, ... (baseline) vs ... (current)", a line a key

    @property
    def work_differs(self) -> bool:
        return bool(self.differs)

    @property
    def warning(self) -> str | None:
        """The one line every view says when the work differs; None when it is the same (or not said)."""
        if not self.differs:
            return None
        return "the steps did different work, so nothing is judged and no change is a percentage: " + "; ".join(
            self.differs
        )


def check_configs(base: SampleSet, cur: SampleSet) -> None:
    """One family, and every configuration figure both sides recorded the same; ProbeError otherwise."""
    if base.family != cur.family:
        raise ProbeError(
            f"cannot compare a {base.family} input ({base.source}) with a {cur.family} input "
            f"({cur.source}): compare results with results, traces with traces"
        )
    if (mismatch := base.config.mismatch(cur.config)) is not None:
        name, b, c = mismatch
        raise ProbeError(f"mismatched configs: {name} is {b} in {base.source} but {c} in {cur.source}")


def comparable(base: SampleSet, cur: SampleSet) -> Comparable:
    """The keys the two sides share and how their work differs; ProbeError when nothing can be compared."""
    check_configs(base, cur)
    keys = tuple(k for k in base.units if k in cur.units)
    if not keys:
        raise ProbeError(
            f"mismatched configs: no {'step kind' if base.family == 'trace' else 'cell'} in common "
            f"(baseline: {', '.join(base.units)}; current: {', '.join(cur.units)})"
        )
    differs = []
    for k in keys:
        b, c = base.units[k].work, cur.units[k].work
        if b is not None and c is not None and b != c:
            differs.append(f"{k}: {b} (baseline) vs {c} (current)")
    return Comparable(keys, tuple(differs))
