"""What fixing a step would buy. `what_if`: the changes the write-ups reason about, each with its predicted step,
the saving, the arithmetic, what it assumes (`requires`) and which of that this trace was checked for (`holds`,
probe.analysis.diagnosis.conditions), ranked by saving ("what to fix first"). A change whose condition fails on
the trace is not offered: `withheld` says which and why, one line each.

**The step a change is priced on** (`Basis`), the median steady step's own time, unprofiled where the trace's sidecar
carries the profiler's cost per event (`StepLedger.unprofiled_estimate_ns`: the profiler's cost, taken off the
host's work; both figures are shown):

- host work: the host window less its sync wait (less the profiler's cost); GPU work: its busy time;
- the step's own time = max(host work + own wait + carried, GPU work). *Own wait* is the sync wait on the step's own
  GPU work (`StepLedger.own_wait_ns`). A wait on earlier work is the previous step's GPU time showing, not this
  step's; but the next step's sync waits the same way on this step's GPU work that runs past its host window, so
  that part is *carried* into the step, up to as long as this step waited on earlier work, unless the step's GPU work
  only started after its host window (queued behind earlier work: the host ran ahead and nothing waited). A step
  with no GPU side owns all its waits (a lock, a semaphore, a poll: on threads, processes or timers the trace does
  not show): its own time is its host work plus its sync wait, and no change to its host work removes them.

Every prediction is that model after the change: max(host work, GPU work) moves, and the step moves by as much (what
the model does not explain, the waits, stays); removing the sync removes the waits instead. A prediction is clamped
to [0, the step], so a what-if never promises more than the step nor less than nothing. The changes:

- graph capture set-up (`Evidence.capture_setup`: the step records launches into a graph or instantiates one):
  nothing; the capture what-if is said to be done already, every other change waits for a step that replays it;
- a cold step (conditions: first-call set-up covers a tenth of it): profile a warm iteration, and nothing else; it
  saves the set-up, the time in the cold calls less what warm calls of their kinds cost (their baselines: a warm
  step still makes them); where the host work it keeps is mostly time no op, frame or call covers, the assumption says
  that the trace cannot tell it from set-up (only the cold calls' time is priced as set-up);
- capture the forward in a CUDA graph (GPU): the capture region's host time (`StepLedger.capturable_ns`) vanishes,
  one graph launch remains; kernels keep their durations. Requires a warm step, the GPU side recorded, no graph
  replayed already (a graph launch call in the step: withheld, and the line says so), a forward (no backward, no
  optimizer), nothing in the region that waits on the device, no data-dependent shapes; shapes that change from
  step to step make it "make the shapes static, then capture";
- compile the forward (a CPU): the compute stays (the GEMMs and attention, and the rest's, fused:
  probe.analysis.diagnosis.conditions.CpuOps), and so does the host work outside the forward; the host's overhead
  inside it (Python, dispatch, the time between ops) stays only for the calls a compiled graph still makes (each op
  it calls as it is, each run of fused ops between them, the compiled call), each at the forward's own host cost per
  top-level op; and the compiled call's guard check is added where `probe run` measured it on the model
  (`Context.compiled_entry_ns`), else said to be unpriced; the ops outside the forward are in its host work
  outside, counted once (no compute, call or op of the graph's); the step's host work caps the sum, and where the
  terms pass it (more calls than the forward dispatched: a scripted forward, one op) the arithmetic says
  min(host, terms = their sum). A training step (a backward or an optimizer step in it:
  FORWARD fails) is offered "compile the model": its forward and, through AOTAutograd, its backward, a compiled call
  for each stretch of either; what a compiled model leaves as it is (the autograd engine's AccumulateGrad, the
  optimizer's step) stays whole, its ops and compute out of the compiled figures;
- remove the sync (GPU): the host stops waiting and runs ahead: the step becomes max(host work, GPU work); the part
  of its own wait spent behind communication kernels (`StepLedger.peer_wait_ns`) is a wait on the other ranks (a
  collective runs until the last rank joins it), not this step's to save: it stays, and a wait that is all of it is
  not offered (the job's straggler, `probe analyze` on the ranks' folder, is what to look at);
- batch B sequences (decode steps): host work per forward stays; the work that reads the weights stays and the work
  that reads each sequence's KV cache grows B times ("as the write-ups do"): with a model, in the roofline's bytes;
  without, by kernel category on a GPU (attention and KV-cache kernels per sequence, the rest once) and by op on a
  CPU (GEMMs once, the rest per sequence). The measured step holds B_now sequences (`current_sequences`: the engine
  marker's count, else its first `aten::embedding`'s recorded [B, T], else taken as one), so one sequence's work is
  the step's per-sequence work over B_now. B is the largest batch whose step stays within `BATCH_GROWTH` of one
  sequence's, at most `MAX_BATCH`; where the step holds B or more already, the change is withheld with that
  arithmetic, and so it is where the split leaves no work per sequence (a CPU model whose every op but the GEMMs
  is under the dispatch floor, a GPU step with no attention or KV-cache kernel): by the model no B grows the step,
  so its B would be only the search's limit, `MAX_BATCH`, not a batch the trace predicts. The saving is per
  token: the step over B_now, less the predicted step over B;
- run the ops on more threads (a CPU whose sidecar says it had more cores): the GEMMs' and attention's compute splits
  across the threads, the rest stays single-threaded;
- fix the top Python frame, or the top op's dispatch (a GPU's host-bound step; on a CPU an op's self time is its
  compute, not dispatch, so no such line);
- the GPU work that binds (GPU-bound steps): the top kernel categories and the top kernel with their shares; with
  recorded shapes, the step's top ops at their roof (the per-op roofline's % of roof); without, the category whose
  kernels taking no time saves the most, at most its time alone (a ceiling, ranked after every priced change): the
  GPU busy time less the union of every other category's kernels (`StepLedger.kernels_alone_by_category`), since
  what ran beside other kernels (communication on a stream of its own under the compute) leaves the GPU as busy;
  with a model, every kernel at the roofline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from probe.analysis.diagnosis.conditions import Cold, CpuOps, StepFacts
from probe.analysis.diagnosis.evidence import (
    EXTERNAL_SHARE,
    UNCOVERED,
    UNCOVERED_SETUP,
    Context,
    Evidence,
    category_share,
    gpu_side_missing,
    largest_host_part,
    own_top_frame,
    site_text,
    top_op,
    waited_thread,
)
from probe.analysis.ledger.host import EVERY_OP
from probe.analysis.ledger.types import StepLedger, kind_words
from probe.text import ms, pct, us

MAX_BATCH = 64  # the largest batch a what-if proposes (a serving batch; nothing past it is claimed)
BATCH_GROWTH = 1.25  # the batch proposed is the largest whose step stays within this of B = 1's (Part 2's "near flat")
PER_SEQUENCE_CATEGORIES = ("attention", "kv_cache")  # GPU work that reads each sequence's cache

# The conditions a what-if can require, each checked on the trace (probe.analysis.diagnosis.conditions); each reads
# after "it needs".
WARM = "a warm step"
COLD = "a cold step (first-call set-up in it)"
GPU_SIDE = "the GPU side recorded"
FORWARD = "a forward (no backward, no optimizer)"
NO_BLOCKING = "nothing in the capture region that waits on the device (no sync, blocking copy or .item())"
NO_DATA_SHAPES = "no op whose output shape depends on the data"
SAME_SHAPES = "the same shapes in every step of its kind"
DECODE = "a decode step (one new token a sequence)"
OWN_WAIT = "a sync that waits on the step's own GPU work"
NOT_COMPILED = "a forward not compiled already"
NOT_CAPTURED = "no graph replayed already (no graph launch call in the step)"


@dataclass(frozen=True)
class Condition:
    """One thing a what-if assumes, as checked on this trace: True, False, or None when the trace cannot say."""

    name: str
    holds: bool | None
    evidence: str

    def to_json(self) -> dict:
        return {"name": self.name, "holds": self.holds, "evidence": self.evidence}


@dataclass(frozen=True)
class WhatIf:
    """One change and what it would buy. Times in ms; `saving_ms` is per token for a batch (its step over B)."""

    change: str
    predicted_step_ms: float
    saving_ms: float
    saving_pct: float
    arithmetic: str
    assumption: str
    requires: tuple[str, ...] = ()
    holds: tuple[Condition, ...] = ()
    terms: dict[str, float] = field(default_factory=dict)  # the prediction's terms, ms (what a check compares)
    ceiling: bool = False  # the saving is an upper bound (no roof to price against), ranked after the priced ones
    step_ms: float = 0.0  # the step it was priced on (Basis.step_ns): what a check's measured baseline is held to

    def figures(self) -> dict:
        """The change and its numbers, without the words that explain them: what each step of `--json` holds."""
        return {
            "change": self.change,
            "predicted_step_ms": self.predicted_step_ms,
            "saving_ms": self.saving_ms,
            "saving_pct": self.saving_pct,
            "terms": dict(self.terms),
            "ceiling": self.ceiling,
            "step_ms": self.step_ms,
        }

    def to_json(self) -> dict:
        return self.figures() | {
            "arithmetic": self.arithmetic,
            "assumption": self.assumption,
            "requires": list(self.requires),
            "holds": [c.to_json() for c in self.holds],
        }

    @classmethod
    def from_json(cls, doc: dict) -> WhatIf:
        """to_json's inverse (report.json files from before `requires` have none)."""
        return cls(
            str(doc["change"]),
            float(doc["predicted_step_ms"]),
            float(doc["saving_ms"]),
            float(doc["saving_pct"]),
            str(doc["arithmetic"]),
            str(doc["assumption"]),
            tuple(doc.get("requires", ())),
            tuple(Condition(**c) for c in doc.get("holds", ())),
            {str(k): float(v) for k, v in doc.get("terms", {}).items()},
            bool(doc.get("ceiling", False)),
            float(doc.get("step_ms", 0.0)),
        )


