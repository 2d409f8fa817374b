"""The figures a step's verdict rests on (`Evidence`, from its ledger), the bounds it can take and the thresholds
that decide them, each named once, and what the trace says beyond one step (`Context`: its launch calls' own
cost, a roofline, contention). probe.analysis.diagnosis.verdict judges from these; probe.analysis.diagnosis.what_if
prices the changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from probe.analysis.ledger.types import StepLedger
from probe.analysis.trace import GRAPH_LAUNCH_NAMES, LAUNCH_NAMES, Kind, Trace, api_base_name

Bound = Literal["host", "gpu", "external", "cpu_only"]


EXTERNAL_SHARE = 0.5  # of the host window blocked on unseen device work: the verdict is `external`


CLOSE = 0.1  # host and GPU work within 10%: balanced


HOST_BOUND_BY = ("python", "dispatch", "launch", "unattributed")  # mechanism parts of host work, in the verdict


@dataclass(frozen=True)
class Evidence:
    """The figures a verdict rests on, all in ns (fractions as fractions)."""

    wall_ns: int  # the host window
    span_ns: int  # the step read whole: host start to the later of the host end and the GPU end
    measured_ns: int  # max(host window, GPU busy): what a loop of such steps costs at least
    host_work_ns: int  # wall less sync wait
    gpu_busy_ns: int
    busy_of_span: float  # GPU busy over the span
    busy_of_wall: float  # GPU busy over the host window (above 1: the GPU works longer than the host window)
    gpu_idle_before_ns: int | None  # from the host window's start to the step's first GPU op (None: no GPU op)
    gpu_idle_after_ns: int | None  # from the step's last GPU op to the host window's end, when the host is later
    sync_wait_ns: int
    external_wait_ns: int
    launch_ns: int  # launch and other runtime calls
    dispatch_ns: int
    python_ns: int
    unattributed_ns: int
    launches: int
    graph_launches: int
    kernels: int

    def to_json(self) -> dict:
        out = {}
        for name, value in vars(self).items():
            if name.endswith("_ns"):
                out[name[:-3] + "_us"] = None if value is None else value / 1e3
            else:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, doc: dict) -> Evidence:
        """to_json's inverse (us back to whole ns)."""
        values: dict[str, Any] = {}  # each field's value as the JSON holds it
        for f in dataclasses.fields(cls):
            if f.name.endswith("_ns"):
                us = doc[f.name[:-3] + "_us"]
                values[f.name] = None if us is None else round(us * 1e3)
            else:
                values[f.name] = doc[f.name]
        return cls(**values)


@dataclass(frozen=True)
class Context:
    """What the trace says beyond one step: the cost of one graph launch and of one launch call, and the
    roofline's predicted GPU time per batch size when a model is known (`gpu_ms_at(batch)`)."""

    graph_launch_ns: float | None = None  # the trace's median graph-launch call
    launch_call_ns: float | None = None  # the trace's median kernel launch call
    gpu_ms_at: Callable[[int], float] | None = None  # batch -> the roofline's GPU ms for the step at that batch
    contended: str | None = None  # a line saying the figures were measured under contention

    @classmethod
    def of(cls, trace: Trace | None = None, gpu_ms_at=None, contended: str | None = None) -> Context:
        """From a trace (for the launch calls' own durations), a roofline, and a contention line."""
        graph = launch = None
        if trace is not None:
            rt = trace.rows(Kind.RUNTIME)
            base = [api_base_name(trace.names[n]) for n in trace.name_id[rt].tolist()]
            graph_rows = rt[[b in GRAPH_LAUNCH_NAMES for b in base]]
            launch_rows = rt[[b in LAUNCH_NAMES for b in base]]
            graph = float(np.median(trace.dur_ns[graph_rows])) if len(graph_rows) else None
            launch = float(np.median(trace.dur_ns[launch_rows])) if len(launch_rows) else None
        return cls(graph, launch, gpu_ms_at, contended)


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def evidence(s: StepLedger) -> Evidence:
    m = s.mechanism_ns
    end = s.start_ns + s.wall_ns
    before = max(0, s.gpu_start_ns - s.start_ns) if s.gpu_start_ns is not None else None
    after = max(0, end - s.gpu_end_ns) if s.gpu_end_ns is not None else None
    return Evidence(
        wall_ns=s.wall_ns,
        span_ns=s.span_ns,
        measured_ns=max(s.wall_ns, s.gpu_busy_ns),
        host_work_ns=s.host_work_ns,
        gpu_busy_ns=s.gpu_busy_ns,
        busy_of_span=s.gpu_busy_ns / s.span_ns if s.span_ns else 0.0,
        busy_of_wall=s.gpu_busy_ns / s.wall_ns if s.wall_ns else 0.0,
        gpu_idle_before_ns=before,
        gpu_idle_after_ns=after,
        sync_wait_ns=s.sync_wait_ns,
        external_wait_ns=s.external_wait_ns,
        launch_ns=m.get("launch", 0) + m.get("runtime", 0),
        dispatch_ns=m.get("dispatch", 0),
        python_ns=m.get("python", 0),
        unattributed_ns=m.get("unattributed", 0),
        launches=s.launches,
        graph_launches=s.graph_launches,
        kernels=s.kernels,
    )


def side_of(host_work: int, gpu: int) -> Bound:
    return "gpu" if gpu >= host_work else "host"


def largest_host_part(e: Evidence) -> str:
    parts = {"python": e.python_ns, "dispatch": e.dispatch_ns, "launch": e.launch_ns, "unattributed": e.unattributed_ns}
    return max(HOST_BOUND_BY, key=lambda p: parts[p])


_DIRECTION = {"HtoD": "host to device", "DtoH": "device to host", "DtoD": "device to device", "HtoH": "host to host"}


def site_text(s: StepLedger) -> str:
    if not s.sync_sites:
        return ""
    site = s.sync_sites[0]
    where = [x for x in (site.frame, site.source) if x and x != site.call]
    copy = ""
    if site.copy_bytes is not None or site.copy_kind:
        what = [
            f"{site.copy_bytes:,} B" if site.copy_bytes is not None else "",
            _DIRECTION.get(site.copy_kind or "", ""),
        ]
        copy = f" (a {' '.join(w for w in what if w)} copy)"
    return f" in {site.call}{copy}" + (f" at {' in '.join(dict.fromkeys(where))}" if where else "")
