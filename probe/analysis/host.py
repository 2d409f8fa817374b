"""The host side of a step: its wall time partitioned into parts that add up to it exactly, and the Python frames
behind the part no op covers.

Every nanosecond of a step's window, on the step's own thread, goes to the first part in `PartTable.order` that
covers it: a user's own parts first (`--part NAME=REGEX`, in the order given: any range, cpu_op or Python frame
whose name matches, for its whole duration), then `sync`, `sample`, the three cache parts, `mask`, `attention`,
`ops`, `python`, and what is left is `unattributed`. `python` is the time inside a Python frame
(`python_function` events, from `with_stack=True`) that nothing above covers; `sync` is probe's `sync` range
and every runtime call that blocks the host until the device drains (`SYNC_CALL`); it is split among the frames by
self time: each such nanosecond belongs to the innermost frame covering it. So on a trace with Python frames,
`unattributed` is only the time that no event covers at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from probe import vocabulary as V
from probe.analysis.intervals import covered, merge, nesting
from probe.analysis.patterns import compile_user
from probe.analysis.trace import Kind, Trace
from probe.errors import ProbeError

PROBE_PARTS = ("sync", "sample", "cache_update", "cache_seq_length", "cache_mask_sizes", "mask")
BUILTIN_PARTS = (*PROBE_PARTS, "attention", "ops", "python")
UNATTRIBUTED = "unattributed"
CACHE_PARTS = ("cache_update", "cache_seq_length", "cache_mask_sizes")
# cpu_ops whose time is attention: SDPA and its backends, and the attention ops of serving engines
ATTENTION_OP = re.compile(
    r"scaled_dot_product|flash_attn|flash_attention|efficient_attention|unified_attention|"
    r"paged_attention|_attention_forward|::attention|mla_attention",
    re.IGNORECASE,
)
# Runtime calls that block the host until the device drains: every *Synchronize, and the synchronous copies
# (torch's .item() or .to("cpu") is hipMemcpyWithStream on ROCm; cudaMemcpyAsync + cudaStreamSynchronize on CUDA).
SYNC_CALL = re.compile(
    r"Synchronize|^(?:cuda|hip)Memcpy(?:2D|3D|Peer|WithStream|DtoH|HtoD|DtoD)?(?:_v\d+)?$|"
    r"^cuMemcpy(?:DtoH|HtoD|DtoD|2D|3D)?(?:_v\d+)?$"
)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # `<built-in method __new__ of type object at 0xa20880>`
_PART_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def frame_name(name: str) -> str:
    """A Python frame's name as the trace writes it, less object addresses, so one builtin aggregates."""
    return _ADDRESS.sub("", name)


@dataclass(frozen=True)
class UserPart:
    name: str
    pattern: re.Pattern


def parse_part(text: str, reserved: frozenset[str] = frozenset()) -> UserPart:
    """`NAME=REGEX` from the command line; a one-line ProbeError for a bad name, a clash or a bad regex."""
    name, sep, pattern = text.partition("=")
    name = name.strip()
    if not sep or not pattern:
        raise ProbeError(f"--part {text!r}: use NAME=REGEX")
    if not _PART_NAME.fullmatch(name):
        raise ProbeError(f"--part {text!r}: the name must be letters, digits and _ (it becomes the {name}_us key)")
    if name in BUILTIN_PARTS or name == UNATTRIBUTED or name in reserved:
        raise ProbeError(
            f"--part {name}: clashes with a built-in part or field; built-in parts are "
            f"{', '.join((*BUILTIN_PARTS, UNATTRIBUTED))}"
        )
    return UserPart(name, compile_user(pattern, f"--part {name}={pattern}"))


@dataclass(frozen=True)
class FrameTime:
    frame: str  # the frame's name as the trace writes it, object addresses removed
    self_ns: int  # time this frame was the innermost, uncovered by any op, range or runtime call
    count: int  # frame events with this name that start in the scope

    def to_json(self) -> dict:
        return {"frame": self.frame, "self_us": self.self_ns / 1e3, "count": self.count}


@dataclass
class ThreadOps:
    """The cpu_ops of one thread, sorted by (start asc, end desc), with their nesting."""

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    depth: np.ndarray
    self_ns: np.ndarray


def thread_rows(trace: Trace, rows: np.ndarray, pid: int, tid: int) -> np.ndarray:
    return rows[(trace.pid[rows] == pid) & (trace.tid[rows] == tid)]


