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

- `cpu_only`: the trace has no GPU side (no GPU op and no launch call: `TraceAnalysis.on_gpu`), and nothing in it
  says the job ran on GPUs. The host's window is the step; where it was blocked for longer than it worked (a Gloo
  rank waiting in a collective for the others: its sync wait), the headline names that wait and its site first,
  then what the host work was mostly. Where something says the job ran on GPUs (the GPUs its deviceProperties
  name, GPU runtime calls, collectives: `TraceAnalysis.gpu_unrecorded`) the bound is `unknown`: the GPU side was
  not recorded, and no change is priced.
- `external`: at least `EXTERNAL_SHARE` of the host window was blocked while no GPU op of the trace ran
  (`StepLedger.external_wait_ns`): the host waited on device work the trace does not hold, such as a stream
  waiting on an event recorded by earlier work. Nothing inside the trace explains that time, so it is named first;
  `then` gives the bound of the rest of the step, with that wait removed.
- `gpu`: GPU work >= host work: the GPU is busy for at least as long as the host works, so the host waits on it
  (at a sync, or by running ahead until the GPU's queue is full), or its work runs past the host window.
- `host`: host work > GPU work: the GPU waits for work the host has not issued. `host_bound_by` names the largest
  part of host work by mechanism (probe.analysis.ledger.host): `python`, `dispatch`, `launch` (launch and other runtime
  calls), `named` (inside named ranges that hold no op, frame or call: the user's own code the range names, which
  the headline names by its top range, `ensure_layer_N_weights`), or `unattributed` (no op, frame or call covers it,
  nor such a range: Python between ops when the trace has no stacks); or `data` (data loading), `other_threads`, or
  `setup`.

**A cold step** (probe.analysis.diagnosis.conditions: first calls many times their later ones cover a tenth of it)
has one more part of host work, first-call set-up: the time inside its cold calls on its own thread, taken out of
the part the mechanism gave it (a first launch that loads a module lazily is launch time by mechanism; it is not
what a warm step pays for launches). Where set-up is the largest part, `host_bound_by` is `setup`, and the headline
names the cold call and the rest without it: host work less set-up against GPU work, its bound and, host-bound, the
largest part left; where that is time no op, frame or call covers, the trace cannot tell it from set-up, and says
so.

The busy share is taken over the step read whole (`StepLedger.span_ns`: host start to the later of the host end and
the GPU end), not only over the GPU window: a fully busy GPU window that opens 218 ms into a 382 ms step left the
GPU idle for the first 218 ms, and the step is host-bound.

**The hole.** A step read whole can hold a stretch that is neither side's: from the host window's close to the
step's first GPU op, time in which no work of the trace ran (no GPU op, no step's host window; `Evidence.hole_ns`).
Nothing in the trace explains it, so where it is at least `HOLE_SHARE` of the measured step the headline names it,
whatever the bound (`bound_words` too, the verdict in a few words).

Thresholds, each named once:

- `EXTERNAL_SHARE = 0.5`: a verdict rests on the majority of the host window; a wait on unseen work shorter than
  half of it is reported in the evidence, but the step is judged by its own two sides.
- `CLOSE = 0.1`: when host and GPU work are within 10% of each other the verdict still names the larger, and says
  that the two are balanced: shrinking one alone buys at most the difference.

The figures (`Evidence`) and the thresholds are probe.analysis.diagnosis.evidence; what fixing the step buys is
probe.analysis.diagnosis.what_if.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from probe.analysis.diagnosis.conditions import Cold
from probe.analysis.diagnosis.evidence import (
    CLOSE,
    EXTERNAL_SHARE,
    HOST_BY_WORDS,
    UNCOVERED,
    UNCOVERED_SETUP,
    Bound,
    Context,
    Evidence,
    category_share,
    comm_thread,
    evidence,
    gpu_side_missing,
    largest_host_part,
    others_text,
    own_top_frame,
    side_of,
    site_text,
    top_op,
)
from probe.analysis.diagnosis.what_if import WhatIf, what_if
from probe.analysis.intervals import merge
from probe.analysis.ledger.kernels import COMMUNICATION
from probe.analysis.ledger.types import StepLedger, TraceAnalysis, steady
from probe.text import ms, pct


