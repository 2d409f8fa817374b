"""Where every step's time went, from any trace: a torch.profiler chrome trace (.json, .json.gz) or an Nsight
Systems SQLite export (.sqlite, .sqlite.gz), from probe, vLLM, SGLang, HF generate or your own loop.

Steps: --steps REGEX when given, else probe's prefill / decode#i ranges, else ProfilerStep#N, else the
per-iteration markers of vLLM, SGLang and TensorRT-LLM, else one step per graph launch, else the whole trace;
the header says which rule found them. One row a step: wall time; kernel launches, graph launches and kernels
(joined on correlation); the step's GPU window, GPU busy in it and idle split HTA's way into host wait, kernel
wait and other; launch statistics. Then the host side of each step split into your --part's, sync, sample,
cache bookkeeping, mask, attention, other ops, Python (the innermost frame's self time, on traces recorded
with_stack) and unattributed time, which add up to the wall time; the kernels by name and category; the top
Python frames; a summary. On a CPU-only trace the dispatched op count (top-level ops) stands in for launches.
The definitions are in probe/analysis/ledger.py.

Several traces (files, folders of traces, globs) are analyzed in parallel, in a pool of local processes or, with
--executor ray, as Ray tasks over a cluster (each reads its trace by path: shared storage). Then each trace's
ledger, and the job across them step by step (probe/analysis/job.py): every rank's wall, GPU busy and launches,
the slowest rank and how far it trails the median, and the rank slowest most often. A trace that cannot be read
is named with its error, the others are analyzed, and the command exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from probe.commands import print_json

HELP = "per-step ledger of any trace: steps, launches, kernels, GPU window busy/idle, host time by part"
KERNEL_NAME_WIDTH = 70  # the table cuts kernel names here; --json keeps them whole


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "trace",
        nargs="+",
        help="a .json / .json.gz chrome trace or an nsys .sqlite export; several (files, folders, globs): a job",
    )
    p.add_argument("--json", action="store_true", help="print the analysis as JSON instead of tables")
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="several traces: local, a process per core; ray, a task per trace on a Ray cluster (shared storage)",
    )
    p.add_argument("--address", help="--executor ray: the cluster to join (default: start a local Ray instance)")
    p.add_argument(
        "--step",
        metavar="N",
        help="show one step in detail, with its timeline: its position in the table (0, 1, ...) or its name (decode#3)",
    )
    p.add_argument(
        "--steps",
        metavar="REGEX",
        help="ranges whose whole name matches are the steps (torch "
        "user annotations, NVTX ranges); overrides the built-in rules",
    )
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
        "--event-cost-ns",
        metavar="OP,RANGE",
        help="the profiler's cost per recorded op and per range, ns, for the unprofiled-step estimate (default: "
        "the trace's .meta.json, which probe profile writes)",
    )


def options_from(args: argparse.Namespace, trace_path: Path):
    """AnalyzeOptions from the flags; the event cost from the trace's sidecar when the flag does not give it."""
    from probe.analysis.ledger import AnalyzeOptions
    from probe.analysis.sidecar import trace_meta

    if args.event_cost_ns is not None:
        cost = parse_event_cost(args.event_cost_ns)
    else:
        meta = trace_meta(trace_path)
        cost = meta.event_cost if meta else None
    return AnalyzeOptions.parse(args.steps, args.part, args.kernel_category, cost)


def parse_event_cost(text: str):
    from probe.analysis.ledger import EventCost
    from probe.errors import ProbeError

    try:
        op, _, rng = text.partition(",")
        return EventCost(float(op), float(rng or op))
    except ValueError:
        raise ProbeError(f"--event-cost-ns {text!r}: use OP,RANGE in ns (e.g. 180,5000)") from None


def main(args: argparse.Namespace) -> int:
    from probe.analysis.job import expand
    from probe.errors import ProbeError

    if args.address and args.executor != "ray":
        raise ProbeError("--address names a Ray cluster: use it with --executor ray")
    paths = expand(args.trace)
    if len(paths) > 1:
        if args.step is not None:
            raise ProbeError("--step shows one step of one trace: name a single trace")
        return main_job(args, paths)
    return main_one(args, paths[0])


