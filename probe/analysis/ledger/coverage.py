"""What the steps hold of a trace, and the largest piece they leave out.

- **GPU work in steps**: the union of the GPU ops joined to some step (probe.analysis.ledger.gpu's attribution, by
  their launch call), over the union of every GPU op of the trace.
- **Host time in steps**: on the threads the steps run on, the union of their frames, ops and runtime calls (an OS
  call, nsys's OSRT_API, is none: a trace of ranges records no code, and its OS calls are mostly start-up I/O)
  inside some step's window, over that union across the whole trace.
- **The largest piece left out**: the GPU ops in no step, grouped by where their launch call lies (before the
  first step, between two steps, after the last, not in the trace at all, or none linked: an op with no
  correlation id); the group with the most GPU time, named by the outermost cpu_op around most of its launches.
  A piece's time is what the share left out counts: the union of its ops less the time the steps' own ops run,
  so the piece never exceeds the whole it is a piece of.

`LEFT_OUT_WARN`: when more than 5% of the GPU work lies outside every step, the verdict on the steps may miss what
bounds the run (vLLM's prefill outside its graph-launch slices was 1,391 ops on an H100), so a warning names the
share and the piece. With no GPU work to weigh (a CPU-only trace, or one whose GPU side was not recorded), the host
stands in: when the steps hold less than `HOST_LEFT_OUT_WARN` of their thread's busy time, a warning names the share
and the name whose outermost events take the most time outside them (a serving loop's main thread whose model ran on
a worker the profiler did not record: three `prompt()` calls as the steps, 0% of the thread, the rest its
`threading.py: join`). A thread asleep (`time.sleep`, host.SLEEP_BUILTIN) is not busy: a serving loop that sleeps
200 ms between two bursts of requests holds all its busy time in its steps.
"""

from __future__ import annotations

import numpy as np

from probe.analysis.intervals import covered, merge
from probe.analysis.ledger.gpu import Attribution
from probe.analysis.ledger.host import SLEEP_BUILTIN, frame_name, nested, thread_ops, thread_rows
from probe.analysis.ledger.steps import StepSet
from probe.analysis.ledger.types import Coverage
from probe.analysis.trace import Kind, Trace

LEFT_OUT_WARN = 0.05  # of the GPU work outside every step: the steps may not be the run's
HOST_LEFT_OUT_WARN = 0.5  # of their thread's busy time in the steps, with no GPU work: the steps may not be the run's
NO_LAUNCH = "whose launch call is not in the trace"
# GPU ops that carry no correlation id at all: the trace links them to no host call, so no launch of theirs was lost
# (MTIA's dma_request copies carry none)
NO_LINK = "that carry no correlation id"


def coverage(trace: Trace, steps: StepSet, gpu: Attribution) -> Coverage:
    op_s, op_e = trace.ts_ns[gpu.op_rows], trace.end_ns[gpu.op_rows]
    inside = gpu.op_step >= 0
    busy = _union(op_s, op_e)
    in_steps = _union(op_s[inside], op_e[inside])
    win_s, win_e = merge(steps.start, steps.end)
    host_in = host_all = 0
    host_out: dict[str, int] = {}  # with no GPU work: by name, the own time of host events outside the steps
    code = np.setdiff1d(trace.rows(Kind.PYTHON, Kind.CPU_OP, Kind.RUNTIME), trace.os_call_rows(), assume_unique=True)
    frames = trace.rows(Kind.PYTHON)
    sleeps = frames[trace.name_ids(lambda s: SLEEP_BUILTIN.search(s) is not None)[trace.name_id[frames]]]
    for pid, tid in sorted({(int(p), int(t)) for p, t in zip(steps.pid, steps.tid, strict=True)}):
        rows = thread_rows(trace, code, pid, tid)
        ms, me = merge(trace.ts_ns[rows], trace.end_ns[rows])
        asleep = thread_rows(trace, sleeps, pid, tid)
        ss, se = merge(trace.ts_ns[asleep], trace.end_ns[asleep])  # a sleep is idle, inside the frames around it
        host_all += int((me - ms).sum() - (se - ss).sum())
        host_in += int(covered(ms, me, win_s, win_e).sum() - covered(ss, se, win_s, win_e).sum())
        if not busy:
            _own_outside(trace, rows, win_s, win_e, host_out)
    left, left_ns = _left_out(trace, gpu, win_s, merge(op_s[inside], op_e[inside]))
    if not busy and host_out:
        name, ns = min(host_out.items(), key=lambda kv: (-kv[1], kv[0]))
        left, left_ns = (f"{name}, {ns / 1e6:.3f} ms of its own time", ns) if ns else (None, 0)
    return Coverage(in_steps, busy, host_in, host_all, left, left_ns)


def _own_outside(trace: Trace, rows: np.ndarray, win_s, win_e, into: dict[str, int]) -> None:
    """Add to `into`, by name, the own time (less the events inside it) of the events of `rows` (one thread's) that
    lie outside every step's window [win_s, win_e]: what the thread did outside its steps, where it did it (a
    `join`'s wait, not the `<module>` frame around everything)."""
    events = nested(trace, rows)
    out = covered(win_s, win_e, events.start, events.end) == 0
    for name_id, ns in zip(trace.name_id[events.rows[out]].tolist(), events.self_ns[out].tolist(), strict=True):
        name = frame_name(trace.names[name_id])
        into[name] = into.get(name, 0) + int(ns)


