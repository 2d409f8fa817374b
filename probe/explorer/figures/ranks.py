"""The Ranks view: a job's traces (probe.analysis.ledger.ranks) step by step, and its straggler."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from probe.analysis.ledger.ranks import Ranks, StepAcrossRanks
from probe.explorer.figures.style import COLORS
from probe.text import ns_to_ms

RANK_DASH = ("solid", "dash", "dot", "dashdot", "longdash")
RANK_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x")


def coinciding(result: Ranks) -> list[tuple[int, list[int]]]:
    """(rank, the later ranks whose wall equals its own at every step): lines the chart draws one over another."""
    walls = {r: [s.ranks[i].wall_ns for s in result.by_step] for i, r in enumerate(result.ranks)}
    out, taken = [], set()
    for r in result.ranks:
        same = [o for o in result.ranks if o > r and o not in taken and walls[o] == walls[r]]
        if same and r not in taken:
            out.append((r, same))
            taken.update(same)
    return out


def ranks_frame(result: Ranks) -> pd.DataFrame:
    """One row a step: each rank's wall (ms), the slowest rank, the median rank's wall and how far it trails."""
    rows = []
    for s in result.by_step:
        row = {"step": s.step, "name": s.name}
        row |= {f"rank {r.rank} ms": ns_to_ms(r.wall_ns) for r in s.ranks}
        row |= {
            "straggler": s.held_by,
            "by": s.rule,
            "slowest rank": s.slowest_rank,
            "median ms": ns_to_ms(s.median_wall_ns),
            "trails by ms": ns_to_ms(s.trails_median_ns),
            "trails %": s.trails_median_pct,
        }
        rows.append(row)
    return pd.DataFrame(rows)


def _wall_of(s: StepAcrossRanks, rank: int) -> int:
    return next(r.wall_ns for r in s.ranks if r.rank == rank)


def _held_by_text(s: StepAcrossRanks) -> str:
    """A step's straggler in words, by the rule that named it (probe.analysis.ledger.ranks.held_by_rank)."""
    if s.rule == "collectives":
        own = next(r.collectives_ns for r in s.ranks if r.rank == s.held_by)
        return (
            f"rank {s.held_by}: {ns_to_ms(own):.3f} ms in collectives against a median of "
            f"{ns_to_ms(s.median_collectives_ns):.3f} ms: the others wait for it"
        )
    return f"rank {s.held_by}: the slowest wall, +{s.trails_median_pct:.1f}% on the median"


def ranks_figure(result: Ranks) -> go.Figure:
    """Wall per step, one line a rank; each step's straggler circled (the rank the others wait for: ranks.held_by_rank);
    GPU busy per step below on a GPU job."""
    gpu = result.on_gpu
    fig = make_subplots(
        rows=2 if gpu else 1,
        cols=1,
        shared_xaxes=True,
        subplot_titles=["wall per step (ms)", *(["GPU busy per step (ms)"] if gpu else [])],
        vertical_spacing=0.12,
    )
    steps = [s.step for s in result.by_step]
    n = len(result.ranks)
    for i, rank in enumerate(result.ranks):
        name = f"rank {rank}"
        # each rank its own dash, marker and width, the first widest and drawn first: ranks whose walls coincide
        # show as lines inside lines, never as one line
        style = {
            "line": {"dash": RANK_DASH[i % len(RANK_DASH)], "width": 1.5 + 2 * (n - 1 - i) / max(n - 1, 1)},
            "marker": {"symbol": RANK_SYMBOLS[i % len(RANK_SYMBOLS)], "size": 6 + 6 * (n - 1 - i) / max(n - 1, 1)},
        }
        walls = [ns_to_ms(s.ranks[i].wall_ns) for s in result.by_step]
        fig.add_trace(
            go.Scatter(x=steps, y=walls, mode="lines+markers", name=name, legendgroup=name, **style), row=1, col=1
        )
        if gpu:
            busy = [ns_to_ms(s.ranks[i].gpu_busy_ns) for s in result.by_step]
            fig.add_trace(
                go.Scatter(
                    x=steps, y=busy, mode="lines+markers", name=name, legendgroup=name, showlegend=False, **style
                ),
                row=2,
                col=1,
            )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=[ns_to_ms(_wall_of(s, s.held_by)) for s in result.by_step],
            mode="markers",
            name="straggler",
            text=[_held_by_text(s) for s in result.by_step],
            marker={"symbol": "circle-open", "size": 16, "color": COLORS["flagged"], "line": {"width": 3}},
            hovertemplate="step %{x}: %{text}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.update_xaxes(title_text="step", row=2 if gpu else 1, col=1)
    fig.update_layout(height=560 if gpu else 380, margin={"t": 40})
    return fig
