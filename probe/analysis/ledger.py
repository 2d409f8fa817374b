"""Per-step ledgers: where every step's time went, exactly, from one `Trace`.

`analyze(trace) -> TraceAnalysis` and `step_timeline(trace, step) -> list[TimelineItem]` are stateless; all
interval work is vectorized over sorted numpy arrays (searchsorted, cumulative sums), so the cost is
O(events log events) whatever the number of steps.

Steps. Our own ranges when present (`prefill`, `decode#i`, user ranges on the host); otherwise the trace's
`ProfilerStep#N` ranges (the GPU-side copies are ignored); otherwise one window from the first event's start
to the last event's end, on the host thread with the most cpu_ops. Every step is kept, the last one included.
A step's window is [start, end], both ends included, as in the shared README's per-step definition.

What a step's ledger says (times are integer ns inside; `_us` values are ns / 1000, never rounded):

- `wall`: the step range's own duration.
- `launches`: runtime calls named in the shared README's launch list (cudaLaunchKernel, cuLaunchKernelEx,
  hipLaunchKernel, ...; nsys's `_v7000` / `_ptsz` suffixes are stripped first) that start inside the window,
  on any thread. `graph_launches`: cudaGraphLaunch / hipGraphLaunch the same way. `runtime_calls`: all of them.
- `kernels`, `gpu_ops`: GPU work whose launching runtime call starts inside the window, joined on correlation
  id (what nsys's nvtx_gpu_proj_trace does, with the window in place of the NVTX range). A kernel replayed
  from a graph carries the graph launch's correlation, so it lands in the step that launched the graph.
  `gpu_ops` = kernels + memcpy + memset.
- `gpu_busy`: length of the union of those GPU ops' [start, end] intervals.
- `gpu_idle`, split as HTA's idle time breakdown: on each stream, the gap between a GPU op and the previous op
  on that stream is charged to the step the later op belongs to. `host_wait`: the op's launch call started
  after the previous op had finished (the host was late). `kernel_wait`: otherwise, when the gap is under
  `kernel_wait_ns` (HTA's `consecutive_kernel_delay`, 30 ns). `other`: the rest. Negative gaps count as 0.
  Summed over streams, as HTA does.
- The host partition, on the step's own thread: every ns of [start, end] goes to the first of these that
  covers it, so the parts add up to `wall` exactly (`closure` = parts / wall = 1):
  `sync` (our `sync` range, and runtime calls whose name contains "Synchronize"), `sample` (our `sample`),
  `cache_update`, `cache_seq_length`, `cache_mask_sizes` (our `cache.*` ranges: the cache bookkeeping),
  `mask` (our `mask` range, less the cache query nested in it), `attention` (scaled_dot_product_attention and
  what it calls), `ops` (every other top-level cpu_op, and runtime calls outside any op), `unattributed`
  (what no op or range covers: Python, the framework between ops, the profiler's own gaps).
- `top_level_ops`: cpu_ops on the step's thread, starting in the window, not nested in another cpu_op (on a
  CPU trace this is the dispatched aten op count, the CPU stand-in for launches). `op_counts`: the same by
  name. `top_ops`: host self time (duration less direct cpu_op children) per op name over every cpu_op on
  the step's thread that starts in the window, largest first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from probe import vocabulary as V
from probe.analysis.intervals import assign, covered, merge, nesting, union_by_group
from probe.analysis.trace import (
    GPU_OP_KINDS,
    GRAPH_LAUNCH_NAMES,
    LAUNCH_NAMES,
    PROFILER_STEP_PREFIX,
    Kind,
    Trace,
    api_base_name,
)

ATTENTION_OPS = frozenset(
    {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_attention_math",
    }
)
KERNEL_WAIT_NS = 30  # HTA's consecutive_kernel_delay default: gaps below this are launch-to-launch delay

# The host partition in priority order: a nanosecond covered by two of these goes to the first.
HOST_PARTS = ("sync", "sample", "cache_update", "cache_seq_length", "cache_mask_sizes", "mask", "attention", "ops")
STEP_KINDS = ("prefill", "decode", "profiler_step", "window")
TOP_OPS_KEPT = 20  # per step; op_counts keeps every name


# ---------------------------------------------------------------------------------------------------------
# results


_NS_FIELDS = (
    ("start_ns", "wall_ns", "gpu_busy_ns", "gpu_idle_ns", "idle_host_wait_ns", "idle_kernel_wait_ns", "idle_other_ns")
    + tuple(f"{p}_ns" for p in HOST_PARTS)
    + ("unattributed_ns",)
)


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

    name: str  # the range's label: "decode#3", "prefill", "ProfilerStep#6", or "trace" for the whole window
    kind: str  # "prefill" | "decode" | "profiler_step" | "window"
    index: int  # i of decode#i / ProfilerStep#i; 0 for prefill and for the window
    position: int  # 0-based order of the step in the trace
    pid: int
    tid: int  # the step's own thread: the host partition and the op counts are taken there
    start_ns: int  # from the trace's first event
    wall_ns: int
    launches: int
    graph_launches: int
    runtime_calls: int
    kernels: int
    gpu_ops: int
    gpu_busy_ns: int
    gpu_idle_ns: int  # = idle_host_wait_ns + idle_kernel_wait_ns + idle_other_ns
    idle_host_wait_ns: int
    idle_kernel_wait_ns: int
    idle_other_ns: int
    top_level_ops: int
    dispatched: int  # launches + graph launches on a GPU trace; top-level ops on a CPU-only one
    cpu_ops: int  # every cpu_op on the step's thread that starts in the window, nested ones included
    sync_ns: int
    sample_ns: int
    cache_update_ns: int
    cache_seq_length_ns: int
    cache_mask_sizes_ns: int
    mask_ns: int
    attention_ns: int
    ops_ns: int
    unattributed_ns: int
    op_counts: dict[str, int] = field(default_factory=dict)  # top-level op name -> calls in this step
    top_ops: tuple[OpTime, ...] = ()  # largest host self time first, at most TOP_OPS_KEPT

    @property
    def cache_ns(self) -> int:
        return self.cache_update_ns + self.cache_seq_length_ns + self.cache_mask_sizes_ns

    @property
    def host_parts_ns(self) -> dict[str, int]:
        """The partition of wall: every part, unattributed last. Sums to wall_ns."""
        parts = {p: getattr(self, f"{p}_ns") for p in HOST_PARTS}
        parts["unattributed"] = self.unattributed_ns
        return parts

    @property
    def closure(self) -> float:
        """Sum of the host parts over wall time (1.0 when the partition closes)."""
        return sum(self.host_parts_ns.values()) / self.wall_ns if self.wall_ns else 1.0

    @property
    def busy_fraction(self) -> float:
        return self.gpu_busy_ns / self.wall_ns if self.wall_ns else 0.0

    def to_json(self) -> dict:
        out = {
            "name": self.name,
            "kind": self.kind,
            "index": self.index,
            "position": self.position,
            "pid": self.pid,
            "tid": self.tid,
        }
        for f in dataclasses.fields(self):
            if f.name.endswith("_ns"):
                out[f.name[:-3] + "_us"] = getattr(self, f.name) / 1000
            elif f.name not in out and f.name not in ("op_counts", "top_ops"):
                out[f.name] = getattr(self, f.name)
        out["cache_us"] = self.cache_ns / 1000
        out["closure"] = self.closure
        out["busy_fraction"] = self.busy_fraction
        out["op_counts"] = dict(self.op_counts)
        out["top_ops"] = [{"name": o.name, "self_us": o.self_us, "calls": o.calls} for o in self.top_ops]
        return out


def _us_property(ns_field: str) -> property:
    return property(lambda self: getattr(self, ns_field) / 1000, doc=f"{ns_field} / 1000")


for _f in _NS_FIELDS + ("cache_ns",):
    setattr(StepLedger, _f[:-3] + "_us", _us_property(_f))


@dataclass(frozen=True)
class Totals:
    """Whole-trace counts, with the shared README's definitions exactly."""

    events: int  # rows of the event table (complete events)
    kernels: int
    launches: int
    graph_launches: int
    gpu_ops: int  # kernel + gpu_memcpy + gpu_memset
    gpu_busy_ns: int  # union of every GPU op's interval
    runtime_calls: int
    cpu_ops: int
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
    launches_per_step: float  # median; on a CPU-only trace, top-level ops per step (see `dispatch`)
    dispatch: str  # "launches" | "top-level ops"
    busy_fraction: float  # sum of GPU busy over sum of wall
    cache_share: float  # sum of cache bookkeeping over sum of wall
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
    steps: list[StepLedger]
    totals: Totals
    summary: Summary
    on_gpu: bool  # the trace has GPU work or launches: the one definition of "a GPU trace"
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
            "on_gpu": self.on_gpu,
            "origin_epoch_ns": self.origin_epoch_ns,
            "steps": [s.to_json() for s in self.steps],
            "totals": self.totals.to_json(),
            "summary": self.summary.to_json(),
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
# steps


