"""The answer first: what bounds each step, by how much, and what fixing it would buy, on any trace.

The write-ups' method, run on a step's ledger (probe.analysis.ledger.build): measure, predict from the two sides of the
step, name the side that binds, and predict what the next change buys. One module holds every verdict and rule.

**The two sides of a step.** *Host work* is the host window less the time it was blocked on the device
(`StepLedger.host_work_ns` = wall - sync wait): what the host itself spent issuing the step. *GPU work* is the step's
GPU busy time (probe.analysis.ledger.gpu). The CPU runs ahead of the GPU, so a loop of such steps takes at least the
larger
of the two (the write-ups' "step time is the larger of the two"); the *measured step* is max(host window, GPU busy):
a loop of such steps can be no faster than the host window that issues each one, nor than the GPU work each one asks.

**`bound`**, one of four, decided in this order:

- `cpu_only`: the trace has no GPU side (no GPU op and no launch call: `TraceAnalysis.on_gpu`).
- `external`: at least `EXTERNAL_SHARE` of the host window was blocked while no GPU op of the trace ran
  (`StepLedger.external_wait_ns`): the host waited on device work the trace does not hold, such as a stream
  waiting on an event recorded by earlier work. Nothing inside the trace explains that time, so it is named first;
  `then` gives the bound of the rest of the step, with that wait removed.
- `gpu`: GPU work >= host work: the GPU is busy for at least as long as the host works, so the host waits on it
  (at a sync, or by running ahead until the GPU's queue is full), or its work runs past the host window.
- `host`: host work > GPU work: the GPU waits for work the host has not issued. `host_bound_by` names the largest
  part of host work by mechanism (probe.analysis.ledger.host): `python`, `dispatch`, `launch` (launch and other runtime
  calls), or `unattributed` (no event covers it: Python between ops when the trace has no stacks).

The busy share is taken over the step read whole (`StepLedger.span_ns`: host start to the later of the host end and
the GPU end), not only over the GPU window: a fully busy GPU window that opens 218 ms into a 382 ms step left the
GPU idle for the first 218 ms, and the step is host-bound.

Thresholds, each named once:

- `EXTERNAL_SHARE = 0.5`: a verdict rests on the majority of the host window; a wait on unseen work shorter than
  half of it is reported in the evidence, but the step is judged by its own two sides.
- `CLOSE = 0.1`: when host and GPU work are within 10% of each other the verdict still names the larger, and says
  that the two are balanced: shrinking one alone buys at most the difference.

**`what_if`**: the changes the write-ups reason about, each with its predicted step, the saving, the arithmetic and
the assumption it rests on, ranked by saving ("what to fix first"). Every prediction is max(host work after the
change, GPU work after the change), the same model as the verdict:

- capture the forward in a CUDA graph: the host time inside the capture region (`StepLedger.capturable_ns`: probe's
  forward range, else the model's nn.Module frames, else every op and runtime call) vanishes, one graph launch
  remains (the trace's own graph-launch call when it has one, else its median launch call); Python outside the
  region stays; kernels keep their durations.
- remove the sync: the host stops waiting and runs ahead; the step becomes max(host work, GPU work).
- batch B sequences (decode steps): host work per forward stays; GPU work grows with B. Without a model the GPU work
  is taken to grow linearly (every byte read again for each sequence: the pessimistic bound); with a roofline the
  measured GPU work is scaled by the roofline's predicted time at B over B = 1. B is the largest batch before the
  GPU binds, at most `MAX_BATCH`. The saving is per token: the step's time over B.
- fix the top Python frame or op (host-bound steps): host work loses that frame's or op's self time.
- kernels at the roofline (GPU-bound steps with a model): GPU work becomes the roofline's predicted GPU time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from probe.analysis.ledger.build import StepLedger, TraceAnalysis, steady
from probe.analysis.trace import GRAPH_LAUNCH_NAMES, LAUNCH_NAMES, Kind, Trace, api_base_name

Bound = Literal["host", "gpu", "external", "cpu_only"]
EXTERNAL_SHARE = 0.5  # of the host window blocked on unseen device work: the verdict is `external`
CLOSE = 0.1  # host and GPU work within 10%: balanced
MAX_BATCH = 256  # the largest batch a what-if proposes
HOST_BOUND_BY = ("python", "dispatch", "launch", "unattributed")  # mechanism parts of host work, in the verdict


@dataclass(frozen=True)
class WhatIf:
    """One change and what it would buy. Times in ms; `saving_ms` is per token for a batch (its step over B)."""

    change: str
    predicted_step_ms: float
    saving_ms: float
    saving_pct: float
    arithmetic: str
    assumption: str

    def to_json(self) -> dict:
        return {
            "change": self.change,
            "predicted_step_ms": self.predicted_step_ms,
            "saving_ms": self.saving_ms,
            "saving_pct": self.saving_pct,
            "arithmetic": self.arithmetic,
            "assumption": self.assumption,
        }


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
class Diagnosis:
    """One step's verdict, the figures behind it, and what to fix first."""

    step: str
    kind: str
    bound: Bound
    then: Bound | None  # for `external`: the bound of the rest of the step, the unseen wait removed
    host_bound_by: str | None  # for `host`: the largest mechanism of host work
    balanced: bool  # host and GPU work within CLOSE of each other
    headline: str  # the answer in one sentence
    lines: tuple[str, ...]  # its evidence, each figure with its arithmetic
    evidence: Evidence
    what_if: tuple[WhatIf, ...]  # largest saving first
    caveats: tuple[str, ...] = ()  # what the figures cannot be trusted for (contention), said first

    def to_json(self) -> dict:
        return {
            "step": self.step,
            "kind": self.kind,
            "bound": self.bound,
            "then": self.then,
            "host_bound_by": self.host_bound_by,
            "balanced": self.balanced,
            "headline": self.headline,
            "lines": list(self.lines),
            "caveats": list(self.caveats),
            "evidence": self.evidence.to_json(),
            "what_if": [w.to_json() for w in self.what_if],
        }

    @classmethod
    def from_json(cls, doc: dict) -> Diagnosis:
        """to_json's inverse, for report.json; KeyError or TypeError when malformed."""
        return cls(
            step=str(doc["step"]),
            kind=str(doc["kind"]),
            bound=doc["bound"],
            then=doc["then"],
            host_bound_by=doc["host_bound_by"],
            balanced=bool(doc["balanced"]),
            headline=str(doc["headline"]),
            lines=tuple(doc["lines"]),
            evidence=Evidence.from_json(doc["evidence"]),
            what_if=tuple(WhatIf(**w) for w in doc["what_if"]),
            caveats=tuple(doc.get("caveats", ())),
        )


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


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _pct(x: float) -> str:
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


