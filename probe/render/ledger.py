"""`probe analyze`'s tables: a trace's steps, GPU idle, host parts, kernels, frames, one step, and a job of ranks.

Kernels are shown by their short names (probe.analysis.ledger.kernels.short_name; the JSON keeps them whole). On a trace
with no GPU activity every GPU figure is a dash, never a zero.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from rich.markup import escape
from rich.table import Table

from probe.analysis.ledger.host import MECHANISM_PARTS, PURPOSE_PARTS
from probe.analysis.ledger.kernels import KernelStat, short_name
from probe.analysis.ledger.ranks import Ranks
from probe.analysis.ledger.timeline import StepEvent
from probe.analysis.ledger.types import StepLedger, TraceAnalysis
from probe.text import DASH, ms, pct, short, us

KERNEL_NAME_WIDTH = 70  # the table cuts kernel names here; --json keeps them whole
STEP_NAME_WIDTH = 40
STEP_ROWS = 30  # a table of steps shows every step up to this many; past it, the first FIRST_ROWS and the longest
FIRST_ROWS = 10  # (a terminal row costs rich ~1 ms: 1000 steps' three tables took 10 s, and no one reads them)
TIMELINE_ROWS = 50  # --step's timeline: every item up to this many; past it the longest, in order (--json: all)
T = TypeVar("T")


NAMES = ("step", "name", "frame")  # columns of names: they wrap, and fold where the table is narrow; figures never do


def _table(title: str, columns, left=("step", "name", "frame", "category", "kind", "part", "")) -> Table:
    table = Table(title=title, title_justify="left")
    for c in columns:
        names = c in NAMES
        table.add_column(
            c, justify="left" if c in left else "right", no_wrap=not names, overflow="fold" if names else "ellipsis"
        )
    return table


def shown_rows(items: Sequence[T], length: Callable[[T], float], keep: int, first: int = 0) -> list[T | int]:
    """The rows of a table that shows at most `keep` items: every item up to `keep`; past it the first `first` and
    the longest of the rest (by `length`), in order, with the count of each run left out between them (an int)."""
    if len(items) <= keep:
        return list(items)
    rest = sorted(range(first, len(items)), key=lambda i: (-length(items[i]), i))[: keep - first]
    rows: list[T | int] = []
    last = -1
    for i in sorted([*range(first), *rest]):
        if i > last + 1:
            rows.append(i - last - 1)
        rows.append(items[i])
        last = i
    if last < len(items) - 1:
        rows.append(len(items) - 1 - last)
    return rows


def shown_steps(steps: Sequence[T], length: Callable[[T], int]) -> tuple[list[T | int], str]:
    """The rows of a table of steps (positions 0..n-1): every step up to STEP_ROWS; past it the first FIRST_ROWS and
    the longest of the rest (by `length`), in order, with the count of each run left out between them (an int);
    and what the title says of the cut."""
    rows = shown_rows(steps, length, STEP_ROWS, FIRST_ROWS)
    if len(steps) <= STEP_ROWS:
        return rows, ""
    longest = STEP_ROWS - FIRST_ROWS
    note = (
        f"; {STEP_ROWS} of {len(steps)} steps: the first {FIRST_ROWS} and the {longest} longest of the rest "
        "(--json holds every step, --step N shows one)"
    )
    return rows, note


def _left_out(table: Table, count: int, noun: str = "step", column: int = 1) -> None:
    """A row in place of `count` rows not shown: an ellipsis first, and what it stands for in `column`."""
    cells = ["…", *[""] * (len(table.columns) - 1)]
    cells[column] = f"{count} {noun}{'s' * (count != 1)} not shown"
    table.add_row(*cells)


def kernel_label(name: str) -> str:
    """A kernel as a table shows it: its short name, cut to the column."""
    return short(short_name(name), KERNEL_NAME_WIDTH)


def steps_table(result: TraceAnalysis) -> Table:
    """One row a step: wall time, what it dispatched, and its GPU window (on a GPU trace)."""
    gpu, estimate = result.on_gpu, result.event_cost is not None
    rank = f", rank {result.rank}" if result.rank is not None else ""
    cols = ["#", "step", "kind", "start", "wall"] + (["unprofiled est."] if estimate else [])
    cols += (
        ["launches", "graphs", "kernels", "GPU window", "GPU busy", "busy %"] if gpu else ["top-level ops", "cpu ops"]
    )
    n = len(result.steps)
    c = result.coverage
    shares = [f"{100 * c.gpu_share:.0f}% of the GPU work"] if c and gpu and c.gpu_busy_ns else []
    shares += [f"{100 * c.host_share:.0f}% of their thread's busy time"] if c and c.host_busy_ns else []
    held = f"; they hold {' and '.join(shares)}" if shares else ""
    rows, cut = shown_steps(result.steps, lambda s: s.wall_ns)
    table = _table(
        f"{result.source}  ({result.format}{rank}; {n} step{'s' * (n != 1)} found by {result.step_rule}{held}; "
        f"times in ms{cut})",
        cols,
    )
    for s in rows:
        if isinstance(s, int):
            _left_out(table, s)
            continue
        row = [str(s.position), short(s.name, STEP_NAME_WIDTH), s.kind, ms(s.start_ns), ms(s.wall_ns)]
        row += [ms(s.unprofiled_estimate_ns)] if estimate else []
        if gpu:
            row += [
                str(s.launches),
                str(s.graph_launches),
                str(s.kernels),
                ms(s.gpu_window_ns),
                ms(s.gpu_busy_ns),
                pct(s.busy_fraction),
            ]
        else:
            row += [str(s.top_level_ops), str(s.cpu_ops)]
        table.add_row(*row)
    return table


def idle_table(result: TraceAnalysis) -> Table:
    """One row a step: the GPU window's idle time split HTA's way, and the launch statistics."""
    rows, cut = shown_steps(result.steps, lambda s: s.wall_ns)
    table = _table(
        "GPU idle in each step's GPU window, and its launches (ms unless marked; launch delay from the call's start to "
        f"its kernel's, probe's definition: HTA's, from the call's end, is in --json{cut})",
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
    for s in rows:
        if isinstance(s, int):
            _left_out(table, s)
            continue
        table.add_row(
            str(s.position),
            short(s.name, STEP_NAME_WIDTH),
            ms(s.gpu_idle_ns),
            ms(s.idle_host_wait_ns),
            ms(s.idle_kernel_wait_ns),
            ms(s.idle_other_ns),
            ms(s.launch_cpu_ns),
            us(s.launch_delay_p50_ns),
            us(s.launch_delay_p90_ns),
            str(s.short_kernels),
        )
    return table


def host_tables(result: TraceAnalysis) -> list[Table]:
    """One row a step, in two tables: its wall time by purpose, then by mechanism (probe.analysis.ledger.host), each
    adding up to the wall. Two tables, so that each fits a terminal whole."""
    purpose = [(p, p) for p in result.user_parts] + [(p.name, p.label) for p in PURPOSE_PARTS]
    mechanism = [(p.name, p.label) for p in MECHANISM_PARTS]
    rows, cut = shown_steps(result.steps, lambda s: s.wall_ns)
    tables = []
    for by, parts, figures in (("purpose", purpose, "purpose_ns"), ("mechanism", mechanism, "mechanism_ns")):
        table = _table(
            f"host time on each step's thread by {by} (ms; the parts add up to wall){cut}",
            ["#", "step", "wall", *(label for _, label in parts)],
        )
        for s in rows:
            if isinstance(s, int):
                _left_out(table, s)
                continue
            split = getattr(s, figures)
            table.add_row(
                str(s.position), short(s.name, STEP_NAME_WIDTH), ms(s.wall_ns), *(ms(split[p]) for p, _ in parts)
            )
        tables.append(table)
    return tables


def kernels_table(stats: tuple[KernelStat, ...] | list[KernelStat], title: str) -> Table:
    table = _table(title, ["name", "category", "count", "total ms", "mean us", "p50 us", "max us", "% of busy"])
    for k in stats:
        table.add_row(
            kernel_label(k.name),
            k.category,
            str(k.count),
            ms(k.total_ns),
            us(k.mean_ns),
            us(k.p50_ns),
            us(k.max_ns),
            pct(k.share_of_busy),
        )
    return table


def categories_table(categories: dict[str, int], busy_ns: int) -> Table:
    """Each category's kernel time summed over the whole trace, and that sum against the GPU's busy time (the union
    of every GPU op), as `KernelStat.share_of_busy` reads a kernel's: categories that run side by side on parallel
    streams each count their time, so the column can add up past 100, and the caption says so where it does (what
    a category alone costs a step is `StepLedger.kernels_alone_by_category`, what the what-if prices)."""
    table = _table("GPU time by kernel category, summed (whole trace)", ["category", "total ms", "% of busy"])
    for category, ns in sorted(categories.items(), key=lambda kv: -kv[1]):
        table.add_row(category, ms(ns), pct(ns / busy_ns if busy_ns else 0.0))
    summed = sum(categories.values()) / busy_ns if busy_ns else 0.0
    if round(100 * summed, 1) > 100:
        table.caption = f"categories overlap on parallel streams: the column adds up to {pct(summed, 0)}%"
        table.caption_justify = "left"
    return table


def frames_table(frames, title: str) -> Table:
    table = _table(title, ["frame", "self ms", "count"])
    for f in frames:
        table.add_row(short(f.frame, 100), ms(f.self_ns), str(f.count))
    return table


_Row = tuple[str, str, str]  # a row of step_table: what, value, % of wall


def step_table(s: StepLedger, result: TraceAnalysis) -> Table:
    """One step in detail. On a trace with no GPU activity the GPU rows are dashes."""
    table = _table(f"step {s.position}: {s.name} ({s.kind}), thread {s.pid}/{s.tid}", ["", "value", "% of wall"])
    wall = s.wall_ns or 1
    rows = _step_counts_rows(s, result.on_gpu) + _step_estimate_rows(s, result, wall)
    rows += _step_partition_rows(s, wall) + _step_wait_rows(s, wall)
    for name, value, share in rows:
        table.add_row(name, value, share)
    for o in s.top_ops[:10]:
        table.add_row(f"self: {o.name} (x{o.calls})", ms(o.self_ns), pct(o.self_ns / wall))
    return table


def _step_counts_rows(s: StepLedger, gpu: bool) -> list[_Row]:
    """The step's window, dispatch, GPU window, busy, idle and launches, and host events (GPU ones dashed off a GPU)."""

    def on_gpu(text: str) -> str:
        return text if gpu else DASH

    return [
        ("start ms", ms(s.start_ns), ""),
        ("wall ms", ms(s.wall_ns), "100.0"),
        ("launches", on_gpu(str(s.launches)), ""),
        ("graph launches", on_gpu(str(s.graph_launches)), ""),
        ("runtime calls", on_gpu(str(s.runtime_calls)), ""),
        ("kernels", on_gpu(str(s.kernels)), ""),
        ("GPU ops", on_gpu(str(s.gpu_ops)), ""),
        ("GPU window start ms", on_gpu(ms(s.gpu_start_ns)), ""),
        ("GPU window ms", on_gpu(ms(s.gpu_window_ns)), ""),
        ("GPU busy ms", on_gpu(ms(s.gpu_busy_ns)), f"{pct(s.busy_fraction)} of the window" if gpu else ""),
        ("GPU idle ms", on_gpu(ms(s.gpu_idle_ns)), ""),
        ("  host wait ms", on_gpu(ms(s.idle_host_wait_ns)), ""),
        ("  kernel wait ms", on_gpu(ms(s.idle_kernel_wait_ns)), ""),
        ("  other ms", on_gpu(ms(s.idle_other_ns)), ""),
        ("launch calls ms", on_gpu(ms(s.launch_cpu_ns)), ""),
        ("launch delay p50 / p90 us", on_gpu(f"{us(s.launch_delay_p50_ns)} / {us(s.launch_delay_p90_ns)}"), ""),
        (
            "  from the call's end (HTA's) p50 / p90 us",
            on_gpu(f"{us(s.launch_delay_from_end_p50_ns)} / {us(s.launch_delay_from_end_p90_ns)}"),
            "",
        ),
        ("external wait ms (no GPU op running)", on_gpu(ms(s.external_wait_ns)), ""),
        ("kernels under 5 us", on_gpu(str(s.short_kernels)), ""),
        ("top-level ops", str(s.top_level_ops), ""),
        ("cpu ops (all depths)", str(s.cpu_ops), ""),
        ("host events recorded (ops, calls, frames / ranges)", f"{s.host_events} / {s.host_ranges}", ""),
    ]