@dataclass
class _Steps:
    names: list[str]
    kinds: list[str]
    indices: list[int]
    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    tid: np.ndarray


def _label_kinds(names: tuple[str, ...]) -> list[tuple[str, int] | None]:
    out = []
    for text in names:
        base, index = V.split_label(text)
        if text == V.PREFILL:
            out.append(("prefill", 0))
        elif base == V.DECODE and index is not None:
            out.append(("decode", index))
        else:
            out.append(None)
    return out


def _main_thread(trace: Trace) -> tuple[int, int]:
    """The host thread that did the most: most cpu_ops, else most ranges and runtime calls, else most rows."""
    for kinds in ((Kind.CPU_OP,), (Kind.USER_RANGE, Kind.PROFILER_STEP, Kind.RUNTIME), tuple(Kind)):
        rows = trace.rows(*kinds)
        rows = rows[trace.stream[rows] < 0]
        if len(rows):
            pairs, counts = np.unique(np.stack([trace.pid[rows], trace.tid[rows]]), axis=1, return_counts=True)
            best = int(np.argmax(counts))
            return int(pairs[0, best]), int(pairs[1, best])
    return -1, -1


def find_steps(trace: Trace) -> _Steps:
    """Our prefill / decode#i ranges; else ProfilerStep#N; else one window over the whole trace."""
    labels = _label_kinds(trace.names)
    ranges = trace.rows(Kind.USER_RANGE)
    ours = ranges[np.fromiter((labels[i] is not None for i in trace.name_id[ranges]), bool, len(ranges))]
    if len(ours):
        rows = ours
        kinds = [labels[i][0] for i in trace.name_id[rows]]
        indices = [labels[i][1] for i in trace.name_id[rows]]
    else:
        rows = trace.rows(Kind.PROFILER_STEP)
        kinds = ["profiler_step"] * len(rows)
        indices = [V.split_label(trace.names[i])[1] or 0 for i in trace.name_id[rows]]
    if len(rows):
        return _Steps(
            names=[trace.names[i] for i in trace.name_id[rows]],
            kinds=kinds,
            indices=indices,
            start=trace.ts_ns[rows],
            end=trace.end_ns[rows],
            pid=trace.pid[rows],
            tid=trace.tid[rows],
        )
    pid, tid = _main_thread(trace)
    return _Steps(
        names=["trace"],
        kinds=["window"],
        indices=[0],
        start=np.array([trace.start_ns]),
        end=np.array([int(trace.end_ns.max())]),
        pid=np.array([pid]),
        tid=np.array([tid]),
    )


