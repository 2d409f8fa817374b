"""The Step ledger view: each step's wall by purpose and by mechanism, beside its GPU time. Figures:
probe.explorer.figures.ledger.
"""

from __future__ import annotations

import streamlit as st

from probe.analysis.diagnosis.verdict import bound_words
from probe.explorer import figures
from probe.explorer.figures.step import step_label
from probe.explorer.figures.style import md
from probe.explorer.loaders import TraceSource, ViewContext
from probe.explorer.widgets import quiet_answer, show_metrics, show_table, show_trace_telemetry


def show_ledger(trace: TraceSource, ctx: ViewContext) -> None:
    analysis = trace.analysis
    s = analysis.summary
    result = quiet_answer(trace, ctx)
    d = result.diagnosis.median if result else None
    if result is not None and d is not None:  # the Diagnosis's figures first, as probe analyze prints them
        step = analysis.steps[result.diagnosis.position_of(d)]
        st.markdown(f"**{md(bound_words(d))}**: the median step, {md(step_label(step))}, as the Diagnosis has it")
        show_metrics(figures.diagnosis.evidence_metrics(d))
    st.caption(f"{len(analysis.steps)} step(s), found by {md(analysis.step_rule)}. Across them:")
    cols = st.columns(4)
    cols[0].metric("host window p50 (not the measured step)", f"{s.step_p50_us / 1e3:.3f} ms")
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
    show_trace_telemetry(trace, ctx.root)
