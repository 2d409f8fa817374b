"""The figures a step's verdict rests on (`Evidence`, from its ledger), the bounds it can take and the thresholds
that decide them, each named once, and what the trace says beyond one step (`Context`: its launch calls' own
cost, a roofline, contention). probe.analysis.diagnosis.verdict judges from these; probe.analysis.diagnosis.what_if
prices the changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from probe.analysis.diagnosis.conditions import StepFacts, step_facts
from probe.analysis.intervals import covered, merge
from probe.analysis.ledger.host import COMMUNICATION, DATA, DEVICE_FREE, FrameTime, OpTime, ThreadTime
from probe.analysis.ledger.types import StepLedger, TraceAnalysis, json_fields
from probe.analysis.roofline.ops import OpRoofline
from probe.analysis.trace import GPU_OP_KINDS, GPU_UNRECORDED_WHY, GRAPH_LAUNCH, LAUNCH, Kind, Trace
from probe.text import ms, pct

Bound = Literal["host", "gpu", "external", "cpu_only", "unknown", "none"]  # none: nothing ran in the step


EXTERNAL_SHARE = 0.5  # of the host window blocked on unseen device work: the verdict is `external`


CLOSE = 0.1  # host and GPU work within 10%: balanced


HOLE_SHARE = 0.5  # of the measured step: a hole (no work of the trace) that long is named in the headline


# the parts of host work the verdict names: a cold step's first-call set-up (the time inside its cold calls on its
# thread, probe.analysis.diagnosis.conditions.Cold), data loading (its ranges, ops and frames), then outside both the
# mechanism
HOST_BOUND_BY = ("setup", "data", "python", "dispatch", "launch", "other_threads", "named", "unattributed")
# in the headline: "host-bound, by data loading"
HOST_BY_WORDS = {"setup": "first-call set-up", "data": "data loading", "other_threads": "other threads' work"}
HOST_BY_WORDS |= {"named": "named ranges"}
# time no op, frame or call covers (a range holding ops covers its gaps, a label of them: not "no event")
UNCOVERED = "no op, frame or call covers"
# what a cold step's time that none covers is, as far as the trace can say (the verdict and the warm what-if)
UNCOVERED_SETUP = "the trace cannot say whether that is set-up too; a warm profile can"


@dataclass(frozen=True, slots=True)  # slots: one a step, a million in a long trace
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
    unattributed_ns: int  # no op, frame or call covers it, nor a named range: outside data loading and other threads
    launches: int
    graph_launches: int
    kernels: int
    data_ns: int = 0  # host work inside data loading (its sync wait left out); the four parts above exclude it
    communication_ns: int = 0  # of the host window, inside collectives' ranges, ops and frames
    communication_other_ns: int = 0  # the same on the busiest such other thread of the step's process (`comm_thread`)
    gpu_communication_ns: int = 0  # the step's communication kernels (their summed durations)
    launches_unmatched: int = 0  # launch calls of the step none of whose GPU ops is in the trace
    captured_launches: int = 0  # launch calls recorded into a graph, not run (StepLedger.captured_launches)
    graph_instantiations: int = 0  # graph instantiation calls in the step
    other_threads_ns: int = 0  # the step's thread ran no code of its own (no event, or a Python frame's self time)
    # while another thread of its process ran: out of unattributed and Python (`waited_on`)
    own_wait_ns: int = 0  # of the sync wait, the part on the step's own GPU work (StepLedger.own_wait_ns)
    profiler_ns: int = 0  # the profiler's own cost in the host window: recorded, and per event when the sidecar says
    profiler_recorded_ns: int = 0  # the profiler's own work it recorded, outside data loading: a host part
    # a cold step's first-call set-up: its host work inside its cold calls on its own thread (conditions.Cold), taken
    # out of the parts above that the host partition gave it to (a first launch's lazy module load: launch calls)
    setup_ns: int = 0
    # of the time no op, frame or call covers: inside named ranges that hold none (StepLedger.named_ns): the user's
    # own code the range names (`ensure_layer_N_weights`), out of unattributed
    named_ns: int = 0

    @property
    def capture_setup(self) -> bool:
        """The step is graph capture set-up, the one rule: it records launches into a graph or instantiates one.
        One-off work: what a serving step costs is not priced on it."""
        return bool(self.captured_launches or self.graph_instantiations)

    @property
    def capture_setup_text(self) -> str:
        """What makes the step graph capture set-up, in words ("" when it is not)."""
        parts = []
        if self.captured_launches:
            calls = self.launches + self.graph_launches
            parts.append(
                f"{self.captured_launches:,} of its {calls:,} launch calls were recorded into a graph, not run, "
                "each made on its thread between a stream-capture begin and end call"
            )
        if self.graph_instantiations:
            parts.append(f"it instantiates {self.graph_instantiations:,} graph(s)")
        return "; and ".join(parts)

    @property
    def unprofiled_host_ns(self) -> int:
        """Host work less the profiler's own cost: what the verdict and the what-ifs weigh."""
        return self.host_work_ns - self.profiler_ns

    # The hole: of the stretch from the host window's close to the step's first GPU op, the time in which no work of
    # the trace ran (no GPU op, no step's host window): nothing the trace holds explains it. 0 without such a stretch.
    hole_ns: int = 0

    @property
    def hole_named(self) -> bool:
        """A hole at least HOLE_SHARE of the measured step: the headline names it (the one rule)."""
        return self.hole_ns > 0 and self.hole_ns >= HOLE_SHARE * self.measured_ns

    def to_json(self) -> dict:
        out = {}
        for name, key, ns in _EVIDENCE_FIELDS:  # each `_ns` as `_us`
            value = getattr(self, name)
            out[key] = (None if value is None else value / 1e3) if ns else value
        return out

    @classmethod
    def from_json(cls, doc: dict) -> Evidence:
        """to_json's inverse (us back to whole ns)."""
        values: dict[str, Any] = {}  # each field's value as the JSON holds it
        for f in dataclasses.fields(cls):
            key = f.name[:-3] + "_us" if f.name.endswith("_ns") else f.name
            if key not in doc and f.default is not dataclasses.MISSING:
                continue  # a field added since the JSON was written: its default
            value = doc[key]
            values[f.name] = (None if value is None else round(value * 1e3)) if f.name.endswith("_ns") else value
        return cls(**values)


