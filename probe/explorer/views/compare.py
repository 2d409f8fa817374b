"""The Compare and Alerts views: the source against the sidebar's baseline, drawn, and as probe compare judges
it. Figures: probe.explorer.figures.compare.
"""

from __future__ import annotations

import streamlit as st

from probe.explorer import figures, sources
from probe.explorer.figures.style import md
from probe.explorer.loaders import LOAD_ERRORS, Run, TraceSource, ViewContext, key, load_comparison, load_source
from probe.explorer.widgets import show_alerts, show_table


def show_compare(loaded: Run | TraceSource, ctx: ViewContext) -> None:
    if ctx.baseline is None:
        return pick_a_baseline(ctx)
    try:
        base = load_source(ctx.root, ctx.baseline, ctx.reading)
    except LOAD_ERRORS as e:
        st.error(f"Cannot show the baseline {md(ctx.baseline.rel)}: {md(e)}")
        return
    names = ctx.baseline.rel, ctx.source.rel
    if isinstance(loaded, Run) and isinstance(base, Run):
        frame = figures.compare.run_compare_frame(base.results, loaded.results)
        if frame.empty:
            st.warning("The two runs share no cell (engine, prompt, new tokens, batch).")
            return
        st.plotly_chart(figures.compare.run_compare_figure(frame, *names), key="compare_chart")
    elif isinstance(loaded, TraceSource) and isinstance(base, TraceSource):
        frame = figures.compare.trace_compare_frame(base.analysis, loaded.analysis)
        st.plotly_chart(figures.compare.trace_compare_figure(frame, *names), key="compare_chart")
        st.caption(
            "Means per steady-state step (decode steps when the trace has them); the host categories add "
            "up to the wall time."
        )
    show_table(frame, "compare_table")


def show_alerts_view(loaded: Run | TraceSource, ctx: ViewContext) -> None:
    if ctx.baseline is None:
        return pick_a_baseline(ctx)
    stamps = (sources.stamp(sources.source_path(ctx.root, s)) for s in (ctx.baseline, ctx.source))
    try:
        result = load_comparison(key(ctx.root), ctx.baseline, next(stamps), ctx.source, next(stamps), ctx.reading)
    except LOAD_ERRORS as e:
        st.error(f"probe compare cannot compare these: {md(e)}")
        return
    show_alerts(result, "alerts_table")


def pick_a_baseline(ctx: ViewContext) -> None:
    other = "run" if ctx.source.kind == "run" else "trace"
    st.info(f"Pick a baseline in the sidebar: another {other} to hold this one against.")
