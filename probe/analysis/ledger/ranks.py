"""Many traces at once: the ranks of a tensor-parallel run, or a fleet's nightly traces.

Each trace is read and analyzed on its own (`analyze_one`: in a process of its own by default, probe.pool.pool_map,
or as a Ray task, probe.cluster). A trace that cannot be read, whose analysis raises (a MemoryError), or whose
process dies (killed by the OOM killer) is kept as a `TraceFailure`, named with its error, and the others are
analyzed all the same.

Then `ranks` lines them up step by step, but only when they are the ranks of one job (`check_job`, the one
definition): two traces or more, the same step names in the same order (so the same step count), and a rank for
each, distinct: every trace's `distributedInfo.rank`, else a `rank<N>` in every file name (rank3, rank_3,
rank-3). Anything else (a run's `traces/` folder, one trace per engine; a fleet's traces) is a list of traces,
each shown on its own, with no step-by-step table and no straggler. In a job, steps are matched by position (step
0 of every rank, step 1, ...). Per step: every rank's wall, GPU busy, launches (`StepLedger.dispatched`: kernel
and graph launches, or top-level ops on a CPU trace) and time in collectives (its communication kernels' time,
`StepLedger.kernels_by_category`; on a trace with no GPU side, a Gloo job's, its host collectives' time,
`StepLedger.host_collectives_ns`: Gloo runs a collective on the host until the last rank joins it, as a kernel
does on the GPU: `collectives_ns`); the slowest rank by wall, and how far it trails the median wall of the ranks.

**The straggler** (`held_by`, the one definition): the rank the others wait for. A synchronous job's ranks run at
one period, so a step's wall, read from each rank's own step marker, says when that rank entered the step, not who
holds the job back. Where every rank's step holds collectives, the step says it by their structure, with no clock
shared between the traces: a collective kernel runs until the last rank joins it, so its time holds each rank's
wait for the last one, and the rank that arrives last waits least: the step's straggler is the rank with the least
time in collectives (rule "collectives"; ties: the lower rank). Only where some rank's step holds no collective is
it the rank with the slowest wall (rule "wall"). Over the job: the rank named in most steps, counting the steps the
collectives decided if any did (ties: the lower rank); `Straggler.words` states the rule and its evidence.
"""

from __future__ import annotations

import glob
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.kernels import COMMUNICATION
from probe.analysis.ledger.types import AnalyzeOptions, StepLedger, TraceAnalysis
from probe.analysis.records.files import is_trace_file
from probe.analysis.trace import load_trace
from probe.counts import count
from probe.errors import ProbeError
from probe.text import ms

RANK_IN_NAME = re.compile(r"(?<![a-z0-9])rank[-_]?([0-9]+)(?![0-9])", re.IGNORECASE)

StragglerRule = Literal["collectives", "wall"]  # which rule named a straggler (the module docstring)


@dataclass(frozen=True)
class TraceFailure:
    source: str
    error: str  # one line


@dataclass(frozen=True)
class RankStep:
    rank: int
    wall_ns: int
    gpu_busy_ns: int
    launches: int  # StepLedger.dispatched
    collectives_ns: int = 0  # its communication kernels' time (summed durations): the collectives plus its wait in them


@dataclass(frozen=True)
class StepAcrossRanks:
    """One step position across the ranks."""

    step: int  # the step's position in every trace
    name: str  # the lowest rank's name for it
    ranks: tuple[RankStep, ...]  # by rank
    slowest_rank: int  # by wall
    slowest_wall_ns: int
    median_wall_ns: float
    rule: StragglerRule = "wall"  # "collectives" where every rank's step holds communication kernels
    held_by: int = 0  # the step's straggler under `rule` (the module docstring): the rank the others wait for
    median_collectives_ns: float = 0.0  # the median rank's time in collectives

    @property
    def trails_median_ns(self) -> float:
        return self.slowest_wall_ns - self.median_wall_ns

    @property
    def trails_median_pct(self) -> float:
        return 100 * self.trails_median_ns / self.median_wall_ns if self.median_wall_ns else 0.0

    def to_json(self) -> dict:
        return {
            "step": self.step,
            "name": self.name,
            "slowest_rank": self.slowest_rank,
            "slowest_wall_us": self.slowest_wall_ns / 1000,
            "median_wall_us": self.median_wall_ns / 1000,
            "trails_median_us": self.trails_median_ns / 1000,
            "trails_median_pct": self.trails_median_pct,
            "rule": self.rule,
            "held_by": self.held_by,
            "median_collectives_us": self.median_collectives_ns / 1000,
            "ranks": [
                {
                    "rank": r.rank,
                    "wall_us": r.wall_ns / 1000,
                    "gpu_busy_us": r.gpu_busy_ns / 1000,
                    "launches": r.launches,
                    "collectives_us": r.collectives_ns / 1000,
                }
                for r in self.ranks
            ],
        }