# ---------------------------------------------------------------------------------------------------------
# the analysis


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
    op_launch_ts: np.ndarray  # ts of the runtime call that launched each GPU op; -1 when unknown
    op_known: np.ndarray  # whether that call was found


def _gpu_attribution(trace: Trace, steps: _Steps) -> _Gpu:
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
    launch_ts = np.where(known, trace.ts_ns[rt[np.maximum(launch, 0)]] if len(rt) else -1, -1)
    return _Gpu(rt, rt_step, ops, op_step, launch_ts, known)


def _idle(trace: Trace, gpu: _Gpu, n: int, kernel_wait_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HTA's idle breakdown per stream, each gap charged to the step of the op that ends it."""
    ops = gpu.op_rows
    host = np.zeros(n, np.int64)
    kern = np.zeros(n, np.int64)
    other = np.zeros(n, np.int64)
    if len(ops) < 2:
        return host, kern, other
    order = np.lexsort((trace.ts_ns[ops], trace.stream[ops], trace.device[ops]))
    ts, end = trace.ts_ns[ops][order], trace.end_ns[ops][order]
    stream, device = trace.stream[ops][order], trace.device[ops][order]
    step, launch_ts, known = gpu.op_step[order], gpu.op_launch_ts[order], gpu.op_known[order]
    same = (stream[1:] == stream[:-1]) & (device[1:] == device[:-1])
    prev_end = end[:-1]
    gap = np.maximum(ts[1:] - prev_end, 0)
    is_host = known[1:] & (launch_ts[1:] > prev_end)
    is_kernel = ~is_host & (ts[1:] - prev_end < kernel_wait_ns)
    charged = same & (step[1:] >= 0)
    for out, sel in ((host, is_host), (kern, is_kernel & ~is_host), (other, ~is_host & ~is_kernel)):
        m = charged & sel
        np.add.at(out, step[1:][m], gap[m])
    return host, kern, other


def _thread_rows(trace: Trace, rows: np.ndarray, pid: int, tid: int) -> np.ndarray:
    return rows[(trace.pid[rows] == pid) & (trace.tid[rows] == tid)]


@dataclass
class _Ops:
    """The cpu_ops of one thread, sorted by (start asc, end desc), with their nesting."""

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    depth: np.ndarray
    self_ns: np.ndarray


def _thread_ops(trace: Trace, pid: int, tid: int) -> _Ops:
    rows = _thread_rows(trace, trace.rows(Kind.CPU_OP), pid, tid)
    start, end = trace.ts_ns[rows], trace.end_ns[rows]
    order = np.lexsort((-end, start))
    rows, start, end = rows[order], start[order], end[order]
    depth, parent = nesting(start, end)
    dur = end - start
    child = np.zeros(len(rows), np.int64)
    has = parent >= 0
    np.add.at(child, parent[has], dur[has])
    return _Ops(rows, start, end, depth, np.maximum(dur - child, 0))


def _part_masks(trace: Trace) -> dict[str, np.ndarray]:
    """Per name id: which host part a range or op of that name feeds."""
    split = [V.split_label(n)[0] for n in trace.names]
    by_name = {
        "sync": np.array([n == V.SYNC for n in split], bool),
        "sample": np.array([n == V.SAMPLE for n in split], bool),
        "cache_update": np.array([n == V.CACHE_UPDATE for n in split], bool),
        "cache_seq_length": np.array([n == V.CACHE_SEQ_LENGTH for n in split], bool),
        "cache_mask_sizes": np.array([n == V.CACHE_MASK_SIZES for n in split], bool),
        "mask": np.array([n == V.MASK for n in split], bool),
        "attention": np.array([n in ATTENTION_OPS for n in trace.names], bool),
        "sync_api": np.array(["Synchronize" in n for n in trace.names], bool),
    }
    return by_name


def _host_partition(
    trace: Trace, steps: _Steps, sel: np.ndarray, ops: _Ops, masks: dict[str, np.ndarray], parts: dict[str, np.ndarray]
) -> None:
    """Fill parts[p][sel] for the steps `sel`, which all run on the thread `ops` was taken from."""
    pid, tid = int(steps.pid[sel[0]]), int(steps.tid[sel[0]])
    lo, hi = steps.start[sel], steps.end[sel]
    ranges = _thread_rows(trace, trace.rows(Kind.USER_RANGE), pid, tid)
    runtime = _thread_rows(trace, trace.rows(Kind.RUNTIME), pid, tid)
    r_name, rt_name, op_name = trace.name_id[ranges], trace.name_id[runtime], trace.name_id[ops.rows]

    def spans(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return trace.ts_ns[rows], trace.end_ns[rows]

    tiers = {
        "sync": [spans(ranges[masks["sync"][r_name]]), spans(runtime[masks["sync_api"][rt_name]])],
        "attention": [(ops.start[masks["attention"][op_name]], ops.end[masks["attention"][op_name]])],
        "ops": [(ops.start[ops.depth == 0], ops.end[ops.depth == 0]), spans(runtime)],
    }
    for p in ("sample", "cache_update", "cache_seq_length", "cache_mask_sizes", "mask"):
        tiers[p] = [spans(ranges[masks[p][r_name]])]
    acc_s, acc_e = np.zeros(0, np.int64), np.zeros(0, np.int64)
    before = np.zeros(len(lo), np.int64)
    for p in HOST_PARTS:
        acc_s = np.concatenate([acc_s] + [s for s, _ in tiers[p]])
        acc_e = np.concatenate([acc_e] + [e for _, e in tiers[p]])
        acc_s, acc_e = merge(acc_s, acc_e)
        now = covered(acc_s, acc_e, lo, hi)
        parts[p][sel] = now - before
        before = now
    parts["unattributed"][sel] = (hi - lo) - before


def _op_tables(trace: Trace, steps: _Steps, sel: np.ndarray, ops: _Ops):
    """Per step in `sel`: top-level count, all-op count, op_counts dict and top_ops tuple."""
    step = assign(ops.start, steps.start[sel], steps.end[sel])
    inside = step >= 0
    names = trace.name_id[ops.rows]
    n = len(sel)
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


def analyze(trace: Trace, kernel_wait_ns: int = KERNEL_WAIT_NS) -> TraceAnalysis:
    """The per-step ledger of every step, the whole-trace totals and a steady-state summary."""
    steps = find_steps(trace)
    order = np.argsort(steps.start, kind="stable")
    steps = _Steps(
        [steps.names[i] for i in order],
        [steps.kinds[i] for i in order],
        [steps.indices[i] for i in order],
        steps.start[order],
        steps.end[order],
        steps.pid[order],
        steps.tid[order],
    )
    n = len(steps.start)
    warnings = list(trace.warnings)
    if n > 1 and np.any(steps.start[1:] < steps.end[:-1]):
        warnings.append("steps overlap in time: an event in the overlap is counted in the later step only")

    launch_names = trace.name_ids(lambda s: api_base_name(s) in LAUNCH_NAMES)
    graph_names = trace.name_ids(lambda s: api_base_name(s) in GRAPH_LAUNCH_NAMES)
    gpu = _gpu_attribution(trace, steps)
    rt_names = trace.name_id[gpu.rt_rows]
    in_step = gpu.rt_step >= 0

    def per_step(mask: np.ndarray) -> np.ndarray:
        return np.bincount(gpu.rt_step[in_step & mask], minlength=n)

    launches, graphs = per_step(launch_names[rt_names]), per_step(graph_names[rt_names])
    runtime_calls = per_step(np.ones(len(gpu.rt_rows), bool))
    op_kind = trace.kind[gpu.op_rows]
    attributed = gpu.op_step >= 0
    kernels = np.bincount(gpu.op_step[attributed & (op_kind == Kind.KERNEL)], minlength=n)
    gpu_ops = np.bincount(gpu.op_step[attributed], minlength=n)
    busy = union_by_group(gpu.op_step, trace.ts_ns[gpu.op_rows], trace.end_ns[gpu.op_rows], n)
    idle_host, idle_kernel, idle_other = _idle(trace, gpu, n, kernel_wait_ns)

    parts = {p: np.zeros(n, np.int64) for p in HOST_PARTS + ("unattributed",)}
    top_counts, all_counts = np.zeros(n, np.int64), np.zeros(n, np.int64)
    op_counts: list[dict[str, int]] = [{} for _ in range(n)]
    top_ops: list[tuple[OpTime, ...]] = [() for _ in range(n)]
    masks = _part_masks(trace)
    threads = np.unique(np.stack([steps.pid, steps.tid]), axis=1)
    for pid, tid in threads.T.tolist():  # one pass per step thread (usually one), never per step
        sel = np.flatnonzero((steps.pid == pid) & (steps.tid == tid))
        ops = _thread_ops(trace, pid, tid)
        _host_partition(trace, steps, sel, ops, masks, parts)
        tc, ac, oc, to = _op_tables(trace, steps, sel, ops)
        top_counts[sel], all_counts[sel] = tc, ac
        for j, s in enumerate(sel.tolist()):
            op_counts[s], top_ops[s] = oc[j], to[j]

    totals = _totals(trace, gpu, launch_names, graph_names)
    on_gpu = totals.gpu_ops + totals.launches + totals.graph_launches > 0
    dispatched = launches + graphs if on_gpu else top_counts
    t0 = trace.start_ns
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
            kernels=int(kernels[i]),
            gpu_ops=int(gpu_ops[i]),
            gpu_busy_ns=int(busy[i]),
            gpu_idle_ns=int(idle_host[i] + idle_kernel[i] + idle_other[i]),
            idle_host_wait_ns=int(idle_host[i]),
            idle_kernel_wait_ns=int(idle_kernel[i]),
            idle_other_ns=int(idle_other[i]),
            top_level_ops=int(top_counts[i]),
            dispatched=int(dispatched[i]),
            cpu_ops=int(all_counts[i]),
            **{f"{p}_ns": int(parts[p][i]) for p in HOST_PARTS + ("unattributed",)},
            op_counts=op_counts[i],
            top_ops=top_ops[i],
        )
        for i in range(n)
    ]
    origin = None if trace.base_ns is None or not len(trace) else int(trace.base_ns + trace.start_ns)
    return TraceAnalysis(
        format=trace.format,
        source=trace.source,
        steps=ledgers,
        totals=totals,
        summary=summarize(ledgers, on_gpu),
        on_gpu=on_gpu,
        warnings=tuple(warnings),
        origin_epoch_ns=origin,
    )


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
        span_ns=int(trace.end_ns.max() - trace.start_ns),
        unattributed_gpu_ops=int(np.sum(gpu.op_step < 0)),
    )


