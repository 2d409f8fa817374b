"""What a sweep on Ray costs, term by term: the terms of docs/cluster.md's model, measured on a cluster of three
nodes on this machine (ray.cluster_utils.Cluster on 127.0.0.1, token authentication on, one CPU a node).

    python -m benchmarks.ray_cost                 # tiny model, cells of 32 new tokens at a 64-token prompt
    python -m benchmarks.ray_cost --calls 400 --new-tokens 64

Measured, each the median of its repeats (wall time in this process):
- start-up: a local instance's start (what `--executor ray` without --address pays), the three-node cluster's
  start, and a driver joining it (what --address pays);
- the workers' start: one probe worker a node (raysweep.Worker: placed, torch imported, the model built), all three
  at once, against building the same model here;
- a cell here (CellRunner.run of the cached engine), the term the cluster divides by G;
- the actor call a cell costs beyond its own work: a call carrying a CellSpec and returning a real cell's CellOutcome,
  to an actor on another node that does nothing else;
- naive's reference rows: the same call with a batch of 8 reference rows, and ray.put of a large set of rows
  fetched on another node (the object store's path, which rows take past Ray's 100 KiB inline limit).

This machine's 2 cores are shared by every node, so the cluster's cells do not really run side by side here: the
terms are what the model needs, the model says what G real workers would do. Nothing here is asserted anywhere.
"""

from __future__ import annotations

import os
import secrets

# Ray reads these when it is imported: loopback only, token authentication on (as tests/conftest.py does).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))

import argparse  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import ray  # noqa: E402
import torch  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from probe.capture.config import BenchConfig, settle, validate  # noqa: E402
from probe.capture.raysweep import Worker, placements  # noqa: E402
from probe.capture.sweep import CellRunner, plan  # noqa: E402
from probe.cluster import session  # noqa: E402


@ray.remote(num_cpus=1)
class Echo:
    """An actor that answers a cell's call with a cell it was given: the call's own cost."""

    def __init__(self, outcome):
        self.outcome = outcome

    def run(self, spec, references):
        return self.outcome

    def fetch(self, refs):
        return sum(len(ray.get(r)) for r in refs)


def reference_rows(length: int, rows: int, tokens: int) -> dict:
    """RefRows as the sweep sends them: (length, row) -> naive's tokens (int64) and finite flags (bool), (N,)."""
    return {
        (length, r): (torch.zeros(tokens, dtype=torch.long), torch.ones(tokens, dtype=torch.bool)) for r in range(rows)
    }


# Run in a fresh interpreter, as a CLI process pays it; each prints its seconds.
JOIN = """import sys, time, logging, ray
t = time.perf_counter()
ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.WARNING)
print(time.perf_counter() - t)"""
BUILD = """import sys, time
t = time.perf_counter()
from probe.capture.sweep import CellRunner
from probe.capture.config import BenchConfig, settle
CellRunner(settle(BenchConfig(prompts=(int(sys.argv[1]),), device="cpu"), "cpu"))
print(time.perf_counter() - t)"""


def _in_a_fresh_process(code: str, arg: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_s(fn, repeats: int) -> float:
    return statistics.median(timed(fn) for _ in range(repeats))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200, help="actor calls timed for each call figure")
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3, help="repeats of each start-up figure")
    args = p.parse_args(argv)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start; Ray {ray.__version__}")
    cfg = settle(BenchConfig(prompts=(args.prompt,), new_tokens=args.new_tokens, runs=3, warmup=1, device="cpu",
                      engines=("naive", "cached"), batch=(1,)), "cpu")  # fmt: skip

    def local_instance():
        with session(None):
            pass

    local = median_s(local_instance, args.repeats)
    print(f"{'local instance: start and shut down':<52} {local:8.2f} s")

    start = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False))
    for name in ("node-a", "node-b", "node-c"):
        cluster.add_node(num_cpus=1, resources={name: 1})
    cluster.wait_for_nodes()
    up = time.perf_counter() - start
    print(f"{'three-node cluster: head and nodes up':<52} {up:8.2f} s")
    try:
        join = statistics.median(float(_in_a_fresh_process(JOIN, cluster.address)) for _ in range(args.repeats))
        print(f"{'a fresh process joins it (ray.init, --address)':<52} {join:8.2f} s")
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        measure(cfg, args, {"joined by --address": join, "a local instance": local})
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


