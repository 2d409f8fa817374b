"""probe's explorer: where each step goes, for the runs and traces under one folder.

    streamlit run app.py -- --root DIR      (or: probe app --root DIR; or PROBE_APP_ROOT=DIR)

A flat script over probe's typed results: cached loaders (keyed on path + size + mtime), a sidebar (the source,
a baseline, the analyze flags), then one function a view, picked from VIEWS. Each view takes the one typed
source it shows and the Page (root, how traces are read, source, baseline); none reads a global. It holds no
analysis: it calls probe functions and renders what probe.explorer.figures shapes. Every file it reads lies
under the root (probe.explorer.sources).
"""

from __future__ import annotations

import os
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import streamlit as st

from probe.analysis.diagnosis.answer import Answer, answer
from probe.analysis.diagnosis.report import Report, load_report
from probe.analysis.ledger.build import AnalyzeOptions, StepLedger, TraceAnalysis, analyze
from probe.analysis.ledger.ranks import JobAnalysis, TraceFailure, job
from probe.analysis.ledger.timeline import StepTimeline, step_clock
from probe.analysis.records.results import BenchResults, load_results
from probe.analysis.regression import history
from probe.analysis.regression.compare import Comparison, compare
from probe.analysis.regression.history import ConfigInfo
from probe.analysis.roofline.devices import DEVICES, device
from probe.analysis.roofline.step import TokenFlags
from probe.analysis.trace import load_trace as parse
from probe.errors import ProbeError
from probe.explorer import figures, sources
from probe.explorer.figures.style import md, ms_text, printable, short
from probe.explorer.sources import Source

st.set_page_config(page_title="probe explorer", layout="wide")
LOAD_ERRORS = (ProbeError, OSError)  # probe's loaders turn bad input into a one-line ProbeError
HISTORY_WAIT_S = 5.0  # how long the app waits on a history a recording job holds, before saying so
NONE = "(none)"
SIDEBAR_CHARS = 30  # of a label the sidebar's boxes show at their default width
# A longer label is shown by its end (a run's or a trace's own name), not by the folder it shares with the others:
# laid out from the right, the text is cut on the left (and reads as usual while typing).
FIT_END_CSS = (
    "<style>.st-key-{key} input:not(:focus) {{ direction: rtl; text-align: left; text-overflow: ellipsis; }}</style>"
)


class Reading(NamedTuple):
    """How traces are read: `probe analyze`'s --steps, --part and --kernel-category, as the sidebar's text."""

    steps: str | None = None
    parts: tuple[str, ...] = ()
    kernel_categories: tuple[str, ...] = ()


class Roofline(NamedTuple):
    """What the sidebar says the roofline needs: a model (a preset, or a config.json or model folder under the
    root, resolved by sources.model_spec) and a device for traces that do not name theirs."""

    model: str | None = None
    device: str | None = None
    tokens: int | None = None  # --tokens, --batch, --context: what a step processed, when the trace does not say
    batch: int | None = None
    context: int | None = None


@dataclass(frozen=True)
class Run:
    results: BenchResults
    report: Report | None
    path: Path


@dataclass(frozen=True)
class Trace:
    analysis: TraceAnalysis
    path: Path


@dataclass(frozen=True)
class History:
    configs: list[ConfigInfo]
    path: Path


@dataclass(frozen=True)
class Job:
    job: JobAnalysis
    path: Path


Loaded = Run | Trace | History | Job


@dataclass(frozen=True)
class Page:
    """What every view is handed besides its source: the root, how traces are read, what the sidebar picked,
    and every label the sidebar lists (a link is offered only to those)."""

    root: Path
    reading: Reading
    source: Source
    baseline: Source | None
    listed: frozenset[str]
    roofline: Roofline = Roofline()


# ---- loading (cached; paths as bytes: a file name need not be UTF-8) --------------------------------------------


def key(path: Path) -> bytes:
    return os.fsencode(path)


def unkey(path: bytes) -> Path:
    return Path(os.fsdecode(path))


@st.cache_data(max_entries=16, show_spinner="Reading the run")
def load_run(path: bytes, stamp: tuple) -> tuple[BenchResults, Report | None]:
    return load_results(unkey(path)), load_report(unkey(path))


@st.cache_resource(max_entries=4, show_spinner="Parsing the trace")
def load_trace(path: bytes, stamp: tuple):
    return parse(unkey(path))


def analyze_options(root: bytes, path: bytes, reading: Reading) -> AnalyzeOptions:
    """`probe analyze`'s options as the sidebar gives them, with the profiler's cost per event from the sidecar."""
    meta = sources.trace_meta(unkey(root), unkey(path))
    cost = meta.event_cost if meta is not None else None
    return AnalyzeOptions.parse(reading.steps, reading.parts, reading.kernel_categories, cost)


@st.cache_resource(max_entries=16, show_spinner="Building the ledger")
def load_analysis(root: bytes, path: bytes, stamp: tuple, reading: Reading) -> TraceAnalysis:
    """Shared, not copied, between sessions and reruns (cache_resource): an analysis is never changed."""
    return analyze(load_trace(path, stamp), analyze_options(root, path, reading))


@st.cache_resource(max_entries=16, show_spinner="Diagnosing every step")
def load_answer(root: bytes, path: bytes, stamp: tuple, reading: Reading, roofline: Roofline) -> Answer:
    """The answer for a trace (probe.analysis.diagnosis.answer): never changed once made, so shared like the
    analysis."""
    trace = load_trace(path, stamp)
    analysis = load_analysis(root, path, stamp, reading)
    flags = TokenFlags(roofline.tokens, roofline.batch, roofline.context)
    meta = sources.trace_meta(unkey(root), unkey(path))
    contended = meta.contended_caveat if meta else None  # said first, as probe analyze says it
    return answer(trace, analysis, model=roofline.model, device_name=roofline.device, flags=flags, contended=contended)