@dataclass(frozen=True, slots=True)  # slots: one a step
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
    withheld: tuple[str, ...] = ()  # the changes not offered, each with the condition that failed on this trace

    def figures(self) -> dict:
        """The verdict and its figures without its words: what each step of `--json` holds (the step record names
        the step). The words are the median steady step's and each kind's median step's (`TraceDiagnosis.to_json`):
        a million steps each with its sentences made a 290 MB document."""
        return {
            "bound": self.bound,
            "then": self.then,
            "host_bound_by": self.host_bound_by,
            "balanced": self.balanced,
            "evidence": self.evidence.to_json(),
            "what_if": [w.figures() for w in self.what_if],
        }

    def to_json(self) -> dict:
        return (
            {"step": self.step, "kind": self.kind}
            | self.figures()
            | {
                "headline": self.headline,
                "lines": list(self.lines),
                "caveats": list(self.caveats),
                "what_if": [w.to_json() for w in self.what_if],
                "withheld": list(self.withheld),
            }
        )

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
            what_if=tuple(WhatIf.from_json(w) for w in doc["what_if"]),
            caveats=tuple(doc.get("caveats", ())),
            withheld=tuple(doc.get("withheld", ())),
        )


def diagnose(s: StepLedger, on_gpu: bool, context: Context | None = None, unrecorded: str | None = None) -> Diagnosis:
    """The verdict on one step, its evidence in words, and what to fix first. `unrecorded`: on a trace without GPU
    side, what says the job ran on GPUs all the same (`TraceAnalysis.gpu_unrecorded`): the bound is unknown, not
    CPU only, and no change is priced (a CPU's what-ifs read op time as compute)."""
    context = context or Context()
    e = evidence(s, context)
    facts = context.facts.get(s.position)
    several = facts.iterations_text() if facts else None
    caveats = tuple(c for c in (context.contended, several) if c)
    host = e.unprofiled_host_ns  # the profiler's own cost is not the step's
    missing = (
        gpu_side_missing(e, context.gpu_unrecorded_why)
        if on_gpu
        else unrecorded and f"GPU side not recorded: {unrecorded}"
    )
    bound: Bound
    then: Bound | None
    if not host and not e.gpu_busy_ns:
        bound, then = "none", None
    elif not on_gpu:
        bound, then = ("unknown" if missing else "cpu_only"), None
    elif missing:
        bound, then = "unknown", None
    elif e.wall_ns and e.external_wait_ns >= EXTERNAL_SHARE * e.wall_ns:
        bound, then = "external", side_of(host, e.gpu_busy_ns)
    else:
        bound, then = side_of(host, e.gpu_busy_ns), None
    side = then or bound
    host_by = largest_host_part(e) if side in ("host", "cpu_only") else None
    larger, smaller = max(host, e.gpu_busy_ns), min(host, e.gpu_busy_ns)
    balanced = on_gpu and bound != "unknown" and larger > 0 and (larger - smaller) <= CLOSE * larger
    cold = facts.cold if facts and host_by == "setup" else None  # the headline names it where it binds
    headline, lines = _verdict_lines(s, e, bound, then, host_by, balanced, missing, cold)
    offered, withheld = what_if(s, e, on_gpu, context)  # an unknown bound: every GPU what-if needs the GPU side
    if bound == "none":
        offered, withheld = [], [NOTHING_RAN + ": nothing to change"]
    elif not on_gpu and missing:
        offered, withheld = [], [f"every change: not offered: each needs the GPU side recorded, and {unrecorded}"]
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
        what_if=tuple(offered),
        caveats=caveats,
        withheld=tuple(withheld),
    )


