"""The terminal: progress (a bar on a terminal, a flushed line a cell and a phase in a file or a pipe),
and the tables of a sweep and a run. No analysis happens here; `probe analyze`'s tables are in render.ledger."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from probe.analysis.diagnosis.predictions import (
    BASELINE_DEPARTED,
    Machine,
    OverheadReport,
    Prediction,
    Verdict,
    WhatIfCheck,
)
from probe.analysis.diagnosis.report import Figure, Report
from probe.analysis.ledger.host import MECHANISM_PARTS, PURPOSE_PARTS
from probe.analysis.ledger.median import MedianStep
from probe.analysis.records.results import BenchResults, Cell, FailedCell
from probe.render.console import stderr


def parity_text(c: Cell, markup: bool = True) -> str:
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


def contention_text(c: Cell, markup: bool = True) -> str:
    """A contended cell's mark: the CPU other processes used beside it (probe.analysis.records.telemetry's rule)."""
    if c.other_cpu_cores is None:
        return "-"
    text = f"{c.other_cpu_cores:.2f} cores"
    if not c.contended:
        return text
    return f"[bold yellow]{text} CONTENDED[/]" if markup else f"{text} CONTENDED"


def cells_table(results: BenchResults, title: str | None = None) -> Table:
    env = results.env
    table = Table(
        title=title or f"{results.config.model} {results.dtype} on {env.device_name}",
        title_justify="left",
    )
    batched = any(c.batch > 1 for c in results.cells) or any(f.batch > 1 for f in results.failed)
    contended = any(c.contended for c in results.cells)
    hosts = len({c.host for c in results.cells if c.host}) > 1  # a sweep over a cluster: where each cell ran
    for col in (
        "engine",
        "prompt",
        *(("batch",) if batched else ()),
        *(("other CPU",) if contended else ()),  # beside what it makes unreliable, before a narrow table drops any
        "TTFT ms",
        "ITL p50 ms",
        "ITL p90 ms",
        "decode tok/s",
        "total ms",
        "peak MiB",
        "spread %",
        "ops/fwd",
        *(("host",) if hosts else ()),
        "tokens",
    ):
        table.add_column(col, justify="left" if col in ("engine", "tokens", "host") else "right")
    for c in results.cells:
        table.add_row(
            c.engine,
            str(c.prompt_tokens),
            *((str(c.batch),) if batched else ()),
            *((contention_text(c),) if contended else ()),
            f"{c.ttft_ms:.2f}",
            f"{c.itl_p50_ms:.2f}",
            f"{c.itl_p90_ms:.2f}",
            f"{c.decode_tok_s:.1f}",
            f"{c.total_ms:.1f}",
            f"{c.peak_mem_bytes / 2**20:.0f}",
            f"{c.spread_pct:.1f}",
            "-" if c.decode_ops is None else str(c.decode_ops),
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


SERVING_COLUMNS = (  # (header, Cell field): vLLM benchmark_serving's definitions, docs/sweeps.md "Metrics"
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
        title="serving figures, ms (vLLM benchmark_serving definitions; docs/sweeps.md, Metrics)", title_justify="left"
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
        if c.telemetry is not None and c.telemetry.energy_reliable is False:  # too short for NVML's power window
            values[-1] = "unreliable"
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


def line_stream(json_out: bool = False) -> TextIO | None:
    """Where progress goes as plain lines when a bar would not show: stdout when it is a file or a pipe (a log), or
    under --json (stdout holds the JSON) stderr when that is not a terminal either; None on a terminal."""
    if sys.stdout.isatty():
        return None
    if not json_out:
        return sys.stdout
    return None if sys.stderr.isatty() else sys.stderr


HEARTBEAT_S = 30.0  # the longest a log goes without a line while a run works


class LogProgress:
    """Progress for a log: a flushed line a phase and a line a finished cell, each with the time since the start;
    and, while a `with` block holds it, a line whenever HEARTBEAT_S pass without one: the cells done and left of the
    current sweep and the time left, estimated from the cells so far."""

    def __init__(self, stream: TextIO | None, prefix: str = "probe", heartbeat_s: float = HEARTBEAT_S):
        self.stream, self.prefix, self.start = stream, prefix, time.perf_counter()
        self.done = 0  # cells finished in the current sweep, printed or not
        self._told: set[tuple[type, object]] = set()  # the current sweep's cells already told
        self.total: int | None = None  # cells in the current sweep (None: a part without cells)
        self.what, self.since = "sweep", self.start  # the current part (bench's only), and when it began
        self.heartbeat_s, self.last = heartbeat_s, self.start
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> LogProgress:
        if self.stream is not None:
            self._beat = threading.Thread(target=self._beating, name="probe-progress", daemon=True)
            self._beat.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()

    def _print(self, text: str, stream: TextIO | None = None) -> None:
        stream = stream or self.stream
        if stream is not None:
            with self._lock:
                self.last = time.perf_counter()
                print(f"{self.prefix}: {text} (+{self.last - self.start:.0f} s)", file=stream, flush=True)

    def cells(self, results: BenchResults, total: int) -> None:
        """Called with the sweep's results after each cell: a line for each cell added since the last call."""
        done: list[Cell | FailedCell] = [*results.cells, *results.failed]
        self.total = total
        for c in done:  # by key, not position: cells finish out of order across workers, failures listed apart
            if (told := (type(c), c.key)) in self._told:
                continue
            self._told.add(told)
            self.done += 1
            if isinstance(c, Cell):
                what = (
                    f"ITL p50 {c.itl_p50_ms:.2f} ms, {c.decode_tok_s:.1f} tok/s, tokens {parity_text(c, markup=False)}"
                )
                if c.contended:
                    what += f"; CONTENDED: other processes used {c.other_cpu_cores:.2f} cores beside it"
            else:
                what = f"FAILED: {c.error}"
            self._print(f"cell {self.done} of {total} done: {c.label}: {what}")

    def sweep(self, total: int) -> None:
        """A sweep of `total` cells starts: from now on a quiet spell is told as its cells done and left."""
        self.done, self.total, self.since = 0, total, time.perf_counter()
        self._told.clear()

    def phase(self, text: str) -> None:
        """A part of the run begins (a new sweep's cells count from one)."""
        self.done, self.total, self.what, self.since = 0, None, text, time.perf_counter()
        self._told.clear()
        self._print(text)

    def note(self, text: str) -> None:
        """What the run decided for the user: on the log, or on stderr where the output is a terminal."""
        self._print(text, self.stream or sys.stderr)

    def status(self, now: float) -> str:
        """The current part, and for a sweep its cells done and left and the time left at the pace of its cells."""
        part = self.what.split(":", 1)[0]
        if self.total is None:
            return f"{part}: still working, {now - self.since:.0f} s in"
        left = self.total - self.done
        if not self.done:
            return f"{part}: 0 of {self.total} cells done, {left} left; time left: known after the first cell"
        eta = (now - self.since) / self.done * left
        return f"{part}: {self.done} of {self.total} cells done, {left} left, about {_duration(eta)} left"

    def _beating(self) -> None:
        while not self._stop.wait(min(1.0, self.heartbeat_s / 4)):
            now = time.perf_counter()
            if now - self.last >= self.heartbeat_s:
                self._print(self.status(now))


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def count_table(counts, title: str) -> Table:
    """`probe count`: aten ops per forward, per engine and prompt length."""
    table = Table(title=title, title_justify="left")
    for col in ("engine", "prompt", "prefill ops", "decode ops"):
        table.add_column(col, justify="left" if col == "engine" else "right")
    for c in counts:
        table.add_row(c.engine, str(c.prompt_tokens), str(c.prefill_ops), str(c.decode_ops))
    return table