def _side(host_work: int, gpu: int) -> Bound:
    return "gpu" if gpu >= host_work else "host"


def _host_bound_by(e: Evidence) -> str:
    parts = {"python": e.python_ns, "dispatch": e.dispatch_ns, "launch": e.launch_ns, "unattributed": e.unattributed_ns}
    return max(HOST_BOUND_BY, key=lambda p: parts[p])


_DIRECTION = {"HtoD": "host to device", "DtoH": "device to host", "DtoD": "device to device", "HtoH": "host to host"}


def _site_text(s: StepLedger) -> str:
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


def diagnose(s: StepLedger, on_gpu: bool, context: Context | None = None) -> Diagnosis:
    """The verdict on one step, its evidence in words, and what to fix first."""
    context = context or Context()
    e = evidence(s)
    caveats = (context.contended,) if context.contended else ()
    if not on_gpu:
        bound: Bound = "cpu_only"
        then = None
    elif e.wall_ns and e.external_wait_ns >= EXTERNAL_SHARE * e.wall_ns:
        bound, then = "external", _side(e.host_work_ns, e.gpu_busy_ns)
    else:
        bound, then = _side(e.host_work_ns, e.gpu_busy_ns), None
    side = then or bound
    host_by = _host_bound_by(e) if side in ("host", "cpu_only") else None
    larger, smaller = max(e.host_work_ns, e.gpu_busy_ns), min(e.host_work_ns, e.gpu_busy_ns)
    balanced = on_gpu and larger > 0 and (larger - smaller) <= CLOSE * larger
    headline, lines = _words(s, e, bound, then, host_by, balanced)
    return Diagnosis(
        step=s.name,
        kind=s.kind,
        bound=bound,
        then=then,
        host_bound_by=host_by,
        balanced=balanced,
        headline=headline,
        lines=tuple(lines),
        evidence=e,
        what_if=tuple(what_if(s, e, on_gpu, context)),
        caveats=caveats,
    )