@st.cache_resource(max_entries=64, show_spinner="Laying the step out on one clock")
def load_timeline(
    root: bytes, path: bytes, stamp: tuple, position: int, reading: Reading, window: tuple[int, int] | None
) -> StepTimeline:
    analysis = load_analysis(root, path, stamp, reading)
    options = analyze_options(root, path, reading)
    return step_clock(load_trace(path, stamp), analysis, position, options, window)


def _source_key(source: Source) -> tuple[bytes, str]:
    return os.fsencode(source.rel), source.kind


@st.cache_data(max_entries=16, show_spinner="Comparing", hash_funcs={Source: _source_key})
def load_comparison(root: bytes, base: Source, base_stamp: tuple, cur: Source, cur_stamp: tuple, reading: Reading):
    sides = [(s, load_source(unkey(root), s, reading)) for s in (base, cur)]
    return compare(*(_samples(unkey(root), s, x) for s, x in sides))


def _samples(root: Path, source: Source, loaded: Loaded):
    """What probe compare reads of a run or a trace; a trace's deviceProperties name its device without a sidecar."""
    if isinstance(loaded, Run):
        return sources.samples_for(root, source, loaded.results)
    if isinstance(loaded, Trace):
        devices = load_trace(key(loaded.path), sources.stamp(loaded.path)).devices
        return sources.samples_for(root, source, loaded.analysis, devices)
    raise ProbeError(f"{source.rel} is not a run or a trace: nothing to compare")


@st.cache_data(max_entries=8, show_spinner="Reading the history")
def load_history(path: bytes, stamp: tuple) -> list[ConfigInfo]:
    # Opened read-only and closed at once: while the app holds the file, no CI job can record.
    with history.connect(unkey(path), wait=HISTORY_WAIT_S) as con:
        return history.configs(con)


@st.cache_data(max_entries=16, show_spinner="Judging each run against the runs before it")
def load_trend(path: bytes, stamp: tuple, config_id: str, unit: str) -> pd.DataFrame:
    with history.connect(unkey(path), wait=HISTORY_WAIT_S) as con:
        return history.trend(con, config_id, unit)


@st.cache_data(max_entries=32, show_spinner=False)
def load_run_judgement(path: bytes, stamp: tuple, run_id: str):
    with history.connect(unkey(path), wait=HISTORY_WAIT_S) as con:
        return history.show(con, run_id)


@st.cache_data(max_entries=16, show_spinner="Reading the telemetry")
def load_telemetry(path: bytes, stamp: tuple, offset_ns: int | None = None) -> figures.telemetry.Telemetry:
    return figures.telemetry.read_telemetry(unkey(path), offset_ns)


def load_job(root: Path, folder: Path, reading: Reading) -> JobAnalysis:
    """The traces of a job folder, each analyzed (and cached) on its own, lined up as ranks
    (probe.analysis.ledger.ranks);
    a trace that cannot be read is named with its error."""
    analyses: list[TraceAnalysis | TraceFailure] = []
    for trace in sources.job_traces(root, folder):
        try:
            analyses.append(load_analysis(key(root), key(trace), sources.stamp(trace), reading))
        except LOAD_ERRORS as e:
            analyses.append(TraceFailure(trace.relative_to(root).as_posix(), str(e)))
    return job(analyses)


def load_source(root: Path, source: Source, reading: Reading) -> Loaded:
    """The typed result for a source of any kind; ProbeError for anything unusable."""
    path = sources.source_path(root, source)
    stamp = sources.stamp(path)
    if source.kind == "run":
        return Run(*load_run(key(path), stamp), path)
    if source.kind == "history":
        return History(load_history(key(path), stamp), path)
    if source.kind == "job":
        return Job(load_job(root, path, reading), path)
    return Trace(load_analysis(key(root), key(path), stamp, reading), path)


# ---- pieces several views share ---------------------------------------------------------------------------------


def show_table(frame: pd.DataFrame, key: str, style: Callable | None = None) -> None:
    """A table: a column that measured nothing (all None or NaN: a CPU trace's GPU columns) reads "-", numbers
    at 4 decimals; its text came from files, so it is made valid UTF-8 first (Arrow refuses lone surrogates).
    `style` adds a view's own styling."""
    unmeasured = {c: "-" for c in frame.columns if len(frame) and frame[c].isna().all()}
    text = [c for c in frame.columns if frame[c].dtype == object and c not in unmeasured]
    frame = frame.assign(**unmeasured, **{c: frame[c].map(_printable_text) for c in text})
    styler = frame.style.format(na_rep="-", precision=4)
    st.dataframe(style(styler) if style else styler, key=key, hide_index=True)


def _printable_text(value: object) -> object:
    return printable(value) if isinstance(value, str) else value


