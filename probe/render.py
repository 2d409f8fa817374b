"""Rich rendering of typed results. No analysis happens here."""

from __future__ import annotations

import dataclasses

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from probe.analysis.ledger import StepDigest
from probe.analysis.results import BenchResults


def stdout() -> Console:
    return Console(highlight=False, soft_wrap=False, width=160)


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def parity_text(c, markup: bool = True) -> str:
    """A cell's parity verdict in a few words: 'match', 'match (tf, 2 near-ties from step 35)', 'MISMATCH at 7'."""
    if c.tokens_match_naive is None:
        return "-"
    tf = c.parity_mode == "teacher-forced"
    if c.tokens_match_naive:
        if not tf:
            return "match"
        if not c.differing_steps:
            return "match (tf)"
        ties = f"{c.differing_steps} near-tie{'s' * (c.differing_steps > 1)}"
        return f"match (tf, {ties} from step {c.first_divergence_step})"
    bad = "[bold red]MISMATCH[/]" if markup else "MISMATCH"
    if c.nonfinite_steps:
        return f"{bad}: NaN/inf logits at {c.nonfinite_steps} step{'s' * (c.nonfinite_steps > 1)}"
    where = f" at step {c.first_divergence_step}" if c.first_divergence_step is not None else ""
    gap = f", gap {c.worst_gap_ulps:.0f} ulp" if tf and c.worst_gap_ulps is not None else ""
    return f"{bad}{where}{' (tf' + gap + ')' if tf else ''}"


def contention_text(c) -> str:
    """A contended cell's mark: the CPU other processes used beside it (probe.analysis.telemetry's rule)."""
    if c.other_cpu_cores is None:
        return "-"
    text = f"{c.other_cpu_cores:.2f} cores"
    return f"[bold yellow]{text} CONTENDED[/]" if c.contended else text


def cells_table(results: BenchResults, title: str | None = None) -> Table:
    env = results.env
    table = Table(
        title=title or f"{results.config.model} {results.dtype} on {env.device_name}",
        title_justify="left",
    )
    batched = any(c.batch > 1 for c in [*results.cells, *results.failed])
    contended = any(c.contended for c in results.cells)
    hosts = len({c.host for c in results.cells if c.host}) > 1  # a sweep over a cluster: where each cell ran
    for col in (
        "engine",
        "prompt",
        *(("batch",) if batched else ()),
        "TTFT ms",
        "ITL p50 ms",
        "ITL p90 ms",
        "decode tok/s",
        "total ms",
        "peak MiB",
        "spread %",
        "ops/fwd",
        *(("other CPU",) if contended else ()),
        *(("host",) if hosts else ()),
        "tokens",
    ):
        table.add_column(col, justify="left" if col in ("engine", "tokens", "host") else "right")
    for c in results.cells:
        table.add_row(
            c.engine,
            str(c.prompt_tokens),
            *((str(c.batch),) if batched else ()),
            f"{c.ttft_ms:.2f}",
            f"{c.itl_p50_ms:.2f}",
            f"{c.itl_p90_ms:.2f}",
            f"{c.decode_tok_s:.1f}",
            f"{c.total_ms:.1f}",
            f"{c.peak_mem_bytes / 2**20:.0f}",
            f"{c.spread_pct:.1f}",
            "-" if c.decode_ops is None else str(c.decode_ops),
            *((contention_text(c),) if contended else ()),
            *((f"{c.host} {c.device}",) if hosts else ()),
            parity_text(c),
        )
    for f in results.failed:
        table.add_row(
            f.engine,
            str(f.prompt_tokens),
            *((str(f.batch),) if batched else ()),
            *(["-"] * (8 + contended)),  # no figures
            *((f"{f.host} {f.device}",) if hosts else ()),
            f"[bold red]FAILED[/]: {escape(f.error if len(f.error) <= 60 else f.error[:59] + '…')}",
        )
    sync = [c.sync_overhead_ms for c in results.cells if c.sync_overhead_ms is not None]
    if sync:
        table.caption = (
            f"per-step sync costs {min(sync):.3f}..{max(sync):.3f} ms "
            "(runs with one final sync against runs with one per step, ABBA pairs, median)"
        )
    return table


