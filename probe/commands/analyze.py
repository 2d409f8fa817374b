"""Where every step's time went, from any trace: a torch.profiler chrome trace (.json, .json.gz) or an Nsight
Systems SQLite export (.sqlite, .sqlite.gz), from probe, vLLM, SGLang, HF generate or your own loop.

Steps: --steps REGEX when given (any range, op or Python frame; --steps-kind narrows it), else probe's prefill /
decode#i ranges, else ProfilerStep#N, else the per-iteration markers of vLLM, SGLang and TensorRT-LLM and the
engines' own step frames (vLLM's worker execute_model, SGLang's run_batch, HF generate's loop), else the outermost
host unit that repeats and holds the launches, else one step per graph launch, else the whole trace; the header says
which rule found them, and a warning what share of the GPU work the steps leave out. One row a step: wall time;
kernel launches, graph launches and kernels (joined on correlation); the step's GPU window, GPU busy in it and idle
split HTA's way into host wait, kernel wait and other; launch statistics. Then the host side of each step split into
your --part's, sync, sample, cache bookkeeping, mask, attention, other ops, Python (the innermost frame's self time,
on traces recorded with_stack) and unattributed time, which add up to the wall time; the kernels by name and
category; the top Python frames; a summary. On a CPU-only trace the dispatched op count (top-level ops) stands in
for launches.
The definitions are in probe/analysis/ledger/build.py.

First, before any table: the answer (probe/analysis/diagnosis/verdict.py, docs/diagnosis.md): what bounds the median
steady step (host, GPU, external, CPU only), the figures it rests on with their arithmetic, and what fixing it
would buy; with --model (and --device when the trace does not name its own), the roofline beside each step; with
recorded shapes, the roofline of every op. --json carries all of it, step by step: each step's verdict and
figures, the words once (the median steps', and the step --step names: docs/diagnosis.md).

Several traces (files, folders of traces, globs) are analyzed in parallel, a local process each or, with
--executor ray, as Ray tasks over a cluster (each reads its trace by path: shared storage). First one line a trace:
its median steady step's verdict, the figure it rests on and the first fix; each trace's ledger with --detail; and,
when they are the ranks of one job (the same steps, a rank each: probe/analysis/ledger/ranks.py), the job
across them step by step: every rank's wall, GPU busy and launches, the slowest rank and how far it trails the
median, and the rank slowest most often. A trace that cannot be read, or whose process or Ray task died, is named
with its error, the others are analyzed, and the command exits 1.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from probe.commands import Rows, print_json
from probe.errors import ProbeError, first_line
from probe.flags import check_address, count_flag
from probe.pool import pool_map

if TYPE_CHECKING:
    from probe.analysis.diagnosis.answer import Answer
    from probe.analysis.diagnosis.verdict import Diagnosis
    from probe.analysis.ledger.ranks import TraceFailure
    from probe.analysis.ledger.types import AnalyzeOptions, StepLedger, TraceAnalysis
    from probe.analysis.records.sidecar import EventCost
    from probe.analysis.trace import Trace


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`probe analyze`'s flags, in the order --help lists them."""
    _add_trace_arguments(p)
    _add_job_arguments(p)
    _add_step_arguments(p)
    _add_ledger_arguments(p)
    _add_roofline_arguments(p)
    _add_event_cost_argument(p)


def _add_trace_arguments(p: argparse.ArgumentParser) -> None:
    """The traces to read, and JSON instead of tables."""
    p.add_argument(
        "trace",
        nargs="+",
        help="a .json / .json.gz chrome trace or an nsys .sqlite export; several (files, folders, globs): a job",
    )
    p.add_argument("--json", action="store_true", help="print the analysis as JSON instead of tables")


def _add_job_arguments(p: argparse.ArgumentParser) -> None:
    """Several traces: each one's ledger or not, and where they are analyzed (local processes or a Ray cluster)."""
    p.add_argument(
        "--detail",
        action="store_true",
        help="several traces: each one's ledger (steps, host time) after the line a trace that answers first",
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="several traces: local, a process per core; ray, a task per trace on a Ray cluster (shared storage)",
    )
    p.add_argument("--address", help="--executor ray: the cluster to join (default: start a local Ray instance)")


