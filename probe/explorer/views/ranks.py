"""The Ranks view: a job's traces step by step, and its straggler. Figures: probe.explorer.figures.ranks."""

from __future__ import annotations

import streamlit as st

from probe.explorer import figures, sources
from probe.explorer.figures.style import md
from probe.explorer.loaders import RanksSource, ViewContext
from probe.explorer.widgets import show_table


def show_ranks(loaded: RanksSource, ctx: ViewContext) -> None:
    """Each rank's wall per step and the straggler, when probe.analysis.ledger.ranks says the folder's traces are the
    ranks
    of one job (same steps, a distinct rank for each); otherwise the folder's traces, each linked, and why."""
    result = loaded.ranks
    for f in result.failed:
        st.error(
            f"Cannot read {md(sources.under_root(ctx.root, f.source))}: {md(sources.under_root(ctx.root, f.error))}"
        )
    if not result.one_job:
        st.info(md(f"These traces are not the ranks of one job: {result.not_a_job}. Open each on its own:"))
        for trace in result.traces:
            opened = sources.source_of(ctx.root, trace.source)
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
    cols[2].metric(f"named by {g.rule} in", f"{g.slowest_steps} of {g.steps} steps")
    st.plotly_chart(figures.ranks.ranks_figure(result), key="ranks_chart")
    st.caption(
        f"Each rank's wall time per step (steps matched by position; probe analyze {md(ctx.source.rel)}/ gives the "
        f"same). Circled: each step's straggler, the rank the others wait for (the least time in collectives where "
        f"every rank's step holds them, else the slowest wall). {md(g.words[0].upper() + g.words[1:])}."
    )
    for rank, same in figures.ranks.coinciding(result):
        others = ", ".join(f"rank {o}" for o in same)
        st.caption(f"{others}: the same wall as rank {rank} at every step, drawn inside its line.")
    show_table(figures.ranks.ranks_frame(result), "ranks_table")
    for rank, trace in zip(result.ranks, result.traces, strict=True):
        opened = sources.source_of(ctx.root, trace.source)
        if opened is not None:
            st.markdown(f"rank {rank}: [{md(opened.rel)}]({opened.link})")
    for w in result.warnings:
        st.warning(md(w))
