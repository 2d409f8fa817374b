"""What a ledger holds: `StepLedger` (one step, exact in ns), `TraceAnalysis` (every step of a trace, and its
totals), `AnalyzeOptions` (how the trace is read), the steady steps and their summary. probe.analysis.ledger.build
makes them; the module docstring there says what each figure means.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from probe.analysis.ledger import kernels
from probe.analysis.ledger.gpu import (
    KERNEL_WAIT_NS,
)
from probe.analysis.ledger.host import (
    PURPOSE_PARTS,
    FrameTime,
    NamedTime,
    OpTime,
    SyncSite,
    ThreadTime,
    UserPart,
    parse_part,
)
from probe.analysis.ledger.kernels import KernelStat
from probe.analysis.ledger.patterns import Pattern
from probe.analysis.ledger.steps import StepTokens, compile_steps_regex, parse_steps_kinds
from probe.analysis.records.sidecar import EventCost
from probe.analysis.trace import Kind, TraceFormat
from probe.errors import ProbeError

MAX_STEPS = 200_000  # steps one analysis holds by default (max_steps)


TOP_OPS_KEPT = 20  # per step; op_counts keeps every name


TOP_KERNELS_KEPT = 10  # per step; the trace's list keeps every name


TOP_FRAMES_KEPT = 10  # per step; the trace's list keeps every name


StepKind = Literal["prefill", "decode", "mixed", "profiler_step", "step", "graph", "window"] | str  # | an engine's mode
_KIND_WORDS = {
    "mixed": "mixed (prefill and decode) step",
    "profiler_step": "ProfilerStep range",
    "step": "step",
    "graph": "graph replay",
    "window": "whole-trace window",
    "iteration": "iteration",
}


def kind_words(kind: StepKind, article: bool = False) -> str:
    """A step kind as words: "decode step", "iteration", "ProfilerStep range"; with `article`, "an iteration"."""
    words = _KIND_WORDS.get(kind, f"{kind} step")
    return f"{'an' if words[:1].lower() in 'aeiou' else 'a'} {words}" if article else words


@dataclass(frozen=True)
class AnalyzeOptions:
    """How to read a trace: which ranges are steps, the user's own parts and kernel categories, the gap under which
    GPU idle is kernel wait, and the profiler's cost per recorded event when it is known."""

    steps: Pattern | None = None  # --steps, RE2 (probe.analysis.ledger.patterns)
    parts: tuple[UserPart, ...] = ()  # --part NAME=REGEX, in priority order
    kernel_rules: tuple[tuple[str, str], ...] = ()  # --kernel-category CATEGORY=REGEX, before the built-in rules
    event_cost: EventCost | None = None  # the profiler's cost per recorded event (probe.capture.calibrate)
    kernel_wait_ns: int = KERNEL_WAIT_NS  # --kernel-wait-us
    steps_kinds: tuple[Kind, ...] | None = None  # --steps-kind: the kinds of range --steps searches; None: all

    @classmethod
    def parse(
        cls,
        steps: str | None = None,
        parts: Sequence[str] = (),
        kernel_categories: Sequence[str] = (),
        event_cost: EventCost | None = None,
        kernel_wait_us: float | None = None,
        steps_kind: str | None = None,
    ) -> AnalyzeOptions:
        """From the command line's (or the explorer's) text; a one-line ProbeError for anything malformed."""
        user = tuple(parse_part(text, _RESERVED) for text in parts)
        names = [p.name for p in user]
        if len(set(names)) < len(names):
            raise ProbeError(f"--part names must differ: {', '.join(names)}")
        costs = () if event_cost is None else (event_cost.op_ns, event_cost.range_ns)
        if not all(math.isfinite(x) and x >= 0 for x in costs):
            raise ProbeError(f"--event-cost-ns: costs must be non-negative numbers, got {', '.join(map(str, costs))}")
        if kernel_wait_us is not None and not (math.isfinite(kernel_wait_us) and 0 <= kernel_wait_us <= 1e9):
            raise ProbeError(f"--kernel-wait-us: a gap in microseconds from 0 to 1e9, got {kernel_wait_us}")
        rules = tuple(kernels.parse_category_rule(text) for text in kernel_categories)
        kernels.KernelRules.build(rules)  # checks the patterns now, before any trace is read
        wait = KERNEL_WAIT_NS if kernel_wait_us is None else round(kernel_wait_us * 1000)
        kinds = parse_steps_kinds(steps_kind) if steps_kind else None
        if kinds and steps is None:
            raise ProbeError("--steps-kind says which ranges --steps searches: give --steps REGEX with it")
        return cls(compile_steps_regex(steps), user, rules, event_cost, wait, kinds)