def _host_parts_text(s: StepLedger, e: Evidence, on_gpu: bool = True) -> str:
    parts = [
        ("Python", e.python_ns),
        ("op dispatch" if on_gpu else "inside ops (a CPU computes there)", e.dispatch_ns),
        ("launch and runtime calls", e.launch_ns),
        ("unattributed", e.unattributed_ns),
    ]
    text = ", ".join(f"{name} {_ms(ns)}" for name, ns in sorted(parts, key=lambda p: -p[1]) if ns)
    top = []
    if s.top_frames and e.python_ns:
        top.append(f"top frame {s.top_frames[0].frame} {_ms(s.top_frames[0].self_ns)}")
    if s.top_ops and e.dispatch_ns:
        top.append(f"top op {s.top_ops[0].name} {_ms(s.top_ops[0].self_ns)}")
    return text + (f" ({'; '.join(top)})" if top else "")


_BOUND_WORD = {"host": "host-bound", "gpu": "GPU-bound", "external": "external", "cpu_only": "CPU only"}


def _step_name(s: StepLedger) -> str:
    label = s.name if len(s.name) <= 40 else s.name[:39] + "…"
    return f"step {s.position} ({s.kind}, {label})" if s.kind not in s.name else f"step {s.position} ({label})"


def _words(s: StepLedger, e: Evidence, bound: Bound, then: Bound | None, host_by, balanced) -> tuple[str, list]:
    name = _step_name(s)
    lines = []
    host_line = (
        f"host work {_ms(e.host_work_ns)} ms = {_ms(e.wall_ns)} wall - {_ms(e.sync_wait_ns)} sync wait: "
        + _host_parts_text(s, e, bound != "cpu_only")
    )
    if bound == "cpu_only":
        where = {"dispatch": "inside ops", "unattributed": "between ops (no event covers it)"}.get(host_by, host_by)
        headline = (
            f"{name}: CPU only (no GPU side in the trace): the host's {_ms(e.wall_ns)} ms is the step, most of it "
            f"{where}."
        )
        lines.append(host_line)
        return headline, lines
    gpu_line = (
        f"GPU work {_ms(e.gpu_busy_ns)} ms ({e.kernels} kernels from {e.launches} launches and {e.graph_launches} "
        f"graph launches): {_pct(e.busy_of_span)} of the step read whole ({_ms(e.span_ns)} ms, host start to GPU end)"
    )
    if e.gpu_idle_before_ns:
        gpu_line += f"; its first GPU op started {_ms(e.gpu_idle_before_ns)} ms after the host window opened"
        if e.gpu_idle_before_ns > e.wall_ns:
            gpu_line += f" ({_ms(e.gpu_idle_before_ns - e.wall_ns)} ms after it closed)"
    rest = _side(e.host_work_ns, e.gpu_busy_ns)
    if bound == "external":
        share = e.external_wait_ns / e.wall_ns
        headline = (
            f"{name}: external, then {_BOUND_WORD[then or rest]}. The host waited {_ms(e.external_wait_ns)} ms of its "
            f"{_ms(e.wall_ns)} ms window ({_pct(share)}){_site_text(s)} while no GPU op of this trace ran: it "
            "waited on device work the trace does not hold."
        )
        wait = s.sync_sites[0].stream_wait_before_ns if s.sync_sites else None
        if wait is not None:
            lines.append(
                f"the blocking call came {_ms(wait)} ms after a stream-wait-event call in this step: the stream it "
                "waited on was itself waiting on an event recorded by earlier work"
            )
        lines.append(
            f"then: host work {_ms(e.host_work_ns)} ms against GPU work {_ms(e.gpu_busy_ns)} ms, which ran after the "
            f"wait: {_BOUND_WORD[rest]}"
        )
    elif bound == "gpu":
        ratio = e.gpu_busy_ns / e.host_work_ns if e.host_work_ns else math.inf
        headline = (
            f"{name}: GPU-bound. The GPU works {_ms(e.gpu_busy_ns)} ms for {_ms(e.host_work_ns)} ms of host work "
            f"({ratio:.2f}x)" + (": balanced, within 10%." if balanced else ".")
        )
    else:
        ratio = e.host_work_ns / e.gpu_busy_ns if e.gpu_busy_ns else math.inf
        headline = (
            f"{name}: host-bound, by {host_by}. The host works {_ms(e.host_work_ns)} ms for {_ms(e.gpu_busy_ns)} ms "
            f"of GPU work ({ratio:.2f}x)" + (": balanced, within 10%." if balanced else ".")
        )
    lines += [host_line, gpu_line]
    if e.sync_wait_ns and bound != "external":  # the external headline names the wait and its call site
        lines.append(
            f"sync wait {_ms(e.sync_wait_ns)} ms{_site_text(s)}; of it {_ms(e.external_wait_ns)} ms with no GPU op "
            "of the trace running"
        )
    return headline, lines