@dataclass(frozen=True)
class Basis:
    """The step a what-if is priced on, ns (the module docstring)."""

    host_ns: int  # host work, unprofiled when the profiler's cost is known
    gpu_ns: int
    own_wait_ns: int
    carried_ns: int
    profiler_ns: int  # the profiler's own cost taken off the host's work (0: not known)
    profiled_ns: int  # the same step's own time with the profiler's cost left in

    @property
    def model_ns(self) -> int:
        return max(self.host_ns, self.gpu_ns)

    @property
    def step_ns(self) -> int:
        return max(self.host_ns + self.own_wait_ns + self.carried_ns, self.gpu_ns)

    @property
    def label(self) -> str:
        if not self.profiler_ns:
            return f"{ms(self.step_ns)} ms"
        return f"{ms(self.step_ns)} ms unprofiled ({ms(self.profiled_ns)} profiled, less {ms(self.profiler_ns)})"


def basis(s: StepLedger, e: Evidence, on_gpu: bool = True) -> Basis:
    """The step's own time and its two sides (the module docstring)."""
    if not on_gpu:  # a CPU step's waits are on threads, processes or timers the trace does not show: all its own
        return Basis(e.unprofiled_host_ns, 0, s.sync_wait_ns, 0, e.profiler_ns, e.host_work_ns + s.sync_wait_ns)
    carried = 0
    if s.sync_wait_ns > s.own_wait_ns and s.gpu_end_ns is not None and s.gpu_start_ns is not None:
        end = s.start_ns + s.wall_ns
        if s.gpu_start_ns < end:  # its GPU work started inside the window: the GPU was free when issued
            # the next step waits on this tail as this one waited on earlier work: at most that long
            carried = min(max(0, s.gpu_end_ns - end), s.sync_wait_ns - s.own_wait_ns)
    profiled = max(e.host_work_ns + s.own_wait_ns + carried, e.gpu_busy_ns)
    return Basis(e.unprofiled_host_ns, e.gpu_busy_ns, s.own_wait_ns, carried, e.profiler_ns, profiled)


@dataclass
class _Offer:
    """The what-ifs of one step as they are built: offered and withheld."""

    b: Basis
    conditions: dict[str, Condition]
    on_gpu: bool = True
    offered: list[WhatIf] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)

    def check(self, change: str, requires: tuple[str, ...], said: tuple[str, ...] = ()) -> tuple[Condition, ...] | None:
        """The conditions `change` requires, as checked; None (and a withheld line) when one fails, except those in
        `said`, whose failure the change names in its first words instead."""
        holds = tuple(self.conditions[r] for r in requires if r in self.conditions)
        failed = [c for c in holds if c.holds is False and c.name not in said]
        if failed:
            self.withheld.append(f"{change}: not offered: it needs {failed[0].name}, and {failed[0].evidence}")
            return None
        return holds

    def add(self, w: WhatIf) -> None:
        """Offer `w` when it saves anything; else say that its own model gives no saving, and how it came to that."""
        if w.saving_ms > 0:
            self.offered.append(w)
        else:
            self.withheld.append(f"{w.change}: not offered: by its own model it saves nothing here ({w.arithmetic})")

    def price(
        self,
        change: str,
        after_ns: float,
        terms: str,
        assumption: str,
        requires: tuple[str, ...],
        holds: tuple[Condition, ...],
        per: int = 1,
        parts: Mapping[str, float] | None = None,
        ceiling: bool = False,
        held: int = 1,
    ) -> None:
        """A change that moves the model max(host, GPU) to `after_ns`; the waits stay (the module docstring). A
        batch's step holds `per` sequences where the measured one held `held`: its saving is per token."""
        b = self.b
        predicted = _clamp(b.step_ns - (b.model_ns - after_ns), b.step_ns * per)
        per_token = f"; {ms(predicted / per)} ms a token" if per > 1 else ""
        if held > 1:
            per_token += f" against {ms(b.step_ns)} / {held} = {ms(b.step_ns / held)} now"
        now = (
            f"max(host {ms(b.host_ns)}, GPU {ms(b.gpu_ns)}) = {ms(b.model_ns)}"
            if self.on_gpu
            else f"host {ms(b.host_ns)}"
        )
        moved = b.model_ns - after_ns
        sign = f"- {ms(moved)}" if moved >= 0 else f"+ {ms(-moved)}"
        arithmetic = f"{now} -> {terms} = {ms(after_ns)}: {b.label} {sign} = {ms(predicted)} ms{per_token}"
        self.add(_what_if(change, predicted, per, b, arithmetic, assumption, requires, holds, parts, held, ceiling))


