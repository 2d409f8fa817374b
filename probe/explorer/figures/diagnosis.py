"""The Diagnosis view: the answer first (probe.analysis.diagnosis.answer). For a trace, the median step's verdict and
its
evidence beside the roofline of the step, what to fix first, and the roofline of each op; for a run, its cells'
predictions against measurement and the write-ups' claims, as `probe run` prints them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from probe.analysis.diagnosis.evidence import HOST_BY_WORDS
from probe.analysis.diagnosis.report import Report
from probe.analysis.diagnosis.verdict import Diagnosis
from probe.analysis.roofline.devices import Device
from probe.analysis.roofline.ops import OpRoofline
from probe.analysis.roofline.step import StepRoofline
from probe.explorer.figures.style import COLORS, SERIES, color, label, labels, short

BOUND_WORDS = {"host": "host-bound", "gpu": "GPU-bound", "external": "external", "cpu_only": "CPU only"}
BOUND_WORDS["unknown"] = "unknown (no GPU side recorded)"
# The measured step, piece by piece: the host window by mechanism (Evidence's figures), then the GPU's work.
HOST_PIECES = (
    ("data", "data loading", "data_ns"),
    ("python", "Python", "python_ns"),
    ("dispatch", "op dispatch", "dispatch_ns"),
    ("launch", "launch and runtime calls", "launch_ns"),
    ("other_threads", "other threads' work", "other_threads_ns"),
    ("unattributed", "unattributed", "unattributed_ns"),
)
CPU_WORDS = {"dispatch": "mostly inside ops", "unattributed": "mostly between ops", "python": "mostly Python"}
CPU_WORDS |= {"launch": "mostly in runtime calls"}  # a CPU trace's host work: its ops compute, so "dispatch" is compute
ROOF_SIZES = (6, 40)
LOG_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)  # a ratio axis read in round numbers
ROOF_DASH = (
    "solid",
    "dash",
    "dot",
    "dashdot",
)  # a roof line per dtype  # marker diameter range, px: area grows with an op's share of the kernel time


def bound_text(d: Diagnosis) -> str:
    """The verdict in a few words: "external, then GPU-bound", "host-bound, by python", "GPU-bound, balanced"."""
    words = BOUND_WORDS[d.bound]
    if d.then:
        words += f", then {BOUND_WORDS[d.then]}"
    if d.host_bound_by:
        by = CPU_WORDS.get(d.host_bound_by, d.host_bound_by) if d.bound == "cpu_only" else d.host_bound_by
        by = HOST_BY_WORDS.get(by, by)
        words += f", {by}" if d.bound == "cpu_only" else f", by {by}"
    return words + (", balanced" if d.balanced else "")


def step_frame(d: Diagnosis, roofline: StepRoofline | None = None) -> pd.DataFrame:
    """The rows of step_figure: each piece of the host window (by mechanism, the sync wait split into what waited
    on the trace's own GPU work and what waited on work the trace does not hold), the GPU's work, and with a model
    the roofline's two terms, in ms."""
    e = d.evidence
    rows = [
        {"row": "host window", "piece": name, "key": key, "ms": getattr(e, field) / 1e6}
        for key, name, field in HOST_PIECES
    ]
    rows.append(
        {
            "row": "host window",
            "piece": "sync wait",
            "key": "sync_wait",
            "ms": (e.sync_wait_ns - e.external_wait_ns) / 1e6,
        }
    )
    rows.append({"row": "host window", "piece": "external wait", "key": "external", "ms": e.external_wait_ns / 1e6})
    if d.bound != "cpu_only":
        rows.append({"row": "GPU work", "piece": "GPU busy", "key": "gpu_busy", "ms": e.gpu_busy_ns / 1e6})
    if roofline is not None:
        rows.append({"row": "roofline traffic", "piece": "traffic time", "key": "roofline", "ms": roofline.traffic_ms})
        if roofline.compute_ms is not None:
            rows.append({"row": "roofline compute", "piece": "compute time", "key": "gemm", "ms": roofline.compute_ms})
    return pd.DataFrame(rows)


def step_figure(d: Diagnosis, roofline: StepRoofline | None = None) -> go.Figure:
    """The measured step beside its model: the host window stacked by what ran (its sync wait marked, external
    wait apart), the GPU's work, and, with a model, the roofline's traffic and compute time; the dashed line is the
    measured step, max(host window, GPU busy)."""
    frame = step_frame(d, roofline)
    order = list(dict.fromkeys(frame["row"]))
    fig = go.Figure()
    for (key, piece), rows in frame.groupby(["key", "piece"], sort=False):
        rows = rows[rows["ms"] > 0]
        if rows.empty:
            continue
        fig.add_trace(
            go.Bar(
                y=rows["row"],
                x=rows["ms"],
                orientation="h",
                name=label(piece),
                marker_color=color(key),
                hovertemplate="%{x:.3f} ms<extra>%{fullData.name}</extra>",
            )
        )
    measured = d.evidence.measured_ns / 1e6
    fig.add_vline(x=measured, line={"dash": "dash", "color": COLORS["line"], "width": 1})
    fig.add_annotation(x=measured, y=1.0, yref="paper", text=f"measured step {measured:.3f} ms", showarrow=False)
    height = 130 + 42 * len(order)
    fig.update_layout(
        barmode="stack",
        height=height,
        margin={"t": 30, "b": 10, "l": 10},
        legend={"orientation": "h", "yanchor": "top", "y": -50 / (height - 90)},  # below the axis and its title
        xaxis_title="ms",
        yaxis={"categoryorder": "array", "categoryarray": order[::-1]},
    )
    return fig


def what_if_frame(d: Diagnosis) -> pd.DataFrame:
    """What to fix first: each change with its predicted step, the saving (ms, and % of the measured step), and
    the arithmetic and assumption behind it, largest saving first (probe.analysis.diagnosis.verdict)."""
    rows = [
        {
            "change": w.change,
            "predicted_step_ms": w.predicted_step_ms,
            "saving_ms": w.saving_ms,
            "saving_pct": w.saving_pct,
            "arithmetic": w.arithmetic,
            "assumption": w.assumption,
        }
        for w in d.what_if
    ]
    return pd.DataFrame(
        rows, columns=["change", "predicted_step_ms", "saving_ms", "saving_pct", "arithmetic", "assumption"]
    )


def roofline_frame(r: StepRoofline) -> pd.DataFrame:
    """The roofline beside the measured step, one figure a row (probe.analysis.roofline.step)."""
    rows = [
        ("sequences", f"{r.sequences:,}"),
        ("new tokens", f"{r.tokens:,}"),
        ("cached context tokens", f"{r.context_tokens:,}"),
        ("tokens from", r.tokens_from),
        ("dtype, device", f"{r.dtype} on {r.device}"),
        ("bytes to move", f"{r.bytes / 1e9:,.3f} GB"),
        ("FLOPs to do", f"{r.flops / 1e12:,.3f} TFLOP"),
        ("traffic time", f"{r.traffic_ms:.3f} ms"),
        ("compute time", "-" if r.compute_ms is None else f"{r.compute_ms:.3f} ms"),
        ("predicted GPU", f"{r.predicted_gpu_ms:.3f} ms ({r.binding_term} binds)"),
        ("measured GPU busy", "-" if r.measured_gpu_ms is None else f"{r.measured_gpu_ms:.3f} ms"),
        ("efficiency (predicted / measured)", "-" if r.efficiency is None else f"{r.efficiency:.1%}"),
    ]
    return pd.DataFrame(rows, columns=["figure", "value"])


# ---- the per-op roofline ----------------------------------------------------------------------------------------


def op_roofline_frame(ops: Sequence[OpRoofline]) -> pd.DataFrame:
    """Every (op, shapes) of the per-op roofline, largest kernel time first; figures not modelled are None."""
    rows = [
        {
            "op": o.op,
            "shapes": o.shapes,
            "dtype": o.dtype,
            "count": o.count,
            "kernel_ms_total": o.kernel_us_total / 1e3,
            "kernel_us_median": o.kernel_us_median,
            "gflop": None if o.flops is None else o.flops / 1e9,
            "mib": None if o.bytes is None else o.bytes / 2**20,
            "intensity": o.intensity,
            "tflops_s": o.tflops_s_median,
            "tb_s": o.tb_s_median,
            "bound": o.bound,
            "roof_pct": o.roof_pct,
            "model": o.model,
        }
        for o in ops
    ]
    columns = ["op", "shapes", "dtype", "count", "kernel_ms_total", "kernel_us_median", "gflop", "mib"]
    columns += ["intensity", "tflops_s", "tb_s", "bound", "roof_pct", "model"]
    return pd.DataFrame(rows, columns=columns)


def roofs(device: Device, dtypes: Sequence[str], intensities: Sequence[float]) -> list[dict]:
    """The device's roofs over the plotted intensities, a line per dtype: attainable TFLOP/s = min(peak FLOP/s,
    intensity x peak bandwidth), with the ridge point where they meet."""
    lo, hi = min(intensities), max(intensities)
    bw = device.memory_bandwidth_bytes_s
    out = []
    for dtype in dict.fromkeys(dtypes):
        peak = device.flops_s(dtype)
        if not peak:
            continue
        ridge = peak / bw
        xs = sorted({lo / 4, min(max(ridge, lo / 4), hi * 4), hi * 4})
        out.append({"dtype": dtype, "ridge": ridge, "x": xs, "y": [min(peak, x * bw) / 1e12 for x in xs]})
    return out


def op_roofline_figure(ops: Sequence[OpRoofline], device: Device | None) -> go.Figure:
    """Each modelled (op, shapes) as a point: arithmetic intensity (FLOP/byte) against achieved TFLOP/s at its
    median call, the marker's area its share of the kernel time, coloured by the bound; log axes; the device's
    compute roof and bandwidth slope per dtype, so an op far below its roof stands out."""
    points = [o for o in ops if o.intensity and o.tflops_s_median]
    fig = go.Figure()
    if not points:
        return fig
    biggest = max(o.kernel_us_total for o in points)
    groups: dict[str, list[OpRoofline]] = {}
    for o in points:
        groups.setdefault(o.bound or "no device", []).append(o)
    for bound, rows in groups.items():
        fig.add_trace(
            go.Scatter(
                x=[o.intensity for o in rows],
                y=[o.tflops_s_median for o in rows],
                mode="markers",
                name=label(f"{bound}-bound" if bound in ("compute", "memory") else bound),
                marker={
                    "size": [_size(o.kernel_us_total, biggest) for o in rows],
                    "color": {"compute": COLORS["gemm"], "memory": COLORS["moe"]}.get(bound, COLORS["unknown"]),
                    "opacity": 0.7,
                    "line": {"width": 1, "color": "white"},
                },
                customdata=[
                    [
                        label(o.op),
                        label(short(o.shapes, 80)),
                        o.dtype or "-",
                        "-" if o.roof_pct is None else f"{o.roof_pct:.1f}%",
                        o.kernel_us_total / 1e3,
                        o.count,
                        o.tb_s_median,
                    ]
                    for o in rows
                ],
                hovertemplate="%{customdata[0]} %{customdata[1]} %{customdata[2]}<br>%{x:.1f} FLOP/B, "
                "%{y:.1f} TFLOP/s, %{customdata[6]:.2f} TB/s: %{customdata[3]} of the roof<br>"
                "%{customdata[4]:.3f} ms of kernels in %{customdata[5]} call(s)<extra></extra>",
            )
        )
    if device is not None:
        # every point has an intensity (the filter above); said again so its type is float
        found = roofs(device, [o.dtype for o in points if o.dtype], [o.intensity for o in points if o.intensity])
        for dash, roof in zip(ROOF_DASH * len(found), found, strict=False):
            fig.add_trace(
                go.Scatter(
                    x=roof["x"],
                    y=roof["y"],
                    mode="lines",
                    name=label(f"{device.name} {roof['dtype']} roof (ridge {roof['ridge']:.0f} FLOP/B)"),
                    line={"color": COLORS["roofline"], "width": 1.5, "dash": dash},
                    hoverinfo="skip",
                )
            )
    fig.update_layout(
        height=480,
        margin={"t": 10, "b": 10, "l": 10},
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP / byte, per call)"},
        yaxis={"type": "log", "title": "achieved TFLOP/s (median call)"},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def _size(value: float, biggest: float) -> float:
    lo, hi = ROOF_SIZES
    return lo + (hi - lo) * math.sqrt(value / biggest) if biggest > 0 else lo


# ---- a run folder -----------------------------------------------------------------------------------------------


def predictions_frame(report: Report) -> pd.DataFrame:
    """The run's cells, predicted against measured, as `probe run` prints them (render.predictions_table)."""
    rows = [
        {
            "engine": p.engine,
            "prompt": p.prompt_tokens,
            "batch": p.batch,
            "traffic_ms": p.traffic_ms,
            "floor_ms": p.floor_ms,
            "predicted_ms": p.predicted_ms,
            "binds": p.binding,
            "measured_ms": p.measured_ms,
            "measured/pred": p.ratio,
            "the gap points at": p.points_at,
        }
        for p in report.predictions
    ]
    columns = ["engine", "prompt", "batch", "traffic_ms", "floor_ms", "predicted_ms", "binds", "measured_ms"]
    return pd.DataFrame(rows, columns=[*columns, "measured/pred", "the gap points at"])


def predictions_figure(report: Report) -> go.Figure:
    """Each cell's measured ITL over its prediction, max(host floor, traffic / bandwidth): 1 is the prediction
    holding, above it the step is slower than the model says (the gap points at a term); log axis."""
    frame = predictions_frame(report)
    fig = go.Figure()
    for i, (engine, rows) in enumerate(frame.groupby("engine", sort=False)):
        fig.add_trace(
            go.Bar(
                marker_color=SERIES[i % len(SERIES)],
                x=[
                    f"{engine} p{p}" + (f" B{b}" if b > 1 else "")
                    for p, b in zip(rows["prompt"], rows["batch"], strict=True)
                ],
                y=rows["measured/pred"],
                name=label(engine),
                customdata=list(
                    zip(rows["measured_ms"], rows["predicted_ms"], labels(rows["the gap points at"]), strict=True)
                ),
                hovertemplate="measured %{customdata[0]:.2f} ms / predicted %{customdata[1]:.2f} ms = %{y:.2f}"
                "<br>%{customdata[2]}<extra>%{fullData.name}</extra>",
            )
        )
    fig.add_hline(y=1.0, line={"dash": "dash", "color": COLORS["floor"], "width": 1})
    fig.update_layout(
        height=360,
        margin={"t": 10, "b": 10, "l": 10},
        yaxis={
            "type": "log",
            "title": "measured / predicted ITL",
            "tickvals": LOG_TICKS,
            "ticktext": [f"{t:g}" for t in LOG_TICKS],
        },
        legend={"orientation": "h", "y": -0.25},
    )
    return fig
