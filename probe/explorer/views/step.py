"""The One step view: a step on one clock, its window and launch links picked or clicked. Figures:
probe.explorer.figures.step.
"""

from __future__ import annotations

import streamlit as st

from probe.analysis.diagnosis.verdict import Diagnosis, TraceDiagnosis, bound_words
from probe.analysis.ledger.types import StepLedger, TraceAnalysis
from probe.explorer import figures, sources
from probe.explorer.figures.style import md, printable
from probe.explorer.loaders import TraceSource, ViewContext, key, load_timeline
from probe.explorer.step_clock import StepClock
from probe.explorer.widgets import pick_step, quiet_answer, show_metrics, show_table, show_trace_telemetry
from probe.text import short


def show_one_step(trace: TraceSource, ctx: ViewContext) -> None:
    analysis = trace.analysis
    result = quiet_answer(trace, ctx)
    if result is None or result.diagnosis.median is None:
        st.info("No step in this trace: name the steps with --steps in the sidebar.")
        return
    step = _show_verdict(analysis, result.diagnosis, result.diagnosis.median)
    st.plotly_chart(figures.step.partitions_figure(step, analysis.user_parts), key="partitions_chart")
    st.caption(
        "The step's wall two ways, each adding up to it: by purpose (what it was doing) and by mechanism (what "
        "code ran: the innermost event of each nanosecond decides)."
    )
    tl = _show_timeline(trace, ctx, step)
    _show_top_frames_and_ops(step)
    with st.expander("The drawn bars, as a table"):
        show_table(figures.step.timeline_frame(tl), "timeline_table")
    show_trace_telemetry(trace, ctx.root)


def _show_verdict(analysis: TraceAnalysis, diagnosis: TraceDiagnosis, median: Diagnosis) -> StepLedger:
    """Pick the step (first the `median` one, the Diagnosis's), show its bound, headline and evidence; return it."""
    judged = analysis.steps[diagnosis.position_of(median)]  # open where the Diagnosis did
    step = pick_step(analysis, "step", "Step", first=judged)
    assert step is not None  # a trace with a median step has steps to pick
    d = diagnosis.steps[step.position]
    which = (
        "the median step, the one the Diagnosis judged" if step.position == judged.position else "not the median step"
    )
    st.markdown(f"**{md(bound_words(d))}** ({which}). {md(d.headline)}")
    show_metrics(figures.diagnosis.evidence_metrics(d) + [(analysis.dispatch, f"{step.dispatched:,}")])
    return step


def _show_timeline(trace: TraceSource, ctx: ViewContext, step: StepLedger) -> StepClock:
    """The step on one clock, in the window and with the link picked or clicked, and what it says; returns it."""
    apply_clicks()
    window = pick_window(step)
    stamp = sources.stamp(trace.path)
    tl = load_timeline(key(ctx.root), key(trace.path), stamp, step.position, ctx.reading, window)
    link = pick_link(tl)
    event = st.plotly_chart(
        figures.step.timeline_figure(tl, [link] if link is not None else ()),
        key="timeline_chart",
        on_select="rerun",
        selection_mode=("points", "box"),
    )
    clicked(event, tl)
    st.caption(
        md(
            "One clock, the way Perfetto draws it: the step's thread by kind and depth (each event coloured by the "
            "part its time feeds), its host window the Diagnosis's way (host work, sync wait while the trace's GPU "
            "work ran, external wait: they add up to the window), the other busy threads, this step's GPU idle gaps "
            "by cause and one lane a stream (kernels by category; faded: other steps' work). Dotted: the host "
            "window's edges. Click a kernel (or pick one) for the arrow from its launch; drag across the chart, or "
            "click a hatched bar, to draw that stretch again at its own resolution. "
        )
        + md(figures.step.merged_text(tl))
    )
    linked = len(tl.links([link])) if link is not None else 0
    if linked > figures.step.MAX_LINKS:
        st.caption(f"Arrows drawn to the first {figures.step.MAX_LINKS} of the {linked} GPU ops this call launched.")
    for note in tl.notes:
        st.caption(md(note))
    return tl