def _add_step_arguments(p: argparse.ArgumentParser) -> None:
    """Which ranges are the steps, and the one step shown in detail."""
    p.add_argument(
        "--step",
        metavar="N",
        help="show one step in detail, with its timeline: its position in the table (0, 1, ...) or its name (decode#3)",
    )
    p.add_argument(
        "--steps",
        metavar="REGEX",
        help="ranges whose name the pattern matches are the steps (user annotations, NVTX ranges, ProfilerStep, "
        "cpu_ops, Python frames: --steps execute_model finds vLLM's worker frames; ^...$ for whole names); "
        "overrides the built-in rules",
    )
    p.add_argument(
        "--steps-kind",
        metavar="KINDS",
        help="the kinds --steps searches, comma-separated: range (annotations, NVTX, ProfilerStep), cpu_op, python "
        "(default: all)",
    )


def _add_ledger_arguments(p: argparse.ArgumentParser) -> None:
    """How the ledger splits a step's time: host parts of the user's own, kernel categories, the kernel-wait gap."""
    p.add_argument(
        "--part",
        metavar="NAME=REGEX",
        action="append",
        default=[],
        help="make ranges, ops and Python frames matching REGEX a host part of their own (repeatable; "
        "first given wins)",
    )
    p.add_argument(
        "--kernel-category",
        metavar="CATEGORY=REGEX",
        action="append",
        default=[],
        help="kernels whose name matches REGEX go to CATEGORY, before the built-in rules (repeatable)",
    )
    p.add_argument(
        "--kernel-wait-us",
        type=float,
        metavar="US",
        help="a GPU gap under this, not the host's lateness, is kernel wait (default: 30: HTA's rule as it applies it)",
    )


def _add_roofline_arguments(p: argparse.ArgumentParser) -> None:
    """The roofline beside each step: the model, the device, the dtype and the tokens a step, when the trace does
    not say."""
    roof = p.add_argument_group("the roofline beside each step")
    roof.add_argument("--model", metavar="SPEC", help="a preset, a config.json or a model folder")
    roof.add_argument(
        "--device", metavar="NAME", help="the GPU, when the trace's deviceProperties do not name it (H100-SXM, MI300X)"
    )
    roof.add_argument(
        "--device-file",
        metavar="FILE",
        help="the GPU from a JSON object with the device table's fields (name, memory_bandwidth_bytes_s, "
        "memory_bytes, peak_flops_s by dtype, source): a card the table lacks, or measured peaks; it wins over "
        "the trace's own",
    )
    roof.add_argument("--dtype", help="the weights' dtype (default: the recorded GEMMs' input type, else bfloat16)")
    roof.add_argument(
        "--tokens",
        type=count_flag(1),
        help="new tokens a step, every sequence's together (16 sequences of 559: 8944), when the trace's markers and "
        "shapes do not say",
    )
    roof.add_argument("--batch", type=count_flag(1), help="sequences a step, when the trace does not say")
    roof.add_argument("--context", type=count_flag(0), help="positions cached before a step, per sequence")


def _add_event_cost_argument(p: argparse.ArgumentParser) -> None:
    """The profiler's cost per event, for the unprofiled-step estimate."""
    p.add_argument(
        "--event-cost-ns",
        metavar="OP,RANGE",
        help="the profiler's cost per recorded op and per range, ns, for the unprofiled-step estimate (default: "
        "the trace's .meta.json, which probe profile writes)",
    )


def options_from(args: argparse.Namespace, trace_path: Path) -> AnalyzeOptions:
    """AnalyzeOptions from the flags; the event cost from the trace's sidecar when the flag does not give it."""
    from probe.analysis.ledger.types import AnalyzeOptions
    from probe.analysis.records.sidecar import read_sidecar

    cost: EventCost | None
    if args.event_cost_ns is not None:
        cost = parse_event_cost(args.event_cost_ns)
    else:
        meta = read_sidecar(trace_path)
        cost = meta.event_cost if meta else None
    return AnalyzeOptions.parse(args.steps, args.part, args.kernel_category, cost, args.kernel_wait_us, args.steps_kind)


def parse_event_cost(text: str) -> EventCost:
    from probe.analysis.records.sidecar import MAX_EVENT_COST_NS, EventCost

    try:
        op, _, rng = text.partition(",")
        return EventCost(float(op), float(rng or op))
    except ValueError:
        raise ProbeError(
            f"--event-cost-ns {text!r}: use OP,RANGE in ns, each from 0 to {MAX_EVENT_COST_NS:,.0f} (e.g. 180,5000)"
        ) from None


def main(args: argparse.Namespace) -> int:
    from probe.analysis.ledger.ranks import expand

    check_address(args.address, args.executor)
    paths = expand(args.trace)
    if len(paths) > 1:
        if args.step is not None:
            raise ProbeError("--step shows one step of one trace: name a single trace")
        return main_job(args, paths)
    return main_one(args, paths[0])


