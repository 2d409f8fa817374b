"""probe's explorer: where each step goes, for the runs and traces under one folder.

    streamlit run app.py -- --root DIR      (or: probe app --root DIR; or PROBE_APP_ROOT=DIR)

A flat script over probe's typed results: it loads (cached on path + size + mtime), calls probe functions and
renders what probe.explorer.figures shapes. It holds no analysis. Every file it reads lies under the root.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import streamlit as st

from probe.analysis import history
from probe.analysis.compare import compare
from probe.analysis.job import TraceFailure, job
from probe.analysis.ledger import AnalyzeOptions, analyze, step_timeline
from probe.analysis.report import load_report
from probe.analysis.results import load_results
from probe.analysis.trace import load_trace as parse
from probe.errors import ProbeError
from probe.explorer import figures, sources

st.set_page_config(page_title="probe explorer", layout="wide")
LOAD_ERRORS = (ProbeError, OSError)  # probe's loaders turn bad input into a one-line ProbeError
HISTORY_WAIT_S = 5.0  # how long the app waits on a history a recording job holds, before saying so


def md(value) -> str:
    """Any text the app did not write (file names, model names, error messages) as plain text in Markdown."""
    return figures.md_escape(str(value))


@st.cache_data(max_entries=16, show_spinner="Reading the run")
def load_run(path: str, stamp: tuple):
    return load_results(path), load_report(Path(path))


@st.cache_resource(max_entries=4, show_spinner="Parsing the trace")
def load_trace(path: str, stamp: tuple):
    return parse(path)


@st.cache_data(max_entries=16, show_spinner="Building the ledger")
def load_analysis(path: str, stamp: tuple, how: tuple = ()):
    """`how`: the sidebar's (steps regex, parts, kernel categories), the `probe analyze` flags as text."""
    steps, parts, categories = how or (None, (), ())
    meta = sources.trace_meta(ROOT, Path(path))
    options = AnalyzeOptions.parse(steps, parts, categories, meta.event_cost if meta else None)
    return analyze(load_trace(path, stamp), options)


@st.cache_data(max_entries=64, show_spinner=False)
def load_timeline(path: str, stamp: tuple, position: int, how: tuple = ()):
    return step_timeline(load_trace(path, stamp), load_analysis(path, stamp, how).step(position))


@st.cache_data(max_entries=16, show_spinner="Comparing")
def load_comparison(root: str, base_rel: str, base_stamp: tuple, cur_rel: str, cur_stamp: tuple, kind: str):
    root_path = Path(root)
    sides = [sources.Source(rel, kind) for rel in (base_rel, cur_rel)]
    loaded = [load_source(root_path, s)[0] for s in sides]
    return compare(*(sources.samples_for(root_path, s, x) for s, x in zip(sides, loaded, strict=True)))


@st.cache_data(max_entries=8, show_spinner="Reading the history")
def load_history(path: str, stamp: tuple):
    # Opened read-only and closed at once: while the app holds the file, no CI job can record.
    with history.connect(path, wait=HISTORY_WAIT_S) as con:
        return history.configs(con)


@st.cache_data(max_entries=16, show_spinner="Judging each run against the runs before it")
def load_trend(path: str, stamp: tuple, config_id: str, unit: str):
    with history.connect(path, wait=HISTORY_WAIT_S) as con:
        return history.trend(con, config_id, unit)


@st.cache_data(max_entries=32, show_spinner=False)
def load_run_judgement(path: str, stamp: tuple, run_id: str):
    with history.connect(path, wait=HISTORY_WAIT_S) as con:
        return history.show(con, run_id)


@st.cache_data(max_entries=16, show_spinner=False)
def load_telemetry(path: str, stamp: tuple, offset_ns: int | None = None):
    return figures.telemetry_frame(Path(path), offset_ns)


def load_job(root: Path, folder: Path):
    """The traces of a job folder, each analyzed (and cached) on its own, lined up as ranks (probe.analysis.job);
    a trace that cannot be read is named with its error."""
    analyses = []
    for trace in sources.job_traces(root, folder):
        try:
            analyses.append(load_analysis(str(trace), sources.stamp(trace), HOW))
        except LOAD_ERRORS as e:
            analyses.append(TraceFailure(trace.relative_to(root).as_posix(), str(e)))
    return job(analyses)


