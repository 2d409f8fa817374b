"""The Compare and Alerts views: the source against the sidebar's baseline, drawn, and as probe compare judges
it. Both hold the two sides to each other by probe compare's one rule (probe.analysis.regression.comparable), and
say it in its words: what cannot be compared is refused in the same line, and work that differs is said the same
way. Figures: probe.explorer.figures.compare.
"""

from __future__ import annotations

import streamlit as st

from probe.analysis.ledger.types import kind_words
from probe.analysis.regression.compare import Comparison
from probe.explorer import figures, sources
from probe.explorer.figures.style import md
from probe.explorer.loaders import LOAD_ERRORS, Run, TraceSource, ViewContext, key, load_comparison, load_source
from probe.explorer.widgets import show_alerts, show_table


def show_compare(loaded: Run | TraceSource, ctx: ViewContext) -> None:
    if ctx.baseline is None:
        return pick_a_baseline(ctx)
    result = comparison(ctx)
    if result is None or result.comparable is None:
        return
    try:
        base = load_source(ctx.root, ctx.baseline, ctx.reading)
    except LOAD_ERRORS as e:
        st.error(f"Cannot show the baseline {md(ctx.baseline.rel)}: {md(sources.under_root(ctx.root, e))}")
        return
    shared = result.comparable
    if shared.warning:
        st.warning(md(shared.warning))
    names = ctx.baseline.rel, ctx.source.rel
    if isinstance(loaded, Run) and isinstance(base, Run):
        frame = figures.compare.run_compare_frame(base.results, loaded.results, shared.keys)
        st.plotly_chart(figures.compare.run_compare_figure(frame, *names), key="compare_chart")
    elif isinstance(loaded, TraceSource) and isinstance(base, TraceSource):
        kind = figures.compare.compared_kind(shared.keys)
        frame = figures.compare.trace_compare_frame(base.analysis, loaded.analysis, kind, not shared.work_differs)
        st.plotly_chart(figures.compare.trace_compare_figure(frame, *names), key="compare_chart")
        others = [k for k in shared.keys if k != kind]
        st.caption(
            md(f"Means per {kind_words(kind)}, the kind both traces hold")
            + (md(f" (also in both: {', '.join(others)}; Alerts holds every one)") if others else "")
            + "; the host categories add up to the wall time."
        )
    show_table(frame, "compare_table")


def show_alerts_view(loaded: Run | TraceSource, ctx: ViewContext) -> None:
    if ctx.baseline is None:
        return pick_a_baseline(ctx)
    result = comparison(ctx)
    if result is not None:
        show_alerts(result, "alerts_table")


def comparison(ctx: ViewContext) -> Comparison | None:
    """probe compare's verdict on the baseline and the source, or None after saying, in one line, why the two
    cannot be compared (the rule's own words)."""
    assert ctx.baseline is not None
    stamps = (sources.stamp(sources.source_path(ctx.root, s)) for s in (ctx.baseline, ctx.source))
    try:
        return load_comparison(key(ctx.root), ctx.baseline, next(stamps), ctx.source, next(stamps), ctx.reading)
    except LOAD_ERRORS as e:
        st.error(f"probe compare cannot compare these: {md(sources.under_root(ctx.root, e))}")
        return None


def pick_a_baseline(ctx: ViewContext) -> None:
    other = "run" if ctx.source.kind == "run" else "trace"
    st.info(f"Pick a baseline in the sidebar: another {other} to hold this one against.")