def show_alerts(comparison: Comparison, table_key: str, clean: str = "No regression.") -> None:
    """probe compare's verdict: its warnings, its alerts (or that there are none), its table and its notes."""
    for w in comparison.warnings:
        st.warning(md(w))
    if comparison.alerts:
        st.error(f"REGRESSION: {len(comparison.alerts)} alert(s)")
        for a in comparison.alerts:
            st.markdown(f"- **{md(a.key)}** {md(a.message)}")
    elif comparison.devices_differ:
        st.info("Not gated: the two sides ran on different devices (kernels compared by category, ops by name).")
    else:
        st.success(clean)
    show_table(figures.compare.comparison_frame(comparison), table_key)
    if comparison.changes:  # as probe compare lists them: new, grown, shrunk, removed, by short name
        listed = "\n".join(f"- {md(c.line)}" for c in comparison.changes)
        st.markdown(f"**What changed, per step**\n\n{listed}")
    for note in comparison.notes:
        st.caption(md(note))


def show_telemetry(root: Path, folder: Path) -> None:
    """Telemetry samples (probe.analysis.records.telemetry) recorded in this folder, if any: one panel a figure."""
    files = sources.telemetry_files(root, folder)
    if files:
        st.subheader("Telemetry samples")
    for f in files:
        try:
            telemetry = load_telemetry(key(f), sources.stamp(f))
            st.plotly_chart(figures.telemetry.telemetry_figure(telemetry), key=f"telemetry_{printable(f.name)}")
        except ProbeError as e:
            st.error(md(e))


def show_trace_telemetry(trace: Trace, root: Path) -> None:
    """The samples recorded with this trace, on the trace's clock, with its steps shaded behind them."""
    samples = sources.trace_telemetry(root, trace.path)
    if samples is None:
        return
    st.subheader("Telemetry during this trace")
    try:
        offset = figures.telemetry.telemetry_offset_ns(sources.trace_meta(root, trace.path), trace.analysis)
        telemetry = load_telemetry(key(samples), sources.stamp(samples), offset)
        chart = figures.telemetry.telemetry_figure(telemetry, trace.analysis.steps)
        st.plotly_chart(chart, key="trace_telemetry_chart")
        if offset is None:
            st.caption("No clock anchor in the sidecar, so the samples are drawn from their own start.")
    except ProbeError as e:
        st.error(md(e))


def pick_step(
    analysis: TraceAnalysis, key: str, label: str, everything: str | None = None, first: StepLedger | None = None
) -> StepLedger | None:
    """A step picker over the steps themselves (shown as "position: name"), opening on `first`; with
    `everything`, None first, for the whole scope."""
    options: list[StepLedger | None] = ([None] if everything else []) + list(analysis.steps)
    whole = everything or ""  # offered only with `everything`
    return st.selectbox(
        label,
        options,
        index=options.index(first) if first is not None else 0,
        key=key,
        bind="query-params",
        format_func=lambda s: whole if s is None else printable(figures.step.step_label(s)),
    )


# ---- the views --------------------------------------------------------------------------------------------------


def show_diagnosis(loaded: Run | Trace, page: Page) -> None:
    """The answer first: for a trace, what bounds its median step (and the median step of each other kind), the
    roofline beside it and what to fix first; for a run, its predictions and claims, and each trace's verdict."""
    if isinstance(loaded, Run):
        return show_run_diagnosis(loaded, page)
    result = trace_answer(loaded, page)
    if result is None:
        return
    d = result.diagnosis.median
    if d is None:
        st.info("No step in this trace, so no verdict: name the steps with --steps in the sidebar.")
        return
    analysis = loaded.analysis
    position = result.diagnosis.steps.index(d)
    step = analysis.steps[position]
    for caveat in d.caveats:
        st.warning(md(caveat))
    over = "decode step" if analysis.summary.steps_used == "decode" else "step"
    st.subheader(md(f"{figures.diagnosis.bound_text(d)}: the median {over}"))
    st.markdown(md(d.headline))
    st.markdown("\n".join(f"- {md(line)}" for line in d.lines))
    roofline = result.rooflines.get(position)
    st.plotly_chart(figures.diagnosis.step_figure(d, roofline), key="diagnosis_chart")
    one_step = (
        f"{page.source.link}&view=One+step&step={urllib.parse.quote_plus(printable(figures.step.step_label(step)))}"
    )
    st.caption(
        "The host window by what ran (probe's mechanism partition), its sync wait split into waiting on this "
        "trace's GPU work and waiting on work the trace does not hold, against the GPU's busy time"
        + (" and the roofline's two terms" if roofline else "")
        + f". [See this step on one clock]({one_step})."
    )
    others = [(kind, k) for kind, k in result.diagnosis.by_kind.items() if k is not d]
    for kind, k in others:
        with st.expander(md(f"The median {kind} step: {figures.diagnosis.bound_text(k)}")):
            st.markdown(md(k.headline))
            st.markdown("\n".join(f"- {md(line)}" for line in k.lines))
    st.subheader("The roofline beside the step")
    if roofline is not None:
        show_table(figures.diagnosis.roofline_frame(roofline), "roofline_table")
        st.markdown(md(roofline.departure))
        for note in roofline.notes:
            st.caption(md(note))
    elif page.roofline.model is None:
        st.caption(
            "Name the model in the sidebar (a preset, or a config.json or model folder under the root), and the "
            "device when the trace does not say, for the bytes and FLOPs the step must move and do."
        )
    st.subheader("What to fix first")
    fixes = figures.diagnosis.what_if_frame(d)
    if fixes.empty:
        st.caption("No change the model of the step knows would shorten it.")
    else:
        show_table(fixes, "what_if_table")
    for note in result.notes:
        st.caption(md(note))