def load_source(root, source: sources.Source):
    """(results or analysis, report or None, path) for a source; ProbeError for anything unusable."""
    path = sources.source_path(root, source)
    if source.kind == "run":
        results, report = load_run(str(path), sources.stamp(path))
        return results, report, path
    if source.kind == "history":
        return load_history(str(path), sources.stamp(path)), None, path
    if source.kind == "job":
        return load_job(root, path), None, path
    return load_analysis(str(path), sources.stamp(path), HOW), None, path


def show_telemetry(folder) -> None:
    """Telemetry samples (probe.analysis.telemetry) recorded in this folder, if any: one panel a figure."""
    files = sources.telemetry_files(ROOT, folder)
    if files:
        st.subheader("Telemetry samples")
    for f in files:
        try:
            st.plotly_chart(
                figures.telemetry_figure(load_telemetry(str(f), sources.stamp(f))), key=f"telemetry_{f.name}"
            )
        except ProbeError as e:
            st.error(md(e))


def show_trace_telemetry(path: Path, analysis) -> None:
    """The samples recorded with this trace, on the trace's clock, with its steps shaded behind them."""
    samples = sources.trace_telemetry(ROOT, path)
    if samples is None:
        return
    st.subheader("Telemetry during this trace")
    try:
        offset = figures.telemetry_offset_ns(sources.trace_meta(ROOT, path), analysis)
        frame = load_telemetry(str(samples), sources.stamp(samples), offset)
        st.plotly_chart(figures.telemetry_figure(frame, analysis.steps), key="trace_telemetry_chart")
        if offset is None:
            st.caption("No clock anchor in the sidecar, so the samples are drawn from their own start.")
    except ProbeError as e:
        st.error(md(e))


# ---- the root and what lies under it ------------------------------------------------------------------------

ROOT = sources.app_root(sys.argv, os.environ)
st.sidebar.title("probe explorer")
st.sidebar.caption(f"root: {md(ROOT)}")
if not ROOT.is_dir():
    st.error(f"The root {md(ROOT)} is not a folder. Start the app with `probe app --root DIR`.")
    st.stop()
found, truncated = sources.list_sources(ROOT)
if not found:
    st.info(
        f"Nothing to show under {md(ROOT)}: no run folders (results.json), no traces (.trace.json, .json.gz, "
        ".sqlite) and no run history (.duckdb). Record some with `probe run` or `probe profile`, or point the app "
        "elsewhere with `probe app --root DIR`."
    )
    st.stop()
if truncated:
    st.sidebar.warning(f"Showing the first {len(found)} files only: pick a narrower --root.")

by_label = {s.label: s for s in found}
source = by_label[st.sidebar.selectbox("Run or trace", list(by_label), key="source", bind="query-params")]
others = [s.label for s in found if s.kind == source.kind and s != source and s.kind not in ("history", "job")]
baseline_label = st.sidebar.selectbox(
    "Baseline (for Compare and Alerts)", [figures.NONE, *others], key="baseline", bind="query-params"
)
baseline = by_label.get(baseline_label)
HOW: tuple = ()  # how traces are read: `probe analyze`'s --steps, --part and --kernel-category, from the sidebar
if source.kind in ("trace", "job"):
    with st.sidebar.expander("Reading the trace (probe analyze flags)"):
        steps_regex = st.text_input("Steps: ranges matching (--steps REGEX)", key="steps", bind="query-params")
        parts_text = st.text_area("Parts: NAME=REGEX, one a line (--part)", key="parts", bind="query-params")
        categories_text = st.text_area(
            "Kernel categories: CATEGORY=REGEX, one a line", key="kernel_categories", bind="query-params"
        )
    HOW = (
        steps_regex.strip() or None,
        tuple(x.strip() for x in parts_text.splitlines() if x.strip()),
        tuple(x.strip() for x in categories_text.splitlines() if x.strip()),
    )

VIEWS = {
    "run": ["Sweep", "Compare", "Alerts"],
    "trace": ["Step ledger", "One step", "Kernels", "Top ops", "Compare", "Alerts"],
    "history": ["History"],
    "job": ["Ranks"],
}
chosen = st.radio(
    "View", VIEWS[source.kind], key="view", bind="query-params", horizontal=True, label_visibility="collapsed"
)

try:
    loaded, report, path = load_source(ROOT, source)
except LOAD_ERRORS as e:
    st.error(f"Cannot show {md(source.rel)}: {md(e)}")
    st.stop()

# ---- 1. sweep ------------------------------------------------------------------------------------------------