@dataclass(frozen=True)
class Straggler:
    """The rank the job waits on, the rule that named it, and the evidence (the module docstring)."""

    rank: int  # named in the most steps
    slowest_steps: int  # how many (the slowest wall, or the least time in collectives)
    steps: int  # of how many steps its rule decided
    rule: StragglerRule
    median_trail_pct: float | None  # wall: the median, over those steps, of how far it trailed the median rank
    collectives_ns: float | None = None  # collectives: its time in collectives, the median over those steps
    median_collectives_ns: float | None = None  # and the median rank's, the median over the same steps

    def to_json(self) -> dict:
        ns = {"collectives_ns": "collectives_us", "median_collectives_ns": "median_collectives_us"}
        return {ns.get(k, k): (v / 1000 if k in ns and v is not None else v) for k, v in vars(self).items()}

    @property
    def words(self) -> str:
        """One line: the straggler, the rule that named it, and its evidence."""
        if self.rule == "collectives":
            return (
                f"straggler: rank {self.rank}, the last to reach the collectives in {self.slowest_steps} of "
                f"{self.steps} steps: {ms(self.collectives_ns or 0)} ms in collectives against a median of "
                f"{ms(self.median_collectives_ns or 0)} ms: the others wait for it (rule: the least wait in "
                "collectives; a step's wall says when a rank entered it, not who holds the job)"
            )
        return (
            f"straggler: rank {self.rank}, the slowest in {self.slowest_steps} of {self.steps} steps (trailing the "
            f"median rank by {self.median_trail_pct or 0:.1f}% in the median of those steps; rule: the slowest wall, "
            "as no step holds collectives on every rank)"
        )


@dataclass(frozen=True)
class RanksCheck:
    """Whether some traces are the ranks of one job (the module docstring's rule), and why not when they are not."""

    ranks: tuple[int, ...] | None  # each trace's rank, in the order given; None: not one job
    why_not: str | None = None  # one line

    @property
    def one_job(self) -> bool:
        return self.ranks is not None


@dataclass(frozen=True)
class Ranks:
    traces: tuple[TraceAnalysis, ...]  # by rank in a job; in the order given in a list
    ranks: tuple[int, ...]  # each trace's rank, in the same order (a list: none)
    by_step: tuple[StepAcrossRanks, ...]
    straggler: Straggler | None  # None: not a job, or no step to compare
    failed: tuple[TraceFailure, ...] = ()
    warnings: tuple[str, ...] = ()
    not_a_job: str | None = None  # why these traces are a list of traces, not one job's ranks

    @property
    def one_job(self) -> bool:
        return self.not_a_job is None

    @property
    def on_gpu(self) -> bool:
        return any(t.on_gpu for t in self.traces)

    def to_json(self) -> dict:
        ranks = self.ranks if self.one_job else (None,) * len(self.traces)
        return {
            "traces": [t.to_json() | {"source": t.source, "rank": r} for t, r in zip(self.traces, ranks, strict=True)],
            "one_job": self.one_job,
            "not_a_job": self.not_a_job,
            "by_step": [s.to_json() for s in self.by_step],
            "straggler": None if self.straggler is None else self.straggler.to_json(),
            "failed": [vars(f) for f in self.failed],
            "warnings": list(self.warnings),
        }


def expand(paths: Sequence[str | Path]) -> list[Path]:
    """Files, folders (the traces directly inside, by name) and globs, in the order given, each folder's and
    glob's traces sorted; a path given twice is read once. ProbeError for a path that names nothing."""
    out: list[Path] = []
    for raw in paths:
        text = str(raw)
        p = Path(text)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and is_trace_file(f))
            if not found:
                raise ProbeError(
                    f"{p}: a folder with no traces (.trace.json, .json.gz, .sqlite, .sqlite.gz, or a .json "
                    "chrome trace)"
                )
        elif p.exists() or p.is_symlink() or not any(c in text for c in "*?["):
            found = [p]  # a file, or a missing one: load_trace says why in one line
        else:
            found = sorted(Path(m) for m in glob.glob(text) if not Path(m).is_dir())
            if not found:
                raise ProbeError(f"{text}: no file matches")
        out += [f for f in found if f not in out]
    return out


def analyze_one(item: tuple[str | Path, AnalyzeOptions | None]) -> TraceAnalysis | TraceFailure:
    """One trace's analysis from (path, options), or why it could not be read (in one line): what a pool worker
    or a Ray task runs."""
    path, options = item
    try:
        return analyze(load_trace(path), options)
    except (ProbeError, OSError) as e:
        return TraceFailure(str(path), str(e).splitlines()[0] if str(e) else type(e).__name__)


def lost_trace(item: tuple[str | Path, AnalyzeOptions | None], why: str) -> TraceFailure:
    """The failure of a trace whose analysis raised or whose process died: `pool_map`'s and `fan_out`'s `lost`."""
    return TraceFailure(str(item[0]), why)