@dataclass(frozen=True, slots=True)  # slots: a third of a step's memory was its field dict
class StepLedger:
    """One step. Fields ending in `_ns` are exact integers (the JSON gives them as `_us`)."""

    name: str  # the range's label: "decode#3", "prefill", "ProfilerStep#6", "execute_...", or "trace"
    kind: StepKind
    index: int  # i of decode#i / ProfilerStep#i; the step's position for markers without one
    position: int  # 0-based order of the step in the trace
    pid: int
    tid: int  # the step's own thread: the host partitions and the op counts are taken there
    start_ns: int  # from the trace's first event
    wall_ns: int
    launches: int
    graph_launches: int
    runtime_calls: int
    dispatched: int  # launches + graph launches on a GPU trace; top-level ops on a CPU-only one
    kernels: int
    gpu_ops: int
    gpu_start_ns: int | None  # the step's first GPU op start, from the trace's first event; None without GPU ops
    gpu_window_ns: int
    gpu_busy_ns: int
    gpu_idle_ns: int  # = gpu_window_ns - gpu_busy_ns = idle_host_wait_ns + idle_kernel_wait_ns + idle_other_ns
    idle_host_wait_ns: int
    idle_kernel_wait_ns: int
    idle_other_ns: int
    launch_cpu_ns: int
    launch_delay_p50_ns: float | None  # from the launch call's start, kernels only (probe.analysis.ledger.gpu)
    launch_delay_p90_ns: float | None
    launch_delay_from_end_p50_ns: float | None  # HTA's: from the call's end, clipped at 0, copies included
    launch_delay_from_end_p90_ns: float | None
    short_kernels: int
    top_level_ops: int
    cpu_ops: int  # every cpu_op on the step's thread that starts in the window, nested ones included
    host_events: int  # ops, runtime calls and Python frames recorded on the step's thread in its window
    host_ranges: int  # the ranges recorded there (record_function, NVTX)
    external_wait_ns: int  # sync wait while no GPU op of the trace ran
    capturable_ns: int  # host time a CUDA graph would take over: the capture region (host.capture_region) less syncs
    capture_region: str  # what that region is on this trace
    tokens: StepTokens | None = None  # what the step's engine marker says it processed (steps.StepTokens)
    recorded_tokens: StepTokens | None = None  # what its first aten::embedding's recorded indices say (phases)
    purpose_ns: dict[str, int] = field(default_factory=dict)  # user parts, then PURPOSE; sums to wall_ns
    mechanism_ns: dict[str, int] = field(default_factory=dict)  # MECHANISM; sums to wall_ns
    data_mechanism_ns: dict[str, int] = field(default_factory=dict)  # MECHANISM of the time inside data loading
    launches_unmatched: int = 0  # launch and graph-launch calls whose GPU ops are not in the trace (captured: not)
    captured_launches: int = 0  # launch calls recorded into a graph, not run (Trace.captured): capture set-up
    graph_instantiations: int = 0  # graph instantiation calls (cudaGraphInstantiate, ...): set-up too
    unattributed_other_ns: int = 0  # of unattributed time outside data loading: another thread of the process ran
    python_other_ns: int = 0  # of Python frames' self time outside data loading: another thread of the process ran
    named_ns: int = 0  # of unattributed time outside data loading and other threads' work: inside named ranges that
    # hold no frame, op or call (the user's own code the range names: host.named_time)
    named_ranges: tuple[NamedTime, ...] = ()  # that time by range name (numbers replaced), largest first
    unprofiled_estimate_ns: float | None = None
    own_wait_ns: int = 0  # sync wait from the step's first GPU op on, less what no GPU op of the trace ran in
    peer_wait_ns: int = 0  # of own_wait, while a communication kernel ran: a wait on the other ranks (build.py)
    host_collectives_ns: int = 0  # Gloo's collectives (host.HOST_COLLECTIVE) of the step's process in its window
    op_counts: dict[str, int] = field(default_factory=dict)  # top-level op name -> calls in this step
    top_ops: tuple[OpTime, ...] = ()  # largest dispatch time first, at most TOP_OPS_KEPT
    kernel_counts: dict[str, int] = field(default_factory=dict)  # kernel name -> launches of it in this step
    kernels_by_category: dict[str, int] = field(default_factory=dict)  # category -> GPU time, ns (summed)
    # category -> the union of its GPU ops, ns; and the part of it no other category's op ran in: gpu_busy less the
    # union of the other categories' ops, what removing the category saves of gpu_busy (kernels.category_overlap)
    kernels_busy_by_category: dict[str, int] = field(default_factory=dict)
    kernels_alone_by_category: dict[str, int] = field(default_factory=dict)
    top_kernels: tuple[KernelStat, ...] = ()  # largest total first, at most TOP_KERNELS_KEPT
    top_frames: tuple[FrameTime, ...] = ()  # largest self time first, at most TOP_FRAMES_KEPT
    sync_sites: tuple[SyncSite, ...] = ()  # largest wait first
    other_threads: tuple[ThreadTime, ...] = ()  # busiest first

    @property
    def wall_us(self) -> float:
        return self.wall_ns / 1000

    @property
    def start_us(self) -> float:
        return self.start_ns / 1000

    @property
    def cache_ns(self) -> int:
        """The three cache parts of the purpose partition together (PURPOSE_PARTS' group "cache")."""
        return sum(self.purpose_ns.get(p, 0) for p in _CACHE_PARTS)

    @property
    def sync_wait_ns(self) -> int:
        return self.mechanism_ns.get("sync_wait", 0)

    @property
    def host_work_ns(self) -> int:
        """The host window less the time it was blocked on the device: what the host itself spent on the step."""
        return self.wall_ns - self.sync_wait_ns

    @property
    def gpu_end_ns(self) -> int | None:
        return None if self.gpu_start_ns is None else self.gpu_start_ns + self.gpu_window_ns

    @property
    def span_ns(self) -> int:
        """The step read whole: from the host window's start to the later of its end and the GPU window's end."""
        end = self.start_ns + self.wall_ns
        return max(end, self.gpu_end_ns if self.gpu_end_ns is not None else end) - self.start_ns

    @property
    def busy_fraction(self) -> float:
        """GPU busy over the step's GPU window: in [0, 1]; 0 for a step without GPU work."""
        return self.gpu_busy_ns / self.gpu_window_ns if self.gpu_window_ns else 0.0

    def to_json(self) -> dict:
        out = {}
        for name, key, ns in _FLAT_FIELDS:  # the plain fields, each `_ns` as `_us`
            value = getattr(self, name)
            out[key] = (None if value is None else value / 1000) if ns else value
        out["purpose_us"] = {k: v / 1000 for k, v in self.purpose_ns.items()}
        out["mechanism_us"] = {k: v / 1000 for k, v in self.mechanism_ns.items()}
        out["data_mechanism_us"] = {k: v / 1000 for k, v in self.data_mechanism_ns.items()}
        out["cache_us"] = self.cache_ns / 1000
        out["span_us"] = self.span_ns / 1000
        out["busy_fraction"] = self.busy_fraction
        out["op_counts"] = dict(self.op_counts)
        out["top_ops"] = [o.to_json() for o in self.top_ops]
        out["kernel_counts"] = dict(self.kernel_counts)
        out["kernels_by_category"] = {c: ns / 1000 for c, ns in self.kernels_by_category.items()}
        out["kernels_busy_by_category"] = {c: ns / 1000 for c, ns in self.kernels_busy_by_category.items()}
        out["kernels_alone_by_category"] = {c: ns / 1000 for c, ns in self.kernels_alone_by_category.items()}
        out["top_kernels"] = [k.to_json() for k in self.top_kernels]
        out["top_frames"] = [f.to_json() for f in self.top_frames]
        out["sync_sites"] = [s.to_json() for s in self.sync_sites]
        out["other_threads"] = [t.to_json() for t in self.other_threads]
        out["named_ranges"] = [r.to_json() for r in self.named_ranges]
        out["tokens"] = self.tokens.to_json() if self.tokens else None
        out["recorded_tokens"] = self.recorded_tokens.to_json() if self.recorded_tokens else None
        return out