SERVING_COLUMNS = (  # (header, Cell field): vLLM benchmark_serving's definitions, README "Metrics"
    ("TTFT p50", "ttft_p50_ms"),
    ("TTFT p99", "ttft_p99_ms"),
    ("ITL mean", "itl_mean_ms"),
    ("ITL std", "itl_std_ms"),
    ("ITL p95", "itl_p95_ms"),
    ("ITL p99", "itl_p99_ms"),
    ("TPOT", "tpot_ms"),
    ("E2E", "e2e_ms"),
)


def serving_table(results: BenchResults) -> Table:
    """The serving figures per cell, in ms (vLLM's benchmark_serving definitions)."""
    table = Table(
        title="serving figures, ms (vLLM benchmark_serving definitions; README, Metrics)", title_justify="left"
    )
    for col in ("engine", "prompt", "batch", *(h for h, _ in SERVING_COLUMNS)):
        table.add_column(col, justify="left" if col == "engine" else "right")
    for c in results.cells:
        values = ["-" if (v := getattr(c, name)) is None else f"{v:.2f}" for _, name in SERVING_COLUMNS]
        table.add_row(c.engine, str(c.prompt_tokens), str(c.batch), *values)
    return table


TELEMETRY_COLUMNS = (  # (header, TelemetrySummary field, scale, format)
    ("RSS peak MiB", "rss_bytes_peak", 2**-20, ".0f"),
    ("proc CPU %", "proc_cpu_pct_mean", 1, ".0f"),
    ("machine CPU %", "sys_cpu_pct_mean", 1, ".0f"),
    ("threads", "threads_peak", 1, ".0f"),
    ("GPU util %", "gpu_util_pct_mean", 1, ".0f"),
    ("SM MHz", "sm_clock_mhz_mean", 1, ".0f"),
    ("power W", "power_w_mean", 1, ".0f"),
    ("J/token", "energy_per_token_j", 1, ".4f"),
)


def telemetry_table(results: BenchResults) -> Table | None:
    """Decode-phase telemetry per cell (means unless the header says peak); None when nothing was sampled."""
    cells = [c for c in results.cells if c.telemetry is not None]
    if not cells:
        return None
    table = Table(
        title="telemetry over the decode phases (mean unless marked peak; - = not measured here)", title_justify="left"
    )
    for col in ("engine", "prompt", "batch", *(h for h, *_ in TELEMETRY_COLUMNS)):
        table.add_column(col, justify="left" if col == "engine" else "right")
    for c in cells:
        values = [
            "-" if (v := getattr(c.telemetry, key)) is None else format(v * scale, fmt)
            for _, key, scale, fmt in TELEMETRY_COLUMNS
        ]
        table.add_row(c.engine, str(c.prompt_tokens), str(c.batch), *values)
    return table


class ProgressBar:
    """A rich progress bar on stderr, driven by (description, advance) callbacks."""

    def __init__(self, total: int, enabled: bool = True):
        self._progress = Progress(
            TextColumn("{task.description:<24}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=stderr(),
            disable=not enabled,
            transient=False,
        )
        self._task = self._progress.add_task("starting", total=total)

    def __enter__(self):
        self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)

    def __call__(self, description: str, advance: int) -> None:
        self._progress.update(self._task, description=description, advance=advance)


class CellsProgress:
    """A sweep spread over workers: cells done of the total, and how many are running and have failed."""

    def __init__(self, total: int, enabled: bool = True):
        self._progress = Progress(
            TextColumn("cells"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[running]} running, {task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=stderr(),
            disable=not enabled,
            transient=False,
        )
        self._task = self._progress.add_task("cells", total=total, running=0, failed=0)

    def __enter__(self):
        self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)

    def __call__(self, done: int, running: int, failed: int) -> None:
        self._progress.update(self._task, completed=done, running=running, failed=failed)


DIGEST_PARTS = (
    "ops",
    "attention",
    "cache_update",
    "cache_seq_length",
    "cache_mask_sizes",
    "mask",
    "sample",
    "sync",
    "unattributed",
)