if chosen == "Sweep":
    st.subheader(md(f"{loaded.config.model} {loaded.dtype} on {loaded.env.device_name or '?'}"))
    st.plotly_chart(figures.sweep_figure(loaded, report), key="sweep_chart")
    frame = figures.sweep_frame(loaded)
    if frame["mismatch"].any():
        st.error(
            "Tokens differ from naive's for: "
            + md(", ".join(f"{r.line} p{r.prompt_tokens}" for r in frame[frame["mismatch"]].itertuples()))
        )
    if report is None:
        st.caption(
            "No report.json in this folder (a `probe bench` run), so no prediction lines: `probe run` writes one."
        )
    else:
        m = report.machine
        st.caption(
            f"Dashed on ITL: the host floor, {m.floor_ms:.2f} ms ({md(m.floor_source)}), and the "
            f"bandwidth roofline, the step's memory traffic at {m.bandwidth_bytes_s / 1e9:.1f} GB/s "
            f"({md(m.bandwidth_source)}). Dash-dot on tokens/s: the prediction they make together, "
            "1000 / max(floor, traffic)."
        )
    if not loaded.complete:
        st.warning("An interrupted sweep (complete: false): only its finished cells are here.")
    for f in loaded.failed:
        st.error(md(f"{f.label} failed on {f.host or '?'} {f.device or ''}: {f.error}"))
    st.dataframe(frame.drop(columns=["mismatch"]), key="sweep_table", hide_index=True)
    show_telemetry(path if path.is_dir() else path.parent)

# ---- 2. step ledger ------------------------------------------------------------------------------------------

elif chosen == "Step ledger":
    s = loaded.summary
    cols = st.columns(4)
    st.caption(f"{len(loaded.steps)} step(s), found by {md(loaded.step_rule)}.")
    cols[0].metric("step p50", f"{s.step_p50_us / 1e3:.3f} ms")
    cols[1].metric(s.dispatch + " / step", f"{s.launches_per_step:g}")
    if loaded.on_gpu:
        cols[2].metric("GPU busy / GPU window", f"{100 * s.busy_fraction:.1f} %")
    else:
        cols[2].metric("unattributed", f"{100 * s.unattributed_share:.1f} % of wall")
    cols[3].metric(
        "Python frames" if s.python_share else "cache bookkeeping",
        f"{100 * (s.python_share or s.cache_share):.1f} % of wall",
    )
    st.plotly_chart(figures.ledger_figure(loaded), key="ledger_chart")
    st.caption(
        "Each step's left bar is its wall time split into host parts (they add up to the wall); the right "
        "bar, on a GPU trace, is GPU busy and idle time. The line is " + figures.dispatch_label(loaded) + "."
    )
    st.dataframe(figures.ledger_frame(loaded), key="ledger_table", hide_index=True)
    for w in loaded.warnings:
        st.warning(md(w))
    show_trace_telemetry(path, loaded)

# ---- 3. one step ---------------------------------------------------------------------------------------------

elif chosen == "One step":
    steps = {figures.step_label(s): s for s in loaded.steps}
    default = next((i for i, s in enumerate(loaded.steps) if s.kind == "decode"), 0)
    step = steps[st.selectbox("Step", list(steps), index=default, key="step", bind="query-params")]
    items = load_timeline(str(path), sources.stamp(path), step.position, HOW)
    cols = st.columns(4)
    cols[0].metric("wall", f"{step.wall_ns / 1e6:.3f} ms")
    cols[1].metric("launches" if loaded.on_gpu else "top-level ops", step.dispatched)
    cols[2].metric("cache bookkeeping", f"{step.cache_ns / 1e6:.3f} ms")
    if loaded.on_gpu:
        cols[3].metric("GPU busy", f"{step.gpu_busy_ns / 1e6:.3f} ms")
    else:
        cols[3].metric("unattributed", f"{step.unattributed_ns / 1e6:.3f} ms")
    if not items:
        st.info(f"{md(step.name)} has no top-level ops or ranges on its thread to draw.")
    else:
        st.plotly_chart(figures.timeline_figure(items), key="timeline_chart")
        frame = figures.timeline_frame(items)
        st.dataframe(
            frame.style.apply(lambda r: ["background-color: #fde2d8" if r["cache"] else ""] * len(r), axis=1).format(
                {"start_us": "{:.1f}", "dur_us": "{:.1f}"}
            ),
            key="timeline_table",
            hide_index=True,
        )
    show_trace_telemetry(path, loaded)