def thread_ops(trace: Trace, pid: int, tid: int) -> ThreadOps:
    rows, start, end, parent, depth = _nested(trace, thread_rows(trace, trace.rows(Kind.CPU_OP), pid, tid))
    dur = end - start
    child = np.zeros(len(rows), np.int64)
    has = parent >= 0
    np.add.at(child, parent[has], dur[has])
    return ThreadOps(rows, start, end, depth, np.maximum(dur - child, 0))


def _nested(trace: Trace, rows: np.ndarray):
    start, end = trace.ts_ns[rows], trace.end_ns[rows]
    order = np.lexsort((-end, start))
    rows, start, end = rows[order], start[order], end[order]
    depth, parent = nesting(start, end)
    return rows, start, end, parent, depth


@dataclass(frozen=True)
class PartTable:
    """Per name id of a trace: which built-in part a range, op or call of that name feeds, and the user parts."""

    by_name: dict[str, np.ndarray]  # part -> bool over trace.names
    user: tuple[tuple[str, np.ndarray], ...]  # (name, bool over trace.names), in priority order
    frame_id: np.ndarray  # name id -> id into `frames` (the normalized Python frame names)
    frames: tuple[str, ...]

    @property
    def order(self) -> tuple[str, ...]:
        return (*(name for name, _ in self.user), *BUILTIN_PARTS)

    @classmethod
    def build(cls, trace: Trace, user_parts: tuple[UserPart, ...] = ()) -> PartTable:
        split = [V.split_label(n)[0] for n in trace.names]
        ours = {
            "sync": V.SYNC,
            "sample": V.SAMPLE,
            "cache_update": V.CACHE_UPDATE,
            "cache_seq_length": V.CACHE_SEQ_LENGTH,
            "cache_mask_sizes": V.CACHE_MASK_SIZES,
            "mask": V.MASK,
        }
        by_name = {part: np.array([n == label for n in split], bool) for part, label in ours.items()}
        by_name["attention"] = trace.name_ids(lambda s: ATTENTION_OP.search(s) is not None)
        by_name["sync_call"] = trace.name_ids(lambda s: SYNC_CALL.search(s) is not None)
        user = tuple((p.name, trace.name_ids(lambda s, p=p: p.pattern.search(s) is not None)) for p in user_parts)
        table: dict[str, int] = {}
        frame_id = np.fromiter(
            (table.setdefault(frame_name(n), len(table)) for n in trace.names), np.int64, len(trace.names)
        )
        return cls(by_name, user, frame_id, tuple(table))


@dataclass
class HostSplit:
    """The partition of some steps' windows (part -> ns per step) and their Python frames' self time."""

    parts: dict[str, np.ndarray]  # every part in PartTable.order plus UNATTRIBUTED, one value per step
    frame_step: np.ndarray  # (step, frame id, self ns, calls) rows, one per frame name a step has
    frame_id: np.ndarray
    frame_self_ns: np.ndarray
    frame_calls: np.ndarray


