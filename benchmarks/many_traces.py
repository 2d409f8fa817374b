"""Many traces at once: `probe analyze` of a folder of rank traces in one process, in the local process pool, and
as Ray tasks on a local instance.

    python -m benchmarks.many_traces                      # 8 traces of ~100k events, 3 repeats
    python -m benchmarks.many_traces --traces 4 --events 50000 --repeats 5

The traces are synthetic torch-2.13-style CUDA decode traces (benchmarks/synthetic_traces.py), one per rank
(distributedInfo.rank set), written to a temp folder and deleted after. Each figure is the wall time of
`analyze_one` over every trace, lined up by `ranks`, in this process:

- one process: one trace after another, here;
- pool: probe.pool.pool_map, a process per core (what `probe analyze PATH...` does by default);
- Ray: probe.cluster.fan_out on a local instance (what `--executor ray` does without --address): the instance's
  start, the first fan-out (its workers start and import probe) and the fan-outs after it (workers warm).

And the whole command, `probe analyze FOLDER --json` from interpreter start to exit, both ways. Best and median of
the repeats are printed, with the load average: this 2-core machine is shared and drifts by a third. No figure
here is asserted anywhere; this script only reports.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.synthetic_traces import make_trace
from probe.analysis.ledger.ranks import analyze_one, ranks
from probe.cluster import fan_out, ray, session  # Ray imported after probe: in its local-only mode
from probe.pool import pool_map


def make_ranks(folder: Path, traces: int, events: int, steps: int) -> list[Path]:
    paths = []
    for rank in range(traces):
        text = make_trace(steps, events, seed=rank).replace(
            b'"distributedInfo": {"rank": 0}', b'"distributedInfo": {"rank": %d}' % rank
        )
        path = folder / f"rank{rank}.trace.json"
        path.write_bytes(text)
        paths.append(path)
    return paths


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def line(name: str, seconds: list[float], base: float | None = None) -> str:
    best, mid = min(seconds), statistics.median(seconds)
    speed = f"  {base / best:.2f}x one process (best), {base / mid:.2f}x (median)" if base else ""
    return f"{name:<44} best {best:6.2f} s  median {mid:6.2f} s{speed}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=int, default=8)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="probe-many-") as tmp:
        folder = Path(tmp)
        paths = make_ranks(folder, args.traces, args.events, args.steps)
        items = [(str(p), None) for p in paths]
        size = sum(p.stat().st_size for p in paths) / 2**20
        first = analyze_one(items[0])
        print(
            f"{len(paths)} traces, {first.totals.events} events and {len(first.steps)} steps each, {size:.0f} MiB "
            f"in all; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start"
        )
        serial = [timed(lambda: ranks([analyze_one(i) for i in items])) for _ in range(args.repeats)]
        pooled = [timed(lambda: ranks(pool_map(analyze_one, items))) for _ in range(args.repeats)]
        base = min(serial)
        print(line("one process", serial))
        print(line(f"local process pool ({min(len(items), os.cpu_count() or 1)} processes)", pooled, base))

        start = time.perf_counter()
        with session(None):
            started = time.perf_counter() - start
            cold = timed(lambda: ranks(fan_out(analyze_one, items)))
            warm = [timed(lambda: ranks(fan_out(analyze_one, items))) for _ in range(args.repeats)]
            print(f"{'Ray local instance: start (ray.init)':<44} {started:6.2f} s")
            print(f"{'Ray: first fan-out (workers start)':<44} {cold:6.2f} s")
            print(line("Ray: fan-out, workers warm", warm, base))
            print(
                f"Ray's overhead over the pool, workers warm: {min(warm) - min(pooled):+.2f} s (best), "
                f"{statistics.median(warm) - statistics.median(pooled):+.2f} s (median); with its start and cold "
                f"workers, as one `probe analyze --executor ray` pays: {started + cold - min(pooled):+.2f} s"
            )
        assert not ray.is_initialized()

        cli = [sys.executable, "-m", "probe", "analyze", str(folder), "--json"]
        whole = {
            name: [timed(lambda c=cmd: subprocess.run(c, capture_output=True, check=True)) for _ in range(args.repeats)]
            for name, cmd in (
                ("`probe analyze FOLDER --json` (pool)", cli),
                ("... --executor ray", [*cli, "--executor", "ray"]),
            )
        }
        for name, seconds in whole.items():
            print(line(name, seconds))
        print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