def overhead_output(r: OverheadReport) -> list[str | Table]:
    """`probe overhead`: the floor, the cached step piece by piece, the gap, and the profiled step's split."""
    out: list[str | Table] = [
        f"[bold]floor[/]: single-token forward, no cache, {r.model} {r.dtype} on {r.device}",
        f"  {r.floor_ms:.3f} ms synced, of which {r.floor_issue_ms:.3f} ms issuing (host) and "
        f"{r.floor_wait_ms:.3f} ms waiting for the device; {r.floor_unsynced_ms:.3f} ms per forward back to back "
        "with one sync at the end",
        f"  {r.launches_per_forward} {r.launch_kind} per forward x {r.host_us_per_launch:.2f} us "
        f"= {r.launches_per_forward * r.host_us_per_launch / 1e3:.3f} ms",
    ]
    table = Table(
        title=f"cached decode step at context {r.context_tokens}: {r.cached_step_ms:.3f} ms, "
        f"{r.cached_launches_per_forward} ops per forward",
        title_justify="left",
    )
    for col in ("piece", "range", "median us", "share %"):
        table.add_column(col, justify="left" if col in ("piece", "range") else "right")
    for piece in r.pieces:
        table.add_row(piece.name, piece.range, f"{piece.median_us:.1f}", f"{piece.share_pct:.1f}")
    out.append(table)
    by = {p.range: p.median_us / 1e3 for p in r.pieces}
    loop = by["sample"] + by["sync"] + by["decode"]
    out.append(
        f"gap above the floor: {r.gap_ms:.3f} ms = bookkeeping {r.bookkeeping_ms:.3f} "
        f"({r.explained_pct:.0f}%) + sampling, sync and loop {loop:.3f} + the forward's own ops beyond the "
        f"floor's {r.gap_ms - r.bookkeeping_ms - loop:+.3f} (medians, so the sum is approximate)"
    )
    device = (
        f"device busy {r.device_pct:.1f}% of the step"
        if r.device_pct is not None
        else "no device: the host does the compute too"
    )
    out.append(
        f"profiled decode step: {r.step_dispatched:g} {r.step_dispatch}; host work {r.host_pct:.1f}% of "
        f"the step; {device}; {r.compute_in_ops_pct:.1f}% inside aten ops (compute), "
        f"{100 - r.compute_in_ops_pct:.1f}% around them"
    )
    return out


