"""Per-step ledgers: where every step's time went, exactly, from one `Trace` of any engine.

`analyze(trace, options) -> TraceAnalysis` is stateless; all interval work is vectorized over sorted numpy arrays
(searchsorted, cumulative sums), so the cost is O(events log events) whatever the number of steps or the depth of
nesting. It reads as its stages: steps (probe.analysis.ledger.steps), the GPU side (probe.analysis.ledger.gpu), kernels
(probe.analysis.ledger.kernels), the host side (probe.analysis.ledger.host), then one `StepLedger` a step.

Steps: probe.analysis.ledger.steps finds them (`--steps`, probe's ranges, ProfilerStep#N, engine markers and
frames, the outermost repeating host unit, graph launches, else the whole trace) and `TraceAnalysis.step_rule` says
which rule did; `TraceAnalysis.coverage` what they hold of the trace's GPU work and of their threads' time
(probe.analysis.ledger.coverage). Every step is kept, the last one included. A step's host window is its range,
[start, end], both ends included.

What a step's ledger says (times are integer ns inside, `_us` in the JSON, ns / 1000, never rounded):

- `wall`: the step range's own duration: the host window.
- `launches`: kernel launch calls (`Trace.launch_kind`: a runtime call a kernel joins by correlation, whatever its
  name, or one named in `probe.analysis.trace.LAUNCH_NAMES`, nsys's `_v7000` / `_ptsz` suffixes stripped first) that
  start inside the window, on any thread. `graph_launches`: `GRAPH_LAUNCH_NAMES` the same way.
  `captured_launches`: of both, the calls recorded into a graph, not run (`Trace.captured`: made on a thread
  between its stream-capture begin and end); `graph_instantiations`: graph instantiation calls. Either makes the
  step graph capture set-up. `runtime_calls`: all runtime calls. `dispatched`: launches + graph launches on a
  GPU trace; on a CPU-only trace the top-level ops, the dispatched aten ops that stand in for launches.
- `kernels`, `gpu_ops`, the GPU window (`gpu_start`, `gpu_window`), `gpu_busy`, `gpu_idle` and its causes
  (`idle_host_wait`, `idle_kernel_wait`, `idle_other`), and the two launch delays: probe.analysis.ledger.gpu defines
  each, and says where and why they differ from HTA's. `busy_fraction` = busy / GPU window is in [0, 1].
  `launch_cpu`: the host time inside the step's launch and graph-launch calls; `short_kernels`: under 5 us.
- Kernels: `top_kernels` by name (count, total, mean, p50, max, share of the step's GPU busy) and
  `kernels_by_category` (probe.analysis.ledger.kernels), memcpy and memset included as categories: each category's
  summed op time, which counts twice what runs side by side. Read against the other categories
  (`kernels.category_overlap`): `kernels_busy_by_category`, the union of its ops (how long one of them ran, at most
  `gpu_busy`), and `kernels_alone_by_category`, the part of that in which no op of another category ran: `gpu_busy`
  less the union of every other category's ops, what the step's GPU busy time loses when the category takes none
  (communication kernels on a stream of their own under the compute: far less than their summed time).
- The host side (probe.analysis.ledger.host), on the step's own thread: two partitions of `wall`, each adding up to it
  exactly. `purpose` (the user's `--part`s, sync, sample, the three cache parts, mask, attention, and `model`, the
  rest) says what the step was doing; `mechanism` (python, dispatch, launch, runtime, sync_wait, unattributed)
  says what code ran: the innermost event covering each ns decides. `top_frames`: Python frames by innermost self
  time, whatever purpose part it falls in; `top_ops`: op dispatch (innermost self time) by op name;
  `sync_sites`: where the step blocked on the device (the call, the innermost frame, the source line, the op that
  issued it, and the copy it waited for: size, direction, host memory). A copy call is a blocking call when the
  trace shows the host waited in it (probe.analysis.ledger.host.waited_copies), whatever its name.
  `data_mechanism_ns`: the mechanism split of the time inside data loading (the `data` purpose's ranges, ops and
  frames). `unattributed_other_ns`: of the unattributed time outside data loading, the part during which another
  thread of the step's process ran events (autograd's backward, while the loop's thread waits on it);
  `python_other_ns`: of Python frames' self time outside data loading, the part in which another thread of the process
  ran events that began and ended inside it (with stacks, `loss.backward()`'s `run_backward` frame covers that wait;
  probe.analysis.ledger.host.waited_on); an OS wait call's part so covered (a consumer's `sem_wait` while its producer
  runs code) is booked there too, in the mechanism's `python`: a blocked thread's wait on other threads is one thing,
  whether Python or the OS shows it (host.BLOCKING_BUILTIN). `named_ns`: of the unattributed time outside data loading
  and other threads' work, the part inside named ranges that hold no frame, op or call (a user or NVTX range strictly
  inside the step, or an event of a category the reader does not know: the user's own code the range names;
  probe.analysis.ledger.host.named_time), and `named_ranges` that time by range name with its numbers replaced, largest
  first (`NAMED_KEPT`).
  `launches_unmatched`: the step's launch and graph-launch calls none of whose GPU ops is in the trace, captured
  ones left out (they run no GPU op when called).
  `external_wait`: the part of `sync_wait` during which no GPU op of the trace ran: the host waited on device work
  the trace does not hold. `own_wait`: the part from the step's first GPU op on, less its external part: the host
  waiting on its own GPU work; the rest of `sync_wait` waited on earlier work (the previous step's GPU time showing)
  or on work the trace lacks. `peer_wait`: of `own_wait`, the part during which a communication kernel
  (`kernels_by_category`'s "communication": NCCL, RCCL) ran: the host behind a collective, and a collective runs
  until the last rank joins it, so that wait is on the other ranks, not on the step's own work.
  `host_collectives`: how long the collectives the host runs itself (Gloo's `gloo:<op>` ranges, on its runloop
  thread: a CPU job's communication kernels, each running until the last rank joins it) ran in the window, on any
  thread of the step's process, their union. `other_threads`:
  each other thread's busy time inside the window, by mechanism, and its top frames, ops and runtime calls by self
  time there.
- `top_level_ops`: cpu_ops on the step's thread, starting in the window, not nested in another cpu_op (on a CPU
  trace this is the dispatched aten op count). `op_counts`: the same by name.
- `host_events`, `host_ranges`: the ops, runtime calls and Python frames, and the ranges, recorded on the step's
  thread in its window. With the profiler's cost per recorded event (`AnalyzeOptions.event_cost`, measured by
  probe.capture.calibrate when `probe profile` records), `unprofiled_estimate` = wall - host_events x op cost -
  host_ranges x range cost: the step as it would have run without the profiler.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from probe.analysis.intervals import assign, covered, difference, distinct_pairs, merge
from probe.analysis.ledger import coverage, kernels
from probe.analysis.ledger.gpu import (
    Attribution,
    LaunchDelays,
    Windows,
    attribute,
    clock_skew,
    launch_delays,
    windows,
)
from probe.analysis.ledger.host import (
    GPU_COLLECTIVE,
    HOST_COLLECTIVE,
    MECHANISM,
    FrameTime,
    HostSplit,
    NamedTime,
    OpTime,
    PartTable,
    SyncSite,
    ThreadTime,
    capture_region,
    mechanism_split,
    named_spans,
    others_busy,
    purpose_tiers,
    thread_busy,
    thread_code,
    thread_ops,
    thread_rows,
)
from probe.analysis.ledger.phases import first_embeddings, first_keys, recorded_tokens, shape_kinds
from probe.analysis.ledger.steps import StepSet, find_steps
from probe.analysis.ledger.types import (
    TOP_FRAMES_KEPT,
    TOP_KERNELS_KEPT,
    TOP_OPS_KEPT,
    AnalyzeOptions,
    StepLedger,
    Totals,
    TraceAnalysis,
    summarize,
)
from probe.analysis.records.sidecar import EventCost
from probe.analysis.trace import (
    DEVICES_NAMED_IN,
    GPU_OP_KINDS,
    GPU_UNRECORDED_WHY,
    GRAPH_LAUNCH,
    LAUNCH,
    Kind,
    Trace,
    is_graph_instantiate,
)
from probe.errors import ProbeError

MAX_STEPS = 200_000  # steps one analysis holds by default (max_steps)


# ---------------------------------------------------------------------------------------------------------
# the stages


@dataclass
class _Launches:
    """Per step: launch-call counts and host time, and the GPU side (probe.analysis.ledger.gpu)."""

    gpu: Attribution
    launches: np.ndarray
    graphs: np.ndarray
    runtime_calls: np.ndarray
    launch_cpu: np.ndarray
    kernels: np.ndarray
    gpu_ops: np.ndarray
    short: np.ndarray
    windows: Windows
    delays: LaunchDelays
    in_step_graph: np.ndarray  # per runtime call: a graph launch inside a step
    unmatched: np.ndarray  # per step: its launch and graph-launch calls none of whose GPU ops is in the trace
    captured: np.ndarray  # per step: its launch calls recorded into a graph (Trace.captured), not run
    instantiations: np.ndarray  # per step: its graph instantiation calls
    totals: Totals


def _launch_columns(trace: Trace, steps: StepSet, options: AnalyzeOptions) -> _Launches:
    n = len(steps)
    gpu = attribute(trace, steps.start, steps.end)
    in_step = gpu.rt_step >= 0

    def per_step(mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        sel = in_step & mask
        return np.bincount(gpu.rt_step[sel], weights=None if weights is None else weights[sel], minlength=n)

    kind = trace.launch_kind[gpu.rt_rows]
    is_launch, is_graph = kind == LAUNCH, kind == GRAPH_LAUNCH
    captured = trace.captured[gpu.rt_rows]
    instantiate = trace.name_ids(is_graph_instantiate)[trace.name_id[gpu.rt_rows]]
    replayed = np.isin(gpu.rt_rows, gpu.op_launch[gpu.op_launch >= 0])
    attributed = gpu.op_step >= 0
    is_kernel = trace.kind[gpu.op_rows] == Kind.KERNEL
    op_dur = trace.dur_ns[gpu.op_rows]
    return _Launches(
        gpu=gpu,
        launches=per_step(is_launch),
        graphs=per_step(is_graph),
        runtime_calls=per_step(np.ones(len(gpu.rt_rows), bool)),
        launch_cpu=per_step(is_launch | is_graph, trace.dur_ns[gpu.rt_rows].astype(np.float64)).astype(np.int64),
        kernels=np.bincount(gpu.op_step[attributed & is_kernel], minlength=n),
        gpu_ops=np.bincount(gpu.op_step[attributed], minlength=n),
        short=np.bincount(gpu.op_step[attributed & is_kernel & (op_dur < kernels.SHORT_KERNEL_NS)], minlength=n),
        windows=windows(trace, gpu, n, options.kernel_wait_ns),
        delays=launch_delays(trace, gpu, n),
        in_step_graph=in_step & is_graph,
        unmatched=per_step((is_launch | is_graph) & ~replayed & ~captured),
        captured=per_step(captured),
        instantiations=per_step(instantiate),
        totals=_totals(trace, gpu),
    )


@dataclass
class _Kernels:
    """Per step and over the whole trace: kernels by name and by category."""

    top: list
    by_category: list[dict[str, int]]
    overlap: kernels.CategoryOverlap  # per step: each category's own busy, and its time alone
    counts: list[dict[str, int]]
    all_kernels: tuple
    all_categories: dict[str, int]
    communication: tuple[np.ndarray, np.ndarray]  # the trace's communication kernels, merged (start, end)


def _kernel_columns(trace: Trace, launches: _Launches, options: AnalyzeOptions, n: int) -> _Kernels:
    gpu = launches.gpu
    rules = kernels.KernelRules.build(options.kernel_rules)
    names = trace.names
    category_of_name = np.array(
        [rules.category(s) if k else "" for s, k in zip(names, _gpu_names(trace), strict=True)], dtype=object
    )
    for kind, category in ((Kind.GPU_MEMCPY, kernels.MEMCPY), (Kind.GPU_MEMSET, kernels.MEMSET)):
        category_of_name[np.unique(trace.name_id[trace.kind == kind])] = category  # their own categories
    op_name = trace.name_id[gpu.op_rows]
    op_category = category_of_name[op_name]
    op_dur = trace.dur_ns[gpu.op_rows]
    busy = launches.windows.busy
    top = kernels.kernel_stats(gpu.op_step, op_name, op_dur, n, names, category_of_name, busy, TOP_KERNELS_KEPT)
    everything = np.zeros(len(gpu.op_rows), np.int64)
    (all_kernels,) = kernels.kernel_stats(
        everything, op_name, op_dur, 1, names, category_of_name, np.array([launches.totals.gpu_busy_ns])
    )
    (all_categories,) = kernels.category_totals(everything, op_category, op_dur, 1)
    is_kernel = (trace.kind[gpu.op_rows] == Kind.KERNEL) & (gpu.op_step >= 0)
    comm = gpu.op_rows[op_category == kernels.COMMUNICATION]
    return _Kernels(
        top=top,
        by_category=kernels.category_totals(gpu.op_step, op_category, op_dur, n),
        overlap=kernels.category_overlap(
            gpu.op_step, op_category, trace.ts_ns[gpu.op_rows], trace.end_ns[gpu.op_rows], n
        ),
        counts=_counts_by_name(trace, gpu.op_step[is_kernel], op_name[is_kernel], n),
        all_kernels=tuple(all_kernels),
        all_categories=all_categories,
        communication=merge(trace.ts_ns[comm], trace.end_ns[comm]),
    )


@dataclass
class _Host:
    """Per step, on its own thread: both partitions, ops, frames, sync sites, and the other threads."""

    purpose: list[dict[str, int]]  # per step: part -> ns
    mechanism: list[dict[str, int]]
    in_data: dict[str, np.ndarray]
    other_in_gaps: np.ndarray  # of the unattributed time outside data loading: another thread of the process ran
    python_other: np.ndarray  # of Python self time outside data loading: another thread of the process ran
    external: np.ndarray
    own_wait: np.ndarray
    peer_wait: np.ndarray  # of own_wait: while a communication kernel ran
    capturable: np.ndarray
    capture_region: list[str]
    top_counts: np.ndarray
    all_counts: np.ndarray
    events: np.ndarray
    ranges: np.ndarray
    op_counts: list[dict[str, int]]
    top_ops: list[tuple[OpTime, ...]]
    frames: list[tuple[FrameTime, ...]]
    sync_sites: list[tuple[SyncSite, ...]]
    other_threads: list[tuple[ThreadTime, ...]]
    python_frames: tuple[FrameTime, ...]
    named: np.ndarray  # of the unattributed time outside data loading and other threads' work: inside named ranges
    named_top: list[tuple[NamedTime, ...]]  # that time by range name, largest first


def _host_columns(
    trace: Trace, steps: StepSet, table: PartTable, gpu_start: np.ndarray, comm: tuple[np.ndarray, np.ndarray]
) -> _Host:
    """One pass per step thread (usually one), never per step. `gpu_start`: each step's first GPU op (-1: none);
    `comm`: the trace's communication kernels, merged."""
    draft = _HostDraft.empty(len(steps), table)
    gpu_rows = trace.rows(*GPU_OP_KINDS)
    gpu_s, gpu_e = merge(trace.ts_ns[gpu_rows], trace.end_ns[gpu_rows])  # the trace's GPU busy, every device
    threads = distinct_pairs(steps.pid, steps.tid)
    for pid, tid in threads.T.tolist():
        sel = np.flatnonzero((steps.pid == pid) & (steps.tid == tid))
        _fill_thread(draft, trace, table, steps, sel, pid, tid, gpu_start[sel], (gpu_s, gpu_e), comm)
    return _host_of_draft(draft, trace, table, steps)