def _host_parts_text(s: StepLedger, e: Evidence, on_gpu: bool = True) -> str:
    parts = [
        ("first-call set-up", e.setup_ns),
        ("data loading", e.data_ns),
        ("Python", e.python_ns),
        ("op dispatch" if on_gpu else "inside ops (a CPU computes there)", e.dispatch_ns),
        ("launch and runtime calls" if on_gpu else "runtime and OS calls", e.launch_ns),
        ("other threads' work", e.other_threads_ns),
        ("profiler overhead", e.profiler_recorded_ns),
        ("inside named ranges", e.named_ns),
        ("unattributed", e.unattributed_ns),
    ]
    text = ", ".join(f"{name} {ms(ns)}" for name, ns in sorted(parts, key=lambda p: -p[1]) if ns)
    top = []
    if e.named_ns and s.named_ranges:
        top.append(f"top range {s.named_ranges[0].name} {ms(s.named_ranges[0].ns)}")
    frame = own_top_frame(s)
    if frame is not None and e.python_ns:
        top.append(f"top frame {frame.frame} {ms(frame.own_ns)}")
    if (op := top_op(s)) is not None and e.dispatch_ns:
        top.append(f"top op {op.name} {ms(op.self_ns)}")
    return text + (f" ({'; '.join(top)})" if top else "")


_BOUND_WORD = {"host": "host-bound", "gpu": "GPU-bound", "external": "external", "cpu_only": "CPU only"}
_BOUND_WORD |= {"unknown": "unknown", "none": "no bound"}
NOTHING_RAN = "nothing ran in this step"
_CPU_WORDS = {"dispatch": "mostly inside ops", "unattributed": "mostly between ops", "python": "mostly Python"}
_CPU_WORDS |= {"launch": "mostly in runtime calls"}  # a CPU trace's host work: its ops compute, so not "dispatch"
_CPU_WORDS |= {"named": "mostly inside named ranges"}


def _named_text(s: StepLedger) -> str:
    """The step's named ranges with the most time, in words: "ensure_layer_N_weights 8.845 ms"."""
    return ", ".join(f"{r.name} {ms(r.ns)} ms" for r in s.named_ranges[:2])


def _by_words(s: StepLedger, host_by: str) -> str:
    """What a host-bound step is bound by, as its headline says it: named ranges by their top names."""
    if host_by == "named" and s.named_ranges:
        return f"the code inside named ranges ({_named_text(s)}; no op, frame or call recorded in them)"
    return HOST_BY_WORDS.get(host_by, host_by)


def bound_words(d: Diagnosis) -> str:
    """The verdict in a few words, as a title shows it: "external, then GPU-bound", "host-bound, by python",
    "GPU-bound, balanced", "GPU-bound, beside a 124.878 ms hole"."""
    words = _BOUND_WORD[d.bound] + (" (no GPU side recorded)" if d.bound == "unknown" else "")
    if d.then:
        words += f", then {_BOUND_WORD[d.then]}"
    if d.host_bound_by:
        cpu = d.bound == "cpu_only"
        by = HOST_BY_WORDS.get(d.host_bound_by, d.host_bound_by)
        words += f", {_CPU_WORDS.get(d.host_bound_by, by)}" if cpu else f", by {by}"
    words += ", balanced" if d.balanced else ""
    return words + (f", beside a {ms(d.evidence.hole_ns)} ms hole" if d.evidence.hole_named else "")


def _step_name(s: StepLedger) -> str:
    label = s.name if len(s.name) <= 40 else s.name[:39] + "…"
    return f"step {s.position} ({s.kind}, {label})" if s.kind not in s.name else f"step {s.position} ({label})"