def digest_table(ledgers: dict[str, MedianStep]) -> Table:
    """Where one (median) decode step goes, per engine, from its profiled trace: by purpose, then by mechanism."""
    table = Table(title="where a decode step goes (median decode step of a profiled run, us)", title_justify="left")
    columns = [(p.label, "purpose", p.name) for p in PURPOSE_PARTS]
    columns += [(p.label, "mechanism", p.name) for p in MECHANISM_PARTS]
    for col in ("engine", "step", *(label for label, _, _ in columns), "dispatched", "GPU busy %"):
        table.add_column(col, justify="left" if col == "engine" else "right")
    for engine, d in ledgers.items():
        parts = {"purpose": d.purpose_us, "mechanism": d.mechanism_us}
        table.add_row(
            engine,
            f"{d.wall_us:.0f}",
            *(f"{parts[side].get(name, 0.0):.0f}" for _, side, name in columns),
            f"{d.dispatched:g} {'launches' if d.on_gpu else 'ops'}",
            f"{100 * d.gpu_busy_us / d.wall_us:.1f}" if d.gpu_busy_us is not None else "-",
        )
    return table


def bandwidth_text(machine: Machine) -> str:
    text = f"bandwidth {machine.bandwidth_bytes_s / 1e9:.1f} GB/s ({machine.bandwidth_source})"
    if machine.datasheet_bandwidth_bytes_s:
        name = (machine.datasheet_source or "datasheet").split(":")[0]
        text += f"; {name}: {machine.datasheet_bandwidth_bytes_s / 1e9:.0f} GB/s, not used: no copy reaches it"
    return text


def predictions_table(rows: list[Prediction], machine: Machine) -> Table:
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
        "host ms",
        "predicted ms",
        "binds",
        "measured ms",
        "measured/pred",
        "the gap points at",
    ):
        table.add_column(col, justify="left" if col in ("engine", "binds", "the gap points at") else "right")
    own = sorted({f"{p.engine}: {p.host_source}" for p in rows if p.host_source != "eager floor"})
    if own:
        table.caption = "host ms is the eager floor, except " + "; ".join(own)
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


