"""The Kernels view: each step's GPU time by kernel category, and the top kernels of a scope."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from probe.analysis.ledger.kernels import KernelStat, short_name
from probe.analysis.ledger.types import TraceAnalysis
from probe.explorer.figures.style import COLORS, NAME_WIDTH, color, label, labels, ranked_bars, step_ticks
from probe.text import ns_to_ms, ns_to_us, short

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CXX = frozenset(  # C++'s own words: never what tells two kernels apart
    {"anonymous", "namespace", "lambda", "operator", "const", "unsigned", "signed", "void", "bool", "char", "short"}
    | {"int", "long", "float", "double", "std"}
)
TOLD_WIDTH = 40  # characters of the word that tells two kernels of one short name apart


def kernels_frame(stats: Sequence[KernelStat]) -> pd.DataFrame:
    """Kernels by total GPU time, with the full name."""
    rows = [
        {
            "kernel": k.name,
            "category": k.category,
            "count": k.count,
            "total_ms": ns_to_ms(k.total_ns),
            "mean_us": ns_to_us(k.mean_ns),
            "p50_us": ns_to_us(k.p50_ns),
            "max_us": ns_to_us(k.max_ns),
            "share_of_busy": k.share_of_busy,
        }
        for k in stats
    ]
    columns = ["kernel", "category", "count", "total_ms", "mean_us", "p50_us", "max_us", "share_of_busy"]
    return pd.DataFrame(rows, columns=columns)


def kernel_labels(names: Sequence[str]) -> list[str]:
    """Each kernel as an axis names it: as nsys does (short_name); where several would read the same, each with the
    first word of its full name the others lack (`elementwise_kernel [BinaryFunctor]`), else its place among them
    (`#2`): two kernels are never one label."""
    base = [short_name(n) for n in names]
    groups: dict[str, list[int]] = {}
    for i, b in enumerate(base):
        groups.setdefault(b, []).append(i)
    out = list(base)
    for b, members in groups.items():
        if len(members) < 2:
            continue
        words = [_WORD.findall(names[i]) for i in members]
        shared = set.intersection(*(set(w) for w in words)) | _CXX
        for k, (i, mine) in enumerate(zip(members, words, strict=True), start=1):
            told = next((w for w in mine if w not in shared), "")
            out[i] = f"{b} [{told}]" if told and len(told) <= TOLD_WIDTH else f"{b} #{k}"
    told_apart = list(out)
    seen: dict[str, int] = {}
    for i, text in enumerate(told_apart):  # two that differ first in the same word: their places tell them apart
        seen[text] = seen.get(text, 0) + 1
        if told_apart.count(text) > 1:
            out[i] = f"{text} #{seen[text]}"
    return out


def kernels_figure(stats: Sequence[KernelStat], title: str = "") -> go.Figure:
    """Top kernels by total time, coloured by category; the axis names them as nsys does (short_name, told apart
    where two would read the same), the hover has the whole name."""
    frame = kernels_frame(stats)
    return ranked_bars(
        [short(n, NAME_WIDTH) for n in kernel_labels(frame["kernel"])],
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
        {"position": s.position, "step": s.name, "category": c, "ms": ns_to_ms(ns)}
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
    steps = step_ticks(positions, [s.name for s in analysis.steps])  # by position: steps may share a name
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
            y=[ns_to_ms(s.gpu_busy_ns) for s in analysis.steps],
            mode="lines+markers",
            name="GPU busy",
            line={"color": COLORS["line"], "width": 1.5},
        )
    )
    fig.update_layout(
        barmode="stack",
        height=420,
        margin={"t": 30, "b": 10},
        yaxis_title="GPU ms per step",
        xaxis={"type": "category", "title": "step (position: name)"},
        hovermode="x unified",
    )
    return fig