def _host_ms(e: Evidence) -> str:
    """Host work as the verdict weighs it: unprofiled, with the profiled figure beside it, when the cost is known."""
    if not e.profiler_ns:
        return f"{ms(e.host_work_ns)} ms"
    return f"{ms(e.unprofiled_host_ns)} ms unprofiled ({ms(e.host_work_ns)} profiled)"


def _verdict_lines(
    s: StepLedger,
    e: Evidence,
    bound: Bound,
    then: Bound | None,
    host_by,
    balanced,
    missing: str | None = None,
    cold: Cold | None = None,
) -> tuple[str, list]:
    """The verdict's headline and its evidence lines: a step with no two sides to weigh says why and stops; the
    others weigh host work against GPU work, then name first-call set-up where it binds (`cold`), a hole and the
    sync wait."""
    name = _step_name(s)
    host_line = _host_line(s, e, bound)
    if bound == "none":
        headline = f"{name}: no bound: {NOTHING_RAN} (no host work, no GPU work in its {ms(e.wall_ns)} ms)."
        return headline, []
    if bound == "unknown" and missing:
        return _unknown_headline(name, e, missing), [host_line, *_extra_lines(s, e, bound)]
    setup = _setup_text(e, cold, bound != "cpu_only") if cold is not None else ""
    if bound == "cpu_only":
        return _cpu_only_headline(name, s, e, host_by) + setup, [host_line]
    gpu_line = _gpu_line(e)
    headline, lines = _two_sided_headline(name, s, e, bound, then, host_by, balanced)
    headline += setup
    if e.capture_setup:
        headline += f" It is graph capture set-up, one-off work: {e.capture_setup_text}."
    if e.hole_named:
        headline += _hole_text(e)
    lines += [host_line, gpu_line]
    if e.sync_wait_ns and bound != "external":  # the external headline names the wait and its call site
        lines.append(_sync_wait_line(s, e))
    return headline, lines + _extra_lines(s, e, bound)


def _host_line(s: StepLedger, e: Evidence, bound: Bound) -> str:
    """Host work's line: the window less its sync wait (and less the profiler's own cost, when known), by part."""
    host = e.unprofiled_host_ns
    profiler = f" - {ms(e.profiler_ns)} the profiler's own cost = {ms(host)} unprofiled" if e.profiler_ns else ""
    return (
        f"host work {ms(e.host_work_ns)} ms = {ms(e.wall_ns)} wall - {ms(e.sync_wait_ns)} sync wait{profiler}: "
        + _host_parts_text(s, e, bound != "cpu_only")
    )


def _unknown_headline(name: str, e: Evidence, missing: str) -> str:
    """The headline of a step whose GPU side the trace lacks: what is missing, and that nothing is weighed."""
    return (
        f"{name}: unknown. {missing[0].upper()}{missing[1:]}: the trace holds no GPU side to weigh the host's "
        f"{ms(e.host_work_ns)} ms of work against, so no bound and no what-if."
    )


_CPU_WHERE = {"dispatch": "inside ops", "unattributed": f"between ops ({UNCOVERED} it)", "launch": "in runtime calls"}


def _cpu_only_headline(name: str, s: StepLedger, e: Evidence, host_by) -> str:
    """The headline of a step on a trace with no GPU side: the host's window is the step, and where most of it went."""
    where = _CPU_WHERE.get(host_by, HOST_BY_WORDS.get(host_by, host_by))
    if host_by == "named":
        where = f"inside named ranges, with no op, frame or call in them ({_named_text(s)})"
    unprofiled = f" ({ms(e.unprofiled_host_ns)} ms unprofiled)" if e.profiler_ns else ""
    if e.sync_wait_ns > e.host_work_ns:  # blocked for most of the window: a collective's wait for the other ranks
        return (
            f"{name}: CPU only (no GPU side in the trace): the host's {ms(e.wall_ns)} ms{unprofiled} is the step, "
            f"most of it a wait: {ms(e.sync_wait_ns)} ms sync wait{site_text(s)}; its {ms(e.host_work_ns)} ms of "
            f"host work is most of it {where}."
        )
    return (
        f"{name}: CPU only (no GPU side in the trace): the host's {ms(e.wall_ns)} ms{unprofiled} is the step, "
        f"most of it {where}."
    )