def main_one(args: argparse.Namespace, path: Path) -> int:
    from probe.analysis.ledger import analyze, step_timeline
    from probe.analysis.trace import load_trace

    options = options_from(args, path)  # bad flags fail before the trace is read
    trace = load_trace(path)
    result = analyze(trace, options)
    step = _pick(result, args.step) if args.step is not None else None
    if args.json:
        out = result.to_json()
        if step is not None:
            out["steps"] = [step.to_json()]
            out["timeline"] = [vars(it) for it in step_timeline(trace, step)]
        print_json(out)
        return 0
    from probe import render

    console = render.stdout()
    if step is None:
        console.print(steps_table(result))
        if result.on_gpu:
            console.print(idle_table(result))
        console.print(host_table(result))
        if result.on_gpu:
            console.print(kernels_table(result.kernels[:15], f"top GPU ops of {result.source} by total time"))
            console.print(categories_table(result.kernel_categories, result.totals.gpu_busy_ns))
    else:
        console.print(step_table(step, result))
        if step.top_kernels:
            console.print(kernels_table(step.top_kernels, f"{step.name}: top GPU ops by total time"))
        console.print(timeline_table(step_timeline(trace, step), step))
    frames = step.top_frames if step is not None else result.python_frames[:15]
    if frames:
        console.print(frames_table(frames, "Python frames by self time (the python part)"))
    console.print(summary_table(result))
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    return 0


def main_job(args: argparse.Namespace, paths: list[Path]) -> int:
    """Several traces: each analyzed in parallel, then lined up as the ranks of one job."""
    from probe.analysis.job import TraceFailure, analyze_one, job, pool_map
    from probe.analysis.ledger import AnalyzeOptions
    from probe.errors import ProbeError

    AnalyzeOptions.parse(args.steps, args.part, args.kernel_category)  # bad flags fail the command, first
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
        from probe.cluster import fan_out, session

        with session(args.address):
            done = fan_out(analyze_one, items)
    else:
        done = pool_map(analyze_one, items)
    result = job([*done, *early.values()])
    if not result.traces:
        raise ProbeError(
            f"none of the {len(paths)} traces could be read: {result.failed[0].source}: {result.failed[0].error}"
        )
    if args.json:
        print_json(result.to_json())
    else:
        from probe import render

        console = render.stdout()
        for trace, rank in zip(result.traces, result.ranks, strict=True):
            console.print(f"[bold]rank {rank}[/]: {_escape(trace.source)}")
            console.print(steps_table(trace))
            console.print(host_table(trace))
        for table in job_tables(result):
            console.print(table)
        for w in result.warnings:
            console.print(f"[yellow]warning:[/] {_escape(w)}")
    for f in result.failed:
        print(f"probe: error: {f.source}: {f.error}", file=sys.stderr)
    return 1 if result.failed else 0


def job_tables(result):
    """The job step by step: each rank's wall (with the slowest rank and its trail), GPU busy and launches; the
    straggler; the traces that could not be read."""
    ranks = [f"rank {r}" for r in result.ranks]
    wall = _table(
        "wall per step and rank (ms): the slowest rank, and how far it trails the median rank",
        ["#", "step", *ranks, "slowest", "median", "trails by", "trails %"],
    )
    for s in result.by_step:
        walls = [f"[bold red]{_ms(r.wall_ns)}[/]" if r.rank == s.slowest_rank else _ms(r.wall_ns) for r in s.ranks]
        row = [str(s.step), _short(s.name, 30), *walls, f"rank {s.slowest_rank}", _ms(s.median_wall_ns)]
        table_row = row + [_ms(s.trails_median_ns), f"{s.trails_median_pct:.1f}"]
        wall.add_row(*table_row)
    if (g := result.straggler) is not None:
        wall.caption = (
            f"straggler: rank {g.rank}, the slowest in {g.slowest_steps} of {g.steps} steps "
            f"(trailing the median rank by {g.median_trail_pct:.1f}% in the median of those steps)"
        )
    tables = [wall]
    if result.on_gpu:
        busy = _table("GPU busy per step and rank (ms)", ["#", "step", *ranks])
        for s in result.by_step:
            busy.add_row(str(s.step), _short(s.name, 30), *(_ms(r.gpu_busy_ns) for r in s.ranks))
        tables.append(busy)
    launches = _table(f"{result.traces[0].summary.dispatch} per step and rank", ["#", "step", *ranks])
    for s in result.by_step:
        launches.add_row(str(s.step), _short(s.name, 30), *(str(r.launches) for r in s.ranks))
    tables.append(launches)
    if result.failed:
        failed = _table("traces that could not be read", ["trace", "error"], left=("trace", "error"))
        for f in result.failed:
            failed.add_row(_escape(f.source), _escape(f.error))
        tables.append(failed)
    return tables


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _pick(result, key: str):
    from probe.errors import ProbeError

    try:
        return result.step(int(key) if key.isascii() and key.isdigit() else key)
    except KeyError:
        names = ", ".join(s.name for s in result.steps[:6]) + (", ..." if len(result.steps) > 6 else "")
        raise ProbeError(
            f"no step {key!r} in this trace: use a position 0..{len(result.steps) - 1} or a name ({names})"
        ) from None