_EVIDENCE_FIELDS = json_fields(Evidence)


@dataclass(frozen=True)
class Context:
    """What the trace says beyond one step: the cost of one graph launch and of one launch call, the roofline's
    predicted GPU time per batch size when a model is known (`gpu_ms_at(batch)`), what each step was checked for
    (`facts`, by position: probe.analysis.diagnosis.conditions), each step's top ops beside their roof, the weights'
    traffic time on a CPU with a model and a measured bandwidth, and the threads the trace ran on against the cores."""

    graph_launch_ns: float | None = None  # the trace's median graph-launch call
    launch_call_ns: float | None = None  # the trace's median kernel launch call
    gpu_ms_at: Callable[[int], float] | None = None  # batch -> the roofline's GPU ms for the step at that batch
    contended: str | None = None  # a line saying the figures were measured under contention
    facts: Mapping[int, StepFacts] = field(default_factory=dict)  # by step position
    step_ops: Mapping[int, tuple[OpRoofline, ...]] = field(default_factory=dict)  # by step position
    weights_ns: float | None = None  # a CPU step's weight bytes over the measured bandwidth
    threads: tuple[int, int] | None = None  # (intra-op threads the trace ran on, the machine's cores)
    compiled_entry_ns: float | None = None  # a compiled forward's guard check a call, measured on the model (probe run)
    # The trace's work, merged, in ns from its first event: every GPU op (Context.of) and, once diagnose_trace adds
    # them, every step's host window. A step's hole is what of its wait for its first GPU op this does not cover.
    work: tuple[np.ndarray, np.ndarray] | None = None
    # why a trace of its format can lack its GPU side, and how to record it (torch.profiler's unless the trace says)
    gpu_unrecorded_why: str = GPU_UNRECORDED_WHY["torch_chrome"]

    def unworked_ns(self, start_ns: int, end_ns: int) -> int:
        """Of [start, end) (ns from the trace's first event), the time no work of the trace covers."""
        if end_ns <= start_ns:
            return 0
        if self.work is None:
            return end_ns - start_ns
        done = covered(*self.work, np.array([start_ns]), np.array([end_ns]))
        return int(end_ns - start_ns - done[0])

    @classmethod
    def of(
        cls,
        trace: Trace | None = None,
        gpu_ms_at=None,
        contended: str | None = None,
        analysis: TraceAnalysis | None = None,
    ) -> Context:
        """From a trace (the launch calls' own durations; with its analysis, each step's facts), a roofline, and a
        contention line."""
        graph = launch = None
        facts: dict[int, StepFacts] = {}
        work = None
        why = GPU_UNRECORDED_WHY["torch_chrome"]
        if trace is not None:
            why = GPU_UNRECORDED_WHY[trace.format]
            gpu = trace.rows(*GPU_OP_KINDS)
            work = merge(trace.ts_ns[gpu] - trace.start_ns, trace.end_ns[gpu] - trace.start_ns)
            rt = trace.rows(Kind.RUNTIME)
            graph_rows = rt[trace.launch_kind[rt] == GRAPH_LAUNCH]
            launch_rows = rt[trace.launch_kind[rt] == LAUNCH]
            graph = float(np.median(trace.dur_ns[graph_rows])) if len(graph_rows) else None
            launch = float(np.median(trace.dur_ns[launch_rows])) if len(launch_rows) else None
            if analysis is not None:
                facts = step_facts(trace, analysis)
        return cls(graph, launch, gpu_ms_at, contended, facts=facts, work=work, gpu_unrecorded_why=why)


