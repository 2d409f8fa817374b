"""The Diagnosis view: the answer first (probe.analysis.diagnosis.answer). For a trace, the median step's verdict and
its
evidence beside the roofline of the step, what to fix first, and the roofline of each op; for a run, its cells'
predictions against measurement and the write-ups' claims, as `probe run` prints them."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence

import pandas as pd
import plotly.graph_objects as go

from probe.analysis.diagnosis.report import Report
from probe.analysis.diagnosis.verdict import Diagnosis
from probe.analysis.records.results import BenchResults
from probe.analysis.roofline.devices import Device
from probe.analysis.roofline.ops import OpRoofline
from probe.analysis.roofline.step import StepRoofline
from probe.explorer.figures.style import COLORS, SERIES, color, label, labels, log_axis
from probe.text import ms, ns_to_ms, short

# The measured step, piece by piece: the host window by mechanism (Evidence's figures), then the GPU's work.
HOST_PIECES = (  # with the sync wait, they add up to the host window (Evidence: host work's parts)
    ("setup", "first-call set-up", "setup_ns"),
    ("data", "data loading", "data_ns"),
    ("python", "Python", "python_ns"),
    ("dispatch", "op dispatch", "dispatch_ns"),
    ("launch", "launch and runtime calls", "launch_ns"),
    ("other_threads", "other threads' work", "other_threads_ns"),
    ("profiler", "the profiler's own work", "profiler_recorded_ns"),
    ("named", "inside named ranges", "named_ns"),
    ("unattributed", "unattributed", "unattributed_ns"),
)
ROOF_SIZES = (6, 40)  # marker diameter range, px: area grows with an op's share of the kernel time
ROOF_DASH = ("solid", "dash", "dot", "dashdot")  # a roof line per dtype


# `probe analyze`'s flags as the sidebar names what they set: the answer's notes, said where the app reads them
SIDEBAR_WORDS = {
    "--device NAME": "the sidebar's device (its Roofline box)",
    "--model": "the sidebar's model",
    "--tokens": "the sidebar's new tokens a step",
    "--batch": "the sidebar's sequences",
    "--context": "the sidebar's cached context",
}
_FLAG = re.compile("|".join(re.escape(flag) + r"\b" for flag in SIDEBAR_WORDS))


def sidebar_words(text: str) -> str:
    """A note of the answer with each flag it names said as the sidebar box that sets the same thing."""
    return _FLAG.sub(lambda m: SIDEBAR_WORDS[m.group()], re.sub(r"\bgive (?=--)", "set ", text))


def evidence_metrics(d: Diagnosis) -> list[tuple[str, str]]:
    """The step's figures as the Diagnosis has them (and probe analyze prints them), for a view's metrics: the
    measured step, the host window and its work, the GPU's work, the sync wait split by whether the trace's GPU
    work ran, and the hole when there is one."""
    e = d.evidence
    out = [("measured step", e.measured_ns), ("host window", e.wall_ns), ("host work", e.host_work_ns)]
    if d.bound != "cpu_only":
        out.append(("GPU work", e.gpu_busy_ns))
    out += [("sync wait, GPU working", e.sync_wait_ns - e.external_wait_ns), ("external wait", e.external_wait_ns)]
    if e.hole_ns:
        out.append(("hole", e.hole_ns))
    return [(name, f"{ms(ns)} ms") for name, ns in out]


def step_frame(d: Diagnosis, roofline: StepRoofline | None = None) -> pd.DataFrame:
    """The rows of step_figure, each the Diagnosis's own figure (probe analyze prints the same): the host window by
    mechanism, its sync wait split into waiting while the trace's GPU work ran and the external wait (no GPU op of
    the trace ran); the GPU's work; the hole, when the step has one; with a model, the roofline's two terms; in ms."""
    e = d.evidence
    rows = [
        {"row": "host window", "piece": name, "key": key, "ms": ns_to_ms(getattr(e, field))}
        for key, name, field in HOST_PIECES
    ]
    rows.append(
        {
            "row": "host window",
            "piece": "sync wait, the trace's GPU working",
            "key": "sync_wait",
            "ms": ns_to_ms(e.sync_wait_ns - e.external_wait_ns),
        }
    )
    rows.append({"row": "host window", "piece": "external wait", "key": "external", "ms": ns_to_ms(e.external_wait_ns)})
    if d.bound != "cpu_only":
        rows.append({"row": "GPU work", "piece": "GPU busy", "key": "gpu_busy", "ms": ns_to_ms(e.gpu_busy_ns)})
    if e.hole_ns:
        rows.append({"row": "hole", "piece": "hole: no work of the trace", "key": "hole", "ms": ns_to_ms(e.hole_ns)})
    if roofline is not None:
        rows.append(
            {"row": "roofline traffic", "piece": "traffic time", "key": "roofline_traffic", "ms": roofline.traffic_ms}
        )
        if roofline.compute_ms is not None:
            rows.append(
                {
                    "row": "roofline compute",
                    "piece": "compute time",
                    "key": "roofline_compute",
                    "ms": roofline.compute_ms,
                }
            )
    return pd.DataFrame(rows)


def step_figure(d: Diagnosis, roofline: StepRoofline | None = None) -> go.Figure:
    """The measured step beside its model: the host window stacked by what ran (its sync wait split by whether the
    trace's GPU work ran), the GPU's work, the hole, and, with a model, the roofline's traffic and compute time; the
    dashed line is the measured step, max(host window, GPU busy), labelled above the plot."""
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
                marker={"color": color(key), "pattern": {"shape": "x" if key == "hole" else ""}},
                hovertemplate="%{x:.3f} ms<extra>%{fullData.name}</extra>",
            )
        )
    measured = d.evidence.measured_ns / 1e6
    fig.add_vline(x=measured, line={"dash": "dash", "color": COLORS["line"], "width": 1})
    fig.add_annotation(
        x=measured, y=1.0, yref="paper", yanchor="bottom", text=f"measured step {measured:.3f} ms", showarrow=False
    )
    height = 150 + 42 * len(order)
    fig.update_layout(
        barmode="stack",
        height=height,
        margin={"t": 40, "b": 10, "l": 10},
        legend={"orientation": "h", "yanchor": "top", "y": -50 / (height - 110)},  # below the axis and its title
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
            "mb": None if o.bytes is None else o.bytes / 1e6,
            "intensity": o.intensity,
            "tflops_s": o.tflops_s_median,
            "tb_s": o.tb_s_median,
            "bound": o.bound,
            "roof_pct": o.roof_pct,
            "over_roof": o.over_roof,
            "model": o.model,
            "over_roof_why": o.over_roof_why,
        }
        for o in ops
    ]
    columns = ["op", "shapes", "dtype", "count", "kernel_ms_total", "kernel_us_median", "gflop", "mb"]
    columns += ["intensity", "tflops_s", "tb_s", "bound", "roof_pct", "over_roof", "model", "over_roof_why"]
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


def point_group(o: OpRoofline, device: Device | None) -> str:
    """Which legend group an op's point falls in: its bound, or why it has none (no device named, no dtype
    recorded, no peak for its dtype on the device)."""
    if o.bound:
        return f"{o.bound}-bound"
    if device is None:
        return "no device"
    return "no dtype" if o.dtype is None else f"no {o.dtype} peak"


def op_roofline_figure(ops: Sequence[OpRoofline], device: Device | None) -> go.Figure:
    """Each modelled (op, shapes) as a point: arithmetic intensity (FLOP/byte) against achieved TFLOP/s at its
    median call, the marker's area its share of the kernel time, coloured by the bound; log axes ticked at values
    that read as written; the device's compute roof and bandwidth slope per dtype, so an op far below its roof
    stands out. A point over its roof is ringed in red, and its hover says which peak it passed and why."""
    points = [o for o in ops if o.intensity and o.tflops_s_median]
    fig = go.Figure()
    if not points:
        return fig
    biggest = max(o.kernel_us_total for o in points)
    groups: dict[str, list[OpRoofline]] = {}
    for o in points:
        groups.setdefault(point_group(o, device), []).append(o)
    for group, rows in groups.items():
        fig.add_trace(_op_points(group, rows, biggest))
    intensities = [o.intensity for o in points if o.intensity]
    achieved = [o.tflops_s_median for o in points if o.tflops_s_median]
    if device is not None:
        found = roofs(device, [o.dtype for o in points if o.dtype], intensities)
        for dash, roof in zip(ROOF_DASH * len(found), found, strict=False):
            fig.add_trace(_roof_line(device, roof, dash))
            achieved += [y for y in roof["y"] if y > 0]
    fig.update_layout(
        height=520,
        margin={"t": 10, "b": 10, "l": 10},
        xaxis=log_axis(intensities, "arithmetic intensity (FLOP / byte, per call)"),
        yaxis=log_axis(achieved, "achieved TFLOP/s (median call)"),
        legend={"orientation": "h", "y": -0.2},
        hoverlabel={"align": "left"},
    )
    return fig


def _op_points(group: str, rows: Sequence[OpRoofline], biggest: float) -> go.Scatter:
    """One legend group's points: sized by kernel time against the `biggest`, coloured by the bound, ringed in red
    when over their roof, with the op, its shapes and figures in the hover."""
    fill = {"compute-bound": COLORS["gemm"], "memory-bound": COLORS["moe"]}
    return go.Scatter(
        x=[o.intensity for o in rows],
        y=[o.tflops_s_median for o in rows],
        mode="markers",
        name=label(group),
        marker={
            "size": [_size(o.kernel_us_total, biggest) for o in rows],
            "color": fill.get(group, COLORS["unknown"]),
            "opacity": 0.7,
            "line": {
                "width": [3 if o.over_roof else 1 for o in rows],
                "color": [COLORS["flagged"] if o.over_roof else "white" for o in rows],
            },
        },
        customdata=[
            [
                label(o.op),
                label(short(o.shapes, 80)),
                o.dtype or "no dtype",
                "-" if o.roof_pct is None else f"{o.roof_pct:.1f}%",
                o.kernel_us_total / 1e3,
                o.count,
                o.tb_s_median,
                _wrap_words(f"over its roof: {o.over_roof_why}") if o.over_roof_why else "",
            ]
            for o in rows
        ],
        hovertemplate="%{customdata[0]} %{customdata[1]} %{customdata[2]}<br>%{x:.3g} FLOP/B, "
        "%{y:.3g} TFLOP/s, %{customdata[6]:.3g} TB/s: %{customdata[3]} of the roof<br>"
        "%{customdata[4]:.3f} ms of kernels in %{customdata[5]} call(s)<br>%{customdata[7]}<extra></extra>",
    )


def _roof_line(device: Device, roof: dict, dash: str) -> go.Scatter:
    """One dtype's roof (`roofs`) as a line, named by the device, the dtype and its ridge point."""
    return go.Scatter(
        x=roof["x"],
        y=roof["y"],
        mode="lines",
        name=label(f"{device.name} {roof['dtype']} roof (ridge {roof['ridge']:.0f} FLOP/B)"),
        line={"color": COLORS["roofline"], "width": 1.5, "dash": dash},
        hoverinfo="skip",
    )


