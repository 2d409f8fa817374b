"""The Top ops view: host self time by op, and the Python frames that hold the ledger's python part."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from probe.analysis.ledger.host import FrameTime, OpTime
from probe.explorer.figures.style import COLORS, NAME_WIDTH, labels, ranked_bars
from probe.text import ns_to_ms, short


def top_ops_frame(ops: Sequence[OpTime]) -> pd.DataFrame:
    """Ops ranked by host self time: ms, calls, and µs a call."""
    rows = [
        {
            "op": o.name,
            "self_ms": ns_to_ms(o.self_ns),
            "calls": o.calls,
            "us_per_call": o.self_us / o.calls if o.calls else 0.0,
        }
        for o in ops
    ]
    frame = pd.DataFrame(rows, columns=["op", "self_ms", "calls", "us_per_call"])
    return frame.sort_values(["self_ms", "op"], ascending=[False, True], kind="stable").reset_index(drop=True)


def top_ops_figure(ops: Sequence[OpTime], title: str = "") -> go.Figure:
    frame = top_ops_frame(ops)
    return ranked_bars(
        frame["op"],
        frame["self_ms"],
        list(zip(frame["calls"], strict=True)),
        "%{y}: %{x:.3f} ms in %{customdata[0]} call(s)<extra></extra>",
        COLORS["attention"],
        "host self time (ms)",
        title,
    )


def frames_frame(frames: Sequence[FrameTime]) -> pd.DataFrame:
    """Python frames by self time: the python part of the ledger, by frame."""
    rows = [{"frame": f.frame, "self_ms": ns_to_ms(f.self_ns), "count": f.count} for f in frames]
    return pd.DataFrame(rows, columns=["frame", "self_ms", "count"])


def frames_figure(frames: Sequence[FrameTime], title: str = "") -> go.Figure:
    frame = frames_frame(frames)
    return ranked_bars(
        [short(f, NAME_WIDTH) for f in frame["frame"]],
        frame["self_ms"],
        list(zip(labels(frame["frame"]), frame["count"], strict=True)),
        "%{customdata[0]}: %{x:.3f} ms self, %{customdata[1]} call(s)<extra></extra>",
        COLORS["python"],
        "Python self time (ms)",
        title,
    )
