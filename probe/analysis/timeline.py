"""One step's host timeline, for a view: top-level ops, runtime calls made outside any op, and ranges, in start
order, each with the purpose part its time feeds (probe.analysis.host)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from probe.analysis.host import PURPOSE, REST, PartTable, thread_ops, thread_rows
from probe.analysis.intervals import covered, inside_any, merge
from probe.analysis.ledger import StepLedger
from probe.analysis.trace import Kind, Trace

_RANGE_PARTS = PURPOSE[:-2]  # the parts a range of probe's vocabulary feeds: sync .. mask


@dataclass(frozen=True)
class TimelineItem:
    name: str
    kind: str  # "op" (a top-level cpu_op) | "range" (a user range) | "runtime" (an API call outside any op)
    part: str  # the purpose part it feeds: "cache_update", "mask", "sample", "attention", "model", ... or "range"
    start_us: float  # from the step's start
    dur_us: float


def step_timeline(trace: Trace, step: StepLedger) -> list[TimelineItem]:
    """Top-level ops, runtime calls made outside any op, and our ranges inside one step, in start order.

    `part` names the purpose part the item's time feeds: a range its own part ("cache_update", "mask", ...,
    "range" for `forward` and other plain ranges); an op or call the highest-priority range enclosing it
    ("sample" for the argmax inside `sample`), else "attention" for an attention op, "sync" for a blocking call,
    or "model". A view highlights cache ranges by it.
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
        range_part[r] = next((p for p in _RANGE_PARTS if table.by_name[p][name_id]), "range")
    by_part = {part: np.array([r for r, p in range_part.items() if p == part], dtype=np.int64) for part in _RANGE_PARTS}

    def enclosing(starts: np.ndarray, ends: np.ndarray, fallback: list[str]) -> list[str]:
        out = list(fallback)
        for part in reversed(_RANGE_PARTS):  # highest priority last, so it wins
            rows = by_part[part]
            hit = inside_any(trace.ts_ns[rows], trace.end_ns[rows], starts, ends)
            for i in np.flatnonzero(hit).tolist():
                out[i] = part
        return out

    items: list[tuple[int, int, str, str, str]] = []
    top = np.flatnonzero((ops.depth == 0) & (ops.start >= lo) & (ops.start <= hi))
    names = trace.name_id[ops.rows[top]]
    own = ["attention" if table.by_name["attention"][n] else REST for n in names.tolist()]
    parts = enclosing(ops.start[top], ops.end[top], own)
    for i, n, part in zip(top.tolist(), names.tolist(), parts, strict=True):
        start, end = int(ops.start[i]), int(ops.end[i])
        items.append((start, end - start, trace.names[n], "op", part))
    ms, me = merge(ops.start[ops.depth == 0], ops.end[ops.depth == 0])
    calls = thread_rows(trace, trace.rows(Kind.RUNTIME), step.pid, step.tid)
    calls = calls[(trace.ts_ns[calls] >= lo) & (trace.ts_ns[calls] <= hi)]
    calls = calls[covered(ms, me, trace.ts_ns[calls], trace.end_ns[calls]) < trace.dur_ns[calls]]
    own = ["sync" if table.by_name["sync_call"][n] else REST for n in trace.name_id[calls].tolist()]
    parts = enclosing(trace.ts_ns[calls], trace.end_ns[calls], own)
    for c, part in zip(calls.tolist(), parts, strict=True):
        start, end = int(trace.ts_ns[c]), int(trace.end_ns[c])
        items.append((start, end - start, trace.name(c), "runtime", part))
    for r, part in range_part.items():
        items.append((int(trace.ts_ns[r]), int(trace.dur_ns[r]), trace.name(r), "range", part))
    items.sort(key=lambda it: (it[0], -it[1]))
    return [TimelineItem(name, kind, part, (start - lo) / 1000, dur / 1000) for start, dur, name, kind, part in items]
