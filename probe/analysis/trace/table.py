"""One event table for every trace: torch.profiler chrome JSON and Nsight Systems SQLite exports.

`probe.analysis.trace.load_trace(path) -> Trace` reads `.json`, `.json.gz` (gzip is detected by its magic bytes,
not the suffix) and nsys `.sqlite` exports. The result is a frozen `Trace`: one row an event, one numpy array a
column, names interned to integer ids into `Trace.names`. Rows are sorted by `ts_ns`, ties kept in file order.

Columns, all of length `len(trace)`:

- `ts_ns` (int64): start, integer ns on the file's own clock (chrome: `ts` x 1000 exactly; nsys: `start`).
- `dur_ns` (int64): duration in ns, >= 0 (chrome: `dur` x 1000 exactly; nsys: `end - start`).
- `kind` (int8): a `Kind` code, below.
- `name_id` (int32): index into `names`: the op, range, API call or kernel name.
- `cat_id` (int32): index into `names`: chrome's `cat` as written; for nsys, the table the row came from.
- `pid` (int64): process. Chrome GPU rows carry the device here, as the profiler writes them. -1 if not an int.
- `tid` (int64): thread. Chrome GPU rows carry the stream here. -1 if not an int ("PyTorch Profiler").
- `stream` (int64): GPU stream of kernel, memcpy, memset and gpu_range rows; -1 on host rows. Chrome: the
  row's `tid`, which kineto sets to the stream (its `args.stream` agrees on every public trace); nsys: streamId.
- `device` (int64): GPU device of those rows; -1 on host rows. Chrome: the row's `pid`; nsys: deviceId.
- `correlation` (int64): the launch <-> GPU op link: chrome `args.correlation`, nsys `correlationId`; -1 if none.
- `external_id` (int64): chrome `args["External id"]` (ties a cpu_op to its runtime calls); -1 if none.

`Trace.base_ns` is the absolute epoch time of `ts_ns == 0` when the file says it (chrome
`baseTimeNanoseconds`, nsys `TARGET_INFO_SESSION_START_TIME.utcEpochNs`), else None. `Trace.rank` is the
distributed rank that recorded the trace: chrome `distributedInfo.rank` when it is an integer, else None (nsys
exports do not say: None).

Kinds (`Kind`, stored in `kind`), from chrome's `cat` (case-insensitive) or the nsys table:

- `cpu_op`: `cpu_op`, `operator`.
- `user_range`: `user_annotation` (our `prefill`, `decode#i`, `cache.*`, ...); nsys NVTX push/pop and
  start/end ranges.
- `profiler_step`: a `ProfilerStep#N` `user_annotation` or `cpu_op`; an NVTX range of that name.
- `runtime`: `cuda_runtime`, `cuda_driver`, `runtime`, `hip_runtime`, `hip_driver`; CUPTI_ACTIVITY_KIND_RUNTIME.
- `kernel`: `kernel`, `Kernel`; CUPTI_ACTIVITY_KIND_KERNEL.
- `gpu_memcpy`: `gpu_memcpy`, `memcpy`; CUPTI_ACTIVITY_KIND_MEMCPY.
- `gpu_memset`: `gpu_memset`, `memset`; CUPTI_ACTIVITY_KIND_MEMSET.
- `gpu_range`: `gpu_user_annotation`, a user range projected onto a stream (never a step).
- `python`: `python_function`.
- `other`: anything else (`cuda_sync`, `Trace`, `overhead`, ...).

Only complete events (`ph == "X"`) become rows; metadata, instants and flow arrows are counted in
`Trace.skipped` and left out. Events the table cannot hold honestly are dropped and counted in `Trace.dropped`
(a negative duration, a missing `ts`/`dur`, a non-numeric time, a start or end beyond +-2**62 ns);
`Trace.warnings` says so in words. The +-2**62 bound (146 years) keeps every start, end, and the sum or
difference of any two of them inside int64, so no interval arithmetic downstream can wrap to a negative time.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from probe.errors import ProbeError

FORMATS = ("torch_chrome", "nsys_sqlite")


class Kind(enum.IntEnum):
    CPU_OP = 0
    USER_RANGE = 1
    PROFILER_STEP = 2
    RUNTIME = 3
    KERNEL = 4
    GPU_MEMCPY = 5
    GPU_MEMSET = 6
    GPU_RANGE = 7
    PYTHON = 8
    OTHER = 9

    @property
    def label(self) -> str:
        return self.name.lower()


GPU_OP_KINDS = (Kind.KERNEL, Kind.GPU_MEMCPY, Kind.GPU_MEMSET)
ON_STREAM = (Kind.KERNEL, Kind.GPU_MEMCPY, Kind.GPU_MEMSET, Kind.GPU_RANGE)

# The reference definitions of tests/data/PROVENANCE.md, exactly: what counts as a kernel launch and as a graph launch.
LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipLaunchCooperativeKernel",
    }
)
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "hipGraphLaunch"})
# nsys names API calls with a version and sometimes a per-thread-stream suffix: cudaLaunchKernel_ptsz_v7000.
_API_SUFFIX = re.compile(r"(?:_v\d+)?$")
_STREAM_SUFFIX = re.compile(r"_(?:ptsz|ptds)$")

PROFILER_STEP_PREFIX = "ProfilerStep#"


def api_base_name(name: str) -> str:
    """`cudaLaunchKernel_ptsz_v7000` -> `cudaLaunchKernel`; chrome names come back unchanged."""
    return _STREAM_SUFFIX.sub("", _API_SUFFIX.sub("", name, count=1), count=1)


COLUMNS = (
    "ts_ns",
    "dur_ns",
    "kind",
    "name_id",
    "cat_id",
    "pid",
    "tid",
    "stream",
    "device",
    "correlation",
    "external_id",
)


@dataclass(frozen=True, eq=False)
class Trace:
    """One columnar event table (see the module docstring for every column) plus where it came from."""

    format: str  # "torch_chrome" | "nsys_sqlite"
    source: str  # the path it was read from
    base_ns: int | None  # absolute epoch ns of ts_ns == 0, when the file says
    names: tuple[str, ...]  # the string table behind name_id and cat_id
    ts_ns: np.ndarray
    dur_ns: np.ndarray
    kind: np.ndarray
    name_id: np.ndarray
    cat_id: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    skipped: dict[str, int] = field(default_factory=dict)  # events left out on purpose, by phase
    dropped: dict[str, int] = field(default_factory=dict)  # events that could not be kept, by reason
    warnings: tuple[str, ...] = ()
    rank: int | None = None  # distributed rank that recorded the trace, when the file says

    def __len__(self) -> int:
        return len(self.ts_ns)

    def __repr__(self) -> str:
        return f"Trace({self.format}, {len(self)} events, {len(self.names)} names, {self.source!r})"

    @functools.cached_property
    def end_ns(self) -> np.ndarray:
        """ts_ns + dur_ns, added once and kept read-only: code reading one row's end at a time (step_timeline does,
        a row per runtime call) paid a whole-table addition for each, quadratic in the rows."""
        end = self.ts_ns + self.dur_ns
        end.flags.writeable = False
        return end

    @property
    def start_ns(self) -> int:
        """The trace's first instant: the earliest event start (0 for an empty table)."""
        return int(self.ts_ns[0]) if len(self) else 0

    def name(self, row: int) -> str:
        return self.names[self.name_id[row]]

    def name_ids(self, predicate) -> np.ndarray:
        """Boolean table over `names`: `mask[trace.name_id]` selects the rows whose name passes `predicate`."""
        return np.fromiter((bool(predicate(n)) for n in self.names), dtype=bool, count=len(self.names))

    def rows(self, *kinds: Kind) -> np.ndarray:
        """Row indices of the given kinds, in ts order."""
        return np.flatnonzero(np.isin(self.kind, np.asarray(kinds, dtype=np.int8)))


