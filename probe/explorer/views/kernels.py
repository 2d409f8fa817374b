"""The Kernels view: GPU time by kernel category per step, and the top kernels. Figures:
probe.explorer.figures.kernels.
"""

from __future__ import annotations

import streamlit as st

from probe.explorer import figures
from probe.explorer.loaders import TraceSource, ViewContext
from probe.explorer.widgets import pick_step, show_table


def show_kernels(trace: TraceSource, ctx: ViewContext) -> None:
    analysis = trace.analysis
    if not analysis.kernels:
        st.info("No GPU work in this trace, so no kernels: a CPU trace dispatches aten ops (see Top ops).")
        return
    st.plotly_chart(figures.kernels.kernel_category_figure(analysis), key="kernel_categories_chart")
    st.caption(
        "Each step's GPU time by kernel category (probe/analysis/ledger/kernels.py; add your own in the sidebar); "
        "the line is the step's GPU busy time."
    )
    step = pick_step(analysis, "kernels_scope", "Top kernels over", everything="whole trace")
    stats = analysis.kernels[:20] if step is None else step.top_kernels
    st.plotly_chart(figures.kernels.kernels_figure(stats), key="kernels_chart")
    show_table(figures.kernels.kernels_frame(stats), "kernels_table")