def _gpu_line(e: Evidence) -> str:
    """GPU work's line: its busy time, what ran, its share of the step read whole, and how late its first op came."""
    gpu_line = (
        f"GPU work {ms(e.gpu_busy_ns)} ms ({e.kernels} kernels from {e.launches} launches and {e.graph_launches} "
        f"graph launches): {pct(e.busy_of_span, 0)}% of the step read whole ({ms(e.span_ns)} ms, host start to GPU end)"
    )
    if e.gpu_idle_before_ns:
        gpu_line += f"; its first GPU op started {ms(e.gpu_idle_before_ns)} ms after the host window opened"
        if e.gpu_idle_before_ns > e.wall_ns:
            gpu_line += f" ({ms(e.gpu_idle_before_ns - e.wall_ns)} ms after it closed)"
    return gpu_line


def _two_sided_headline(
    name: str, s: StepLedger, e: Evidence, bound: Bound, then: Bound | None, host_by, balanced
) -> tuple[str, list[str]]:
    """The headline of a step with both sides recorded (external, GPU- or host-bound), and the lines only an
    external wait adds."""
    host = e.unprofiled_host_ns
    if bound == "external":
        return _external_headline(name, s, e, then)
    close = ": balanced, within 10%." if balanced else "."
    if bound == "gpu":
        headline = (
            f"{name}: GPU-bound. The GPU works {ms(e.gpu_busy_ns)} ms for {_host_ms(e)} of host work "
            f"({_times(e.gpu_busy_ns, host, 'no host work')})" + close
        )
        return headline, []
    headline = (
        f"{name}: host-bound, by {_by_words(s, host_by)}. The host works {_host_ms(e)} "
        f"for {ms(e.gpu_busy_ns)} ms of GPU work ({_times(host, e.gpu_busy_ns, 'no GPU work')})" + close
    )
    return headline, []


def _external_headline(name: str, s: StepLedger, e: Evidence, then: Bound | None) -> tuple[str, list[str]]:
    """The headline of a step that waited on device work the trace does not hold, and its lines: the stream wait
    behind the blocking call, and the bound of the rest of the step."""
    rest = side_of(e.unprofiled_host_ns, e.gpu_busy_ns)
    share = e.external_wait_ns / e.wall_ns
    headline = (
        f"{name}: external, then {_BOUND_WORD[then or rest]}. The host waited {ms(e.external_wait_ns)} ms of its "
        f"{ms(e.wall_ns)} ms window ({pct(share, 0)}%){site_text(s)} while no GPU op of this trace ran: it "
        "waited on device work the trace does not hold."
    )
    lines = []
    wait = s.sync_sites[0].stream_wait_before_ns if s.sync_sites else None
    if wait is not None:
        lines.append(
            f"the blocking call came {ms(wait)} ms after a stream-wait-event call in this step: the stream it "
            "waited on was itself waiting on an event recorded by earlier work"
        )
    lines.append(
        f"then: host work {_host_ms(e)} against GPU work {ms(e.gpu_busy_ns)} ms, which ran after the "
        f"wait: {_BOUND_WORD[rest]}"
    )
    return headline, lines