# ---- 4. top ops ----------------------------------------------------------------------------------------------

elif chosen == "Top ops":
    scopes = [f"all {loaded.summary.steps_used} steps"] + [figures.step_label(s) for s in loaded.steps]
    scope = st.selectbox("Over", scopes, key="top_ops_scope", bind="query-params")
    ops = loaded.summary.top_ops if scope == scopes[0] else loaded.step(int(scope.split(":")[0])).top_ops
    if not ops:
        st.info("No cpu_ops in this scope, so no host time by op.")
    else:
        st.plotly_chart(figures.top_ops_figure(ops), key="top_ops_chart")
        st.dataframe(figures.top_ops_frame(ops), key="top_ops_table", hide_index=True)
    frames = loaded.python_frames[:20] if scope == scopes[0] else loaded.step(int(scope.split(":")[0])).top_frames
    if frames:
        st.subheader("Python frames by self time")
        st.caption(
            "The python part of the ledger: host time inside a Python frame that no op, range or runtime "
            "call covers, given to the innermost frame."
        )
        st.plotly_chart(figures.frames_figure(frames), key="frames_chart")
        st.dataframe(figures.frames_frame(frames), key="frames_table", hide_index=True)

# ---- 4b. kernels ---------------------------------------------------------------------------------------------

elif chosen == "Kernels":
    if not loaded.kernels:
        st.info("No GPU work in this trace, so no kernels: a CPU trace dispatches aten ops (see Top ops).")
        st.stop()
    st.plotly_chart(figures.kernel_category_figure(loaded), key="kernel_categories_chart")
    st.caption(
        "Each step's GPU time by kernel category (probe/analysis/kernels.py; add your own in the sidebar); "
        "the line is the step's GPU busy time."
    )
    scopes = ["whole trace"] + [figures.step_label(s) for s in loaded.steps]
    scope = st.selectbox("Top kernels over", scopes, key="kernels_scope", bind="query-params")
    stats = loaded.kernels[:20] if scope == scopes[0] else loaded.step(int(scope.split(":")[0])).top_kernels
    st.plotly_chart(figures.kernels_figure(stats), key="kernels_chart")
    st.dataframe(figures.kernels_frame(stats), key="kernels_table", hide_index=True)

# ---- 4c. history -----------------------------------------------------------------------------------------------

elif chosen == "History":
    if not loaded:
        st.info("No runs recorded in this history yet: `probe bench`, `run`, `baseline` and `profile` append them.")
        st.stop()
    by_config = {c.label: c for c in loaded}
    config = by_config[st.selectbox("Configuration", list(by_config), key="history_config", bind="query-params")]
    unit = st.selectbox("Cell, or profiled step kind", config.units, key="history_unit", bind="query-params")
    stamp = sources.stamp(path)
    try:
        trend = load_trend(str(path), stamp, config.config_id, unit)
    except LOAD_ERRORS as e:
        st.error(f"Cannot read {md(source.rel)}: {md(e)}")
        st.stop()
    event = st.plotly_chart(
        figures.history_figure(trend, unit), key="history_chart", on_select="rerun", selection_mode="points"
    )
    st.caption(
        "One point a run of this configuration, oldest first (x: commit, + when tracked files were modified, and "
        "the time in UTC). Marked: `probe history check` flagged the run against the runs before it in its "
        "environment, red on the exact launch counts, orange on timings, which compare separate sessions (settle "
        "those with `probe ab`). Click a point to open that run."
    )
    clicked = figures.clicked_run(event)
    if clicked and clicked != st.session_state.get("history_clicked"):  # a new click, not the last one again
        st.session_state["history_clicked"] = clicked
        st.session_state["history_run"] = clicked
    run_ids = list(reversed(trend["run_id"]))
    run_id = st.selectbox("Run", run_ids, key="history_run", bind="query-params")
    judgement = load_run_judgement(str(path), stamp, run_id)
    run = judgement.run
    st.subheader(md(f"{run.run_id} @ {run.short_commit}"))
    st.caption(
        md(
            f"probe {run.command} at {run.recorded_at:%Y-%m-%d %H:%M:%S} UTC on {run.device_name or '?'}, torch "
            f"{run.torch}, transformers {run.transformers}; from {run.source or '-'}"
        )
    )
    recorded = sources.source_of(ROOT, run.source)
    if recorded is not None and recorded.label in by_label:  # its folder or trace is still here: link to it
        st.markdown(f"[Open {md(recorded.rel)} in the explorer]({recorded.link})")
    if judgement.comparison is None:
        st.info(judgement.reason)
    else:
        result = judgement.comparison
        st.markdown(md(f"Against its predecessor, {judgement.previous.run_id} @ {judgement.previous.short_commit}:"))
        if result.alerts:
            st.error(f"REGRESSION: {len(result.alerts)} alert(s)")
            for a in result.alerts:
                st.markdown(f"- **{md(a.key)}** {md(a.message)}")
        else:
            st.success("No regression against its predecessor.")
        st.dataframe(figures.comparison_frame(result), key="history_compare_table", hide_index=True)
        for note in result.notes:
            st.caption(md(note))
    with st.expander("Every run of this configuration"):
        st.dataframe(figures.history_runs_frame(trend), key="history_table", hide_index=True)