def value_text(v: float | None) -> str:
    """A figure in as few digits as say it: 1123, 21.8, 0.23."""
    if v is None:
        return "-"
    return f"{v:.0f}" if float(v).is_integer() and abs(v) >= 1 else f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"


def figures_table(figures: list[Figure]) -> Table:
    """What the write-ups measured by hand, measured here: one row a figure, one column an engine, its source."""
    engines = list(dict.fromkeys(e for f in figures for e in f.values))
    table = Table(title="the write-ups' hand measurements, measured here (- = not measured here)", title_justify="left")
    for col in ("figure", "unit", *engines, "source"):
        table.add_column(col, justify="right" if col in engines else "left")
    for f in figures:
        table.add_row(f.name, f.unit, *(value_text(f.values.get(e)) for e in engines), f.source)
    return table


def floor_lines(report: Report) -> list[str]:
    """The floor with and without a sync, and the bandwidth beside its datasheet figure, each with its source."""
    o, m = report.overhead, report.machine
    lines: list[str] = []
    if o is not None:
        unsynced = f"{o.floor_unsynced_ms:.3f} ms" if o.floor_unsynced_ms is not None else "not measured"
        lines.append(
            f"floor ({o.model} {o.dtype}, single-token forward, no cache; probe overhead): {o.floor_ms:.3f} ms with a "
            f"sync after each forward ({o.floor_issue_ms:.3f} ms issuing, {o.floor_wait_ms:.3f} ms waiting), "
            f"{unsynced} per forward without one (back to back, one sync at the end); "
            f"{o.launches_per_forward} {o.launch_kind} per forward"
        )
    if m is not None:
        lines.append(bandwidth_text(m))
    lines += [f"note: {n}" for n in report.notes]
    return lines


def problem_lines(report: Report) -> list[str]:
    """The parts of a run that failed and what its traces warned, one line each (also on stderr and in report.md)."""
    lines = [f"[bold red]failed[/]: {escape(part)}: {escape(error)}" for part, error in report.failed.items()]
    return lines + [f"[yellow]warning:[/] {escape(w)}" for w in report.warnings]


def self_check_line(report: Report) -> str | None:
    c = report.self_check
    return None if c is None else f"profiler self-check: {escape(c.note)}"


def diagnosis_lines(report: Report) -> list[str]:
    """What bounds each profiled engine's median step (probe.analysis.diagnosis.verdict), and its predictions
    checked."""
    out = [f"[bold]{escape(label)}[/]: {escape(d.headline)}" for label, d in report.diagnoses.items()]
    for c in report.what_if_checks:
        if c.error_pct is None:
            out.append(f"check: {escape(c.change)}: {escape(c.note)}")
        else:
            out.append(check_line(c))
    return out


def check_line(c: WhatIfCheck) -> str:
    """A judged what-if check, the change's verdict on its prediction rebased onto the baseline measured beside it
    (WhatIfCheck), with the baseline's own departure from the step the profile priced."""
    why = c.wrong_term or (c.note if not c.judged else "holds")
    line = f"check: {escape(c.change)} ({escape(c.what_if)}): predicted {c.predicted_step_ms:.3f} ms"
    if c.priced_step_ms is not None and c.baseline_error_pct is not None:
        departed = f", {BASELINE_DEPARTED}" if c.baseline_departed else ""
        line += (
            f" from a baseline priced at {c.priced_step_ms:.3f} ms; the baseline measured {c.baseline_step_ms:.3f} ms "
            f"({c.baseline_error_pct:+.1f}%{departed}), so {c.rebased_step_ms:.3f} ms"
        )
    return line + f"; measured {c.measured_step_ms:.3f} ms ({c.error_pct:+.1f}%; {escape(why)})"


def verdict_lines(verdicts: list[Verdict]) -> list[str]:
    mark = {True: "[green]supported[/]", False: "[red]not supported[/]", None: "[yellow]not measured[/]"}
    return [f"{mark[v.supported]}: {v.claim} ({v.source}). {v.evidence}" for v in verdicts]