def _step_estimate_rows(s: StepLedger, result: TraceAnalysis, wall: int) -> list[_Row]:
    """The step as it would have run without the profiler, and its arithmetic; none without the cost per event."""
    if s.unprofiled_estimate_ns is None or result.event_cost is None:
        return []
    return [
        (
            f"unprofiled estimate ms ({s.host_events} events x {result.event_cost.op_ns:.0f} ns, "
            f"{s.host_ranges} ranges x {result.event_cost.range_ns:.0f} ns)",
            ms(s.unprofiled_estimate_ns),
            pct(s.unprofiled_estimate_ns / wall),
        )
    ]


def _step_partition_rows(s: StepLedger, wall: int) -> list[_Row]:
    """The host time by purpose and by mechanism, the cache's total, and the GPU time by kernel category."""
    rows = [(f"host by purpose: {part} ms", ms(ns), pct(ns / wall)) for part, ns in s.purpose_ns.items()]
    rows += [(f"host by mechanism: {part} ms", ms(ns), pct(ns / wall)) for part, ns in s.mechanism_ns.items()]
    rows.append(("host: cache total ms", ms(s.cache_ns), pct(s.cache_ns / wall)))
    rows += [(f"GPU: {category} ms", ms(ns), "") for category, ns in s.kernels_by_category.items()]
    return rows


