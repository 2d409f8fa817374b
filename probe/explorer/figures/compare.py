"""The Compare and Alerts views: a baseline against the current source, category by category (two traces) or
cell by cell (two runs), and probe compare's own table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from probe.analysis.ledger.types import TraceAnalysis
from probe.analysis.records.results import BenchResults
from probe.analysis.regression.compare import COLUMNS, Comparison, row_cells
from probe.explorer.figures.ledger import host_categories, ledger_frame
from probe.explorer.figures.style import COLORS, GPU_CATEGORIES, HOST_CATEGORIES, label, labels, round_axis
from probe.explorer.figures.sweep import SWEEP_METRICS

CATEGORY_LABELS = {"wall": "wall", **dict(HOST_CATEGORIES), **dict(GPU_CATEGORIES), "dispatch": "dispatch / step"}
# (a trace analyzed with --part adds its parts: trace_compare_frame)
DELTA_COLUMNS = ["what", "baseline", "current", "delta", "delta_pct"]


def compared_kind(kinds: Sequence[str]) -> str:
    """The step kind Compare draws, of those probe compare holds to each other: decode when both have it (the steady
    steps), else the first."""
    return "decode" if "decode" in kinds else kinds[0]


def trace_categories(analysis: TraceAnalysis, kind: str) -> dict[str, float]:
    """Mean per step of this kind of wall, each host category and, on a GPU trace, GPU busy / idle (ms), and
    the dispatch count. Means, not medians, so the host categories still add up to the wall time."""
    frame = ledger_frame(analysis)
    frame = frame[frame["kind"] == kind]
    keys = ["wall"] + [k for k, _ in host_categories(analysis)]
    if analysis.on_gpu:  # a CPU-only trace has no GPU side to compare
        keys += [k for k, _ in GPU_CATEGORIES]
    out = {k: float(frame[f"{k}_ms"].mean()) for k in keys}
    out["dispatch"] = float(frame["dispatch"].mean())
    return out


def delta_frame(
    base: Mapping[str, float], cur: Mapping[str, float], names: Mapping[str, str], percent: bool = True
) -> pd.DataFrame:
    """Baseline, current, current - baseline and the change in % for every key of `names` both sides have; no %
    (NaN) where the two sides did different work (probe.analysis.regression.comparable)."""
    rows = []
    for key, name in names.items():
        if key not in base or key not in cur:
            continue
        b, c = base[key], cur[key]
        pct = _pct(c - b, b) if percent else float("nan")
        rows.append({"what": name, "baseline": b, "current": c, "delta": c - b, "delta_pct": pct})
    return pd.DataFrame(rows, columns=DELTA_COLUMNS)


def _pct(delta: float, base: float) -> float:
    return 100 * delta / base if base else float("nan")


def trace_compare_frame(
    base_analysis: TraceAnalysis, cur_analysis: TraceAnalysis, kind: str, percent: bool = True
) -> pd.DataFrame:
    """The two traces' steps of one kind (one probe compare holds to each other), category by category."""
    names = {
        "wall": "wall",
        **dict(host_categories(cur_analysis)),
        **dict(GPU_CATEGORIES),
        "dispatch": "dispatch / step",
    }
    base, cur = (trace_categories(a, kind) for a in (base_analysis, cur_analysis))
    return delta_frame(base, cur, names, percent)


def trace_compare_figure(frame: pd.DataFrame, base_name: str, cur_name: str) -> go.Figure:
    """Per-category ms per step, baseline against current, one pair of bars a row (wall at the top) with the
    change written beside each pair, in room kept for it on the right."""
    times = frame[frame["what"] != CATEGORY_LABELS["dispatch"]].iloc[::-1]  # plotly draws the first row lowest
    y = labels(times["what"])
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            y=y,
            x=times["baseline"],
            orientation="h",
            name=label(f"baseline: {base_name}"),
            marker_color=COLORS["baseline"],
            hovertemplate="%{y}: %{x:.3f} ms<extra>baseline</extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            y=y,
            x=times["current"],
            orientation="h",
            name=label(f"current: {cur_name}"),
            marker_color=COLORS["current"],
            text=[_signed(d, p) for d, p in zip(times["delta"], times["delta_pct"], strict=True)],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:.3f} ms (%{text})<extra>current</extra>",
        )
    )
    top = float(pd.concat([times["baseline"], times["current"]]).max()) if len(times) else 1.0
    fig.update_layout(
        barmode="group",
        height=max(300, 44 * len(times) + 120),
        xaxis_title="ms per step (mean over steady-state steps)",
        legend={"orientation": "h", "y": -0.12, "yanchor": "top"},
        margin={"t": 20, "b": 10, "r": 20},
    )
    fig.update_xaxes(**round_axis(0, top or 1.0, headroom=0.35))  # room on the right for the changes
    return fig


def _signed(delta: float, pct: float) -> str:
    return f"{delta:+.3f} ms" + ("" if pct != pct else f" ({pct:+.0f}%)")


def run_compare_frame(base: BenchResults, cur: BenchResults, cells: Sequence[str]) -> pd.DataFrame:
    """One row a cell probe compare holds to each other (`cells`, by key: engine, prompt, new tokens, batch) and a
    sweep metric: the change."""
    mine = {str(c.key): c for c in cur.cells}
    rows = []
    for b in base.cells:
        c = mine.get(str(b.key))
        if c is None or str(b.key) not in cells:
            continue
        for metric, name in SWEEP_METRICS:
            bv, cv = getattr(b, metric), getattr(c, metric)
            rows.append(
                {
                    "cell": str(b.key),
                    "metric": name,
                    "baseline": bv,
                    "current": cv,
                    "delta": cv - bv,
                    "delta_pct": _pct(cv - bv, bv),
                }
            )
    return pd.DataFrame(rows, columns=["cell", "metric", "baseline", "current", "delta", "delta_pct"])


def run_compare_figure(frame: pd.DataFrame, base_name: str, cur_name: str) -> go.Figure:
    """The sweep metrics cell by cell, baseline against current, one panel a metric; the cells' names slanted
    so that they do not run into each other."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=[name for _, name in SWEEP_METRICS])
    for col, (_, name) in enumerate(SWEEP_METRICS, start=1):
        rows = frame[frame["metric"] == name]
        for side, source in (("baseline", base_name), ("current", cur_name)):
            fig.add_trace(
                go.Bar(
                    x=labels(rows["cell"]),
                    y=rows[side],
                    name=label(f"{side}: {source}"),
                    marker_color=COLORS[side],
                    legendgroup=side,
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(tickangle=-40, automargin=True)
    fig.update_layout(barmode="group", height=460, legend={"orientation": "h", "y": -0.45}, margin={"t": 40, "b": 10})
    return fig


def comparison_frame(comparison: Comparison) -> pd.DataFrame:
    """probe compare's table (its own columns and cell formatting), one row a key and metric."""
    return pd.DataFrame([row_cells(r) for r in comparison.rows], columns=list(COLUMNS))
