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
0 of every rank, step 1, ...). Per step: every rank's wall, GPU busy and launches (`StepLedger.dispatched`: kernel
and graph launches, or top-level ops on a CPU trace); the slowest rank by wall, and how far it trails the median
wall of the ranks (the straggler). Over the job: the rank that was slowest most often (ties: the lower rank).
"""

from __future__ import annotations

import glob
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.types import AnalyzeOptions, TraceAnalysis
from probe.analysis.records.files import is_trace_name
from probe.analysis.trace import load_trace
from probe.counts import count
from probe.errors import ProbeError

RANK_IN_NAME = re.compile(r"(?<![a-z0-9])rank[-_]?([0-9]+)(?![0-9])", re.IGNORECASE)


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


@dataclass(frozen=True)
class StepAcrossRanks:
    """One step position across the ranks."""

    step: int  # the step's position in every trace
    name: str  # the lowest rank's name for it
    ranks: tuple[RankStep, ...]  # by rank
    slowest_rank: int
    slowest_wall_ns: int
    median_wall_ns: float

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
            "ranks": [
                {
                    "rank": r.rank,
                    "wall_us": r.wall_ns / 1000,
                    "gpu_busy_us": r.gpu_busy_ns / 1000,
                    "launches": r.launches,
                }
                for r in self.ranks
            ],
        }


@dataclass(frozen=True)
class Straggler:
    rank: int  # slowest in the most steps
    slowest_steps: int  # how many
    steps: int  # of how many steps compared
    median_trail_pct: float  # the median, over those steps, of how far it trailed the median rank


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
            "straggler": None if self.straggler is None else vars(self.straggler),
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
            found = sorted(f for f in p.iterdir() if is_trace_name(f.name) and f.is_file())
            if not found:
                raise ProbeError(f"{p}: a folder with no traces (.trace.json, .json.gz, .sqlite, .sqlite.gz)")
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
            return RanksCheck(None, f"{t.source} has {len(other)} steps, {first.source} {len(names)}")
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
        RankStep(r, t.steps[i].wall_ns, t.steps[i].gpu_busy_ns, t.steps[i].dispatched)
        for t, r in zip(traces, ranks, strict=True)
    )
    slowest = max(rows, key=lambda row: (row.wall_ns, -row.rank))  # a tie goes to the lower rank
    return StepAcrossRanks(
        i, traces[0].steps[i].name, rows, slowest.rank, slowest.wall_ns, statistics.median(r.wall_ns for r in rows)
    )


def _straggler(steps: Sequence[StepAcrossRanks]) -> Straggler | None:
    if not steps:
        return None
    counts = Counter(s.slowest_rank for s in steps)
    rank = min(counts, key=lambda r: (-counts[r], r))
    trails = [s.trails_median_pct for s in steps if s.slowest_rank == rank]
    return Straggler(rank, counts[rank], len(steps), statistics.median(trails))