def _step_wait_rows(s: StepLedger, wall: int) -> list[_Row]:
    """The top five sync sites (the call, its count and copy, where it was) and the five busiest other threads."""
    rows: list[_Row] = []
    for site in s.sync_sites[:5]:
        copy = f", {site.copy_bytes} B {site.copy_kind}" if site.copy_bytes is not None else ""
        where = " at " + " in ".join(x for x in dict.fromkeys((site.frame, site.source)) if x) if site.frame else ""
        label = short(f"sync: {site.call} (x{site.count}{copy}){where}", 90)
        rows.append((label, ms(site.wait_ns), pct(site.wait_ns / wall)))
    for t in s.other_threads[:5]:
        rows.append((f"other thread {t.pid}/{t.tid} busy ms", ms(t.busy_ns), pct(t.busy_ns / wall)))
    return rows


def timeline_table(items: list[StepEvent], s: StepLedger) -> Table:
    """One step's top-level ops, calls outside ops and ranges in order: every one up to TIMELINE_ROWS, past it the
    longest TIMELINE_ROWS, with a row for each run left out (a step of 200,000 ops printed 200,000 rows)."""
    cut = (
        f"; the {TIMELINE_ROWS} longest of {len(items):,}, {len(items) - TIMELINE_ROWS:,} left out: "
        f"--json --step {s.position} holds every one"
        if len(items) > TIMELINE_ROWS
        else ""
    )
    table = Table(
        title=f"{s.name}: top-level ops, calls outside ops and ranges, in order (us from step start{cut})",
        title_justify="left",
    )
    for c in ("start us", "dur us", "kind", "part", "name"):
        table.add_column(c, justify="left" if c in ("kind", "part", "name") else "right")
    for it in shown_rows(items, lambda it: it.dur_us, TIMELINE_ROWS):
        if isinstance(it, int):
            _left_out(table, it, "item", column=4)
            continue
        style = "bold cyan" if it.part.startswith("cache") else None
        table.add_row(f"{it.start_us:.3f}", f"{it.dur_us:.3f}", it.kind, it.part, it.name, style=style)
    return table