_NESTED = {"purpose_ns", "mechanism_ns", "data_mechanism_ns", "op_counts", "top_ops", "kernel_counts"}
_NESTED |= {
    "kernels_by_category",
    "kernels_busy_by_category",
    "kernels_alone_by_category",
    "top_kernels",
    "top_frames",
    "sync_sites",
    "other_threads",
    "tokens",
    "recorded_tokens",
    "named_ranges",
}


def json_fields(cls: type, nested: Collection[str] = ()) -> tuple[tuple[str, str, bool], ...]:
    """A dataclass's fields as its to_json writes them, each (field name, JSON key, in ns), `nested` ones left out:
    a field ending in `_ns` becomes its `_us` key. Computed once a class, not once a record (a million steps)."""
    return tuple(
        (f.name, f.name[:-3] + "_us" if f.name.endswith("_ns") else f.name, f.name.endswith("_ns"))
        for f in dataclasses.fields(cls)
        if f.name not in nested
    )


_FLAT_FIELDS = json_fields(StepLedger, _NESTED)


_CACHE_PARTS = tuple(p.name for p in PURPOSE_PARTS if p.group == "cache")


# A user part NAME becomes a purpose key: it must not shadow a key a step already has.
_RESERVED = frozenset(
    {f.name.removesuffix("_ns") for f in dataclasses.fields(StepLedger)}
    | {"cache", "span", "busy_fraction", "purpose", "mechanism"}
)


