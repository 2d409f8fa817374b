"""A brute-force ledger in plain Python, written from the definitions in probe/analysis/ledger/build.py and never from
its
code: no numpy, no shared helper. It reads a chrome trace's events itself, times as exact ns from their decimal
text, and walks time event by event. Slow, obvious, and independent: tests hold the real ledger to it.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

LAUNCH = {
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel",
}
GRAPH = {"cudaGraphLaunch", "hipGraphLaunch"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "hip_driver"}
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
ATTENTION = re.compile(
    r"scaled_dot_product|flash_attn|flash_attention|efficient_attention|unified_attention|"
    r"paged_attention|_attention_forward|::attention|mla_attention",
    re.IGNORECASE,
)
SYNC = re.compile(
    r"Synchronize|^(?:cuda|hip)Memcpy(?:2D|3D|Peer|WithStream|DtoH|HtoD|DtoD)?(?:_v\d+)?$|"
    r"^cuMemcpy(?:DtoH|HtoD|DtoD|2D|3D)?(?:_v\d+)?$"
)
PURPOSE = (
    "sync",
    "data",
    "communication",
    "sample",
    "cache_update",
    "cache_seq_length",
    "cache_mask_sizes",
    "mask",
    "attention",
)
DATA = re.compile(
    r"enumerate\(DataLoader\)|DataLoader[A-Za-z_]*\.__next__|dataloader\.py\(\d+\): __next__|wait_for_batch"
)
COMMS = re.compile(
    r"^nccl:|^gloo:|^c10d::|^record_param_comms$|all_?to_?all|all_?gather|all_?reduce|reduce_?scatter", re.I
)
NAMED = ("user_annotation", "cpu_op", "operator", "python_function")
QUEUED_NS = 50_000  # a copy starting this long after its call began, while the call ran: the call waited
MECHANISM = ("python", "dispatch", "launch", "runtime", "sync_wait", "profiler", "unattributed")
SYNC_FRAME = re.compile(r"\bsynchronize\b")
# a thread blocked in a lock's acquire or a poll: a wait, on other threads' work where they ran code inside it
BLOCKING = re.compile(
    r"^<built-in (?:method (?:acquire|acquire_lock) of _thread\.(?:lock|RLock)\b|method (?:poll|select|control) of "
    r"select\.(?:epoll|poll|devpoll|kqueue)\b|function (?:select|poll|sleep)>)"
)
WAIT_FRAME = re.compile(r"^<built-in method wait of |\): wait$")  # a collective's wait, when it makes no runtime call
# torch.compile's bookkeeping ops around a compiled call (the guard check, the pregraph bytecode, AOTAutograd's runtime
# wrapper): their self time is the compiled runtime's, not an op's
COMPILE_BOOKKEEPING = ("TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher Runtime Wrapper ")
KERNEL_WAIT_NS = 30_000
OURS = {
    "sync": "sync",
    "sample": "sample",
    "cache.update": "cache_update",
    "cache.seq_length": "cache_seq_length",
    "cache.mask_sizes": "cache_mask_sizes",
    "mask": "mask",
}
# HF transformers' frames of the same work (with_stack=True): file under transformers/, and the function where it
# matters
HF_FRAMES = (
    ("generation/logits_process.py", "__call__", "sample"),
    ("cache_utils.py", "update", "cache_update"),
    ("cache_utils.py", "get_seq_length", "cache_seq_length"),
    ("cache_utils.py", "get_mask_sizes", "cache_mask_sizes"),
    ("masking_utils.py", None, "mask"),
)


def _hf_part(name: str) -> str | None:
    """The part an HF transformers frame `.../transformers/FILE(LINE): FUNCTION` does the work of, or None."""
    where, _, function = name.partition(": ")
    path = where.rpartition("(")[0]
    for file, fn, part in HF_FRAMES:
        if (path == f"transformers/{file}" or path.endswith(f"/transformers/{file}")) and fn in (None, function):
            return part
    return None


def ns(value) -> int:
    return int((Decimal(str(value)) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


@dataclass
class Event:
    cat: str
    name: str
    pid: object
    tid: object
    start: int
    end: int
    corr: object = None


def read(path: Path) -> list[Event]:
    raw = gzip.decompress(path.read_bytes()) if path.read_bytes()[:2] == b"\x1f\x8b" else path.read_bytes()
    doc = json.loads(raw, parse_float=Decimal)
    out = []
    for e in doc["traceEvents"] if isinstance(doc, dict) else doc:
        if e.get("ph") != "X":
            continue
        start = ns(e["ts"])
        out.append(
            Event(
                str(e.get("cat", "")).lower(),
                e.get("name", ""),
                e.get("pid"),
                e.get("tid"),
                start,
                start + ns(e["dur"]),
                (e.get("args") or {}).get("correlation"),
            )
        )
    return out


@dataclass
class Step:
    kernels: int = 0
    gpu_ops: int = 0
    launches: int = 0
    graph_launches: int = 0
    window: int = 0
    busy: int = 0
    idle_host: int = 0
    idle_kernel: int = 0
    idle_other: int = 0
    purpose: dict = field(default_factory=dict)
    mechanism: dict = field(default_factory=dict)
    frames: dict = field(default_factory=dict)  # frame name (addresses removed) -> innermost ns


def step(events: list[Event], lo: int, hi: int, pid, tid, user: tuple[tuple[str, str], ...] = ()) -> Step:
    """The ledger of the step [lo, hi] on thread (pid, tid); `user`: (part, regex) pairs, first priority."""
    out = Step()
    first_call: dict = {}
    for e in sorted((e for e in events if e.cat in RUNTIME_CATS), key=lambda e: e.start):
        if e.corr is not None and e.corr not in first_call:
            first_call[e.corr] = e
        if lo <= e.start <= hi:
            base = re.sub(r"(?:_v\d+)?$", "", e.name, count=1)
            base = re.sub(r"_(?:ptsz|ptds)$", "", base)
            out.launches += base in LAUNCH
            out.graph_launches += base in GRAPH
    mine = [
        (e, first_call[e.corr])
        for e in events
        if e.cat in GPU_CATS and e.corr in first_call and lo <= first_call[e.corr].start <= hi
    ]
    out.gpu_ops = len(mine)
    out.kernels = sum(e.cat == "kernel" for e, _ in mine)
    if mine:
        out.window = max(e.end for e, _ in mine) - min(e.start for e, _ in mine)
        spans = []
        for e, _ in sorted(mine, key=lambda m: m[0].start):
            if spans and e.start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], e.end)
            else:
                spans.append([e.start, e.end])
        out.busy = sum(b - a for a, b in spans)
        for (_, prev_end), (next_start, _) in zip(spans, spans[1:], strict=False):
            gap = next_start - prev_end
            launched = min(call.start for e, call in mine if e.start == next_start)
            if launched > prev_end:
                out.idle_host += gap
            elif gap < KERNEL_WAIT_NS:
                out.idle_kernel += gap
            else:
                out.idle_other += gap
    waited = _waited(events)
    out.purpose = _purpose(events, lo, hi, pid, tid, user, waited)
    out.mechanism, out.frames = _mechanism(events, lo, hi, pid, tid, waited)
    return out


def _waited(events: list[Event]) -> set[int]:
    """ids of the copy calls the host waited in: each call (a name with Memcpy) and the first GPU copy with its
    correlation; it waited when it returned at or after the copy's end, or when the copy started QUEUED_NS or more
    after the call began and the call still ran then."""
    copy_of: dict = {}
    for e in events:
        if e.cat in ("gpu_memcpy", "memcpy") and e.corr is not None and e.corr not in copy_of:
            copy_of[e.corr] = e
    out = set()
    for e in events:
        if e.cat in RUNTIME_CATS and "Memcpy" in e.name and e.corr in copy_of:
            g = copy_of[e.corr]
            if e.end >= g.end or (g.start - e.start >= QUEUED_NS and e.end >= g.start):
                out.add(id(e))
    return out


def _collective_wait(e, open_now, code) -> bool:
    """A `wait` frame whose parent (the latest-started other event open around it) is a collective's, and inside
    which no runtime call starts: the host blocked in the collective (Gloo's work.wait())."""
    if not WAIT_FRAME.search(e.name):
        return False
    around = [o for o in open_now if o is not e and o.start <= e.start and o.end >= e.end]
    if not around or not COMMS.search(max(around, key=lambda o: (o.start, -o.end, RANK.get(o.cat, 2))).name):
        return False
    return not any(c.cat in RUNTIME_CATS and e.start <= c.start < e.end for c in code)


def _sweep(here, lo, hi):
    """Walk the window boundary by boundary: each stretch [a, b] inside [lo, hi] with the events open over it. An
    event of zero length covers no nanosecond, so it is never open."""
    here = [e for e in here if e.end > e.start]
    marks = sorted([(e.start, 1, k) for k, e in enumerate(here)] + [(e.end, -1, k) for k, e in enumerate(here)])
    open_now: dict[int, Event] = {}
    t = lo
    i = 0
    while i < len(marks):
        now = marks[i][0]
        a, b = max(t, lo), min(now, hi)
        if b > a:
            yield a, b, list(open_now.values())
        while i < len(marks) and marks[i][0] == now:
            _, delta, k = marks[i]
            if delta > 0:
                open_now[k] = here[k]
            else:
                open_now.pop(k, None)
            i += 1
        t = max(t, now)
    if hi > max(t, lo):
        yield max(t, lo), hi, []


def _purpose(events, lo, hi, pid, tid, user, waited=frozenset()):
    """Each stretch of the window goes to the first part, in priority order, that an open event carries."""
    here = [e for e in events if e.pid == pid and e.tid == tid and e.end > lo and e.start < hi]

    def tags(e) -> set:
        base = e.name.rpartition("#")[0] if re.search(r"#\d+$", e.name) else e.name
        out = {
            name
            for name, regex in user
            if e.cat in ("user_annotation", "cpu_op", "operator", "python_function") and re.search(regex, e.name)
        }
        if e.cat == "user_annotation" and base in OURS:
            out.add(OURS[base])
        if e.cat == "python_function" and (hf := _hf_part(e.name)) is not None:
            out.add(hf)
        blocks = e.cat in RUNTIME_CATS and (SYNC.search(e.name) or id(e) in waited)
        if blocks or (e.cat == "python_function" and SYNC_FRAME.search(e.name)):
            out.add("sync")
        if e.cat in NAMED and DATA.search(e.name):
            out.add("data")
        if e.cat in NAMED and COMMS.search(e.name):
            out.add("communication")
        if e.cat in ("cpu_op", "operator") and ATTENTION.search(e.name):
            out.add("attention")
        return out

    order = tuple(name for name, _ in user) + PURPOSE
    parts = {p: 0 for p in order} | {"model": 0}
    tagged = [e for e in here if tags(e)]
    tag_of = {id(e): tags(e) for e in tagged}
    for a, b, open_now in _sweep(tagged, lo, hi):
        open_tags = set().union(*(tag_of[id(e)] for e in open_now))
        parts[next((p for p in order if p in open_tags), "model")] += b - a
    return parts


RANK = {"python_function": 0, "cpu_op": 1, "operator": 1}  # runtime calls: 2, innermost among equal spans


def _inside_union(e, events) -> bool:
    """Whether [e.start, e.end] lies inside the union of the events' spans."""
    reach = None
    for x in sorted(events, key=lambda x: x.start):
        if x.start > e.start:
            break
        reach = x.end if reach is None else max(reach, x.end)
    return reach is not None and reach >= e.end


def _mechanism(events, lo, hi, pid, tid, waited=frozenset()):
    """Each stretch goes to the innermost open frame, op or runtime call: the latest started (the shorter, then the
    call over the op over the frame, when they start together)."""
    mine = [e for e in events if e.pid == pid and e.tid == tid and (e.cat in RANK or e.cat in RUNTIME_CATS)]
    # the profiler's own work (kineto's `overhead`, on a thread of its own) inside this thread's events: paid here
    mine += [e for e in events if e.cat.lower() == "overhead" and _inside_union(e, mine)]
    code = [e for e in mine if e.end > lo and e.start < hi]
    parts = {p: 0 for p in MECHANISM}
    frames: dict[str, int] = {}
    blocked: list[list] = []  # a blocking builtin's self pieces: [start, end, event], contiguous stretches joined
    for a, b, open_now in _sweep(code, lo, hi):
        if not open_now:
            parts["unattributed"] += b - a
            continue
        if any(e.cat.lower() == "overhead" for e in open_now):  # the profiler's own span is its own, whatever is open
            parts["profiler"] += b - a
            continue
        e = max(open_now, key=lambda e: (e.start, -e.end, RANK.get(e.cat, 2)))
        if e.cat == "python_function" and BLOCKING.search(e.name):
            if blocked and blocked[-1][1] == a and blocked[-1][2] is e:
                blocked[-1][1] = b
            else:
                blocked.append([a, b, e])
        if e.cat == "python_function":
            name = re.sub(r" at 0x[0-9a-fA-F]+", "", e.name)
            frames[name] = frames.get(name, 0) + b - a
            if BLOCKING.search(e.name):
                continue  # its part below, piece by piece
            part = "sync_wait" if SYNC_FRAME.search(e.name) or _collective_wait(e, open_now, code) else "python"
        elif e.cat in RANK:
            bookkeeping = e.name.startswith(COMPILE_BOOKKEEPING)
            part = "runtime" if bookkeeping else "dispatch"
        else:
            base = re.sub(r"_(?:ptsz|ptds)$", "", re.sub(r"(?:_v\d+)?$", "", e.name, count=1))
            blocks = SYNC.search(e.name) or id(e) in waited
            part = "launch" if base in LAUNCH | GRAPH else "sync_wait" if blocks else "runtime"
        parts[part] += b - a
    data = _spans([e for e in events if e.pid == pid and e.tid == tid and e.cat in NAMED and DATA.search(e.name)])
    for a, b, _ in blocked:  # other threads' code that began and ended inside the piece, or data loading: Python
        others = [
            e
            for e in events
            if e.pid == pid and e.tid != tid and (e.cat in RANK or e.cat in RUNTIME_CATS) and a <= e.start
            and e.end <= b
        ]  # fmt: skip
        worked = _length(_spans(others + [_Span(x, y) for x, y in data], a, b))
        parts["python"] += worked
        parts["sync_wait"] += b - a - worked
    return parts, frames


@dataclass
class _Span:
    start: int
    end: int


def _spans(events, lo=None, hi=None) -> list[tuple[int, int]]:
    """The union of the events' spans (clipped to [lo, hi] when given), as disjoint sorted intervals."""
    out: list[list[int]] = []
    for e in sorted(events, key=lambda e: e.start):
        a = e.start if lo is None else max(e.start, lo)
        b = e.end if hi is None else min(e.end, hi)
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _length(spans) -> int:
    return sum(b - a for a, b in spans)


def top_level_ops(events: list[Event], lo: int, hi: int, pid, tid) -> int:
    """cpu_ops on the thread starting in [lo, hi] and not inside another cpu_op: walk them in start order."""
    count, open_until = 0, None
    for e in sorted(
        (e for e in events if e.cat in ("cpu_op", "operator") and e.pid == pid and e.tid == tid),
        key=lambda e: (e.start, -e.end),
    ):
        if open_until is None or e.start >= open_until:
            count += lo <= e.start <= hi
        open_until = e.end if open_until is None else max(open_until, e.end)
    return count


def step_ranges(events: list[Event], names) -> list[Event]:
    """The user ranges with these names, in start order (probe's prefill and decode#i, say)."""
    return sorted((e for e in events if e.cat == "user_annotation" and e.name in names), key=lambda e: e.start)