def trace_answer(trace: Trace, page: Page) -> Answer | None:
    """The trace's answer with the sidebar's model and device; without them when they cannot be used (said)."""
    stamp = sources.stamp(trace.path)
    args = key(page.root), key(trace.path), stamp, page.reading
    try:
        return load_answer(*args, page.roofline)
    except LOAD_ERRORS as e:
        st.error(f"No roofline: {md(e)}")
    try:
        return load_answer(*args, Roofline())
    except LOAD_ERRORS as e:
        st.error(f"Cannot diagnose {md(page.source.rel)}: {md(e)}")
        return None


def show_run_diagnosis(run: Run, page: Page) -> None:
    """As `probe run` prints it: the write-ups' claims checked on this run, each cell's prediction against its
    measurement, and the verdict on each trace the run profiled."""
    report = run.report
    if report is None:
        st.info("No report.json in this folder (a `probe bench` run): `probe run` writes the predictions and claims.")
    else:
        said = {True: "supported", False: "not supported", None: "not measured"}
        st.subheader("The write-ups' claims, on this run")
        st.markdown(
            "\n".join(
                f"- **{said[v.supported]}**: {md(v.claim)} ({md(v.source)}). {md(v.evidence)}" for v in report.verdicts
            )
        )
        st.subheader("Prediction against measurement, cell by cell")
        st.plotly_chart(figures.diagnosis.predictions_figure(report), key="predictions_chart")
        m = report.machine
        if m is not None:  # None: measuring the machine failed (report.failed says why), so nothing was predicted
            st.caption(
                md(
                    f"Each cell's ITL over max(host floor, traffic / bandwidth): floor {m.floor_ms:.2f} ms "
                    f"({m.floor_source}), bandwidth {m.bandwidth_bytes_s / 1e9:.1f} GB/s ({m.bandwidth_source}). "
                    "At 1 the prediction holds; the last column names the term the gap points at."
                )
            )
        show_table(figures.diagnosis.predictions_frame(report), "predictions_table")
        for note in report.notes:
            st.caption(md(note))
    folder = run.path / "traces" if run.path.is_dir() else None
    traces = sources.job_traces(page.root, folder) if folder is not None and folder.is_dir() else []
    if not traces:
        return
    st.subheader("Each profiled trace's verdict")
    lines = []
    for path in traces:
        source = sources.source_of(page.root, path)
        try:
            result = load_answer(key(page.root), key(path), sources.stamp(path), Reading(), Roofline())
        except LOAD_ERRORS as e:
            lines.append(f"- {md(path.name)}: cannot read it ({md(e)})")
            continue
        d = result.diagnosis.median
        where = f"[{md(path.name)}]({source.link}&view=Diagnosis)" if source is not None else md(path.name)
        verdict = "no step" if d is None else f"**{md(figures.diagnosis.bound_text(d))}**. {md(d.headline)}"
        lines.append(f"- {where}: {verdict}")
    st.markdown("\n".join(lines))


def show_op_roofline(trace: Trace, page: Page) -> None:
    """Every (op, shapes) that launched kernels against the device's roofs (probe.analysis.roofline.ops)."""
    result = trace_answer(trace, page)
    if result is None:
        return
    ops = result.op_roofline
    modelled = [o for o in ops if o.intensity and o.tflops_s_median]
    dev = device(result.device) if result.device else None
    if not modelled:
        st.info(
            "No op here has a FLOP and byte model with recorded shapes (a trace recorded with "
            "record_shapes=True, on a GPU), so there is nothing to hold against the roofs."
        )
    else:
        st.plotly_chart(figures.diagnosis.op_roofline_figure(ops, dev), key="op_roofline_chart")
        roof = f"{dev.name}'s roofs" if dev else "no roofs (name the device in the sidebar)"
        st.caption(
            f"Each (op, input shapes) at its median call: FLOPs and bytes per call from TraceLens's formulas over "
            f"the recorded shapes, against {md(roof)}; a marker's area is its share of the kernel time. An op far "
            "below the roof over its intensity is where the kernels leave speed behind."
        )
    if ops:
        show_table(figures.diagnosis.op_roofline_frame(ops), "op_roofline_table")
    for note in result.notes:
        st.caption(md(note))


def show_sweep(run: Run, page: Page) -> None:
    results, report = run.results, run.report
    st.subheader(md(f"{results.config.model} {results.dtype} on {results.env.device_name or '?'}"))
    st.plotly_chart(figures.sweep.sweep_figure(results, report), key="sweep_chart")
    frame = figures.sweep.sweep_frame(results)
    if frame["mismatch"].any():
        st.error(
            "Tokens differ from naive's for: "
            + md(", ".join(f"{r.line} p{r.prompt_tokens}" for r in frame[frame["mismatch"]].itertuples()))
        )
    if report is None:
        st.caption(
            "No report.json in this folder (a `probe bench` run), so no prediction lines: `probe run` writes one."
        )
    elif (m := report.machine) is not None:  # None: measuring the machine failed, so no prediction lines
        st.caption(
            f"Dashed on ITL: the host floor, {m.floor_ms:.2f} ms ({md(m.floor_source)}), and the "
            f"bandwidth roofline, the step's memory traffic at {m.bandwidth_bytes_s / 1e9:.1f} GB/s "
            f"({md(m.bandwidth_source)}). Dash-dot on tokens/s: the prediction they make together, "
            "1000 / max(floor, traffic)."
        )
    if not results.complete:
        st.warning("An interrupted sweep (complete: false): only its finished cells are here.")
    for f in results.failed:
        st.error(md(f"{f.label} failed on {f.host or '?'} {f.device or ''}: {f.error}"))
    show_table(frame.drop(columns=["mismatch"]), "sweep_table")
    show_telemetry(page.root, run.path if run.path.is_dir() else run.path.parent)