def split_host(
    trace: Trace, table: PartTable, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray, ops: ThreadOps
) -> HostSplit:
    """Partition the windows [lo, hi] (steps on thread pid/tid) into parts, and python among its frames."""
    ranges = thread_rows(trace, trace.rows(Kind.USER_RANGE, Kind.PROFILER_STEP), pid, tid)
    runtime = thread_rows(trace, trace.rows(Kind.RUNTIME), pid, tid)
    frames, f_start, f_end, f_parent, _ = _nested(trace, thread_rows(trace, trace.rows(Kind.PYTHON), pid, tid))

    def spans(rows: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = rows[mask[trace.name_id[rows]]]
        return trace.ts_ns[rows], trace.end_ns[rows]

    tiers: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for name, mask in table.user:
        tiers[name] = [spans(ranges, mask), spans(ops.rows, mask), spans(frames, mask)]
    tiers["sync"] = [spans(ranges, table.by_name["sync"]), spans(runtime, table.by_name["sync_call"])]
    for part in PROBE_PARTS[1:]:
        tiers[part] = [spans(ranges, table.by_name[part])]
    attention = table.by_name["attention"][trace.name_id[ops.rows]]
    tiers["attention"] = [(ops.start[attention], ops.end[attention])]
    top = ops.depth == 0
    tiers["ops"] = [(ops.start[top], ops.end[top]), (trace.ts_ns[runtime], trace.end_ns[runtime])]
    tiers["python"] = [(f_start, f_end)]
    parts: dict[str, np.ndarray] = {}
    acc_s, acc_e = np.zeros(0, np.int64), np.zeros(0, np.int64)
    before = np.zeros(len(lo), np.int64)
    above_python = (acc_s, acc_e)
    for part in table.order:
        if part == "python":
            above_python = (acc_s, acc_e)
        acc_s, acc_e = merge(
            np.concatenate([acc_s, *(s for s, _ in tiers[part])]), np.concatenate([acc_e, *(e for _, e in tiers[part])])
        )
        now = covered(acc_s, acc_e, lo, hi)
        parts[part] = now - before
        before = now
    parts[UNATTRIBUTED] = (hi - lo) - before
    step, fid, self_ns, calls = _frame_self(trace, table, frames, f_start, f_end, f_parent, above_python, lo, hi)
    return HostSplit(parts, step, fid, self_ns, calls)


def _frame_self(
    trace: Trace,
    table: PartTable,
    frames: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    above: tuple[np.ndarray, np.ndarray],
    lo: np.ndarray,
    hi: np.ndarray,
):
    """Each step's Python time by innermost frame: (step, frame id, self ns, calls) per (step, frame name).

    A frame's self region is its interval less its children's (they nest), so the self regions tile the union
    of the frames. Each region is cut at the step boundaries and charged, less what the higher parts
    (`above`, merged) cover, to the step holding it: the sum over frames is the step's `python` part exactly.
    """
    empty = np.zeros(0, np.int64)
    if not len(frames) or not len(lo):
        return empty, empty, empty, empty
    n = len(frames)
    idx = np.arange(n)
    # Gaps before each child: from the previous sibling's end (or the parent's start) to the child's start.
    by_parent = np.lexsort((idx, parent))
    p = parent[by_parent]
    first_child = np.concatenate(([True], p[1:] != p[:-1]))
    prev_end = np.where(first_child, start[np.maximum(p, 0)], np.roll(end[by_parent], 1))
    has_parent = p >= 0
    seg_owner = [p[has_parent]]
    seg_start = [prev_end[has_parent]]
    seg_end = [start[by_parent][has_parent]]
    # Each frame's tail: from its last child's end (or its own start) to its own end.
    last_child_end = start.copy()
    last = np.concatenate((p[1:] != p[:-1], [True])) & has_parent
    last_child_end[p[last]] = end[by_parent][last]
    seg_owner.append(idx)
    seg_start.append(last_child_end)
    seg_end.append(end)
    owner, a, b = np.concatenate(seg_owner), np.concatenate(seg_start), np.concatenate(seg_end)
    keep = b > a
    owner, a, b = owner[keep], a[keep], b[keep]
    # Cut at every step boundary inside a region, so each piece lies in one step or in none.
    bounds = np.unique(np.concatenate((lo, hi)))
    first = np.searchsorted(bounds, a, side="right")
    cuts = np.searchsorted(bounds, b, side="left") - first
    pieces = 1 + np.maximum(cuts, 0)
    owner, a, b, first = (np.repeat(x, pieces) for x in (owner, a, b, first))
    k = np.arange(len(owner)) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # piece number in its region
    piece_start = np.where(k > 0, bounds[np.minimum(first + k - 1, len(bounds) - 1)], a)
    piece_end = np.where(k < np.repeat(pieces, pieces) - 1, bounds[np.minimum(first + k, len(bounds) - 1)], b)
    order = np.argsort(lo, kind="stable")
    slo, shi = lo[order], hi[order]
    step = np.searchsorted(slo, piece_start, side="right") - 1
    inside = (step >= 0) & (piece_end <= shi[np.maximum(step, 0)])
    free = (piece_end - piece_start) - covered(*above, piece_start, piece_end)
    step, fid, free = order[step[inside]], table.frame_id[trace.name_id[frames[owner[inside]]]], free[inside]
    width = len(table.frames)
    key, inverse = np.unique(step * width + fid, return_inverse=True)
    self_ns = np.bincount(inverse, weights=free, minlength=len(key)).astype(np.int64)
    # calls: frame events of each name starting inside each step
    s_of = np.searchsorted(slo, start, side="right") - 1
    in_step = (s_of >= 0) & (start <= shi[np.maximum(s_of, 0)])
    call_key = order[s_of[in_step]] * width + table.frame_id[trace.name_id[frames[in_step]]]
    ck, cc = np.unique(call_key, return_counts=True)
    pos = np.searchsorted(ck, key)
    calls = np.where((pos < len(ck)) & (ck[np.minimum(pos, len(ck) - 1)] == key), cc[np.minimum(pos, len(ck) - 1)], 0)
    return key // width, key % width, self_ns, calls
