"""What the Streamlit explorer (app.py) shows, as pure functions: tidy frames and figures.

The app is a thin view: every number here comes from a typed result (`BenchResults`, `report.json`,
`TraceAnalysis`, `TimelineItem`, `Comparison`, telemetry samples). Functions only reshape and draw them, so
they can be tested without Streamlit, which this module never imports. (Which files the app may read:
probe.explorer.sources.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from probe.analysis.compare import COLUMNS, fmt_count, row_cells
from probe.analysis.ledger import steady_steps
from probe.analysis.report import Report
from probe.analysis.results import BenchResults
from probe.analysis.sidecar import Sidecar
from probe.errors import ProbeError

MAX_SHADED = 200  # cache ranges shaded on one timeline; beyond this the bars' own colour carries it

# The ledger's host partition as the app groups it (probe.analysis.ledger.HOST_PARTS, the three cache parts as one).
# A trace analyzed with --part gets the user's parts in front (host_categories).
HOST_CATEGORIES = (
    ("ops", "model ops"),
    ("attention", "attention"),
    ("cache", "cache bookkeeping"),
    ("mask", "mask"),
    ("sample", "sampling"),
    ("sync", "sync"),
    ("python", "Python frames"),
    ("unattributed", "unattributed"),
)
USER_PART_COLORS = ("#17becf", "#bcbd22", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
KERNEL_NAME_WIDTH = 60  # on an axis; the hover and the tables carry the whole name
GPU_CATEGORIES = (("gpu_busy", "GPU busy"), ("gpu_idle", "GPU idle"))
COLORS = {
    "ops": "#9aa5b1",
    "attention": "#7b61ff",
    "cache": "#e4572e",
    "cache_update": "#e4572e",
    "cache_seq_length": "#f29e4c",
    "cache_mask_sizes": "#f6c344",
    "mask": "#e98ebf",
    "sample": "#2ca58d",
    "sync": "#8c564b",
    "unattributed": "#d9dde2",
    "python": "#c9a227",
    "range": "#a7c7e7",
    "gpu_busy": "#1f77b4",
    "gpu_idle": "#aec7e8",
}
SWEEP_METRICS = (("decode_tok_s", "decode tokens/s"), ("itl_p50_ms", "ITL p50 (ms)"), ("ttft_ms", "TTFT (ms)"))
NONE = "(none)"


# ---------------------------------------------------------------------------------------------------------
# 1. sweep


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
    bandwidth roofline dashed; cells whose tokens differ from naive's circled in red."""
    frame, pred = sweep_frame(results), prediction_frame(report)
    fig = make_subplots(rows=1, cols=3, subplot_titles=[label for _, label in SWEEP_METRICS], horizontal_spacing=0.07)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f"]
    for i, (line, cells) in enumerate(frame.groupby("line", sort=False)):
        color = palette[i % len(palette)]
        for col, (metric, _) in enumerate(SWEEP_METRICS, start=1):
            fig.add_trace(
                go.Scatter(
                    x=cells["prompt_tokens"],
                    y=cells[metric],
                    mode="lines+markers",
                    name=line,
                    legendgroup=line,
                    showlegend=col == 1,
                    line={"color": color},
                    customdata=cells[["engine", "batch"]],
                    hovertemplate=f"{line}<br>prompt %{{x}}<br>%{{y:.3g}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    _add_predictions(fig, pred)
    bad = frame[frame["mismatch"]]
    for col, (metric, _) in enumerate(SWEEP_METRICS, start=1):
        fig.add_trace(
            go.Scatter(
                x=bad["prompt_tokens"],
                y=bad[metric],
                mode="markers",
                name="tokens differ from naive",
                legendgroup="mismatch",
                showlegend=col == 1 and not bad.empty,
                text=bad["line"],
                marker={"symbol": "circle-open", "size": 16, "color": "red", "line": {"width": 3}},
                hovertemplate="%{text}: tokens differ from naive<extra></extra>",
            ),
            row=1,
            col=col,
        )
    prompts = sorted(set(frame["prompt_tokens"]))
    fig.update_xaxes(type="log", title_text="prompt tokens", tickvals=prompts, ticktext=[str(p) for p in prompts])
    fig.update_layout(height=440, margin={"t": 40, "b": 10}, legend={"orientation": "h", "y": -0.25})
    return fig


def _add_predictions(fig: go.Figure, pred: pd.DataFrame) -> None:
    """As in the write-ups' figures: ITL against the two controls (the host floor, the bandwidth roofline),
    tokens/s against the prediction they make together, 1000 / max(floor, traffic)."""
    if pred.empty:
        return
    x = pred["prompt_tokens"]
    for name, ms, color, dash in (
        ("host floor", pred["floor_ms"], "#555555", "dash"),
        ("bandwidth roofline", pred["traffic_ms"], "#d62728", "dot"),
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
            line={"color": "#555555", "dash": "dashdot"},
            hovertemplate="max(floor, traffic): %{y:.3g} tok/s<extra></extra>",
        ),
        row=1,
        col=1,
    )


# ---------------------------------------------------------------------------------------------------------
# 2. step ledger


def dispatch_label(analysis) -> str:
    """What the ledger counts as dispatch on this trace (Summary.dispatch): launches, or on a CPU-only trace
    the top-level (dispatched aten) ops that stand in for them."""
    if analysis.on_gpu:
        return "kernel launches per step (graph launches included)"
    return "top-level ops per step (dispatched aten ops; a CPU trace has no launches)"


def ledger_frame(analysis) -> pd.DataFrame:
    """One row a step: wall, GPU busy / idle and the host partition grouped as HOST_CATEGORIES, in ms
    (the host columns add up to wall_ms), and the dispatch count."""
    rows = []
    for s in analysis.steps:
        row = {
            "position": s.position,
            "step": s.name,
            "kind": s.kind,
            "wall_ms": s.wall_ns / 1e6,
            "gpu_window_ms": s.gpu_window_ns / 1e6,
            "gpu_busy_ms": s.gpu_busy_ns / 1e6,
            "gpu_idle_ms": s.gpu_idle_ns / 1e6,
        }
        row |= {f"{key}_ms": ns / 1e6 for key, ns in s.user_parts_ns.items()}
        row |= {f"{key}_ms": getattr(s, f"{key}_ns") / 1e6 for key, _ in HOST_CATEGORIES}
        row["dispatch"] = s.dispatched
        rows.append(row)
    return pd.DataFrame(rows)


def host_categories(analysis) -> tuple[tuple[str, str], ...]:
    """The host parts as the app draws them: the user's --part's first, then HOST_CATEGORIES."""
    return tuple((p, f"part: {p}") for p in analysis.user_parts) + HOST_CATEGORIES


def color_of(key: str, analysis=None) -> str:
    if key in COLORS:
        return COLORS[key]
    parts = list(analysis.user_parts) if analysis is not None else []
    return USER_PART_COLORS[parts.index(key) % len(USER_PART_COLORS)] if key in parts else "#c0c0c0"


def ledger_figure(analysis) -> go.Figure:
    """One stacked bar a step: host time by part (adds up to the step's wall time); beside it, on a GPU
    trace, GPU busy and idle; launches (or top-level ops) per step on the right axis."""
    frame = ledger_frame(analysis)
    gpu = analysis.on_gpu
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = frame["step"]
    _stack(fig, x, frame, host_categories(analysis), "host", "host: ", analysis)
    if gpu:
        _stack(fig, x, frame, GPU_CATEGORIES, "gpu", "", analysis)
    fig.add_trace(
        go.Scatter(
            x=x,
            y=frame["dispatch"],
            mode="lines+markers",
            name=dispatch_label(analysis),
            line={"color": "black", "width": 1.5},
            marker={"size": 6},
        ),
        secondary_y=True,
    )
    fig.update_layout(
        barmode="group",
        bargap=0.25,
        height=460,
        margin={"t": 30, "b": 10},
        legend={"orientation": "h", "y": -0.18},
        hovermode="x unified",
    )
    fig.update_yaxes(title_text="ms per step", secondary_y=False)
    top = float(frame["dispatch"].max()) if len(frame) else 0.0
    fig.update_yaxes(
        title_text="launches / step" if gpu else "top-level ops / step",
        secondary_y=True,
        range=[0, 1.15 * top or 1],
        showgrid=False,
        tickformat=",d",
    )
    return fig


def _stack(fig: go.Figure, x, frame: pd.DataFrame, categories, group: str, prefix: str, analysis=None) -> None:
    """Bars of one offset group stacked by explicit bases, so two stacks can stand side by side."""
    base = pd.Series(0.0, index=frame.index)
    for key, label in categories:
        y = frame[f"{key}_ms"]
        fig.add_trace(
            go.Bar(
                x=x,
                y=y,
                base=base.copy(),
                name=prefix + label,
                offsetgroup=group,
                marker_color=color_of(key, analysis),
                hovertemplate="%{y:.3f} ms",
            ),
            secondary_y=False,
        )
        base = base + y


# ---------------------------------------------------------------------------------------------------------
# 3. one step


def step_label(step) -> str:
    return f"{step.position}: {step.name}"


def timeline_frame(items) -> pd.DataFrame:
    """The step's timeline (probe.ledger.step_timeline) in order: start and duration in µs from the step's
    start, what it is, which host part its time feeds, and whether that part is cache bookkeeping."""
    cols = ["start_us", "dur_us", "kind", "part", "name"]
    frame = pd.DataFrame([{c: getattr(it, c) for c in cols} for it in items], columns=cols)
    frame["cache"] = frame["part"].str.startswith("cache")
    return frame


TIMELINE_LANES = ("ops", "cache", "ranges")  # bottom to top


def timeline_figure(items, title: str = "") -> go.Figure:
    """Top-level ops (and runtime calls outside any op) on one lane, the cache ranges on their own lane, our
    other ranges on a third; each bar from its start for its duration, coloured by the host part it feeds;
    the cache ranges are also shaded across every lane."""
    frame = timeline_frame(items)
    frame["lane"] = frame["kind"].map({"range": "ranges", "op": "ops", "runtime": "ops"})
    frame.loc[frame["cache"] & (frame["kind"] == "range"), "lane"] = "cache"
    fig = go.Figure()
    for part, rows in frame.groupby("part", sort=False):
        fig.add_trace(
            go.Bar(
                y=rows["lane"],
                x=rows["dur_us"],
                base=rows["start_us"],
                orientation="h",
                name=part,
                marker_color=COLORS.get(part, "#c0c0c0"),
                customdata=rows[["name", "start_us"]],
                hovertemplate="%{customdata[0]}<br>start %{customdata[1]:.1f} µs, %{x:.1f} µs<extra>"
                + part
                + "</extra>",
            )
        )
    shaded = frame[frame["cache"] & (frame["kind"] == "range")].head(MAX_SHADED)
    for start, dur, part in zip(shaded["start_us"], shaded["dur_us"], shaded["part"], strict=True):
        fig.add_vrect(x0=start, x1=start + dur, fillcolor=COLORS[part], opacity=0.18, line_width=0)
    fig.update_layout(
        barmode="overlay",
        height=300,
        title=title,
        margin={"t": 40 if title else 10, "b": 10},
        legend={"orientation": "h", "y": -0.35},
        xaxis_title="µs from the step's start",
    )
    fig.update_yaxes(categoryorder="array", categoryarray=list(TIMELINE_LANES))
    return fig


def telemetry_offset_ns(meta: Sidecar | None, analysis) -> int | None:
    """What turns a sample's perf_counter_ns into ns from the trace's first event: the sidecar's clock anchor
    (perf_counter_ns and epoch ns read at one instant) against the trace's epoch origin. None if either is
    missing."""
    clock = meta.clock if meta else None
    if clock is None or analysis.origin_epoch_ns is None:
        return None
    return clock.epoch_ns - clock.perf_counter_ns - analysis.origin_epoch_ns


def telemetry_frame(path: Path, offset_ns: int | None = None) -> pd.DataFrame:
    """Raw telemetry samples (t_ns + figures) with the all-missing figures dropped; `t_ms` on the trace's
    clock when `offset_ns` lines them up with a trace, else `t_s` from the first sample."""
    try:
        frame = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises its own types for a foreign or truncated file
        raise ProbeError(f"cannot read {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if "t_ns" not in frame.columns:
        raise ProbeError(f"{path} has no t_ns column: not telemetry samples")
    frame = frame.dropna(axis=1, how="all")
    if offset_ns is None:
        frame.insert(0, "t_s", (frame["t_ns"] - frame["t_ns"].min()) / 1e9)
    else:
        frame.insert(0, "t_ms", (frame["t_ns"] + offset_ns) / 1e6)
    return frame


def telemetry_figure(frame: pd.DataFrame, steps: Sequence = ()) -> go.Figure:
    """One small panel a figure (GPU memory, utilization, power, RSS, CPU %, ...) against time. On a trace's
    clock (`t_ms`), the trace's steps are shaded behind the samples, so each sample sits over its step."""
    aligned = "t_ms" in frame.columns
    x = frame["t_ms"] if aligned else frame["t_s"]
    figures = [c for c in frame.columns if c not in ("t_s", "t_ms", "t_ns")]
    fig = make_subplots(
        rows=max(len(figures), 1),
        cols=1,
        shared_xaxes=True,
        subplot_titles=figures,
        vertical_spacing=0.08 if len(figures) < 6 else 0.03,
    )
    for i, name in enumerate(figures, start=1):
        fig.add_trace(go.Scatter(x=x, y=frame[name], mode="lines+markers", name=name, showlegend=False), row=i, col=1)
    for k, step in enumerate(steps if aligned else ()):
        fig.add_vrect(
            x0=step.start_ns / 1e6,
            x1=(step.start_ns + step.wall_ns) / 1e6,
            line_width=0,
            fillcolor="#1f77b4" if step.kind == "prefill" else "#7f7f7f",
            opacity=0.25 if k % 2 else 0.12,
        )
    fig.update_xaxes(
        title_text="ms from the trace's first event (steps shaded)" if aligned else "s from the first sample",
        row=max(len(figures), 1),
        col=1,
    )
    fig.update_layout(height=140 * max(len(figures), 1) + 60, margin={"t": 30, "b": 10})
    return fig


# ---------------------------------------------------------------------------------------------------------
# 4. top ops


def top_ops_frame(ops) -> pd.DataFrame:
    """Ops (probe.ledger.OpTime) ranked by host self time: ms, calls, and µs a call."""
    rows = [
        {
            "op": o.name,
            "self_ms": o.self_ns / 1e6,
            "calls": o.calls,
            "us_per_call": o.self_ns / 1e3 / o.calls if o.calls else 0.0,
        }
        for o in ops
    ]
    frame = pd.DataFrame(rows, columns=["op", "self_ms", "calls", "us_per_call"])
    return frame.sort_values(["self_ms", "op"], ascending=[False, True], kind="stable").reset_index(drop=True)


def top_ops_figure(ops, title: str = "") -> go.Figure:
    frame = top_ops_frame(ops).iloc[::-1]  # plotly draws the first bar at the bottom
    fig = go.Figure(
        go.Bar(
            x=frame["self_ms"],
            y=frame["op"],
            orientation="h",
            marker_color=COLORS["attention"],
            customdata=frame["calls"],
            hovertemplate="%{y}: %{x:.3f} ms in %{customdata} call(s)<extra></extra>",
        )
    )
    fig.update_layout(
        height=max(260, 26 * len(frame) + 80),
        title=title,
        xaxis_title="host self time (ms)",
        margin={"t": 40 if title else 10, "b": 10, "l": 10},
    )
    return fig


def frames_frame(frames) -> pd.DataFrame:
    """Python frames (probe.analysis.host.FrameTime) by self time: the python part of the ledger, by frame."""
    rows = [{"frame": f.frame, "self_ms": f.self_ns / 1e6, "count": f.count} for f in frames]
    return pd.DataFrame(rows, columns=["frame", "self_ms", "count"])


def frames_figure(frames, title: str = "") -> go.Figure:
    frame = frames_frame(frames).iloc[::-1]
    fig = go.Figure(
        go.Bar(
            x=frame["self_ms"],
            y=[_short(f) for f in frame["frame"]],
            orientation="h",
            marker_color=COLORS["python"],
            customdata=frame[["frame", "count"]],
            hovertemplate="%{customdata[0]}: %{x:.3f} ms self, %{customdata[1]} call(s)<extra></extra>",
        )
    )
    fig.update_layout(
        height=max(260, 26 * len(frame) + 80),
        title=title,
        xaxis_title="Python self time (ms)",
        margin={"t": 40 if title else 10, "b": 10, "l": 10},
    )
    return fig


# ---------------------------------------------------------------------------------------------------------
# 4b. kernels

KERNEL_COLORS = {
    "gemm": "#1f77b4",
    "attention": "#7b61ff",
    "norm": "#e98ebf",
    "elementwise": "#9aa5b1",
    "rotary": "#bcbd22",
    "kv_cache": "#e4572e",
    "reduction": "#17becf",
    "sampling": "#2ca58d",
    "communication": "#8c564b",
    "moe": "#ff7f0e",
    "conv": "#2ca02c",
    "quantize": "#f6c344",
    "memcpy": "#aec7e8",
    "memset": "#c5b0d5",
    "other": "#d9dde2",
}


def _short(name: str, width: int = KERNEL_NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def kernels_frame(stats) -> pd.DataFrame:
    """Kernels (probe.analysis.kernels.KernelStat) by total GPU time, with the full name."""
    rows = [
        {
            "kernel": k.name,
            "category": k.category,
            "count": k.count,
            "total_ms": k.total_ns / 1e6,
            "mean_us": k.mean_ns / 1e3,
            "p50_us": k.p50_ns / 1e3,
            "max_us": k.max_ns / 1e3,
            "share_of_busy": k.share_of_busy,
        }
        for k in stats
    ]
    columns = ["kernel", "category", "count", "total_ms", "mean_us", "p50_us", "max_us", "share_of_busy"]
    return pd.DataFrame(rows, columns=columns)


def kernels_figure(stats, title: str = "") -> go.Figure:
    """Top kernels by total time, coloured by category; the hover has the whole name."""
    frame = kernels_frame(stats).iloc[::-1]
    fig = go.Figure(
        go.Bar(
            x=frame["total_ms"],
            y=[f"{i}. {_short(n)}" for i, n in zip(range(len(frame), 0, -1), frame["kernel"], strict=True)],
            orientation="h",
            marker_color=[KERNEL_COLORS.get(c, "#c0c0c0") for c in frame["category"]],
            customdata=frame[["kernel", "category", "count"]],
            hovertemplate="%{customdata[0]}<br>%{customdata[1]}: %{x:.3f} ms in %{customdata[2]} launch(es)"
            "<extra></extra>",
        )
    )
    fig.update_layout(
        height=max(280, 26 * len(frame) + 80),
        title=title,
        xaxis_title="GPU time (ms)",
        margin={"t": 40 if title else 10, "b": 10, "l": 10},
    )
    return fig


def kernel_category_frame(analysis) -> pd.DataFrame:
    """One row a step and category: the step's GPU time in kernels of that category (ms)."""
    rows = [
        {"position": s.position, "step": s.name, "category": c, "ms": ns / 1e6}
        for s in analysis.steps
        for c, ns in s.kernels_by_category.items()
    ]
    return pd.DataFrame(rows, columns=["position", "step", "category", "ms"])


def kernel_category_figure(analysis) -> go.Figure:
    """One stacked bar a step: its GPU time by kernel category; the step's GPU busy time as a line (categories
    can sum past it when kernels overlap on several streams)."""
    frame = kernel_category_frame(analysis)
    fig = go.Figure()
    steps = [s.name for s in analysis.steps]
    for category, rows in frame.groupby("category", sort=False):
        by_step = dict(zip(rows["step"], rows["ms"], strict=True))
        fig.add_trace(
            go.Bar(
                x=steps,
                y=[by_step.get(s, 0.0) for s in steps],
                name=category,
                marker_color=KERNEL_COLORS.get(category, "#c0c0c0"),
                hovertemplate="%{y:.3f} ms",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=[s.gpu_busy_ns / 1e6 for s in analysis.steps],
            mode="lines+markers",
            name="GPU busy",
            line={"color": "black", "width": 1.5},
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


# ---------------------------------------------------------------------------------------------------------
# 5. compare


def trace_categories(analysis) -> dict[str, float]:
    """Mean per steady-state step of wall, each host category and, on a GPU trace, GPU busy / idle (ms), and
    the dispatch count. Means, not medians, so the host categories still add up to the wall time."""
    frame = ledger_frame(analysis)
    frame = frame[frame["position"].isin([s.position for s in steady_steps(analysis)])]
    keys = ["wall"] + [k for k, _ in host_categories(analysis)]
    if analysis.on_gpu:  # a CPU-only trace has no GPU side to compare
        keys += [k for k, _ in GPU_CATEGORIES]
    out = {k: float(frame[f"{k}_ms"].mean()) for k in keys}
    out["dispatch"] = float(frame["dispatch"].mean())
    return out


CATEGORY_LABELS = {"wall": "wall", **dict(HOST_CATEGORIES), **dict(GPU_CATEGORIES), "dispatch": "dispatch / step"}
# (a trace analyzed with --part adds its parts: trace_compare_frame)


def delta_frame(base: Mapping[str, float], cur: Mapping[str, float], labels: Mapping[str, str]) -> pd.DataFrame:
    """Baseline, current, current - baseline and the change in % for every key of `labels` both sides have."""
    rows = []
    for key, label in labels.items():
        if key not in base or key not in cur:
            continue
        b, c = base[key], cur[key]
        rows.append(
            {
                "what": label,
                "baseline": b,
                "current": c,
                "delta": c - b,
                "delta_pct": 100 * (c - b) / b if b else float("nan"),
            }
        )
    return pd.DataFrame(rows, columns=["what", "baseline", "current", "delta", "delta_pct"])


def trace_compare_frame(base_analysis, cur_analysis) -> pd.DataFrame:
    labels = {
        "wall": "wall",
        **dict(host_categories(cur_analysis)),
        **dict(GPU_CATEGORIES),
        "dispatch": "dispatch / step",
    }
    return delta_frame(trace_categories(base_analysis), trace_categories(cur_analysis), labels)


def trace_compare_figure(frame: pd.DataFrame, base_name: str, cur_name: str) -> go.Figure:
    """Per-category ms per step side by side, baseline against current, the change written on each pair."""
    times = frame[frame["what"] != CATEGORY_LABELS["dispatch"]]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=times["what"], y=times["baseline"], name=f"baseline: {base_name}", marker_color="#9aa5b1"))
    fig.add_trace(
        go.Bar(
            x=times["what"],
            y=times["current"],
            name=f"current: {cur_name}",
            marker_color="#1f77b4",
            text=[_signed(d, p) for d, p in zip(times["delta"], times["delta_pct"], strict=True)],
            textposition="outside",
        )
    )
    fig.update_traces(cliponaxis=False)
    fig.update_layout(
        barmode="group",
        height=420,
        yaxis_title="ms per step (mean over steady-state steps)",
        legend={"orientation": "h", "y": -0.2},
        margin={"t": 30, "b": 10},
        uniformtext={"minsize": 11, "mode": "show"},
    )
    return fig


def _signed(delta: float, pct: float) -> str:
    return f"{delta:+.3f} ms" + ("" if pct != pct else f" ({pct:+.0f}%)")


def run_compare_frame(base: BenchResults, cur: BenchResults) -> pd.DataFrame:
    """One row a cell both runs have (engine, prompt, new tokens, batch) and a sweep metric: the change."""
    mine = {c.key: c for c in cur.cells}
    rows = []
    for b in base.cells:
        c = mine.get(b.key)
        if c is None:
            continue
        for metric, label in SWEEP_METRICS:
            bv, cv = getattr(b, metric), getattr(c, metric)
            rows.append(
                {
                    "cell": str(b.key),
                    "metric": label,
                    "baseline": bv,
                    "current": cv,
                    "delta": cv - bv,
                    "delta_pct": 100 * (cv - bv) / bv if bv else float("nan"),
                }
            )
    return pd.DataFrame(rows, columns=["cell", "metric", "baseline", "current", "delta", "delta_pct"])


def run_compare_figure(frame: pd.DataFrame, base_name: str, cur_name: str) -> go.Figure:
    """The sweep metrics cell by cell, baseline against current, one panel a metric."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=[label for _, label in SWEEP_METRICS])
    for col, (_, label) in enumerate(SWEEP_METRICS, start=1):
        rows = frame[frame["metric"] == label]
        for side, name, color in (("baseline", base_name, "#9aa5b1"), ("current", cur_name, "#1f77b4")):
            fig.add_trace(
                go.Bar(
                    x=rows["cell"],
                    y=rows[side],
                    name=f"{side}: {name}",
                    marker_color=color,
                    legendgroup=side,
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
    fig.update_layout(barmode="group", height=420, legend={"orientation": "h", "y": -0.35}, margin={"t": 40, "b": 10})
    return fig


# ---------------------------------------------------------------------------------------------------------
# 6. alerts


def md_escape(text: str) -> str:
    """Text shown through Markdown as written: aten::_foo_bar must not turn italic."""
    return "".join("\\" + ch if ch in "\\`*_{}[]<>()#+-.!|~$" else ch for ch in text)


def comparison_frame(comparison) -> pd.DataFrame:
    """probe compare's table (its own columns and cell formatting), one row a key and metric."""
    return pd.DataFrame([row_cells(r) for r in comparison.rows], columns=list(COLUMNS))


# ---------------------------------------------------------------------------------------------------------
# 7. history


HISTORY_PANELS = ("host time per step (µs)", "launches per step", "decode tokens/s")
ALERT_COLOR = "#d62728"
TIMING_COLOR = "#ff7f0e"
COUNT_ALERT = "launch-count alert (exact)"
TIMING_ALERT = "timing alert (across sessions: a lead)"


def history_ticks(frame: pd.DataFrame) -> list[str]:
    """Each run's x label: its commit (a + when tracked files were modified) over the time it ran (UTC)."""
    return [
        f"{c.removesuffix('+dirty')[:7]}{'+' if d else ''}<br>{t:%m-%d %H:%M}"
        for c, d, t in zip(frame["commit"], frame["dirty"], frame["recorded_at"], strict=True)
    ]


def history_parts(frame: pd.DataFrame) -> list[str]:
    """The host parts a profiled unit's runs were split into (probe.analysis.history.trend's part: columns)."""
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
    _history_line(fig, frame, "launches", "launches / step", 2, "black", labelled=True)
    if rows == 3:
        _history_line(fig, frame, "decode_tok_s", "decode tok/s", 3, "#1f77b4")
    _history_alerts(fig, frame, rows)
    title = unit if rows == 3 else f"{unit} (a profiled step: decode tokens/s are measured by the bench cells)"
    fig.update_layout(
        barmode="stack",
        height=640 if rows == 3 else 560,
        margin={"t": 70, "b": 10},
        legend={"orientation": "h", "y": -0.12},
        title={"text": title, "x": 0, "y": 0.98, "font": {"size": 14}},
        clickmode="event+select",
    )
    fig.update_xaxes(tickvals=list(frame["position"]), ticktext=history_ticks(frame), row=rows, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    launches = frame["launches"].dropna()
    if len(launches):  # not from zero: 262 -> 266 must show; room above for the labels
        low, high = float(launches.min()), float(launches.max())
        pad = max(1.0, 0.15 * (high - low))
        fig.update_yaxes(tickformat=",d", range=[low - pad, high + 2 * pad], row=2, col=1)
    if rows == 3:
        fig.update_yaxes(rangemode="tozero", row=3, col=1)
    return fig


_HOVER = "%{customdata}<br>%{y:,.1f}<extra>%{fullData.name}</extra>"


def _history_host(fig: go.Figure, frame: pd.DataFrame) -> None:
    """Host time per step: the profiled mean by part, stacked, with the median step as a tick; or the median step."""
    x, ids, parts = frame["position"], frame["run_id"], history_parts(frame)
    labels = dict(HOST_CATEGORIES)
    for part in parts:
        fig.add_trace(
            go.Bar(
                x=x,
                y=frame[f"part:{part}"],
                name=f"host: {labels.get(part, part)}",
                marker_color=color_of(part),
                customdata=ids,
                hovertemplate=_HOVER,
            ),
            row=1,
            col=1,
        )
    if parts:
        tick = {"color": "black", "symbol": "line-ew-open", "size": 14}
        host = go.Scatter(x=x, y=frame["host_us"], mode="markers", marker=tick, name="host µs/step (median step)")
    else:
        name = "host µs/step (median step; a bench cell is not split)"
        host = go.Bar(x=x, y=frame["host_us"], marker_color=COLORS["ops"], name=name)
    fig.add_trace(host.update(customdata=ids, hovertemplate=_HOVER), row=1, col=1)


def _history_line(
    fig: go.Figure, frame: pd.DataFrame, column: str, name: str, row: int, color: str, labelled: bool = False
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
            line={"color": color},
            customdata=frame["run_id"],
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
    for column, name, color, symbol, height, row, ringed in (
        ("count_alerts", COUNT_ALERT, ALERT_COLOR, "x", 1.08, 2, "launches"),
        ("timing_alerts", TIMING_ALERT, TIMING_COLOR, "triangle-up", 1.2, 3, "decode_tok_s"),
    ):
        flagged = frame[frame[column] != ""]
        fig.add_trace(
            go.Scatter(
                x=flagged["position"],
                y=[height * top] * len(flagged),
                mode="markers",
                name=name,
                marker={"color": color, "symbol": symbol, "size": 13},
                customdata=flagged["run_id"],
                text=[a.replace("\n", "<br>") for a in flagged[column]],
                hovertemplate="%{customdata}<br>%{text}<extra>alert</extra>",
            ),
            row=1,
            col=1,
        )
        if row <= rows:
            ring = {"color": color, "size": 12, "symbol": "circle-open", "line": {"width": 2}}
            fig.add_trace(
                go.Scatter(
                    x=flagged["position"],
                    y=flagged[ringed],
                    mode="markers",
                    marker=ring,
                    showlegend=False,
                    name=name,
                    customdata=flagged["run_id"],
                    hovertemplate="%{customdata}<extra>alert</extra>",
                ),
                row=row,
                col=1,
            )


def clicked_run(event) -> str | None:
    """The run id of the point clicked in history_figure (Streamlit's selection event), if any."""
    try:
        points = event["selection"]["points"]
    except (KeyError, TypeError):
        return None
    for point in points:
        data = point.get("customdata")
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


# ---------------------------------------------------------------------------------------------------------
# a job: several rank traces step by step (probe.analysis.job)


def ranks_frame(result) -> pd.DataFrame:
    """One row a step: each rank's wall (ms), the slowest rank, the median rank's wall and how far it trails."""
    rows = []
    for s in result.by_step:
        row = {"step": s.step, "name": s.name}
        row |= {f"rank {r.rank} ms": r.wall_ns / 1e6 for r in s.ranks}
        row |= {
            "slowest rank": s.slowest_rank,
            "median ms": s.median_wall_ns / 1e6,
            "trails by ms": s.trails_median_ns / 1e6,
            "trails %": s.trails_median_pct,
        }
        rows.append(row)
    return pd.DataFrame(rows)


def ranks_figure(result) -> go.Figure:
    """Wall per step, one line a rank; each step's slowest rank circled; GPU busy per step below on a GPU job."""
    gpu = result.on_gpu
    fig = make_subplots(
        rows=2 if gpu else 1,
        cols=1,
        shared_xaxes=True,
        subplot_titles=["wall per step (ms)", *(["GPU busy per step (ms)"] if gpu else [])],
        vertical_spacing=0.12,
    )
    steps = [s.step for s in result.by_step]
    for i, rank in enumerate(result.ranks):
        name = f"rank {rank}"
        walls = [s.ranks[i].wall_ns / 1e6 for s in result.by_step]
        fig.add_trace(go.Scatter(x=steps, y=walls, mode="lines+markers", name=name, legendgroup=name), row=1, col=1)
        if gpu:
            busy = [s.ranks[i].gpu_busy_ns / 1e6 for s in result.by_step]
            fig.add_trace(
                go.Scatter(x=steps, y=busy, mode="lines+markers", name=name, legendgroup=name, showlegend=False),
                row=2,
                col=1,
            )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=[s.slowest_wall_ns / 1e6 for s in result.by_step],
            mode="markers",
            name="slowest rank",
            text=[f"rank {s.slowest_rank}: +{s.trails_median_pct:.1f}% on the median" for s in result.by_step],
            marker={"symbol": "circle-open", "size": 16, "color": "red", "line": {"width": 3}},
            hovertemplate="step %{x}: %{text}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.update_xaxes(title_text="step", row=2 if gpu else 1, col=1)
    fig.update_layout(height=560 if gpu else 380, margin={"t": 40})
    return fig
