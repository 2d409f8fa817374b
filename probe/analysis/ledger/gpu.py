"""The GPU side of a step: which GPU ops it launched, when they ran, how busy the GPU was, and why it was idle.

- **Attribution.** A GPU op (kernel, memcpy, memset) belongs to the step whose window holds the start of the
  runtime call that launched it, joined on correlation id (what nsys's nvtx_gpu_proj_trace does, with the step's
  window in place of the NVTX range). A kernel replayed from a graph carries the graph launch's correlation, so it
  lands in the step that launched the graph. nsys numbers correlations per process, chrome per trace.
- **The GPU window** runs from the first of the step's GPU ops to start to the last to end. With async scheduling,
  training, or a graph replayed later, a step's GPU work runs after its host window has closed: the window follows
  the work, so busy and idle are measured there.
- **Busy** is the length of the union of the step's GPU ops: kernels, memcpy and memset. HTA's temporal breakdown
  also counts its "Stream Sync" (`cuda_sync`) events as busy; probe does not, since a stream waiting on an event
  does no work (hta_cuda_simple_add in ../shared/traces/peer holds 41 of them).
- **Idle** = window - busy: the gaps of that union (`idle_gaps` returns each one, `windows` sums them), each
  classified as HTA's idle time breakdown classifies a gap, by the op that ends it: `host_wait` when that op's
  launch call started after the gap began (the host was late), else `kernel_wait` when the gap is under
  `KERNEL_WAIT_NS`, else `other`. HTA's own default threshold is
  `consecutive_kernel_delay=30`, documented as ns, but HTA compares it with gaps in microseconds, so its rule is
  30 us in effect (30 ns would leave kernel wait at 20 us over the 76 steps of the 45 real traces we read: a dead
  category). probe uses HTA's effective rule, 30 us, and `--kernel-wait-us` changes it. Two differences remain and
  are on purpose: HTA classifies gaps per stream over the whole trace, probe the gaps of the union of all streams
  inside each step's GPU window (a GPU is idle only when no stream runs); and HTA holds times as float64
  microseconds, which at epoch-scale timestamps (1.7e15 us) resolve 0.25 us, so a launch call and the op before it
  compare wrongly now and then. On cuda_train_ns_resolution_5steps (tests/test_ledger.py) HTA's kernel wait over
  ProfilerSteps 101-104 is 5,161.956 us; probe's exact figure is 5,118.411 us: 41.102 us of it are gaps that exact
  times show to be host waits, and 2.443 us fall between steps, in no step's GPU window.
- **Launch delay**, two definitions, both in the JSON: `launch_delay` runs from a kernel launch call's start to
  its kernel's start, kernels only, graph replays left out (one launch starts many kernels): the host-to-GPU
  latency a launch sees. `launch_delay_from_end` is HTA's `cuda_kernel_launch_stats` definition: from the end of
  the launch call to the start of the GPU op, clipped at 0, memcpy and memset launches included: the time the op
  waited in the queue once issued. The tables show the first. Both are clipped at 0: a GPU op cannot start before
  the call that issued it, so one that does is clocks that disagree (`clock_skew`, a warning), not a delay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from probe.analysis.intervals import assign, grouped_quantiles, merged_by_group, union_by_group
from probe.analysis.trace import GPU_OP_KINDS, GRAPH_LAUNCH, LAUNCH, Kind, Trace
from probe.analysis.trace.table import correlation_keys as table_correlation_keys

KERNEL_WAIT_NS = 30_000  # HTA's consecutive_kernel_delay as HTA applies it (30, compared with gaps in us): see above


def correlation_keys(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Join key between launches and GPU ops, for these rows (the one rule: trace.table.correlation_keys)."""
    return table_correlation_keys(trace.format, trace.pid[rows], trace.correlation[rows])