def _clamp(predicted: float, most: float) -> float:
    return min(max(predicted, 0.0), most) if math.isfinite(predicted) else most


def _what_if(
    change, predicted, per, b: Basis, arithmetic, assumption, requires, holds, parts=None, held=1, ceiling=False
) -> WhatIf:
    """The change's WhatIf; a batch's (`per` sequences a step, where the measured step held `held`) saves per token:
    the step's cost a token now, less the predicted step's."""
    step = b.step_ns / held
    saving = min(max(step - predicted / per, 0.0), step)
    return WhatIf(
        change,
        predicted / 1e6,
        saving / 1e6,
        100 * saving / step if step else 0.0,
        arithmetic,
        assumption,
        requires,
        holds,
        {k: v / 1e6 for k, v in (parts or {}).items()},
        ceiling,
        step / 1e6,
    )


def conditions(s: StepLedger, e: Evidence, on_gpu: bool, context: Context) -> dict[str, Condition]:
    """Each condition a what-if can require, checked on this step (None: the trace cannot say)."""
    facts = context.facts.get(s.position)
    out = _ledger_conditions(s, e, on_gpu, context.gpu_unrecorded_why)
    if facts is None:  # what only the trace's events can say is not known
        unknown = "not checked: the trace was not read for it"
        names = (WARM, FORWARD, NO_BLOCKING, NO_DATA_SHAPES, SAME_SHAPES, NOT_COMPILED)
        return out | {name: Condition(name, None, unknown) for name in names}
    return out | _capture_conditions(s, facts) | _shape_conditions(facts)


def _phase_words(kind: str) -> str:
    """What a step's kind says of its phase: "a prefill step"; for a kind no marker or recorded shape gave a phase,
    "an iteration, which no marker or recorded shape says is decode" (probe.analysis.ledger.phases)."""
    said = kind_words(kind, article=True)
    return (
        said if kind in ("prefill", "decode", "mixed") else f"{said}, which no marker or recorded shape says is decode"
    )


def _ledger_conditions(s: StepLedger, e: Evidence, on_gpu: bool, unrecorded_why: str) -> dict[str, Condition]:
    """What the step's ledger says: a decode step, a wait on its own GPU work, and (on a GPU) its GPU side recorded
    and whether it replays a graph already (a graph launch call in it: `StepLedger.graph_launches`)."""
    out = {
        DECODE: Condition(DECODE, s.kind == "decode", _phase_words(s.kind)),
        OWN_WAIT: Condition(
            OWN_WAIT,
            s.own_wait_ns > 0 or s.sync_wait_ns == 0,
            f"{ms(s.own_wait_ns)} ms of its {ms(s.sync_wait_ns)} ms sync wait was on its own GPU work",
        ),
    }
    if on_gpu:  # the verdict's own rule (evidence.gpu_side_missing): an unknown bound offers nothing
        missing = gpu_side_missing(e, unrecorded_why)
        calls = e.launches + e.graph_launches
        out[GPU_SIDE] = Condition(
            GPU_SIDE,
            missing is None,
            missing or f"{calls - e.launches_unmatched:,} of its {calls:,} launch calls have a GPU op in the trace",
        )
        out[NOT_CAPTURED] = Condition(
            NOT_CAPTURED,
            not s.graph_launches,
            f"the step replays graphs: {s.graph_launches:,} graph launch call{'s' if s.graph_launches > 1 else ''} "
            f"beside its {s.launches:,} kernel launch{'es' if s.launches != 1 else ''}"
            if s.graph_launches
            else "no graph launch call in it",
        )
    return out


def _capture_conditions(s: StepLedger, facts: StepFacts) -> dict[str, Condition]:
    """What the trace's events say of capturing it: warm, a forward, nothing blocking, no data-dependent shapes."""
    c = facts.cold
    return {
        WARM: Condition(
            WARM,
            c is None,
            "no first call takes many times its later ones"
            if c is None
            else f"{ms(c.ns)} ms of its {ms(s.wall_ns)} ms host window is first-call set-up: {c.text}",
        ),
        FORWARD: Condition(
            FORWARD,
            not facts.training,
            "; ".join(facts.training) if facts.training else "no backward op and no optimizer step in it",
        ),
        NO_BLOCKING: Condition(
            NO_BLOCKING,
            not facts.blocking,
            f"the capture region ({s.capture_region}) holds {', '.join(facts.blocking)}"
            if facts.blocking
            else f"none in the capture region ({s.capture_region})",
        ),
        NO_DATA_SHAPES: Condition(
            NO_DATA_SHAPES,
            not facts.dynamic,
            f"the capture region holds {', '.join(facts.dynamic)}" if facts.dynamic else "no data-dependent-shape op",
        ),
    }


def _shape_conditions(facts: StepFacts) -> dict[str, Condition]:
    """What the trace's events say of its shapes and compiling: the same shapes each step of its kind, none compiled."""
    vary = facts.shapes_vary
    return {
        SAME_SHAPES: Condition(
            SAME_SHAPES,
            None if vary is None else not vary,
            "no shapes recorded, or no other step of its kind"
            if vary is None
            else f"{facts.shape_sets} distinct sets of input shapes over its kind's {facts.kind_steps} steps",
        ),
        NOT_COMPILED: Condition(
            NOT_COMPILED,
            not facts.compiled,
            f"the step calls {', '.join(facts.compiled)}" if facts.compiled else "no compiled region in it",
        ),
    }


