"""Interval arithmetic on sorted int64 arrays, and statistics by group: the one implementation every analysis uses.

Intervals are closed [start, end] in integer ns. Everything is vectorized (sort, searchsorted, cumulative
sums), so the cost is O(n log n) however the intervals nest or how many windows are asked about.
"""

from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end] intervals as sorted disjoint intervals (touching ones are joined)."""
    if len(starts) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    opens = np.empty(len(s), bool)
    opens[0] = True
    opens[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(opens)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], e[last]


def covered(ms: np.ndarray, me: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For merged intervals (ms, me): how much of each window [lo, hi] they cover, exactly."""
    if len(ms) == 0:
        return np.zeros(len(lo), np.int64)
    prefix = np.concatenate(([0], np.cumsum(me - ms)))

    def upto(t: np.ndarray) -> np.ndarray:  # covered length in (-inf, t]
        k = np.searchsorted(ms, t, side="right") - 1
        kc = np.maximum(k, 0)
        inside = np.clip(t - ms[kc], 0, me[kc] - ms[kc])
        return np.where(k >= 0, prefix[kc] + inside, 0)

    return upto(hi) - upto(lo)


def difference(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merged intervals a less merged intervals b, as merged intervals: the pieces between consecutive boundaries of
    either set that lie in a and not in b (each piece is wholly in or out of each set)."""
    cuts = np.unique(np.concatenate((a_s, a_e, b_s, b_e)))
    if len(cuts) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = cuts[:-1], cuts[1:]

    def within(s: np.ndarray, e: np.ndarray) -> np.ndarray:
        if not len(s):
            return np.zeros(len(lo), bool)
        k = np.searchsorted(s, lo, side="right") - 1
        return (k >= 0) & (e[np.maximum(k, 0)] >= hi)

    keep = within(a_s, a_e) & ~within(b_s, b_e)
    return merge(lo[keep], hi[keep])


def union_by_group(group: np.ndarray, starts: np.ndarray, ends: np.ndarray, groups: int) -> np.ndarray:
    """Length of the union of the intervals in each group 0..groups-1 (rows with group < 0 are ignored)."""
    keep = group >= 0
    group, starts, ends = group[keep], starts[keep], ends[keep]
    out = np.zeros(groups, np.int64)
    if len(starts) == 0:
        return out
    base = int(starts.min())
    span = int(ends.max()) - base + 1
    if span * (groups + 1) < 2**62:
        # Shift each group into its own stretch of the time axis, so one merge does every group at once.
        shift = group.astype(np.int64) * span - base
        ms, me = merge(starts + shift, ends + shift)
        np.add.at(out, ms // span, me - ms)
        return out
    for g in np.unique(group):  # only for absurd spans; still one pass per group, not per event
        sel = group == g
        ms, me = merge(starts[sel], ends[sel])
        out[g] = int((me - ms).sum())
    return out


def merged_by_group(group: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """Each group's union as disjoint intervals: (group, start, end) arrays sorted by group then start (rows with
    group < 0 are left out)."""
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


def inside_any(starts: np.ndarray, ends: np.ndarray, q_start: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """Whether each query [q_start, q_end] lies inside one of the intervals (starts, ends): of the intervals
    starting at or before the query, the largest end must reach the query's end. One sort, one searchsorted."""
    if not len(starts):
        return np.zeros(len(q_start), bool)
    order = np.argsort(starts, kind="stable")
    s, reach = starts[order], np.maximum.accumulate(ends[order])
    k = np.searchsorted(s, q_start, side="right") - 1
    return (k >= 0) & (reach[np.maximum(k, 0)] >= q_end)


def assign(t: np.ndarray, win_start: np.ndarray, win_end: np.ndarray) -> np.ndarray:
    """Index of the window (sorted by start) whose [start, end] holds each time; -1 where none does."""
    k = np.searchsorted(win_start, t, side="right") - 1
    kc = np.maximum(k, 0)
    ok = (k >= 0) & (t <= win_end[kc]) if len(win_start) else np.zeros(len(t), bool)
    return np.where(ok, k, -1)


