"""The History view: one configuration's runs, and what `probe history check` flagged. Figures:
probe.explorer.figures.history.
"""

from __future__ import annotations

import streamlit as st

from probe.explorer import figures, sources
from probe.explorer.figures.style import md, printable
from probe.explorer.loaders import LOAD_ERRORS, History, ViewContext, key, load_run_judgement, load_trend
from probe.explorer.widgets import show_alerts, show_table


def show_history(hist: History, ctx: ViewContext) -> None:
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
        st.error(f"Cannot read {md(ctx.source.rel)}: {md(sources.under_root(ctx.root, e))}")
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
    recorded = sources.source_of(ctx.root, run.source)
    if recorded is not None and recorded.label in ctx.listed:  # its folder or trace is still here: link to it
        st.markdown(f"[Open {md(recorded.rel)} in the explorer]({recorded.link})")
    if judgement.comparison is None:
        st.info(judgement.reason)
    else:
        previous = judgement.previous
        st.markdown(md(f"Against its predecessor, {previous.run_id} @ {previous.short_commit}:"))
        show_alerts(judgement.comparison, "history_compare_table", "No regression against its predecessor.")
    with st.expander("Every run of this configuration"):
        show_table(figures.history.history_runs_frame(trend), "history_table")
