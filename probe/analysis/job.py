"""Many traces as one job: the ranks of a tensor-parallel run, or a fleet's nightly traces.

Each trace is read and analyzed on its own (`analyze_one`: in a process pool by default, `pool_map`, or as Ray
tasks, probe.cluster), then `job` lines them up step by step. A trace's rank is its `distributedInfo.rank` when
every trace has a distinct one, else its place in the file order. Steps are matched by position (step 0 of every
rank, step 1, ...), up to the fewest steps any trace has. Per step: every rank's wall, GPU busy and launches
(`StepLedger.dispatched`: kernel and graph launches, or top-level ops on a CPU trace); the slowest rank by wall,
and how far it trails the median wall of the ranks (the straggler). Over the job: the rank that was slowest most
often (ties: the lower rank). A trace that cannot be read is kept as a `TraceFailure`, named with its error, and
the others are analyzed all the same.
"""

from __future__ import annotations

import glob
import os
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from probe.analysis.files import is_trace_name
from probe.analysis.ledger import AnalyzeOptions, TraceAnalysis, analyze
from probe.analysis.trace import load_trace
from probe.errors import ProbeError


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
class JobStep:
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
class JobAnalysis:
    traces: tuple[TraceAnalysis, ...]  # by rank
    ranks: tuple[int, ...]  # each trace's rank, in the same order
    by_step: tuple[JobStep, ...]
    straggler: Straggler | None  # None: no step to compare
    failed: tuple[TraceFailure, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def on_gpu(self) -> bool:
        return any(t.on_gpu for t in self.traces)

    def to_json(self) -> dict:
        return {
            "traces": [
                t.to_json() | {"source": t.source, "rank": r} for t, r in zip(self.traces, self.ranks, strict=True)
            ],
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


def pool_map(fn: Callable, items: Sequence, workers: int | None = None) -> list:
    """[fn(item) for item in items] in a pool of local processes (one a core, at most one an item), in order."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(items)))
    if workers == 1:
        return [fn(item) for item in items]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def job(results: Sequence[TraceAnalysis | TraceFailure]) -> JobAnalysis:
    """Line the analyses up as ranks, step by step (see the module docstring)."""
    traces = [r for r in results if isinstance(r, TraceAnalysis)]
    failed = tuple(r for r in results if isinstance(r, TraceFailure))
    if not traces:
        return JobAnalysis((), (), (), None, failed)
    warnings = []
    declared = [t.rank for t in traces]
    if None not in declared and len(set(declared)) == len(declared):
        ranks = declared
    else:
        ranks = list(range(len(traces)))
        if any(r is not None for r in declared):
            warnings.append("the traces' distributedInfo ranks are missing or repeated: ranks are the file order")
    order = sorted(range(len(traces)), key=lambda i: ranks[i])
    traces, ranks = [traces[i] for i in order], [ranks[i] for i in order]
    counts = [len(t.steps) for t in traces]
    if len(set(counts)) > 1:
        warnings.append(f"the traces have {min(counts)} to {max(counts)} steps: steps 0..{min(counts) - 1} compared")
    by_step = tuple(_step(i, traces, ranks) for i in range(min(counts)))
    return JobAnalysis(tuple(traces), tuple(ranks), by_step, _straggler(by_step), failed, tuple(warnings))


def _step(i: int, traces: list[TraceAnalysis], ranks: list[int]) -> JobStep:
    rows = tuple(
        RankStep(r, t.steps[i].wall_ns, t.steps[i].gpu_busy_ns, t.steps[i].dispatched)
        for t, r in zip(traces, ranks, strict=True)
    )
    slowest = max(rows, key=lambda row: (row.wall_ns, -row.rank))  # a tie goes to the lower rank
    return JobStep(
        i, traces[0].steps[i].name, rows, slowest.rank, slowest.wall_ns, statistics.median(r.wall_ns for r in rows)
    )


def _straggler(steps: Sequence[JobStep]) -> Straggler | None:
    if not steps:
        return None
    counts = Counter(s.slowest_rank for s in steps)
    rank = min(counts, key=lambda r: (-counts[r], r))
    trails = [s.trails_median_pct for s in steps if s.slowest_rank == rank]
    return Straggler(rank, counts[rank], len(steps), statistics.median(trails))
