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