# ---- 4d. a job: its traces as ranks, step by step ---------------------------------------------------------------

elif chosen == "Ranks":
    for f in loaded.failed:
        st.error(f"Cannot read {md(f.source)}: {md(f.error)}")
    if not loaded.by_step:
        st.info("No step to compare across these traces.")
        st.stop()
    g = loaded.straggler
    cols = st.columns(3)
    cols[0].metric("ranks", len(loaded.ranks))
    cols[1].metric("straggler", f"rank {g.rank}")
    cols[2].metric("slowest in", f"{g.slowest_steps} of {g.steps} steps")
    st.plotly_chart(figures.ranks_figure(loaded), key="ranks_chart")
    st.caption(
        f"Each rank's wall time per step (steps matched by position; probe analyze {md(source.rel)}/ gives the "
        f"same). Circled: the slowest rank of each step. Rank {g.rank} was the slowest in {g.slowest_steps} of "
        f"{g.steps} steps, by {g.median_trail_pct:.1f}% on the median rank in the median of those steps."
    )
    st.dataframe(figures.ranks_frame(loaded), key="ranks_table", hide_index=True)
    for rank, trace in zip(loaded.ranks, loaded.traces, strict=True):
        opened = sources.source_of(ROOT, trace.source)
        if opened is not None:
            st.markdown(f"rank {rank}: [{md(opened.rel)}]({opened.link})")
    for w in loaded.warnings:
        st.warning(md(w))

# ---- 5. compare and 6. alerts: a baseline against this source --------------------------------------------------

elif baseline is None:
    st.info(
        "Pick a baseline in the sidebar: another "
        + ("run" if source.kind == "run" else "trace")
        + " to hold this one against."
    )

elif chosen == "Compare":
    try:
        base, _, base_path = load_source(ROOT, baseline)
    except LOAD_ERRORS as e:
        st.error(f"Cannot show the baseline {md(baseline.rel)}: {md(e)}")
        st.stop()
    if source.kind == "run":
        frame = figures.run_compare_frame(base, loaded)
        if frame.empty:
            st.warning("The two runs share no cell (engine, prompt, new tokens, batch).")
            st.stop()
        st.plotly_chart(figures.run_compare_figure(frame, baseline.rel, source.rel), key="compare_chart")
    else:
        frame = figures.trace_compare_frame(base, loaded)
        st.plotly_chart(figures.trace_compare_figure(frame, baseline.rel, source.rel), key="compare_chart")
        st.caption(
            "Means per steady-state step (decode steps when the trace has them); the host categories add "
            "up to the wall time."
        )
    st.dataframe(frame, key="compare_table", hide_index=True)

elif chosen == "Alerts":
    try:
        result = load_comparison(
            str(ROOT),
            baseline.rel,
            sources.stamp(sources.source_path(ROOT, baseline)),
            source.rel,
            sources.stamp(path),
            source.kind,
        )
    except LOAD_ERRORS as e:
        st.error(f"probe compare cannot compare these: {md(e)}")
        st.stop()
    for w in result.warnings:
        st.warning(md(w))
    if result.alerts:
        st.error(f"REGRESSION: {len(result.alerts)} alert(s)")
        for a in result.alerts:
            st.markdown(f"- **{md(a.key)}** {md(a.message)}")
    else:
        st.success("No regression.")
    st.dataframe(figures.comparison_frame(result), key="alerts_table", hide_index=True)
    for note in result.notes:
        st.caption(md(note))
