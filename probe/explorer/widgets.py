"""The pieces several views share: a table, probe compare's verdict, the telemetry panels, a step picker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import streamlit as st

from probe.analysis.ledger.types import StepLedger, TraceAnalysis
from probe.analysis.regression.compare import Comparison
from probe.errors import ProbeError
from probe.explorer import figures, sources
from probe.explorer.figures.style import md, printable
from probe.explorer.loaders import TraceSource, key, load_telemetry


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


def show_trace_telemetry(trace: TraceSource, root: Path) -> None:
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