def summary_table(result: TraceAnalysis) -> Table:
    """The trace in a few lines. On a trace with no GPU activity the GPU figures are dashes, never 0.0%."""
    s, t, gpu = result.summary, result.totals, result.on_gpu
    table = _table(f"summary over {s.steps} {'decode ' if s.steps_used == 'decode' else ''}step(s)", ["", "value"])
    rows = [
        ("steps found by", result.step_rule),
        ("measured step p50 ms (max of host window, GPU busy)", f"{s.measured_p50_us / 1000:.3f}"),
        ("host window p50 / p90 ms", f"{s.step_p50_us / 1000:.3f} / {s.step_p90_us / 1000:.3f}"),
        (f"{result.dispatch} per step (median)", f"{s.launches_per_step:g}"),
        ("GPU busy fraction (of the GPU windows)", f"{pct(s.busy_fraction)} %" if gpu else DASH),
        ("cache share of wall", f"{pct(s.cache_share)} %"),
        ("python share of wall", f"{pct(s.python_share)} %"),
        ("unattributed share of wall", f"{pct(s.unattributed_share)} %"),
        (
            "trace: events / kernels / launches / graph launches",
            f"{t.events} / {t.kernels} / {t.launches} / {t.graph_launches}",
        ),
        ("trace: GPU ops / GPU busy ms", f"{t.gpu_ops} / {ms(t.gpu_busy_ns) if gpu else DASH}"),
        ("trace: GPU ops launched outside every step", str(t.unattributed_gpu_ops)),
    ]
    for o in s.top_ops:
        rows.append((f"top host op: {o.name} (x{o.calls})", f"{ms(o.self_ns)} ms"))
    for name, value in rows:
        table.add_row(name, value)
    return table