def what_if(s: StepLedger, e: Evidence, on_gpu: bool, context: Context) -> list[WhatIf]:
    """The changes the write-ups reason about, with predicted savings, largest first.

    A change moves the binding term max(host work, GPU work); the measured step moves by as much: what the model
    does not explain of the measured step (a lead-in before the first GPU op, a sync's wait) stays. Removing the
    sync is the one change that removes that remainder instead: the host runs ahead, and the step becomes the model."""
    out: list[WhatIf] = []
    measured = e.measured_ns
    gpu = e.gpu_busy_ns
    model = max(e.host_work_ns, gpu)
    now = f"max(host {_ms(e.host_work_ns)}, GPU {_ms(gpu)}) = {_ms(model)}"

    def add(change: str, predicted: float, arithmetic: str, assumption: str, per: int = 1) -> None:
        saving = measured - predicted / per
        if saving > 0:
            out.append(WhatIf(change, predicted / 1e6, saving / 1e6, 100 * saving / measured, arithmetic, assumption))

    def moved(change: str, host: float, gpu_after: float, terms: str, assumption: str, per: int = 1) -> None:
        after = max(host, gpu_after)
        predicted = measured - (model - after)
        per_token = f"; {_ms(predicted / per)} ms a token" if per > 1 else ""
        add(
            change,
            predicted,
            f"{now} -> {terms} = {_ms(after)}: {_ms(measured)} measured - {_ms(model - after)} = "
            f"{_ms(predicted)} ms{per_token}",
            assumption,
            per,
        )

    if on_gpu and not s.graph_launches and s.launches and s.capturable_ns:
        replay = context.graph_launch_ns or context.launch_call_ns or 0.0
        host = e.host_work_ns - s.capturable_ns + replay
        moved(
            "capture the forward in a CUDA graph",
            host,
            gpu,
            f"max(host {_ms(e.host_work_ns)} - {_ms(s.capturable_ns)} captured + {_ms(replay)} graph launch, "
            f"GPU {_ms(gpu)})",
            f"the capture region ({s.capture_region}) holds every launch; its Python, dispatch and launch calls "
            "vanish; what lies outside it stays; kernels keep their durations",
        )
    if on_gpu and e.sync_wait_ns and measured > model:
        unseen = e.external_wait_ns >= EXTERNAL_SHARE * e.wall_ns
        add(
            "overlap the wait on unseen device work" if unseen else "remove the sync" + _site_text(s),
            model,
            f"{_ms(measured)} measured -> {now} ms",
            "the work waited for overlaps this step's own"
            if unseen
            else "the host issues the next step while the GPU runs this one: nothing it fetched is needed first",
        )
    if on_gpu and s.kind == "decode" and gpu and e.host_work_ns > gpu:
        b, gpu_b, how = _free_batch(e, context)
        if b > 1:
            moved(
                f"batch {b} sequences",
                e.host_work_ns,
                gpu_b,
                f"max(host {_ms(e.host_work_ns)}, GPU {_ms(gpu_b)} at B={b})",
                f"host work per forward stays; GPU work grows {how}",
                per=b,
            )
    if (not on_gpu or e.host_work_ns > gpu) and e.host_work_ns:
        if s.top_frames and s.top_frames[0].self_ns:
            f = s.top_frames[0]
            moved(
                f"fix the top Python frame, {f.frame}",
                e.host_work_ns - f.self_ns,
                gpu,
                f"max(host {_ms(e.host_work_ns)} - {_ms(f.self_ns)}, GPU {_ms(gpu)})",
                "the frame's own time (its self time, calls inside it excluded) goes to zero",
            )
        if s.top_ops and s.top_ops[0].self_ns:
            o = s.top_ops[0]
            moved(
                f"fix the top op, {o.name} (x{o.calls})",
                e.host_work_ns - o.self_ns,
                gpu,
                f"max(host {_ms(e.host_work_ns)} - {_ms(o.self_ns)}, GPU {_ms(gpu)})",
                "the op's dispatch time (its self time) goes to zero",
            )
    if on_gpu and gpu >= e.host_work_ns and context.gpu_ms_at is not None:
        roof = context.gpu_ms_at(1) * 1e6
        if roof < gpu:
            moved(
                "kernels at the roofline",
                e.host_work_ns,
                roof,
                f"max(host {_ms(e.host_work_ns)}, roofline GPU {_ms(roof)})",
                "every kernel moves its bytes at the device's peak bandwidth or computes at its peak FLOP/s",
            )
    return sorted(out, key=lambda w: (-w.saving_ms, w.change))