def show_ledger(trace: Trace, page: Page) -> None:
    analysis = trace.analysis
    s = analysis.summary
    cols = st.columns(4)
    st.caption(f"{len(analysis.steps)} step(s), found by {md(analysis.step_rule)}.")
    cols[0].metric("step p50", f"{s.step_p50_us / 1e3:.3f} ms")
    cols[1].metric(analysis.dispatch + " / step", f"{s.launches_per_step:g}")
    if analysis.on_gpu:
        cols[2].metric("GPU busy / GPU window", f"{100 * s.busy_fraction:.1f} %")
    else:
        cols[2].metric("unattributed", f"{100 * s.unattributed_share:.1f} % of wall")
    cols[3].metric(
        "Python frames" if s.python_share else "cache bookkeeping",
        f"{100 * (s.python_share or s.cache_share):.1f} % of wall",
    )
    st.plotly_chart(figures.ledger.ledger_figure(analysis), key="ledger_chart")
    st.caption(
        "Each step's wall time two ways, each adding up to it: its left bar by purpose (what the step was doing), "
        "the next by mechanism (what code ran: the innermost event of each nanosecond decides); the right bar, on "
        "a GPU trace, is GPU busy and idle time. The line is " + figures.ledger.dispatch_label(analysis) + "."
    )
    show_table(figures.ledger.ledger_frame(analysis), "ledger_table")
    for w in analysis.warnings:
        st.warning(md(w))
    show_trace_telemetry(trace, page.root)


def show_one_step(trace: Trace, page: Page) -> None:
    analysis = trace.analysis
    decode = next((s for s in analysis.steps if s.kind == "decode"), None)  # open there, not on prefill
    step = pick_step(analysis, "step", "Step", first=decode)
    if step is None:  # no step to pick
        st.info("No step in this trace: name the steps with --steps in the sidebar.")
        return
    cols = st.columns(5)
    cols[0].metric("wall (host window)", ms_text(step.wall_ns))
    cols[1].metric("launches" if analysis.on_gpu else "top-level ops", step.dispatched)
    cols[2].metric("host work (wall - sync wait)", ms_text(step.host_work_ns))
    if analysis.on_gpu:
        cols[3].metric("GPU busy", ms_text(step.gpu_busy_ns))
        cols[4].metric("step read whole", ms_text(step.span_ns))
    else:
        cols[3].metric("unattributed", ms_text(step.mechanism_ns["unattributed"]))
        cols[4].metric("cache bookkeeping", ms_text(step.cache_ns))
    st.plotly_chart(figures.step.partitions_figure(step, analysis.user_parts), key="partitions_chart")
    st.caption(
        "The step's wall two ways, each adding up to it: by purpose (what it was doing) and by mechanism (what "
        "code ran: the innermost event of each nanosecond decides)."
    )
    apply_clicks()
    window = pick_window(step)
    stamp = sources.stamp(trace.path)
    tl = load_timeline(key(page.root), key(trace.path), stamp, step.position, page.reading, window)
    link = pick_link(tl)
    event = st.plotly_chart(
        figures.step.timeline_figure(tl, [link] if link is not None else ()),
        key="timeline_chart",
        on_select="rerun",
        selection_mode="points",
    )
    clicked(event, tl)
    st.caption(
        md(
            "One clock, the way Perfetto draws it: the step's thread by kind and depth (each event coloured by the "
            "part its time feeds), where it blocked on the device (external wait on top), the other busy threads, "
            "this step's GPU idle gaps by cause and one lane a stream (kernels by category; faded: other steps' "
            "work). Dotted: the host window's edges. Click a kernel (or pick one) for the arrow from its launch; "
            "click a hatched bar to zoom into it. "
        )
        + md(figures.step.merged_text(tl))
    )
    linked = len(tl.links([link])) if link is not None else 0
    if linked > figures.step.MAX_LINKS:
        st.caption(f"Arrows drawn to the first {figures.step.MAX_LINKS} of the {linked} GPU ops this call launched.")
    for note in tl.notes:
        st.caption(md(note))
    frames, ops = step.top_frames, step.top_ops
    if frames or ops:
        left, right = st.columns(2)
        if frames:
            left.markdown("**Python frames by innermost self time**, whatever purpose part it falls in")
            with left:
                show_table(figures.ops.frames_frame(frames), "step_frames_table")
        if ops:
            right.markdown("**Ops by dispatch (innermost self) time**")
            with right:
                show_table(figures.ops.top_ops_frame(ops), "step_ops_table")
    with st.expander("The drawn bars, as a table"):
        show_table(figures.step.timeline_frame(tl), "timeline_table")
    show_trace_telemetry(trace, page.root)


WINDOW_KEY, LINK_KEY, CLICK_KEY, PENDING_KEY = "window", "link", "timeline_clicked", "timeline_pending"


def pick_window(step: StepLedger) -> tuple[int, int] | None:
    """The window of the step to draw, in ms from its start (the URL keeps it); None for the whole step read whole.
    A new step opens whole."""
    span = step.span_ns / 1e6
    if st.session_state.get("window_of") != step.position:
        st.session_state["window_of"] = step.position
        st.session_state.pop(WINDOW_KEY, None)
    lo, hi = st.slider(
        "Window (ms from the step's start)",
        0.0,
        span,
        (0.0, span),
        step=max(span / 2000, 1e-6),
        format="%.3f",
        key=WINDOW_KEY,
        bind="query-params",
    )
    if lo <= 0 and hi >= span:
        return None
    return round(lo * 1e6), round(hi * 1e6)


