"""The One step view: one step on one clock (probe.explorer.step_clock), the way Perfetto draws it, and its two
host
partitions."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from probe.analysis.ledger.host import MECHANISM_PARTS, PURPOSE_PARTS
from probe.analysis.ledger.types import StepLedger
from probe.explorer.figures.style import COLORS, clicked_data, color, label
from probe.explorer.step_clock import Bar, StepClock
from probe.text import ms, ns_to_ms, ns_to_us

LANE_PX = 17  # a lane's height
MAX_SHADED = 200  # gaps shaded across their lanes, the longest first; every gap is also a bar on its lane
MAX_LINKS = 50  # launch-to-kernel arrows drawn for one selection
HOVER_WIDTH = 110  # characters of a hover line: a kernel's full name wraps, never cut
PART_LABEL = {p.name: p.label for p in PURPOSE_PARTS} | {p.name: p.label for p in MECHANISM_PARTS}
PART_LABEL |= {"range": "range", "external": "external wait (no GPU op of the trace ran)"}
PART_LABEL |= {"host_work": "host work (the window less its sync wait)"}
PART_LABEL |= {"gpu_wait": "sync wait, the trace's GPU working"}
IDLE_LABEL = {"host_wait": "host wait", "kernel_wait": "kernel wait", "other": "other", "before_gpu": "before"}


def step_label(step: StepLedger) -> str:
    """How a step picker shows a step: its position, then its name."""
    return f"{step.position}: {step.name}"


def legend_key(bar: Bar) -> tuple[str, str]:
    """(colour key, legend name) of a bar: GPU ops by category, idle gaps by cause, host events by part."""
    if bar.kind in ("kernel", "memcpy", "memset"):
        return bar.key, f"GPU: {bar.key}"
    if bar.kind in ("idle", "lead"):
        if bar.kind == "lead":
            return "before_gpu", "before the step's first GPU op"
        return f"idle_{bar.key}", f"GPU idle: {IDLE_LABEL.get(bar.key, bar.key)}"
    return bar.key, PART_LABEL.get(bar.key, f"part: {bar.key}")


def _wrap(text: str, width: int = HOVER_WIDTH) -> str:
    """Escaped for plotly, then cut into lines of `width` characters (the line breaks are the app's own)."""
    pieces = [text[i : i + width] for i in range(0, len(text), width)] or [""]
    return "<br>".join(label(p) for p in pieces)


def timeline_frame(tl: StepClock) -> pd.DataFrame:
    """The drawn bars in time order: lane, start and duration (ms from the step's start), what each is, its name,
    how many events it stands for, and whether it is this step's."""
    rows = [
        {
            "start_ms": ns_to_ms(b.start_ns),
            "dur_us": ns_to_us(b.dur_ns),
            "lane": tl.lanes[b.lane].label,
            "kind": b.kind,
            "part or category": b.key,
            "name": b.name,
            "events": b.count,
            "this step": b.own,
            "detail": b.detail,
        }
        for b in sorted(tl.bars, key=lambda b: (b.start_ns, b.lane))
    ]
    columns = ["start_ms", "dur_us", "lane", "kind", "part or category", "name", "events", "this step", "detail"]
    return pd.DataFrame(rows, columns=columns)


def merged_text(tl: StepClock) -> str:
    """What was merged, in words: nothing is dropped, so the caption says how many events went into how few bars."""
    if not tl.merged:
        return f"Every one of the {tl.events:,} events and gaps in the window is drawn as itself."
    events = sum(m.events for m in tl.merged)
    bars = sum(m.bars for m in tl.merged)
    lanes = ", ".join(f"{m.lane}: {m.events:,} into {m.bars:,}" for m in tl.merged[:8])
    more = f", and {len(tl.merged) - 8} lanes more" if len(tl.merged) > 8 else ""
    return (
        f"{tl.events:,} events and gaps in the window: {events:,} of them, each under a column "
        f"({tl.resolution_ns / 1e3:,.1f} µs), were merged with their neighbours into {bars:,} hatched bars "
        f"({lanes}{more}); the hover of a merged bar names what it holds. Zoom in (the window, or a click on a "
        "hatched bar) to draw them one by one."
    )


def timeline_figure(tl: StepClock, selected: Sequence[int] = (), title: str = "") -> go.Figure:
    """A lane per row, top to bottom as the timeline lists them; each bar from its start for as long as the time it
    holds (a merged bar: the time its events cover, never their span; plotly widens a bar under a pixel to one so
    that none vanishes), hatched when it merges short events, faded when it is another step's GPU work. The step's
    idle gaps are shaded across the GPU lanes and its external wait across the host lanes; sync call sites are
    marked; `selected` rows (GPU ops, or launch calls) get arrows from each launch call to its GPU op. A drag
    selects a stretch (the view draws it again at its own resolution)."""
    fig = go.Figure()
    for trace in _shading(tl):
        fig.add_trace(trace)
    on_top = ("external",)  # drawn last, over the sync wait it lies in
    named: set[str] = set()
    for (key, name, merged, own), bars in sorted(_bar_groups(tl).items(), key=lambda g: g[0][0] in on_top):
        fig.add_trace(_bar_trace(bars, key, name, merged, own, showlegend=name not in named))
        named.add(name)
    if tl.marks:
        fig.add_trace(_sync_marks_trace(tl))
    _lay_out_timeline(fig, tl, selected, title)
    return fig


def _bar_groups(tl: StepClock) -> dict[tuple[str, str, bool, bool], list[Bar]]:
    """The bars by (colour key, legend name, merged, own): a trace a group, since a browser draws a constant
    pattern and opacity several times faster."""
    groups: dict[tuple[str, str, bool, bool], list[Bar]] = {}
    for bar in tl.bars:
        groups.setdefault((*legend_key(bar), bar.count > 1, bar.own), []).append(bar)
    return groups


def _bar_trace(bars: list[Bar], key: str, name: str, merged: bool, own: bool, showlegend: bool) -> go.Bar:
    """One group's bars on their lanes, each as long as the time it holds; hatched when merged, faded when not the
    step's own; the hover names each and says when and for how long it ran."""
    return go.Bar(
        y=[b.lane for b in bars],
        x=[b.dur_ns / 1e6 for b in bars],  # as long as the time it holds: never a column more
        base=[b.start_ns / 1e6 for b in bars],
        orientation="h",
        width=0.8,
        name=label(name),
        legendgroup=label(name),
        showlegend=showlegend,
        opacity=1.0 if own else 0.35,
        marker={
            "color": color(key),
            "pattern": {"shape": "/" if merged else "", "solidity": 0.5},
            "line": {"width": 0},
        },
        customdata=[
            [
                _wrap(b.name),
                b.start_ns / 1e6,
                b.dur_ns / 1e3,
                _wrap(b.detail),
                b.row,
                b.start_ns,
                max(b.dur_ns, b.extent_ns),
                b.count,
            ]
            for b in bars
        ],
        hovertemplate="%{customdata[0]}<br>at %{customdata[1]:.3f} ms, for %{customdata[2]:,.1f} µs"
        "<br>%{customdata[3]}<extra>%{fullData.name}</extra>",
    )


def _sync_marks_trace(tl: StepClock) -> go.Scatter:
    """The sync call sites: a marker above each one's lane, the call and its detail in the hover."""
    return go.Scatter(
        x=[m.start_ns / 1e6 for m in tl.marks],
        y=[m.lane - 0.45 for m in tl.marks],
        mode="markers",
        name="sync call sites",
        marker={"symbol": "triangle-down", "size": 11, "color": COLORS["sync"]},
        customdata=[[_wrap(m.call), _wrap(m.detail)] for m in tl.marks],
        hovertemplate="sync: %{customdata[0]}<br>%{customdata[1]}<extra></extra>",
    )


def _lay_out_timeline(fig: go.Figure, tl: StepClock, selected: Sequence[int], title: str) -> None:
    """The figure's layout: the step's edges and the launch arrows of the `selected` rows, a lane a row from the
    top, a height that grows with the lanes, the legend under the axis, and a drag that selects a stretch."""
    height = max(360, LANE_PX * len(tl.lanes) + 200)
    plot = height - 140  # about the plot area's height: what the margins, the axis and the legend leave
    fig.update_layout(
        shapes=_edges(tl),
        annotations=_links(tl, selected),
        barmode="overlay",
        height=height,
        title=label(title),
        margin={"t": 40 if title else 10, "b": 10, "l": 10},
        legend={"orientation": "h", "y": -50 / plot, "yanchor": "top"},  # 50 px below the axis: under its title
        xaxis={"title": "ms from the step's start (its host window opens at 0)", "range": _ms(tl.window)},
        yaxis={
            "tickvals": list(range(len(tl.lanes))),
            "ticktext": [label(lane.label) for lane in tl.lanes],
            "range": [len(tl.lanes) - 0.5, -0.5],
            "fixedrange": True,
        },
        hoverlabel={"align": "left"},
        clickmode="event+select",
        dragmode="select",
        selectdirection="h",
    )


def dragged_window(event) -> tuple[float, float] | None:
    """The stretch (ms from the step's start) a drag across timeline_figure selected (Streamlit's box selection),
    if one did."""
    try:
        box = event["selection"]["box"][0]
        lo, hi = sorted(float(x) for x in box["x"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return (lo, hi) if hi > lo else None


def clicked_bar(event) -> tuple[int, int, int, int] | None:
    """(trace row, start ns, duration ns, events) of the bar clicked in timeline_figure (Streamlit's selection
    event), if a bar was clicked: a sync mark or nothing gives None."""
    for data in clicked_data(event):
        if isinstance(data, list | tuple) and len(data) == 8:
            return int(data[4]), int(data[5]), int(data[6]), int(data[7])
    return None


def _ms(pair: tuple[int, int]) -> list[float]:
    return [pair[0] / 1e6, pair[1] / 1e6]


def _shading(tl: StepClock) -> list[go.Bar]:
    """Idle gaps across the GPU lanes and external wait across the host lanes (the longest MAX_SHADED of each: every
    one is also a bar on its own lane), as one wide translucent bar trace each under the lanes' bars (a browser
    draws a trace of bars at once, where each shape is laid out on its own)."""
    out = []
    for group, kinds in (("gpu", ("idle", "lead")), ("host", ("external",))):
        rows = [i for i, lane in enumerate(tl.lanes) if lane.group == group]
        if not rows:
            continue
        bars = sorted((b for b in tl.bars if b.kind in kinds and b.count == 1), key=lambda b: -b.dur_ns)[:MAX_SHADED]
        if not bars:
            continue
        out.append(
            go.Bar(
                y=[(max(rows) + min(rows)) / 2] * len(bars),
                x=[b.dur_ns / 1e6 for b in bars],
                base=[b.start_ns / 1e6 for b in bars],
                orientation="h",
                width=max(rows) - min(rows) + 1,
                marker={"color": [color(legend_key(b)[0]) for b in bars], "line": {"width": 0}},
                opacity=0.15,
                name=f"shading: {group}",
                showlegend=False,
                hoverinfo="skip",
            )
        )
    return out


def _edges(tl: StepClock) -> list[dict]:
    """The host window's edges, dotted across the whole chart."""
    return [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": at / 1e6,
            "x1": at / 1e6,
            "y0": 0,
            "y1": 1,
            "line": {"width": 1, "dash": "dot", "color": COLORS["floor"]},
        }
        for at in (0, tl.wall_ns)
    ]


def _links(tl: StepClock, selected: Sequence[int]) -> list[dict]:
    """An arrow from each launch call (its start, on its lane) to the start of the GPU op it launched."""
    out = []
    for o in tl.links(selected)[:MAX_LINKS]:
        assert o.call_start_ns is not None  # links() returns only ops whose launch call is drawn
        out.append(
            {
                "x": o.start_ns / 1e6,
                "y": o.lane,
                "ax": o.call_start_ns / 1e6,
                "ay": o.call_lane,
                "xref": "x",
                "yref": "y",
                "axref": "x",
                "ayref": "y",
                "showarrow": True,
                "arrowhead": 2,
                "arrowwidth": 1.5,
                "arrowcolor": COLORS["line"],
                "text": "",
            }
        )
    return out


def partitions_frame(step: StepLedger, user_parts: tuple[str, ...] = ()) -> pd.DataFrame:
    """The step's wall two ways, each adding up to it (probe.analysis.ledger.host): by purpose and by mechanism, in
    ms."""
    rows = [
        {"partition": "by purpose", "part": f"part: {p}", "key": p, "ms": ns_to_ms(step.purpose_ns[p])}
        for p in user_parts
    ]
    rows += [
        {"partition": "by purpose", "part": p.label, "key": p.name, "ms": ns_to_ms(step.purpose_ns[p.name])}
        for p in PURPOSE_PARTS
    ]
    rows += [
        {"partition": "by mechanism", "part": p.label, "key": p.name, "ms": ns_to_ms(step.mechanism_ns[p.name])}
        for p in MECHANISM_PARTS
    ]
    return pd.DataFrame(rows)


def partitions_figure(step: StepLedger, user_parts: tuple[str, ...] = ()) -> go.Figure:
    """Two stacked bars, each the step's wall: by purpose (what it was doing) and by mechanism (what code ran)."""
    frame = partitions_frame(step, user_parts)
    frame = frame[frame["ms"] > 0]
    fig = go.Figure()
    for (key, part), rows in frame.groupby(["key", "part"], sort=False):
        fig.add_trace(
            go.Bar(
                y=rows["partition"],
                x=rows["ms"],
                orientation="h",
                name=label(part),
                marker_color=color(key, user_parts),
                hovertemplate="%{x:.3f} ms<extra>%{fullData.name}</extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        height=230,
        margin={"t": 10, "b": 10, "l": 10},
        legend={"orientation": "h", "yanchor": "top", "y": -0.45},
        xaxis_title=f"ms of the step's {ms(step.wall_ns)} ms wall",
        yaxis={"categoryorder": "array", "categoryarray": ["by mechanism", "by purpose"]},
    )
    return fig