@dataclass
class _HostDraft:
    """`_Host`'s per-step columns as they fill, a step thread at a time, and the trace's Python frame totals."""

    purpose: dict[str, np.ndarray]  # part -> per step ns
    mechanism: dict[str, np.ndarray]
    in_data: dict[str, np.ndarray]
    other_in_gaps: np.ndarray
    python_other: np.ndarray
    external: np.ndarray
    own_wait: np.ndarray
    peer_wait: np.ndarray
    capturable: np.ndarray
    top_counts: np.ndarray
    all_counts: np.ndarray
    events: np.ndarray
    ranges: np.ndarray
    region_of: list[str]
    op_counts: list[dict[str, int]]
    top_ops: list[tuple[OpTime, ...]]
    frames: list[tuple[FrameTime, ...]]
    sites: list[tuple[SyncSite, ...]]
    totals: dict[int, list[int]]  # frame id -> [self ns, calls, waited ns], over the threads so far
    named: np.ndarray
    named_top: list[tuple[NamedTime, ...]]

    @staticmethod
    def empty(n: int, table: PartTable) -> _HostDraft:
        """Every column of `n` steps zero or empty."""
        zeros = lambda: np.zeros(n, np.int64)  # noqa: E731
        return _HostDraft(
            purpose={p: zeros() for p in table.order},
            mechanism={p: zeros() for p in MECHANISM},
            in_data={p: zeros() for p in MECHANISM},
            other_in_gaps=zeros(),
            python_other=zeros(),
            external=zeros(),
            own_wait=zeros(),
            peer_wait=zeros(),
            capturable=zeros(),
            top_counts=zeros(),
            all_counts=zeros(),
            events=zeros(),
            ranges=zeros(),
            region_of=["" for _ in range(n)],
            op_counts=[{} for _ in range(n)],
            top_ops=[() for _ in range(n)],
            frames=[() for _ in range(n)],
            sites=[() for _ in range(n)],
            totals={},
            named=zeros(),
            named_top=[() for _ in range(n)],
        )


