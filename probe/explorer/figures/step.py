"""The One step view: a step's top-level ops, runtime calls and ranges on its thread, in time order."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from probe.analysis.ledger import StepLedger
from probe.analysis.timeline import TimelineItem
from probe.explorer.figures.style import COLORS, color, label, labels

MAX_SHADED = 200  # cache ranges shaded on one timeline; beyond this the bars' own colour carries it
TIMELINE_LANES = ("ops", "cache", "ranges")  # bottom to top


def step_label(step: StepLedger) -> str:
    """How a step picker shows a step: its position, then its name."""
    return f"{step.position}: {step.name}"


def timeline_frame(items: Sequence[TimelineItem]) -> pd.DataFrame:
    """The step's timeline (probe.analysis.timeline.step_timeline) in order: start and duration in µs from the step's
    start, what it is, which host part its time feeds, and whether that part is cache bookkeeping."""
    cols = ["start_us", "dur_us", "kind", "part", "name"]
    frame = pd.DataFrame([{c: getattr(it, c) for c in cols} for it in items], columns=cols)
    frame["cache"] = frame["part"].str.startswith("cache")
    return frame


def timeline_figure(items: Sequence[TimelineItem], title: str = "") -> go.Figure:
    """Top-level ops (and runtime calls outside any op) on one lane, the cache ranges on their own lane, our
    other ranges on a third; each bar from its start for its duration, coloured by the host part it feeds;
    the cache ranges are also shaded across every lane."""
    frame = timeline_frame(items)
    frame["lane"] = frame["kind"].map({"range": "ranges", "op": "ops", "runtime": "ops"})
    frame.loc[frame["cache"] & (frame["kind"] == "range"), "lane"] = "cache"
    fig = go.Figure()
    for part, rows in frame.groupby("part", sort=False):
        fig.add_trace(
            go.Bar(
                y=rows["lane"],
                x=rows["dur_us"],
                base=rows["start_us"],
                orientation="h",
                name=label(part),
                marker_color=color(part),
                customdata=list(zip(labels(rows["name"]), rows["start_us"], strict=True)),
                hovertemplate="%{customdata[0]}<br>start %{customdata[1]:.1f} µs, %{x:.1f} µs"
                "<extra>%{fullData.name}</extra>",
            )
        )
    shaded = frame[frame["cache"] & (frame["kind"] == "range")].head(MAX_SHADED)
    band = {"type": "rect", "xref": "x", "yref": "y domain", "y0": 0, "y1": 1, "opacity": 0.18, "line": {"width": 0}}
    fig.update_layout(  # one list: add_vrect would re-validate every band already there
        shapes=[
            band | {"x0": start, "x1": start + dur, "fillcolor": COLORS.get(part, COLORS["cache"])}
            for start, dur, part in zip(shaded["start_us"], shaded["dur_us"], shaded["part"], strict=True)
        ],
        barmode="overlay",
        height=300,
        title=label(title),
        margin={"t": 40 if title else 10, "b": 10},
        legend={"orientation": "h", "y": -0.35},
        xaxis_title="µs from the step's start",
    )
    fig.update_yaxes(categoryorder="array", categoryarray=list(TIMELINE_LANES))
    return fig