def _show_top_frames_and_ops(step: StepLedger) -> None:
    """The step's top Python frames and top ops by self time, side by side (nothing when it has neither)."""
    frames, ops = step.top_frames, step.top_ops
    if frames or ops:
        left, right = st.columns(2)
        if frames:
            left.markdown("**Python frames by innermost self time**, whatever purpose part it falls in")
            with left:
                show_table(figures.ops.frames_frame(frames), "step_frames_table")
        if ops:
            right.markdown("**Ops by dispatch (innermost self) time**")
            with right:
                show_table(figures.ops.top_ops_frame(ops), "step_ops_table")


WINDOW_KEY, LINK_KEY, CLICK_KEY, PENDING_KEY = "window", "link", "timeline_clicked", "timeline_pending"


def pick_window(step: StepLedger) -> tuple[int, int] | None:
    """The window of the step to draw, in ms from its start (the URL keeps it); None for the whole step read whole.
    A new step opens whole."""
    span = step.span_ns / 1e6
    if st.session_state.get("window_of") != step.position:
        st.session_state["window_of"] = step.position
        st.session_state.pop(WINDOW_KEY, None)
    lo, hi = st.slider(
        "Window (ms from the step's start)",
        0.0,
        span,
        (0.0, span),
        step=max(span / 2000, 1e-6),
        format="%.3f",
        key=WINDOW_KEY,
        bind="query-params",
    )
    if lo <= 0 and hi >= span:
        return None
    return round(lo * 1e6), round(hi * 1e6)


def pick_link(tl: StepClock) -> int | None:
    """The GPU op, or the launch call (all it launched), whose launch-to-kernel arrows are drawn: picked here, or by
    a click on the timeline."""
    text: dict[int, tuple[int, str]] = {}
    launched: dict[int, int] = {}
    for o in tl.ops:
        if o.call_lane >= 0 and o.own and o.call_start_ns is not None:  # a drawn call has its start
            text[o.row] = (o.start_ns, f"{o.start_ns / 1e6:+.3f} ms {o.category}: {o.name}")
            launched[o.call_row] = launched.get(o.call_row, 0) + 1
            text.setdefault(o.call_row, (o.call_start_ns, ""))
    for o in tl.ops:
        if o.call_row in launched and not text[o.call_row][1]:
            n = launched[o.call_row]
            what = f"its {n} GPU ops" if n > 1 else "its GPU op"
            start = text[o.call_row][0]  # the call's start, as the op that first named it set it
            text[o.call_row] = (start, f"{start / 1e6:+.3f} ms launch call {o.call_name}: {what}")
    options: list[int | None] = [None, *sorted(text, key=lambda r: (text[r][0], r))]
    if st.session_state.get(LINK_KEY) not in options:
        st.session_state.pop(LINK_KEY, None)
    return st.selectbox(
        "Link a GPU op to its launch call",
        options,
        key=LINK_KEY,
        bind="query-params",
        format_func=lambda r: "(none)" if r is None else printable(short(text[r][1], 140)),
    )


def clicked(event, tl: StepClock) -> None:
    """A drag across the timeline draws that stretch again at its own resolution (merged bars split as they fit);
    a click on a hatched (merged) bar zooms into it, on a GPU op or a launch call links; each is acted on once
    (the selection stays in the event until the next)."""
    dragged = figures.step.dragged_window(event)
    bar = figures.step.clicked_bar(event)
    done = st.session_state.get(CLICK_KEY)
    change: dict[str, object]
    if dragged is not None and dragged != done:
        st.session_state[CLICK_KEY] = dragged
        lo, hi = tl.window
        change = {WINDOW_KEY: (max(lo / 1e6, dragged[0]), min(hi / 1e6, dragged[1]))}
        st.session_state[PENDING_KEY] = change
        st.rerun()
    if bar is None or bar == done:
        return
    st.session_state[CLICK_KEY] = bar
    row, start, dur, count = bar
    if count > 1:
        pad = max(dur // 10, tl.resolution_ns)
        change = {WINDOW_KEY: (max(0, start - pad) / 1e6, min(tl.span_ns, start + dur + pad) / 1e6)}
    elif any(o.row == row or o.call_row == row for o in tl.ops):
        change = {LINK_KEY: row}
    else:
        return
    st.session_state[PENDING_KEY] = change  # widgets drawn in this run take it at the top of the next
    st.rerun()


def apply_clicks() -> None:
    """What the last click asked of the window and the link, set before their widgets are drawn."""
    for name, value in st.session_state.pop(PENDING_KEY, {}).items():
        st.session_state[name] = value
