"""The pieces several views share: a table, probe compare's verdict, the telemetry panels, a step picker."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from probe.analysis.diagnosis.answer import Answer
from probe.analysis.ledger.types import StepLedger, TraceAnalysis
from probe.analysis.regression.compare import Comparison
from probe.errors import ProbeError
from probe.explorer import figures, sources
from probe.explorer.figures.style import md, printable
from probe.explorer.loaders import (
    LOAD_ERRORS,
    RooflineInputs,
    TraceSource,
    ViewContext,
    key,
    load_answer,
    load_telemetry,
)


def show_table(frame: pd.DataFrame, key: str) -> None:
    """A table as table_frame shows it, numbers at 4 decimals. The decimals are the grid's own format, not a pandas
    Styler's: a Styler renders every cell in Python first (a second for the 2,000 bars of a One step table)."""
    frame = table_frame(frame)
    decimals = {c: st.column_config.NumberColumn(format="%.4f") for c in frame.columns if frame[c].dtype.kind == "f"}
    st.dataframe(frame, key=key, hide_index=True, column_config=decimals)


def table_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """What a table shows: "-" in every cell that measured nothing (None or NaN: a CPU trace's GPU columns, an op
    with no dtype), where the browser's table would write "None" whatever the styling says; a column with some such
    cells is text (numbers at 4 decimals), one with none keeps its numbers. Text came from files, so it is made
    valid UTF-8 first (Arrow refuses lone surrogates)."""
    partly = [c for c in frame.columns if frame[c].isna().any()]
    text = [c for c in frame.columns if frame[c].dtype == object and c not in partly]
    return frame.assign(
        **{c: frame[c].map(_cell_text) for c in partly}, **{c: frame[c].map(_printable_text) for c in text}
    )


def _cell_text(value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):  # NaN: unequal to itself
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return printable(value) if isinstance(value, str) else str(value)


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
    elif comparison.work_differs:
        st.info("Not gated: the two sides' steps did different work (the warning above says how).")
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
            st.error(md(sources.under_root(root, e)))


def show_trace_telemetry(trace: TraceSource, root: Path) -> None:
    """The samples recorded with this trace, on the trace's clock, with its steps shaded behind them."""
    samples = sources.trace_telemetry(root, trace.path)
    if samples is None:
        return
    st.subheader("Telemetry during this trace")
    try:
        offset = figures.telemetry.telemetry_offset_ns(sources.sidecar(root, trace.path), trace.analysis)
        telemetry = load_telemetry(key(samples), sources.stamp(samples), offset)
        chart = figures.telemetry.telemetry_figure(telemetry, trace.analysis.steps)
        st.plotly_chart(chart, key="trace_telemetry_chart")
        if offset is None:
            st.caption("No clock anchor in the sidecar, so the samples are drawn from their own start.")
    except ProbeError as e:
        st.error(md(sources.under_root(root, e)))


METRICS_PER_ROW = 4  # past four a row, a value such as "47.151 ms" is cut to "47.151…" in a 1,000 px page


def show_metrics(figures_: list[tuple[str, str]]) -> None:
    """Metrics, each (label, value), in rows of at most METRICS_PER_ROW."""
    for first in range(0, len(figures_), METRICS_PER_ROW):
        row = figures_[first : first + METRICS_PER_ROW]
        for col, (name, value) in zip(st.columns(METRICS_PER_ROW), row, strict=False):
            col.metric(name, value)


def quiet_answer(trace: TraceSource, ctx: ViewContext) -> Answer | None:
    """The trace's answer as the Diagnosis view has it (the same cache entry, the sidebar's roofline inputs), for a
    view that shows its figures; without the roofline where those cannot be used; None (said) if none can be made.
    The Diagnosis view says why a roofline is missing."""
    args = key(ctx.root), key(trace.path), sources.stamp(trace.path), ctx.reading
    for inputs in (ctx.roofline, RooflineInputs()):
        try:
            return load_answer(*args, inputs)
        except LOAD_ERRORS as e:
            error = e
    st.error(f"Cannot diagnose {md(ctx.source.rel)}: {md(sources.under_root(ctx.root, error))}")
    return None


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