def _ms(ns: int | float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def _us(ns: int | float | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:.1f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _short(name: str, width: int = KERNEL_NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _table(title: str, columns, left=("step", "name", "frame", "category", "kind", "part", "")):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for c in columns:
        table.add_column(c, justify="left" if c in left else "right", no_wrap=c not in ("name", "frame"))
    return table


def steps_table(result):
    """One row a step: wall time, what it dispatched, and its GPU window (on a GPU trace)."""
    gpu, estimate = result.on_gpu, result.event_cost is not None
    rank = f", rank {result.rank}" if result.rank is not None else ""
    cols = ["#", "step", "kind", "start", "wall"] + (["unprofiled est."] if estimate else [])
    cols += (
        ["launches", "graphs", "kernels", "GPU window", "GPU busy", "busy %"] if gpu else ["top-level ops", "cpu ops"]
    )
    n = len(result.steps)
    table = _table(
        f"{result.source}  ({result.format}{rank}; {n} step{'s' * (n != 1)} found by {result.step_rule}; times in ms)",
        cols,
    )
    for s in result.steps:
        row = [str(s.position), _short(s.name, 40), s.kind, _ms(s.start_ns), _ms(s.wall_ns)]
        row += [_ms(s.unprofiled_estimate_ns)] if estimate else []
        if gpu:
            row += [
                str(s.launches),
                str(s.graph_launches),
                str(s.kernels),
                _ms(s.gpu_window_ns),
                _ms(s.gpu_busy_ns),
                _pct(s.busy_fraction),
            ]
        else:
            row += [str(s.top_level_ops), str(s.cpu_ops)]
        table.add_row(*row)
    return table


def idle_table(result):
    """One row a step: the GPU window's idle time split HTA's way, and the launch statistics."""
    table = _table(
        "GPU idle in each step's GPU window, and its launches (ms unless marked)",
        [
            "#",
            "step",
            "GPU idle",
            "host wait",
            "kernel wait",
            "other",
            "launch calls",
            "delay p50 us",
            "delay p90 us",
            "kernels < 5 us",
        ],
    )
    for s in result.steps:
        table.add_row(
            str(s.position),
            _short(s.name, 40),
            _ms(s.gpu_idle_ns),
            _ms(s.idle_host_wait_ns),
            _ms(s.idle_kernel_wait_ns),
            _ms(s.idle_other_ns),
            _ms(s.launch_cpu_ns),
            _us(s.launch_delay_p50_ns),
            _us(s.launch_delay_p90_ns),
            str(s.short_kernels),
        )
    return table


def host_table(result):
    """One row a step: the host partition of its wall time, which adds up to the wall."""
    parts = list(result.user_parts) + ["sync", "sample", "cache", "mask", "attention", "ops", "python", "unattributed"]
    table = _table(
        "host time on each step's thread, by part (ms; the parts add up to wall)", ["#", "step", "wall", *parts]
    )
    for s in result.steps:
        values = {**s.user_parts_ns, **{p: getattr(s, f"{p}_ns") for p in parts if p not in s.user_parts_ns}}
        table.add_row(str(s.position), _short(s.name, 40), _ms(s.wall_ns), *(_ms(values[p]) for p in parts))
    return table


def kernels_table(stats, title: str):
    table = _table(title, ["name", "category", "count", "total ms", "mean us", "p50 us", "max us", "% of busy"])
    for k in stats:
        table.add_row(
            _short(k.name),
            k.category,
            str(k.count),
            _ms(k.total_ns),
            _us(k.mean_ns),
            _us(k.p50_ns),
            _us(k.max_ns),
            _pct(k.share_of_busy),
        )
    return table


def categories_table(categories: dict[str, int], busy_ns: int):
    table = _table("GPU time by kernel category (whole trace)", ["category", "total ms", "% of busy"])
    for category, ns in sorted(categories.items(), key=lambda kv: -kv[1]):
        table.add_row(category, _ms(ns), _pct(ns / busy_ns if busy_ns else 0.0))
    return table


def frames_table(frames, title: str):
    table = _table(title, ["frame", "self ms", "count"])
    for f in frames:
        table.add_row(_short(f.frame, 100), _ms(f.self_ns), str(f.count))
    return table


def step_table(s, result):
    table = _table(f"step {s.position}: {s.name} ({s.kind}), thread {s.pid}/{s.tid}", ["", "value", "% of wall"])
    wall = s.wall_ns or 1
    rows = [
        ("start ms", _ms(s.start_ns), ""),
        ("wall ms", _ms(s.wall_ns), "100.0"),
        ("launches", str(s.launches), ""),
        ("graph launches", str(s.graph_launches), ""),
        ("runtime calls", str(s.runtime_calls), ""),
        ("kernels", str(s.kernels), ""),
        ("GPU ops", str(s.gpu_ops), ""),
        ("GPU window start ms", _ms(s.gpu_start_ns), ""),
        ("GPU window ms", _ms(s.gpu_window_ns), ""),
        ("GPU busy ms", _ms(s.gpu_busy_ns), f"{_pct(s.busy_fraction)} of the window"),
        ("GPU idle ms", _ms(s.gpu_idle_ns), ""),
        ("  host wait ms", _ms(s.idle_host_wait_ns), ""),
        ("  kernel wait ms", _ms(s.idle_kernel_wait_ns), ""),
        ("  other ms", _ms(s.idle_other_ns), ""),
        ("launch calls ms", _ms(s.launch_cpu_ns), ""),
        ("launch delay p50 / p90 us", f"{_us(s.launch_delay_p50_ns)} / {_us(s.launch_delay_p90_ns)}", ""),
        ("kernels under 5 us", str(s.short_kernels), ""),
        ("top-level ops", str(s.top_level_ops), ""),
        ("cpu ops (all depths)", str(s.cpu_ops), ""),
        ("host events recorded (ops, calls, frames / ranges)", f"{s.host_events} / {s.host_ranges}", ""),
    ]
    if s.unprofiled_estimate_ns is not None:
        rows.append(
            (
                f"unprofiled estimate ms ({s.host_events} events x {result.event_cost.op_ns:.0f} ns, "
                f"{s.host_ranges} ranges x {result.event_cost.range_ns:.0f} ns)",
                _ms(s.unprofiled_estimate_ns),
                _pct(s.unprofiled_estimate_ns / wall),
            )
        )
    for part, ns in s.host_parts_ns.items():
        rows.append((f"host: {part} ms", _ms(ns), _pct(ns / wall)))
    rows.append(("host: cache total ms", _ms(s.cache_ns), _pct(s.cache_ns / wall)))
    for category, ns in s.kernels_by_category.items():
        rows.append((f"GPU: {category} ms", _ms(ns), ""))
    for name, value, share in rows:
        table.add_row(name, value, share)
    for o in s.top_ops[:10]:
        table.add_row(f"self: {o.name} (x{o.calls})", _ms(o.self_ns), _pct(o.self_ns / wall))
    return table


def timeline_table(items, s):
    from rich.table import Table

    table = Table(
        title=f"{s.name}: top-level ops, calls outside ops and ranges, in order (us from step start)",
        title_justify="left",
    )
    for c in ("start us", "dur us", "kind", "part", "name"):
        table.add_column(c, justify="left" if c in ("kind", "part", "name") else "right")
    for it in items:
        style = "bold cyan" if it.part.startswith("cache") else None
        table.add_row(f"{it.start_us:.3f}", f"{it.dur_us:.3f}", it.kind, it.part, it.name, style=style)
    return table


def summary_table(result):
    s, t = result.summary, result.totals
    table = _table(f"summary over {s.steps} {'decode ' if s.steps_used == 'decode' else ''}step(s)", ["", "value"])
    rows = [
        ("steps found by", result.step_rule),
        ("step time p50 ms", f"{s.step_p50_us / 1000:.3f}"),
        ("step time p90 ms", f"{s.step_p90_us / 1000:.3f}"),
        (f"{s.dispatch} per step (median)", f"{s.launches_per_step:g}"),
        ("GPU busy fraction (of the GPU windows)", f"{_pct(s.busy_fraction)} %"),
        ("cache share of wall", f"{_pct(s.cache_share)} %"),
        ("python share of wall", f"{_pct(s.python_share)} %"),
        ("unattributed share of wall", f"{_pct(s.unattributed_share)} %"),
        (
            "trace: events / kernels / launches / graph launches",
            f"{t.events} / {t.kernels} / {t.launches} / {t.graph_launches}",
        ),
        ("trace: GPU ops / GPU busy ms", f"{t.gpu_ops} / {t.gpu_busy_ns / 1e6:.3f}"),
        ("trace: GPU ops launched outside every step", str(t.unattributed_gpu_ops)),
    ]
    for o in s.top_ops:
        rows.append((f"top host op: {o.name} (x{o.calls})", f"{o.self_ns / 1e6:.3f} ms"))
    for name, value in rows:
        table.add_row(name, value)
    return table
