"""The main job: the default naive-vs-cached sweep, sized for the machine, written to a report folder,
with the write-ups' method on top: this machine's floor and bandwidth, the predicted step beside the
measured one, and the write-ups' two closing predictions checked against a static and a batched sweep.

On a CPU: the tiny preset with a prompt and token budget that finishes in minutes. On a GPU: the 1.5B
preset in the write-ups' full configuration. Any bench flag overrides the default.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from probe.capture.config import BenchConfig
from probe.commands.history import add_record_arguments, record
from probe.flags import add_arguments as add_config_arguments
from probe.flags import from_args

HELP = "the default sweep (naive vs cached) with predictions, written to a report folder"

# Why these: the CPU budget keeps the whole job to a few minutes on 2 cores while still spanning the
# range where naive's recomputation overtakes the host floor; the GPU budget is the write-ups' own.
CPU_DEFAULTS = dict(model="tiny", dtype="float32", prompts=(16, 64, 256, 1024), new_tokens=128, runs=5, warmup=2)
GPU_DEFAULTS = dict(
    model="qwen2.5-1.5b", dtype="float16", prompts=(16, 64, 256, 1024, 4096), new_tokens=256, runs=5, warmup=2
)
NEXT_BATCHES = (1, 2, 4, 8)  # Part 2's prediction: B sequences per forward


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, BenchConfig, overrides_only=True)
    p.add_argument("--out", type=Path, help="report folder (default: runs/run-<timestamp>)")
    p.add_argument("--json", action="store_true", help="print the results JSON instead of the tables")
    p.add_argument(
        "--no-next",
        action="store_true",
        help="skip the static and batched sweeps that test the write-ups' closing predictions",
    )
    add_record_arguments(p)


def defaults_for(device: str) -> dict:
    from engines.models import resolve_device

    return GPU_DEFAULTS if resolve_device(device).type == "cuda" else CPU_DEFAULTS


def profile_engines(cfg, folder: Path) -> dict:
    """One short torch.profiler trace per engine at the shortest prompt, each reduced to its median step."""
    from engines.models import load_model
    from probe.analysis.ledger import analyze, digest
    from probe.analysis.trace import load_trace
    from probe.capture.config import ProfileConfig
    from probe.capture.profile import profile_torch

    model = load_model(cfg.model, cfg.dtype, cfg.device, cfg.seed)
    digests = {}
    for engine in cfg.engines:
        pcfg = ProfileConfig(
            engine=engine,
            prompt=min(cfg.prompts),
            new_tokens=9,
            model=cfg.model,
            dtype=cfg.dtype,
            device=cfg.device,
            seed=cfg.seed,
        )
        capture = profile_torch(pcfg, folder, model)
        digests[engine] = digest(analyze(load_trace(capture.trace)))
    return digests


def main(args: argparse.Namespace) -> int:
    from probe import render
    from probe.analysis.files import atomic_write
    from probe.analysis.report import REPORT_FILE, Report, batching_verdict, host_overhead_verdict, predictions
    from probe.analysis.results import BenchResults
    from probe.analysis.roofline.formulas import arch_for
    from probe.capture.machine import measure_machine
    from probe.commands.bench import execute

    start = time.perf_counter()
    cfg = from_args(BenchConfig, args, **defaults_for(getattr(args, "device", "auto")))
    out = args.out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    results, code = execute(cfg, out, "json" if args.json else "table", title=f"probe run: {cfg.model} {cfg.dtype}")
    console = render.stdout() if not args.json else render.stderr()
    combined = results
    if not args.no_next:
        # The write-ups' closing predictions: a static (captured) step at the shortest prompt, and B sequences
        # per forward there. Recorded in their own folder so the main sweep's cells stay as they were.
        short = min(cfg.prompts)
        nxt = [
            dataclasses.replace(cfg, engines=("static",), prompts=(short,)),
            dataclasses.replace(cfg, engines=("batched",), prompts=(short,), batch=NEXT_BATCHES),
        ]
        extra = [execute(c, out / f"next-{c.engines[0]}", "none")[0] for c in nxt]
        combined = BenchResults(
            results.cells + [c for r in extra for c in r.cells],
            results.env,
            results.config,
            results.complete and all(r.complete for r in extra),
        )
        if not args.json:
            console.print(
                render.cells_table(
                    BenchResults(combined.cells[len(results.cells) :], results.env, results.config),
                    "the next steps: static and batched",
                )
            )
    machine, overhead = measure_machine(cfg.model, cfg.dtype, cfg.device, results.env["device_name"])
    arch = arch_for(cfg.model)
    report = Report(
        machine,
        predictions(results, arch, machine),
        [host_overhead_verdict(combined), batching_verdict(combined, arch, machine)],
        overhead=overhead,
        ledgers=profile_engines(cfg, out / "traces"),
    )
    atomic_write(out / REPORT_FILE, json.dumps(report.to_json(), indent=1))
    atomic_write(out / "report.md", render.report_markdown(combined, report))
    if not args.json:
        console.print(render.digest_table(report.ledgers))
        console.print(render.predictions_table(report.predictions, machine))
        for line in render.verdict_lines(report.verdicts):
            console.print(line)
        console.print(f"report folder: {out}  ({time.perf_counter() - start:.0f} s)")
    return record(args, "run", code, folder=out)
