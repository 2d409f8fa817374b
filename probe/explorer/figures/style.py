"""How the explorer draws, for every view: the one colour table, the host categories, names made safe to show, round
axis ticks, and the ranked bar chart that top ops, Python frames and kernels share. Units, cut names and the Markdown
escape are probe.text's, the terminal's own."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import plotly.graph_objects as go

from probe.analysis.ledger.host import MECHANISM_PARTS, PURPOSE_PARTS
from probe.text import md_escape, short

# The ledger's two host partitions (probe.analysis.ledger.host) as the app groups them: by purpose, the three cache
# parts as
# one; a trace analyzed with --part gets the user's parts in front (figures.ledger.host_categories); and by mechanism.
HOST_CATEGORIES: tuple[tuple[str, str], ...] = tuple(
    dict.fromkeys((p.group, "cache bookkeeping" if p.group == "cache" else p.label) for p in PURPOSE_PARTS)
)
MECHANISM_CATEGORIES: tuple[tuple[str, str], ...] = tuple((p.name, p.label) for p in MECHANISM_PARTS)
GPU_CATEGORIES: tuple[tuple[str, str], ...] = (("gpu_busy", "GPU busy"), ("gpu_idle", "GPU idle"))

# Every colour the views use. Named things (host parts, kernel categories, marks) by name; a host part and the
# kernel category of the same work share a colour (attention, the cache and kv_cache, ops and elementwise).
COLORS: dict[str, str] = {
    # host parts (probe.analysis.ledger.host: by purpose, by mechanism) and the GPU side of a step
    "ops": "#9aa5b1",
    "model": "#9aa5b1",
    "dispatch": "#9aa5b1",
    "launch": "#5b6b7a",
    "runtime": "#b8c2cc",
    "sync_wait": "#8c564b",
    "attention": "#7b61ff",
    "cache": "#e4572e",
    "cache_update": "#e4572e",
    "cache_seq_length": "#f29e4c",
    "cache_mask_sizes": "#f6c344",
    "mask": "#e98ebf",
    "sample": "#2ca58d",
    "sync": "#8c564b",
    "other_threads": "#b5a6d6",
    "setup": "#ff9896",  # a cold step's first-call set-up
    "data": "#6a3d9a",  # data loading; "communication" shares the kernel category's colour below
    "profiler": "#eceff1",  # the profiler's own recorded work
    "unattributed": "#d9dde2",
    "named": "#c6dbef",  # inside named ranges that hold no op (the user's own code the range names)
    "python": "#c9a227",
    "range": "#a7c7e7",
    "gpu_busy": "#1f77b4",
    "gpu_idle": "#aec7e8",
    # one step on one clock (probe.explorer.step_clock): the GPU's idle gaps by cause, the host's external wait
    "idle_host_wait": "#ffbb78",
    "idle_kernel_wait": "#c7c7c7",
    "idle_other": "#dbdb8d",
    "before_gpu": "#e7e7e7",
    "host_work": "#98df8a",  # the host window, the Diagnosis's way: host work, sync wait (GPU working), external
    "gpu_wait": "#8c564b",
    "external": "#d62728",
    "hole": "#c7c7c7",  # no work of the trace (Evidence.hole_ns), hatched
    # the roofline beside a step: its two terms, in colours no piece of the measured step takes
    "roofline_traffic": "#ff7f0e",
    "roofline_compute": "#2ca02c",
    # kernel categories (probe.analysis.ledger.kernels)
    "gemm": "#1f77b4",
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
    # marks
    "unknown": "#c0c0c0",
    "baseline": "#9aa5b1",
    "current": "#1f77b4",
    "floor": "#555555",
    "roofline": "#d62728",
    "flagged": "red",
    "count_alert": "#d62728",
    "timing_alert": "#ff7f0e",
    "line": "black",
    "prefill_shade": "#1f77b4",
    "step_shade": "#7f7f7f",
}
SERIES = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f")  # engines
USER_PART_COLORS = ("#17becf", "#bcbd22", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")  # --part, in order
NAME_WIDTH = 60  # characters of a name on an axis; the hover and the tables carry the whole name
STEP_TICK_WIDTH = 28  # characters of a step's name on a chart's step axis, after its position


def color(key: str, user_parts: Sequence[str] = ()) -> str:
    """The colour of a named thing; a user's --part by its place in `user_parts`; grey for anything else."""
    if key in COLORS:
        return COLORS[key]
    if key in user_parts:
        return USER_PART_COLORS[list(user_parts).index(key) % len(USER_PART_COLORS)]
    return COLORS["unknown"]


# ---- names made safe to show -----------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped_surrogate(m: re.Match) -> str:
    code = ord(m.group())
    # Python keeps a byte that is not UTF-8 (a file name's, os.fsdecode) as U+DC80..U+DCFF: show the byte.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def printable(value: object) -> str:
    """Any text as valid UTF-8: a byte of a file name that was not UTF-8 as \\xNN, any other lone surrogate as
    \\uNNNN. Streamlit (protobuf) and Arrow refuse lone surrogates, so a name must pass here before it is shown."""
    return _SURROGATE.sub(_escaped_surrogate, str(value))