def _setup_text(e: Evidence, cold: Cold, on_gpu: bool) -> str:
    """What the headline adds for a step bound by first-call set-up: the set-up and its largest cold call, then the
    step without it: host work less set-up against GPU work, and what bounds that (the module docstring)."""
    rest = e.unprofiled_host_ns - e.setup_ns
    said = (
        f" Of its host work, {ms(e.setup_ns)} ms is first-call set-up: {cold.text}. Without it: host work {ms(rest)} ms"
    )
    side = side_of(rest, e.gpu_busy_ns) if on_gpu else "cpu_only"
    if rest <= 0:
        return said + (f" against GPU work {ms(e.gpu_busy_ns)} ms." if on_gpu else ".")
    if side == "gpu":
        return said + f" against GPU work {ms(e.gpu_busy_ns)} ms: GPU-bound."
    part = largest_host_part(e, setup=False)
    if side == "host":
        said += f" against GPU work {ms(e.gpu_busy_ns)} ms ({_times(rest, e.gpu_busy_ns, 'no GPU work')}): host-bound"
        by = f", by {HOST_BY_WORDS.get(part, part)}"
    else:  # "between ops" without its own "(no op, frame or call covers it)": the figure below says so
        by = ", most of it between ops" if part == "unattributed" else f", most of it {_CPU_WHERE.get(part, part)}"
    if part == "unattributed":
        by += f" ({ms(e.unattributed_ns)} ms that {UNCOVERED}: {UNCOVERED_SETUP})"
    return said + by + "."


def _hole_text(e: Evidence) -> str:
    """What the headline adds for a hole it names: its size and share, and that nothing in the trace explains it."""
    return (
        f" Beside it, a hole of {ms(e.hole_ns)} ms ({pct(e.hole_ns / e.measured_ns, 0)}% of the measured step): "
        "from the host window's close to its first GPU op no work of the trace ran, so nothing the trace holds "
        f"explains it (the step read whole is {ms(e.span_ns)} ms)."
    )


def _sync_wait_line(s: StepLedger, e: Evidence) -> str:
    """The sync wait's line: its call site, and how much of it was on the step's own GPU work."""
    return (
        f"sync wait {ms(e.sync_wait_ns)} ms{site_text(s)}; of it {ms(e.own_wait_ns)} ms on the step's own GPU "
        f"work, {ms(e.external_wait_ns)} ms with no GPU op of the trace running"
    )


def _times(larger: int, smaller: int, none: str) -> str:
    """How many times the binding side's work is the other's: "4.00x", or what the other lacks when it did none."""
    return f"{larger / smaller:.2f}x" if smaller else none


def _communication_line(s: StepLedger, e: Evidence) -> str:
    """Communication's line: the host's time in collectives on the step's thread and on the other thread of its
    process that spent the most there, each against the wall, and the communication kernels against GPU work."""
    gpu = f"; {ms(e.gpu_communication_ns)} ms of communication kernels" if e.gpu_communication_ns else ""
    share = f" ({category_share(s, COMMUNICATION, 'GPU work')})" if gpu and e.gpu_busy_ns else ""

    def of_wall(ns: int) -> str:
        return f"{pct(ns / e.wall_ns, 0)}%" if e.wall_ns else "0%"

    own = f"{ms(e.communication_ns)} ms of the host window in collectives"
    if (t := comm_thread(s)) is not None:
        own = (
            f"{ms(t.communication_ns)} ms of the host window in collectives on thread {t.pid}/{t.tid} "
            f"({of_wall(t.communication_ns)} of the wall), {ms(e.communication_ns)} ms on the step's own thread"
        )
    return f"communication: {own} ({of_wall(e.communication_ns)} of the wall){gpu}{share}"


def _extra_lines(s: StepLedger, e: Evidence, bound: Bound) -> list[str]:
    """What a verdict adds whatever its bound: communication's share, and GPU work the trace lacks in part."""
    out = []
    if e.other_threads_ns:
        out.append(
            f"other threads' work {ms(e.other_threads_ns)} ms: the step's thread ran no code of its own (nothing "
            "recorded, or a Python frame's self time) while another thread of its process ran events (autograd's "
            f"backward while the loop waits in loss.backward(), a helper thread): {others_text(s)}"
        )
    if e.communication_ns or e.communication_other_ns or e.gpu_communication_ns:
        out.append(_communication_line(s, e))
    if e.launches_unmatched and bound != "unknown":
        out.append(
            f"{e.launches_unmatched:,} of the step's {e.launches + e.graph_launches:,} launch calls have no GPU op in "
            f"the trace: its GPU work is at least the {ms(e.gpu_busy_ns)} ms recorded"
        )
    return out