def pick_link(tl: StepTimeline) -> int | None:
    """The GPU op, or the launch call (all it launched), whose launch-to-kernel arrows are drawn: picked here, or by
    a click on the timeline."""
    text: dict[int, tuple[int, str]] = {}
    launched: dict[int, int] = {}
    for o in tl.ops:
        if o.call_lane >= 0 and o.own and o.call_start_ns is not None:  # a drawn call has its start
            text[o.row] = (o.start_ns, f"{o.start_ns / 1e6:+.3f} ms {o.category}: {o.name}")
            launched[o.call_row] = launched.get(o.call_row, 0) + 1
            text.setdefault(o.call_row, (o.call_start_ns, ""))
    for o in tl.ops:
        if o.call_row in launched and not text[o.call_row][1]:
            n = launched[o.call_row]
            what = f"its {n} GPU ops" if n > 1 else "its GPU op"
            start = text[o.call_row][0]  # the call's start, as the op that first named it set it
            text[o.call_row] = (start, f"{start / 1e6:+.3f} ms launch call {o.call_name}: {what}")
    options: list[int | None] = [None, *sorted(text, key=lambda r: (text[r][0], r))]
    if st.session_state.get(LINK_KEY) not in options:
        st.session_state.pop(LINK_KEY, None)
    return st.selectbox(
        "Link a GPU op to its launch call",
        options,
        key=LINK_KEY,
        bind="query-params",
        format_func=lambda r: "(none)" if r is None else printable(short(text[r][1], 140)),
    )