def label(value: object) -> str:
    """A name (from a trace, a results file, a history) as plotly shows it: plotly reads <a href>, <span style>
    and the like in every label, hover and title, so < > & become entities and the name is shown as written."""
    return printable(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def labels(values) -> list[str]:
    return [label(v) for v in values]


def md(value: object) -> str:
    """Text the app did not write, shown through Markdown as written (aten::_foo_bar must not turn italic), on one
    line: made printable, then probe.text's escape."""
    return md_escape(printable(value))


def step_ticks(positions: Sequence[int], names: Sequence[str]) -> list[str]:
    """A chart's step axis: each step by its position, then its name (escaped, cut): steps are keyed by position,
    never by name, so four steps of one name are four bars."""
    return [f"{p}: {label(short(n, STEP_TICK_WIDTH))}" for p, n in zip(positions, names, strict=True)]


# ---- axis ticks -----------------------------------------------------------------------------------------


def round_step(span: float, intervals: int = 5, integer: bool = False) -> float:
    """The tick step of 1, 2 or 5 times a power of ten that cuts `span` into nearest `intervals` pieces (at
    least 1 when the axis counts things)."""
    if not span > 0 or not math.isfinite(span):
        return 1.0
    raw = span / intervals
    power = 10.0 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 5, 10)), key=lambda s: abs(math.log(s / raw)))
    return max(step, 1.0) if integer else step


MAX_LOG_TICKS = 12  # past this many, a log axis's labels crowd each other (the Op roofline spans ten decades)


def log_ticks(low: float, high: float) -> list[float]:
    """Ticks for a log axis over [low, high] that read as written: 1, 2 and 5 times each power of ten inside it;
    every digit (1, 2, ... 9) where that leaves fewer than three; the powers of ten alone (every k-th) where it
    leaves more than MAX_LOG_TICKS."""
    if not (low > 0 and high >= low and math.isfinite(high)):
        return []
    lo, hi = math.floor(math.log10(low)), math.ceil(math.log10(high))
    for digits in ((1, 2, 5), tuple(range(1, 10))):
        ticks = [float(f"{m}e{p}") for p in range(lo, hi + 1) for m in digits]
        inside = [t for t in ticks if low <= t <= high]
        if len(inside) > MAX_LOG_TICKS:
            powers = [float(f"1e{p}") for p in range(lo, hi + 1) if low <= float(f"1e{p}") <= high]
            return powers[:: math.ceil(len(powers) / MAX_LOG_TICKS)]
        if len(inside) >= 3:
            return inside
    return inside


def log_axis(values: Sequence[float], title: str, pad: float = 2.0) -> dict:
    """A log axis over `values` (padded by `pad` each side), ticked at log_ticks, each tick written as its value."""
    finite = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not finite:
        return {"type": "log", "title": title}
    low, high = min(finite) / pad, max(finite) * pad
    ticks = log_ticks(low, high)
    return {
        "type": "log",
        "title": title,
        "range": [math.log10(low), math.log10(high)],
        "tickvals": ticks,
        "ticktext": [f"{t:g}" for t in ticks],
    }


def round_axis(low: float, high: float, integer: bool = False, headroom: float = 0.1) -> dict:
    """Layout for an axis that holds [low, high] with `headroom` (a share of the span) above, ticked at round
    values from a round start to a round end: `fig.update_yaxes(**round_axis(...))`."""
    span = high - low if high > low else abs(high) or 1.0
    top = high + headroom * span
    step = round_step(top - low, integer=integer)
    start, end = math.floor(low / step) * step, math.ceil(top / step) * step
    return {"range": [start, end], "tick0": start, "dtick": step}


# ---- the ranked bar chart --------------------------------------------------------------------------------


def ranked_bars(
    axis_names: Sequence[str],
    values: Sequence[float],
    customdata: Sequence[Sequence],
    hovertemplate: str,
    colors: str | Sequence[str],
    x_title: str,
    title: str = "",
    min_height: int = 260,
) -> go.Figure:
    """Horizontal bars, largest first, so drawn at the top (plotly draws the first bar at the bottom). Each axis
    name is numbered by its rank, so that two names cut to the same text stay two bars. The axis names are escaped
    here; `customdata` (what the hover shows) must be escaped by the caller where it holds names."""
    ranked = [f"{i}. {label(name)}" for i, name in enumerate(axis_names, start=1)]
    fig = go.Figure(
        go.Bar(
            x=list(values)[::-1],
            y=ranked[::-1],
            orientation="h",
            marker_color=colors if isinstance(colors, str) else list(colors)[::-1],
            customdata=list(customdata)[::-1],
            hovertemplate=hovertemplate,
        )
    )
    fig.update_layout(
        height=max(min_height, 26 * len(axis_names) + 80),
        title=label(title),
        xaxis_title=x_title,
        margin={"t": 40 if title else 10, "b": 10, "l": 10},
    )
    return fig


def clicked_data(event) -> list:
    """The customdata of each point a Streamlit chart selection event holds, in order; [] for no event or no
    selection."""
    try:
        points = event["selection"]["points"]
    except (KeyError, TypeError):
        return []
    return [p.get("customdata") for p in points if isinstance(p, dict)]