def summarize(steps: list[StepLedger], on_gpu: bool) -> Summary:
    """Median / p90 step time and shares over the decode steps (every step when there are none)."""
    decode = [s for s in steps if s.kind == "decode"]
    used = decode or steps
    walls = [s.wall_ns / 1000 for s in used]
    wall = sum(s.wall_ns for s in used)
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
        busy_fraction=sum(s.gpu_busy_ns for s in used) / wall if wall else 0.0,
        cache_share=sum(s.cache_ns for s in used) / wall if wall else 0.0,
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
    ops = _thread_ops(trace, step.pid, step.tid)
    masks = _part_masks(trace)
    ranges = _thread_rows(trace, trace.rows(Kind.USER_RANGE), step.pid, step.tid)
    ranges = ranges[(trace.ts_ns[ranges] >= lo) & (trace.end_ns[ranges] <= hi)]
    ranges = ranges[~((trace.ts_ns[ranges] == lo) & (trace.end_ns[ranges] == hi))]  # the step's own range
    range_part = {}
    for r in ranges.tolist():
        name_id = int(trace.name_id[r])
        range_part[r] = next((p for p in HOST_PARTS if p in masks and masks[p][name_id]), "range")

    def enclosing(start: int, end: int, fallback: str) -> str:
        inside = [
            range_part[r]
            for r in range_part
            if range_part[r] != "range" and trace.ts_ns[r] <= start and end <= trace.end_ns[r]
        ]
        return min(inside, key=HOST_PARTS.index) if inside else fallback

    items: list[tuple[int, int, str, str, str]] = []
    top = np.flatnonzero((ops.depth == 0) & (ops.start >= lo) & (ops.start <= hi))
    for i in top.tolist():
        name_id = int(trace.name_id[ops.rows[i]])
        start, end = int(ops.start[i]), int(ops.end[i])
        own = "attention" if masks["attention"][name_id] else "ops"
        items.append((start, end - start, trace.names[name_id], "op", enclosing(start, end, own)))
    ms, me = merge(ops.start[ops.depth == 0], ops.end[ops.depth == 0])
    calls = _thread_rows(trace, trace.rows(Kind.RUNTIME), step.pid, step.tid)
    calls = calls[(trace.ts_ns[calls] >= lo) & (trace.ts_ns[calls] <= hi)]
    calls = calls[covered(ms, me, trace.ts_ns[calls], trace.end_ns[calls]) < trace.dur_ns[calls]]
    for c in calls.tolist():
        start, end = int(trace.ts_ns[c]), int(trace.end_ns[c])
        own = "sync" if masks["sync_api"][trace.name_id[c]] else "ops"
        items.append((start, end - start, trace.name(c), "runtime", enclosing(start, end, own)))
    for r, part in range_part.items():
        items.append((int(trace.ts_ns[r]), int(trace.dur_ns[r]), trace.name(r), "range", part))
    items.sort(key=lambda it: (it[0], -it[1]))
    return [TimelineItem(name, kind, part, (start - lo) / 1000, dur / 1000) for start, dur, name, kind, part in items]


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
    "PROFILER_STEP_PREFIX",
    "OpTime",
    "StepLedger",
    "Summary",
    "TimelineItem",
    "TraceAnalysis",
    "Totals",
    "StepDigest",
    "analyze",
    "digest",
    "find_steps",
    "steady_steps",
    "step_timeline",
    "summarize",
]