@dataclass(frozen=True)
class Totals:
    """Whole-trace counts, by the definitions of docs/traces.md (the counts) exactly."""

    events: int  # rows of the event table (complete events)
    kernels: int
    launches: int
    graph_launches: int
    gpu_ops: int  # kernel + gpu_memcpy + gpu_memset
    gpu_busy_ns: int  # union of every GPU op's interval
    runtime_calls: int
    cpu_ops: int
    python_frames: int
    span_ns: int  # first event start to last event end
    unattributed_gpu_ops: int  # GPU ops whose launch is in no step (or could not be found)

    @property
    def gpu_busy_us(self) -> float:
        return self.gpu_busy_ns / 1000

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.endswith("_ns")}
        out["gpu_busy_us"] = self.gpu_busy_ns / 1000
        out["span_us"] = self.span_ns / 1000
        return out


@dataclass(frozen=True)
class Coverage:
    """What the steps hold of the trace: the GPU work (the union of GPU ops) joined to some step, and the steps'
    threads' busy time (the union of their frames, ops and runtime calls) inside some step; and the largest piece
    of GPU work left out, in words (None when none is)."""

    gpu_in_steps_ns: int
    gpu_busy_ns: int
    host_in_steps_ns: int
    host_busy_ns: int
    left_out: str | None = None
    left_out_ns: int = 0

    @property
    def gpu_share(self) -> float:
        return self.gpu_in_steps_ns / self.gpu_busy_ns if self.gpu_busy_ns else 1.0

    @property
    def host_share(self) -> float:
        return self.host_in_steps_ns / self.host_busy_ns if self.host_busy_ns else 1.0

    def to_json(self) -> dict:
        return {
            "gpu_in_steps_us": self.gpu_in_steps_ns / 1e3,
            "gpu_busy_us": self.gpu_busy_ns / 1e3,
            "gpu_share": self.gpu_share,
            "host_in_steps_us": self.host_in_steps_ns / 1e3,
            "host_busy_us": self.host_busy_ns / 1e3,
            "host_share": self.host_share,
            "left_out": self.left_out,
            "left_out_us": self.left_out_ns / 1e3,
        }


@dataclass(frozen=True)
class Summary:
    """Across the steps that describe steady state: the decode steps if any, else every step."""

    steps_used: Literal["decode", "all"]
    steps: int
    step_p50_us: float  # the host window (StepLedger.wall_ns), not the measured step
    step_p90_us: float
    measured_p50_us: float  # the measured step, max(host window, GPU busy) as the verdict weighs it
    launches_per_step: float  # median of StepLedger.dispatched (launches on a GPU trace, top-level ops on a CPU one)
    busy_fraction: float  # sum of GPU busy over sum of GPU windows
    cache_share: float  # sum of cache bookkeeping over sum of wall
    python_share: float  # the python mechanism over wall
    unattributed_share: float
    top_ops: tuple[OpTime, ...]  # dispatch summed over those steps, largest first

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "top_ops"}
        out["top_ops"] = [o.to_json() for o in self.top_ops]
        return out