def warning(c: Coverage) -> str | None:
    """One line when the steps leave more than LEFT_OUT_WARN of the GPU work out; with no GPU work, when they hold
    less than HOST_LEFT_OUT_WARN of their thread's busy time."""
    if not c.gpu_busy_ns:
        if not c.host_busy_ns or c.host_share >= HOST_LEFT_OUT_WARN or not c.left_out:
            return None
        return (
            f"the steps hold {100 * c.host_share:.0f}% of their thread's busy time ({c.host_in_steps_ns / 1e6:.3f} of "
            f"{c.host_busy_ns / 1e6:.3f} ms); the most outside them: {c.left_out}. Where the thread waits there, "
            "its work ran on another thread, one the trace may not hold; if these are not the run's steps, name "
            "them with --steps REGEX"
        )
    out = c.gpu_busy_ns - c.gpu_in_steps_ns
    if out <= LEFT_OUT_WARN * c.gpu_busy_ns:
        return None
    advice = (
        ": the profiler recorded them without the calls that launched them (issued before it started, or lost)"
        if c.left_out and c.left_out.endswith(NO_LAUNCH)
        else ": the trace links them to no host call, so no launch of theirs was lost, and no step can hold them"
        if c.left_out and c.left_out.endswith(NO_LINK)
        else ". If these are not the run's steps, name them with --steps REGEX"
    )
    return (
        f"the steps leave {100 * out / c.gpu_busy_ns:.0f}% of the GPU work outside every step ({out / 1e6:.3f} of "
        f"{c.gpu_busy_ns / 1e6:.3f} ms); the largest piece: {c.left_out}{advice}"
    )


def _union(s: np.ndarray, e: np.ndarray) -> int:
    ms, me = merge(s, e)
    return int((me - ms).sum())


def _outside(s: np.ndarray, e: np.ndarray, held: tuple[np.ndarray, np.ndarray]) -> int:
    """The union of [s, e) less the time `held` (merged intervals) covers."""
    ms, me = merge(s, e)
    return int((me - ms).sum() - covered(*held, ms, me).sum())


def _mostly(trace: Trace, rows: np.ndarray) -> str:
    """ ", most of them NAME" for the op name that holds most of `rows`, copies named as copies; "" for one name
    among several that holds no majority."""
    names, counts = np.unique(trace.name_id[rows], return_counts=True)
    top = int(np.argmax(counts))
    if 2 * counts[top] <= len(rows):
        return ""
    copy = " copies" if np.all(trace.kind[rows[trace.name_id[rows] == names[top]]] == Kind.GPU_MEMCPY) else ""
    return f", most of them {trace.names[names[top]]}{copy}"


def _left_out(trace: Trace, gpu: Attribution, win_s: np.ndarray, held: tuple[np.ndarray, np.ndarray]):
    """The largest piece of GPU work in no step, in words, and its ns: the time its ops run while no op of a step
    does (`held`, the steps' ops merged), so a piece is measured as the share it is part of is, never past it."""
    out = np.flatnonzero(gpu.op_step < 0)
    if not len(out):
        return None, 0
    launch = gpu.op_launch[out]
    rows = gpu.op_rows[out]
    # where each launch lies: 0 before the first window, i between windows i-1 and i, n after the last; -1 a call
    # the trace lacks; -2 no call at all (the op carries no correlation id)
    unlinked = np.where(trace.correlation[rows] < 0, -2, -1)
    gap = np.where(launch >= 0, np.searchsorted(win_s, trace.ts_ns[np.maximum(launch, 0)], side="right"), unlinked)
    groups = np.unique(gap)
    sizes = [_outside(trace.ts_ns[rows[gap == g]], trace.end_ns[rows[gap == g]], held) for g in groups.tolist()]
    g = int(groups[int(np.argmax(sizes))])
    mine = gap == g
    ns = max(sizes)
    what = f"{ns / 1e6:.3f} ms of GPU work ({int(mine.sum())} ops{_mostly(trace, rows[mine]) if g < 0 else ''}) "
    if g == -1:
        return what + NO_LAUNCH, ns
    if g == -2:
        return what + NO_LINK, ns
    n = len(win_s)
    where = "before the first step" if g == 0 else "after the last step" if g == n else f"between steps {g - 1} and {g}"
    under = _outermost_op(trace, launch[mine], trace.dur_ns[rows[mine]])
    return what + f"launched {where}" + (f", most of it under {under}" if under else ""), ns


def _outermost_op(trace: Trace, calls: np.ndarray, weight: np.ndarray) -> str | None:
    """The outermost cpu_op around the calls that launched the most of `weight`, by name."""
    by_name: dict[str, int] = {}
    pairs = np.stack([trace.pid[calls], trace.tid[calls]], axis=1)
    for pid, tid in np.unique(pairs, axis=0).tolist():
        sel = (pairs[:, 0] == pid) & (pairs[:, 1] == tid)
        ops = thread_ops(trace, pid, tid)
        top = ops.depth == 0
        s, e, r = ops.start[top], ops.end[top], ops.rows[top]
        if not len(s):
            continue
        t = trace.ts_ns[calls[sel]]
        k = np.searchsorted(s, t, side="right") - 1
        hit = (k >= 0) & (e[np.maximum(k, 0)] >= t)
        for row, w in zip(r[k[hit]].tolist(), weight[sel][hit].tolist(), strict=True):
            name = trace.name(row)
            by_name[name] = by_name.get(name, 0) + w
    return max(by_name, key=lambda x: by_name[x]) if by_name else None
