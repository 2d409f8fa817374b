"""The answer first: what bounds each step, by how much, and what fixing it would buy, on any trace.

The write-ups' method, run on a step's ledger (probe.analysis.ledger.build): measure, predict from the two sides of the
step, name the side that binds, and predict what the next change buys. This module holds the verdict and its words.

**The two sides of a step.** *Host work* is the host window less the time it was blocked on the device
(`StepLedger.host_work_ns` = wall - sync wait): what the host itself spent issuing the step. *GPU work* is the step's
GPU busy time (probe.analysis.ledger.gpu). The CPU runs ahead of the GPU, so a loop of such steps takes at least
the larger of the two (the write-ups' "step time is the larger of the two"); the *measured step* is max(host window,
GPU busy):
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

The figures (`Evidence`) and the thresholds are probe.analysis.diagnosis.evidence; what fixing the step buys is
probe.analysis.diagnosis.what_if.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from probe.analysis.diagnosis.evidence import (
    CLOSE,
    EXTERNAL_SHARE,
    Bound,
    Context,
    Evidence,
    evidence,
    largest_host_part,
    ms,
    pct,
    side_of,
    site_text,
)
from probe.analysis.diagnosis.what_if import WhatIf, what_if
from probe.analysis.ledger.types import StepLedger, TraceAnalysis, steady


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


def diagnose(s: StepLedger, on_gpu: bool, context: Context | None = None) -> Diagnosis:
    """The verdict on one step, its evidence in words, and what to fix first."""
    context = context or Context()
    e = evidence(s)
    caveats = (context.contended,) if context.contended else ()
    if not on_gpu:
        bound: Bound = "cpu_only"
        then = None
    elif e.wall_ns and e.external_wait_ns >= EXTERNAL_SHARE * e.wall_ns:
        bound, then = "external", side_of(e.host_work_ns, e.gpu_busy_ns)
    else:
        bound, then = side_of(e.host_work_ns, e.gpu_busy_ns), None
    side = then or bound
    host_by = largest_host_part(e) if side in ("host", "cpu_only") else None
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
    text = ", ".join(f"{name} {ms(ns)}" for name, ns in sorted(parts, key=lambda p: -p[1]) if ns)
    top = []
    if s.top_frames and e.python_ns:
        top.append(f"top frame {s.top_frames[0].frame} {ms(s.top_frames[0].self_ns)}")
    if s.top_ops and e.dispatch_ns:
        top.append(f"top op {s.top_ops[0].name} {ms(s.top_ops[0].self_ns)}")
    return text + (f" ({'; '.join(top)})" if top else "")


_BOUND_WORD = {"host": "host-bound", "gpu": "GPU-bound", "external": "external", "cpu_only": "CPU only"}


def _step_name(s: StepLedger) -> str:
    label = s.name if len(s.name) <= 40 else s.name[:39] + "…"
    return f"step {s.position} ({s.kind}, {label})" if s.kind not in s.name else f"step {s.position} ({label})"


def _words(s: StepLedger, e: Evidence, bound: Bound, then: Bound | None, host_by, balanced) -> tuple[str, list]:
    name = _step_name(s)
    lines = []
    host_line = (
        f"host work {ms(e.host_work_ns)} ms = {ms(e.wall_ns)} wall - {ms(e.sync_wait_ns)} sync wait: "
        + _host_parts_text(s, e, bound != "cpu_only")
    )
    if bound == "cpu_only":
        where = {"dispatch": "inside ops", "unattributed": "between ops (no event covers it)"}.get(host_by, host_by)
        headline = (
            f"{name}: CPU only (no GPU side in the trace): the host's {ms(e.wall_ns)} ms is the step, most of it "
            f"{where}."
        )
        lines.append(host_line)
        return headline, lines
    gpu_line = (
        f"GPU work {ms(e.gpu_busy_ns)} ms ({e.kernels} kernels from {e.launches} launches and {e.graph_launches} "
        f"graph launches): {pct(e.busy_of_span)} of the step read whole ({ms(e.span_ns)} ms, host start to GPU end)"
    )
    if e.gpu_idle_before_ns:
        gpu_line += f"; its first GPU op started {ms(e.gpu_idle_before_ns)} ms after the host window opened"
        if e.gpu_idle_before_ns > e.wall_ns:
            gpu_line += f" ({ms(e.gpu_idle_before_ns - e.wall_ns)} ms after it closed)"
    rest = side_of(e.host_work_ns, e.gpu_busy_ns)
    if bound == "external":
        share = e.external_wait_ns / e.wall_ns
        headline = (
            f"{name}: external, then {_BOUND_WORD[then or rest]}. The host waited {ms(e.external_wait_ns)} ms of its "
            f"{ms(e.wall_ns)} ms window ({pct(share)}){site_text(s)} while no GPU op of this trace ran: it "
            "waited on device work the trace does not hold."
        )
        wait = s.sync_sites[0].stream_wait_before_ns if s.sync_sites else None
        if wait is not None:
            lines.append(
                f"the blocking call came {ms(wait)} ms after a stream-wait-event call in this step: the stream it "
                "waited on was itself waiting on an event recorded by earlier work"
            )
        lines.append(
            f"then: host work {ms(e.host_work_ns)} ms against GPU work {ms(e.gpu_busy_ns)} ms, which ran after the "
            f"wait: {_BOUND_WORD[rest]}"
        )
    elif bound == "gpu":
        ratio = e.gpu_busy_ns / e.host_work_ns if e.host_work_ns else math.inf
        headline = (
            f"{name}: GPU-bound. The GPU works {ms(e.gpu_busy_ns)} ms for {ms(e.host_work_ns)} ms of host work "
            f"({ratio:.2f}x)" + (": balanced, within 10%." if balanced else ".")
        )
    else:
        ratio = e.host_work_ns / e.gpu_busy_ns if e.gpu_busy_ns else math.inf
        headline = (
            f"{name}: host-bound, by {host_by}. The host works {ms(e.host_work_ns)} ms for {ms(e.gpu_busy_ns)} ms "
            f"of GPU work ({ratio:.2f}x)" + (": balanced, within 10%." if balanced else ".")
        )
    lines += [host_line, gpu_line]
    if e.sync_wait_ns and bound != "external":  # the external headline names the wait and its call site
        lines.append(
            f"sync wait {ms(e.sync_wait_ns)} ms{site_text(s)}; of it {ms(e.external_wait_ns)} ms with no GPU op "
            "of the trace running"
        )
    return headline, lines


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