def what_if(s: StepLedger, e: Evidence, on_gpu: bool, context: Context) -> tuple[list[WhatIf], list[str]]:
    """The changes the write-ups reason about, with predicted savings, largest first; and the changes not offered,
    each with the condition that failed."""
    facts = context.facts.get(s.position)
    offer = _Offer(basis(s, e, on_gpu), conditions(s, e, on_gpu, context), on_gpu)
    if e.capture_setup:
        _capture_setup(offer, e)
        return offer.offered, offer.withheld
    if facts is not None and facts.cold is not None:
        _warm(offer, e, facts.cold)
        return offer.offered, offer.withheld
    if on_gpu:
        _capture(offer, s, context)
        _sync(offer, s, e)
        _gpu_batch(offer, s, context)
        _host_fixes(offer, s, gpu_side=True)
        _other_threads_fix(offer, s, e, gpu_side=True)
        _gpu_binds(offer, s, context)
    else:
        cpu = facts.cpu if facts is not None else None
        if cpu is not None:
            _compile(offer, s, cpu, context.compiled_entry_ns)
            _cpu_batch(offer, s, cpu, context)
            _threads(offer, cpu, context)
        _host_fixes(offer, s, gpu_side=False)
        _other_threads_fix(offer, s, e, gpu_side=False)
    return sorted(offer.offered, key=lambda w: (w.ceiling, -w.saving_ms, w.change)), offer.withheld


def _warm(offer: _Offer, e: Evidence, cold: Cold) -> None:
    """A cold step: profile a warm iteration first, and nothing else is offered; it saves the step's set-up (its cold
    calls' time less what warm calls of their kinds cost: `Cold.ns`). Where the host work it keeps is
    mostly time no op, frame or call covers (the verdict's rule, `largest_host_part` without set-up), the assumption
    says so: only the cold calls' time is priced as set-up, and the trace cannot say what that time is."""
    b = offer.b
    predicted = _clamp(b.step_ns - cold.ns, b.step_ns)
    kept = ""
    if e.unattributed_ns and largest_host_part(e, setup=False) == "unattributed":
        kept = (
            f"; it counts as set-up only the cold calls' time, not the {ms(e.unattributed_ns)} ms of host work that "
            f"{UNCOVERED}: {UNCOVERED_SETUP}"
        )
    offer.add(
        _what_if(
            "profile a warm iteration",
            predicted,
            1,
            b,
            f"{b.label} - {ms(cold.ns)} first-call set-up = {ms(predicted)} ms; set-up {cold.arithmetic}; {cold.text}",
            "a warm step does not pay first-call set-up (lazy module loading, library initialisation, autotuning); "
            f"every other change waits for a warm profile{kept}",
            (COLD,),
            (Condition(COLD, True, offer.conditions[WARM].evidence),),
        )
    )
    offer.withheld.append(f"every other change: not offered: each needs {WARM}, and {offer.conditions[WARM].evidence}")


def _capture_setup(offer: _Offer, e: Evidence) -> None:
    """Graph capture set-up: the forward is captured already, and no change is priced on one-off work."""
    offer.withheld.append(
        f"capture the forward in a CUDA graph: not offered: the step captures it already: {e.capture_setup_text}"
    )
    offer.withheld.append(
        "every other change: not offered: each prices a step that runs its work, and this one is graph capture "
        "set-up, one-off work: profile the steps that replay the graph"
    )


def _capture(offer: _Offer, s: StepLedger, context: Context) -> None:
    if not (s.launches or s.graph_launches) or not s.capturable_ns:
        return
    change = "capture the forward in a CUDA graph"
    requires = (WARM, GPU_SIDE, NOT_CAPTURED, FORWARD, NO_BLOCKING, NO_DATA_SHAPES, SAME_SHAPES)
    holds = offer.check(change, requires, said=(SAME_SHAPES,))
    if holds is None:
        return
    if offer.conditions[SAME_SHAPES].holds is False:  # a fixed-size cache makes them static: said first
        change = "make the shapes static (a fixed-size cache), then capture the forward in a CUDA graph"
    b = offer.b
    replay = context.graph_launch_ns or context.launch_call_ns or 0.0
    captured = min(s.capturable_ns, b.host_ns)
    host = b.host_ns - captured + replay
    offer.price(
        change,
        max(host, b.gpu_ns),
        f"max(host {ms(b.host_ns)} - {ms(captured)} captured + {ms(replay)} graph launch, GPU {ms(b.gpu_ns)})",
        f"the capture region ({s.capture_region}) holds every launch; its Python, dispatch and launch calls "
        "vanish; what lies outside it stays; kernels keep their durations",
        requires,
        holds,
        parts={"host": host, "gpu": b.gpu_ns, "kept": b.host_ns - captured},
    )


def _sync(offer: _Offer, s: StepLedger, e: Evidence) -> None:
    if not s.sync_wait_ns:
        return
    b = offer.b
    unseen = e.wall_ns and e.external_wait_ns >= EXTERNAL_SHARE * e.wall_ns
    change = "overlap the wait on unseen device work" if unseen else "remove the sync" + site_text(s)
    earlier = s.sync_wait_ns - s.own_wait_ns
    if not b.own_wait_ns and not b.carried_ns:
        offer.withheld.append(
            f"{change}: not offered: its {ms(s.sync_wait_ns)} ms wait was on earlier work (the previous step's GPU "
            "time showing, not this step's), and the step's own GPU work ended inside its host window: nothing "
            "of its own to save"
        )
        return
    peers = min(s.peer_wait_ns, b.own_wait_ns)
    if peers == b.own_wait_ns and not b.carried_ns:
        offer.withheld.append(f"{change}: not offered: {_on_peers(s, peers)}")
        return
    requires = (WARM, GPU_SIDE)
    holds = offer.check(change, requires)
    if holds is None:
        return
    said = (
        f"of the {ms(s.sync_wait_ns)} ms wait, {ms(earlier)} was on earlier work (the previous step's GPU time "
        f"showing, not this step's) and {ms(s.own_wait_ns)} on its own"
        if earlier
        else f"the {ms(s.sync_wait_ns)} ms wait was on its own GPU work"
    )
    if b.carried_ns:
        said += (
            f"; its own GPU work ran {ms(b.carried_ns)} ms past its host window, which the next step's sync waits on"
        )
    kept = f" + on peers {ms(peers)}" if peers else ""
    if peers:
        said += f"; {_on_peers(s, peers)}: it stays"
    predicted = _clamp(max(b.host_ns + peers, b.gpu_ns), b.step_ns)
    offer.add(
        _what_if(
            change,
            predicted,
            1,
            b,
            f"{b.label} = max(host {ms(b.host_ns)} + own wait {ms(b.own_wait_ns)} + carried {ms(b.carried_ns)}, GPU "
            f"{ms(b.gpu_ns)}) -> max(host {ms(b.host_ns)}{kept}, GPU {ms(b.gpu_ns)}) = {ms(predicted)} ms; {said}",
            "the work waited for overlaps this step's own"
            if unseen
            else "the host issues the next step while the GPU runs this one: nothing it fetched is needed first",
            requires,
            holds,
            {"host": b.host_ns, "gpu": b.gpu_ns},
        )
    )