def clicked(event, tl: StepTimeline) -> None:
    """A click on the timeline: a hatched (merged) bar zooms into it, a GPU op or a launch call links; each click
    is acted on once (the selection stays in the event until the next)."""
    bar = figures.step.clicked_bar(event)
    if bar is None or bar == st.session_state.get(CLICK_KEY):
        return
    st.session_state[CLICK_KEY] = bar
    row, start, dur, count = bar
    change: dict[str, object]
    if count > 1:
        pad = max(dur // 10, tl.resolution_ns)
        change = {WINDOW_KEY: (max(0, start - pad) / 1e6, min(tl.span_ns, start + dur + pad) / 1e6)}
    elif any(o.row == row or o.call_row == row for o in tl.ops):
        change = {LINK_KEY: row}
    else:
        return
    st.session_state[PENDING_KEY] = change  # widgets drawn in this run take it at the top of the next
    st.rerun()


def apply_clicks() -> None:
    """What the last click asked of the window and the link, set before their widgets are drawn."""
    for name, value in st.session_state.pop(PENDING_KEY, {}).items():
        st.session_state[name] = value


def steady_scope(analysis: TraceAnalysis) -> str:
    """The whole-trace scope as the pickers name it: the steps the summary is taken over."""
    s = analysis.summary
    kind = "decode " if s.steps_used == "decode" else ""
    return f"its one {kind}step" if s.steps == 1 else f"all {s.steps} {kind}steps"


def show_top_ops(trace: Trace, page: Page) -> None:
    analysis = trace.analysis
    step = pick_step(analysis, "top_ops_scope", "Over", everything=steady_scope(analysis))
    ops = analysis.summary.top_ops if step is None else step.top_ops
    if not ops:
        st.info("No cpu_ops in this scope, so no host time by op.")
    else:
        st.plotly_chart(figures.ops.top_ops_figure(ops), key="top_ops_chart")
        show_table(figures.ops.top_ops_frame(ops), "top_ops_table")
    frames = analysis.python_frames[:20] if step is None else step.top_frames
    if frames:
        st.subheader("Python frames by self time")
        st.caption(
            "Each frame's innermost self time: host time in which it is the innermost Python frame, op or runtime "
            "call (the mechanism partition's python, and its sync wait for a synchronizing frame), whatever "
            "purpose part the time falls in."
        )
        st.plotly_chart(figures.ops.frames_figure(frames), key="frames_chart")
        show_table(figures.ops.frames_frame(frames), "frames_table")


def show_kernels(trace: Trace, page: Page) -> None:
    analysis = trace.analysis
    if not analysis.kernels:
        st.info("No GPU work in this trace, so no kernels: a CPU trace dispatches aten ops (see Top ops).")
        return
    st.plotly_chart(figures.kernels.kernel_category_figure(analysis), key="kernel_categories_chart")
    st.caption(
        "Each step's GPU time by kernel category (probe/analysis/ledger/kernels.py; add your own in the sidebar); "
        "the line is the step's GPU busy time."
    )
    step = pick_step(analysis, "kernels_scope", "Top kernels over", everything="whole trace")
    stats = analysis.kernels[:20] if step is None else step.top_kernels
    st.plotly_chart(figures.kernels.kernels_figure(stats), key="kernels_chart")
    show_table(figures.kernels.kernels_frame(stats), "kernels_table")


def show_history(hist: History, page: Page) -> None:
    if not hist.configs:
        st.info("No runs recorded in this history yet: `probe bench`, `run`, `baseline` and `profile` append them.")
        return
    config = st.selectbox(
        "Configuration",
        figures.history.by_most_runs(hist.configs),
        key="history_config",
        bind="query-params",
        format_func=lambda c: printable(c.label),
    )
    unit = st.selectbox(
        "Cell, or profiled step kind", config.units, key="history_unit", bind="query-params", format_func=printable
    )
    stamp = sources.stamp(hist.path)
    try:
        trend = load_trend(key(hist.path), stamp, config.config_id, unit)
    except LOAD_ERRORS as e:
        st.error(f"Cannot read {md(page.source.rel)}: {md(e)}")
        return
    event = st.plotly_chart(
        figures.history.history_figure(trend, unit), key="history_chart", on_select="rerun", selection_mode="points"
    )
    st.caption(
        "One point a run of this configuration, oldest first (x: commit, + when tracked files were modified, and "
        "the time in UTC). Marked: `probe history check` flagged the run against the runs before it in its "
        "environment, red on the exact launch counts, orange on timings, which compare separate sessions (settle "
        "those with `probe ab`). Click a point to open that run."
    )
    run_ids = list(reversed(trend["run_id"]))
    shown = figures.history.clicked_run(event)
    clicked = dict(zip(figures.style.labels(run_ids), run_ids, strict=True)).get(shown) if shown else None
    if clicked and clicked != st.session_state.get("history_clicked"):  # a new click, not the last one again
        st.session_state["history_clicked"] = clicked
        st.session_state["history_run"] = clicked
    run_id = st.selectbox("Run", run_ids, key="history_run", bind="query-params", format_func=printable)
    judgement = load_run_judgement(key(hist.path), stamp, run_id)
    run = judgement.run
    st.subheader(md(f"{run.run_id} @ {run.short_commit}"))
    st.caption(
        md(
            f"probe {run.command} at {run.recorded_at:%Y-%m-%d %H:%M:%S} UTC on {run.device_name or '?'}, torch "
            f"{run.torch}, transformers {run.transformers}; from {run.source or '-'}"
        )
    )
    recorded = sources.source_of(page.root, run.source)
    if recorded is not None and recorded.label in page.listed:  # its folder or trace is still here: link to it
        st.markdown(f"[Open {md(recorded.rel)} in the explorer]({recorded.link})")
    if judgement.comparison is None:
        st.info(judgement.reason)
    else:
        previous = judgement.previous
        st.markdown(md(f"Against its predecessor, {previous.run_id} @ {previous.short_commit}:"))
        show_alerts(judgement.comparison, "history_compare_table", "No regression against its predecessor.")
    with st.expander("Every run of this configuration"):
        show_table(figures.history.history_runs_frame(trend), "history_table")


def show_ranks(loaded: Job, page: Page) -> None:
    """Each rank's wall per step and the straggler, when probe.analysis.ledger.ranks says the folder's traces are the
    ranks
    of one job (same steps, a distinct rank for each); otherwise the folder's traces, each linked, and why."""
    result = loaded.job
    for f in result.failed:
        st.error(f"Cannot read {md(f.source)}: {md(f.error)}")
    if not result.one_job:
        st.info(md(f"These traces are not the ranks of one job: {result.not_a_job}. Open each on its own:"))
        for trace in result.traces:
            opened = sources.source_of(page.root, trace.source)
            if opened is not None:
                st.markdown(f"- [{md(opened.rel)}]({opened.link})")
        return
    g = result.straggler
    if g is None:  # None for a job exactly when it has no step (probe.analysis.ledger.ranks)
        st.info("No step to compare across these traces.")
        return
    cols = st.columns(3)
    cols[0].metric("ranks", len(result.ranks))
    cols[1].metric("straggler", f"rank {g.rank}")
    cols[2].metric("slowest in", f"{g.slowest_steps} of {g.steps} steps")
    st.plotly_chart(figures.ranks.ranks_figure(result), key="ranks_chart")
    st.caption(
        f"Each rank's wall time per step (steps matched by position; probe analyze {md(page.source.rel)}/ gives the "
        f"same). Circled: the slowest rank of each step. Rank {g.rank} was the slowest in {g.slowest_steps} of "
        f"{g.steps} steps, by {g.median_trail_pct:.1f}% on the median rank in the median of those steps."
    )
    show_table(figures.ranks.ranks_frame(result), "ranks_table")
    for rank, trace in zip(result.ranks, result.traces, strict=True):
        opened = sources.source_of(page.root, trace.source)
        if opened is not None:
            st.markdown(f"rank {rank}: [{md(opened.rel)}]({opened.link})")
    for w in result.warnings:
        st.warning(md(w))


def show_compare(loaded: Run | Trace, page: Page) -> None:
    if page.baseline is None:
        return pick_a_baseline(page)
    try:
        base = load_source(page.root, page.baseline, page.reading)
    except LOAD_ERRORS as e:
        st.error(f"Cannot show the baseline {md(page.baseline.rel)}: {md(e)}")
        return
    names = page.baseline.rel, page.source.rel
    if isinstance(loaded, Run) and isinstance(base, Run):
        frame = figures.compare.run_compare_frame(base.results, loaded.results)
        if frame.empty:
            st.warning("The two runs share no cell (engine, prompt, new tokens, batch).")
            return
        st.plotly_chart(figures.compare.run_compare_figure(frame, *names), key="compare_chart")
    elif isinstance(loaded, Trace) and isinstance(base, Trace):
        frame = figures.compare.trace_compare_frame(base.analysis, loaded.analysis)
        st.plotly_chart(figures.compare.trace_compare_figure(frame, *names), key="compare_chart")
        st.caption(
            "Means per steady-state step (decode steps when the trace has them); the host categories add "
            "up to the wall time."
        )
    show_table(frame, "compare_table")


def show_alerts_view(loaded: Run | Trace, page: Page) -> None:
    if page.baseline is None:
        return pick_a_baseline(page)
    stamps = (sources.stamp(sources.source_path(page.root, s)) for s in (page.baseline, page.source))
    try:
        result = load_comparison(key(page.root), page.baseline, next(stamps), page.source, next(stamps), page.reading)
    except LOAD_ERRORS as e:
        st.error(f"probe compare cannot compare these: {md(e)}")
        return
    show_alerts(result, "alerts_table")


def pick_a_baseline(page: Page) -> None:
    other = "run" if page.source.kind == "run" else "trace"
    st.info(f"Pick a baseline in the sidebar: another {other} to hold this one against.")


VIEWS: dict[str, Callable] = {
    "Diagnosis": show_diagnosis,
    "Sweep": show_sweep,
    "Step ledger": show_ledger,
    "One step": show_one_step,
    "Op roofline": show_op_roofline,
    "Kernels": show_kernels,
    "Top ops": show_top_ops,
    "Compare": show_compare,
    "Alerts": show_alerts_view,
    "History": show_history,
    "Ranks": show_ranks,
}
VIEWS_OF = {  # the views each kind of source has, the first one opening
    "run": ("Diagnosis", "Sweep", "Compare", "Alerts"),
    "trace": ("Diagnosis", "Step ledger", "One step", "Op roofline", "Kernels", "Top ops", "Compare", "Alerts"),
    "history": ("History",),
    "job": ("Ranks",),
}


# ---- the sidebar, then the chosen view --------------------------------------------------------------------------


def sidebar_reading() -> Reading:
    """The `probe analyze` flags typed in the sidebar; each regex reaches AnalyzeOptions.parse as it is written."""
    with st.sidebar.expander("Reading the trace (probe analyze flags)"):
        steps = st.text_input("Steps: ranges matching (--steps REGEX)", key="steps", bind="query-params")
        parts = st.text_area("Parts: NAME=REGEX, one a line (--part)", key="parts", bind="query-params")
        categories = st.text_area(
            "Kernel categories: CATEGORY=REGEX, one a line", key="kernel_categories", bind="query-params"
        )
    lines = lambda text: tuple(x.strip() for x in text.splitlines() if x.strip())  # noqa: E731
    return Reading(steps.strip() or None, lines(parts), lines(categories))


def sidebar_roofline(root: Path) -> Roofline:
    """The model and the device the roofline needs, as typed in the sidebar (the URL keeps them)."""
    with st.sidebar.expander("Roofline (a model, and a device)"):
        text = st.text_input(
            "Model: a preset, or a config.json or model folder under the root", key="model", bind="query-params"
        )
        names = [NONE, *(d.name for d in DEVICES)]
        name = st.selectbox("Device, when the trace does not name its own", names, key="device", bind="query-params")
        st.caption("What a step processed, when its engine marker does not say (--tokens, --batch, --context):")
        counts = [
            st.number_input(what, min_value=least, value=None, step=1, key=box, bind="query-params")
            for what, box, least in (
                ("new tokens a step", "tokens", 1),
                ("sequences", "batch", 1),
                ("cached context a sequence", "context", 0),
            )
        ]
    try:
        model = sources.model_spec(root, text)
    except LOAD_ERRORS as e:
        st.sidebar.error(f"Model: {md(e)}")
        model = None
    return Roofline(model, None if name == NONE else name, *(None if c is None else int(c) for c in counts))


def main() -> None:
    root = sources.app_root(sys.argv, os.environ)
    st.sidebar.title("probe explorer")
    st.sidebar.caption(f"root: {md(root)}")
    if not root.is_dir():
        st.error(f"The root {md(root)} is not a folder. Start the app with `probe app --root DIR`.")
        st.stop()
    found, truncated = sources.list_sources(root)
    if not found:
        st.info(
            f"Nothing to show under {md(root)}: no run folders (results.json), no traces (.trace.json, .json.gz, "
            ".sqlite) and no run history (.duckdb). Record some with `probe run` or `probe profile`, or point the "
            "app elsewhere with `probe app --root DIR`."
        )
        st.stop()
    if truncated:
        st.sidebar.warning(f"Showing the first {len(found)} files only: pick a narrower --root.")
    by_label = {s.label: s for s in found}
    source = st.sidebar.selectbox(
        "Run or trace", list(by_label.values()), key="source", bind="query-params", format_func=_source_label
    )
    others = [s for s in found if s.kind == source.kind and s != source and s.kind not in ("history", "job")]
    baseline = st.sidebar.selectbox(
        "Baseline (for Compare and Alerts)",
        [None, *others],
        key="baseline",
        bind="query-params",
        format_func=_source_label,
    )
    for box, picked in (("source", source), ("baseline", baseline)):
        if len(_source_label(picked)) > SIDEBAR_CHARS:  # a short one reads whole (and keeps its "." at the end)
            st.html(FIT_END_CSS.format(key=box))
    reading = sidebar_reading() if source.kind in ("trace", "job") else Reading()
    roofline = sidebar_roofline(root) if source.kind == "trace" else Roofline()
    chosen = st.radio(
        "View", VIEWS_OF[source.kind], key="view", bind="query-params", horizontal=True, label_visibility="collapsed"
    )
    try:
        loaded = load_source(root, source, reading)
    except LOAD_ERRORS as e:
        st.error(f"Cannot show {md(source.rel)}: {md(e)}")
        st.stop()
    VIEWS[chosen](loaded, Page(root, reading, source, baseline, frozenset(by_label), roofline))


def _source_label(source: Source | None) -> str:
    return NONE if source is None else source.label


main()