def job_tables(result: Ranks) -> list[Table]:
    if not result.one_job:  # a list of traces, not one job: only what could not be read
        return [_failed_table(result)] if result.failed else []
    return _rank_tables(result)


def _failed_table(result: Ranks) -> Table:
    failed = _table("traces that could not be read", ["trace", "error"], left=("trace", "error"))
    for f in result.failed:
        failed.add_row(escape(f.source), escape(f.error))
    return failed


def _collectives_table(result: Ranks, ranks: list[str]) -> Table:
    """Each rank's time in collectives per step, the step's straggler by them (the least: it waited least) marked."""
    table = _table(
        "time in collectives per step and rank (ms): the least waited least, the last to arrive",
        ["#", "step", *ranks, "median", "last to arrive"],
    )
    for s in result.by_step:
        held = s.rule == "collectives"
        cells = [
            f"[bold red]{ms(r.collectives_ns)}[/]" if held and r.rank == s.held_by else ms(r.collectives_ns)
            for r in s.ranks
        ]
        last = f"rank {s.held_by}" if held else "- (a rank without)"
        table.add_row(str(s.step), short(s.name, 30), *cells, ms(s.median_collectives_ns), last)
    return table


def _rank_tables(result: Ranks) -> list[Table]:
    """The job step by step: each rank's wall (with the slowest rank and its trail), its time in collectives where
    the steps hold them, GPU busy and launches; the straggler and its rule; the traces that could not be read."""
    ranks = [f"rank {r}" for r in result.ranks]
    wall = _table(
        "wall per step and rank (ms): the slowest rank, and how far it trails the median rank",
        ["#", "step", *ranks, "slowest", "median", "trails by", "trails %"],
    )
    for s in result.by_step:
        walls = [f"[bold red]{ms(r.wall_ns)}[/]" if r.rank == s.slowest_rank else ms(r.wall_ns) for r in s.ranks]
        row = [str(s.step), short(s.name, 30), *walls, f"rank {s.slowest_rank}", ms(s.median_wall_ns)]
        wall.add_row(*row, ms(s.trails_median_ns), f"{s.trails_median_pct:.1f}")
    tables = [wall]
    if any(s.rule == "collectives" for s in result.by_step):
        tables.append(_collectives_table(result, ranks))
    if (g := result.straggler) is not None:
        tables[-1].caption = g.words
    if result.on_gpu:
        busy = _table("GPU busy per step and rank (ms)", ["#", "step", *ranks])
        for s in result.by_step:
            busy.add_row(str(s.step), short(s.name, 30), *(ms(r.gpu_busy_ns) for r in s.ranks))
        tables.append(busy)
    launches = _table(f"{result.traces[0].dispatch} per step and rank", ["#", "step", *ranks])
    for s in result.by_step:
        launches.add_row(str(s.step), short(s.name, 30), *(str(r.launches) for r in s.ranks))
    tables.append(launches)
    if result.failed:
        tables.append(_failed_table(result))
    return tables