def _on_peers(s: StepLedger, peers: int) -> str:
    """The words for a sync's wait behind communication kernels: a wait on the other ranks, not the step's own."""
    return (
        f"{ms(peers)} ms of its {ms(s.sync_wait_ns)} ms wait was behind communication kernels, which run until the "
        "last rank joins the collective: a wait on the other ranks, not this step's own work (the rank they wait "
        "for: probe analyze on the job's folder names it)"
    )


def gpu_split(s: StepLedger, context: Context) -> tuple[float, float, str]:
    """The step's GPU work as (once a forward, per sequence) ns, and how it was split: in the roofline's bytes with a
    model (weights once, KV per sequence), else by kernel category."""
    gpu = float(s.gpu_busy_ns)
    if context.gpu_ms_at is not None:
        one, two = context.gpu_ms_at(1), context.gpu_ms_at(2)
        per = max(two - one, 0.0) / one if one else 0.0  # the roofline's growth per added sequence, as a share
        return gpu * (1 - per), gpu * per, "in the roofline's bytes (the weights once, the KV cache per sequence)"
    kv = float(sum(s.kernels_by_category.get(c, 0) for c in PER_SEQUENCE_CATEGORIES))
    kv = min(kv, gpu)
    return gpu - kv, kv, "by kernel category (attention and KV-cache kernels per sequence, the rest once)"


def _largest_batch(at: Callable[[int], float], limit: float) -> int:
    """The largest batch B in [1, MAX_BATCH] whose step `at(B)` stays within `limit` (1 at least). A batch's step is
    its work once plus B times its per-sequence work, so `at` never falls as B grows: a bisection finds the B a scan
    from 1 up would stop at, in 6 steps rather than up to 63 (it runs once a step)."""
    lo, hi = 1, MAX_BATCH  # the answer lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if at(mid) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def current_sequences(s: StepLedger) -> tuple[int, str]:
    """The sequences the step holds now, and what says so: its engine marker's count, else its first
    `aten::embedding`'s recorded [B, T] (probe.analysis.ledger.phases), else one (nothing says more)."""
    for said in (s.tokens, s.recorded_tokens):
        if said is not None:
            return said.sequences, said.source
    return 1, "taken as one: nothing in the trace says how many"


@dataclass(frozen=True)
class _Batch:
    """A batch what-if's model: the step at n sequences (`at`) and its terms in words (`terms`), from the measured
    step's `now` sequences (`said`: what says so); one sequence's work (`per`, ns) and how the step's work was split
    into once and per sequence (`how`)."""

    at: Callable[[int], float]
    terms: Callable[[int], str]
    now: int
    said: str
    per: float
    how: str


def _batch_size(offer: _Offer, model: _Batch, change: str) -> int | None:
    """The batch the model proposes: the largest whose step stays within BATCH_GROWTH of one sequence's (at most
    MAX_BATCH); None, with a withheld line and its arithmetic, when the step holds that many already (one sequence
    included: a batch of one is none to propose), or when the trace measured no per-sequence work (the term is 0: on
    a CPU every op but the GEMMs under the dispatch floor, on a GPU no attention or KV-cache kernel): then the step
    does not grow with B by the model, and the B it would propose is only the search's limit, MAX_BATCH, not a batch
    the trace predicts."""
    if model.per <= 0:
        offer.withheld.append(
            f"{change}: not offered: it needs work measured per sequence, and the step's split ({model.how}) leaves "
            f"none: one sequence's step is {model.terms(1)} = {ms(model.at(1))} ms and by that model no B grows it, "
            f"so the {MAX_BATCH} it would propose is only the most it proposes, not a batch the trace predicts"
        )
        return None
    limit = BATCH_GROWTH * model.at(1)
    size = _largest_batch(model.at, limit)
    if size > model.now:
        return size
    past = (
        f"B = {size + 1} would take {model.terms(size + 1)} = {ms(model.at(size + 1))} ms, past {BATCH_GROWTH} x "
        f"{ms(model.at(1))} = {ms(limit)}"
        if size < MAX_BATCH
        else f"{MAX_BATCH} is the most it proposes"
    )
    held = (
        f"the step holds {model.now} sequences already ({model.said}), at or past the {size} the model proposes"
        if model.now > 1
        else f"the model proposes no batch past the one sequence the step holds ({model.said})"
    )
    offer.withheld.append(
        f"{change}: not offered: {held}: one sequence's step is {model.terms(1)} = {ms(model.at(1))} ms, and {past}"
    )
    return None


def _per_sequence_note(model: _Batch, per_now: float) -> str:
    """Where the per-sequence term came from: the measured step's sequences, and what says how many."""
    if model.now == 1:
        return f"; the step holds one sequence ({model.said})"
    return (
        f"; the step holds {model.now} sequences ({model.said}): one sequence's work is its per-sequence "
        f"{ms(per_now)} / {model.now}"
    )


def _gpu_batch(offer: _Offer, s: StepLedger, context: Context) -> None:
    b = offer.b
    if not b.gpu_ns or b.host_ns <= b.gpu_ns:
        return
    change = "batch sequences"
    requires = (WARM, GPU_SIDE, DECODE)
    holds = offer.check(change, requires)
    if holds is None:
        return
    once, per_now, how = gpu_split(s, context)
    now, said = current_sequences(s)
    per = per_now / now

    def gpu_at(n: int) -> float:
        return once + n * per

    model = _Batch(
        lambda n: max(b.host_ns, gpu_at(n)),
        lambda n: f"max(host {ms(b.host_ns)}, GPU {ms(once)} once + {n} x {ms(per)})",
        now,
        said,
        per,
        how,
    )
    size = _batch_size(offer, model, change)
    if size is None or size < 2:
        return
    offer.price(
        f"batch {size} sequences",
        max(b.host_ns, gpu_at(size)),
        f"max(host {ms(b.host_ns)}, GPU {ms(once)} once + {size} x {ms(per)} = {ms(gpu_at(size))} at B={size})",
        f"host work per forward stays; the GPU work splits {how}{_per_sequence_note(model, per_now)}",
        requires,
        holds,
        per=size,
        parts={"host": b.host_ns, "once": once, "per_sequence": per},
        held=now,
    )