@dataclass(frozen=True)
class TraceDiagnosis:
    """Every step's diagnosis, and the summary: the median steady step, and the median step of each kind."""

    steps: tuple[Diagnosis, ...]
    median: Diagnosis | None
    by_kind: dict[str, Diagnosis]

    def position_of(self, d: Diagnosis) -> int:
        """The position of the step a diagnosis of `steps` judged: by identity, since two steps alike (a tiled
        trace's copies) have equal diagnoses."""
        return next(i for i, x in enumerate(self.steps) if x is d)

    def mix(self) -> list[tuple[str, int, int]]:
        """The steps by verdict, most time first: (the verdict in words, how many steps, their measured ns). A
        median step speaks for the others only when they agree; a training loop whose every other iteration waits
        on its DataLoader does not."""
        out: dict[str, list[int]] = {}
        for d in self.steps:
            acc = out.setdefault(verdict_words(d), [0, 0])
            acc[0] += 1
            acc[1] += d.evidence.measured_ns
        return sorted(((k, n, ns) for k, (n, ns) in out.items()), key=lambda x: (-x[2], x[0]))

    def to_json(self) -> dict:
        return {
            "median": self.median.to_json() if self.median else None,
            "by_kind": {k: d.to_json() for k, d in self.by_kind.items()},
            "mix": [{"verdict": k, "steps": n, "measured_us": ns / 1e3} for k, n, ns in self.mix()],
        }


def verdict_words(d: Diagnosis) -> str:
    """A verdict in a few words: "GPU-bound", "host-bound by data loading", "external, then GPU-bound"."""
    words = _BOUND_WORD[d.bound] + (f", then {_BOUND_WORD[d.then]}" if d.then else "")
    if d.bound != "host" or d.host_bound_by is None:
        return words
    return f"{words} by {HOST_BY_WORDS.get(d.host_bound_by, d.host_bound_by)}"


def _median_step(steps: Sequence[StepLedger]) -> StepLedger | None:
    """The real step whose measured time is the median (the lower of the two middle ones): a step that happened,
    not a synthesis of medians."""
    if not steps:
        return None
    ordered = sorted(steps, key=lambda s: (max(s.wall_ns, s.gpu_busy_ns), s.position))
    return ordered[(len(ordered) - 1) // 2]


def _with_windows(context: Context, analysis: TraceAnalysis) -> Context:
    """The trace's work with every step's host window added: a hole is time neither ran in. Without the trace's GPU
    work (no trace given) nothing is added: the windows alone would not make a hole the trace's."""
    if context.work is None:
        return context
    start = np.array([s.start_ns for s in analysis.steps], np.int64)
    end = start + np.array([s.wall_ns for s in analysis.steps], np.int64)
    gpu_start, gpu_end = context.work
    return replace(context, work=merge(np.concatenate((gpu_start, start)), np.concatenate((gpu_end, end))))


def diagnose_trace(
    analysis: TraceAnalysis, context: Context | None = None, gpu_ms_at: dict[int, Callable] | None = None
) -> TraceDiagnosis:
    """Every step's diagnosis; `gpu_ms_at` gives a step's roofline (by position) for its batch and roofline
    what-ifs."""
    context = _with_windows(context or Context(), analysis)
    gpu_ms_at = gpu_ms_at or {}
    diagnoses = {
        s.position: diagnose(
            s,
            analysis.on_gpu,
            replace(context, gpu_ms_at=gpu_ms_at[s.position]) if s.position in gpu_ms_at else context,
            analysis.gpu_unrecorded,
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