def _wrap_words(text: str, width: int = 100) -> str:
    """Escaped for plotly and cut at spaces into lines of about `width` characters."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + len(word) < width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(label(line) for line in lines)


def _size(value: float, biggest: float) -> float:
    lo, hi = ROOF_SIZES
    return lo + (hi - lo) * math.sqrt(value / biggest) if biggest > 0 else lo


# ---- a run folder -----------------------------------------------------------------------------------------------


def contended_cells(results: BenchResults) -> set[tuple[str, int, int]]:
    """(engine, prompt, batch) of each cell measured while other processes took the CPU (Cell.contended: the
    telemetry's contention rule, which `probe run` warns about)."""
    return {(c.engine, c.prompt_tokens, c.batch) for c in results.cells if c.contended}


def predictions_frame(report: Report, contended: Collection[tuple[str, int, int]] = ()) -> pd.DataFrame:
    """The run's cells, predicted against measured, as `probe run` prints them (render.predictions_table), and
    whether each was measured contended."""
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
            "contended": (p.engine, p.prompt_tokens, p.batch) in contended,
        }
        for p in report.predictions
    ]
    columns = ["engine", "prompt", "batch", "traffic_ms", "floor_ms", "predicted_ms", "binds", "measured_ms"]
    return pd.DataFrame(rows, columns=[*columns, "measured/pred", "the gap points at", "contended"])