def predict_batch(w_terms: Mapping[str, float], size: int) -> float:
    """A batch what-if's step at `size` sequences, ms, from its terms: host (or overhead) once, the weights' work
    once, the per-sequence work `size` times (the same model `what_if` priced)."""
    once = w_terms.get("once", 0.0) + w_terms.get("overhead", 0.0)
    per = w_terms.get("per_sequence", 0.0)
    if "host" in w_terms:  # a GPU step: host and GPU overlap
        return max(w_terms["host"], w_terms.get("once", 0.0) + size * per)
    return once + size * per


def _host_fixes(offer: _Offer, s: StepLedger, gpu_side: bool) -> None:
    """The top Python frame's self time, and on a GPU the top op's dispatch, gone (host-bound steps)."""
    b = offer.b
    if not b.host_ns or b.host_ns <= b.gpu_ns:
        return
    requires = (WARM, GPU_SIDE) if gpu_side else (WARM,)
    f = own_top_frame(s)
    if f is not None:
        change = f"fix the top Python frame, {f.frame}"
        holds = offer.check(change, requires)
        waited = f" and its {ms(f.waited_ns)} ms waiting on another thread" if f.waited_ns else ""
        if holds is not None:
            offer.price(
                change,
                max(b.host_ns - f.own_ns, b.gpu_ns),
                f"max(host {ms(b.host_ns)} - {ms(f.own_ns)}, GPU {ms(b.gpu_ns)})",
                f"the frame's own time (its self time, calls inside it{waited} excluded) goes to zero",
                requires,
                holds,
            )
    if gpu_side and (o := top_op(s)) is not None:
        change = f"fix the top op, {o.name} (x{o.calls})"
        holds = offer.check(change, requires)
        if holds is not None:
            offer.price(
                change,
                max(b.host_ns - o.self_ns, b.gpu_ns),
                f"max(host {ms(b.host_ns)} - {ms(o.self_ns)}, GPU {ms(b.gpu_ns)})",
                "the op's dispatch time (its self time, on the host) goes to zero; its kernels stay",
                requires,
                holds,
            )


def _other_threads_fix(offer: _Offer, s: StepLedger, e: Evidence, gpu_side: bool) -> None:
    """A host-bound step that waited on another thread of its process: that thread's top call (by self time in the
    step) taking no time. The thread runs its events one after another, so the wait shrinks by the call's time inside
    it: all of the call's time when the thread is the process's only other one busy in the step and its whole busy
    time there is no longer than the wait (so lies inside it); otherwise the
    trace cannot say how much did, and the saving is a ceiling (at most the call's time, at most the wait)."""
    b, t = offer.b, waited_thread(s)
    if not e.other_threads_ns or not b.host_ns or b.host_ns <= b.gpu_ns or t is None or not t.top:
        return
    top = t.top[0]
    saved = min(top.self_ns, e.other_threads_ns)
    # every event of the thread in the step ran while the step waited: the wait is this thread's alone, and as long
    alone = sum(1 for x in s.other_threads if x.pid == s.pid) == 1
    inside = alone and t.busy_ns <= e.other_threads_ns
    change = f"speed up {top.name} (x{top.calls}) in thread {t.pid}/{t.tid}, which the step waits on"
    change += "" if inside else ": at most"
    requires = (WARM, GPU_SIDE) if gpu_side else (WARM,)
    holds = offer.check(change, requires)
    if holds is None:
        return
    offer.price(
        change,
        max(b.host_ns - saved, b.gpu_ns),
        f"max(host {ms(b.host_ns)} - {ms(saved)} of {top.name} in the {ms(e.other_threads_ns)} ms wait, "
        f"GPU {ms(b.gpu_ns)})",
        f"{top.name} takes no time ({ms(top.self_ns)} ms of thread {t.pid}/{t.tid}'s self time in the step), and the "
        "step's thread waits that much less: "
        + (
            f"the thread's {ms(t.busy_ns)} ms in the step all ran during the wait"
            if inside
            else f"a ceiling: of the thread's {ms(t.busy_ns)} ms in the step, the trace cannot say how much of the "
            "call ran during the wait"
        ),
        requires,
        holds,
        ceiling=not inside,
    )


def _gpu_binds(offer: _Offer, s: StepLedger, context: Context) -> None:
    """A GPU-bound step: the GPU work that binds, by category and op, and what reaching the roof buys: priced by the
    per-op roofline where shapes were recorded, else at most (the category whose time alone is the largest taking no
    time: `_top_category`)."""
    b = offer.b
    if not b.gpu_ns or b.gpu_ns < b.host_ns or not s.kernels_by_category:
        return
    requires = (WARM, GPU_SIDE)
    shares = _category_shares(s)
    top_op = f"; its top kernel {s.top_kernels[0].short_name[:60]} {pct(s.top_kernels[0].share_of_busy, 0)}%"
    shares += top_op if s.top_kernels else ""
    ops = [o for o in context.step_ops.get(s.position, ()) if o.roof_pct]
    ceiling = not ops
    if ops:  # each op with a roof at it: its kernel time shrinks to roof_pct of itself
        saved = sum(o.kernel_us_total * 1e3 * (1 - min(o.roof_pct or 100.0, 100.0) / 100) for o in ops)
        named = "; ".join(f"{o.op} {o.shapes} at {o.roof_pct:.0f}% of its roof" for o in ops[:3])
        change, after = f"bring the top GPU ops to their roof ({named})", b.gpu_ns - saved
        terms = f"max(host {ms(b.host_ns)}, GPU {ms(b.gpu_ns)} - {ms(saved)} to the roof)"
        assumption = f"each of the step's top ops with recorded shapes runs at its roofline; the GPU work: {shares}"
    else:
        category, alone = _top_category(s)
        change = f"speed up the {category} kernels ({category_share(s, category)}): at most"
        after = b.gpu_ns - alone
        summed = s.kernels_by_category.get(category, 0)
        beside = alone < s.kernels_busy_by_category.get(category, 0)
        terms = f"max(host {ms(b.host_ns)}, GPU {ms(b.gpu_ns)} - {ms(alone)} {category}{' alone' if beside else ''})"
        under = (
            f"; of their {ms(summed)} ms, the GPU ran them alone {ms(alone)} ms: the rest ran beside other kernels, "
            "which keep the GPU busy then"
            if beside
            else ""
        )
        assumption = (
            f"the ceiling: the {category} kernels take no time and the others keep theirs (no shapes recorded, so no "
            f"roof to price against){under}; the GPU work: {shares}"
        )
    holds = offer.check(change, requires)
    if holds is not None:
        offer.price(change, max(b.host_ns, after), terms, assumption, requires, holds, ceiling=ceiling)
    if context.gpu_ms_at is not None:
        roof = context.gpu_ms_at(1) * 1e6
        change = "kernels at the roofline"
        holds = offer.check(change, requires)
        if roof < b.gpu_ns and holds is not None:
            offer.price(
                change,
                max(b.host_ns, roof),
                f"max(host {ms(b.host_ns)}, roofline GPU {ms(roof)})",
                "every kernel moves its bytes at the device's peak bandwidth or computes at its peak FLOP/s",
                requires,
                holds,
            )


