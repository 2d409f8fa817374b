"""Where every step's time went, from any trace: a torch.profiler chrome trace (.json, .json.gz) or an Nsight
Systems SQLite export (.sqlite, .sqlite.gz).

One row a step (our prefill / decode#i ranges, else ProfilerStep#N, else the whole trace): wall time; kernel
launches, graph launches and kernels (joined on correlation); GPU busy and idle, idle split HTA's way into host
wait, kernel wait and other; then the host side of the step split into sync, sample, cache bookkeeping,
mask, attention, other ops and unattributed time (Python and framework), which add up to the wall time.
Then a summary over the decode steps: median and p90 step time, launches per step, GPU busy fraction, cache
share and the top host ops by self time. On a CPU-only trace, launches are 0 and the dispatched op count
(top-level ops) stands in for them. The definitions are in probe/ledger.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "per-step ledger of a trace: wall, launches, kernels, GPU busy/idle, host time by part"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", type=Path, help="a .json / .json.gz chrome trace or an nsys .sqlite export")
    p.add_argument("--json", action="store_true", help="print the analysis as JSON instead of tables")
    p.add_argument(
        "--step",
        metavar="N",
        help="show one step in detail, with its timeline: its position in the table (0, 1, ...) or its name (decode#3)",
    )


def main(args: argparse.Namespace) -> int:
    from probe.analysis.ledger import analyze, step_timeline
    from probe.analysis.trace import load_trace

    trace = load_trace(args.trace)
    result = analyze(trace)
    step = _pick(result, args.step) if args.step is not None else None
    if args.json:
        out = result.to_json()
        if step is not None:
            out["steps"] = [step.to_json()]
            out["timeline"] = [vars(it) for it in step_timeline(trace, step)]
        print(json.dumps(out, indent=1))
        return 0
    from probe import render

    console = render.stdout()
    if step is None:
        console.print(steps_table(result))
        console.print(host_table(result))
    else:
        console.print(step_table(step))
        console.print(timeline_table(step_timeline(trace, step), step))
    console.print(summary_table(result))
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    return 0


def _pick(result, key: str):
    from probe.errors import ProbeError

    try:
        return result.step(int(key) if key.isdigit() else key)
    except KeyError:
        names = ", ".join(s.name for s in result.steps[:6]) + (", ..." if len(result.steps) > 6 else "")
        raise ProbeError(
            f"no step {key!r} in this trace: use a position 0..{len(result.steps) - 1} or a name ({names})"
        ) from None


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def steps_table(result):
    """One row a step: wall time, what it dispatched, and the GPU side (on a GPU trace)."""
    from rich.table import Table

    gpu = result.summary.dispatch == "launches"
    table = Table(
        title=f"{result.source}  ({result.format}, {len(result.steps)} steps; times in ms)", title_justify="left"
    )
    cols = ["#", "step", "start", "wall"]
    cols += (
        ["launches", "graphs", "kernels", "GPU busy", "busy %", "idle", "host wait", "kern wait", "idle other"]
        if gpu
        else ["top-level ops", "cpu ops"]
    )
    for c in cols:
        table.add_column(
            c,
            justify="left" if c == "step" else "right",
            no_wrap=True,
            min_width=len(c) if c != "step" else max(4, *(len(s.name) for s in result.steps)),
        )
    for s in result.steps:
        row = [str(s.position), s.name, _ms(s.start_ns), _ms(s.wall_ns)]
        if gpu:
            row += [
                str(s.launches),
                str(s.graph_launches),
                str(s.kernels),
                _ms(s.gpu_busy_ns),
                _pct(s.busy_fraction),
                _ms(s.gpu_idle_ns),
                _ms(s.idle_host_wait_ns),
                _ms(s.idle_kernel_wait_ns),
                _ms(s.idle_other_ns),
            ]
        else:
            row += [str(s.top_level_ops), str(s.cpu_ops)]
        table.add_row(*row)
    return table


def host_table(result):
    """One row a step: the host partition of its wall time, which closes to the wall by construction."""
    from rich.table import Table

    table = Table(title="host time on each step's thread, by part (ms; the parts add up to wall)", title_justify="left")
    for c in ("#", "step", "wall", "sync", "sample", "cache", "mask", "attention", "ops", "unattributed", "closure"):
        table.add_column(c, justify="left" if c == "step" else "right", no_wrap=True, min_width=len(c))
    for s in result.steps:
        table.add_row(
            str(s.position),
            s.name,
            _ms(s.wall_ns),
            _ms(s.sync_ns),
            _ms(s.sample_ns),
            _ms(s.cache_ns),
            _ms(s.mask_ns),
            _ms(s.attention_ns),
            _ms(s.ops_ns),
            _ms(s.unattributed_ns),
            f"{s.closure:.4f}",
        )
    return table


def step_table(s):
    from rich.table import Table

    table = Table(title=f"step {s.position}: {s.name} ({s.kind}), thread {s.pid}/{s.tid}", title_justify="left")
    table.add_column("", justify="left")
    table.add_column("value", justify="right")
    table.add_column("% of wall", justify="right")
    rows = [
        ("start ms", _ms(s.start_ns), ""),
        ("wall ms", _ms(s.wall_ns), "100.0"),
        ("launches", str(s.launches), ""),
        ("graph launches", str(s.graph_launches), ""),
        ("runtime calls", str(s.runtime_calls), ""),
        ("kernels", str(s.kernels), ""),
        ("GPU ops", str(s.gpu_ops), ""),
        ("GPU busy ms", _ms(s.gpu_busy_ns), _pct(s.busy_fraction)),
        ("GPU idle ms", _ms(s.gpu_idle_ns), ""),
        ("  host wait ms", _ms(s.idle_host_wait_ns), ""),
        ("  kernel wait ms", _ms(s.idle_kernel_wait_ns), ""),
        ("  other ms", _ms(s.idle_other_ns), ""),
        ("top-level ops", str(s.top_level_ops), ""),
        ("cpu ops (all depths)", str(s.cpu_ops), ""),
    ]
    for part, ns in s.host_parts_ns.items():
        rows.append((f"host: {part} ms", _ms(ns), _pct(ns / s.wall_ns if s.wall_ns else 0)))
    rows.append(("host: cache total ms", _ms(s.cache_ns), _pct(s.cache_ns / s.wall_ns if s.wall_ns else 0)))
    rows.append(("closure", f"{s.closure:.6f}", ""))
    for name, value, share in rows:
        table.add_row(name, value, share)
    for o in s.top_ops[:10]:
        table.add_row(f"self: {o.name} (x{o.calls})", _ms(o.self_ns), _pct(o.self_ns / s.wall_ns if s.wall_ns else 0))
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
    from rich.table import Table

    s, t = result.summary, result.totals
    table = Table(
        title=f"summary over {s.steps} {'decode ' if s.steps_used == 'decode' else ''}step(s)", title_justify="left"
    )
    table.add_column("", justify="left")
    table.add_column("value", justify="right")
    rows = [
        ("step time p50 ms", f"{s.step_p50_us / 1000:.3f}"),
        ("step time p90 ms", f"{s.step_p90_us / 1000:.3f}"),
        (f"{s.dispatch} per step (median)", f"{s.launches_per_step:g}"),
        ("GPU busy fraction", f"{_pct(s.busy_fraction)} %"),
        ("cache share of wall", f"{_pct(s.cache_share)} %"),
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