def digest_table(ledgers: dict[str, StepDigest]) -> Table:
    """Where one (median) decode step goes, per engine, from its profiled trace."""
    table = Table(title="where a decode step goes (median decode step of a profiled run, us)", title_justify="left")
    short = {
        "attention": "attn",
        "cache_update": "cache.update",
        "cache_seq_length": "seq_len",
        "cache_mask_sizes": "mask_sizes",
        "unattributed": "unattr.",
    }
    for col in ("engine", "step", *DIGEST_PARTS, "dispatched", "GPU busy %"):
        table.add_column(short.get(col, col), justify="left" if col == "engine" else "right")
    for engine, d in ledgers.items():
        table.add_row(
            engine,
            f"{d.wall_us:.0f}",
            *(f"{d.parts_us.get(p, 0.0):.0f}" for p in DIGEST_PARTS),
            f"{d.dispatched:g} {'launches' if d.on_gpu else 'ops'}",
            f"{100 * d.gpu_busy_us / d.wall_us:.1f}" if d.gpu_busy_us is not None else "-",
        )
    return table


def bandwidth_text(machine) -> str:
    text = f"bandwidth {machine.bandwidth_bytes_s / 1e9:.1f} GB/s ({machine.bandwidth_source})"
    if machine.datasheet_bandwidth_bytes_s:
        name = (machine.datasheet_source or "datasheet").split(":")[0]
        text += f"; {name}: {machine.datasheet_bandwidth_bytes_s / 1e9:.0f} GB/s, not used: no copy reaches it"
    return text


def predictions_table(rows, machine) -> Table:
    table = Table(
        title=f"prediction vs measurement: floor {machine.floor_ms:.2f} ms ({machine.floor_source}), "
        f"{bandwidth_text(machine)}",
        title_justify="left",
    )
    for col in (
        "engine",
        "prompt",
        "batch",
        "traffic ms",
        "floor ms",
        "predicted ms",
        "binds",
        "measured ms",
        "measured/pred",
        "the gap points at",
    ):
        table.add_column(col, justify="left" if col in ("engine", "binds", "the gap points at") else "right")
    for p in rows:
        table.add_row(
            p.engine,
            str(p.prompt_tokens),
            str(p.batch),
            f"{p.traffic_ms:.3f}",
            f"{p.floor_ms:.2f}",
            f"{p.predicted_ms:.2f}",
            p.binding,
            f"{p.measured_ms:.2f}",
            f"{p.ratio:.2f}",
            p.points_at,
        )
    return table