def _fill_thread(
    draft: _HostDraft,
    trace: Trace,
    table: PartTable,
    steps: StepSet,
    sel: np.ndarray,
    pid: int,
    tid: int,
    gpu_start: np.ndarray,
    gpu: tuple[np.ndarray, np.ndarray],
    comm: tuple[np.ndarray, np.ndarray],
) -> None:
    """The columns of one thread's steps (`sel`: their positions, `gpu_start` their first GPU ops), in one pass;
    `gpu`: the trace's GPU busy, `comm`: its communication kernels, both merged."""
    lo, hi = steps.start[sel], steps.end[sel]
    split = mechanism_split(trace, table, pid, tid, lo, hi, TOP_FRAMES_KEPT, TOP_OPS_KEPT)
    _fill_partitions(draft, sel, split, table)
    draft.other_in_gaps[sel] = _others_while_idle(trace, table, pid, tid, lo, hi)
    draft.python_other[sel] = split.python_other
    draft.named[sel] = split.named
    for j, s in enumerate(sel.tolist()):
        draft.named_top[s] = split.named_top[j]
    draft.external[sel], draft.own_wait[sel], draft.peer_wait[sel] = _wait_columns(split, gpu_start, gpu, comm)
    draft.capturable[sel], what = _capturable_ns(trace, pid, tid, lo, hi, split)
    tc, ac, oc = _op_counts(trace, lo, hi, thread_ops(trace, pid, tid))
    draft.top_counts[sel], draft.all_counts[sel] = tc, ac
    draft.events[sel] = _host_events(trace, pid, tid, lo, hi, Kind.CPU_OP, Kind.RUNTIME, Kind.PYTHON)
    draft.ranges[sel] = _host_events(trace, pid, tid, lo, hi, Kind.USER_RANGE, Kind.PROFILER_STEP)
    _fill_step_lists(draft, sel, what, oc, split)
    _add_frame_totals(draft.totals, split.frame_totals)