def batch_gpu_ns(e: Evidence, b: int, context: Context) -> float:
    """The step's GPU work with b times its sequences: scaled by the roofline's time at b over 1 when a model is
    known, else linearly (every byte read again for each sequence: the pessimistic bound)."""
    if context.gpu_ms_at is not None:
        return e.gpu_busy_ns * context.gpu_ms_at(b) / context.gpu_ms_at(1)
    return e.gpu_busy_ns * b


def predict_batch(e: Evidence, b: int, context: Context) -> float:
    """The measured step with b times its sequences, in ns: host work per forward stays, GPU work grows
    (batch_gpu_ns); the binding term moves and the measured step with it (what_if's model)."""
    model = max(e.host_work_ns, e.gpu_busy_ns)
    return e.measured_ns - (model - max(e.host_work_ns, batch_gpu_ns(e, b, context)))


def _free_batch(e: Evidence, context: Context) -> tuple[int, float, str]:
    """The largest batch before the GPU binds, its GPU work, and how that was scaled."""
    how = (
        "as the roofline's predicted step time at B over B = 1"
        if context.gpu_ms_at is not None
        else "linearly with B (every byte read again per sequence: the pessimistic bound)"
    )
    b = 1
    while b < MAX_BATCH and batch_gpu_ns(e, b + 1, context) <= e.host_work_ns:
        b += 1
    return b, batch_gpu_ns(e, b, context), how


@dataclass(frozen=True)
class TraceDiagnosis:
    """Every step's diagnosis, and the summary: the median steady step, and the median step of each kind."""

    steps: tuple[Diagnosis, ...]
    median: Diagnosis | None
    by_kind: dict[str, Diagnosis]

    def to_json(self) -> dict:
        return {
            "median": self.median.to_json() if self.median else None,
            "by_kind": {k: d.to_json() for k, d in self.by_kind.items()},
        }


def _median_step(steps: Sequence[StepLedger]) -> StepLedger | None:
    """The real step whose measured time is the median (the lower of the two middle ones): a step that happened,
    not a synthesis of medians."""
    if not steps:
        return None
    ordered = sorted(steps, key=lambda s: (max(s.wall_ns, s.gpu_busy_ns), s.position))
    return ordered[(len(ordered) - 1) // 2]


def diagnose_trace(
    analysis: TraceAnalysis, context: Context | None = None, gpu_ms_at: dict[int, Callable] | None = None
) -> TraceDiagnosis:
    """Every step's diagnosis; `gpu_ms_at` gives a step's roofline (by position) for its batch and roofline
    what-ifs."""
    context = context or Context()
    gpu_ms_at = gpu_ms_at or {}
    diagnoses = {
        s.position: diagnose(
            s, analysis.on_gpu, replace(context, gpu_ms_at=gpu_ms_at.get(s.position, context.gpu_ms_at))
        )
        for s in analysis.steps
    }
    median = _median_step(steady(analysis.steps))
    kinds: dict[str, list[StepLedger]] = {}
    for s in analysis.steps:
        kinds.setdefault(s.kind, []).append(s)
    by_kind = {k: diagnoses[m.position] for k, v in kinds.items() if (m := _median_step(v)) is not None}
    return TraceDiagnosis(
        tuple(diagnoses[s.position] for s in analysis.steps),
        diagnoses[median.position] if median else None,
        by_kind,
    )
