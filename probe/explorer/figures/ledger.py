"""The Step ledger view: each step's wall time split into host parts, beside its GPU busy and idle time."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from probe.analysis.ledger.host import PURPOSE_PARTS
from probe.analysis.ledger.types import StepLedger, TraceAnalysis
from probe.explorer.figures.style import (
    COLORS,
    GPU_CATEGORIES,
    HOST_CATEGORIES,
    MECHANISM_CATEGORIES,
    color,
    label,
    round_axis,
    step_ticks,
)
from probe.text import ns_to_ms

GPU_COLUMNS = ("gpu_window_ms", "gpu_busy_ms", "gpu_idle_ms")  # NaN on a CPU-only trace: not measured, not 0
NAN = float("nan")


def dispatch_label(analysis: TraceAnalysis) -> str:
    """What the ledger counts as dispatch on this trace (TraceAnalysis.dispatch): launches, or on a CPU-only trace
    the top-level (dispatched aten) ops that stand in for them."""
    if analysis.on_gpu:
        return "kernel launches per step (graph launches included)"
    return "top-level ops per step (dispatched aten ops; a CPU trace has no launches)"


def host_categories(analysis: TraceAnalysis) -> tuple[tuple[str, str], ...]:
    """The host parts as the app draws them: the user's --part's first, then HOST_CATEGORIES."""
    return tuple((p, f"part: {p}") for p in analysis.user_parts) + HOST_CATEGORIES


def host_ns(step: StepLedger, user_parts: tuple[str, ...] = ()) -> dict[str, int]:
    """The step's purpose partition (StepLedger.purpose_ns: the user's parts, then the built-in ones) grouped as the
    app draws it, the three cache parts as one `cache`. Sums to the step's wall."""
    grouped = {p: step.purpose_ns[p] for p in user_parts}
    for p in PURPOSE_PARTS:
        grouped[p.group] = grouped.get(p.group, 0) + step.purpose_ns[p.name]
    return grouped


def mechanism_column(part: str) -> str:
    """The ledger frame's column of a mechanism part: `by_mechanism_python_ms` (the purpose parts are `cache_ms`...)."""
    return f"by_mechanism_{part}_ms"


def ledger_frame(analysis: TraceAnalysis) -> pd.DataFrame:
    """One row a step: wall, GPU busy / idle (None on a CPU-only trace), the host's two partitions in ms (by
    purpose grouped as host_categories, `cache_ms` ..., then by mechanism, `by_mechanism_python_ms` ...: each adds
    up to wall_ms), and the dispatch count."""
    rows = []
    for s in analysis.steps:
        gpu = (s.gpu_window_ns, s.gpu_busy_ns, s.gpu_idle_ns) if analysis.on_gpu else (NAN, NAN, NAN)
        row = {"position": s.position, "step": s.name, "kind": s.kind, "wall_ms": ns_to_ms(s.wall_ns)}
        row |= {column: ns_to_ms(ns) for column, ns in zip(GPU_COLUMNS, gpu, strict=True)}
        row |= {f"{key}_ms": ns_to_ms(ns) for key, ns in host_ns(s, analysis.user_parts).items()}
        row |= {mechanism_column(key): ns_to_ms(s.mechanism_ns[key]) for key, _ in MECHANISM_CATEGORIES}
        row["dispatch"] = s.dispatched
        rows.append(row)
    return pd.DataFrame(rows)


def ledger_figure(analysis: TraceAnalysis) -> go.Figure:
    """Stacked bars a step, side by side: host time by purpose part, host time by mechanism (each adds up to the
    step's wall time), and on a GPU trace GPU busy and idle; launches (or top-level ops) per step on the right
    axis, ticked at round counts."""
    frame = ledger_frame(analysis)
    gpu = analysis.on_gpu
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = step_ticks(frame["position"], frame["step"])
    _stack(fig, x, frame, host_categories(analysis), "host", "host: ", analysis.user_parts)
    mechanism = tuple((key, name) for key, name in MECHANISM_CATEGORIES)
    _stack(fig, x, frame, mechanism, "mechanism", "by mechanism: ", analysis.user_parts, mechanism_column)
    if gpu:
        _stack(fig, x, frame, GPU_CATEGORIES, "gpu", "", analysis.user_parts)
    fig.add_trace(
        go.Scatter(
            x=x,
            y=frame["dispatch"],
            mode="lines+markers",
            name=dispatch_label(analysis),
            line={"color": COLORS["line"], "width": 1.5},
            marker={"size": 6},
        ),
        secondary_y=True,
    )
    fig.update_layout(
        barmode="group",
        bargap=0.25,
        height=460,
        margin={"t": 30, "b": 10},
        legend={"x": 1.08, "y": 1, "yanchor": "top"},  # right of the launches axis, clear of the step names
        hovermode="x unified",
    )
    fig.update_xaxes(type="category", title_text="step (position: name)")
    fig.update_yaxes(title_text="ms per step", secondary_y=False)
    top = float(frame["dispatch"].max()) if len(frame) else 0.0
    fig.update_yaxes(
        title_text="launches / step" if gpu else "top-level ops / step",
        secondary_y=True,
        showgrid=False,
        tickformat=",d",
        **round_axis(0, top or 1, integer=True, headroom=0.15),
    )
    return fig


def _stack(
    fig: go.Figure,
    x: list[str],
    frame: pd.DataFrame,
    categories: tuple[tuple[str, str], ...],
    group: str,
    prefix: str,
    user_parts: tuple[str, ...],
    column=lambda key: f"{key}_ms",
) -> None:
    """Bars of one offset group stacked by explicit bases, so several stacks can stand side by side."""
    base = pd.Series(0.0, index=frame.index)
    for key, name in categories:
        y = frame[column(key)]
        fig.add_trace(
            go.Bar(
                x=x,
                y=y,
                base=base.copy(),
                name=label(prefix + name),
                offsetgroup=group,
                marker_color=color(key, user_parts),
                hovertemplate="%{y:.3f} ms",
            ),
            secondary_y=False,
        )
        base = base + y