def _fill_partitions(draft: _HostDraft, sel: np.ndarray, split: HostSplit, table: PartTable) -> None:
    """One thread's steps' purpose and mechanism partitions, and the mechanism split inside data loading."""
    for p in table.order:
        draft.purpose[p][sel] = split.purpose[p]
    for p in MECHANISM:
        draft.mechanism[p][sel] = split.mechanism[p]
        draft.in_data[p][sel] = split.in_data[p]


def _fill_step_lists(
    draft: _HostDraft, sel: np.ndarray, region: str, oc: list[dict[str, int]], split: HostSplit
) -> None:
    """Each of one thread's steps' capture region, op counts, top ops, top frames and sync sites, into the draft."""
    region_of, op_counts, top_ops, frames, sites = (
        draft.region_of,
        draft.op_counts,
        draft.top_ops,
        draft.frames,
        draft.sites,
    )
    for s in sel.tolist():
        region_of[s] = region
    for j, s in enumerate(sel.tolist()):
        op_counts[s], top_ops[s], frames[s], sites[s] = oc[j], split.ops[j], split.frames[j], split.sync_sites[j]


def _add_frame_totals(totals: dict[int, list[int]], thread: dict[int, tuple[int, int, int]]) -> None:
    """One thread's Python frame totals (frame id -> (self ns, calls, waited ns)) added to the trace's."""
    for f, values in thread.items():
        acc = totals.setdefault(f, [0, 0, 0])
        for i, v in enumerate(values):
            acc[i] += v