def _top_category(s: StepLedger) -> tuple[str, int]:
    """The kernel category whose taking no time would save the most GPU time, and that time: its time alone
    (`StepLedger.kernels_alone_by_category`), the largest summed time first among equals."""
    alone = s.kernels_alone_by_category
    category = min(s.kernels_by_category, key=lambda c: (-alone.get(c, 0), -s.kernels_by_category[c], c))
    return category, alone.get(category, 0)


def _category_shares(s: StepLedger) -> str:
    """The top four kernel categories by the share of the GPU's busy time they ran in, each with the share it ran in
    alone where another category's kernels ran beside it: "communication 88% (3% alone), moe 59% (5% alone)"."""
    busy, alone, whole = s.kernels_busy_by_category, s.kernels_alone_by_category, s.gpu_busy_ns
    ranked = sorted(busy, key=lambda c: (-busy[c], c))[:4]
    return ", ".join(
        f"{c} {pct(busy[c] / whole, 0)}%"
        + (f" ({pct(alone.get(c, 0) / whole, 0)}% alone)" if alone.get(c, 0) < busy[c] else "")
        for c in ranked
    )


COMPILE_FORWARD = "compile the forward (torch.compile)"
COMPILE_MODEL = "compile the model (torch.compile: the forward and, through AOTAutograd, its backward)"


def _compile(offer: _Offer, s: StepLedger, cpu: CpuOps, entry_ns: float | None) -> None:
    """A CPU step compiled: the compute stays, and so does the host work outside the compiled region (sampling,
    the loop; where no range or module frame marks the forward, every op is taken as it, and the saving is a
    ceiling); inside it, the host's cost per op stays only for the calls a compiled graph still makes: each op it
    calls as eager code would (GEMM, attention), each run of fused ops between them, and the compiled call; and
    the compiled call's guard check (`entry_ns`, measured on the model; where it was not, unpriced and said).
    A training step (its FORWARD condition fails) compiles the model: its forward and backward, a compiled call
    each; the ops a compiled model leaves as they are (the optimizer's, AccumulateGrad's: CpuOps' eager ops) stay
    whole, and neither their ops nor their compute count among the compiled ones."""
    b = offer.b
    training = offer.conditions[FORWARD].holds is False
    change = COMPILE_MODEL if training else COMPILE_FORWARD
    requires = (WARM, NOT_COMPILED)
    holds = offer.check(change, requires)
    top_ops = s.top_level_ops - cpu.eager_ops - cpu.outside_ops
    if holds is None or top_ops <= 0:
        return
    kept = cpu.gemm_ns + cpu.attention_ns + cpu.other_kept_ns - cpu.eager_kept_ns - cpu.outside_kept_ns
    rest = cpu.rest_ns - cpu.eager_rest_ns - cpu.outside_rest_ns
    outside = _outside_region(b, s, cpu)
    eager = _unprofiled(b, cpu.eager_ns)
    compute = cpu.region_compute_ns  # the compute outside the region is in `outside`: counted once
    others = _waited_inside(b, s)
    overhead = max(b.host_ns - outside - eager - others - compute, 0)
    per_op = overhead / top_ops
    calls = cpu.kept + cpu.fused + cpu.graph_calls
    entry = entry_ns or 0.0
    total = outside + eager + others + compute + calls * per_op + entry
    after = min(total, b.host_ns)  # compiling never adds host work: where the terms pass it, the arithmetic says so
    region = "model" if training else "forward"
    ceiling = s.capture_region == EVERY_OP  # no frame marks the forward: the loop's own work is priced as compiled
    terms = (
        f"outside the {region} {ms(outside)}"
        + (f" + left as they are (AccumulateGrad, the optimizer's) {ms(eager)}" if cpu.eager_ns else "")
        + (f" + waiting on other threads {ms(others)}" if others else "")
        + f" + GEMM and attention {ms(kept)} + the other ops' compute {ms(rest)} + {calls} calls x {us(per_op, 2)} us"
        + (f" + guards {ms(entry)}" if entry_ns is not None else "")
    )
    offer.price(
        change + (": at most" if ceiling else ""),
        after,
        f"min(host {ms(b.host_ns)}, {terms} = {ms(total)})"
        if total > b.host_ns and ms(total) != ms(b.host_ns)
        else terms,
        _compile_assumption(offer, s, cpu, training, eager, overhead, per_op, entry_ns),
        requires,
        holds,
        parts={"compute": compute, "outside": outside, "overhead": overhead, "calls": calls * per_op}
        | ({"eager": eager} if cpu.eager_ns else {})
        | ({"others": others} if others else {})
        | ({"entry": entry} if entry_ns is not None else {}),
        ceiling=ceiling,
    )