def hole_ns(s: StepLedger, context: Context) -> int:
    """The step's hole: from its host window's close to its first GPU op, the time no work of the trace ran."""
    if s.gpu_start_ns is None:
        return 0
    return context.unworked_ns(s.start_ns + s.wall_ns, s.gpu_start_ns)


def evidence(s: StepLedger, context: Context | None = None) -> Evidence:
    """The figures of one step. Host work splits into data loading (the data ranges' time less their sync wait) and,
    outside it, Python, dispatch, launch and runtime calls, other threads' work (time no event of the step's thread
    covers, or only a Python frame's self time does, while another thread of its process runs events: the thread
    waited on it), the profiler's own recorded work, the user's code inside named ranges that hold no op, frame or
    call (`named_ns`), and unattributed time: the eight add up to it. In a cold step
    (the context's facts), the time inside its cold calls on its own thread is a ninth part, first-call set-up,
    taken out of the part each piece of it was in (`_without_setup`). The hole needs the trace (`context`): without
    it, none."""
    context = context or Context()
    d = s.data_mechanism_ns
    m = {k: v - d.get(k, 0) for k, v in s.mechanism_ns.items()}
    host_work = s.host_work_ns
    recorded = m.get("profiler", 0)  # the profiler's own work it recorded (a CUPTI buffer request), outside data
    estimated = 0.0
    if s.unprofiled_estimate_ns is not None:  # the profiler's cost per recorded event lands on the host's work
        estimated = max(s.wall_ns - s.unprofiled_estimate_ns, 0)
    profiler = int(min(estimated + s.mechanism_ns.get("profiler", 0), host_work))
    end = s.start_ns + s.wall_ns
    before = max(0, s.gpu_start_ns - s.start_ns) if s.gpu_start_ns is not None else None
    after = max(0, end - s.gpu_end_ns) if s.gpu_end_ns is not None else None
    e = Evidence(
        wall_ns=s.wall_ns,
        span_ns=s.span_ns,
        measured_ns=max(s.wall_ns, s.gpu_busy_ns),
        host_work_ns=s.host_work_ns,
        gpu_busy_ns=s.gpu_busy_ns,
        busy_of_span=min(s.gpu_busy_ns / s.span_ns, 1.0) if s.span_ns else 0.0,  # over 1: GPU ops before the host
        # window opened, clocks that disagree (probe.analysis.ledger.gpu.clock_skew)
        busy_of_wall=s.gpu_busy_ns / s.wall_ns if s.wall_ns else 0.0,
        gpu_idle_before_ns=before,
        gpu_idle_after_ns=after,
        sync_wait_ns=s.sync_wait_ns,
        external_wait_ns=s.external_wait_ns,
        launch_ns=m.get("launch", 0) + m.get("runtime", 0),
        dispatch_ns=m.get("dispatch", 0),
        python_ns=m.get("python", 0) - s.python_other_ns,
        unattributed_ns=m.get("unattributed", 0) - s.unattributed_other_ns - s.named_ns,
        named_ns=s.named_ns,
        launches=s.launches,
        graph_launches=s.graph_launches,
        kernels=s.kernels,
        hole_ns=hole_ns(s, context),
        data_ns=sum(d.values()) - d.get("sync_wait", 0),
        communication_ns=s.purpose_ns.get("communication", 0),
        communication_other_ns=t.communication_ns if (t := comm_thread(s)) is not None else 0,
        gpu_communication_ns=s.kernels_by_category.get("communication", 0),
        launches_unmatched=s.launches_unmatched,
        captured_launches=s.captured_launches,
        graph_instantiations=s.graph_instantiations,
        other_threads_ns=s.unattributed_other_ns + s.python_other_ns,
        profiler_recorded_ns=recorded,
        own_wait_ns=s.own_wait_ns,
        profiler_ns=profiler,
    )
    facts = context.facts.get(s.position)
    return _without_setup(e, facts.cold.parts_ns) if facts is not None and facts.cold is not None else e


