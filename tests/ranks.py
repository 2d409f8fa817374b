"""Rank traces made from a real one: the events of a recorded trace repeated per rank, as a tensor-parallel job's
ranks would record the same steps. Nothing is invented: each rank's copy has its times shifted (the ranks start a
little apart), its ids offset (each rank's process numbers its own events), distributedInfo.rank set, and one rank
made slower by stretching every event of its copy about the trace's first event. With `repeat`, a rank's recording
is the recorded steps played `repeat` times end to end (ids offset again each time): a longer run of the same
steps, for a test that needs an analysis to take a while. The recorded trace is read in ../shared/traces (a test
without it skips)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.conftest import shared_trace

SOURCE = "public/cuda_train_ns_resolution_5steps.trace.json.gz"  # HTA's V100 training trace, 5 ProfilerSteps
SKEW_US = 250.0  # each rank starts this much after the one before it
ID_OFFSET = 1_000_000  # each rank's External ids and correlation ids, moved past the previous rank's
REPEAT_ID_OFFSET = 250_000  # one repetition's ids past the previous one's (the trace's ids reach 211,614)


def make_rank_traces(
    folder: Path,
    ranks: int = 4,
    slow_rank: int = 2,
    stretch: float = 1.25,
    name: str = "rank{rank}.trace.json.gz",
    declare: bool = True,
    repeat: int = 1,
) -> list[Path]:
    """`name` (formatted with the rank) for each rank in `folder`; `slow_rank`'s events stretched by `stretch`;
    distributedInfo.rank set when `declare`, else removed. Returns the paths."""
    doc = json.loads(gzip.decompress(shared_trace(SOURCE).read_bytes()))
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in spans)
    span = max(e["ts"] + e["dur"] for e in spans) - t0
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(ranks):
        k = stretch if rank == slow_rank else 1.0
        mine = {key: value for key, value in doc.items() if key not in ("traceEvents", "distributedInfo")}
        if declare:
            mine["distributedInfo"] = {**doc["distributedInfo"], "rank": rank, "world_size": ranks}
        events = [e for e in doc["traceEvents"] if e.get("ph") != "X"]  # metadata once
        for copy_index in range(repeat):
            for e in spans:
                e = {**e, "ts": t0 + (e["ts"] - t0 + copy_index * span) * k + rank * SKEW_US, "dur": e["dur"] * k}
                args = e["args"] = dict(e.get("args", {}))
                for key in ("External id", "correlation"):
                    if isinstance(args.get(key), int):
                        args[key] += rank * ID_OFFSET + copy_index * REPEAT_ID_OFFSET
                events.append(e)
        mine["traceEvents"] = events
        path = folder / name.format(rank=rank)
        path.write_bytes(gzip.compress(json.dumps(mine).encode(), compresslevel=1))
        paths.append(path)
    return paths


COLLECTIVE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
PERIOD_US = 1000  # one step's period, the same on every rank (a synchronous job)
STEP_END_US = 900  # every rank's step range ends here, from the period's start
COMPUTE_US = 200  # the compute kernel before the collective, the same on every rank
COLLECTIVE_END_US = 700  # every rank's collective kernel ends here: when the last rank joined it


def make_collective_job(
    folder: Path, entries_us: tuple[int, ...] = (0, 100, 200, 300), steps: int = 2, sync_at_us: int = 30
) -> list[Path]:
    """A synchronous job's ranks, hand-built so every figure can be checked by hand (no recorded trace holds the
    case): rank r enters each step `entries_us[r]` after the period's start, launches a 200 us compute kernel (from
    entry + 20) and a collective (from entry + 220), then waits in cudaStreamSynchronize from entry + `sync_at_us`
    until the collective ends. The collective ends at 700 on every rank, when the last rank joined it, so rank r
    spends 480 - entries_us[r] us in it; every step range ends at 900. Returns rank<r>.trace.json paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, entry in enumerate(entries_us):
        events: list[dict] = []
        for k in range(steps):
            t0, start = k * PERIOD_US, k * PERIOD_US + entry
            corr = 10 * k
            host = [
                ("user_annotation", f"ProfilerStep#{k}", start, t0 + STEP_END_US, {}),
                ("cuda_runtime", "cudaLaunchKernel", start + 10, start + 15, {"correlation": corr + 1}),
                ("cuda_runtime", "cudaLaunchKernel", start + 20, start + 25, {"correlation": corr + 2}),
                ("cuda_runtime", "cudaStreamSynchronize", start + sync_at_us, t0 + COLLECTIVE_END_US, {}),
            ]
            gpu = [
                ("kernel", "volta_sgemm_128x64_nn", start + 20, start + 20 + COMPUTE_US, {"correlation": corr + 1}),
                ("kernel", COLLECTIVE, start + 20 + COMPUTE_US, t0 + COLLECTIVE_END_US, {"correlation": corr + 2}),
            ]
            events += [_event(c, n, a, b, 1, 1, args) for c, n, a, b, args in host]
            events += [_event(c, n, a, b, 0, 7, {"stream": 7, **args}) for c, n, a, b, args in gpu]
        paths.append(_write_rank(folder, "nccl", rank, len(entries_us), events))
    return paths


def make_gloo_job(folder: Path, entries_us: tuple[int, ...] = (0, 100, 200, 300), steps: int = 2) -> list[Path]:
    """make_collective_job's job on CPUs with Gloo, no GPU side: rank r enters each step `entries_us[r]` after the
    period's start, computes on the host (an aten::mm from entry + 20, COMPUTE_US long), then calls the collective
    (c10d's op from entry + 220, 10 us, on the step's thread); Gloo runs it on its own thread (`gloo:all_reduce`, a
    range from entry + 220) until it completes at 700 on every rank, when the last rank joined it, and the step's
    thread waits (no event: no stacks) until then. So rank r spends 480 - entries_us[r] us in the collective; every
    step range ends at 900. Returns rank<r>.trace.json paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, entry in enumerate(entries_us):
        events: list[dict] = []
        for k in range(steps):
            t0, start = k * PERIOD_US, k * PERIOD_US + entry
            events += [
                _event("user_annotation", f"ProfilerStep#{k}", start, t0 + STEP_END_US, 1, 1, {}),
                _event("cpu_op", "aten::mm", start + 20, start + 20 + COMPUTE_US, 1, 1, {}),
                _event("cpu_op", "c10d::allreduce_", start + 220, start + 230, 1, 1, {}),
                _event("user_annotation", "gloo:all_reduce", start + 220, t0 + COLLECTIVE_END_US, 1, 2, {}),
            ]
        paths.append(_write_rank(folder, "gloo", rank, len(entries_us), events))
    return paths


def _write_rank(folder: Path, backend: str, rank: int, world: int, events: list[dict]) -> Path:
    """One rank's trace, rank<r>.trace.json in `folder`, its distributedInfo naming the backend, rank and world."""
    path = folder / f"rank{rank}.trace.json"
    doc = {"distributedInfo": {"backend": backend, "rank": rank, "world_size": world}, "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


def _event(cat: str, name: str, a: int, b: int, pid: int, tid: int, args: dict) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": a, "dur": b - a, "args": args}
