"""The Sweep view: a run's cells against prompt length, one line per engine, with report.json's predictions."""

from __future__ import annotations

import dataclasses

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from probe.analysis.diagnosis.report import Report
from probe.analysis.records.results import BenchResults
from probe.explorer.figures.style import COLORS, SERIES, label

SWEEP_METRICS = (("decode_tok_s", "decode tokens/s"), ("itl_p50_ms", "ITL p50 (ms)"), ("ttft_ms", "TTFT (ms)"))


def line_name(engine: str, batch: int) -> str:
    return engine if batch == 1 else f"{engine} B={batch}"


def sweep_frame(results: BenchResults) -> pd.DataFrame:
    """One row a cell (BenchResults.cells_frame), plus the line it belongs to and whether it is flagged."""
    frame = results.cells_frame()
    frame["line"] = [line_name(e, b) for e, b in zip(frame["engine"], frame["batch"], strict=True)]
    frame["mismatch"] = [m is False for m in frame["tokens_match_naive"]]
    return frame.sort_values(["line", "prompt_tokens"], kind="stable").reset_index(drop=True)


def prediction_frame(report: Report | None) -> pd.DataFrame:
    """report.json's per-cell predictions at batch 1, one row a prompt length (the terms do not depend on
    the engine): the host floor, the bandwidth term, and the prediction max(floor, traffic)."""
    cols = ["prompt_tokens", "floor_ms", "traffic_ms", "predicted_ms"]
    rows = [dataclasses.asdict(p) for p in (report.predictions if report else []) if p.batch == 1]
    if not rows:
        return pd.DataFrame(columns=cols)
    frame = pd.DataFrame(rows)[cols].drop_duplicates("prompt_tokens")
    return frame.sort_values("prompt_tokens").reset_index(drop=True)


def sweep_figure(results: BenchResults, report: Report | None = None) -> go.Figure:
    """Tokens/s, ITL and TTFT against prompt length, one line per engine, log x; the host floor and the
    bandwidth roofline dashed; cells whose tokens differ from naive's circled in red; cells measured while other
    processes took the CPU crossed in orange."""
    frame, pred = sweep_frame(results), prediction_frame(report)
    fig = make_subplots(rows=1, cols=3, subplot_titles=[name for _, name in SWEEP_METRICS], horizontal_spacing=0.07)
    _add_engine_lines(fig, frame)
    _add_predictions(fig, pred)
    _add_flagged_cells(fig, frame)
    prompts = sorted(set(frame["prompt_tokens"]))
    fig.update_xaxes(type="log", title_text="prompt tokens", tickvals=prompts, ticktext=[str(p) for p in prompts])
    fig.update_layout(height=440, margin={"t": 40, "b": 10}, legend={"orientation": "h", "y": -0.25})
    return fig


def _add_engine_lines(fig: go.Figure, frame: pd.DataFrame) -> None:
    """One line per engine and batch in each panel, against prompt length, the legend once."""
    for i, (line, cells) in enumerate(frame.groupby("line", sort=False)):
        shown = label(line)
        for col, (metric, _) in enumerate(SWEEP_METRICS, start=1):
            fig.add_trace(
                go.Scatter(
                    x=cells["prompt_tokens"],
                    y=cells[metric],
                    mode="lines+markers",
                    name=shown,
                    legendgroup=shown,
                    showlegend=col == 1,
                    line={"color": SERIES[i % len(SERIES)]},
                    customdata=cells[["engine", "batch"]].assign(engine=lambda f: f["engine"].map(label)),
                    hovertemplate="%{fullData.name}<br>prompt %{x}<br>%{y:.3g}<extra></extra>",
                ),
                row=1,
                col=col,
            )


def _add_flagged_cells(fig: go.Figure, frame: pd.DataFrame) -> None:
    """In each panel, the cells whose tokens differ from naive's circled, then the contended cells crossed."""
    bad = frame[frame["mismatch"]]
    contended = frame[frame["contended"] == True]  # noqa: E712 (None: not judged)
    for col, (metric, _) in enumerate(SWEEP_METRICS, start=1):
        fig.add_trace(_mismatch_markers(bad, metric, first=col == 1), row=1, col=col)
        fig.add_trace(_contended_markers(contended, metric, first=col == 1), row=1, col=col)


def _mismatch_markers(bad: pd.DataFrame, metric: str, first: bool) -> go.Scatter:
    """A red circle on each cell whose tokens differ from naive's (in the legend from the `first` panel)."""
    marker = {"symbol": "circle-open", "size": 16, "color": COLORS["flagged"], "line": {"width": 3}}
    text = [label(line) for line in bad["line"]]
    return _cell_markers(
        bad, metric, first, "tokens differ from naive", "mismatch", text, marker, "tokens differ from naive"
    )


def _contended_markers(contended: pd.DataFrame, metric: str, first: bool) -> go.Scatter:
    """An orange cross on each cell run while other processes took the CPU, and how many cores they took."""
    marker = {"symbol": "x-thin-open", "size": 13, "color": COLORS["timing_alert"], "line": {"width": 2}}
    cores = contended["other_cpu_cores"].fillna(0)
    text = [f"{label(line)}: {n:.2f} other cores" for line, n in zip(contended["line"], cores, strict=True)]
    name = "contended: other processes took the CPU"
    return _cell_markers(contended, metric, first, name, "contended", text, marker, "contended, its timings unreliable")


def _cell_markers(
    cells: pd.DataFrame, metric: str, first: bool, name: str, group: str, text: list[str], marker: dict, says: str
) -> go.Scatter:
    """A marker on each of `cells` at its `metric`, in the legend (as `name`) from the `first` panel only."""
    return go.Scatter(
        x=cells["prompt_tokens"],
        y=cells[metric],
        mode="markers",
        name=name,
        legendgroup=group,
        showlegend=first and not cells.empty,
        text=text,
        marker=marker,
        hovertemplate=f"%{{text}}: {says}<extra></extra>",
    )


def _add_predictions(fig: go.Figure, pred: pd.DataFrame) -> None:
    """As in the write-ups' figures: ITL against the two controls (the host floor, the bandwidth roofline),
    tokens/s against the prediction they make together, 1000 / max(floor, traffic)."""
    if pred.empty:
        return
    x = pred["prompt_tokens"]
    for name, ms, color, dash in (
        ("host floor", pred["floor_ms"], COLORS["floor"], "dash"),
        ("bandwidth roofline", pred["traffic_ms"], COLORS["roofline"], "dot"),
    ):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=ms,
                mode="lines",
                name=name,
                line={"color": color, "dash": dash},
                hovertemplate=f"{name}: %{{y:.3g}} ms<extra></extra>",
            ),
            row=1,
            col=2,
        )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=1e3 / pred["predicted_ms"],
            mode="lines",
            name="prediction",
            line={"color": COLORS["floor"], "dash": "dashdot"},
            hovertemplate="max(floor, traffic): %{y:.3g} tok/s<extra></extra>",
        ),
        row=1,
        col=1,
    )
