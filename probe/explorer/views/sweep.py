"""The Sweep view: a run's cells against prompt length, with report.json's prediction lines. Figures:
probe.explorer.figures.sweep.
"""

from __future__ import annotations

import streamlit as st

from probe.explorer import figures
from probe.explorer.figures.style import md
from probe.explorer.loaders import Run, ViewContext
from probe.explorer.widgets import show_table, show_telemetry


def show_sweep(run: Run, ctx: ViewContext) -> None:
    results, report = run.results, run.report
    st.subheader(md(f"{results.config.model} {results.dtype} on {results.env.device_name or '?'}"))
    if results.contention:
        st.warning(md(results.contention))
    st.plotly_chart(figures.sweep.sweep_figure(results, report), key="sweep_chart")
    frame = figures.sweep.sweep_frame(results)
    if frame["mismatch"].any():
        st.error(
            "Tokens differ from naive's for: "
            + md(", ".join(f"{r.line} p{r.prompt_tokens}" for r in frame[frame["mismatch"]].itertuples()))
        )
    if report is None:
        st.caption(
            "No report.json in this folder (a `probe bench` run), so no prediction lines: `probe run` writes one."
        )
    elif (m := report.machine) is not None:  # None: measuring the machine failed, so no prediction lines
        st.caption(
            f"Dashed on ITL: the host floor, {m.floor_ms:.2f} ms ({md(m.floor_source)}), and the "
            f"bandwidth roofline, the step's memory traffic at {m.bandwidth_bytes_s / 1e9:.1f} GB/s "
            f"({md(m.bandwidth_source)}). Dash-dot on tokens/s: the prediction they make together, "
            "1000 / max(floor, traffic)."
        )
    if not results.complete:
        st.warning("An interrupted sweep (complete: false): only its finished cells are here.")
    for f in results.failed:
        st.error(md(f"{f.label} failed on {f.host or '?'} {f.device or ''}: {f.error}"))
    show_table(frame.drop(columns=["mismatch"]), "sweep_table")
    show_telemetry(ctx.root, run.path if run.path.is_dir() else run.path.parent)