# a cold call's time by the host partition's mechanism (conditions.Cold.parts_ns) -> the Evidence part it is in
_SETUP_FROM = {
    "data": "data_ns",
    "python": "python_ns",
    "dispatch": "dispatch_ns",
    "launch": "launch_ns",
    "runtime": "launch_ns",
    "profiler": "profiler_recorded_ns",
}


def _without_setup(e: Evidence, parts: Mapping[str, int]) -> Evidence:
    """`e` with a cold step's first-call set-up (its cold calls' time on its own thread, by mechanism) taken out of
    the parts that held it and made a part of its own: the parts still add up to host work. A part is never taken
    below zero (Python that waited on another thread is other threads' work, not Python, already)."""
    taken: dict[str, int] = {}
    for mechanism, ns in parts.items():
        field_name = _SETUP_FROM[mechanism]
        have = getattr(e, field_name) - taken.get(field_name, 0)
        taken[field_name] = taken.get(field_name, 0) + min(ns, max(have, 0))
    changed = {k: getattr(e, k) - v for k, v in taken.items()}
    return dataclasses.replace(e, setup_ns=sum(taken.values()), **changed)


def side_of(host_work: int, gpu: int) -> Bound:
    return "gpu" if gpu >= host_work else "host"


def largest_host_part(e: Evidence, setup: bool = True) -> str:
    """The part of host work the verdict names (`HOST_BOUND_BY`, the first of equals); `setup=False`: of the host
    work a warm step keeps, first-call set-up left out (what a cold step's rest is bound by)."""
    parts = {"python": e.python_ns, "dispatch": e.dispatch_ns, "launch": e.launch_ns, "unattributed": e.unattributed_ns}
    parts["data"], parts["other_threads"], parts["setup"] = e.data_ns, e.other_threads_ns, e.setup_ns
    parts["named"] = e.named_ns
    return max((p for p in HOST_BOUND_BY if setup or p != "setup"), key=lambda p: parts[p])


def gpu_side_missing(e: Evidence, why: str) -> str | None:
    """Why the step's GPU side cannot be weighed against its host work, or None when it can. None of its launch
    calls has a GPU op in the trace (kernel collection was off or failed: `why`, the trace format's reason,
    `Context.gpu_unrecorded_why`); or some have none, and were each as long as the step's recorded launches on
    average, the GPU work would reach the host's: then the verdict could flip. A GPU-bound step stays GPU-bound
    whatever is missing (its GPU work is at least what was recorded)."""
    calls = e.launches + e.graph_launches
    if not e.launches_unmatched or not calls:
        return None
    if e.launches_unmatched >= calls:
        return (
            f"none of its {calls:,} launch calls has a GPU op in the trace (kernel collection was off or failed: {why})"
        )
    per = e.gpu_busy_ns / (calls - e.launches_unmatched)
    estimate = e.gpu_busy_ns + e.launches_unmatched * per
    if e.gpu_busy_ns >= e.host_work_ns or estimate < e.host_work_ns:
        return None
    return (
        f"{e.launches_unmatched:,} of its {calls:,} launch calls ({pct(e.launches_unmatched / calls, 0)}%) have no GPU "
        f"op in the trace: at the recorded ones' {ms(per)} ms each the GPU work would be {ms(estimate)} ms, past the "
        f"host's {ms(e.host_work_ns)} ms"
    )


