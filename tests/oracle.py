"""A brute-force ledger in plain Python, written from the definitions in probe/analysis/ledger.py and never from its
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
PARTS = ("sync", "sample", "cache_update", "cache_seq_length", "cache_mask_sizes", "mask", "attention", "ops", "python")
OURS = {
    "sync": "sync",
    "sample": "sample",
    "cache.update": "cache_update",
    "cache.seq_length": "cache_seq_length",
    "cache.mask_sizes": "cache_mask_sizes",
    "mask": "mask",
}


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
    parts: dict = field(default_factory=dict)
    frames: dict = field(default_factory=dict)  # frame name (addresses removed) -> self ns


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
            elif gap < 30:
                out.idle_kernel += gap
            else:
                out.idle_other += gap
    out.parts, out.frames = _host(events, lo, hi, pid, tid, user)
    return out


def _host(events, lo, hi, pid, tid, user):
    """Sweep the step's window boundary by boundary, keeping which parts are open; each stretch goes to the
    first open part, and a python stretch to the innermost open frame (the latest started)."""
    here = [e for e in events if e.pid == pid and e.tid == tid and e.end > lo and e.start < hi]
    marks = []  # (time, +1 opens / -1 closes, part, event)
    for e in here:
        base = e.name.rpartition("#")[0] if re.search(r"#\d+$", e.name) else e.name
        tags = [
            name
            for name, regex in user
            if e.cat in ("user_annotation", "cpu_op", "operator", "python_function") and re.search(regex, e.name)
        ]
        if e.cat == "user_annotation" and base in OURS:
            tags.append(OURS[base])
        if e.cat in RUNTIME_CATS:
            tags.append("sync" if SYNC.search(e.name) else "ops")
        if e.cat in ("cpu_op", "operator"):
            tags += ["attention", "ops"] if ATTENTION.search(e.name) else ["ops"]
        if e.cat == "python_function":
            tags.append("python")
        for tag in tags:
            marks += [(e.start, 1, tag, e), (e.end, -1, tag, e)]
    marks.sort(key=lambda m: m[0])
    order = tuple(name for name, _ in user) + PARTS
    open_count = {p: 0 for p in order}
    frames_open: dict[int, Event] = {}
    parts = {p: 0 for p in order} | {"unattributed": 0}
    frames: dict[str, int] = {}
    i, t = 0, None
    while i < len(marks):
        now = marks[i][0]
        if t is not None:
            a, b = max(t, lo), min(now, hi)
            if b > a:
                owner = next((p for p in order if open_count[p] > 0), "unattributed")
                parts[owner] += b - a
                if owner == "python":
                    inner = max(frames_open.values(), key=lambda e: (e.start, -e.end))
                    name = re.sub(r" at 0x[0-9a-fA-F]+", "", inner.name)
                    frames[name] = frames.get(name, 0) + b - a
        while i < len(marks) and marks[i][0] == now:
            _, delta, tag, e = marks[i]
            open_count[tag] += delta
            if tag == "python":
                if delta > 0:
                    frames_open[id(e)] = e
                else:
                    frames_open.pop(id(e), None)
            i += 1
        t = now
    covered_from = max(lo, marks[0][0]) if marks else hi
    covered_to = min(hi, marks[-1][0]) if marks else hi
    parts["unattributed"] += (covered_from - lo) + (hi - max(covered_to, covered_from))
    return parts, frames


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
