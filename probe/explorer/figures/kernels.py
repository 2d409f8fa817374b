"""The Kernels view: each step's GPU time by kernel category, and the top kernels of a scope."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from probe.analysis.ledger.kernels import KernelStat, short_name
from probe.analysis.ledger.types import TraceAnalysis
from probe.explorer.figures.style import COLORS, color, label, labels, ms, ranked_bars, short, us


def kernels_frame(stats: Sequence[KernelStat]) -> pd.DataFrame:
    """Kernels by total GPU time, with the full name."""
    rows = [
        {
            "kernel": k.name,
            "category": k.category,
            "count": k.count,
            "total_ms": ms(k.total_ns),
            "mean_us": us(k.mean_ns),
            "p50_us": us(k.p50_ns),
            "max_us": us(k.max_ns),
            "share_of_busy": k.share_of_busy,
        }
        for k in stats
    ]
    columns = ["kernel", "category", "count", "total_ms", "mean_us", "p50_us", "max_us", "share_of_busy"]
    return pd.DataFrame(rows, columns=columns)


def kernels_figure(stats: Sequence[KernelStat], title: str = "") -> go.Figure:
    """Top kernels by total time, coloured by category; the axis names them as nsys does (short_name), the
    hover has the whole name."""
    frame = kernels_frame(stats)
    return ranked_bars(
        [f"{i}. {short(short_name(n))}" for i, n in enumerate(frame["kernel"], start=1)],
        frame["total_ms"],
        list(zip(labels(frame["kernel"]), labels(frame["category"]), frame["count"], strict=True)),
        "%{customdata[0]}<br>%{customdata[1]}: %{x:.3f} ms in %{customdata[2]} launch(es)<extra></extra>",
        [color(c) for c in frame["category"]],
        "GPU time (ms)",
        title,
        min_height=280,
    )


def kernel_category_frame(analysis: TraceAnalysis) -> pd.DataFrame:
    """One row a step and category: the step's GPU time in kernels of that category (ms)."""
    rows = [
        {"position": s.position, "step": s.name, "category": c, "ms": ms(ns)}
        for s in analysis.steps
        for c, ns in s.kernels_by_category.items()
    ]
    return pd.DataFrame(rows, columns=["position", "step", "category", "ms"])


def kernel_category_figure(analysis: TraceAnalysis) -> go.Figure:
    """One stacked bar a step: its GPU time by kernel category; the step's GPU busy time as a line (categories
    can sum past it when kernels overlap on several streams)."""
    frame = kernel_category_frame(analysis)
    fig = go.Figure()
    positions = [s.position for s in analysis.steps]
    steps = labels(s.name for s in analysis.steps)
    for category, rows in frame.groupby("category", sort=False):
        by_step = dict(zip(rows["position"], rows["ms"], strict=True))
        fig.add_trace(
            go.Bar(
                x=steps,
                y=[by_step.get(p, 0.0) for p in positions],
                name=label(category),
                marker_color=color(category),
                hovertemplate="%{y:.3f} ms",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=[ms(s.gpu_busy_ns) for s in analysis.steps],
            mode="lines+markers",
            name="GPU busy",
            line={"color": COLORS["line"], "width": 1.5},
        )
    )
    fig.update_layout(
        barmode="stack",
        height=420,
        margin={"t": 30, "b": 10},
        legend={"orientation": "h", "y": -0.2},
        yaxis_title="GPU ms per step",
        hovermode="x unified",
    )
    return fig
