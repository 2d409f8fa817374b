"""Rank traces made from a real one: the events of a recorded trace repeated per rank, as a tensor-parallel job's
ranks would record the same steps. Nothing is invented: each rank's copy has its times shifted (the ranks start a
little apart), its ids offset (each rank's process numbers its own events), distributedInfo.rank set, and one rank
made slower by stretching every event of its copy about the trace's first event."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

from tests.conftest import DATA

SOURCE = DATA / "cuda_train_ns_resolution_5steps.trace.json.gz"  # V100, 5 ProfilerSteps (PROVENANCE.md)
SKEW_US = 250.0  # each rank starts this much after the one before it
ID_OFFSET = 1_000_000  # each rank's External ids and correlation ids, moved past the previous rank's


def make_rank_traces(folder: Path, ranks: int = 4, slow_rank: int = 2, stretch: float = 1.25) -> list[Path]:
    """rank0.trace.json.gz ... in `folder`; `slow_rank`'s events stretched by `stretch`. Returns the paths."""
    doc = json.loads(gzip.decompress(SOURCE.read_bytes()))
    t0 = min(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X")
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(ranks):
        k = stretch if rank == slow_rank else 1.0
        mine = copy.deepcopy(doc)
        mine["distributedInfo"] = {**doc["distributedInfo"], "rank": rank, "world_size": ranks}
        for e in mine["traceEvents"]:
            if e.get("ph") == "X":
                e["ts"] = t0 + (e["ts"] - t0) * k + rank * SKEW_US
                e["dur"] = e["dur"] * k
            args = e.get("args", {})
            for key in ("External id", "correlation"):
                if isinstance(args.get(key), int):
                    args[key] += rank * ID_OFFSET
        path = folder / f"rank{rank}.trace.json.gz"
        path.write_bytes(gzip.compress(json.dumps(mine).encode(), compresslevel=1))
        paths.append(path)
    return paths