@dataclass
class Attribution:
    """Runtime calls and GPU ops, each with the step it belongs to (-1: none)."""

    rt_rows: np.ndarray
    rt_step: np.ndarray
    op_rows: np.ndarray
    op_step: np.ndarray
    op_launch: np.ndarray  # row of the runtime call that launched each GPU op; -1 when unknown


def attribute(trace: Trace, start: np.ndarray, end: np.ndarray) -> Attribution:
    """Each runtime call and GPU op with the step (window [start, end], sorted by start) it belongs to."""
    rt = trace.rows(Kind.RUNTIME)
    rt_step = assign(trace.ts_ns[rt], start, end)
    ops = trace.rows(*GPU_OP_KINDS)
    op_keys = correlation_keys(trace, ops)
    rt_keys = correlation_keys(trace, rt)
    has = rt_keys >= 0
    uniq, first = np.unique(rt_keys[has], return_index=True)  # a repeated id: its first call wins
    rt_with = np.flatnonzero(has)[first]
    k = np.searchsorted(uniq, op_keys)
    kc = np.minimum(k, max(len(uniq) - 1, 0))
    known = (op_keys >= 0) & (k < len(uniq)) & (uniq[kc] == op_keys) if len(uniq) else np.zeros(len(ops), bool)
    launch = np.where(known, rt_with[kc] if len(uniq) else -1, -1)
    op_step = np.where(known, rt_step[np.maximum(launch, 0)] if len(rt) else -1, -1)
    return Attribution(rt, rt_step, ops, op_step, np.where(known, rt[np.maximum(launch, 0)] if len(rt) else -1, -1))


IDLE_CAUSES = ("host_wait", "kernel_wait", "other")  # `Gaps.cause` indexes this


@dataclass
class Gaps:
    """Every idle gap inside a step's GPU window, in (step, start) order: the step, the gap [start, end] on the
    trace's clock, and its cause, an index into IDLE_CAUSES. The one definition of a gap and of its cause:
    `windows` sums these, and the explorer draws them."""

    step: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cause: np.ndarray  # int8: 0 host_wait, 1 kernel_wait, 2 other

    def __len__(self) -> int:
        return len(self.step)


def idle_gaps(trace: Trace, gpu: Attribution, kernel_wait_ns: int) -> Gaps:
    """The gaps of the union of each step's GPU ops, each classified by the op that ends it (see the module
    docstring): `host_wait` when that op's launch call started after the gap began, else `kernel_wait` when the
    gap is shorter than `kernel_wait_ns`, else `other`."""
    op_start, op_end = trace.ts_ns[gpu.op_rows], trace.end_ns[gpu.op_rows]
    step = gpu.op_step
    inside = step >= 0
    g, s, e = merged_by_group(step, op_start, op_end)
    gaps = np.flatnonzero(np.concatenate(([False], g[1:] == g[:-1])))  # intervals with a gap before, in-step
    if not len(gaps):
        empty = np.zeros(0, np.int64)
        return Gaps(empty, empty, empty, np.zeros(0, np.int8))
    gap_start, gap_end = e[gaps - 1], s[gaps]
    # The op that ends each gap: of the step's ops starting exactly there, the one launched first.
    launch_ts = np.where(gpu.op_launch >= 0, trace.ts_ns[np.maximum(gpu.op_launch, 0)], np.iinfo(np.int64).max)
    base, span = int(op_start.min()), int(op_start.max() - op_start.min()) + 1
    op_key = step[inside].astype(np.int64) * span + (op_start[inside] - base)
    keys, inverse = np.unique(op_key, return_inverse=True)
    first_launch = np.full(len(keys), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_launch, inverse, launch_ts[inside])
    launched = first_launch[np.searchsorted(keys, g[gaps].astype(np.int64) * span + (gap_end - base))]
    is_host = launched > gap_start
    is_kernel = ~is_host & (gap_end - gap_start < kernel_wait_ns)
    cause = np.where(is_host, 0, np.where(is_kernel, 1, 2)).astype(np.int8)
    return Gaps(g[gaps].astype(np.int64), gap_start, gap_end, cause)


