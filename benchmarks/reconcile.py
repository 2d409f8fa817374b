"""Reconcile a profiled step with the unprofiled one: how close is `probe analyze`'s unprofiled estimate?

    python -m benchmarks.reconcile [--engines cached,naive] [--prompt 64] [--new-tokens 33] [--rounds 3]

In one process (this machine's speed drifts between processes), for each engine and round: the bench's median
ITL (no profiler, no annotations: what `probe bench` reports), then `probe profile`'s trace of the same
configuration, its event costs (probe.capture.calibrate) and the ledger's median decode step, profiled and
estimated unprofiled (wall - ops x op cost - ranges x range cost). Prints each round and the medians: how much
of the profiler's overhead the per-event model accounts for, and the estimate against the bench's ITL.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.types import AnalyzeOptions, steady
from probe.analysis.records.sidecar import read_sidecar
from probe.analysis.trace import load_trace
from probe.capture.profile import profile_torch
from probe.capture.sweep import bench
from probe.settings import BenchConfig, ProfileConfig


def one_round(engine: str, prompt: int, new_tokens: int, out: Path) -> dict:
    cells = bench(
        BenchConfig(
            engines=(engine,), prompts=(prompt,), new_tokens=new_tokens, runs=3, warmup=1, device="cpu", telemetry_ms=0
        )
    )
    itl = next(c for c in cells.cells if c.engine == engine).itl_p50_ms
    cfg = ProfileConfig(engine=engine, prompt=prompt, new_tokens=new_tokens, device="cpu")
    capture = profile_torch(cfg, out, force=True)  # every round into the same folder
    cost = read_sidecar(capture.trace).event_cost
    steps = steady(analyze(load_trace(capture.trace), AnalyzeOptions(event_cost=cost)).steps)
    return {
        "itl": itl,
        "profiled": statistics.median(s.wall_ns for s in steps) / 1e6,
        "estimate": statistics.median(s.unprofiled_estimate_ns for s in steps) / 1e6,
        "cost": cost,
        "events": statistics.median(s.host_events for s in steps),
        "ranges": statistics.median(s.host_ranges for s in steps),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engines", default="cached,naive")
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=33)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; tiny preset, float32, cpu, prompt "
        f"{args.prompt}, {args.new_tokens} new tokens"
    )
    header = (
        f"{'engine':<8} {'round':>5} {'bench ITL':>10} {'profiled':>9} {'estimate':>9} {'est/ITL':>8} "
        f"{'gap explained':>14} {'ops':>6} {'ranges':>6} {'op ns':>6} {'range ns':>8}"
    )
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines.split(","):
            rows = [one_round(engine, args.prompt, args.new_tokens, Path(tmp)) for _ in range(args.rounds)]
            for i, r in enumerate(rows):
                gap = r["profiled"] - r["itl"]
                explained = (r["profiled"] - r["estimate"]) / gap if gap > 0 else float("nan")
                print(
                    f"{engine:<8} {i:>5} {r['itl']:>10.3f} {r['profiled']:>9.3f} {r['estimate']:>9.3f} "
                    f"{r['estimate'] / r['itl']:>8.2f} {explained:>13.0%} {r['events']:>6.0f} "
                    f"{r['ranges']:>6.0f} {r['cost'].op_ns:>6.0f} {r['cost'].range_ns:>8.0f}"
                )
            med = {k: statistics.median(r[k] for r in rows) for k in ("itl", "profiled", "estimate")}
            print(
                f"{engine:<8} {'med':>5} {med['itl']:>10.3f} {med['profiled']:>9.3f} {med['estimate']:>9.3f} "
                f"{med['estimate'] / med['itl']:>8.2f}"
            )


if __name__ == "__main__":
    main()