def measure(cfg: BenchConfig, args, starts: dict[str, float]) -> None:
    kind, options = placements("cpu")
    start = time.perf_counter()
    workers = [Worker.options(**o).remote(cfg) for o in options]
    ray.get([w.where.remote() for w in workers])
    workers_s = time.perf_counter() - start
    for w in workers:
        ray.kill(w)

    load_s = statistics.median(float(_in_a_fresh_process(BUILD, str(cfg.prompts[0]))) for _ in range(args.repeats))
    runner = CellRunner(cfg)
    naive, cached = plan(cfg, validate(cfg))
    runner.run(naive)  # its reference rows, and a warm process
    cells = [timed(lambda: runner.run(cached)) for _ in range(3)]
    cell_s = statistics.median(cells)
    outcome = runner.run(cached)
    print(f"{'the workers start, one a node (model built)':<52} {workers_s:8.2f} s")
    print(f"{'here: a fresh process imports torch, builds the model':<52} {load_s:8.2f} s")
    print(f"{f'a cell here: cached p{cfg.prompts[0]}, {cfg.new_tokens} tokens, {cfg.runs} runs':<52} {cell_s:8.2f} s")

    node = next(n for n, o in zip(ray.nodes(), options, strict=False) if n["Alive"] and n["Resources"].get("CPU"))
    echo = Echo.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(outcome)
    ray.get(echo.run.remote(cached, {}))
    rows = reference_rows(cfg.prompts[0], 8, cfg.new_tokens)
    call = median_s(lambda: ray.get(echo.run.remote(cached, {})), args.calls)
    with_rows = median_s(lambda: ray.get(echo.run.remote(cached, rows)), args.calls)
    big = reference_rows(cfg.prompts[0], 64, 4096)
    size = sum(t.numel() * t.element_size() + f.numel() for t, f in big.values())
    put = median_s(lambda: ray.get(echo.fetch.remote([ray.put(big)])), max(10, args.calls // 10))
    samples = len(outcome.samples)
    print(f"{f'an actor call: a CellSpec in, a cell out ({samples} telemetry rows)':<52} {call * 1e3:8.2f} ms")
    print(f"{'  with 8 reference rows (inline)':<52} {with_rows * 1e3:8.2f} ms  ({(with_rows - call) * 1e3:+.2f} ms)")
    print(f"{f'  {size / 2**20:.1f} MiB of rows through the object store':<52} {put * 1e3:8.2f} ms")

    # The model (docs/cluster.md): a sweep of C cells here, and on G workers.
    print(
        f"\nhere: {load_s:.2f} s + C x {cell_s:.2f} s;  on G workers: start + {workers_s:.2f} s + "
        f"ceil(C/G) x ({cell_s:.2f} s + {with_rows * 1e3:.1f} ms)"
    )
    for how, start_s in starts.items():
        fixed = start_s + workers_s
        wins = {g: next(c for c in range(1, 100_000) if _ray(c, g, cell_s, with_rows, fixed) < load_s + c * cell_s)
                for g in (2, 3, 4, 8)}  # fmt: skip
        print(f"{how} (start {start_s:.2f} s): the cluster is faster from " + ", ".join(
            f"C = {c} at G = {g}" for g, c in wins.items()))  # fmt: skip


def _ray(c: int, g: int, cell_s: float, overhead_s: float, fixed_s: float) -> float:
    return fixed_s + math.ceil(c / g) * (cell_s + overhead_s)


if __name__ == "__main__":
    main()