@dataclass
class Windows:
    """Per step: the GPU window (start, -1 without GPU ops; length), busy, and idle by cause."""

    start: np.ndarray
    length: np.ndarray
    busy: np.ndarray
    host_wait: np.ndarray
    kernel_wait: np.ndarray
    other: np.ndarray


def windows(trace: Trace, gpu: Attribution, n: int, kernel_wait_ns: int) -> Windows:
    op_start, op_end = trace.ts_ns[gpu.op_rows], trace.end_ns[gpu.op_rows]
    step = gpu.op_step
    inside = step >= 0
    first = np.full(n, np.iinfo(np.int64).max, np.int64)
    last = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first, step[inside], op_start[inside])
    np.maximum.at(last, step[inside], op_end[inside])
    has = first <= last
    busy = union_by_group(step, op_start, op_end, n)
    gaps = idle_gaps(trace, gpu, kernel_wait_ns)
    idle = [np.zeros(n, np.int64) for _ in IDLE_CAUSES]  # summed in int64: exact, as the ledger's figures are
    for cause, out in enumerate(idle):
        sel = gaps.cause == cause
        np.add.at(out, gaps.step[sel], (gaps.end - gaps.start)[sel])
    return Windows(np.where(has, first, -1), np.where(has, last - first, 0), busy, *idle)


@dataclass
class LaunchDelays:
    """Per step, p50 and p90 of each definition (None for a step with no such launch)."""

    from_start_p50: list[float | None]
    from_start_p90: list[float | None]
    from_end_p50: list[float | None]
    from_end_p90: list[float | None]


def launch_delays(trace: Trace, gpu: Attribution, n: int):
    known = (gpu.op_launch >= 0) & (gpu.op_step >= 0)
    call = np.maximum(gpu.op_launch, 0)
    call_kind = trace.launch_kind[call]
    op_start = trace.ts_ns[gpu.op_rows]
    # from the start: kernels launched by a kernel launch call
    direct = known & (trace.kind[gpu.op_rows] == Kind.KERNEL) & (call_kind == LAUNCH)
    a50, a90 = _per_step(gpu.op_step[direct], np.maximum(op_start - trace.ts_ns[call], 0)[direct], n)
    # HTA's: from the end, clipped at 0, every op its call launched except graph replays
    queued = known & (call_kind != GRAPH_LAUNCH)
    b50, b90 = _per_step(gpu.op_step[queued], np.maximum(op_start - trace.end_ns[call], 0)[queued], n)
    return LaunchDelays(a50, a90, b50, b90)


def clock_skew(trace: Trace, gpu: Attribution) -> str | None:
    """A warning when GPU ops start before the launch call that issued them, which no real GPU does: the host's
    and the GPU's clocks disagree (a skewed conversion, traces merged from several clocks). None when none does."""
    known = gpu.op_launch >= 0
    ahead = trace.ts_ns[gpu.op_launch[known]] - trace.ts_ns[gpu.op_rows[known]]
    ahead = ahead[ahead > 0]
    if not len(ahead):
        return None
    return (
        f"{len(ahead)} GPU op(s) start before the launch call that issued them, by up to {int(ahead.max()) / 1e3:,.3f}"
        " us: the trace's host and GPU clocks disagree (skewed clocks, a merged trace); launch delays are clipped "
        "at 0 and GPU shares at 100%"
    )


def _per_step(step: np.ndarray, delay: np.ndarray, n: int) -> tuple[list[float | None], list[float | None]]:
    p50: list[float | None] = [None] * n
    p90: list[float | None] = [None] * n
    steps, (q50, q90) = grouped_quantiles(step, delay, (0.5, 0.9))
    for i, a, b in zip(steps.tolist(), q50.tolist(), q90.tolist(), strict=True):
        p50[i], p90[i] = a, b
    return p50, p90
