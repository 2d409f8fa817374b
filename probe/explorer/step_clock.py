"""One step on one clock, the way Perfetto draws it, for the explorer's One step view (torch-free).

`step_clock(trace, analysis, position) -> StepClock` lays out, over the step read whole (host start to the
later of the host end and its GPU work's end, `StepLedger.span_ns`) or a window of it:

- **the step's thread**: its ranges, Python frames, cpu_ops and runtime calls, each kind by its nesting depth (a lane
  per depth), each event coloured by the purpose part its time feeds (probe.analysis.ledger.host: the user's parts,
  sync, sample, cache, mask, attention), else by what it is (a Python frame, an op's dispatch, a launch or runtime
  call);
- **the host window**, one lane the Diagnosis's way: host work, the sync wait while the trace's GPU work ran, and the
  external wait (`ledger.unseen_wait_pieces`: no GPU op of the trace ran), adding up to the window, from the
  mechanism partition's own sync-wait pieces (`host.mechanism_split`); with the sync call sites marked;
- **the other threads** busy in the window (their outermost events), the busiest `MAX_THREADS` of them;
- **the GPU**: the step's idle gaps with their causes (`gpu.idle_gaps`, the ledger's own rule: their sums are
  `idle_host_wait`, `idle_kernel_wait` and `idle_other`), the stretch before its first GPU op, and one lane a
  stream (device, stream) of kernels (coloured by kernel category), memcpy and memset; GPU ops of other steps (or
  of none) that ran in the window are drawn too, marked as not this step's;
- **links**: for every GPU op, the runtime call that launched it (joined on correlation, as the ledger does).

Every figure comes from the ledger's own rules, so the view and the tables cannot disagree. (The flat list
`probe analyze --step` prints, probe.analysis.ledger.timeline.step_events, colours by the same rule, `purpose_of`.)

**Aggregation.** A step can hold 50,000 Python frames; a browser draws a few thousand bars well. Each lane is cut
at the window's resolution (its width over `COLUMNS`): an event at least that long is drawn as itself; a run of
shorter events, each within a column of the one before, becomes one merged bar that says how many events it holds
and which. While the bars exceed `MAX_BARS` the resolution doubles. Nothing is dropped: `merged` records, lane by
lane, how many events went into how many bars, and a narrower window draws its events one by one again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from probe.analysis.intervals import covered, distinct_pairs, merge, nesting
from probe.analysis.ledger import kernels
from probe.analysis.ledger.build import unseen_wait_pieces
from probe.analysis.ledger.gpu import IDLE_CAUSES, attribute, idle_gaps
from probe.analysis.ledger.host import (
    PartTable,
    host_events,
    mechanism_split,
    purpose_tiers,
    thread_ops,
    thread_rows,
)
from probe.analysis.ledger.timeline import purpose_of
from probe.analysis.ledger.types import AnalyzeOptions, StepLedger, TraceAnalysis
from probe.analysis.trace import COPY_KINDS, GPU_OP_KINDS, Kind, Trace

COLUMNS = 800  # a window's width in columns: about a pixel each, at the width the explorer draws the lanes
MAX_BARS = 3000  # bars in one drawing (about 0.9 MB of figure, drawn in seconds); past this the resolution doubles
MAX_THREADS = 6  # other threads drawn, busiest in the window first; the rest are named in the notes
MAX_MARKS = 300  # sync call sites marked; past this the notes say how many more there are
NOTABLE = 0.01  # of the window: a stretch worth a note of its own
HOST_KINDS = (  # the step's thread, top to bottom: (trace kinds, lane name, what one event is called)
    ((Kind.USER_RANGE, Kind.PROFILER_STEP), "ranges", "range"),
    ((Kind.PYTHON,), "Python", "Python frame"),
    ((Kind.CPU_OP,), "ops", "op"),
    ((Kind.RUNTIME,), "runtime calls", "runtime call"),
)

LaneGroup = Literal["host", "thread", "gpu"]  # the step's own thread, another thread, a GPU stream (or its idle lane)
BarKind = Literal[
    "range",
    "python",
    "op",
    "runtime",
    "thread",
    "host_work",
    "gpu_wait",
    "external",
    "idle",
    "lead",
    "kernel",
    "memcpy",
    "memset",
]
LEAD = "before_gpu"  # the stretch from the host window's start to the step's first GPU op (not a gap: no GPU window)


@dataclass(frozen=True)
class Lane:
    label: (
        str  # "ranges 0", "Python 3", "ops 1", "runtime calls", "host window", "thread 7", "GPU idle", "GPU 0 stream 7"
    )
    group: LaneGroup


@dataclass(frozen=True)
class Bar:
    """One drawn bar: an event, a gap, or (`count` > 1) a run of short events merged."""

    lane: int
    start_ns: int  # from the step's start (its host window opening)
    dur_ns: int
    kind: BarKind
    key: str  # the colour: a purpose part, a mechanism, a kernel category, an idle cause, a host-window piece, LEAD
    name: str  # the full name; for a merged bar, how many events of what
    detail: str  # what the hover adds: shapes, bytes, category, the launch, or a merged bar's top names
    row: int = -1  # the trace row; -1 for a gap or a merged bar
    count: int = 1  # events this bar stands for
    own: bool = True  # for a GPU op: this step's (False: another step's, or no step's)
    extent_ns: int = 0  # a merged bar: from its first event's start to its last one's end (dur_ns is what they cover)


@dataclass(frozen=True)
class GpuOp:
    """One GPU op in the window, with the call that launched it: what the launch-to-kernel links are drawn from."""

    row: int
    lane: int
    start_ns: int
    dur_ns: int
    name: str
    category: str
    own: bool
    call_row: int  # -1: no launch call in the trace
    call_name: str
    call_lane: int  # -1: the call lies on no drawn lane
    call_start_ns: int | None
    op: str = ""  # the innermost cpu_op around the launch call on the step's thread, with its recorded shapes


@dataclass(frozen=True)
class SyncMark:
    lane: int
    start_ns: int
    dur_ns: int
    call: str
    detail: str


@dataclass(frozen=True)
class Merged:
    lane: str
    events: int  # events that went into merged bars on this lane
    bars: int  # how many merged bars they became


@dataclass(frozen=True)
class StepClock:
    step: str
    position: int
    wall_ns: int  # the host window
    span_ns: int  # the step read whole
    window: tuple[int, int]  # what is drawn, ns from the step's start
    gpu_start_ns: int | None  # the step's first GPU op, from the step's start
    gpu_end_ns: int | None
    resolution_ns: int  # a column: events shorter than this are merged with their neighbours
    lanes: tuple[Lane, ...]
    bars: tuple[Bar, ...]
    ops: tuple[GpuOp, ...]  # every GPU op in the window, this step's first
    marks: tuple[SyncMark, ...]
    merged: tuple[Merged, ...]
    events: int  # events and gaps in the window, before merging
    external_ns: int  # external wait drawn: all of StepLedger.external_wait_ns when the window holds the step
    notes: tuple[str, ...] = ()

    def links(self, rows) -> list[GpuOp]:
        """The GPU ops a selection links to their launch calls: the ops of these rows, and every op launched by a
        call of these rows (a graph launch links to all it replayed)."""
        rows = set(rows)
        return [o for o in self.ops if (o.row in rows or o.call_row in rows) and o.call_lane >= 0]


@dataclass
class _Items:
    """Events before aggregation, as columns (times in ns from the step's start)."""

    lane: list[np.ndarray]
    start: list[np.ndarray]
    end: list[np.ndarray]
    kind: list[np.ndarray]  # object arrays of Bar.kind
    key: list[np.ndarray]
    row: list[np.ndarray]
    own: list[np.ndarray]

    def add(self, lane, start, end, kind, key, row, own=True) -> None:
        n = len(start)
        full = lambda v, dtype: np.full(n, v, dtype) if np.isscalar(v) or v is None else np.asarray(v, dtype)  # noqa: E731
        self.lane.append(full(lane, np.int64))
        self.start.append(np.asarray(start, np.int64))
        self.end.append(np.asarray(end, np.int64))
        self.kind.append(full(kind, object))
        self.key.append(full(key, object))
        self.row.append(full(row, np.int64))
        self.own.append(full(own, bool))

    def columns(self):
        return [np.concatenate(c) if c else np.zeros(0) for c in (*vars(self).values(),)]


def step_clock(
    trace: Trace,
    analysis: TraceAnalysis,
    position: int,
    options: AnalyzeOptions | None = None,
    window: tuple[int, int] | None = None,
) -> StepClock:
    """The step at `position` on one clock; `window` (ns from the step's start) narrows what is drawn. `options`
    are the ones the analysis was made with (its kernel categories and kernel-wait threshold)."""
    options = options or AnalyzeOptions()
    step = analysis.step(position)
    t0 = analysis.origin_ns + step.start_ns  # the step's start on the trace's clock
    lo, hi = window if window is not None else (0, step.span_ns)
    lo, hi = max(0, int(lo)), max(int(hi), int(lo) + 1)
    a, b = t0 + lo, t0 + hi
    table = PartTable.build(trace, options.parts)
    lanes: list[Lane] = []
    items = _Items([], [], [], [], [], [], [])
    notes: list[str] = []
    call_lane = _host_lanes(trace, table, step, a, b, t0, lanes, items)
    external = _host_window(trace, table, step, t0, a, b, lanes, items)
    marks, more = _sync_marks(trace, table, step, t0, a, b, call_lane)
    if more:
        notes.append(f"{more} more sync calls in the window are drawn as bars but not marked (over {MAX_MARKS})")
    notes += _other_threads(trace, step, t0, a, b, lanes, items, call_lane)
    ops = _gpu(trace, analysis, step, options, t0, a, b, lanes, items, call_lane)
    events = sum(len(x) for x in items.start)
    notes += _unseen_gaps(items, hi - lo)
    bars, merged, q = _aggregate(trace, items, lanes, hi - lo)
    ops_detail = {o.row: o for o in ops}
    bars = [_with_hover(trace, bar, ops_detail) for bar in bars]
    gpu_start = None if step.gpu_start_ns is None else step.gpu_start_ns - step.start_ns
    gpu_end = None if step.gpu_end_ns is None else step.gpu_end_ns - step.start_ns
    return StepClock(
        step=step.name,
        position=step.position,
        wall_ns=step.wall_ns,
        span_ns=step.span_ns,
        window=(lo, hi),
        gpu_start_ns=gpu_start,
        gpu_end_ns=gpu_end,
        resolution_ns=q,
        lanes=tuple(lanes),
        bars=tuple(bars),
        ops=tuple(sorted(ops, key=lambda o: (not o.own, o.start_ns, o.row))),
        marks=tuple(marks),
        merged=tuple(merged),
        events=events,
        external_ns=external,
        notes=tuple(notes),
    )


# ---- the CLI's flat list: `probe analyze --step` --------------------------------------------------------------


# ---- the step's thread ------------------------------------------------------------------------------------------


def _overlapping(trace: Trace, rows: np.ndarray, a: int, b: int) -> np.ndarray:
    return rows[(trace.ts_ns[rows] <= b) & (trace.end_ns[rows] >= a)]


def _by_depth(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by (start, longest first), with their nesting depth."""
    start, end = trace.ts_ns[rows], trace.end_ns[rows]
    order = np.lexsort((-end, start))
    rows = rows[order]
    depth, _ = nesting(trace.ts_ns[rows], trace.end_ns[rows])
    return rows, depth


def _host_lanes(trace, table, step: StepLedger, a, b, t0, lanes, items) -> dict[int, int]:
    """The step's thread, a lane per kind and depth; returns the lane of each runtime call drawn (for links)."""
    tiers = purpose_tiers(trace, table, step.pid, step.tid)
    sync_call, sync_frame = table.by_name["sync_call"], table.by_name["sync_frame"]
    call_lane: dict[int, int] = {}
    for kinds, lane_name, _ in HOST_KINDS:
        rows = _overlapping(trace, thread_rows(trace, trace.rows(*kinds), step.pid, step.tid), a, b)
        if not len(rows):
            continue
        rows, depth = _by_depth(trace, rows)
        names = trace.name_id[rows]
        kind = {"ranges": "range", "Python": "python", "ops": "op", "runtime calls": "runtime"}[lane_name]
        if kind == "range":
            fallback = np.full(len(rows), "range", object)
        elif kind == "python":
            fallback = np.where(sync_frame[names], "sync_wait", "python").astype(object)
        elif kind == "op":
            fallback = np.full(len(rows), "dispatch", object)
        else:
            launch = trace.launch_kind[rows] > 0
            fallback = np.where(sync_call[names], "sync_wait", np.where(launch, "launch", "runtime"))
        start, end = trace.ts_ns[rows], trace.end_ns[rows]
        key = purpose_of(tiers, table.order, start, end, fallback)
        first = len(lanes)
        for d in range(int(depth.max()) + 1):
            lanes.append(Lane(f"{lane_name} {d}" if depth.max() or kind != "runtime" else lane_name, "host"))
        items.add(first + depth, start - t0, end - t0, kind, key, rows)
        if kind == "runtime":
            call_lane.update(zip(rows.tolist(), (first + depth).tolist(), strict=True))
    return call_lane


def _host_window(trace, table, step: StepLedger, t0, a, b, lanes, items) -> int:
    """The host window as the Diagnosis splits it, one lane whose pieces add up to it: host work (the window less
    its sync wait: `host_work`), sync wait while the trace's GPU work ran (`gpu_wait`), and the external wait (no
    GPU op of the trace ran: `external`, ledger.unseen_wait_pieces, whose sum is the ledger's external_wait).
    Returns the external wait drawn."""
    lo, hi = np.array([t0]), np.array([t0 + step.wall_ns])
    _, seg_s, seg_e = mechanism_split(trace, table, step.pid, step.tid, lo, hi).sync_segments
    gpu = trace.rows(*GPU_OP_KINDS)
    gpu_s, gpu_e = merge(trace.ts_ns[gpu], trace.end_ns[gpu])  # the trace's GPU busy, every device (as the ledger)
    _, ext_s, ext_e = unseen_wait_pieces(gpu_s, gpu_e, seg_s, seg_e)
    ext_s, ext_e = merge(ext_s, ext_e)  # sorted, as the set arithmetic below needs (the split lists by call)
    seg_s, seg_e = merge(seg_s, seg_e)
    work_s, work_e = _gaps(seg_s, seg_e, t0, t0 + step.wall_ns)
    wait_s, wait_e = _intersect(seg_s, seg_e, *_gaps(ext_s, ext_e, t0, t0 + step.wall_ns))
    lane = len(lanes)
    lanes.append(Lane("host window", "host"))
    for s, e, kind in ((work_s, work_e, "host_work"), (wait_s, wait_e, "gpu_wait"), (ext_s, ext_e, "external")):
        keep = (s <= b) & (e >= a)
        items.add(lane, s[keep] - t0, e[keep] - t0, kind, kind, -1)
    keep = (ext_s <= b) & (ext_e >= a)
    return int(np.sum(np.minimum(ext_e[keep], b) - np.maximum(ext_s[keep], a)))


def _gaps(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """What sorted, disjoint intervals leave of [lo, hi]."""
    s = np.concatenate(([lo], ends)).astype(np.int64)
    e = np.concatenate((starts, [hi])).astype(np.int64)
    keep = e > s
    return s[keep], e[keep]


def _intersect(a_s, a_e, b_s, b_e) -> tuple[np.ndarray, np.ndarray]:
    """Where two lists of sorted, disjoint intervals overlap."""
    first = np.searchsorted(a_e, b_s, side="right")  # for each b, the first a ending after it starts
    last = np.searchsorted(a_s, b_e, side="left") - 1  # and the last starting before it ends
    count = np.maximum(last - first + 1, 0)
    i = np.repeat(np.arange(len(b_s)), count)
    j = np.repeat(first, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    start, end = np.maximum(a_s[j], b_s[i]), np.minimum(a_e[j], b_e[i])
    keep = end > start
    return start[keep], end[keep]


def _sync_marks(trace, table, step: StepLedger, t0, a, b, call_lane) -> tuple[list[SyncMark], int]:
    """Each blocking call and synchronizing frame on the step's thread in the window, with what the ledger's sync
    sites say of it (the innermost frame, the source line, a copy's size and direction)."""
    calls = _overlapping(trace, thread_rows(trace, trace.rows(Kind.RUNTIME), step.pid, step.tid), a, b)
    calls = calls[table.by_name["sync_call"][trace.name_id[calls]]]
    frames = _overlapping(trace, thread_rows(trace, trace.rows(Kind.PYTHON), step.pid, step.tid), a, b)
    frames = frames[table.by_name["sync_frame"][trace.name_id[frames]]]
    rows = np.sort(np.concatenate((calls, frames)))
    sites = {s.call: s for s in step.sync_sites}
    lane = next(iter(call_lane.values()), 0)
    marks = []
    for r in rows[:MAX_MARKS].tolist():
        name = trace.name(r)
        site = sites.get(name)
        said = [f"waited {trace.dur_ns[r] / 1e3:,.1f} µs"]
        if trace.bytes[r] >= 0 or trace.copy_kind[r] >= 0:
            said.append(_copy_text(trace, r))
        if site is not None:
            said += [x for x in (site.frame, site.source) if x and x != name]
        marks.append(
            SyncMark(call_lane.get(r, lane), int(trace.ts_ns[r] - t0), int(trace.dur_ns[r]), name, "; ".join(said))
        )
    return marks, max(0, len(rows) - MAX_MARKS)


def _copy_text(trace: Trace, row: int) -> str:
    size = f"{int(trace.bytes[row]):,} B" if trace.bytes[row] >= 0 else "a"
    kind = int(trace.copy_kind[row])
    return f"{size} copy" + (f", {COPY_KINDS[kind]}" if 0 <= kind < len(COPY_KINDS) else "")


def _other_threads(trace, step: StepLedger, t0, a, b, lanes, items, call_lane) -> list[str]:
    """Every other thread with host events in the window: the busiest MAX_THREADS as a lane each (their outermost
    events), the rest named."""
    host = trace.rows(Kind.PYTHON, Kind.CPU_OP, Kind.RUNTIME)
    host = _overlapping(trace, host, a, b)
    mine = (trace.pid[host] == step.pid) & (trace.tid[host] == step.tid)
    host = host[~mine]
    if not len(host):
        return []
    busy = []
    for pid, tid in distinct_pairs(trace.pid[host], trace.tid[host]).T.tolist():
        rows = _overlapping(trace, host_events(trace, pid, tid), a, b)
        ms, me = merge(trace.ts_ns[rows], trace.end_ns[rows])
        busy.append((-int(covered(ms, me, np.array([a]), np.array([b]))[0]), pid, tid, rows))
    busy.sort(key=lambda x: x[:3])
    kind_of = {Kind.PYTHON: "python", Kind.CPU_OP: "op", Kind.RUNTIME: "runtime"}
    for _, pid, tid, rows in busy[:MAX_THREADS]:
        rows, depth = _by_depth(trace, rows)
        rows = rows[depth == 0]
        lane = len(lanes)
        lanes.append(Lane(f"thread {tid}" if pid == step.pid else f"process {pid} thread {tid}", "thread"))
        kinds = np.array([kind_of[Kind(k)] for k in trace.kind[rows].tolist()], object)
        key = np.where(kinds == "op", "dispatch", kinds).astype(object)
        items.add(lane, trace.ts_ns[rows] - t0, trace.end_ns[rows] - t0, "thread", key, rows)
        call_lane.update((r, lane) for r in rows[trace.kind[rows] == Kind.RUNTIME].tolist())
    return [
        f"thread {tid} (process {pid}): {-ns / 1e6:.3f} ms busy in the window, not drawn (over {MAX_THREADS} threads)"
        for ns, pid, tid, _ in busy[MAX_THREADS:]
    ]


# ---- the GPU ----------------------------------------------------------------------------------------------------


def _gpu(trace, analysis: TraceAnalysis, step: StepLedger, options, t0, a, b, lanes, items, call_lane) -> list[GpuOp]:
    """The step's idle gaps and lead-in on a lane, then one lane a stream; returns every GPU op in the window."""
    gpu = attribute(trace, *analysis.windows())
    mine = gpu.op_step == step.position
    gaps = idle_gaps(trace, gpu, options.kernel_wait_ns)
    sel = (gaps.step == step.position) & (gaps.start <= b) & (gaps.end >= a)
    lead = step.gpu_start_ns  # the step's first GPU op: a lead-in to draw when it starts after the host window
    if lead is not None and lead <= step.start_ns:
        lead = None
    in_window = (trace.ts_ns[gpu.op_rows] <= b) & (trace.end_ns[gpu.op_rows] >= a)
    if not (sel.any() or lead is not None or in_window.any()):
        return []
    _idle_lane(analysis, gaps, sel, lead, t0, a, lanes, items)
    rows = gpu.op_rows[in_window]
    own = mine[in_window]
    launch = gpu.op_launch[in_window]
    lane = _stream_lanes(trace, rows, lanes)
    rules = kernels.KernelRules.build(options.kernel_rules)
    category = _categories(trace, rows, rules)
    kind = np.array(["kernel", "memcpy", "memset"], object)[
        np.searchsorted([Kind.KERNEL, Kind.GPU_MEMCPY, Kind.GPU_MEMSET], trace.kind[rows])
    ]
    items.add(lane, trace.ts_ns[rows] - t0, trace.end_ns[rows] - t0, kind, category, rows, own)
    return _gpu_ops(trace, step, t0, rows, lane, category, own, launch, call_lane)


def _idle_lane(analysis: TraceAnalysis, gaps, sel: np.ndarray, lead: int | None, t0, a, lanes, items) -> None:
    """A lane of the step's idle gaps in the window by cause, and its GPU lead-in (`lead`: from the origin)."""
    idle = len(lanes)
    lanes.append(Lane("GPU idle (this step's gaps)", "gpu"))
    causes = np.array(IDLE_CAUSES, object)[gaps.cause[sel]]
    items.add(idle, gaps.start[sel] - t0, gaps.end[sel] - t0, "idle", causes, -1)
    if lead is not None:
        first = analysis.origin_ns + lead
        if first >= a:
            items.add(idle, [max(t0, a) - t0], [first - t0], "lead", LEAD, -1)


def _stream_lanes(trace: Trace, rows: np.ndarray, lanes) -> np.ndarray:
    """A lane for each (device, stream) the GPU ops `rows` ran on, in order; returns each op's lane."""
    streams = distinct_pairs(trace.device[rows], trace.stream[rows]) if len(rows) else np.zeros((2, 0))
    lane_of = {}
    for device, stream in streams.T.tolist():
        lane_of[(device, stream)] = len(lanes)
        lanes.append(Lane(f"GPU {device} stream {stream}", "gpu"))
    return np.array(
        [lane_of[(d, s)] for d, s in zip(trace.device[rows].tolist(), trace.stream[rows].tolist(), strict=True)],
        np.int64,
    )


def _gpu_ops(trace: Trace, step: StepLedger, t0, rows, lane, category, own, launch, call_lane) -> list[GpuOp]:
    """Each GPU op drawn, with its launch call (its row, name, lane and start) and the op that launched it."""
    around = _ops_around(trace, step, launch)
    out = []
    for r, ln, cat, is_own, call, op in zip(
        rows.tolist(), lane.tolist(), category.tolist(), own.tolist(), launch.tolist(), around, strict=True
    ):
        has = call >= 0
        out.append(
            GpuOp(
                row=r,
                lane=ln,
                start_ns=int(trace.ts_ns[r] - t0),
                dur_ns=int(trace.dur_ns[r]),
                name=trace.name(r),
                category=cat,
                own=bool(is_own),
                call_row=call,
                call_name=trace.name(call) if has else "",
                call_lane=call_lane.get(call, -1) if has else -1,
                call_start_ns=int(trace.ts_ns[call] - t0) if has else None,
                op=op,
            )
        )
    return out


def _ops_around(trace: Trace, step: StepLedger, calls: np.ndarray) -> list[str]:
    """For each launch call (a row, -1 for none), the innermost cpu_op holding it on the step's thread, named with
    its recorded input shapes: what a kernel computes for; "" when no op holds the call (a graph replay)."""
    ops = thread_ops(trace, step.pid, step.tid)
    out = [""] * len(calls)
    mine = np.flatnonzero((calls >= 0) & (trace.pid[np.maximum(calls, 0)] == step.pid))
    mine = mine[trace.tid[calls[mine]] == step.tid]
    if not len(ops.rows) or not len(mine):
        return out
    t, te = trace.ts_ns[calls[mine]], trace.end_ns[calls[mine]]
    cur = np.searchsorted(ops.start, t, side="right") - 1  # the latest op starting at or before the call
    for _ in range(int(ops.depth.max()) + 1):  # walk out until an op holds the call whole
        outside = (cur >= 0) & (ops.end[np.maximum(cur, 0)] < te)
        cur = np.where(outside, ops.parent[np.maximum(cur, 0)], cur)
    for i, c in zip(mine.tolist(), cur.tolist(), strict=True):
        if c >= 0:
            row = int(ops.rows[c])
            shape = int(trace.shape_id[row])
            out[i] = trace.name(row) + (f" {list(trace.shapes[shape].dims)}" if shape >= 0 else "")
    return out


def _categories(trace: Trace, rows: np.ndarray, rules: kernels.KernelRules) -> np.ndarray:
    """Each GPU op's category: memcpy and memset their own, a kernel by the rule table (once a distinct name)."""
    ids, inverse = np.unique(trace.name_id[rows], return_inverse=True)
    by_id = np.array([rules.category(trace.names[i]) for i in ids.tolist()], object)
    out = by_id[inverse] if len(ids) else np.zeros(0, object)
    out[trace.kind[rows] == Kind.GPU_MEMCPY] = kernels.MEMCPY
    out[trace.kind[rows] == Kind.GPU_MEMSET] = kernels.MEMSET
    return out.astype(object)


def _unseen_gaps(items: _Items, width: int) -> list[str]:
    """A GPU gap the ledger calls host wait, lying inside the host's external wait: the host could not issue, since
    it was blocked on device work the trace does not hold. Said, so that the two shadings are read together, when
    it is at least NOTABLE of the window."""
    _, start, end, kind, key, _, _ = items.columns()
    if not len(start):
        return []
    ext = kind == "external"
    gap = (kind == "idle") & (key == "host_wait")
    if not ext.any() or not gap.any():
        return []
    es, ee = merge(start[ext], end[ext])
    inside = int(covered(es, ee, start[gap], end[gap]).sum())
    if inside < NOTABLE * width:
        return []
    return [
        f"{inside / 1e6:.3f} ms of the GPU's idle gaps, classed host wait by the ledger's rule (the op after each gap "
        "was launched after it began), lie inside the host's external wait: the host was blocked on device work "
        "the trace does not hold, not slow to issue"
    ]


# ---- aggregation and words --------------------------------------------------------------------------------------


def _aggregate(trace: Trace, items: _Items, lanes: list[Lane], width: int) -> tuple[list[Bar], list[Merged], int]:
    """Bars at a column's resolution: a run of events shorter than a column on one lane, of one kind, colour and
    step, whose gaps add up to less than a column, becomes one merged bar as long as the time its events cover (so
    it never shows more of a kind than the kind holds, and ends within a column of its last event); the resolution
    doubles while the bars exceed MAX_BARS."""
    lane, start, end, kind, key, row, own = items.columns()
    if not len(start):
        return [], [], max(1, width // COLUMNS)
    # runs never mix lanes, kinds, colours, or this step's GPU work with another's: one integer says which group
    kinds, kind_code = np.unique(kind.astype(str), return_inverse=True)
    keys, key_code = np.unique(key.astype(str), return_inverse=True)
    gid = ((lane * len(kinds) + kind_code) * len(keys) + key_code) * 2 + own
    order = np.lexsort((-end, start, gid))
    lane, start, end, kind, key, row, own, gid = (x[order] for x in (lane, start, end, kind, key, row, own, gid))
    q = max(1, width // COLUMNS)
    while True:
        run = _runs(start, end, gid, q)
        bars = int(run.max()) + 1
        if bars <= MAX_BARS or q >= width:
            break
        q *= 2
    counts = np.bincount(run)
    held = np.bincount(run, weights=end - _reach_before(start, end, run)).astype(np.int64)  # time each run covers
    out: list[Bar] = []
    merged: dict[int, list[int]] = {}
    first = np.flatnonzero(np.concatenate(([True], run[1:] != run[:-1])))
    last = np.append(first[1:] - 1, len(run) - 1)
    reach = np.maximum.reduceat(end, first)
    for f, l_, r_end, n, cover in zip(
        first.tolist(), last.tolist(), reach.tolist(), counts.tolist(), held.tolist(), strict=True
    ):
        if n == 1:
            dur = int(end[f] - start[f])
            out.append(Bar(int(lane[f]), int(start[f]), dur, kind[f], key[f], "", "", int(row[f]), 1, bool(own[f])))
            continue
        sl = slice(f, l_ + 1)
        out.append(
            _merged_bar(
                trace, lane[f], start[f], r_end, cover, kind[f], key[f], row[sl], end[sl] - start[sl], own[f], q
            )
        )
        acc = merged.setdefault(int(lane[f]), [0, 0])
        acc[0] += n
        acc[1] += 1
    notes = [Merged(lanes[ln].label, ev, bars) for ln, (ev, bars) in sorted(merged.items())]
    return out, notes, q


def _running_max(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """The running maximum within each group (consecutive, numbered from 0 upwards): each group shifted past the
    one before, so one accumulate serves all."""
    span = int(values.max() - values.min()) + 1
    offset = group.astype(np.int64) * span - int(values.min())
    return np.maximum.accumulate(values + offset) - offset


def _reach_before(start: np.ndarray, end: np.ndarray, group: np.ndarray) -> np.ndarray:
    """For each event, the furthest end of the events before it in its group, never before its own start: its
    start where it is the group's first. `end - _reach_before` is the time it adds to the group's union."""
    first = np.concatenate(([True], group[1:] != group[:-1]))
    number = np.cumsum(first) - 1
    reach = _running_max(end, number)
    before = np.concatenate(([0], reach[:-1]))
    return np.where(first, start, np.clip(before, start, end))


def _runs(start: np.ndarray, end: np.ndarray, gid: np.ndarray, q: int) -> np.ndarray:
    """A run number for each event (sorted by group, then start): a new run at each new group, at each event at
    least a column long (and after it), and wherever the gaps between the run's events would reach a column."""
    short = (end - start) < q
    new_group = np.concatenate(([True], gid[1:] != gid[:-1]))
    reach = _running_max(end, np.cumsum(new_group) - 1)
    gap = np.where(new_group, 0, np.maximum(0, start - np.concatenate(([0], reach[:-1]))))
    total = np.cumsum(gap)  # gaps summed within each group: a new run each time they pass another column
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(len(gap)), 0))
    bucket = (total - total[group_start]) // q
    prev_short = np.concatenate(([False], short[:-1]))
    prev_bucket = np.concatenate(([-1], bucket[:-1]))
    opens = new_group | ~short | ~prev_short | (bucket != prev_bucket)
    return np.cumsum(opens) - 1


WHAT = {
    "range": "ranges",
    "python": "Python frames",
    "op": "ops",
    "runtime": "runtime calls",
    "thread": "events",
    "host_work": "host-work pieces",
    "gpu_wait": "sync-wait pieces",
    "external": "external-wait pieces",
    "idle": "idle gaps",
    "lead": "stretches",
    "kernel": "kernels",
    "memcpy": "copies",
    "memset": "memsets",
}


def _merged_bar(trace, lane, start, reach, cover, kind, key, rows, durs, own, q) -> Bar:
    """A run of short events of one colour as one bar, as long as the time they cover (drawn from the first one's
    start: it ends within a column of the last one's end); its hover names the events that took most of it."""
    names: dict[str, list[int]] = {}
    for r, d in zip(rows.tolist(), durs.tolist(), strict=True):
        acc = names.setdefault(trace.name(r) if r >= 0 else str(key), [0, 0])
        acc[0] += d
        acc[1] += 1
    top = sorted(names.items(), key=lambda x: (-x[1][0], x[0]))[:3]
    detail = (
        f"{len(rows)} {WHAT[kind]} merged, each under {q / 1e3:,.1f} µs (a column), covering {cover / 1e6:.3f} ms "
        f"between {start / 1e6:.3f} and {reach / 1e6:.3f} ms (the bar is as long as what they cover); most time in "
        + "; ".join(f"{n} ({v[0] / 1e6:.3f} ms, x{v[1]})" for n, v in top)
        + ". Zoom in to draw them one by one."
    )
    return Bar(
        int(lane), int(start), int(cover), kind, key, f"{len(rows)} {WHAT[kind]}", detail, -1, len(rows), bool(own)
    )


def _with_hover(trace: Trace, bar: Bar, ops: dict[int, GpuOp]) -> Bar:
    """A bar with its full name and what its hover adds."""
    if bar.count > 1:
        return bar
    if bar.row < 0:
        return _named_piece(bar)
    r = bar.row
    gpu_op = bar.kind in ("kernel", "memcpy", "memset")
    said = _gpu_op_words(trace, bar, ops) if gpu_op else _host_event_words(trace, bar)
    return Bar(
        bar.lane,
        bar.start_ns,
        bar.dur_ns,
        bar.kind,
        bar.key,
        trace.name(r),
        "; ".join(x for x in said if x),
        r,
        1,
        bar.own,
    )


_PIECE_NAMES = {
    "host_work": "host work: the host window less its sync wait",
    "gpu_wait": "sync wait while the trace's GPU work ran",
    "external": "waiting on device work the trace does not hold",
}


def _named_piece(bar: Bar) -> Bar:
    """A bar that is no event of the trace (a piece of the host window, a GPU idle gap, the lead before the step's
    first GPU op), named for what it is."""
    name = _PIECE_NAMES.get(bar.kind)
    if bar.kind == "idle":
        name = f"GPU idle: {bar.key.replace('_', ' ')}"
    if bar.kind == "lead":
        name = "before this step's first GPU op"
    return Bar(bar.lane, bar.start_ns, bar.dur_ns, bar.kind, bar.key, name or bar.kind, "", -1, 1, bar.own)


def _gpu_op_words(trace: Trace, bar: Bar, ops: dict[int, GpuOp]) -> list[str]:
    """What a GPU op's hover adds: its category, its copy or its bytes, the call that launched it and the op it ran
    for, and whether it is another step's."""
    r = bar.row
    o = ops.get(r)
    said = [f"category {o.category}" if o else ""]
    if bar.kind == "memcpy":
        said.append(_copy_text(trace, r))
    elif trace.bytes[r] >= 0:
        said.append(f"{int(trace.bytes[r]):,} B")
    if o is not None and o.call_start_ns is not None:
        said.append(f"launched by {o.call_name} at {o.call_start_ns / 1e6:+.3f} ms")
    if o is not None and o.op:
        said.append(f"for {o.op}")
    if not bar.own:
        said.append("not this step's: launched in another step, or in none")
    return said


def _host_event_words(trace: Trace, bar: Bar) -> list[str]:
    """What a host event's hover adds: its recorded shapes and types, a runtime call's copy, the part it feeds."""
    r = bar.row
    said = []
    shape = int(trace.shape_id[r])
    if shape >= 0:
        s = trace.shapes[shape]
        said.append(f"shapes {list(s.dims)}; types {', '.join(t for t in s.types if t) or '-'}")
    if bar.kind == "runtime" and (trace.bytes[r] >= 0 or trace.copy_kind[r] >= 0):
        said.append(_copy_text(trace, r))
    said.append(f"part: {bar.key.replace('_', ' ')}")
    return said
