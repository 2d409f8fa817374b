"""What torch.profiler itself costs the host, per event it records, on this machine.

A profiled step is slower than an unprofiled one: every op, range and runtime call the profiler records costs
the host a little, and the ledger finds that cost in the step's wall time (mostly as `unattributed`, the gaps
between events the profiler widens). Two kinds of event cost very different amounts, so each gets
its own figure: an op the dispatcher records (aten ops, runtime calls) costs a fraction of a microsecond, while a
range opened from Python (`record_function`, what probe's annotations become under the profiler) costs several.
`event_costs` measures both: a small workload of nested aten ops, and a loop of probe's own ranges, each run
with and without the profiler, alternating, the extra time divided by the events recorded.

The loop's op cost is a floor, not the cost in a model's step: the loop's code and the profiler's buffers stay in
cache, a model's step evicts them. On the tiny preset's cached step (a 2-core CPU VM) the profiler cost 2.2x the
loop's figure per op, so the unprofiled estimate missed a third of the profiler's overhead. `workload_op_cost`
therefore measures the op cost on the recorded workload itself: the same generation, alternately plain and
profiled, the extra time less its ranges at the loop's range cost, over the ops recorded. `probe profile` writes
that cost, and the loop's range cost, into the trace's sidecar; `probe analyze` then shows, beside each step,
wall - ops x op cost - ranges x range cost: the step as it would have run unprofiled (benchmarks/reconcile.py
checks that against the bench's own ITL).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from probe import vocabulary
from probe.analysis.records.sidecar import EventCost
from probe.capture import annotate

CALIBRATION_REPS = 15  # alternating pairs: the median of the pairs' differences shrugs off a preempted run
WORKLOAD_ITERS = 200  # each iteration records 10 ops, 5 of them nested: linear (t, addmm), relu, add, sum
RANGE_ITERS = 1000  # probe ranges a calibration run opens
WORKLOAD_PAIRS = 3  # plain and profiled runs of the recorded workload, alternating, for its own op cost


def _workload(x: torch.Tensor, w: torch.Tensor, iters: int) -> None:
    for _ in range(iters):
        y = torch.nn.functional.linear(x, w)  # aten::linear -> aten::t -> aten::transpose, aten::addmm ...
        y = torch.relu(y)
        x = (x + y).sum(dim=0, keepdim=True).expand_as(x).contiguous()


def _timed(fn) -> int:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def _per_event(run, activities, reps: int, kind) -> float:
    """(profiled - plain) / events recorded of `kind`, the median over alternating pairs."""
    run()  # warm
    with torch.profiler.profile(activities=activities) as prof:  # count what one run records
        run()
    events = sum(1 for e in prof.events() if kind(e))
    diffs = []
    for _ in range(reps):
        plain = _timed(run)
        with torch.profiler.profile(activities=activities):
            profiled = _timed(run)
        diffs.append(profiled - plain)
    return max(statistics.median(diffs), 0) / max(events, 1)


@functools.cache  # once a process and device: probe run profiles several engines
def event_costs(device: torch.device, reps: int = CALIBRATION_REPS) -> EventCost:
    """The profiler's host cost per recorded op and per probe range (ns), with the activities `probe profile`
    uses on `device`."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    x = torch.randn(4, 64, device=device)
    w = torch.randn(64, 64, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    annotator = annotate.Annotator(nvtx=False)

    def ops() -> None:
        _workload(x, w, WORKLOAD_ITERS)
        sync()

    def ranges() -> None:
        for i in range(RANGE_ITERS):
            with annotator("calibrate", i):  # a no-op unless the profiler runs, as in the decode loop
                pass

    with torch.inference_mode():
        op_ns = _per_event(ops, activities, reps, lambda e: e.device_type == torch.autograd.DeviceType.CPU)
        range_ns = _per_event(ranges, activities, reps, lambda e: e.name.startswith("calibrate"))
    return EventCost(op_ns=op_ns, range_ns=range_ns)


def workload_op_cost(
    run: Callable[[], Sequence[int]], activities: list, range_ns: float, pairs: int = WORKLOAD_PAIRS
) -> float:
    """The profiler's host cost per recorded op in the decode steps of the workload `run` (one annotated
    generation, synchronized, returning its decode steps' ns): over alternating plain and profiled runs, the
    median profiled step less the median plain step less its ranges at `range_ns`, over the ops recorded in a
    step (every host event in its `decode#i` range that is not a range), the median over the pairs. The decode
    steps only: the first events of a session (the prefill's) cost the profiler its buffers, not per event."""
    run()  # warm
    costs = []
    for _ in range(pairs):
        plain = statistics.median(run())
        with torch.profiler.profile(activities=activities) as prof:
            profiled = statistics.median(run())
        ops, ranges = _per_decode_step(prof.events())
        if ops:
            costs.append((profiled - plain - ranges * range_ns) / ops)
    return max(statistics.median(costs), 0.0) if costs else 0.0


def _per_decode_step(events) -> tuple[float, float]:
    """The median count of ops and of ranges recorded inside each decode step's range, on its thread."""
    host = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    start = np.array([e.time_range.start for e in host], float)
    end = np.array([e.time_range.end for e in host], float)
    thread = np.array([e.thread for e in host], np.int64)
    is_range = np.array([e.is_user_annotation for e in host], bool)
    ops, ranges = [], []
    for i, e in enumerate(host):
        if is_range[i] and e.name.startswith(f"{vocabulary.DECODE}#"):
            inside = (thread == e.thread) & (start >= start[i]) & (end <= end[i])
            inside[i] = False
            ops.append(int((inside & ~is_range).sum()))
            ranges.append(int((inside & is_range).sum()))
    return (statistics.median(ops), statistics.median(ranges)) if ops else (0.0, 0.0)
