"""The Top ops view: host self time by op, and the Python frames. Figures: probe.explorer.figures.ops."""

from __future__ import annotations

import streamlit as st

from probe.analysis.ledger.types import TraceAnalysis
from probe.explorer import figures
from probe.explorer.loaders import TraceSource, ViewContext
from probe.explorer.widgets import pick_step, show_table


def steady_scope(analysis: TraceAnalysis) -> str:
    """The whole-trace scope as the pickers name it: the steps the summary is taken over."""
    s = analysis.summary
    kind = "decode " if s.steps_used == "decode" else ""
    return f"its one {kind}step" if s.steps == 1 else f"all {s.steps} {kind}steps"


def show_top_ops(trace: TraceSource, ctx: ViewContext) -> None:
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