def rank_in_name(source: str) -> int | None:
    """The N of a `rank<N>` (rank3, rank_3, rank-3) in a trace's file name; None when there is none, or several."""
    found = {count(m) for m in RANK_IN_NAME.findall(Path(source).name)}
    return found.pop() if len(found) == 1 else None  # a rank over MAX_COUNT is None: no rank


def check_job(traces: Sequence[TraceAnalysis]) -> RanksCheck:
    """Whether `traces` are the ranks of one job (the module docstring's rule): their ranks, or why not."""
    if len(traces) < 2:
        return RanksCheck(None, "a job has two traces or more")
    first = traces[0]
    names = [s.name for s in first.steps]
    for t in traces[1:]:
        other = [s.name for s in t.steps]
        if len(other) != len(names):
            said = f"{len(other)} step" + ("" if len(other) == 1 else "s")
            return RanksCheck(None, f"{t.source} has {said}, {first.source} {len(names)}")
        if other != names:
            i = next(i for i, (a, b) in enumerate(zip(names, other, strict=True)) if a != b)
            return RanksCheck(None, f"step {i} is {names[i]!r} in {first.source}, {other[i]!r} in {t.source}")
    for ranks in ([t.rank for t in traces], [rank_in_name(t.source) for t in traces]):
        known = [r for r in ranks if r is not None]
        if len(known) == len(ranks) and len(set(known)) == len(known):
            return RanksCheck(tuple(known))
    return RanksCheck(None, "no distinct rank for every trace, in its distributedInfo or as rank<N> in its file name")


def ranks(results: Sequence[TraceAnalysis | TraceFailure]) -> Ranks:
    """The analyses as one job's ranks, step by step, when they are (`check_job`); else as a list of traces."""
    traces = [r for r in results if isinstance(r, TraceAnalysis)]
    failed = tuple(r for r in results if isinstance(r, TraceFailure))
    check = check_job(traces)
    given = check.ranks
    if given is None:
        return Ranks(tuple(traces), (), (), None, failed, not_a_job=check.why_not)
    order = sorted(range(len(traces)), key=given.__getitem__)
    traces, sorted_ranks = [traces[i] for i in order], [given[i] for i in order]
    by_step = tuple(_step(i, traces, sorted_ranks) for i in range(len(traces[0].steps)))
    return Ranks(tuple(traces), tuple(sorted_ranks), by_step, _straggler(by_step), failed)


def _step(i: int, traces: list[TraceAnalysis], ranks: list[int]) -> StepAcrossRanks:
    rows = tuple(
        RankStep(
            r,
            t.steps[i].wall_ns,
            t.steps[i].gpu_busy_ns,
            t.steps[i].dispatched,
            collectives_ns(t, t.steps[i]),
        )
        for t, r in zip(traces, ranks, strict=True)
    )
    slowest = max(rows, key=lambda row: (row.wall_ns, -row.rank))  # a tie goes to the lower rank
    rule, held_by = held_by_rank(rows)
    return StepAcrossRanks(
        i,
        traces[0].steps[i].name,
        rows,
        slowest.rank,
        slowest.wall_ns,
        statistics.median(r.wall_ns for r in rows),
        rule,
        held_by,
        statistics.median(r.collectives_ns for r in rows),
    )


def collectives_ns(trace: TraceAnalysis, step: StepLedger) -> int:
    """A rank's time in collectives in a step (the module docstring): its communication kernels' on a GPU trace;
    on a trace with no GPU side (a Gloo job), its host collectives' (`StepLedger.host_collectives_ns`)."""
    return step.kernels_by_category.get(COMMUNICATION, 0) if trace.on_gpu else step.host_collectives_ns


def held_by_rank(rows: Sequence[RankStep]) -> tuple[StragglerRule, int]:
    """A step's straggler and the rule that named it (the module docstring): where every rank's step holds
    collectives, the rank with the least time in them (it arrived last, so it waited least); else the slowest wall.
    Ties go to the lower rank."""
    if all(r.collectives_ns > 0 for r in rows):
        return "collectives", min(rows, key=lambda row: (row.collectives_ns, row.rank)).rank
    return "wall", max(rows, key=lambda row: (row.wall_ns, -row.rank)).rank


def _straggler(steps: Sequence[StepAcrossRanks]) -> Straggler | None:
    """The rank named in the most steps, counting the steps the collectives decided if any did (ties: the lower
    rank), with the evidence of those steps."""
    decided = [s for s in steps if s.rule == "collectives"] or list(steps)
    if not decided:
        return None
    counts = Counter(s.held_by for s in decided)
    rank = min(counts, key=lambda r: (-counts[r], r))
    mine = [s for s in decided if s.held_by == rank]
    if decided[0].rule == "wall":
        return Straggler(rank, counts[rank], len(decided), "wall", statistics.median(s.trails_median_pct for s in mine))
    own = statistics.median(next(r.collectives_ns for r in s.ranks if r.rank == rank) for s in mine)
    median = statistics.median(s.median_collectives_ns for s in mine)
    return Straggler(rank, counts[rank], len(decided), "collectives", None, own, median)