def main_one(args: argparse.Namespace, path: Path) -> int:
    from probe.analysis.diagnosis.answer import answer
    from probe.analysis.ledger.build import analyze
    from probe.analysis.records.sidecar import read_sidecar
    from probe.analysis.roofline.device_file import device_file
    from probe.analysis.roofline.formulas import dtype_bytes
    from probe.analysis.roofline.step import TokenFlags
    from probe.analysis.trace import load_trace

    options = options_from(args, path)  # bad flags fail before the trace is read
    if args.dtype is not None:
        dtype_bytes(args.dtype)  # an unknown dtype: one line, before the trace is read
    given = device_file(args.device_file) if args.device_file else None
    trace = load_trace(path)
    result = analyze(trace, options)
    step = _pick(result, args.step) if args.step is not None else None
    flags = TokenFlags(args.tokens, args.batch, args.context)
    meta = read_sidecar(path)
    found = answer(
        trace,
        result,
        args.model,
        args.device,
        args.dtype,
        flags,
        contended=meta.contended_caveat if meta else None,
        threads=meta.threads if meta else None,
        device_given=given,
    )
    if args.json:
        _print_json(trace, result, step, found)
        return 0
    for w in result.warnings:  # before the tables, where a person reads first
        print(f"probe: warning: {w}", file=sys.stderr)
    _print_tables(trace, result, step, found)
    return 0


def _print_json(trace: Trace, result: TraceAnalysis, step: StepLedger | None, found: Answer) -> None:
    """--json: the ledger and the answer, every step's figures (a step named: its diagnosis in words too, and its
    timeline)."""
    from probe.analysis.ledger.timeline import step_events

    steps = result.steps if step is None else (step,)

    def record(i: int) -> dict:
        return steps[i].to_json() | found.step_json(steps[i].position, words=step is not None)

    out = result.to_json(steps=False) | found.to_json()
    out["steps"] = Rows(len(steps), record)  # made and written a chunk at a time
    if step is not None:
        out["timeline"] = [vars(it) for it in step_events(trace, step)]
    print_json(out)


def _print_tables(trace: Trace, result: TraceAnalysis, step: StepLedger | None, found: Answer) -> None:
    """The answer first, then the trace's tables (its steps, idle, host, kernels, op rooflines) or, with --step, the
    step's own (its ledger, kernels, timeline); the Python frames and the summary last."""
    from probe.analysis.ledger.timeline import step_events
    from probe.render.answer import answer_lines, op_roofline_table
    from probe.render.console import stdout
    from probe.render.ledger import (
        categories_table,
        frames_table,
        host_tables,
        idle_table,
        kernels_table,
        step_table,
        steps_table,
        summary_table,
        timeline_table,
    )

    console = stdout()
    for line in answer_lines(found):
        console.print(line)
    if step is None:
        console.print(steps_table(result))
        if result.on_gpu:
            console.print(idle_table(result))
        console.print(*host_tables(result))
        if result.on_gpu:
            console.print(kernels_table(result.kernels[:15], f"top GPU ops of {result.source} by total time"))
            console.print(categories_table(result.kernel_categories, result.totals.gpu_busy_ns))
            if (ops := op_roofline_table(found)) is not None:
                console.print(ops)
    else:
        console.print(step_table(step, result))
        if step.top_kernels:
            console.print(kernels_table(step.top_kernels, f"{step.name}: top GPU ops by total time"))
        console.print(timeline_table(step_events(trace, step), step))
    frames = step.top_frames if step is not None else result.python_frames[:15]
    if frames:
        console.print(frames_table(frames, "Python frames by self time (the python part)"))
    console.print(summary_table(result))


@dataclass(frozen=True)
class Answered:
    """One trace of several: its ledger, and its median steady step's verdict (what its line says)."""

    analysis: TraceAnalysis
    median: Diagnosis | None


def analyze_and_answer(item: tuple[str | Path, AnalyzeOptions | None]) -> Answered | TraceFailure:
    """What a pool worker or a Ray task runs for each of several traces: its ledger and its verdict, or why it
    could not be read (one line)."""
    from probe.analysis.diagnosis.answer import answer
    from probe.analysis.ledger.build import analyze
    from probe.analysis.ledger.ranks import lost_trace
    from probe.analysis.records.sidecar import read_sidecar
    from probe.analysis.trace import load_trace

    path, options = item
    try:
        trace = load_trace(path)
        analysis = analyze(trace, options)
        meta = read_sidecar(Path(path))
    except (ProbeError, OSError) as e:
        return lost_trace(item, first_line(e))
    found = answer(  # the one answer `probe analyze TRACE` prints, so a trace's line says what its page says
        trace, analysis, contended=meta.contended_caveat if meta else None, threads=meta.threads if meta else None
    )
    return Answered(analysis, found.diagnosis.median)


