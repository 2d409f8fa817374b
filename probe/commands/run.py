"""The main job: the default naive-vs-cached sweep, sized for the machine, written to a report folder.

On a CPU: the tiny preset with a prompt and token budget that finishes in minutes. On a GPU: the 1.5B
preset in the write-ups' full configuration. Any bench flag overrides the default.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from probe.config import BenchConfig, from_args
from probe.config import add_arguments as add_config_arguments

HELP = "the default sweep (naive vs cached), written to a report folder"

# Why these: the CPU budget keeps the whole sweep to a few minutes on 2 cores while still spanning the
# range where naive's recomputation overtakes the host floor; the GPU budget is the write-ups' own.
CPU_DEFAULTS = dict(model="tiny", dtype="float32", prompts=(16, 64, 256, 1024), new_tokens=128, runs=5, warmup=2)
GPU_DEFAULTS = dict(model="qwen2.5-1.5b", dtype="float16", prompts=(16, 64, 256, 1024, 4096), new_tokens=256,
                    runs=5, warmup=2)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, BenchConfig, overrides_only=True)
    p.add_argument("--out", type=Path, help="report folder (default: runs/run-<timestamp>)")
    p.add_argument("--json", action="store_true", help="print the results JSON instead of the table")


def defaults_for(device: str) -> dict:
    from engines.models import resolve_device

    return GPU_DEFAULTS if resolve_device(device).type == "cuda" else CPU_DEFAULTS


def main(args: argparse.Namespace) -> int:
    from probe.commands.bench import execute

    base = defaults_for(getattr(args, "device", "auto"))
    cfg = from_args(BenchConfig, args, **base)
    out = args.out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    start = time.perf_counter()
    results, code = execute(cfg, out, args.json, title=f"probe run: {cfg.model} {cfg.dtype}")
    if not args.json:
        print(f"report folder: {out}  ({time.perf_counter() - start:.0f} s)")
    return code