def intern(strings: dict[str, int], s) -> int:
    """The id of `s` in a string table being built (`str()` of anything that is not a string)."""
    if not isinstance(s, str):
        s = "" if s is None else str(s)
    i = strings.get(s)
    if i is None:
        i = strings[s] = len(strings)
    return i


MAX_TIME_NS = 2**62  # |start|, |end| below this: any two times add or subtract without leaving int64
OUT_OF_RANGE = "time beyond +-2**62 ns"


def finish(
    fmt: str,
    source: Path,
    base: int | None,
    names: tuple[str, ...],
    cols: dict[str, np.ndarray],
    skipped: dict[str, int],
    dropped: dict[str, int],
    rank: int | None = None,
    notes: tuple[str, ...] = (),
) -> Trace:
    """Drop rows that cannot be kept honestly, sort by start, and wrap up with warnings (`notes` first).
    `cols` is consumed: its arrays are replaced one at a time, so the table is never held twice."""
    dropped = dict(dropped)
    reasons = _unkeepable(cols["ts_ns"], cols["dur_ns"])
    if reasons:
        keep = np.ones(len(cols["ts_ns"]), bool)
        for why, bad in reasons.items():
            dropped[why] = dropped.get(why, 0) + int(bad.sum())
            keep &= ~bad
        _take(cols, keep)
    ts = cols["ts_ns"]
    if len(ts) > 1 and np.any(ts[1:] < ts[:-1]):
        _take(cols, np.argsort(ts, kind="stable"))
    if len(cols["ts_ns"]) == 0:
        what = "no complete ('X') events" if fmt == "torch_chrome" else "no events in its tables"
        extra = f" ({describe(dropped)} dropped)" if dropped else ""
        raise ProbeError(f"{source}: trace has {what}{extra}")
    warnings = notes + tuple(f"dropped {n} event(s): {why}" for why, n in sorted(dropped.items()))
    return Trace(
        format=fmt,
        source=str(source),
        base_ns=base,
        names=names,
        skipped=dict(skipped),
        dropped=dropped,
        warnings=warnings,
        rank=rank,
        **{k: np.ascontiguousarray(cols.pop(k)) for k in COLUMNS},
    )


def _unkeepable(ts: np.ndarray, dur: np.ndarray) -> dict[str, np.ndarray]:
    """The rows the table cannot hold, by reason (disjoint masks; only reasons that have a row)."""
    far = (ts >= MAX_TIME_NS) | (ts <= -MAX_TIME_NS) | (dur >= MAX_TIME_NS) | (dur <= -MAX_TIME_NS)
    if far.any():  # zero those rows out first, so the sum below cannot wrap
        ts, dur = np.where(far, 0, ts), np.where(far, 0, dur)
    far |= ts + dur >= MAX_TIME_NS
    negative = ~far & (dur < 0)
    return {why: bad for why, bad in ((OUT_OF_RANGE, far), ("negative duration", negative)) if bad.any()}


def _take(cols: dict[str, np.ndarray], index: np.ndarray) -> None:
    """Select rows in place, column by column, freeing each old column before the next copy is made."""
    for k in list(cols):
        cols[k] = cols[k][index]


def describe(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))
