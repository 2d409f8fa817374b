"""Telemetry samples (probe.analysis.records.telemetry) under the Sweep and the trace views: one panel a figure.

A run records a sample every 10 ms, so a sweep of minutes holds tens of thousands; drawn one by one they take a
browser tens of seconds. Each figure is drawn instead as the min and max of at most `POINTS` buckets of
consecutive samples (an envelope: a one-sample spike still shows as the top of its bucket). The file is checked
before it is read (a regular file, at most `MAX_ROWS` rows and `MAX_COLUMNS` columns), and only its numeric
columns are read, one at a time, so what a small file can make the app allocate is bounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.parquet as pq
from plotly.subplots import make_subplots

from probe.analysis.ledger.types import StepLedger, TraceAnalysis
from probe.analysis.records.files import open_regular
from probe.analysis.records.sidecar import Sidecar
from probe.errors import ProbeError, first_line
from probe.explorer.figures.style import COLORS, label
from probe.text import ns_to_ms

POINTS = 1000  # buckets a panel draws; past this, each point is the min and max of its bucket's samples
MAX_ROWS = 5_000_000  # 14 hours of samples at probe's 10 ms: past this the file is not probe's, or not for a browser
MAX_COLUMNS = 64  # probe writes t_ns, 11 figures and the cell's position
SHOW_MARKERS = 200  # samples a panel draws with a marker each
PANEL_PX = 140  # a panel's height
TITLE_GAP_PX = 34  # between two panels: the lower one's title (about 16 px of text) clear of the upper one's data
MARGIN_PX = {"t": 30, "b": 10}


@dataclass(frozen=True)
class Series:
    name: str
    low: np.ndarray  # per point: the smallest sample of its bucket (NaN where the bucket has none)
    high: np.ndarray  # the largest; equal to `low` when each point is one sample


@dataclass(frozen=True)
class TelemetryFrames:
    """A telemetry file as drawn: the points' times, and each figure's envelope at those times."""

    aligned: bool  # x is ms on a trace's clock (its steps can be shaded behind); else s from the first sample
    x: np.ndarray  # the first sample time of each point's bucket
    rows: int  # samples in the file
    per_point: int  # samples a point stands for, at most (1: every sample drawn as it is)
    series: tuple[Series, ...]

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.series]


def telemetry_offset_ns(meta: Sidecar | None, analysis: TraceAnalysis) -> int | None:
    """What turns a sample's perf_counter_ns into ns from the trace's first event: the sidecar's clock anchor
    (perf_counter_ns and epoch ns read at one instant) against the trace's epoch origin. None if either is
    missing."""
    clock = meta.clock if meta else None
    if clock is None or analysis.origin_epoch_ns is None:
        return None
    return clock.epoch_ns - clock.perf_counter_ns - analysis.origin_epoch_ns


def _numeric(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def read_telemetry(path: Path, offset_ns: int | None = None, points: int = POINTS) -> TelemetryFrames:
    """The samples of a telemetry file (t_ns plus one column a figure), each figure as its envelope over at most
    `points` buckets, the all-missing figures dropped; x in ms on the trace's clock when `offset_ns` lines the
    samples up with a trace, else in s from the first sample. ProbeError, one line, for a file that is not
    telemetry or is larger than the explorer draws."""
    with open_regular(path) as f:
        try:
            parquet = pq.ParquetFile(f)
            schema, rows, columns = parquet.schema_arrow, parquet.metadata.num_rows, parquet.metadata.num_columns
        except Exception as e:  # pyarrow raises its own types for a foreign or truncated file
            raise ProbeError(f"cannot read {path}: {first_line(e)}") from None
        if rows > MAX_ROWS or columns > MAX_COLUMNS:
            raise ProbeError(
                f"{path}: {rows:,} rows and {columns:,} columns, more than the explorer draws "
                f"({MAX_ROWS:,} rows, {MAX_COLUMNS} columns)"
            )
        if "t_ns" not in schema.names or not pa.types.is_integer(schema.field("t_ns").type):
            raise ProbeError(f"{path} has no integer t_ns column: not telemetry samples")
        names = [field.name for field in schema if field.name != "t_ns" and _numeric(field.type)]
        t = _column(parquet, "t_ns", rows, path).astype(np.int64)
        order = np.argsort(t, kind="stable") if len(t) and np.any(np.diff(t) < 0) else None
        starts = np.linspace(0, rows, min(rows, points) + 1).astype(np.int64)[:-1] if rows else np.zeros(0, np.int64)
        series = []
        for name in names:
            v = _column(parquet, name, rows, path).astype(np.float64)
            v = v if order is None else v[order]
            if not len(v) or np.isnan(v).all():
                continue  # a figure this machine does not have (no GPU: no NVML figures)
            low, high = (v, v) if len(starts) == rows else (np.fmin.reduceat(v, starts), np.fmax.reduceat(v, starts))
            series.append(Series(name, low, high))
    t = t if order is None else t[order]
    first = t[starts] if len(starts) else t
    if offset_ns is None:
        x = (first - (t.min() if len(t) else 0)) / 1e9
    else:
        x = (first + offset_ns) / 1e6
    per_point = -(-rows // len(starts)) if len(starts) else 1
    return TelemetryFrames(offset_ns is not None, x, rows, per_point, tuple(series))


def _column(parquet: pq.ParquetFile, name: str, rows: int, path: Path) -> np.ndarray:
    try:
        column = parquet.read(columns=[name], use_threads=False).column(0)
    except Exception as e:
        raise ProbeError(f"cannot read {path}: {first_line(e)}") from None
    if len(column) != rows:
        raise ProbeError(f"{path}: column {name!r} holds {len(column):,} values for {rows:,} rows")
    return column.to_numpy(zero_copy_only=False)


def _step_shading(steps: Sequence[StepLedger], panels: int) -> list[dict]:
    """A band behind every panel for each step, prefill in blue, the others alternately light and dark grey;
    made as one list (plotly's add_vrect re-validates every shape already there: 5 s for 32 steps x 4 panels)."""
    return [
        {
            "type": "rect",
            "xref": f"x{i if i > 1 else ''}",
            "yref": f"y{i if i > 1 else ''} domain",
            "x0": ns_to_ms(step.start_ns),
            "x1": ns_to_ms(step.start_ns + step.wall_ns),
            "y0": 0,
            "y1": 1,
            "line": {"width": 0},
            "fillcolor": COLORS["prefill_shade"] if step.kind == "prefill" else COLORS["step_shade"],
            "opacity": 0.25 if k % 2 else 0.12,
            "layer": "below",
        }
        for i in range(1, panels + 1)
        for k, step in enumerate(steps)
    ]


def telemetry_figure(telemetry: TelemetryFrames, steps: Sequence[StepLedger] = ()) -> go.Figure:
    """One small panel a figure (GPU memory, utilization, power, RSS, CPU %, ...) against time: a line through
    the samples, or the band between each bucket's min and max. On a trace's clock the trace's steps are shaded
    behind the samples, so each sample sits over its step."""
    panels = max(len(telemetry.series), 1)
    height = (PANEL_PX + TITLE_GAP_PX) * panels + 60
    fig = make_subplots(
        rows=panels,
        cols=1,
        shared_xaxes=True,
        subplot_titles=[label(n) for n in telemetry.names],
        vertical_spacing=TITLE_GAP_PX / (height - MARGIN_PX["t"] - MARGIN_PX["b"]),  # in pixels, whatever the count
    )
    x = telemetry.x
    for i, s in enumerate(telemetry.series, start=1):
        name = label(s.name)
        if telemetry.per_point == 1:
            mode = "lines+markers" if telemetry.rows <= SHOW_MARKERS else "lines"
            fig.add_trace(go.Scatter(x=x, y=s.low, mode=mode, name=name, showlegend=False), row=i, col=1)
            continue
        band = {"color": COLORS["gpu_busy"], "width": 1}
        fig.add_trace(go.Scatter(x=x, y=s.high, mode="lines", name=name, line=band, showlegend=False), row=i, col=1)
        fig.add_trace(
            go.Scatter(x=x, y=s.low, mode="lines", name=name, line=band, fill="tonexty", showlegend=False),
            row=i,
            col=1,
        )
    if telemetry.aligned:
        fig.update_layout(shapes=_step_shading(steps, panels))
    if telemetry.aligned:
        x_title = "ms from the trace's first event (steps shaded)"
    else:
        x_title = "s from the first sample"
    if telemetry.per_point > 1:
        x_title += f"; each point the min to max of up to {telemetry.per_point} of the {telemetry.rows:,} samples"
    fig.update_xaxes(title_text=x_title, row=panels, col=1)
    fig.update_layout(height=height, margin=MARGIN_PX)
    return fig
