"""The History view: one configuration's runs in order (probe.analysis.regression.history.trend), what `probe history
check` flagged, and a click that opens a run."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from probe.analysis.regression.compare import fmt_count
from probe.analysis.regression.history import ConfigInfo
from probe.explorer.figures.style import COLORS, HOST_CATEGORIES, clicked_data, color, label, labels, round_axis

HISTORY_PANELS = ("host time per step (µs)", "launches per step", "decode tokens/s")
COUNT_ALERT = "launch-count alert (exact)"
TIMING_ALERT = "timing alert (across sessions: a lead)"
_HOVER = "%{customdata}<br>%{y:,.1f}<extra>%{fullData.name}</extra>"


def by_most_runs(configs: list[ConfigInfo]) -> list[ConfigInfo]:
    """The configurations with the most runs first (a trend needs runs), the most recently run first among
    equals (history.configs' own order)."""
    return sorted(configs, key=lambda c: -c.runs)


def history_ticks(frame: pd.DataFrame) -> list[str]:
    """Each run's x label: its commit (a + when tracked files were modified) over the time it ran (UTC)."""
    return [
        f"{label(commit_tick(c))}{'+' if d else ''}<br>{t:%m-%d %H:%M}"
        for c, d, t in zip(frame["commit"], frame["dirty"], frame["recorded_at"], strict=True)
    ]


def commit_tick(commit: str) -> str:
    """A commit as a tick: its hash cut to 7, as git shortens it; anything else ("no commit") whole."""
    text = commit.removesuffix("+dirty")
    return text[:7] if text and all(c in "0123456789abcdef" for c in text) else text


def history_parts(frame: pd.DataFrame) -> list[str]:
    """The host parts a profiled unit's runs were split into (probe.analysis.regression.history.trend's part:
    columns)."""
    return [c.removeprefix("part:") for c in frame.columns if c.startswith("part:")]


def history_figure(frame: pd.DataFrame, unit: str = "") -> go.Figure:
    """One configuration's runs in order (x: commit and time): host time per step (stacked by part for a profiled
    unit, the median step of a bench cell otherwise), launches per step and, for a bench cell, decode tokens/s,
    one panel each; runs that `probe history check` flagged marked on top, red for the exact counts, orange for
    the timings (which compare sessions). Every point carries its run id (customdata) for clicks."""
    rows = 3 if frame["decode_tok_s"].notna().any() else 2  # a profiled step measures no tokens/s
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=True,
        subplot_titles=HISTORY_PANELS[:rows],
        vertical_spacing=0.08,
        row_heights=[0.5, 0.25, 0.25] if rows == 3 else [0.6, 0.4],
    )
    _history_host(fig, frame)
    _history_line(fig, frame, "launches", "launches / step", 2, COLORS["line"], labelled=True)
    if rows == 3:
        _history_line(fig, frame, "decode_tok_s", "decode tok/s", 3, COLORS["current"])
    _history_alerts(fig, frame, rows)
    title = unit if rows == 3 else f"{unit} (a profiled step: decode tokens/s are measured by the bench cells)"
    fig.update_layout(
        barmode="stack",
        height=640 if rows == 3 else 560,
        margin={"t": 70, "b": 10},
        legend={"orientation": "h", "y": -0.12},
        title={"text": label(title), "x": 0, "y": 0.98, "font": {"size": 14}},
        clickmode="event+select",
    )
    fig.update_xaxes(tickvals=list(frame["position"]), ticktext=history_ticks(frame), row=rows, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    launches = frame["launches"].dropna()
    if len(launches):  # not from zero: 262 -> 266 must show; room above for the labels
        low, high = float(launches.min()), float(launches.max())
        pad = max(1.0, 0.15 * (high - low))
        fig.update_yaxes(tickformat=",d", **round_axis(low - pad, high + pad, integer=True, headroom=0.3), row=2, col=1)
    if rows == 3:
        fig.update_yaxes(rangemode="tozero", row=3, col=1)
    return fig


def _history_host(fig: go.Figure, frame: pd.DataFrame) -> None:
    """Host time per step: the profiled mean by part, stacked, with the median step as a tick; or the median step."""
    x, ids, parts = frame["position"], labels(frame["run_id"]), history_parts(frame)
    names = dict(HOST_CATEGORIES)
    for part in parts:
        fig.add_trace(
            go.Bar(
                x=x,
                y=frame[f"part:{part}"],
                name=label(f"host: {names.get(part, part)}"),
                marker_color=color(part),
                customdata=ids,
                hovertemplate=_HOVER,
            ),
            row=1,
            col=1,
        )
    if parts:
        tick = {"color": COLORS["line"], "symbol": "line-ew-open", "size": 14}
        host = go.Scatter(x=x, y=frame["host_us"], mode="markers", marker=tick, name="host µs/step (median step)")
    else:
        name = "host µs/step (median step; a bench cell is not split)"
        host = go.Bar(x=x, y=frame["host_us"], marker_color=COLORS["ops"], name=name)
    fig.add_trace(host.update(customdata=ids, hovertemplate=_HOVER), row=1, col=1)


def _history_line(
    fig: go.Figure, frame: pd.DataFrame, column: str, name: str, row: int, line: str, labelled: bool = False
) -> None:
    values = frame[column]
    fig.add_trace(
        go.Scatter(
            x=frame["position"],
            y=values,
            mode="lines+markers+text" if labelled else "lines+markers",
            text=[fmt_count(v) if pd.notna(v) else "" for v in values] if labelled else None,
            textposition="top center",
            cliponaxis=False,
            name=name,
            line={"color": line},
            customdata=labels(frame["run_id"]),
            hovertemplate=_HOVER,
        ),
        row=row,
        col=1,
    )


def _history_alerts(fig: go.Figure, frame: pd.DataFrame, rows: int) -> None:
    """The runs check flagged, marked over the host panel and ringed on the panel their alert is about."""
    parts = [f"part:{p}" for p in history_parts(frame)]
    top = pd.concat([frame["host_us"], frame[parts].sum(axis=1)]).max() if len(frame) else 0
    top = top if pd.notna(top) else 0
    for column, name, mark, symbol, height, row, ringed in (
        ("count_alerts", COUNT_ALERT, COLORS["count_alert"], "x", 1.08, 2, "launches"),
        ("timing_alerts", TIMING_ALERT, COLORS["timing_alert"], "triangle-up", 1.2, 3, "decode_tok_s"),
    ):
        flagged = frame[frame[column] != ""]
        ids = labels(flagged["run_id"])
        fig.add_trace(
            go.Scatter(
                x=flagged["position"],
                y=[height * top] * len(flagged),
                mode="markers",
                name=name,
                marker={"color": mark, "symbol": symbol, "size": 13},
                customdata=ids,
                text=["<br>".join(labels(a.split("\n"))) for a in flagged[column]],
                hovertemplate="%{customdata}<br>%{text}<extra>alert</extra>",
            ),
            row=1,
            col=1,
        )
        if row <= rows:
            ring = {"color": mark, "size": 12, "symbol": "circle-open", "line": {"width": 2}}
            fig.add_trace(
                go.Scatter(
                    x=flagged["position"],
                    y=flagged[ringed],
                    mode="markers",
                    marker=ring,
                    showlegend=False,
                    name=name,
                    customdata=ids,
                    hovertemplate="%{customdata}<extra>alert</extra>",
                ),
                row=row,
                col=1,
            )


def clicked_run(event) -> str | None:
    """The run id of the point clicked in history_figure (Streamlit's selection event), if any, as the chart
    shows it (style.label: the app maps it back to the run)."""
    for data in clicked_data(event):
        if isinstance(data, list | tuple):
            data = data[0] if data else None
        if data:
            return str(data)
    return None


def history_runs_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The trend's table, newest first: what each run measured and what the check said."""
    cols = ["run_id", "recorded_at", "commit", "host_us", "launches", "decode_tok_s", "verdict", "count_alerts"]
    cols.append("timing_alerts")
    return frame[cols].iloc[::-1].reset_index(drop=True)
