"""Per-step ledgers: where every step's time went, exactly, from one `Trace` of any engine.

`analyze(trace, options) -> TraceAnalysis` and `step_timeline(trace, step) -> list[TimelineItem]` are stateless;
all interval work is vectorized over sorted numpy arrays (searchsorted, cumulative sums), so the cost is
O(events log events) whatever the number of steps or the depth of nesting.

Steps: probe.analysis.steps finds them (`--steps`, probe's ranges, ProfilerStep#N, engine markers, graph
launches, else the whole trace) and `TraceAnalysis.step_rule` says which rule did. Every step is kept, the last
one included. A step's host window is its range, [start, end], both ends included.

What a step's ledger says (times are integer ns inside; `_us` values are ns / 1000, never rounded):

- `wall`: the step range's own duration: the host window.
- `launches`: kernel launch calls (cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel, cuLaunchKernelEx,
  cudaLaunchCooperativeKernel, hipLaunchKernel, hipExtLaunchKernel, hipModuleLaunchKernel,
  hipExtModuleLaunchKernel, hipLaunchCooperativeKernel; nsys's `_v7000` / `_ptsz` suffixes stripped first) that
  start inside the window, on any thread. `graph_launches`: cudaGraphLaunch / hipGraphLaunch the same way.
  `runtime_calls`: all runtime calls. `dispatched`: launches + graph launches on a GPU trace; on a CPU-only trace
  the top-level ops, the dispatched aten ops that stand in for launches.
- `kernels`, `gpu_ops`: GPU work whose launching runtime call starts inside the window, joined on correlation
  id (what nsys's nvtx_gpu_proj_trace does, with the window in place of the NVTX range). A kernel replayed
  from a graph carries the graph launch's correlation, so it lands in the step that launched the graph.
  `gpu_ops` = kernels + memcpy + memset.
- The GPU window: from the first of the step's GPU ops to start to the last to end (`gpu_start`,
  `gpu_window`). With async scheduling, training, or a graph replayed later, a step's GPU work runs after its
  host window has closed; the GPU window follows the work, so busy and idle are measured there.
  `gpu_busy`: the length of the union of the step's GPU ops. `gpu_idle` = `gpu_window` - `gpu_busy`, the gaps
  of that union, each classified as HTA's idle time breakdown classifies a gap, by the op that ends it:
  `host_wait` when that op's launch call started after the gap began (the host was late), else `kernel_wait`
  when the gap is under `kernel_wait_ns` (HTA's `consecutive_kernel_delay`, 30 ns), else `other`. So
  `busy_fraction` = busy / window is in [0, 1], and host wait + kernel wait + other = idle exactly.
- Launch statistics: `launch_cpu`, the host time inside the step's launch and graph-launch calls;
  `launch_delay_p50` / `_p90`, from a kernel launch call's start to its kernel's start (graph replays left out:
  one launch starts many kernels); `short_kernels`, the step's kernels under 5 us.
- Kernels: `top_kernels` by name (count, total, mean, p50, max, share of the step's GPU busy) and
  `kernels_by_category` (probe.analysis.kernels), memcpy and memset included as categories.
- The host partition (probe.analysis.host): every ns of the window on the step's own thread goes to the first of
  the user's `--part`s, `sync`, `sample`, `cache_update`, `cache_seq_length`, `cache_mask_sizes`, `mask`,
  `attention`, `ops`, `python` that covers it; the rest is `unattributed`. The parts add up to `wall` exactly.
  `top_frames`: the `python` part by innermost Python frame.
- `top_level_ops`: cpu_ops on the step's thread, starting in the window, not nested in another cpu_op (on a
  CPU trace this is the dispatched aten op count). `op_counts`: the same by name. `top_ops`: host self time
  (duration less direct cpu_op children) per op name over every cpu_op on the step's thread in the window.
- `host_events`, `host_ranges`: the ops, runtime calls and Python frames, and the ranges, recorded on the step's
  thread in its window. With the profiler's cost per recorded event (`AnalyzeOptions.event_cost`, measured by
  probe.capture.calibrate when `probe profile` records), `unprofiled_estimate` = wall - host_events x op cost -
  host_ranges x range cost: the step as it would have run without the profiler.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from probe.analysis import kernels as K
from probe.analysis.host import (
    BUILTIN_PARTS,
    UNATTRIBUTED,
    FrameTime,
    PartTable,
    ThreadOps,
    UserPart,
    parse_part,
    split_host,
    thread_ops,
    thread_rows,
)
from probe.analysis.intervals import assign, covered, merge, union_by_group
from probe.analysis.steps import StepSet, compile_steps_regex, find_steps
from probe.analysis.trace import GPU_OP_KINDS, GRAPH_LAUNCH_NAMES, LAUNCH_NAMES, Kind, Trace, api_base_name
from probe.errors import ProbeError

KERNEL_WAIT_NS = 30  # HTA's consecutive_kernel_delay default: gaps below this are launch-to-launch delay
TOP_OPS_KEPT = 20  # per step; op_counts keeps every name
TOP_KERNELS_KEPT = 10  # per step; the trace's list keeps every name
TOP_FRAMES_KEPT = 10  # per step; the trace's list keeps every name
HOST_PARTS = BUILTIN_PARTS  # the built-in host parts, in priority order


@dataclass(frozen=True)
class EventCost:
    """What torch.profiler costs the host per event it records (probe.capture.calibrate measures it): an op or
    runtime call the dispatcher records, and a range opened from Python (record_function)."""

    op_ns: float
    range_ns: float

    @classmethod
    def from_json(cls, doc) -> EventCost | None:
        """From a sidecar's `event_cost_ns`: {"op": ns, "range": ns}; None when absent or malformed."""
        if isinstance(doc, dict) and all(isinstance(doc.get(k), int | float) for k in ("op", "range")):
            return cls(float(doc["op"]), float(doc["range"]))
        return None

    def to_json(self) -> dict:
        return {"op": self.op_ns, "range": self.range_ns}


