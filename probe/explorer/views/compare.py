"""The Compare and Alerts views: the source against the sidebar's baseline, drawn, and as probe compare judges
it. Figures: probe.explorer.figures.compare.
"""

from __future__ import annotations

import streamlit as st

from probe.explorer import figures, sources
from probe.explorer.figures.style import md
from probe.explorer.loaders import LOAD_ERRORS, Page, Run, Trace, key, load_comparison, load_source
from probe.explorer.widgets import show_alerts, show_table


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