_DIRECTION = {"HtoD": "host to device", "DtoH": "device to host", "DtoD": "device to device", "HtoH": "host to host"}


def site_text(s: StepLedger) -> str:
    """The step's largest sync site in words: the call, the copy it waited for (size, direction, host memory), the
    op that issued it and the Python frames around it."""
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
        memory = f", {site.copy_memory} host memory" if site.copy_memory else ""
        copy = f" (a {' '.join(w for w in what if w)} copy{memory})"
    under = f" under {site.op}" if site.op and site.op != site.call else ""
    return f" in {site.call}{copy}{under}" + (f" at {' in '.join(dict.fromkeys(where))}" if where else "")


def waited_thread(s: StepLedger) -> ThreadTime | None:
    """The busiest other thread of the step's own process: the one the step's thread waited on, when it did."""
    return next((t for t in s.other_threads if t.pid == s.pid), None)


def others_text(s: StepLedger) -> str:
    """What the other thread the step waited on spent its time on, in words: its top calls by self time (a device
    free said to synchronize), and the Python frame the step's thread waited in."""
    t = waited_thread(s)
    if t is None:
        return ""
    calls = ", ".join(
        f"{o.name} {ms(o.self_ns)} ms (x{o.calls}"
        + ("; a device-memory free, which synchronizes the device)" if DEVICE_FREE.search(o.name) else ")")
        for o in t.top
    )
    waited = max(s.top_frames, key=lambda f: f.waited_ns, default=None)
    where = f"; the step's thread waited in {waited.frame}" if waited is not None and waited.waited_ns else ""
    return f"thread {t.pid}/{t.tid} was busy {ms(t.busy_ns)} ms" + (f", most in {calls}" if calls else "") + where


def own_top_frame(s: StepLedger) -> FrameTime | None:
    """The step's Python frame with the most self time of its own (less its wait on other threads), None when none
    has any: the frame a fix of Python would change."""
    frame = max(s.top_frames, key=lambda f: f.own_ns, default=None)  # the first of equals: the larger self time
    return frame if frame is not None and frame.own_ns > 0 else None


def category_share(s: StepLedger, category: str, work: str = "the GPU work") -> str:
    """A kernel category's share of the step's GPU work, in words, the one rule: "57% of the GPU work" where no op
    of another category ran beside it; else the share of the GPU's busy time it ran in and the share it ran in
    alone, which is all that it taking no time saves (`StepLedger.kernels_alone_by_category`): "running in 88% of
    the GPU's busy time, alone in 3%" for communication kernels on a stream of their own under the compute."""
    busy, alone = s.kernels_busy_by_category.get(category, 0), s.kernels_alone_by_category.get(category, 0)
    whole = s.gpu_busy_ns or 1
    if alone >= busy:
        return f"{pct(busy / whole, 0)}% of {work}"
    return f"running in {pct(busy / whole, 0)}% of the GPU's busy time, alone in {pct(alone / whole, 0)}%"


def comm_thread(s: StepLedger) -> ThreadTime | None:
    """The other thread of the step's process with the most time in collectives in the step (autograd's thread,
    where DDP issues its allreduce from gradient hooks), None when none has any."""
    threads = [t for t in s.other_threads if t.pid == s.pid and t.communication_ns]
    return max(threads, key=lambda t: t.communication_ns, default=None)


def top_op(s: StepLedger) -> OpTime | None:
    """The step's op with the most dispatch time that is not itself data loading or a collective (`DATA` and
    `COMMUNICATION`, the purpose partition's one definition each: 2021's schema records the DataLoader's
    `enumerate(DataLoader)#...__next__` as an `Operator`; a collective's host op, `record_param_comms`, lasts as long as
    the other ranks make it), None when none has any: their time is a part of its own, not dispatch."""
    return next(
        (o for o in s.top_ops if o.self_ns and DATA.search(o.name) is None and COMMUNICATION.search(o.name) is None),
        None,
    )