@dataclass(frozen=True)
class AnalyzeOptions:
    """How to read a trace: which ranges are steps, the user's own parts and kernel categories, and the
    profiler's cost per recorded event when it is known."""

    steps: re.Pattern | None = None  # --steps
    parts: tuple[UserPart, ...] = ()  # --part NAME=REGEX, in priority order
    kernel_rules: tuple[tuple[str, str], ...] = ()  # --kernel-category CATEGORY=REGEX, before the built-in rules
    event_cost: EventCost | None = None  # the profiler's cost per recorded event (probe.capture.calibrate)
    kernel_wait_ns: int = KERNEL_WAIT_NS

    @classmethod
    def parse(
        cls,
        steps: str | None = None,
        parts: Sequence[str] = (),
        kernel_categories: Sequence[str] = (),
        event_cost: EventCost | None = None,
    ) -> AnalyzeOptions:
        """From the command line's (or the explorer's) text; a one-line ProbeError for anything malformed."""
        reserved = frozenset(_RESERVED)
        user = tuple(parse_part(text, reserved) for text in parts)
        names = [p.name for p in user]
        if len(set(names)) < len(names):
            raise ProbeError(f"--part names must differ: {', '.join(names)}")
        costs = () if event_cost is None else (event_cost.op_ns, event_cost.range_ns)
        if not all(math.isfinite(x) and x >= 0 for x in costs):
            raise ProbeError(f"--event-cost-ns: costs must be non-negative numbers, got {', '.join(map(str, costs))}")
        rules = tuple(K.parse_category_rule(text) for text in kernel_categories)
        K.Rules.build(rules)  # checks the patterns now, before any trace is read
        return cls(compile_steps_regex(steps), user, rules, event_cost)


@dataclass(frozen=True)
class OpTime:
    name: str
    self_ns: int  # host self time summed over the calls
    calls: int  # every call with this name, nested ones included

    @property
    def self_us(self) -> float:
        return self.self_ns / 1000


@dataclass(frozen=True)
class StepLedger:
    """One step. Fields ending in `_ns` are exact integers; each has a `_us` twin (ns / 1000)."""

    name: str  # the range's label: "decode#3", "prefill", "ProfilerStep#6", "execute_...", or "trace"
    kind: str  # "prefill" | "decode" | "mixed" | "profiler_step" | "step" | "graph" | "window" | an engine's mode
    index: int  # i of decode#i / ProfilerStep#i; the step's position for markers without one
    position: int  # 0-based order of the step in the trace
    pid: int
    tid: int  # the step's own thread: the host partition and the op counts are taken there
    start_ns: int  # from the trace's first event
    wall_ns: int
    launches: int
    graph_launches: int
    runtime_calls: int
    dispatched: int  # launches + graph launches on a GPU trace; top-level ops on a CPU-only one
    kernels: int
    gpu_ops: int
    gpu_start_ns: int | None  # the step's first GPU op start, from the trace's first event; None without GPU ops
    gpu_window_ns: int
    gpu_busy_ns: int
    gpu_idle_ns: int  # = gpu_window_ns - gpu_busy_ns = idle_host_wait_ns + idle_kernel_wait_ns + idle_other_ns
    idle_host_wait_ns: int
    idle_kernel_wait_ns: int
    idle_other_ns: int
    launch_cpu_ns: int
    launch_delay_p50_ns: float | None
    launch_delay_p90_ns: float | None
    short_kernels: int
    top_level_ops: int
    cpu_ops: int  # every cpu_op on the step's thread that starts in the window, nested ones included
    host_events: int  # ops, runtime calls and Python frames recorded on the step's thread in its window
    host_ranges: int  # the ranges recorded there (record_function, NVTX)
    sync_ns: int
    sample_ns: int
    cache_update_ns: int
    cache_seq_length_ns: int
    cache_mask_sizes_ns: int
    mask_ns: int
    attention_ns: int
    ops_ns: int
    python_ns: int
    unattributed_ns: int
    user_parts_ns: dict[str, int] = field(default_factory=dict)  # --part name -> ns, in priority order
    unprofiled_estimate_ns: float | None = None
    op_counts: dict[str, int] = field(default_factory=dict)  # top-level op name -> calls in this step
    top_ops: tuple[OpTime, ...] = ()  # largest host self time first, at most TOP_OPS_KEPT
    kernel_counts: dict[str, int] = field(default_factory=dict)  # kernel name -> launches of it in this step
    kernels_by_category: dict[str, int] = field(default_factory=dict)  # category -> GPU time, ns
    top_kernels: tuple[K.KernelStat, ...] = ()  # largest total first, at most TOP_KERNELS_KEPT
    top_frames: tuple[FrameTime, ...] = ()  # largest self time first, at most TOP_FRAMES_KEPT

    @property
    def cache_ns(self) -> int:
        return self.cache_update_ns + self.cache_seq_length_ns + self.cache_mask_sizes_ns

    @property
    def host_parts_ns(self) -> dict[str, int]:
        """The partition of wall: the user's parts, every built-in part, unattributed last. Sums to wall_ns."""
        parts = dict(self.user_parts_ns)
        parts.update({p: getattr(self, f"{p}_ns") for p in BUILTIN_PARTS})
        parts[UNATTRIBUTED] = self.unattributed_ns
        return parts

    @property
    def busy_fraction(self) -> float:
        """GPU busy over the step's GPU window: in [0, 1]; 0 for a step without GPU work."""
        return self.gpu_busy_ns / self.gpu_window_ns if self.gpu_window_ns else 0.0

    def to_json(self) -> dict:
        skip = (
            "op_counts",
            "top_ops",
            "user_parts_ns",
            "kernel_counts",
            "kernels_by_category",
            "top_kernels",
            "top_frames",
        )
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in skip:
                continue
            if f.name.endswith("_ns"):
                out[f.name[:-3] + "_us"] = None if value is None else value / 1000
            else:
                out[f.name] = value
        out.update({f"{name}_us": ns / 1000 for name, ns in self.user_parts_ns.items()})
        out["cache_us"] = self.cache_ns / 1000
        out["busy_fraction"] = self.busy_fraction
        out["op_counts"] = dict(self.op_counts)
        out["top_ops"] = [{"name": o.name, "self_us": o.self_us, "calls": o.calls} for o in self.top_ops]
        out["kernel_counts"] = dict(self.kernel_counts)
        out["kernels_by_category"] = {c: ns / 1000 for c, ns in self.kernels_by_category.items()}
        out["top_kernels"] = [k.to_json() for k in self.top_kernels]
        out["top_frames"] = [f.to_json() for f in self.top_frames]
        return out


