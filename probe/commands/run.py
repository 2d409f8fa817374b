"""The main job: the default naive-vs-cached sweep, sized for the machine, written to a report folder,
with the write-ups' method on top: this machine's floor and bandwidth, the predicted step beside the
measured one, and the write-ups' two closing predictions checked against a static and a batched sweep.

On a CPU: the tiny preset with a prompt and token budget that finishes in minutes. On a GPU: the 1.5B
preset in the write-ups' full configuration. Any bench flag overrides the default.

--quick: every experiment at reduced size, in one process on one model: naive, cached and static across the
prompt range (naive at fewer lengths on a GPU), the batched check, the floor with and without a sync, the
measured bandwidth beside the datasheet's, one profiled trace per engine (and an Nsight Systems one where nsys
is installed), telemetry, and the report with every figure the write-ups measured by hand, each with its source.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import time
from pathlib import Path

from probe.capture.config import BenchConfig
from probe.commands.bench import add_sweep_arguments, check_sweep_arguments
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
# --quick: three engines over the prompt range, 32 tokens (31 decode steps a run), 2 timed runs after the parity
# pass, 2 ABBA pairs for the sync cost. On a GPU naive is timed only up to 512 (at 4096 it is a reference run
# only); cached and static span the write-ups' 16..4096. docs/gpu/README.md budgets the GPU run.
QUICK = dict(engines=("naive", "cached", "static"), new_tokens=32, runs=2, warmup=1, sync_pairs=2)
# One intra-op thread on a CPU: on a shared 2-core machine two threads stall at every op's barrier whenever another
# job holds a core (measured here in a --quick run: a static p16 step of 104 ms against 1 ms when profiled alone).
QUICK_CPU = dict(CPU_DEFAULTS, **QUICK, prompts=(16, 128, 1024), threads=1)
QUICK_GPU = dict(GPU_DEFAULTS, **QUICK, prompts=(16, 512, 4096), naive_prompts=(16, 512))
NEXT_BATCHES = (1, 2, 4, 8)  # Part 2's prediction: B sequences per forward
PROFILE_BATCH = 4  # the batched engine's profiled trace
PROFILE_NEW_TOKENS = 9  # the full run's profiled traces: 8 decode steps (--quick profiles at the sweep's own length)
# --quick's Nsight Systems traces. On a GPU only the static engine's: nsys sees each replayed kernel of a graph
# whether or not torch.profiler does, which is the check that matters there, and each nsys trace is a fresh
# process (and for static a fresh compile), the most expensive part of the GPU budget (docs/gpu/README.md).
QUICK_NSYS_GPU = ("static",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, BenchConfig, overrides_only=True)
    p.add_argument("--out", type=Path, help="report folder (default: runs/run-<timestamp>)")
    p.add_argument("--json", action="store_true", help="print the results JSON instead of the tables")
    p.add_argument(
        "--no-next",
        action="store_true",
        help="skip the static and batched sweeps that test the write-ups' closing predictions",
    )
    add_sweep_arguments(p)
    add_record_arguments(p)
    p.add_argument("--quick", action="store_true", help="every experiment at reduced size, the whole report")
    p.add_argument("--no-nsys", action="store_true", help="--quick: skip the Nsight Systems traces")


def defaults_for(device_type: str, quick: bool) -> dict:
    if quick:
        return QUICK_GPU if device_type == "cuda" else QUICK_CPU
    return GPU_DEFAULTS if device_type == "cuda" else CPU_DEFAULTS


def profile_engines(cfg, folder: Path, model, engines: list[str], new_tokens: int, nsys: tuple[str, ...]):
    """One torch.profiler trace per engine at the shortest prompt (the batched one at PROFILE_BATCH), each reduced
    to its median step; for the engines in `nsys` an Nsight Systems trace too. Returns (digests, counts, notes)."""
    from probe.analysis.ledger import analyze, digest
    from probe.analysis.report import step_counts
    from probe.analysis.trace import load_trace
    from probe.capture.config import ProfileConfig
    from probe.capture.profile import profile_nsys, profile_torch
    from probe.errors import ProbeError

    digests, counts, notes = {}, {}, []
    for engine in engines:
        pcfg = ProfileConfig(
            engine=engine,
            prompt=min(cfg.prompts),
            new_tokens=new_tokens,
            model=cfg.model,
            dtype=cfg.dtype,
            device=cfg.device,
            batch=PROFILE_BATCH if engine == "batched" else 1,
            seed=cfg.seed,
        )
        capture = profile_torch(pcfg, folder, model, force=True)  # the run's folder, claimed: its own traces
        analysis = analyze(load_trace(capture.trace))
        digests[engine] = digest(analysis)
        counts[engine] = step_counts(engine, analysis, capture.trace.name)
        if engine not in nsys:
            continue
        try:
            sqlite = profile_nsys(pcfg, folder, force=True).sqlite
            counts[f"{engine} (nsys)"] = step_counts(engine, analyze(load_trace(sqlite)), sqlite.name, "nsys")
        except ProbeError as e:  # nsys is a second opinion: its failure is reported, never fatal
            notes.append(f"nsys trace of {engine} not taken: {e}")
    return digests, counts, notes


def main(args: argparse.Namespace) -> int:
    from engines.models import load_model, resolve_device
    from probe import render
    from probe.analysis.files import atomic_write
    from probe.analysis.report import (
        REPORT_FILE,
        REPORT_MD,
        Report,
        batching_verdict,
        hand_figures,
        host_overhead_verdict,
        predictions,
    )
    from probe.analysis.results import BenchResults
    from probe.analysis.roofline.formulas import arch_for
    from probe.analysis.runfolder import claim
    from probe.capture.config import settle
    from probe.capture.machine import measure_machine
    from probe.capture.profile import find_nsys, prepare_graph_profiling
    from probe.commands.bench import execute
    from probe.errors import ProbeError

    start = time.perf_counter()
    check_sweep_arguments(args)
    device = resolve_device(getattr(args, "device", "auto"))
    base = defaults_for(device.type, args.quick)
    if hasattr(args, "prompts"):  # the user's prompt lengths: naive is timed at all of them unless told otherwise
        base = {k: v for k, v in base.items() if k != "naive_prompts"}
    cfg = settle(from_args(BenchConfig, args, **base), device.type)
    prepare_graph_profiling(device)  # before the first CUDA graph is captured in this process
    out = args.out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    claim(out, resume=args.resume, force=args.force)
    # One model for every part (--quick): a compiled step is guarded on the model it was compiled for.
    local = args.executor == "local"
    model = load_model(cfg.model, cfg.dtype, str(device), cfg.seed) if args.quick and local else None
    output = "json" if args.json else "table"
    sweep = dict(resume=args.resume, executor=args.executor, address=args.address)
    ray = contextlib.nullcontext()
    if not local:  # one Ray session for every sweep of the run, not one each
        from probe.cluster import session

        ray = session(args.address)
    with ray:
        results, code = execute(cfg, out, output, title=f"probe run: {cfg.model} {cfg.dtype}", model=model, **sweep)
        console = render.stdout() if not args.json else render.stderr()
        if not args.json:
            console.print(render.serving_table(results))
        combined = results
        if not args.no_next:
            # The write-ups' closing predictions: a static (captured) step at the shortest prompt, and B sequences
            # per forward there. Recorded in their own folder so the main sweep's cells stay as they were.
            short = min(cfg.prompts)
            nxt = [] if "static" in cfg.engines else [dataclasses.replace(cfg, engines=("static",), prompts=(short,))]
            nxt.append(
                dataclasses.replace(cfg, engines=("batched",), prompts=(short,), batch=NEXT_BATCHES, naive_prompts=())
            )
            runs = [execute(c, out / f"next-{c.engines[0]}", "none", model=model, **sweep) for c in nxt]
            code = max([code, *(c for _, c in runs)])
            extra = [r for r, _ in runs]
            combined = BenchResults(
                results.cells + [c for r in extra for c in r.cells],
                results.env,
                results.config,
                results.complete and all(r.complete for r in extra),
                failed=results.failed + [f for r in extra for f in r.failed],
            )
            if not args.json:
                console.print(
                    render.cells_table(
                        BenchResults(combined.cells[len(results.cells) :], results.env, results.config),
                        "the next steps: " + " and ".join(c.engines[0] for c in nxt),
                    )
                )
    if model is None:
        model = load_model(cfg.model, cfg.dtype, str(device), cfg.seed)
    machine, overhead = measure_machine(cfg.model, cfg.dtype, cfg.device, results.env.device_name, model)
    arch = arch_for(cfg.model)
    engines = list(cfg.engines) + (["batched"] if args.quick and not args.no_next else [])
    nsys, missing = (), []
    if args.quick and not args.no_nsys:
        try:
            find_nsys()
            nsys = QUICK_NSYS_GPU if device.type == "cuda" else tuple(engines)
        except ProbeError as e:
            missing = [f"no Nsight Systems traces: {e}"]
    new_tokens = cfg.new_tokens if args.quick else PROFILE_NEW_TOKENS
    digests, counts, notes = profile_engines(cfg, out / "traces", model, engines, new_tokens, nsys)
    notes = missing + notes
    report = Report(
        machine,
        predictions(results, arch, machine),
        [host_overhead_verdict(combined), batching_verdict(combined, arch, machine)],
        overhead=overhead,
        ledgers=digests,
        steps=counts,
        notes=notes,
    )
    figures = hand_figures(combined, report, min(cfg.prompts))
    atomic_write(out / REPORT_FILE, json.dumps(report.to_json(), indent=1))
    atomic_write(out / REPORT_MD, render.report_markdown(combined, report, figures))
    if not args.json:
        console.print(render.digest_table(report.ledgers))
        console.print(render.figures_table(figures))
        for line in render.floor_lines(report):
            console.print(line)
        console.print(render.predictions_table(report.predictions, machine))
        for line in render.verdict_lines(report.verdicts):
            console.print(line)
        console.print(f"report folder: {out}  ({time.perf_counter() - start:.0f} s)")
    return record(args, "run", code, folder=out)