def answer_line(source: str, d: Diagnosis | None) -> str:
    """A trace's answer in one line: the verdict and the figure it rests on (the headline), then the first fix."""
    from rich.markup import escape

    if d is None:
        return f"[bold]{escape(source)}[/]: no step to judge"
    fix = (
        f" First fix: {escape(d.what_if[0].change)}, saves {d.what_if[0].saving_ms:.3f} ms "
        f"({d.what_if[0].saving_pct:.0f}%)."
        if d.what_if
        else " No fix proposed."
    )
    return f"[bold]{escape(source)}[/]: {escape(d.headline)}{fix}"


def main_job(args: argparse.Namespace, paths: list[Path]) -> int:
    """Several traces: each analyzed in parallel, a line a trace first, then lined up as the ranks of one job."""
    from probe.analysis.ledger.ranks import TraceFailure, lost_trace, ranks
    from probe.analysis.ledger.types import AnalyzeOptions

    # bad flags fail the command, first
    AnalyzeOptions.parse(args.steps, args.part, args.kernel_category, steps_kind=args.steps_kind)
    if args.event_cost_ns is not None:
        parse_event_cost(args.event_cost_ns)
    items, early = [], {}
    for path in paths:
        try:
            where = str(path.absolute()) if args.executor == "ray" else str(path)  # a Ray worker has its own cwd
            items.append((where, options_from(args, path)))
        except ProbeError as e:  # an unreadable sidecar fails its trace, not the job
            early[str(path)] = TraceFailure(str(path), str(e))
    if args.executor == "ray":
        from probe.cluster import fan_out, session  # Ray: an optional dependency, imported where it is used

        with session(args.address):
            done = fan_out(analyze_and_answer, items, lost=lost_trace)
    else:
        done = pool_map(analyze_and_answer, items, lost=lost_trace)
    answers = {d.analysis.source: d.median for d in done if isinstance(d, Answered)}
    result = ranks([d.analysis if isinstance(d, Answered) else d for d in done] + list(early.values()))
    if not result.traces:
        raise ProbeError(
            f"none of the {len(paths)} traces could be read: {result.failed[0].source}: {result.failed[0].error}"
        )
    if args.json:
        doc = result.to_json()
        for t in doc["traces"]:
            t["diagnosis"] = d.to_json() if (d := answers.get(t["source"])) is not None else None
        print_json(doc)
    else:
        print_job(result, answers, args.detail)
    for f in result.failed:
        print(f"probe: error: {f.source}: {f.error}", file=sys.stderr)
    return 1 if result.failed else 0


def print_job(result, answers: dict[str, Diagnosis | None], detail: bool) -> None:
    """A line a trace (its answer), then with `detail` each ledger, then the job across them."""
    from rich.markup import escape

    from probe.render.console import stdout
    from probe.render.ledger import host_tables, job_tables, steps_table

    console = stdout()
    for trace in result.traces:
        console.print(answer_line(trace.source, answers.get(trace.source)))
    if detail:
        names = [f"rank {r}" for r in result.ranks] if result.one_job else ["trace"] * len(result.traces)
        for trace, name in zip(result.traces, names, strict=True):
            console.print(f"[bold]{name}[/]: {escape(trace.source)}")
            console.print(steps_table(trace))
            console.print(*host_tables(trace))
    else:
        console.print("each trace's ledger (its steps and host time): --detail; one trace in full: probe analyze TRACE")
    if result.not_a_job is not None:  # not one job
        console.print(f"not the ranks of one job ({escape(result.not_a_job)}): each trace is shown on its own")
    for table in job_tables(result):
        console.print(table)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")


def _pick(result: TraceAnalysis, key: str) -> StepLedger:
    try:
        return result.step(int(key) if key.isascii() and key.isdigit() else key)
    except KeyError:
        names = ", ".join(s.name for s in result.steps[:6]) + (", ..." if len(result.steps) > 6 else "")
        raise ProbeError(
            f"no step {key!r} in this trace: use a position 0..{len(result.steps) - 1} or a name ({names})"
        ) from None