def nesting(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth and parent of properly nested intervals, given sorted by (start asc, end desc).

    depth[i] = how many earlier intervals are still open at starts[i]; an interval of zero length at another's
    end is its sibling, not its child. parent[i] = the nearest earlier interval one level up, -1 at the top.
    """
    n = len(starts)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    idx = np.arange(n)
    closed = np.searchsorted(np.sort(ends), starts, side="right")  # intervals over by starts[i], any order
    # [lo, hi): the run of equal starts each interval is in, read off the sorted starts (two searches cost 3x this)
    new_start = np.concatenate(([True], starts[1:] != starts[:-1]))
    run_first = np.flatnonzero(new_start)
    run = np.cumsum(new_start) - 1
    lo, hi = run_first[run], np.append(run_first[1:], n)[run]
    zero = np.concatenate(([0], np.cumsum(ends == starts)))
    zero_from = hi - (zero[hi] - zero[lo])  # zero-length intervals sort last among equal starts
    later_zero = hi - np.maximum(idx, zero_from)  # of those counted in `closed`, the ones at or after i
    depth = np.maximum(idx - (closed - later_zero), 0)
    # The parent is the last earlier interval one level up: any later one at that depth would lie inside it.
    # One search over (depth, position) keys finds it for every depth at once, so deep nesting costs what
    # flat events do.
    keys = np.sort(depth * n + idx)
    k = np.searchsorted(keys, (depth - 1) * n + idx) - 1
    found = keys[np.maximum(k, 0)]
    parent = np.where((depth > 0) & (k >= 0) & (found // n == depth - 1), found % n, -1)
    return depth, parent


def containers(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The parent of each interval by what holds it whole, given sorted by (start asc, end desc): the latest
    earlier interval that is still open at its start and ends no earlier than it does (an interval of zero length
    at another's end is its sibling, as in `nesting`); -1 at the top.

    On properly nested intervals this is `nesting`'s parent. Where intervals overlap (a `record_function` range
    entered inside the short `__enter__` frame that opens it and left inside `__exit__`), an interval is inside
    only what holds it whole: the range, which outlives its `__enter__` frame, is that frame's sibling, and the
    events after the frame ends lie inside the range. (The host partitions split such an event instead, to give
    each nanosecond to one event: probe.analysis.ledger.host._innermost.)

    Computed as "the previous interval ending at or after t" by pointer jumping: each pointer skips only
    intervals ending before its own target, so it may jump to where its target's pointer points; every round
    doubles the reach of those still searching, log(n) rounds of vector work on them."""
    n = len(starts)
    target = np.maximum(ends, starts + 1)  # ends at or after t, and open at the start (a zero-length one)
    up = np.arange(n) - 1
    todo = np.flatnonzero(up >= 0)
    while len(todo):
        found = ends[up[todo]] >= target[todo]
        todo = todo[~found]
        up[todo] = up[up[todo]]
        todo = todo[up[todo] >= 0]
    return up


def first_ending_by(parent: np.ndarray, end: np.ndarray, start: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per query i: the first of start[i], its parent, its parent's parent, ... whose end is at or after t[i]; -1
    when none is (or start[i] is -1). The walk up the parent array, done by doubling: level k holds each node's
    2**k-th ancestor and the latest end among it and the 2**k - 1 above it, so a query skips any run of nodes
    that all end before its time in log(depth) steps, whatever the nesting: the cost is (nodes + queries) x
    log(depth), not queries x depth (cpu_ops nested 32,000 deep took 94 s a step by step walk)."""
    up, latest = [parent], [end]  # up[k][j]: the 2**k-th ancestor of j, -1 past the top
    while (up[-1] >= 0).any():
        u, m = up[-1], latest[-1]
        j = np.maximum(u, 0)
        up.append(np.where(u >= 0, u[j], -1))
        latest.append(np.where(u >= 0, np.maximum(m, m[j]), m))
    cur = start.copy()
    for u, m in zip(reversed(up), reversed(latest), strict=True):
        j = np.maximum(cur, 0)
        skip = (cur >= 0) & (m[j] < t)  # this node and the 2**k - 1 above it all end before t
        cur = np.where(skip, u[j], cur)
    return cur


def nearest_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Per node: itself when marked, else its nearest marked ancestor, -1 when none is. Pointer jumping: each pass
    points every unresolved node at its pointee's pointer, so log(depth) passes over the nodes resolve them all."""
    near = np.where(marked, np.arange(len(parent)), parent)
    while True:
        j = np.maximum(near, 0)
        open_ = (near >= 0) & ~marked[j]
        if not open_.any():
            return near
        near = np.where(open_, near[j], near)


def distinct_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distinct (a, b) pairs as a 2 x k array, ordered by a then b: np.unique(np.stack([a, b]), axis=1), from
    one-dimensional uniques (unique along an axis sorts the pairs as opaque records, 8x slower on a trace's
    (pid, tid) columns: half a second of a 400k-event analysis)."""
    ua, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    key = np.unique(ia.astype(np.int64) * len(ub) + ib)  # at most len(a) ** 2: far under 2**63
    return np.stack([ua[key // max(len(ub), 1)], ub[key % max(len(ub), 1)]])


def _sorted_groups(keys: np.ndarray, values: np.ndarray):
    """Keys and values sorted by key, then value; and each key's first and last index (keys must not be empty)."""
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order]
    first = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
    return k, v, first, np.append(first[1:], len(k)) - 1


def grouped_medians(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique keys, the median of `values` within each key), numpy's interpolation for even counts."""
    if len(keys) == 0:
        return np.zeros(0, keys.dtype), np.zeros(0, np.float64)
    k, v, first, last = _sorted_groups(keys, values)
    lo = first + (last - first) // 2
    hi = first + (last - first + 1) // 2
    return k[first], (v[lo].astype(np.float64) + v[hi].astype(np.float64)) / 2


def grouped_quantiles(keys: np.ndarray, values: np.ndarray, qs: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique keys, an array of len(qs) rows: each key's quantile q of `values`), with np.percentile's
    default ("linear") method and arithmetic, so each figure equals np.percentile(group, 100 * q)."""
    if len(keys) == 0:
        return np.zeros(0, keys.dtype), np.zeros((len(qs), 0), np.float64)
    k, v, first, last = _sorted_groups(keys, values)
    out = np.empty((len(qs), len(first)), np.float64)
    for row, q in enumerate(qs):
        at = (last - first) * q  # numpy's virtual index, (n - 1) q
        below = np.floor(at).astype(np.int64)
        t = at - below
        a = v[first + below]
        b = v[np.minimum(first + below + 1, last)]
        step = b - a
        out[row] = np.where(t >= 0.5, b - step * (1 - t), a + step * t)  # numpy's _lerp, both halves
    return k[first], out