def _value(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if float(v).is_integer() and abs(v) >= 1 else f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"


def figures_table(figures) -> Table:
    """What the write-ups measured by hand, measured here: one row a figure, one column an engine, its source."""
    engines = list(dict.fromkeys(e for f in figures for e in f.values))
    table = Table(title="the write-ups' hand measurements, measured here (- = not measured here)", title_justify="left")
    for col in ("figure", "unit", *engines, "source"):
        table.add_column(col, justify="right" if col in engines else "left")
    for f in figures:
        table.add_row(f.name, f.unit, *(_value(f.values.get(e)) for e in engines), f.source)
    return table


def floor_lines(report) -> list[str]:
    """The floor with and without a sync, and the bandwidth beside its datasheet figure, each with its source."""
    o, m = report.overhead, report.machine
    lines = []
    if o is not None:
        unsynced = f"{o.floor_unsynced_ms:.3f} ms" if o.floor_unsynced_ms is not None else "not measured"
        lines.append(
            f"floor ({o.model} {o.dtype}, single-token forward, no cache; probe overhead): {o.floor_ms:.3f} ms with a "
            f"sync after each forward ({o.floor_issue_ms:.3f} ms issuing, {o.floor_wait_ms:.3f} ms waiting), "
            f"{unsynced} per forward without one (back to back, one sync at the end); "
            f"{o.launches_per_forward} {o.launch_kind} per forward"
        )
    lines.append(bandwidth_text(m))
    lines += [f"note: {n}" for n in report.notes]
    return lines


def verdict_lines(verdicts) -> list[str]:
    mark = {True: "[green]supported[/]", False: "[red]not supported[/]", None: "[yellow]not measured[/]"}
    return [f"{mark[v.supported]}: {v.claim} ({v.source}). {v.evidence}" for v in verdicts]


def _engines(figures) -> list[str]:
    return list(dict.fromkeys(e for f in figures for e in f.values))


def _markdown(frame: pd.DataFrame, floatfmt: str) -> str:
    """A table for report.md: a figure that was not measured (NaN, None) is a dash, not `nan`."""
    return frame.astype(object).where(frame.notna(), None).to_markdown(index=False, floatfmt=floatfmt, missingval="-")


def report_markdown(results: BenchResults, report, figures=()) -> str:
    """The run report as Markdown: cells, serving figures, hand measurements, predictions, verdicts, bookkeeping.
    Tables through pandas."""
    cells = results.cells_frame()[
        [
            "engine",
            "prompt_tokens",
            "batch",
            "ttft_ms",
            "itl_p50_ms",
            "itl_p90_ms",
            "decode_tok_s",
            "total_ms",
            "peak_mem_bytes",
            "spread_pct",
            "decode_ops",
        ]
    ].copy()
    cells["decode_ops"] = cells["decode_ops"].astype("Int64")  # a count, or none where it was not measured (static)
    cells["tokens"] = [parity_text(c, markup=False) for c in results.cells]
    serving = results.cells_frame()[["engine", "prompt_tokens", "batch", *(name for _, name in SERVING_COLUMNS)]]
    preds = pd.DataFrame([dataclasses.asdict(p) for p in report.predictions])
    env = results.env
    lines = [
        f"# probe run: {results.config.model} {results.dtype} on {env.device_name}",
        "",
        f"torch {env.torch}, transformers {env.transformers}, CPU {env.cpu_model}, "
        f"commit {env.commit}{'-dirty' if env.dirty else ''}",
        "",
        "## Cells",
        "",
        _markdown(cells, ".2f"),
        "",
        "## Serving figures (ms; vLLM benchmark_serving definitions)",
        "",
        _markdown(serving, ".2f"),
        "",
    ]
    if figures:
        table = pd.DataFrame(
            {
                "figure": f.name,
                "unit": f.unit,
                **{e: _value(f.values.get(e)) for e in _engines(figures)},
                "source": f.source,
            }
            for f in figures
        )
        lines += ["## The write-ups' hand measurements, measured here", "", table.to_markdown(index=False), ""]
    lines += [
        "## Prediction vs measurement",
        "",
        f"- prediction floor: {report.machine.floor_ms:.3f} ms ({report.machine.floor_source})",
        *(f"- {line}" for line in floor_lines(report)),
        "",
    ]
    if not preds.empty:
        lines.append(_markdown(preds, ".3f"))
    if report.ledgers:
        digest = pd.DataFrame(
            [
                {"engine": e, "step_us": d.wall_us, **d.parts_us, d.dispatch: d.dispatched}
                for e, d in report.ledgers.items()
            ]
        )
        lines += [
            "",
            "## Where a decode step goes (median decode step of a profiled run, us)",
            "",
            _markdown(digest, ".1f"),
        ]
    lines += ["", "## The write-ups' predictions, checked here", ""]
    word = {True: "supported", False: "not supported", None: "not measured"}
    lines += [f"- **{word[v.supported]}**: {v.claim} ({v.source}). {v.evidence}" for v in report.verdicts]
    if report.overhead:
        o = report.overhead
        lines += [
            "",
            "## Where a cached step goes (probe overhead)",
            "",
            f"Floor: {o.floor_ms:.3f} ms for a single-token forward with no cache "
            f"({o.launches_per_forward} {o.launch_kind}, {o.host_us_per_launch:.2f} us each). "
            f"Cached step at context {o.context_tokens}: {o.cached_step_ms:.3f} ms; "
            f"bookkeeping {o.bookkeeping_ms:.3f} ms of a {o.gap_ms:.3f} ms gap.",
            "",
            _markdown(pd.DataFrame([dataclasses.asdict(p) for p in o.pieces]), ".1f"),
        ]
    return "\n".join(lines) + "\n"