def _compile_assumption(
    offer: _Offer,
    s: StepLedger,
    cpu: CpuOps,
    training: bool,
    eager: float,
    overhead: float,
    per_op: float,
    entry_ns: float | None,
) -> str:
    """What the compile what-if assumes, in words (a training step's: what compiling the model takes over, and what
    it leaves as it is)."""
    guards = (
        f"the compiled call's guard check ({ms(entry_ns)} ms, measured on the model) is added"
        if entry_ns is not None
        else "the compiled call's guard check, which an eager trace does not show, is not priced (probe run "
        "measures it on the model)"
    )
    calls = (
        "the compiled call"
        if cpu.graph_calls == 1
        else f"the {cpu.graph_calls} compiled calls (one for each stretch of forward ops and of backward ops)"
    )
    unmarked = (
        "the step's thread runs no module frame to mark it, though the trace has stacks (its model ran on another "
        "thread, or is no nn.Module)"
        if s.top_frames
        else "the trace has no module frames to mark it (record with_stack=True)"
    )
    region = (
        f"the {'model' if training else 'forward'} taken as {EVERY_OP}: {unmarked}, so the saving is a ceiling: the "
        "loop's own work between the ops (a generate's sampling and bookkeeping) counts as compiled"
        if s.capture_region == EVERY_OP
        else s.capture_region
    )
    outside = (
        f" (the step's {s.top_level_ops} less the {cpu.outside_ops} outside it, whose compute is the outside's)"
        if cpu.outside_ops
        else ""
    )
    if not training:
        said = (
            f"the host's work outside the forward ({region}) stays; inside it, the host's cost per "
            f"dispatched op ({us(per_op, 2)} us: the forward's {ms(overhead)} ms of Python, dispatch and time between "
            f"ops over its {s.top_level_ops - cpu.outside_ops} top-level ops{outside})"
        )
    else:
        backward = ", with the backward's ops" if cpu.backward_outside_ns else ""
        left = (
            f"their {cpu.eager_ops} top-level ops ({ms(eager)} ms) stay as they are"
            if cpu.eager_ns
            else "the step has no such op"
        )
        said = (
            f"the step trains ({offer.conditions[FORWARD].evidence}): compiling the model compiles its forward and, "
            f"through AOTAutograd, its backward, and no more: the autograd engine still runs AccumulateGrad (the "
            f"compiled backward's gradients added into each .grad, outside its graph), and the optimizer's step is "
            f"not the model's: {left}; the host's work outside the model ({region}{backward}) "
            f"stays; inside it, the host's cost per dispatched op ({us(per_op, 2)} us: the model's {ms(overhead)} ms "
            f"of Python, dispatch and time between ops over its {s.top_level_ops - cpu.eager_ops - cpu.outside_ops} "
            f"top-level ops, the step's {s.top_level_ops} less those {cpu.eager_ops}"
            + (f" and the {cpu.outside_ops} outside the model" if cpu.outside_ops else "")
            + ")"
        )
    return (
        f"on a CPU an op's self time is its compute; {said} stays only for the calls a compiled graph still makes: "
        f"the {cpu.kept} ops it calls as they are (GEMM, attention), the {cpu.fused} run(s) of other ops between "
        f"them (each fused into its kernels) and {calls}; {guards}"
    )


def _outside_region(b: Basis, s: StepLedger, cpu: CpuOps | None = None) -> float:
    """The step's host work outside what a compile or a capture takes over (its capture region: probe's forward
    ranges or the model's module frames), unprofiled in the basis' proportion; 0 where the region is every op
    (the time between ops is then the model's own Python, not outside it). A compiled model (`cpu`, a training
    step's) takes over the backward's ops outside the region too, and its ops left as they are are priced whole
    apart, so neither counts here."""
    profiled = b.host_ns + b.profiler_ns
    if s.capture_region == EVERY_OP or not profiled:
        return 0.0
    taken = cpu.backward_outside_ns + cpu.eager_outside_ns if cpu is not None else 0
    return max(profiled - s.capturable_ns - taken, 0) * b.host_ns / profiled


def _waited_inside(b: Basis, s: StepLedger) -> float:
    """Of the compiled region, the time the step's thread waited on other threads (`python_other_ns`,
    `unattributed_other_ns`: a serving loop blocked while its model runs on a worker), which compiling this thread's
    ops leaves as it is; known where the region is every op and runtime call (no frame marks a forward: the whole
    step is the region). Where frames mark the forward, a wait outside it is in the work outside the region, and one
    inside it is not told apart (0)."""
    if s.capture_region != EVERY_OP:
        return 0.0
    return _unprofiled(b, s.python_other_ns + s.unattributed_other_ns)


def _unprofiled(b: Basis, ns: float) -> float:
    """Host time `ns` of the profiled step, unprofiled in the basis' proportion."""
    profiled = b.host_ns + b.profiler_ns
    return ns * b.host_ns / profiled if profiled else 0.0


def cpu_split(cpu: CpuOps, context: Context) -> tuple[float, float, str]:
    """A CPU step's compute as (once a forward, per sequence) ns: the weights' traffic once, the rest per sequence.
    With the roofline's traffic time on this machine, the GEMMs' time up to it is the weights' (once) and what lies
    past it grows per sequence; without, the GEMMs are the weights' and attention and every other op's compute is per
    sequence."""
    per = float(cpu.attention_ns + cpu.rest_ns + cpu.other_kept_ns)
    if context.weights_ns is None:
        return float(cpu.gemm_ns), per, "GEMMs once (the weights), attention and the rest per sequence"
    weights = min(float(cpu.gemm_ns), context.weights_ns)
    return (
        weights,
        per + cpu.gemm_ns - weights,
        f"the GEMMs' time up to the weights' traffic ({ms(context.weights_ns)} ms at the measured bandwidth) once, "
        "their compute past it, attention and the rest per sequence",
    )


def _cpu_batch(offer: _Offer, s: StepLedger, cpu: CpuOps, context: Context) -> None:
    b = offer.b
    change = "batch sequences"
    requires = (WARM, DECODE)
    holds = offer.check(change, requires)
    if holds is None:
        return
    once, per_now, how = cpu_split(cpu, context)
    overhead = b.host_ns - cpu.compute_ns
    now, said = current_sequences(s)
    per = per_now / now

    def step_at(n: int) -> float:
        return overhead + once + n * per

    model = _Batch(
        step_at, lambda n: f"overhead {ms(overhead)} + once {ms(once)} + {n} x {ms(per)}", now, said, per, how
    )
    size = _batch_size(offer, model, change)
    if size is None or size < 2:
        return
    offer.price(
        f"batch {size} sequences",
        step_at(size),
        f"overhead {ms(overhead)} + once {ms(once)} + {size} x {ms(per)}",
        f"the host's overhead per forward (Python, dispatch) stays; the compute splits {how}"
        + _per_sequence_note(model, per_now),
        requires,
        holds,
        per=size,
        parts={"overhead": overhead, "once": once, "per_sequence": per},
        held=now,
    )


def _threads(offer: _Offer, cpu: CpuOps, context: Context) -> None:
    if context.threads is None:
        return
    ran, cores = context.threads
    if cores <= ran:
        return
    change = f"run the ops on {cores} threads"
    holds = offer.check(change, (WARM,))
    if holds is None:
        return
    b = offer.b
    after = predict_threads(b.host_ns, cpu, ran, cores)
    parallel = cpu.gemm_ns + cpu.attention_ns + cpu.other_kept_ns
    offer.price(
        change,
        after,
        f"host {ms(b.host_ns)} - GEMM and attention {ms(parallel)} x (1 - {ran}/{cores})",
        "the GEMMs' and attention's compute splits evenly across the threads; the rest (Python, dispatch, small "
        "elementwise ops) stays on one",
        (WARM,),
        holds,
        parts={"serial": b.host_ns - parallel, "parallel": parallel},
    )


def predict_threads(host_ns: float, cpu: CpuOps, ran: int, threads: int) -> float:
    """A CPU step on `threads` threads from one that ran on `ran`: the GEMMs' and attention's compute splits."""
    parallel = cpu.gemm_ns + cpu.attention_ns + cpu.other_kept_ns
    return host_ns - parallel * (1 - ran / threads)
