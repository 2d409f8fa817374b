"""Flow arrows (the Trace Event Format's `ph` s, t and f) as the join of a launch call and its GPU op, where the
file gives no correlation id: rocprof v1 links a HIP call to its kernel or copy only so.

A flow is one start (`s`) and its steps and end (`t`, `f`) of one (cat, id). Each binds to a slice on its own pid
and tid, as the format says (and Perfetto reads it): an `s`, a `t`, and an `f` with `"bp": "e"` to the slice that
encloses its ts; an `f` without to the next slice, the first that starts at or after it. A writer may cut a flow's
ts to whole us while its slices keep exact ns (rocprof v1: a kernel starts at 773902406300.661 us, the flow that
ends on it at 773902406300): a ts no slice encloses binds to a slice that starts within the microsecond after it
(ts <= start < ts + 1 us).

Only a launch's link is made: a start binds among the runtime calls of its thread, a step or end among the GPU
ops (kernel, memcpy, memset) of its stream, and the two take one new correlation id where neither has one.
Slices of one thread among those do not nest (a call, an op), so the slice that encloses a ts is the last that
starts at or before it, if that one has not ended. Every step is a sort and a pass: a million flows cost what a
sort of them does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from probe.analysis.trace.table import GPU_OP_KINDS, Kind

_US = 1000  # ns: the resolution of a flow's ts a writer cut to whole us


@dataclass(frozen=True)
class Flows:
    """Flow events as columns, one row an event (any order)."""

    cat: np.ndarray  # int64: its category, interned (an id written as text apart from an integer one)
    id: np.ndarray  # int64: its id (one written as text, interned)
    start: np.ndarray  # bool: an `s`; else a `t` or an `f`
    next_slice: np.ndarray  # bool: an `f` that binds to the next slice (no "bp": "e")
    pid: np.ndarray  # int64, as the table's pid and tid columns read them
    tid: np.ndarray
    ts_ns: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.id)

    @classmethod
    def join(cls, parts: list[Flows]) -> Flows:
        """The flows of every piece, in turn."""
        if not parts:
            return cls(*(np.zeros(0, t) for t in (np.int64, np.int64, bool, bool, np.int64, np.int64, np.int64)))
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.__dataclass_fields__))


def wanted(kind: np.ndarray, correlation: np.ndarray) -> bool:
    """Whether flow arrows could join anything: some GPU op and some runtime call carry no correlation id."""
    free = correlation < 0
    return bool(np.any(free & _is_gpu_op(kind)) and np.any(free & (kind == Kind.RUNTIME)))


def link(kind: np.ndarray, cols: dict[str, np.ndarray], flows: Flows) -> tuple[str, ...]:
    """Give each runtime call and GPU op a flow links, neither with a correlation id, one new id (in place in
    `cols["correlation"]`), and a line saying how many GPU ops were so joined. Nothing is looked at unless the
    arrows are `wanted`."""
    corr = cols["correlation"]
    if not len(flows) or not wanted(kind, corr):
        return ()
    starts, ends = _pairs(flows)
    host = _bind(cols, kind == Kind.RUNTIME, flows, starts, np.zeros(len(starts), bool))
    op = _bind(cols, _is_gpu_op(kind), flows, ends, flows.next_slice[ends])
    both = (host >= 0) & (op >= 0)
    host, op = host[both], op[both]
    free = (corr[host] < 0) & (corr[op] < 0)
    host, op = host[free], op[free]
    if not len(op):
        return ()
    calls, new = np.unique(host, return_inverse=True)
    base = int(corr.max()) + 1 if np.any(corr >= 0) else 0
    if base > np.iinfo(np.int64).max - len(calls):
        return ("flow events left unjoined: the file's correlation ids leave no room for new ones below 2**63",)
    corr[calls] = base + np.arange(len(calls))
    corr[op] = base + new
    joined = len(np.unique(op))
    return (f"{joined} GPU op(s) with no correlation id joined to {len(calls)} runtime call(s) by flow events",)


def _is_gpu_op(kind: np.ndarray) -> np.ndarray:
    return np.isin(kind, np.asarray(GPU_OP_KINDS, dtype=np.int8))


def _pairs(flows: Flows) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) index pairs into `flows`: each step or end with the last start of its (cat, id) at or before
    it (a start first among equal times). A step or end with no such start pairs with nothing."""
    order = np.lexsort((~flows.start, flows.ts_ns, flows.id, flows.cat))
    cat, ident, start = flows.cat[order], flows.id[order], flows.start[order]
    last = np.maximum.accumulate(np.where(start, np.arange(len(order)), -1))
    ok = ~start & (last >= 0)
    ok[ok] = (cat[last[ok]] == cat[ok]) & (ident[last[ok]] == ident[ok])
    return order[last[ok]], order[ok]


def _bind(
    cols: dict[str, np.ndarray], candidates: np.ndarray, flows: Flows, at: np.ndarray, next_slice: np.ndarray
) -> np.ndarray:
    """The row (among `candidates`) each flow event `at` binds to on its pid and tid, -1 where none: the slice that
    encloses its ts, else the one that starts within the microsecond after it; `next_slice`: the first that starts
    at or after its ts."""
    rows = np.flatnonzero(candidates)
    if not len(rows) or not len(at):
        return np.full(len(at), -1, np.int64)
    pid, tid, ts = flows.pid[at], flows.tid[at], flows.ts_ns[at]
    start, end = cols["ts_ns"][rows], cols["ts_ns"][rows] + cols["dur_ns"][rows]
    before = _neighbour(cols["pid"][rows], cols["tid"][rows], start, pid, tid, ts, after=False)
    after = _neighbour(cols["pid"][rows], cols["tid"][rows], start, pid, tid, ts, after=True)
    encloses = (before >= 0) & (end[before] >= ts)
    soon = (after >= 0) & (start[after] < ts + _US)
    out = np.where(encloses, before, np.where(soon, after, -1))
    out = np.where(next_slice, after, out)
    return np.where(out >= 0, rows[out], -1)


def _neighbour(
    pid: np.ndarray,
    tid: np.ndarray,
    start: np.ndarray,
    qpid: np.ndarray,
    qtid: np.ndarray,
    qts: np.ndarray,
    after: bool,
) -> np.ndarray:
    """For each query (qpid, qtid, qts), the index of the slice on the same pid and tid with the last start at or
    before qts (`after`: the first start at or after it), -1 where there is none: one sort of slices and queries
    together, then a running max (min) of the slice positions."""
    n = len(start)
    is_query = np.r_[np.zeros(n, bool), np.ones(len(qts), bool)]
    p, t, ts = np.r_[pid, qpid], np.r_[tid, qtid], np.r_[start, qts]
    # at an equal time a slice sorts before a query looking back, after one looking forward
    order = np.lexsort((is_query if not after else ~is_query, ts, t, p))
    slice_at = np.where(is_query[order], -1 if not after else len(order), np.arange(len(order)))
    if after:
        near = np.minimum.accumulate(slice_at[::-1])[::-1]
        found = near < len(order)
    else:
        near = np.maximum.accumulate(slice_at)
        found = near >= 0
    query_pos = np.flatnonzero(is_query[order])
    near, found = near[query_pos], found[query_pos]
    out = np.full(len(qts), -1, np.int64)
    hit = order[near[found]]  # an index into the slices
    q = order[query_pos[found]] - n
    same = (p[hit] == qpid[q]) & (t[hit] == qtid[q])
    out[q[same]] = hit[same]
    return out