def predictions_figure(report: Report, contended: Collection[tuple[str, int, int]] = ()) -> go.Figure:
    """Each cell's measured ITL over its prediction, max(host floor, traffic / bandwidth): 1 is the prediction
    holding; each bar rises from 1 (above it the step is slower than the model says, and the gap points at a term)
    or falls from it (faster); log axis. A cell measured while other processes took the CPU is hatched and says so."""
    frame = predictions_frame(report, contended)
    fig = go.Figure()
    for i, (engine, rows) in enumerate(frame.groupby("engine", sort=False)):
        ratio = rows["measured/pred"]
        fig.add_trace(
            go.Bar(
                marker={
                    "color": SERIES[i % len(SERIES)],
                    "pattern": {"shape": ["/" if c else "" for c in rows["contended"]]},
                },
                x=[
                    f"{engine} p{p}" + (f" B{b}" if b > 1 else "")
                    for p, b in zip(rows["prompt"], rows["batch"], strict=True)
                ],
                base=[1.0] * len(rows),
                y=ratio - 1.0,  # from 1 to the ratio: a cell faster than predicted falls below 1
                name=label(engine),
                customdata=list(
                    zip(
                        rows["measured_ms"],
                        rows["predicted_ms"],
                        labels(rows["the gap points at"]),
                        ratio,
                        ["<br>CONTENDED: other processes took the CPU" if c else "" for c in rows["contended"]],
                        strict=True,
                    )
                ),
                hovertemplate="measured %{customdata[0]:.2f} ms / predicted %{customdata[1]:.2f} ms = "
                "%{customdata[3]:.2f}<br>%{customdata[2]}%{customdata[4]}<extra>%{fullData.name}</extra>",
            )
        )
    fig.add_hline(y=1.0, line={"dash": "dash", "color": COLORS["floor"], "width": 1})
    ratios = [r for r in frame["measured/pred"] if r == r and r > 0] + [1.0]
    fig.update_layout(
        height=360,
        margin={"t": 10, "b": 10, "l": 10},
        yaxis=log_axis(ratios, "measured / predicted ITL", pad=1.5),
        legend={"orientation": "h", "y": -0.25},
    )
    return fig