_NS_FIELDS = tuple(f.name for f in dataclasses.fields(StepLedger) if f.name.endswith("_ns")) + ("cache_ns",)


def _us_property(ns_field: str) -> property:
    def get(self):
        value = getattr(self, ns_field)
        return None if value is None else value / 1000

    return property(get, doc=f"{ns_field} / 1000")


for _f in _NS_FIELDS:
    setattr(StepLedger, _f[:-3] + "_us", _us_property(_f))
# A user part NAME becomes the JSON key NAME_us: it must not shadow a key a step already has.
_RESERVED = {f.name.removesuffix("_ns") for f in dataclasses.fields(StepLedger)} | {"cache", "busy_fraction"}


@dataclass(frozen=True)
class Totals:
    """Whole-trace counts, by the reference definitions of tests/data/PROVENANCE.md exactly."""

    events: int  # rows of the event table (complete events)
    kernels: int
    launches: int
    graph_launches: int
    gpu_ops: int  # kernel + gpu_memcpy + gpu_memset
    gpu_busy_ns: int  # union of every GPU op's interval
    runtime_calls: int
    cpu_ops: int
    python_frames: int
    span_ns: int  # first event start to last event end
    unattributed_gpu_ops: int  # GPU ops whose launch is in no step (or could not be found)

    @property
    def gpu_busy_us(self) -> float:
        return self.gpu_busy_ns / 1000

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.endswith("_ns")}
        out["gpu_busy_us"] = self.gpu_busy_ns / 1000
        out["span_us"] = self.span_ns / 1000
        return out


@dataclass(frozen=True)
class Summary:
    """Across the steps that describe steady state: the decode steps if any, else every step."""

    steps_used: str  # "decode" | "all"
    steps: int
    step_p50_us: float
    step_p90_us: float
    launches_per_step: float  # median of StepLedger.dispatched (see `dispatch`)
    dispatch: str  # "launches" | "top-level ops"
    busy_fraction: float  # sum of GPU busy over sum of GPU windows
    cache_share: float  # sum of cache bookkeeping over sum of wall
    python_share: float
    unattributed_share: float
    top_ops: tuple[OpTime, ...]  # host self time summed over those steps, largest first

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "top_ops"}
        out["top_ops"] = [{"name": o.name, "self_us": o.self_us, "calls": o.calls} for o in self.top_ops]
        return out