def _host_of_draft(draft: _HostDraft, trace: Trace, table: PartTable, steps: StepSet) -> _Host:
    """The filled draft as the `_Host` record, with the other threads and the trace's Python frames."""
    return _Host(
        _by_step(draft.purpose),
        _by_step(draft.mechanism),
        draft.in_data,
        draft.other_in_gaps,
        draft.python_other,
        draft.external,
        draft.own_wait,
        draft.peer_wait,
        draft.capturable,
        draft.region_of,
        draft.top_counts,
        draft.all_counts,
        draft.events,
        draft.ranges,
        draft.op_counts,
        draft.top_ops,
        draft.frames,
        draft.sites,
        _other_threads(trace, table, steps),
        _python_frames(table, draft.totals),
        draft.named,
        draft.named_top,
    )


def _wait_columns(
    split: HostSplit, gpu_start: np.ndarray, gpu: tuple[np.ndarray, np.ndarray], comm: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step of one thread, from its blocking pieces: the external wait (while no GPU op of the trace ran), its
    own wait (from its first GPU op on: _own_pieces) and, of that, the peer wait (while a communication kernel ran)."""
    seg_step, seg_s, seg_e = split.sync_segments
    gpu_s, gpu_e = gpu
    unseen = _unseen_wait(gpu_s, gpu_e, seg_s, seg_e)
    n = len(gpu_start)
    external = np.bincount(seg_step, weights=unseen, minlength=n)
    if not len(seg_step):
        return external, np.zeros(n, np.int64), np.zeros(n, np.int64)
    a, b = _own_pieces(gpu_start, seg_step, seg_s, seg_e)
    late = _unseen_wait(gpu_s, gpu_e, a, b)
    own = np.bincount(seg_step, weights=(b - a) - np.minimum(late, b - a), minlength=n).astype(np.int64)
    peer = np.bincount(seg_step, weights=covered(*comm, a, b), minlength=n).astype(np.int64)
    return external, own, np.minimum(peer, own)


def _capturable_ns(
    trace: Trace, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray, split: HostSplit
) -> tuple[np.ndarray, str]:
    """Per step of one thread, its time inside the thread's capture region less the blocking waits there, and what
    the region is."""
    seg_step, seg_s, seg_e = split.sync_segments
    cap_s, cap_e, what = capture_region(trace, pid, tid)
    sync_in = np.bincount(seg_step, weights=covered(cap_s, cap_e, seg_s, seg_e), minlength=len(lo))
    return covered(cap_s, cap_e, lo, hi) - sync_in.astype(np.int64), what


def _python_frames(table: PartTable, totals: dict[int, list[int]]) -> tuple[FrameTime, ...]:
    """The trace's Python frames over every step, by self time, largest first (frames with neither left out)."""
    return tuple(
        sorted(
            (FrameTime(table.frames[f], ns, calls, waited) for f, (ns, calls, waited) in totals.items() if ns or calls),
            key=lambda x: (-x.self_ns, x.frame),
        )
    )


def _own_pieces(first, seg_step, seg_s, seg_e) -> tuple[np.ndarray, np.ndarray]:
    """Of each blocking piece, the part [a, b] from its step's first GPU op on (`first`: its start, -1 for none):
    less its unseen part there, what the host waited on its own GPU work (the own wait)."""
    start = first[seg_step]
    a = np.where(start >= 0, np.maximum(seg_s, start), seg_e)  # no GPU op of its own: nothing waited on
    return a, np.maximum(a, seg_e)


def _by_step(columns: dict[str, np.ndarray]) -> list[dict[str, int]]:
    """Columns of per-step figures (one a part, never none) as one dict a step, read in one pass."""
    names = list(columns)
    return [dict(zip(names, row, strict=True)) for row in zip(*(columns[p].tolist() for p in names), strict=True)]


def _others_while_idle(trace: Trace, table: PartTable, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray):
    """Per window [lo, hi]: the time no event of thread pid/tid covers (its unattributed time), outside data
    loading, during which another thread of the same process ran events: autograd's backward while the loop's thread
    waits in `loss.backward()`, a helper thread the step waits on."""
    mine = thread_code(trace, table, pid, tid)
    data = purpose_tiers(trace, table, pid, tid)["data"]
    busy = merge(np.concatenate((mine[0], data[0])), np.concatenate((mine[1], data[1])))
    return covered(*difference(*others_busy(trace, pid, tid), *busy), lo, hi)


def _unseen_wait(gpu_s: np.ndarray, gpu_e: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Of each blocking piece [a, b], the time the host waited while no GPU op of the trace ran: the pieces of
    `unseen_wait_pieces`, summed per blocking piece."""
    piece, start, end = unseen_wait_pieces(gpu_s, gpu_e, a, b)
    out = np.zeros(len(a), np.int64)
    np.add.at(out, piece, end - start)
    return out


def unseen_wait_pieces(gpu_s: np.ndarray, gpu_e: np.ndarray, a: np.ndarray, b: np.ndarray):
    """Where, in each blocking piece [a, b], the host waited while no GPU op of the trace ran (the merged GPU busy
    is gpu_s, gpu_e): the stretches no GPU op covers, up to the end of the last GPU activity inside the piece, since
    the idle tail after it is the call returning; the whole piece when no GPU op runs in it at all (it waited on
    work the trace lacks). Returns (index of the blocking piece, start, end), in order: `external_wait` sums them,
    the explorer draws them."""
    if not len(a):
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    if not len(gpu_s):
        return np.arange(len(a)), a, b
    k = np.searchsorted(gpu_s, b, side="right") - 1
    kc = np.maximum(k, 0)
    meets = (k >= 0) & (gpu_e[kc] >= a)
    until = np.where(meets, np.minimum(gpu_e[kc], b), b)
    # the complement of the GPU busy, as intervals: before the first op, between ops, after the last
    far = np.iinfo(np.int64)
    free_s, free_e = np.concatenate(([far.min], gpu_e)), np.concatenate((gpu_s, [far.max]))
    first = np.searchsorted(free_e, a, side="right")  # the first free stretch ending after the piece starts
    last = np.searchsorted(free_s, until, side="left") - 1  # the last one starting before it ends
    count = np.maximum(last - first + 1, 0)
    piece = np.repeat(np.arange(len(a)), count)
    j = np.repeat(first, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    start, end = np.maximum(free_s[j], a[piece]), np.minimum(free_e[j], until[piece])
    keep = end > start
    return piece[keep], start[keep], end[keep]


def _other_threads(trace: Trace, table: PartTable, steps: StepSet) -> list[tuple[ThreadTime, ...]]:
    """Per step, every other host thread that ran events inside its window, busiest first."""
    n = len(steps)
    out: list[list[ThreadTime]] = [[] for _ in range(n)]
    host = trace.rows(Kind.PYTHON, Kind.CPU_OP, Kind.RUNTIME)
    if not n or not len(host):
        return [() for _ in range(n)]
    threads = distinct_pairs(trace.pid[host], trace.tid[host])
    for pid, tid in threads.T.tolist():
        mine = (steps.pid == pid) & (steps.tid == tid)
        if mine.all():  # every step is this thread's own: nothing of it to report (and its pass is the costliest)
            continue
        busy, by, top = thread_busy(trace, table, pid, tid, steps.start, steps.end)
        comm = covered(*named_spans(trace, table, pid, tid, "communication"), steps.start, steps.end)
        for i in np.flatnonzero((busy > 0) & ~mine).tolist():
            mech = {p: int(v[i]) for p, v in by.items() if v[i]}
            out[i].append(ThreadTime(pid, tid, int(busy[i]), mech, top[i], int(comm[i])))
    return [tuple(sorted(lst, key=lambda t: (-t.busy_ns, t.pid, t.tid))) for lst in out]


def _step_ledger(
    i: int,
    steps: StepSet,
    la: _Launches,
    ke: _Kernels,
    ho: _Host,
    t0: int,
    on_gpu: bool,
    cost,
    shape: tuple[int, int] | None,
    host_collectives: int,
):
    w, d = la.windows, la.delays
    wall = int(steps.end[i] - steps.start[i])
    return StepLedger(
        name=steps.names[i],
        kind=steps.kinds[i],
        index=steps.indices[i],
        position=i,
        pid=int(steps.pid[i]),
        tid=int(steps.tid[i]),
        start_ns=int(steps.start[i]) - t0,
        wall_ns=wall,
        launches=int(la.launches[i]),
        graph_launches=int(la.graphs[i]),
        runtime_calls=int(la.runtime_calls[i]),
        dispatched=int(la.launches[i] + la.graphs[i] if on_gpu else ho.top_counts[i]),
        kernels=int(la.kernels[i]),
        gpu_ops=int(la.gpu_ops[i]),
        gpu_start_ns=int(w.start[i]) - t0 if w.start[i] >= 0 else None,
        gpu_window_ns=int(w.length[i]),
        gpu_busy_ns=int(w.busy[i]),
        gpu_idle_ns=int(w.length[i] - w.busy[i]),
        idle_host_wait_ns=int(w.host_wait[i]),
        idle_kernel_wait_ns=int(w.kernel_wait[i]),
        idle_other_ns=int(w.other[i]),
        launch_cpu_ns=int(la.launch_cpu[i]),
        launch_delay_p50_ns=d.from_start_p50[i],
        launch_delay_p90_ns=d.from_start_p90[i],
        launch_delay_from_end_p50_ns=d.from_end_p50[i],
        launch_delay_from_end_p90_ns=d.from_end_p90[i],
        short_kernels=int(la.short[i]),
        top_level_ops=int(ho.top_counts[i]),
        cpu_ops=int(ho.all_counts[i]),
        host_events=int(ho.events[i]),
        host_ranges=int(ho.ranges[i]),
        external_wait_ns=int(ho.external[i]) if on_gpu else 0,
        own_wait_ns=int(ho.own_wait[i]) if on_gpu else 0,
        peer_wait_ns=int(ho.peer_wait[i]) if on_gpu else 0,
        host_collectives_ns=int(host_collectives),
        capturable_ns=int(ho.capturable[i]),
        capture_region=ho.capture_region[i],
        tokens=steps.tokens_of(i),
        recorded_tokens=None if shape is None else recorded_tokens(*shape),
        purpose_ns=ho.purpose[i],
        mechanism_ns=ho.mechanism[i],
        data_mechanism_ns={p: int(v[i]) for p, v in ho.in_data.items() if v[i]},
        launches_unmatched=int(la.unmatched[i]),
        captured_launches=int(la.captured[i]),
        graph_instantiations=int(la.instantiations[i]),
        unattributed_other_ns=int(ho.other_in_gaps[i]),
        python_other_ns=int(ho.python_other[i]),
        named_ns=int(ho.named[i]),
        named_ranges=ho.named_top[i],
        unprofiled_estimate_ns=None if cost is None else max(wall - _profiler_ns(cost, ho, i), 0.0),
        op_counts=ho.op_counts[i],
        top_ops=ho.top_ops[i],
        kernel_counts=ke.counts[i],
        kernels_by_category=ke.by_category[i],
        kernels_busy_by_category=ke.overlap.busy[i],
        kernels_alone_by_category=ke.overlap.alone[i],
        top_kernels=tuple(ke.top[i]),
        top_frames=ho.frames[i],
        sync_sites=ho.sync_sites[i],
        other_threads=ho.other_threads[i],
    )


def _profiler_ns(cost: EventCost, ho: _Host, i: int) -> float:
    """What the profiler cost step i's host: its recorded events at the cost of each."""
    return float(ho.events[i]) * cost.op_ns + float(ho.ranges[i]) * cost.range_ns


def _warnings(
    trace: Trace, steps: StepSet, la: _Launches, ho: _Host, ledgers: list[StepLedger], cost: EventCost | None
) -> list[str]:
    out = list(trace.warnings) + steps.warnings
    over = [s for s in ledgers if cost is not None and _profiler_ns(cost, ho, s.position) > s.wall_ns]
    if over and cost is not None:
        s = over[0]
        out.append(
            f"the profiler's cost per event (op {cost.op_ns:g} ns, range {cost.range_ns:g} ns) is more than the whole "
            f"of {len(over)} step(s) (step {s.position}: {s.host_events} events, {s.host_ranges} ranges in "
            f"{s.wall_ns / 1e6:.3f} ms): their unprofiled estimate is held at 0; the costs may be another "
            "machine's or another trace's (the .meta.json beside the trace, or --event-cost-ns)"
        )
    if len(steps) > 1 and np.any(steps.start[1:] < steps.end[:-1]):
        out.append("steps overlap in time: an event in the overlap is counted in the later step only")
    # a graph launch none of whose replayed kernels is in the trace: the profiler missed the replay
    gpu = la.gpu
    replayed = np.isin(gpu.rt_rows, gpu.op_launch[gpu.op_launch >= 0])
    blind = [ledgers[i].name for i in np.unique(gpu.rt_step[la.in_step_graph & ~replayed]).tolist()]
    if blind:
        out.append(
            f"{len(blind)} step(s) launched a graph but hold none of its kernels ({', '.join(blind[:3])}"
            f"{', ...' if len(blind) > 3 else ''}): the profiler did not record the replays, so their GPU "
            "side reads as idle. Initialise it for graphs before the graph is captured"
        )
    skew = clock_skew(trace, gpu)
    if skew is not None:
        out.append(skew)
    totals = la.totals
    if totals.launches + totals.graph_launches and not totals.gpu_ops:
        out.append(
            f"the trace holds {totals.launches + totals.graph_launches} launch calls and no GPU activity at all: "
            f"kernel collection was off or failed ({GPU_UNRECORDED_WHY[trace.format]}), so every GPU figure reads as "
            "zero"
        )
    return out


def gpu_unrecorded(trace: Trace) -> str | None:
    """Why a trace without GPU ops or launches is a GPU job's all the same, in words, or None when nothing says so:
    the GPUs it names (`Trace.devices`: kineto writes them for CUDA and ROCm devices, nsys for every GPU of the
    machine), runtime calls of a GPU runtime, NCCL's collectives (`GPU_COLLECTIVE`). Its GPU side was not recorded,
    so its ops' self time is dispatch, not a CPU's compute."""
    said = []
    if trace.devices:
        names = sorted({d.name for d in trace.devices})
        said.append(f"{DEVICES_NAMED_IN[trace.format]} {len(trace.devices)} GPU(s) ({', '.join(names[:2])})")
    if calls := len(trace.rows(Kind.RUNTIME)) - len(trace.os_call_rows()):
        said.append(f"its host made {calls:,} GPU runtime calls")
    named = trace.rows(Kind.USER_RANGE, Kind.CPU_OP, Kind.PYTHON)
    collectives = named[trace.name_ids(lambda n: GPU_COLLECTIVE.search(n) is not None)[trace.name_id[named]]]
    if len(collectives):
        first = trace.names[trace.name_id[collectives[0]]]
        said.append(f"it holds {len(collectives):,} NCCL collectives (e.g. {first})")
    if not said:
        return None
    return f"{'; '.join(said)}, but no GPU op and no launch call ({GPU_UNRECORDED_WHY[trace.format]})"


def max_steps() -> int:
    """How many steps one analysis may hold: each costs a few KiB of figures (its parts, ops and kernels by name),
    so a trace of a million steps would cost gigabytes whatever its size on disk. `PROBE_MAX_STEPS` (200,000 by
    default) moves the bound."""
    text = os.environ.get("PROBE_MAX_STEPS", "")
    try:
        return max(1, int(text)) if text else MAX_STEPS
    except ValueError:
        raise ProbeError(f"PROBE_MAX_STEPS={text!r}: a whole number of steps") from None


def analyze(trace: Trace, options: AnalyzeOptions | None = None) -> TraceAnalysis:
    """The per-step ledger of every step, the whole-trace totals and kernels, and a steady-state summary."""
    options = options or AnalyzeOptions()
    steps = find_steps(trace, options.steps, options.steps_kinds)
    shapes = first_embeddings(trace, steps.start, steps.end, steps.pid, steps.tid)
    steps.kinds = shape_kinds(steps.kinds, shapes, first_keys(trace, steps.start, steps.end, steps.pid, steps.tid))
    n = len(steps)
    if n > (limit := max_steps()):
        raise ProbeError(
            f"{trace.source}: {n:,} steps found by {steps.rule}, more than the {limit:,} one analysis holds (each "
            "costs a few KiB): name fewer with --steps REGEX, or raise PROBE_MAX_STEPS"
        )
    launches = _launch_columns(trace, steps, options)
    kernel_columns = _kernel_columns(trace, launches, options, n)
    table = PartTable.build(trace, options.parts)
    host = _host_columns(trace, steps, table, launches.windows.start, kernel_columns.communication)
    totals = launches.totals
    on_gpu = totals.gpu_ops + totals.launches + totals.graph_launches > 0
    t0 = trace.start_ns
    collectives = _host_collectives(trace, steps)
    ledgers = [
        _step_ledger(
            i, steps, launches, kernel_columns, host, t0, on_gpu, options.event_cost, shapes.get(i), collectives[i]
        )
        for i in range(n)
    ]
    origin = None if trace.base_ns is None or not len(trace) else int(trace.base_ns + trace.start_ns)
    covers = coverage.coverage(trace, steps, launches.gpu)
    warnings = _warnings(trace, steps, launches, host, ledgers, options.event_cost)
    if (line := coverage.warning(covers)) is not None:
        warnings.append(line)
    return TraceAnalysis(
        format=trace.format,
        source=trace.source,
        step_rule=steps.rule,
        steps=tuple(ledgers),
        totals=totals,
        summary=summarize(ledgers),
        on_gpu=on_gpu,
        kernels=kernel_columns.all_kernels,
        kernel_categories=kernel_columns.all_categories,
        python_frames=host.python_frames,
        user_parts=tuple(p.name for p in options.parts),
        event_cost=options.event_cost,
        rank=trace.rank,
        warnings=tuple(warnings),
        origin_epoch_ns=origin,
        origin_ns=int(trace.start_ns) if len(trace) else 0,
        coverage=covers,
        gpu_unrecorded=None if on_gpu else gpu_unrecorded(trace),
    )


# ---------------------------------------------------------------------------------------------------------
# helpers of the stages


def _host_collectives(trace: Trace, steps: StepSet) -> np.ndarray:
    """Per step: how long the host collectives (`HOST_COLLECTIVE`: Gloo's ranges, on any thread of the step's
    process) ran in its window, their union: `StepLedger.host_collectives_ns`."""
    rows = trace.rows(Kind.USER_RANGE, Kind.CPU_OP)
    rows = rows[trace.name_ids(lambda s: HOST_COLLECTIVE.search(s) is not None)[trace.name_id[rows]]]
    out = np.zeros(len(steps), np.int64)
    for pid in np.unique(trace.pid[rows]).tolist():  # one pass a process
        mine = rows[trace.pid[rows] == pid]
        at = np.flatnonzero(steps.pid == pid)
        out[at] = covered(*merge(trace.ts_ns[mine], trace.end_ns[mine]), steps.start[at], steps.end[at])
    return out


def _gpu_names(trace: Trace) -> np.ndarray:
    """Per name id: whether some GPU op carries the name (only those get a category)."""
    out = np.zeros(len(trace.names), bool)
    out[trace.name_id[trace.rows(*GPU_OP_KINDS)]] = True
    return out


def _counts_by_name(trace: Trace, step: np.ndarray, name: np.ndarray, n: int) -> list[dict[str, int]]:
    """Per step, name -> how many rows; `step` and `name` are parallel arrays (steps >= 0)."""
    out: list[dict[str, int]] = [{} for _ in range(n)]
    width = len(trace.names)
    keys, counts = np.unique(step.astype(np.int64) * width + name, return_counts=True)
    for key, count in zip(keys.tolist(), counts.tolist(), strict=True):
        out[key // width][trace.names[key % width]] = count
    return out


def _op_counts(trace: Trace, lo: np.ndarray, hi: np.ndarray, ops):
    """Per step: top-level count, all-op count, and the top-level ops by name."""
    step = assign(ops.start, lo, hi)
    inside = step >= 0
    n = len(lo)
    top = inside & (ops.depth == 0)
    names = trace.name_id[ops.rows]
    return (
        np.bincount(step[top], minlength=n),
        np.bincount(step[inside], minlength=n),
        _counts_by_name(trace, step[top], names[top], n),
    )


def _host_events(trace: Trace, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray, *kinds: Kind) -> np.ndarray:
    rows = thread_rows(trace, trace.rows(*kinds), pid, tid)
    step = assign(trace.ts_ns[rows], lo, hi)
    return np.bincount(step[step >= 0], minlength=len(lo))


def _totals(trace: Trace, gpu: Attribution) -> Totals:
    kind = trace.launch_kind[gpu.rt_rows]
    ms, me = merge(trace.ts_ns[gpu.op_rows], trace.end_ns[gpu.op_rows])
    return Totals(
        events=len(trace),
        kernels=int(np.sum(trace.kind == Kind.KERNEL)),
        launches=int(np.sum(kind == LAUNCH)),
        graph_launches=int(np.sum(kind == GRAPH_LAUNCH)),
        gpu_ops=len(gpu.op_rows),
        gpu_busy_ns=int((me - ms).sum()),
        runtime_calls=len(gpu.rt_rows),
        cpu_ops=int(np.sum(trace.kind == Kind.CPU_OP)),
        python_frames=int(np.sum(trace.kind == Kind.PYTHON)),
        span_ns=int(trace.end_ns.max() - trace.start_ns) if len(trace) else 0,
        unattributed_gpu_ops=int(np.sum(gpu.op_step < 0)),
    )
