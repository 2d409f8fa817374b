"""probe's explorer: where each step goes, for the runs and traces under one folder.

    streamlit run app.py -- --root DIR      (or: probe app --root DIR; or PROBE_APP_ROOT=DIR)

The frame, as Streamlit's picture frame has it: the root, the sidebar (the source, a baseline, the analyze flags,
the roofline's inputs), then one view picked from VIEWS and called with the typed source it shows and the
ViewContext (root, how traces are read, source, baseline); no view reads a global. The views live in
probe.explorer.views, one module a view beside the figures module it draws; they read through
probe.explorer.loaders (cached, keyed on path + size + mtime) and hold no analysis. Every file the app reads lies
under the root (probe.explorer.sources).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import streamlit as st

from probe.analysis.roofline.devices import DEVICES
from probe.explorer import sources
from probe.explorer.figures.style import md
from probe.explorer.loaders import LOAD_ERRORS, Reading, RooflineInputs, ViewContext, load_source
from probe.explorer.sources import Source
from probe.explorer.views import compare, diagnosis, history, kernels, ledger, ops, ranks, step, sweep

st.set_page_config(page_title="probe explorer", layout="wide")
NONE = "(none)"
SIDEBAR_CHARS = 30  # of a label the sidebar's boxes show at their default width
# A longer label is shown by its end (a run's or a trace's own name), not by the folder it shares with the others:
# laid out from the right, the text is cut on the left (and reads as usual while typing).
FIT_END_CSS = (
    "<style>.st-key-{key} input:not(:focus) {{ direction: rtl; text-align: left; text-overflow: ellipsis; }}</style>"
)

VIEWS: dict[str, Callable] = {
    "Diagnosis": diagnosis.show_diagnosis,
    "Sweep": sweep.show_sweep,
    "Step ledger": ledger.show_ledger,
    "One step": step.show_one_step,
    "Op roofline": diagnosis.show_op_roofline,
    "Kernels": kernels.show_kernels,
    "Top ops": ops.show_top_ops,
    "Compare": compare.show_compare,
    "Alerts": compare.show_alerts_view,
    "History": history.show_history,
    "Ranks": ranks.show_ranks,
}
VIEWS_OF = {  # the views each kind of source has, the first one opening
    "run": ("Diagnosis", "Sweep", "Compare", "Alerts"),
    "trace": ("Diagnosis", "Step ledger", "One step", "Op roofline", "Kernels", "Top ops", "Compare", "Alerts"),
    "history": ("History",),
    "job": ("Ranks",),
}


# ---- the sidebar, then the chosen view --------------------------------------------------------------------------


def sidebar_reading() -> Reading:
    """The `probe analyze` flags typed in the sidebar; each regex reaches AnalyzeOptions.parse as it is written."""
    with st.sidebar.expander("Reading the trace (probe analyze flags)"):
        steps = st.text_input("Steps: ranges matching (--steps REGEX)", key="steps", bind="query-params")
        parts = st.text_area("Parts: NAME=REGEX, one a line (--part)", key="parts", bind="query-params")
        categories = st.text_area(
            "Kernel categories: CATEGORY=REGEX, one a line", key="kernel_categories", bind="query-params"
        )
    lines = lambda text: tuple(x.strip() for x in text.splitlines() if x.strip())  # noqa: E731
    return Reading(steps.strip() or None, lines(parts), lines(categories))


def sidebar_roofline(root: Path) -> RooflineInputs:
    """The model and the device the roofline needs, as typed in the sidebar (the URL keeps them)."""
    with st.sidebar.expander("Roofline (a model, and a device)"):
        text = st.text_input(
            "Model: a preset, or a config.json or model folder under the root", key="model", bind="query-params"
        )
        names = [NONE, *(d.name for d in DEVICES)]
        name = st.selectbox("Device, when the trace does not name its own", names, key="device", bind="query-params")
        st.caption("What a step processed, when its engine marker does not say (--tokens, --batch, --context):")
        counts = [
            st.number_input(what, min_value=least, value=None, step=1, key=box, bind="query-params")
            for what, box, least in (
                ("new tokens a step", "tokens", 1),
                ("sequences", "batch", 1),
                ("cached context a sequence", "context", 0),
            )
        ]
    try:
        model = sources.model_spec(root, text)
    except LOAD_ERRORS as e:
        st.sidebar.error(f"Model: {md(sources.under_root(root, e))}")
        model = None
    return RooflineInputs(model, None if name == NONE else name, *(None if c is None else int(c) for c in counts))


def main() -> None:
    root = sources.app_root(sys.argv, os.environ)
    st.sidebar.title("probe explorer")
    st.sidebar.caption(f"root: {md(root)}")
    if not root.is_dir():
        st.error(f"The root {md(root)} is not a folder. Start the app with `probe app --root DIR`.")
        st.stop()
    found, truncated = sources.list_sources(root)
    if not found:
        st.info(
            f"Nothing to show under {md(root)}: no run folders (results.json), no traces (.trace.json, .json.gz, "
            ".sqlite) and no run history (.duckdb). Record some with `probe run` or `probe profile`, or point the "
            "app elsewhere with `probe app --root DIR`."
        )
        st.stop()
    if truncated:
        st.sidebar.warning(f"Showing the first {len(found)} files only: pick a narrower --root.")
    by_label = {s.label: s for s in found}
    refused = [
        (box, why)
        for box in ("source", "baseline")
        if (asked := st.query_params.get(box)) and asked != NONE
        if (why := sources.link_refusal(root, asked, by_label)) is not None
    ]
    source = st.sidebar.selectbox(
        "Run or trace", list(by_label.values()), key="source", bind="query-params", format_func=_source_label
    )
    others = [s for s in found if s.kind == source.kind and s != source and s.kind not in ("history", "job")]
    baseline = st.sidebar.selectbox(
        "Baseline (for Compare and Alerts)",
        [None, *others],
        key="baseline",
        bind="query-params",
        format_func=_source_label,
    )
    for box, why in refused:  # a source the link names is not opened: say why, then what is shown instead
        instead = f"Showing {_source_label(source)} instead." if box == "source" else "No baseline is picked."
        st.warning(md(f"{why} {instead}"))
    for box, picked in (("source", source), ("baseline", baseline)):
        if len(_source_label(picked)) > SIDEBAR_CHARS:  # a short one reads whole (and keeps its "." at the end)
            st.html(FIT_END_CSS.format(key=box))
    reading = sidebar_reading() if source.kind in ("trace", "job") else Reading()
    roofline = sidebar_roofline(root) if source.kind == "trace" else RooflineInputs()
    chosen = st.radio(
        "View", VIEWS_OF[source.kind], key="view", bind="query-params", horizontal=True, label_visibility="collapsed"
    )
    try:
        loaded = load_source(root, source, reading)
    except LOAD_ERRORS as e:
        st.error(f"Cannot show {md(source.rel)}: {md(sources.under_root(root, e))}")
        st.stop()
    VIEWS[chosen](loaded, ViewContext(root, reading, source, baseline, frozenset(by_label), roofline))


def _source_label(source: Source | None) -> str:
    return NONE if source is None else source.label


main()
