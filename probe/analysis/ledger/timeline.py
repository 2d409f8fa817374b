"""One step as a flat list, for `probe analyze --step`: the step's top-level ops, the runtime calls made outside any
op, and its ranges, each with the purpose part its time feeds (`purpose_of`, the rule the explorer's One step view,
probe.explorer.step_clock, colours by).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from probe.analysis.intervals import covered, inside_any, merge
from probe.analysis.ledger.host import PURPOSE, REST, PartTable, purpose_tiers, thread_ops, thread_rows
from probe.analysis.ledger.types import StepLedger
from probe.analysis.trace import Kind, Trace

_RANGE_PARTS = PURPOSE[:-2]  # the parts a range of probe's vocabulary feeds: sync .. mask


@dataclass(frozen=True)
class StepEvent:
    name: str
    kind: str  # "op" (a top-level cpu_op) | "range" (a user range) | "runtime" (an API call outside any op)
    part: str  # the purpose part it feeds: "cache_update", "mask", "sample", "attention", "model", ... or "range"
    start_us: float  # from the step's start
    dur_us: float


def step_events(trace: Trace, step: StepLedger) -> list[StepEvent]:
    """Top-level ops, runtime calls made outside any op, and the ranges inside one step (but its own), in start
    order, for `probe analyze --step`.

    `part` names the purpose part the item's time feeds (`purpose_of`, the rule step_clock colours by): a range
    of probe's vocabulary its own part ("cache_update", "mask", ...; "range" for `forward` and other plain ranges);
    an op or call the highest-priority part covering it ("sample" for the argmax inside `sample`, "sync" for a
    blocking call), else "model"."""
    lo = trace.start_ns + step.start_ns
    hi = lo + step.wall_ns
    table = PartTable.build(trace)
    tiers = purpose_tiers(trace, table, step.pid, step.tid)
    ops = thread_ops(trace, step.pid, step.tid)
    ranges = thread_rows(trace, trace.rows(Kind.USER_RANGE), step.pid, step.tid)
    ranges = ranges[(trace.ts_ns[ranges] >= lo) & (trace.end_ns[ranges] <= hi)]
    ranges = ranges[~((trace.ts_ns[ranges] == lo) & (trace.end_ns[ranges] == hi))]  # the step's own range
    vocabulary = _RANGE_PARTS
    range_part = [next((p for p in vocabulary if table.by_name[p][n]), "range") for n in trace.name_id[ranges].tolist()]
    top = np.flatnonzero((ops.depth == 0) & (ops.start >= lo) & (ops.start <= hi))
    ms, me = merge(ops.start[ops.depth == 0], ops.end[ops.depth == 0])
    calls = thread_rows(trace, trace.rows(Kind.RUNTIME), step.pid, step.tid)
    calls = calls[(trace.ts_ns[calls] >= lo) & (trace.ts_ns[calls] <= hi)]
    calls = calls[covered(ms, me, trace.ts_ns[calls], trace.end_ns[calls]) < trace.dur_ns[calls]]
    items: list[tuple[int, int, str, str, str]] = []
    for kind, rows, starts, ends in (
        ("op", ops.rows[top], ops.start[top], ops.end[top]),
        ("runtime", calls, trace.ts_ns[calls], trace.end_ns[calls]),
    ):
        parts = purpose_of(tiers, table.order, starts, ends, np.full(len(rows), REST, object))
        for r, a, b, part in zip(rows.tolist(), starts.tolist(), ends.tolist(), parts.tolist(), strict=True):
            items.append((a, b - a, trace.name(r), kind, part))
    for r, part in zip(ranges.tolist(), range_part, strict=True):
        items.append((int(trace.ts_ns[r]), int(trace.dur_ns[r]), trace.name(r), "range", part))
    items.sort(key=lambda it: (it[0], -it[1]))
    return [StepEvent(name, kind, part, (start - lo) / 1000, dur / 1000) for start, dur, name, kind, part in items]


def purpose_of(tiers: dict, order: tuple[str, ...], starts: np.ndarray, ends: np.ndarray, fallback: np.ndarray):
    """The purpose part each interval's time feeds: the highest-priority part (host.purpose_tiers, in `order`) whose
    cover holds it whole, else its `fallback`."""
    key = fallback.astype(object)
    for part in reversed(order[:-1]):  # every part but the rest, the highest-priority part last, so it wins
        s, e = tiers[part]
        key[inside_any(s, e, starts, ends)] = part
    return key