@dataclass(frozen=True)
class TraceAnalysis:
    format: TraceFormat
    source: str
    step_rule: str  # which rule found the steps (probe.analysis.ledger.steps)
    steps: tuple[StepLedger, ...]
    totals: Totals
    summary: Summary
    on_gpu: bool  # the trace has GPU work or launches: the one definition of "a GPU trace"
    kernels: tuple[KernelStat, ...] = ()  # every GPU op name over the whole trace, largest total first
    kernel_categories: dict[str, int] = field(default_factory=dict)  # category -> ns over the whole trace
    python_frames: tuple[FrameTime, ...] = ()  # Python self time of every step by frame, largest first
    user_parts: tuple[str, ...] = ()
    event_cost: EventCost | None = None
    rank: int | None = None  # distributedInfo.rank of the trace, when it says
    warnings: tuple[str, ...] = ()
    origin_epoch_ns: int | None = None  # epoch ns of the first event (steps' start_ns count from it), when known
    origin_ns: int = 0  # the first event's time on the trace's own clock (Trace.start_ns)
    coverage: Coverage | None = None  # what the steps hold of the trace's GPU work and host time
    # A trace with no GPU side (not on_gpu) whose host says the job ran on GPUs (the GPUs its deviceProperties name,
    # its GPU runtime calls, its collectives): what says so; None otherwise (build.gpu_unrecorded)
    gpu_unrecorded: str | None = None

    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        """The steps' host windows, [start, end] on the trace's own clock (sorted by start, as the steps are)."""
        t0 = self.origin_ns
        start = np.array([t0 + s.start_ns for s in self.steps], np.int64)
        return start, start + np.array([s.wall_ns for s in self.steps], np.int64)

    @property
    def dispatch(self) -> str:
        """What `StepLedger.dispatched` counts, in words."""
        return "launches" if self.on_gpu else "top-level ops"

    def step(self, key: int | str) -> StepLedger:
        """A step by position (int) or by name ("decode#3"); KeyError if there is none."""
        for s in self.steps:
            if (isinstance(key, int) and s.position == key) or s.name == key:
                return s
        raise KeyError(key)

    def to_json(self, steps: bool = True) -> dict:
        """The analysis as JSON; without `steps`, an empty list where the steps go (a caller that writes them a
        chunk at a time: probe.commands.Rows)."""
        return {
            "format": self.format,
            "source": self.source,
            "rank": self.rank,
            "step_rule": self.step_rule,
            "on_gpu": self.on_gpu,
            "origin_epoch_ns": self.origin_epoch_ns,
            "user_parts": list(self.user_parts),
            "event_cost_ns": self.event_cost.to_json() if self.event_cost else None,
            "steps": [s.to_json() for s in self.steps] if steps else [],
            "totals": self.totals.to_json(),
            "summary": self.summary.to_json(),
            "kernels": [k.to_json() for k in self.kernels],
            "kernel_categories": {c: ns / 1000 for c, ns in self.kernel_categories.items()},
            "python_frames": [f.to_json() for f in self.python_frames],
            "warnings": list(self.warnings),
            "coverage": self.coverage.to_json() if self.coverage else None,
            "gpu_unrecorded": self.gpu_unrecorded,
        }


def steady(steps: Sequence[StepLedger]) -> list[StepLedger]:
    """The steps that describe steady state, the one rule: the decode steps if any, else every step."""
    decode = [s for s in steps if s.kind == "decode"]
    return decode or list(steps)


def summarize(steps: Sequence[StepLedger]) -> Summary:
    """Median / p90 host window, the median measured step, and shares over the steady steps."""
    used = steady(steps)
    walls = [s.wall_ns / 1000 for s in used] or [0.0]
    measured = [max(s.wall_ns, s.gpu_busy_ns) / 1000 for s in used] or [0.0]
    wall = sum(s.wall_ns for s in used)
    window = sum(s.gpu_window_ns for s in used)
    agg: dict[str, list[int]] = {}
    for s in used:
        for o in s.top_ops:
            a = agg.setdefault(o.name, [0, 0])
            a[0] += o.self_ns
            a[1] += o.calls
    top = tuple(OpTime(k, v[0], v[1]) for k, v in sorted(agg.items(), key=lambda kv: (-kv[1][0], kv[0]))[:10])

    def share(ns: int) -> float:
        return ns / wall if wall else 0.0

    return Summary(
        steps_used="decode" if any(s.kind == "decode" for s in steps) else "all",
        steps=len(used),
        step_p50_us=float(np.percentile(walls, 50)),
        step_p90_us=float(np.percentile(walls, 90)),
        measured_p50_us=float(np.percentile(measured, 50)),
        launches_per_step=float(np.median([s.dispatched for s in used])) if used else 0.0,
        busy_fraction=sum(s.gpu_busy_ns for s in used) / window if window else 0.0,
        cache_share=share(sum(s.cache_ns for s in used)),
        python_share=share(sum(s.mechanism_ns.get("python", 0) for s in used)),
        unattributed_share=share(sum(s.mechanism_ns.get("unattributed", 0) for s in used)),
        top_ops=top,
    )