@dataclass(frozen=True)
class TraceAnalysis:
    format: str
    source: str
    step_rule: str  # which rule found the steps (probe.analysis.steps)
    steps: list[StepLedger]
    totals: Totals
    summary: Summary
    on_gpu: bool  # the trace has GPU work or launches: the one definition of "a GPU trace"
    kernels: tuple[K.KernelStat, ...] = ()  # every GPU op name over the whole trace, largest total first
    kernel_categories: dict[str, int] = field(default_factory=dict)  # category -> ns over the whole trace
    python_frames: tuple[FrameTime, ...] = ()  # the python part of every step by frame, largest first
    user_parts: tuple[str, ...] = ()
    event_cost: EventCost | None = None
    rank: int | None = None  # distributedInfo.rank of the trace, when it says
    warnings: tuple[str, ...] = ()
    origin_epoch_ns: int | None = None  # epoch ns of the first event (steps' start_ns count from it), when known

    def step(self, key: int | str) -> StepLedger:
        """A step by position (int) or by name ("decode#3"); KeyError if there is none."""
        for s in self.steps:
            if (isinstance(key, int) and s.position == key) or s.name == key:
                return s
        raise KeyError(key)

    def to_json(self) -> dict:
        return {
            "format": self.format,
            "source": self.source,
            "rank": self.rank,
            "step_rule": self.step_rule,
            "on_gpu": self.on_gpu,
            "origin_epoch_ns": self.origin_epoch_ns,
            "user_parts": list(self.user_parts),
            "event_cost_ns": self.event_cost.to_json() if self.event_cost else None,
            "steps": [s.to_json() for s in self.steps],
            "totals": self.totals.to_json(),
            "summary": self.summary.to_json(),
            "kernels": [k.to_json() for k in self.kernels],
            "kernel_categories": {c: ns / 1000 for c, ns in self.kernel_categories.items()},
            "python_frames": [f.to_json() for f in self.python_frames],
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class TimelineItem:
    name: str
    kind: str  # "op" (a top-level cpu_op) | "range" (a user range) | "runtime" (an API call outside any op)
    part: str  # the host part it feeds: "cache_update", "mask", "sample", "attention", "ops", ... or "range"
    start_us: float  # from the step's start
    dur_us: float


# ---------------------------------------------------------------------------------------------------------
# the GPU side


def _correlation_keys(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Join key between launches and GPU ops. nsys numbers correlations per process; chrome per trace."""
    corr = trace.correlation[rows]
    if trace.format == "nsys_sqlite":
        return np.where(corr >= 0, (trace.pid[rows] << 40) + corr, -1)
    return corr


@dataclass
class _Gpu:
    rt_rows: np.ndarray
    rt_step: np.ndarray
    op_rows: np.ndarray
    op_step: np.ndarray
    op_launch: np.ndarray  # row of the runtime call that launched each GPU op; -1 when unknown


def _gpu_attribution(trace: Trace, steps: StepSet) -> _Gpu:
    rt = trace.rows(Kind.RUNTIME)
    rt_step = assign(trace.ts_ns[rt], steps.start, steps.end)
    ops = trace.rows(*GPU_OP_KINDS)
    op_keys = _correlation_keys(trace, ops)
    rt_keys = _correlation_keys(trace, rt)
    has = rt_keys >= 0
    uniq, first = np.unique(rt_keys[has], return_index=True)  # a repeated id: its first call wins
    rt_with = np.flatnonzero(has)[first]
    k = np.searchsorted(uniq, op_keys)
    kc = np.minimum(k, max(len(uniq) - 1, 0))
    known = (op_keys >= 0) & (k < len(uniq)) & (uniq[kc] == op_keys) if len(uniq) else np.zeros(len(ops), bool)
    launch = np.where(known, rt_with[kc] if len(uniq) else -1, -1)
    op_step = np.where(known, rt_step[np.maximum(launch, 0)] if len(rt) else -1, -1)
    return _Gpu(rt, rt_step, ops, op_step, np.where(known, rt[np.maximum(launch, 0)] if len(rt) else -1, -1))


def _merged_by_group(group: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """Each group's union as disjoint intervals: (group, start, end) arrays sorted by group then start."""
    keep = group >= 0
    group, starts, ends = group[keep], starts[keep], ends[keep]
    if not len(starts):
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    order = np.lexsort((starts, group))
    g, s, e = group[order], starts[order], ends[order]
    new_group = np.concatenate(([True], g[1:] != g[:-1]))
    # the running end within each group: offset each group above the previous one so one accumulate serves all
    span = int(e.max()) - int(s.min()) + 1
    offset = (np.cumsum(new_group) - 1).astype(np.int64) * span - int(s.min())
    reach = np.maximum.accumulate(e + offset) - offset
    opens = new_group.copy()
    opens[1:] |= s[1:] > reach[:-1]
    first = np.flatnonzero(opens)
    last = np.append(first[1:] - 1, len(s) - 1)
    return g[first], s[first], reach[last]


def _gpu_windows(trace: Trace, gpu: _Gpu, n: int, kernel_wait_ns: int):
    """Per step: GPU window start and length, busy, and the idle gaps classified (host, kernel, other)."""
    op_start, op_end = trace.ts_ns[gpu.op_rows], trace.end_ns[gpu.op_rows]
    step = gpu.op_step
    inside = step >= 0
    first = np.full(n, np.iinfo(np.int64).max, np.int64)
    last = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first, step[inside], op_start[inside])
    np.maximum.at(last, step[inside], op_end[inside])
    has = first <= last
    window = np.where(has, last - first, 0)
    busy = union_by_group(step, op_start, op_end, n)
    g, s, e = _merged_by_group(step, op_start, op_end)
    host, kern, other = (np.zeros(n, np.int64) for _ in range(3))
    gaps = np.flatnonzero(np.concatenate(([False], g[1:] == g[:-1])))  # intervals with a gap before, in-step
    if len(gaps):
        gap = s[gaps] - e[gaps - 1]
        # The op that ends each gap: of the step's ops starting exactly there, the one launched first.
        launch_ts = np.where(gpu.op_launch >= 0, trace.ts_ns[np.maximum(gpu.op_launch, 0)], np.iinfo(np.int64).max)
        base, span = int(op_start.min()), int(op_start.max() - op_start.min()) + 1
        op_key = step[inside].astype(np.int64) * span + (op_start[inside] - base)
        keys, inverse = np.unique(op_key, return_inverse=True)
        first_launch = np.full(len(keys), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(first_launch, inverse, launch_ts[inside])
        launched = first_launch[np.searchsorted(keys, g[gaps].astype(np.int64) * span + (s[gaps] - base))]
        is_host = launched > e[gaps - 1]
        is_kernel = ~is_host & (gap < kernel_wait_ns)
        for out, sel in ((host, is_host), (kern, is_kernel), (other, ~is_host & ~is_kernel)):
            np.add.at(out, g[gaps][sel], gap[sel])
    return np.where(has, first, -1), window, busy, host, kern, other


# ---------------------------------------------------------------------------------------------------------
# the host side


def _op_tables(trace: Trace, lo: np.ndarray, hi: np.ndarray, ops: ThreadOps):
    """Per step: top-level count, all-op count, op_counts dict and top_ops tuple."""
    step = assign(ops.start, lo, hi)
    inside = step >= 0
    names = trace.name_id[ops.rows]
    n = len(lo)
    top = inside & (ops.depth == 0)
    top_counts = np.bincount(step[top], minlength=n)
    all_counts = np.bincount(step[inside], minlength=n)
    width = len(trace.names)
    op_counts: list[dict[str, int]] = [{} for _ in range(n)]
    keys, counts = np.unique(step[top].astype(np.int64) * width + names[top], return_counts=True)
    for key, count in zip(keys.tolist(), counts.tolist(), strict=True):
        op_counts[key // width][trace.names[key % width]] = count
    keys, inv = np.unique(step[inside].astype(np.int64) * width + names[inside], return_inverse=True)
    self_sum = np.bincount(inv, weights=ops.self_ns[inside], minlength=len(keys)).astype(np.int64)
    calls = np.bincount(inv, minlength=len(keys))
    per_step: list[list[OpTime]] = [[] for _ in range(n)]
    for key, s, c in zip(keys.tolist(), self_sum.tolist(), calls.tolist(), strict=True):
        per_step[key // width].append(OpTime(trace.names[key % width], s, c))
    top_ops = [tuple(sorted(lst, key=lambda o: (-o.self_ns, o.name))[:TOP_OPS_KEPT]) for lst in per_step]
    return top_counts, all_counts, op_counts, top_ops


def _host_events(trace: Trace, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray, *kinds: Kind) -> np.ndarray:
    rows = thread_rows(trace, trace.rows(*kinds), pid, tid)
    step = assign(trace.ts_ns[rows], lo, hi)
    return np.bincount(step[step >= 0], minlength=len(lo))


def _frames(table: PartTable, step, fid, self_ns, calls, n: int, keep: int | None):
    out: list[list[FrameTime]] = [[] for _ in range(n)]
    for s, f, ns, c in zip(step.tolist(), fid.tolist(), self_ns.tolist(), calls.tolist(), strict=True):
        if ns > 0 or c > 0:
            out[s].append(FrameTime(table.frames[f], ns, c))
    return [tuple(sorted(lst, key=lambda x: (-x.self_ns, x.frame))[:keep]) for lst in out]


# ---------------------------------------------------------------------------------------------------------
# the analysis


def analyze(trace: Trace, options: AnalyzeOptions | None = None) -> TraceAnalysis:
    """The per-step ledger of every step, the whole-trace totals and kernels, and a steady-state summary."""
    options = options or AnalyzeOptions()
    steps = find_steps(trace, options.steps)
    n = len(steps)
    warnings = list(trace.warnings) + steps.warnings
    if n > 1 and np.any(steps.start[1:] < steps.end[:-1]):
        warnings.append("steps overlap in time: an event in the overlap is counted in the later step only")

    launch_names = trace.name_ids(lambda s: api_base_name(s) in LAUNCH_NAMES)
    graph_names = trace.name_ids(lambda s: api_base_name(s) in GRAPH_LAUNCH_NAMES)
    gpu = _gpu_attribution(trace, steps)
    rt_names = trace.name_id[gpu.rt_rows]
    in_step = gpu.rt_step >= 0

    def per_step(mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        sel = in_step & mask
        w = None if weights is None else weights[sel]
        return np.bincount(gpu.rt_step[sel], weights=w, minlength=n)

    is_launch, is_graph = launch_names[rt_names], graph_names[rt_names]
    launches, graphs = per_step(is_launch), per_step(is_graph)
    runtime_calls = per_step(np.ones(len(gpu.rt_rows), bool))
    launch_cpu = per_step(is_launch | is_graph, trace.dur_ns[gpu.rt_rows].astype(np.float64)).astype(np.int64)
    op_kind = trace.kind[gpu.op_rows]
    attributed = gpu.op_step >= 0
    is_kernel = op_kind == Kind.KERNEL
    kernels = np.bincount(gpu.op_step[attributed & is_kernel], minlength=n)
    gpu_ops = np.bincount(gpu.op_step[attributed], minlength=n)
    gpu_start, window, busy, idle_host, idle_kernel, idle_other = _gpu_windows(trace, gpu, n, options.kernel_wait_ns)
    op_dur = trace.dur_ns[gpu.op_rows]
    short = np.bincount(gpu.op_step[attributed & is_kernel & (op_dur < K.SHORT_KERNEL_NS)], minlength=n)
    delay_p50, delay_p90 = _launch_delays(trace, gpu, is_kernel, launch_names, n)

    # kernels by name and category, per step and over the whole trace
    rules = K.Rules.build(options.kernel_rules)
    names = trace.names
    category_of_name = np.array(
        [rules.category(s) if k else "" for s, k in zip(names, _gpu_names(trace), strict=True)], dtype=object
    )
    category_of_name = _with_op_kinds(trace, category_of_name)
    op_name = trace.name_id[gpu.op_rows]
    op_category = category_of_name[op_name]
    top_kernels = K.kernel_stats(gpu.op_step, op_name, op_dur, n, names, category_of_name, busy, TOP_KERNELS_KEPT)
    by_category = K.category_totals(gpu.op_step, op_category, op_dur, n)
    kernel_counts = _kernel_counts(trace, gpu.op_step, op_name, is_kernel & attributed, n)
    totals = _totals(trace, gpu, launch_names, graph_names)
    everything = np.zeros(len(gpu.op_rows), np.int64)
    (all_kernels,) = K.kernel_stats(
        everything, op_name, op_dur, 1, names, category_of_name, np.array([totals.gpu_busy_ns])
    )
    (all_categories,) = K.category_totals(everything, op_category, op_dur, 1)

    # the host side, one pass per step thread (usually one), never per step
    table = PartTable.build(trace, options.parts)
    part_names = (*table.order, UNATTRIBUTED)
    parts = {p: np.zeros(n, np.int64) for p in part_names}
    top_counts, all_counts, events, ranges = (np.zeros(n, np.int64) for _ in range(4))
    op_counts: list[dict[str, int]] = [{} for _ in range(n)]
    top_ops: list[tuple[OpTime, ...]] = [() for _ in range(n)]
    frame_rows = []
    threads = np.unique(np.stack([steps.pid, steps.tid]), axis=1)
    for pid, tid in threads.T.tolist():
        sel = np.flatnonzero((steps.pid == pid) & (steps.tid == tid))
        lo, hi = steps.start[sel], steps.end[sel]
        ops = thread_ops(trace, pid, tid)
        split = split_host(trace, table, pid, tid, lo, hi, ops)
        for p in part_names:
            parts[p][sel] = split.parts[p]
        frame_rows.append((sel[split.frame_step], split.frame_id, split.frame_self_ns, split.frame_calls))
        tc, ac, oc, to = _op_tables(trace, lo, hi, ops)
        top_counts[sel], all_counts[sel] = tc, ac
        events[sel] = _host_events(trace, pid, tid, lo, hi, Kind.CPU_OP, Kind.RUNTIME, Kind.PYTHON)
        ranges[sel] = _host_events(trace, pid, tid, lo, hi, Kind.USER_RANGE, Kind.PROFILER_STEP)
        for j, s in enumerate(sel.tolist()):
            op_counts[s], top_ops[s] = oc[j], to[j]
    f_step, f_id, f_self, f_calls = (
        np.concatenate(x) if x else np.zeros(0, np.int64) for x in zip(*frame_rows, strict=True)
    )
    top_frames = _frames(table, f_step, f_id, f_self, f_calls, n, TOP_FRAMES_KEPT)
    key, inverse = np.unique(f_id, return_inverse=True)
    (python_frames,) = _frames(
        table,
        np.zeros(len(key), np.int64),
        key,
        np.bincount(inverse, weights=f_self, minlength=len(key)).astype(np.int64),
        np.bincount(inverse, weights=f_calls, minlength=len(key)).astype(np.int64),
        1,
        None,
    )

    on_gpu = totals.gpu_ops + totals.launches + totals.graph_launches > 0
    dispatched = launches + graphs if on_gpu else top_counts
    t0 = trace.start_ns
    cost = options.event_cost
    ledgers = [
        StepLedger(
            name=steps.names[i],
            kind=steps.kinds[i],
            index=steps.indices[i],
            position=i,
            pid=int(steps.pid[i]),
            tid=int(steps.tid[i]),
            start_ns=int(steps.start[i]) - t0,
            wall_ns=int(steps.end[i] - steps.start[i]),
            launches=int(launches[i]),
            graph_launches=int(graphs[i]),
            runtime_calls=int(runtime_calls[i]),
            dispatched=int(dispatched[i]),
            kernels=int(kernels[i]),
            gpu_ops=int(gpu_ops[i]),
            gpu_start_ns=int(gpu_start[i]) - t0 if gpu_start[i] >= 0 else None,
            gpu_window_ns=int(window[i]),
            gpu_busy_ns=int(busy[i]),
            gpu_idle_ns=int(window[i] - busy[i]),
            idle_host_wait_ns=int(idle_host[i]),
            idle_kernel_wait_ns=int(idle_kernel[i]),
            idle_other_ns=int(idle_other[i]),
            launch_cpu_ns=int(launch_cpu[i]),
            launch_delay_p50_ns=delay_p50[i],
            launch_delay_p90_ns=delay_p90[i],
            short_kernels=int(short[i]),
            top_level_ops=int(top_counts[i]),
            cpu_ops=int(all_counts[i]),
            host_events=int(events[i]),
            host_ranges=int(ranges[i]),
            **{f"{p}_ns": int(parts[p][i]) for p in (*BUILTIN_PARTS, UNATTRIBUTED)},
            user_parts_ns={p.name: int(parts[p.name][i]) for p in options.parts},
            unprofiled_estimate_ns=None
            if cost is None
            else float(steps.end[i] - steps.start[i] - events[i] * cost.op_ns - ranges[i] * cost.range_ns),
            op_counts=op_counts[i],
            top_ops=top_ops[i],
            kernel_counts=kernel_counts[i],
            kernels_by_category=by_category[i],
            top_kernels=tuple(top_kernels[i]),
            top_frames=top_frames[i],
        )
        for i in range(n)
    ]
    # a graph launch none of whose replayed kernels is in the trace: the profiler missed the replay
    replayed = np.isin(gpu.rt_rows, gpu.op_launch[gpu.op_launch >= 0])
    blind_steps = np.unique(gpu.rt_step[in_step & is_graph & ~replayed])
    blind = [ledgers[i].name for i in blind_steps.tolist()]
    if blind:
        warnings.append(
            f"{len(blind)} step(s) launched a graph but hold none of its kernels ({', '.join(blind[:3])}"
            f"{', ...' if len(blind) > 3 else ''}): the profiler did not record the replays, so their GPU "
            "side reads as idle. Initialise it for graphs before the graph is captured"
        )
    if totals.launches + totals.graph_launches and not totals.gpu_ops:
        warnings.append(
            f"the trace holds {totals.launches + totals.graph_launches} launch calls and no GPU activity at all: "
            "kernel collection was off or failed (torch.profiler without ProfilerActivity.CUDA, or CUPTI "
            "unavailable), so every GPU figure reads as zero"
        )
    origin = None if trace.base_ns is None or not len(trace) else int(trace.base_ns + trace.start_ns)
    return TraceAnalysis(
        format=trace.format,
        source=trace.source,
        step_rule=steps.rule,
        steps=ledgers,
        totals=totals,
        summary=summarize(ledgers, on_gpu),
        on_gpu=on_gpu,
        kernels=tuple(all_kernels),
        kernel_categories=all_categories,
        python_frames=python_frames,
        user_parts=tuple(p.name for p in options.parts),
        event_cost=cost,
        rank=trace.rank,
        warnings=tuple(warnings),
        origin_epoch_ns=origin,
    )


def _gpu_names(trace: Trace) -> np.ndarray:
    """Per name id: whether some GPU op carries the name (only those get a category)."""
    out = np.zeros(len(trace.names), bool)
    out[trace.name_id[trace.rows(*GPU_OP_KINDS)]] = True
    return out


def _with_op_kinds(trace: Trace, category_of_name: np.ndarray) -> np.ndarray:
    """memcpy and memset rows are their own categories, whatever their names."""
    out = category_of_name.copy()
    for kind, category in ((Kind.GPU_MEMCPY, K.MEMCPY), (Kind.GPU_MEMSET, K.MEMSET)):
        out[np.unique(trace.name_id[trace.kind == kind])] = category
    return out


def _kernel_counts(trace: Trace, step: np.ndarray, name: np.ndarray, sel: np.ndarray, n: int) -> list[dict[str, int]]:
    out: list[dict[str, int]] = [{} for _ in range(n)]
    width = len(trace.names)
    keys, counts = np.unique(step[sel].astype(np.int64) * width + name[sel], return_counts=True)
    for key, count in zip(keys.tolist(), counts.tolist(), strict=True):
        out[key // width][trace.names[key % width]] = count
    return out


def _launch_delays(trace: Trace, gpu: _Gpu, is_kernel: np.ndarray, launch_names: np.ndarray, n: int):
    """Per step: p50 and p90 of (kernel start - its launch call's start), kernel launches only."""
    known = gpu.op_launch >= 0
    direct = known & is_kernel & (gpu.op_step >= 0)
    direct &= launch_names[trace.name_id[np.maximum(gpu.op_launch, 0)]]
    step = gpu.op_step[direct]
    delay = trace.ts_ns[gpu.op_rows[direct]] - trace.ts_ns[gpu.op_launch[direct]]
    p50: list[float | None] = [None] * n
    p90: list[float | None] = [None] * n
    steps, (q50, q90) = K.grouped_quantiles(step, delay, (0.5, 0.9))
    for i, a, b in zip(steps.tolist(), q50.tolist(), q90.tolist(), strict=True):
        p50[i], p90[i] = a, b
    return p50, p90


def _totals(trace: Trace, gpu: _Gpu, launch_names: np.ndarray, graph_names: np.ndarray) -> Totals:
    names = trace.name_id[gpu.rt_rows]
    ms, me = merge(trace.ts_ns[gpu.op_rows], trace.end_ns[gpu.op_rows])
    return Totals(
        events=len(trace),
        kernels=int(np.sum(trace.kind == Kind.KERNEL)),
        launches=int(launch_names[names].sum()),
        graph_launches=int(graph_names[names].sum()),
        gpu_ops=len(gpu.op_rows),
        gpu_busy_ns=int((me - ms).sum()),
        runtime_calls=len(gpu.rt_rows),
        cpu_ops=int(np.sum(trace.kind == Kind.CPU_OP)),
        python_frames=int(np.sum(trace.kind == Kind.PYTHON)),
        span_ns=int(trace.end_ns.max() - trace.start_ns),
        unattributed_gpu_ops=int(np.sum(gpu.op_step < 0)),
    )


def summarize(steps: list[StepLedger], on_gpu: bool) -> Summary:
    """Median / p90 step time and shares over the decode steps (every step when there are none)."""
    decode = [s for s in steps if s.kind == "decode"]
    used = decode or steps
    walls = [s.wall_ns / 1000 for s in used]
    wall = sum(s.wall_ns for s in used)
    window = sum(s.gpu_window_ns for s in used)
    agg: dict[str, list[int]] = {}
    for s in used:
        for o in s.top_ops:
            a = agg.setdefault(o.name, [0, 0])
            a[0] += o.self_ns
            a[1] += o.calls
    top = tuple(OpTime(k, v[0], v[1]) for k, v in sorted(agg.items(), key=lambda kv: (-kv[1][0], kv[0]))[:10])
    return Summary(
        steps_used="decode" if decode else "all",
        steps=len(used),
        step_p50_us=float(np.percentile(walls, 50)),
        step_p90_us=float(np.percentile(walls, 90)),
        launches_per_step=float(np.median([s.dispatched for s in used])),
        dispatch="launches" if on_gpu else "top-level ops",
        busy_fraction=sum(s.gpu_busy_ns for s in used) / window if window else 0.0,
        cache_share=sum(s.cache_ns for s in used) / wall if wall else 0.0,
        python_share=sum(s.python_ns for s in used) / wall if wall else 0.0,
        unattributed_share=sum(s.unattributed_ns for s in used) / wall if wall else 0.0,
        top_ops=top,
    )


def step_timeline(trace: Trace, step: StepLedger) -> list[TimelineItem]:
    """Top-level ops, runtime calls made outside any op, and our ranges inside one step, in start order.

    `part` names the host part the item's time feeds: a range its own part ("cache_update", "mask", ...,
    "range" for `forward` and other plain ranges); an op or call the highest-priority range enclosing it
    ("sample" for the argmax inside `sample`), else "attention" or "ops". A view highlights cache ranges by it.
    """
    lo = trace.start_ns + step.start_ns
    hi = lo + step.wall_ns
    ops = thread_ops(trace, step.pid, step.tid)
    table = PartTable.build(trace)
    ranges = thread_rows(trace, trace.rows(Kind.USER_RANGE), step.pid, step.tid)
    ranges = ranges[(trace.ts_ns[ranges] >= lo) & (trace.end_ns[ranges] <= hi)]
    ranges = ranges[~((trace.ts_ns[ranges] == lo) & (trace.end_ns[ranges] == hi))]  # the step's own range
    range_part = {}
    for r in ranges.tolist():
        name_id = int(trace.name_id[r])
        range_part[r] = next((p for p in BUILTIN_PARTS if p in table.by_name and table.by_name[p][name_id]), "range")

    # per part, its ranges sorted by start and the running max of their ends: an interval [s, e] lies inside one
    # of them iff the largest end among those starting at or before s reaches e. One searchsorted per part.
    inside_part = []
    for part in BUILTIN_PARTS:
        rows = np.array([r for r, p in range_part.items() if p == part], dtype=np.int64)
        if rows.size:
            order = np.argsort(trace.ts_ns[rows], kind="stable")
            inside_part.append((part, trace.ts_ns[rows][order], np.maximum.accumulate(trace.end_ns[rows][order])))

    def enclosing(starts: np.ndarray, ends: np.ndarray, fallback: list[str]) -> list[str]:
        out = list(fallback)
        for part, range_start, reach in reversed(inside_part):  # highest priority last, so it wins
            k = np.searchsorted(range_start, starts, side="right") - 1
            hit = (k >= 0) & (reach[np.maximum(k, 0)] >= ends)
            for i in np.flatnonzero(hit).tolist():
                out[i] = part
        return out

    items: list[tuple[int, int, str, str, str]] = []
    top = np.flatnonzero((ops.depth == 0) & (ops.start >= lo) & (ops.start <= hi))
    names = trace.name_id[ops.rows[top]]
    own = ["attention" if table.by_name["attention"][n] else "ops" for n in names.tolist()]
    parts = enclosing(ops.start[top], ops.end[top], own)
    for i, n, part in zip(top.tolist(), names.tolist(), parts, strict=True):
        start, end = int(ops.start[i]), int(ops.end[i])
        items.append((start, end - start, trace.names[n], "op", part))
    ms, me = merge(ops.start[ops.depth == 0], ops.end[ops.depth == 0])
    calls = thread_rows(trace, trace.rows(Kind.RUNTIME), step.pid, step.tid)
    calls = calls[(trace.ts_ns[calls] >= lo) & (trace.ts_ns[calls] <= hi)]
    calls = calls[covered(ms, me, trace.ts_ns[calls], trace.end_ns[calls]) < trace.dur_ns[calls]]
    own = ["sync" if table.by_name["sync_call"][n] else "ops" for n in trace.name_id[calls].tolist()]
    parts = enclosing(trace.ts_ns[calls], trace.end_ns[calls], own)
    for c, part in zip(calls.tolist(), parts, strict=True):
        start, end = int(trace.ts_ns[c]), int(trace.end_ns[c])
        items.append((start, end - start, trace.name(c), "runtime", part))
    for r, part in range_part.items():
        items.append((int(trace.ts_ns[r]), int(trace.dur_ns[r]), trace.name(r), "range", part))
    items.sort(key=lambda it: (it[0], -it[1]))
    return [TimelineItem(name, kind, part, (start - lo) / 1000, dur / 1000) for start, dur, name, kind, part in items]


# ---------------------------------------------------------------------------------------------------------
# the median step


@dataclass(frozen=True)
class StepDigest:
    """The median steady-state step of an analyzed trace (its decode steps, else every step): wall, each host
    part, what it dispatched and GPU busy. Medians taken part by part, so the parts need not sum to the wall."""

    source: str
    steps: int  # how many steps the medians are over
    dispatch: str  # "launches" | "top-level ops" (Summary.dispatch)
    wall_us: float
    parts_us: dict[str, float]  # host part -> median us (StepLedger.host_parts_ns)
    dispatched: float
    gpu_busy_us: float | None  # None on a CPU-only trace

    @property
    def on_gpu(self) -> bool:
        return self.dispatch == "launches"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> StepDigest:
        doc = dict(doc)
        if "dispatched" not in doc:  # report.json files before the digest was typed
            gpu = doc.get("dispatch") == "launches"
            doc["dispatched"] = doc.get("launches") if gpu else doc.get("top_level_ops")
            doc["gpu_busy_us"] = doc.get("gpu_busy_us") if gpu else None
        return cls(**{f.name: doc[f.name] for f in dataclasses.fields(cls)})


def digest(analysis: TraceAnalysis) -> StepDigest:
    """The median steady-state step of `analysis`."""
    steps = steady_steps(analysis)
    parts = {p: float(np.median([s.host_parts_ns[p] for s in steps])) / 1e3 for p in steps[0].host_parts_ns}
    return StepDigest(
        source=analysis.source,
        steps=len(steps),
        dispatch=analysis.summary.dispatch,
        wall_us=float(np.median([s.wall_ns for s in steps])) / 1e3,
        parts_us=parts,
        dispatched=float(np.median([s.dispatched for s in steps])),
        gpu_busy_us=float(np.median([s.gpu_busy_ns for s in steps])) / 1e3 if analysis.on_gpu else None,
    )


def steady_steps(analysis: TraceAnalysis) -> list[StepLedger]:
    """The steps the summary describes (Summary.steps_used): the decode steps, else every step."""
    if analysis.summary.steps_used == "decode":
        return [s for s in analysis.steps if s.kind == "decode"]
    return list(analysis.steps)


__all__ = [
    "HOST_PARTS",
    "AnalyzeOptions",
    "EventCost",
    "OpTime",
    "StepDigest",
    "StepLedger",
    "Summary",
    "TimelineItem",
    "TraceAnalysis",
    "Totals",
    "analyze",
    "digest",
    "find_steps",
    "steady_steps",
    "step_timeline",
    "summarize",
]
