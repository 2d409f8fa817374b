"""Read a trace's steps by hand, with no probe code: an independent check of `probe analyze`'s figures.

    python scripts/read_steps.py TRACE --frame 'gpu_worker.py\\(\\d+\\): execute_model'   # a Python frame a step
    python scripts/read_steps.py TRACE --range '^ProfilerStep#'                          # a range or cpu_op a step
    python scripts/read_steps.py TRACE --after '^Optimizer.step#' --thread 24248         # a loop without markers
    python scripts/read_steps.py TRACE --whole                                           # the launching thread

Plain Python over the chrome JSON (gzipped or not), written apart from probe/analysis so that the two can disagree:
for each step its host window (wall), the GPU work it launched (the union of the kernels, copies and memsets whose
launch call, joined on `args.correlation`, starts in the window), the time its thread spent blocked on the device
(the union of `*Synchronize` calls, synchronous copies and copy calls that waited: returned at or after their GPU
copy's end, or saw it start 50 us or more after they began while they still ran; where such a call or a
`synchronize` frame is the innermost open frame, op or call: a frame's inner frames are its Python), data loading
(ranges, ops and frames named for the DataLoader or `wait_for_batch`, less the blocked time), host work (wall less
blocked), and which side is larger. `--after REGEX` cuts a flat loop: a step starts at the thread's first event and
after each event whose name matches (the optimizer's range) ends, at the next event on the thread. Prints one row a
step, then the median step by max(wall, GPU work), the lower middle one.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

GPU_CATS = {"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "hip_driver"}
HOST_CATS = {"cpu_op", "operator", "user_annotation", "python_function"} | RUNTIME_CATS
SYNC = re.compile(r"Synchronize|^(?:cuda|hip)Memcpy(?:2D|3D|Peer|WithStream|DtoH|HtoD|DtoD)?$")
DATA = re.compile(
    r"enumerate\(DataLoader\)|DataLoader[A-Za-z_]*\.__next__|dataloader\.py\([0-9]+\): __next__|wait_for_batch"
)
QUEUED_US = 50.0


def load(path: Path) -> list[dict]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]


def t(e: dict) -> tuple[float, float]:
    s = float(e["ts"])
    return s, s + float(e["dur"])


def union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def clip(spans, lo, hi):
    return [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--frame", help="a python_function frame whose name matches is a step (outermost only)")
    how.add_argument("--range", help="a user_annotation or cpu_op whose name matches is a step (outermost only)")
    how.add_argument("--after", help="cut a flat loop after each event whose name matches")
    how.add_argument("--whole", action="store_true", help="one step: the launching thread's first to last event")
    p.add_argument("--thread", help="the host thread (tid), when the rule needs one")
    args = p.parse_args()
    events = load(args.trace)
    launcher = launchers(events)
    thread = step_thread(args, events, launcher)
    host = [e for e in events if cat(e) in HOST_CATS and (thread is None or str(e.get("tid")) == thread)]
    windows = steps(args, host, thread)
    code = [e for e in host if cat(e) != "user_annotation"]  # ranges are labels, never the code that ran
    blocked = innermost(code, blocking_events(code, launcher))
    data = [t(e) for e in host if DATA.search(e["name"])]
    print_steps(events, thread, windows, launcher, blocked, data)


def cat(e: dict) -> str:
    return str(e.get("cat", "")).lower()


def launchers(events: list[dict]) -> list[tuple[dict, dict | None]]:
    """Each GPU op with the runtime call that launched it (joined on args.correlation; None: no such call)."""
    runtime = [e for e in events if cat(e) in RUNTIME_CATS]
    gpu = [e for e in events if cat(e) in GPU_CATS]
    by_corr = {}
    for e in runtime:
        c = e.get("args", {}).get("correlation")
        if c is not None:
            by_corr.setdefault(c, e)
    return [(g, by_corr.get(g.get("args", {}).get("correlation"))) for g in gpu]


def step_thread(args: argparse.Namespace, events: list[dict], launcher: list[tuple[dict, dict | None]]) -> str | None:
    """--thread, else the thread the step events are on (--frame, --range), else the one that launched most GPU
    work."""
    work: dict[str, float] = {}
    for g, r in launcher:
        if r is not None:
            work[str(r["tid"])] = work.get(str(r["tid"]), 0.0) + float(g["dur"])
    thread = args.thread or (max(work, key=work.get) if work else None)
    if not args.thread and (args.frame or args.range):  # the thread the step events are on
        pattern = re.compile(args.frame or args.range)
        counts: dict[str, int] = {}
        for e in events:
            if cat(e) in HOST_CATS and pattern.search(e["name"]):
                counts[str(e.get("tid"))] = counts.get(str(e.get("tid")), 0) + 1
        thread = max(counts, key=counts.get) if counts else thread
    return thread


def blocking_events(code: list[dict], launcher: list[tuple[dict, dict | None]]) -> set[int]:
    """The ids of the events that block on the device: *Synchronize calls, `synchronize` frames, and copy calls
    that waited (returned at or after their GPU copy's end, or saw it start QUEUED_US late while they still ran)."""
    copy_end = {}
    for g, r in launcher:
        if r is not None and "Memcpy" in r["name"]:
            copy_end[id(r)] = t(g)
    blocking = set()
    for e in code:
        name = e["name"]
        if cat(e) in RUNTIME_CATS and SYNC.search(name):
            blocking.add(id(e))
        elif cat(e) == "python_function" and re.search(r"\bsynchronize\b", name):
            blocking.add(id(e))
        elif cat(e) in RUNTIME_CATS and id(e) in copy_end:
            (cs, ce), (gs, ge) = t(e), copy_end[id(e)]
            if ce >= ge or (gs - cs >= QUEUED_US and ce >= gs):
                blocking.add(id(e))
    return blocking


def print_steps(events, thread, windows, launcher, blocked, data) -> None:
    """One row a step (its window, sync, host work, data loading, GPU work and the larger side), then the median."""
    rows = []
    print(f"thread {thread}; {len(windows)} steps; times in ms")
    print(f"{'#':>3} {'start':>10} {'wall':>9} {'sync':>9} {'host work':>10} {'data':>8} {'GPU work':>9}  side")
    t0 = min(float(e["ts"]) for e in events)
    for i, (lo, hi) in enumerate(windows):
        mine = [t(g) for g, r in launcher if r is not None and lo <= float(r["ts"]) <= hi]
        g_busy = union(mine)
        sync = union(clip(blocked, lo, hi))
        dat = union(clip(data, lo, hi)) - union(clip([(max(a, c), min(b, d)) for a, b in data for c, d in blocked
                                                       if min(b, d) > max(a, c)], lo, hi))  # fmt: skip
        work_ = (hi - lo) - sync
        side = "gpu" if g_busy >= work_ else "host"
        rows.append((max(hi - lo, g_busy), i))
        print(f"{i:>3} {(lo - t0) / 1e3:>10.3f} {(hi - lo) / 1e3:>9.3f} {sync / 1e3:>9.3f} {work_ / 1e3:>10.3f} "
              f"{dat / 1e3:>8.3f} {g_busy / 1e3:>9.3f}  {side}")  # fmt: skip
    if rows:
        median = sorted(rows)[(len(rows) - 1) // 2][1]
        print(f"median step: {median}")


def innermost(code: list[dict], chosen: set[int]) -> list[tuple[float, float]]:
    """The stretches where the innermost open event (the latest started; the shorter, then a runtime call over an op
    over a frame, when they start together) is one of `chosen`."""
    rank = {"python_function": 0, "cpu_op": 1, "operator": 1}
    code = [e for e in code if float(e["dur"]) > 0]  # an event of no length covers no time: never open
    marks = sorted([(t(e)[0], 1, i) for i, e in enumerate(code)] + [(t(e)[1], -1, i) for i, e in enumerate(code)])
    open_now: dict[int, dict] = {}
    out, last = [], None
    k = 0
    while k < len(marks):
        now = marks[k][0]
        if last is not None and now > last and open_now:
            e = max(open_now.values(), key=lambda e: (t(e)[0], -t(e)[1], rank.get(str(e.get("cat", "")).lower(), 2)))
            if id(e) in chosen:
                out.append((last, now))
        while k < len(marks) and marks[k][0] == now:
            _, delta, i = marks[k]
            if delta > 0:
                open_now[i] = code[i]
            else:
                open_now.pop(i, None)
            k += 1
        last = now
    return out


def steps(args, host: list[dict], thread: str | None) -> list[tuple[float, float]]:
    if args.whole:
        spans = [t(e) for e in host]
        return [(min(a for a, _ in spans), max(b for _, b in spans))]
    if args.after:
        pattern = re.compile(args.after)
        ordered = sorted(host, key=lambda e: float(e["ts"]))
        cuts = [float(ordered[0]["ts"])]
        ends = sorted(t(e)[1] for e in ordered if pattern.search(e["name"]))
        for end in ends[:-1]:
            later = [float(e["ts"]) for e in ordered if float(e["ts"]) >= end]
            cuts.append(later[0])
        return list(zip(cuts, cuts[1:] + [ends[-1]], strict=True))
    want = "python_function" if args.frame else None
    pattern = re.compile(args.frame or args.range)
    hits = [
        t(e)
        for e in host
        if pattern.search(e["name"])
        and (str(e.get("cat", "")).lower() == want if want else str(e.get("cat", "")).lower() != "python_function")
    ]
    hits.sort(key=lambda x: (x[0], -x[1]))
    out: list[tuple[float, float]] = []
    for a, b in hits:  # outermost only
        if out and b <= out[-1][1]:
            continue
        out.append((a, b))
    return out


if __name__ == "__main__":
    main()
