"""Prediction next to measurement: the write-ups' method as a report.

1. Derive what a step should cost: max(host floor, traffic / bandwidth), from this machine's measured floor
   (`probe overhead`) and bandwidth (measured copy bandwidth on a CPU; the device table on a known GPU).
2. Put the measured ITL beside it.
3. Name the term the gap points at.

It also checks the write-ups' two closing predictions against this machine's measurements:
- Part 1: removing per-step host overhead (a captured static step) is worth more at short prompts than the
  cache is.
- Part 2: with B sequences per forward the step stays near flat, so aggregate throughput grows about as
  B x single-sequence tokens/s, until cache traffic uses up the bandwidth (the roofline's batch limit).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import msgspec

from probe.analysis.diagnosis.verdict import Diagnosis
from probe.analysis.diagnosis.what_if import WhatIf, predict_batch
from probe.analysis.records.results import BenchResults, Cell
from probe.analysis.roofline.formulas import StepBinding, batch_limit, predict_step_ms

HOLDS = 0.15  # |measured / predicted - 1| within this: the prediction holds (Part 2 missed by 12-15%)


FLAT = 1.25  # a batched step within 25% of the batch-1 step counts as "near flat"


LINEAR = 0.75  # aggregate throughput at least 75% of B x single-sequence counts as "roughly linear"


@dataclass(frozen=True)
class Machine:
    """What the predictions stand on, measured where the run happened."""

    floor_ms: float  # single-token forward, no cache (probe overhead)
    floor_source: str
    bandwidth_bytes_s: float  # what predictions divide by: a measured copy
    bandwidth_source: str
    datasheet_bandwidth_bytes_s: float | None = None  # the vendor's peak, shown beside it on a known GPU
    datasheet_source: str | None = None
    contended: bool | None = None  # other processes took the CPU while the floor was measured (None: not known)
    other_cpu_cores: float | None = None


@dataclass(frozen=True)
class Prediction:
    engine: str
    prompt_tokens: int
    batch: int
    context: int  # mean cached positions over the decode steps
    traffic_ms: float
    floor_ms: float
    predicted_ms: float
    binding: StepBinding
    measured_ms: float  # ITL p50
    ratio: float  # measured / predicted
    points_at: str
    host_source: str = "eager floor"  # what floor_ms is: the eager floor, or the engine's own host cost (HostCost)


@dataclass(frozen=True)
class HostOverheadGains:
    """Part 1's figures: at one short prompt, each engine's ITL p50 and what the cache and a static step bought."""

    prompt: int
    naive_itl_ms: float
    cached_itl_ms: float
    static_itl_ms: float
    cache_speedup: float  # naive / cached
    static_speedup: float  # cached / static


@dataclass(frozen=True)
class BatchPoint:
    """One batch size of Part 2's scaling, against the batch-1 cell at the same prompt."""

    itl_ms: float  # its ITL p50
    step_ratio: float  # its step / the batch-1 step (near flat: at most FLAT)
    tok_s: float  # its aggregate decode tokens/s
    scaling: float  # tok_s / (B x the batch-1 tok/s) (roughly linear: at least LINEAR)


@dataclass(frozen=True)
class BatchScaling:
    """Part 2's figures: the step and throughput at each batch size of one prompt, and how far the claim holds."""

    prompt: int
    by_batch: dict[int, BatchPoint]
    # None when not judged (a batch read faster than B runs of one: a measurement error)
    holds_up_to_batch: int | None = None
    bandwidth_max_batch: int | None = None  # the roofline's batch limit at the batch-1 step time


VerdictFigures = HostOverheadGains | BatchScaling


@dataclass(frozen=True)
class Verdict:
    claim: str
    source: str
    supported: bool | None  # None: this run has not measured what the claim needs
    evidence: str
    numbers: VerdictFigures | None = None  # None: nothing measured to judge by

    def to_json(self) -> dict:
        """As report.json holds it: `numbers` an object (empty when None; a figure not reached left out)."""
        numbers = {} if self.numbers is None else dataclasses.asdict(self.numbers)
        numbers = {k: v for k, v in numbers.items() if v is not None}
        return dataclasses.asdict(dataclasses.replace(self, numbers=None)) | {"numbers": numbers}

    @classmethod
    def from_json(cls, doc) -> Verdict:
        """report.json's verdict, each field's type checked (msgspec); the figures' kind is told by their keys."""
        if not isinstance(doc, dict):
            raise ValueError("a verdict is a JSON object")
        text = {name: (doc.get(name), kind) for name, kind in _VERDICT_TEXT.items()}
        try:
            claim, source, supported, evidence = (msgspec.convert(value, kind) for value, kind in text.values())
        except msgspec.ValidationError as e:
            raise ValueError(f"a verdict's {', '.join(_VERDICT_TEXT)}: {e}") from None
        numbers = doc.get("numbers") or {}
        figures: type[VerdictFigures] = BatchScaling if "by_batch" in numbers else HostOverheadGains
        return cls(
            claim, source, supported, evidence, msgspec.convert(numbers, figures, str_keys=True) if numbers else None
        )


_VERDICT_TEXT: dict[str, object] = {"claim": str, "source": str, "supported": bool | None, "evidence": str}


def contended_text(what: str, other_cpu_cores: float | None) -> str:
    """The one line of the contention rule: a contended cell, floor or sample is never judged."""
    cores = f" ({other_cpu_cores:.2f} cores of other work beside it)" if other_cpu_cores is not None else ""
    return f"not judged: {what} ran contended{cores}"


def not_judged(cells: list[Cell], machine: Machine | None = None) -> str | None:
    """The contention rule for a judgment that stands on `cells` (and on the floor, with `machine`): the line that
    says why it is not judged, or None when every figure it uses ran uncontended."""
    if machine is not None and machine.contended:
        return contended_text("the floor", machine.other_cpu_cores)
    busy = [c for c in cells if c.contended]
    if not busy:
        return None
    worst = max(c.other_cpu_cores or 0.0 for c in busy)
    return contended_text(", ".join(c.label for c in busy), worst)


def points_at(ratio: float, binding: str, recompute: bool) -> str:
    if ratio < 1 - HOLDS:
        return f"{binding} term too high: the step beats it"
    if ratio <= 1 + HOLDS:
        return f"{binding}: the prediction holds"
    if recompute:
        return "compute: each step recomputes all P+i positions, which neither term counts"
    if binding == "host":
        return "host floor: the step does work the floor's forward does not (bookkeeping, sampling, sync)"
    return "bandwidth term not reached: per-step overhead or compute binds instead"


@dataclass(frozen=True)
class Side:
    """One side of a what-if check, measured in turn with the others (probe.capture.ab.interleaved_steps): an engine
    at a batch and an intra-op thread count (0: the run's own)."""

    engine: str
    batch: int = 1
    threads: int = 0

    @property
    def label(self) -> str:
        return (
            self.engine + (f" B={self.batch}" if self.batch > 1 else "") + (f" {self.threads}T" if self.threads else "")
        )


@dataclass(frozen=True)
class Measured:
    """A side's median decode step, and whether other processes took the CPU during its decode phases."""

    step_ms: float
    contended: bool | None
    other_cpu_cores: float | None = None


@dataclass(frozen=True)
class WhatIfCheck:
    """A what-if the baseline engine's profiled step predicted, held against the change made (report.json's
    `what_if_checks`). It judges the change, not the profile's estimate of the baseline.

    The what-if predicted `predicted_step_ms` from the baseline's step as the profile priced it (`priced_step_ms`:
    the profiled step, unprofiled). The baseline measured beside the change (`baseline_step_ms`) departs from that
    estimate by `baseline_error_pct` = 100 (baseline / priced - 1). The prediction is rebased onto the measured
    baseline with the what-if's saving in ms held fixed ("saves X ms" is what the diagnosis prints):
    `rebased_step_ms` = predicted + (baseline - priced). error_pct = 100 (measured / rebased - 1), and it alone
    judges the change: it holds within HOLDS; past it, `wrong_term` names the term of the change that departed, from
    the rebased figures. The baseline's own departure past HOLDS (`baseline_departed`) is a finding of its own (the
    profile's unprofiled estimate was off), shown beside the verdict and never deciding it. Where the profile priced
    no baseline step (`priced_step_ms` None), the prediction is judged as it is. A contended side is never judged,
    the change nor the baseline's departure (`note` says so; the figures are kept)."""

    change: str  # "cached -> static", "batched B=1 -> B=4", "cached 1 -> 2 threads"
    what_if: str  # the diagnosis's line it checks
    predicted_step_ms: float | None  # the profile's prediction, priced on its own estimate of the baseline
    measured_step_ms: float | None
    error_pct: float | None  # 100 (measured / rebased - 1): the change's error
    contended: bool | None
    wrong_term: str | None = None
    note: str = ""  # how it was predicted; or why not checked, or not judged
    baseline_step_ms: float | None = None  # the baseline measured beside it
    priced_step_ms: float | None = None  # the baseline's step as the profile priced it (the what-if's step_ms)
    rebased_step_ms: float | None = None  # the prediction moved onto the measured baseline, its saving held fixed
    baseline_error_pct: float | None = None  # 100 (baseline / priced - 1): the profile's estimate's own error

    @property
    def judged(self) -> bool:
        return self.error_pct is not None and not self.contended

    @property
    def baseline_departed(self) -> bool:  # said beside the verdict as BASELINE_DEPARTED
        """The baseline measured past HOLDS from the step the profile priced: the profile's estimate was off. Never
        on a contended side: its figures are kept, and not judged."""
        departure = self.baseline_error_pct
        return not self.contended and departure is not None and abs(departure) > 100 * HOLDS


BASELINE_DEPARTED = f"past {100 * HOLDS:.0f}%: the profile's estimate of it was off"  # a check's baseline finding


CHECK_BATCHES = (2, 4, 8)


def check_sides(d: Diagnosis | None, baseline: str = "cached") -> list[Side]:
    """The sides the checks of `d`'s what-ifs measure: the baseline, static, batched at B = 1, 2, 4 and 8, and the
    baseline on the threads a threads what-if names."""
    sides = [Side(baseline), Side("static"), Side("batched"), *(Side("batched", b) for b in CHECK_BATCHES)]
    if d is not None and (w := _find(d, "run the ops on ")) is not None:
        sides.append(Side(baseline, threads=_threads_of(w)))
    return sides


def _find(d: Diagnosis, *prefixes: str) -> WhatIf | None:
    return next((w for w in d.what_if if w.change.startswith(prefixes)), None)


def _threads_of(w: WhatIf) -> int:
    return int(w.change.removeprefix("run the ops on ").split()[0])


STATIC_CHANGES = ("compile the forward", "capture the forward", "make the shapes static")


def what_if_checks(d: Diagnosis | None, measured: dict[Side, Measured], baseline: str = "cached") -> list[WhatIfCheck]:
    """Each change one of our engines makes, predicted by the baseline's profiled step `d` and measured: the step
    compiled or captured (static), batched at B = 2, 4 and 8 (from batched at B = 1), and on more threads."""
    base = measured.get(Side(baseline))
    one = measured.get(Side("batched"))
    out = []
    static = _find(d, *STATIC_CHANGES) if d is not None else None
    out.append(_check(f"{baseline} -> static", static, None, base, measured.get(Side("static")), d))
    batch = _find(d, "batch ") if d is not None else None
    for b in CHECK_BATCHES:
        predicted = predict_batch(batch.terms, b) if batch is not None else None
        out.append(_check(f"batched B=1 -> B={b}", batch, predicted, one, measured.get(Side("batched", b)), d, b))
    threads = _find(d, "run the ops on ") if d is not None else None
    if threads is not None:
        n = _threads_of(threads)
        out.append(
            _check(f"{baseline} -> {n} threads", threads, None, base, measured.get(Side(baseline, threads=n)), d)
        )
    return out


def _check(
    change: str,
    w: WhatIf | None,
    predicted: float | None,
    base: Measured | None,
    after: Measured | None,
    d: Diagnosis | None,
    batch: int = 1,
) -> WhatIfCheck:
    if d is None:
        return WhatIfCheck(change, "", None, after.step_ms if after else None, None, None, note="no profiled baseline")
    if w is None:
        why = next((line for line in d.withheld if line.startswith(("compile", "capture", "batch", "run"))), None)
        note = why or "the diagnosis offers no such change (it buys nothing on this step)"
        return WhatIfCheck(change, "", None, after.step_ms if after else None, None, None, note=f"not checked: {note}")
    predicted = w.predicted_step_ms if predicted is None else predicted
    if after is None or base is None:
        note = "not checked: the change was not measured"
        return WhatIfCheck(change, w.change, predicted, None, None, None, note=note, priced_step_ms=w.step_ms or None)
    return _judge(change, w, predicted, base, after, batch)


def _judge(change: str, w: WhatIf, predicted: float, base: Measured, after: Measured, batch: int) -> WhatIfCheck:
    """The change judged on the prediction rebased onto the baseline measured beside it (WhatIfCheck)."""
    priced = w.step_ms or None
    rebased = predicted + (base.step_ms - priced) if priced else predicted
    figures = {
        "baseline_step_ms": base.step_ms,
        "priced_step_ms": priced,
        "rebased_step_ms": rebased,
        "baseline_error_pct": 100 * (base.step_ms / priced - 1) if priced else None,
    }
    error = 100 * (after.step_ms / rebased - 1) if rebased > 0 else None
    contended = bool(base.contended or after.contended) if None not in (base.contended, after.contended) else None
    if contended:
        cores = max(m.other_cpu_cores or 0.0 for m in (base, after))
        note = f"not judged: contended ({cores:.2f} cores of other work beside it)"
        return WhatIfCheck(change, w.change, predicted, after.step_ms, error, True, None, note, **figures)
    if error is None:
        note = (
            f"not checked: the change was predicted to save {priced - predicted:.3f} ms of a {priced:.3f} ms step, "
            f"and the baseline measured {base.step_ms:.3f} ms: no step is left to predict"
            if priced
            else "not checked: the change was predicted to take no time"
        )
        return WhatIfCheck(change, w.change, predicted, after.step_ms, None, contended, None, note, **figures)
    wrong = wrong_term(w, base.step_ms, after.step_ms, batch) if abs(error) > 100 * HOLDS else None
    return WhatIfCheck(change, w.change, predicted, after.step_ms, error, contended, wrong, w.arithmetic, **figures)


def wrong_term(w: WhatIf, base_ms: float, after_ms: float, batch: int = 1) -> str:
    """Which term of the change's prediction departed, the prediction rebased onto the baseline measured beside the
    change (`base_ms`; WhatIfCheck): each term is measured from what the change moved, so the baseline's own
    departure from the step the profile priced (w.step_ms) never counts against the change."""
    shift = base_ms - w.step_ms if w.step_ms else 0.0  # the baseline's departure, ms
    t = w.terms
    if "compute" in t:  # compile: the compute stays, the overhead shrinks to the calls a compiled graph makes
        return _compile_term(w, base_ms - after_ms)
    if "per_sequence" in t:  # batch: measured from B = 1 to B, both beside the change: no departure enters
        slope = (after_ms - base_ms) / (batch - 1)
        return f"the per-sequence work: predicted {t['per_sequence']:.3f} ms a sequence, measured {slope:.3f} ms"
    if "parallel" in t:  # savings, each from its own baseline: no departure enters
        return (
            f"the work that splits across threads (GEMM, attention): predicted to save "
            f"{w.step_ms - w.predicted_step_ms:.3f} ms, measured {base_ms - after_ms:.3f} ms"
        )
    rebased = f"{w.predicted_step_ms + shift:.3f} ms" + (
        f" ({w.predicted_step_ms:.3f} + the baseline's {shift:+.3f})" if shift else ""
    )
    if "kept" in t:  # capture: the host work outside the region, or the GPU's
        side = "the GPU work" if t["gpu"] >= t["host"] else "the host work left outside the capture"
        return f"{side}: predicted a step of {rebased}, measured {after_ms:.3f} ms"
    return f"the step: predicted {rebased}, measured {after_ms:.3f} ms"


def _compile_term(w: WhatIf, saved_ms: float) -> str:
    """A compile's miss, from the saving measured (the baseline beside the change less the compiled step) against
    the saving predicted: the overhead a compiled graph keeps is what the prediction kept plus what it saved that
    the change did not; past the whole overhead, the compute (taken to stay) shrank."""
    t = w.terms
    predicted_saving = (w.step_ms or w.predicted_step_ms + w.saving_ms) - w.predicted_step_ms
    predicted = t["calls"] + t.get("entry", 0.0)
    kept = predicted + predicted_saving - saved_ms
    if kept < 0:
        return (
            f"compute: the compiled step saved {saved_ms:.3f} ms, past the whole {predicted + predicted_saving:.3f} "
            f"ms of overhead: the ops' compute ({t['compute']:.3f} ms), taken to stay, shrank"
        )
    return (
        f"the overhead a compiled graph keeps: predicted {predicted:.3f} ms, measured {kept:.3f} ms (it saved "
        f"{saved_ms:.3f} ms, {predicted_saving:.3f} predicted)"
    )


@dataclass(frozen=True)
class HostCost:
    """An engine's own host cost per step, where the eager floor does not describe it: a captured step dispatches
    `dispatches` calls (one graph launch), each at the floor's host cost per kernel launch."""

    dispatches: float
    per_dispatch_ms: float
    source: str

    @property
    def ms(self) -> float:
        return self.dispatches * self.per_dispatch_ms


def captured_host_cost(captured: bool, overhead: OverheadReport | None) -> HostCost | None:
    """The host cost of a captured engine's step: one graph launch, at the floor's host cost per kernel launch. None
    where the step is not captured (a CPU compiles the static engine but captures no graph: the eager floor stays,
    and a compiled step that beats it reads so) or no floor was measured."""
    if not captured or overhead is None or not overhead.host_us_per_launch > 0:  # NaN: no launch was recorded
        return None
    us = overhead.host_us_per_launch
    return HostCost(1.0, us / 1e3, f"1 graph launch a step x {us:.2f} us (the floor's per kernel launch)")


def predictions(
    results: BenchResults, arch, machine: Machine, host: dict[str, HostCost] | None = None
) -> list[Prediction]:
    """One row a cell: max(host term, traffic / bandwidth) against its ITL. The host term is the eager floor,
    except for the engines in `host` (a captured step), which are predicted from their own host cost."""
    dtype = results.dtype
    rows = []
    for c in results.cells:
        context = c.prompt_tokens + c.new_tokens // 2
        own = (host or {}).get(c.engine)
        floor = own.ms if own is not None else machine.floor_ms
        traffic = predict_step_ms(arch, dtype, context, c.batch, machine.bandwidth_bytes_s, 0.0)[0]
        predicted, binding = predict_step_ms(arch, dtype, context, c.batch, machine.bandwidth_bytes_s, floor)
        ratio = c.itl_p50_ms / predicted
        rows.append(
            Prediction(
                c.engine,
                c.prompt_tokens,
                c.batch,
                context,
                traffic,
                floor,
                predicted,
                binding,
                c.itl_p50_ms,
                ratio,
                not_judged([c], machine if own is None else None) or points_at(ratio, binding, c.recomputes),
                own.source if own is not None else "eager floor",
            )
        )
    return rows


def cell_at(results: BenchResults, engine: str, prompt: int, batch: int = 1) -> Cell | None:
    return next((c for c in results.cells if (c.engine, c.prompt_tokens, c.batch) == (engine, prompt, batch)), None)


def _cells(results: BenchResults, engines: tuple[str, ...], prompt: int) -> list[Cell] | None:
    """The batch-1 cells of `engines` at `prompt`, in that order; None when one is missing."""
    cells = [c for e in engines if (c := cell_at(results, e, prompt)) is not None]
    return cells if len(cells) == len(engines) else None


def host_overhead_verdict(results: BenchResults) -> Verdict:
    """Part 1: at short prompts, removing host overhead (static) buys more than the cache did."""
    claim = "removing per-step host overhead is worth more at short prompts than the cache is"
    source = "Part 1, Bottleneck and Prediction"
    prompts = sorted({c.prompt_tokens for c in results.cells if c.batch == 1})
    trio = next(filter(None, (_cells(results, ("naive", "cached", "static"), p) for p in prompts)), None)
    if trio is None:
        return Verdict(claim, source, None, "needs naive, cached and static cells at one prompt length")
    naive, cached, static = trio
    if why := not_judged(trio):
        return Verdict(claim, source, None, why)
    short = naive.prompt_tokens
    cache_gain = naive.itl_p50_ms / cached.itl_p50_ms
    static_gain = cached.itl_p50_ms / static.itl_p50_ms
    numbers = HostOverheadGains(
        short,
        naive.itl_p50_ms,
        cached.itl_p50_ms,
        static.itl_p50_ms,
        cache_speedup=cache_gain,
        static_speedup=static_gain,
    )
    evidence = (
        f"at p{short}: the cache took the step from {naive.itl_p50_ms:.2f} to {cached.itl_p50_ms:.2f} ms "
        f"({cache_gain:.2f}x); a static step took it from {cached.itl_p50_ms:.2f} to "
        f"{static.itl_p50_ms:.2f} ms ({static_gain:.2f}x)"
    )
    return Verdict(claim, source, static_gain > cache_gain, evidence, numbers)


def batching_verdict(results: BenchResults, arch, machine: Machine | None, engine: str = "batched") -> Verdict:
    """Part 2: step time near flat in B, aggregate tok/s about B x single, up to the bandwidth's batch limit."""
    claim = "with B sequences per forward the step stays near flat and throughput grows about B x"
    source = "Part 2, Bottleneck and Prediction"
    if machine is None:
        return Verdict(claim, source, None, "needs this machine's bandwidth, which was not measured")
    cells = sorted((c for c in results.cells if c.engine == engine), key=lambda c: (c.prompt_tokens, c.batch))
    prompt = next(
        (c.prompt_tokens for c in cells if c.batch == 1 and sum(d.prompt_tokens == c.prompt_tokens for d in cells) > 1),
        None,
    )
    if prompt is None:
        return Verdict(claim, source, None, f"needs {engine} cells at batch 1 and larger at one prompt length")
    by_batch = {c.batch: c for c in cells if c.prompt_tokens == prompt}
    one = by_batch[1]
    if why := not_judged(list(by_batch.values())):  # every B: a contended batch misreads the scaling as much
        return Verdict(claim, source, None, f"{why} (at p{prompt})")
    rows = {
        b: BatchPoint(
            c.itl_p50_ms,
            step_ratio=c.itl_p50_ms / one.itl_p50_ms,
            tok_s=c.decode_tok_s,
            scaling=c.decode_tok_s / (b * one.decode_tok_s),
        )
        for b, c in sorted(by_batch.items())
    }
    dtype = results.dtype
    limit = batch_limit(arch, dtype, one.itl_p50_ms, prompt + one.new_tokens, machine.bandwidth_bytes_s)
    holds = {b: r.step_ratio <= FLAT and r.scaling >= LINEAR for b, r in rows.items()}
    parts = ", ".join(
        f"B={b}: {r.itl_ms:.2f} ms ({r.step_ratio:.2f}x), {r.tok_s:.0f} tok/s ({r.scaling:.0%} of B x single)"
        for b, r in rows.items()
    )
    impossible = [b for b, r in rows.items() if r.scaling > 1 + HOLDS]
    if impossible:
        worst = max(impossible, key=lambda b: rows[b].scaling)
        return Verdict(
            claim,
            source,
            None,
            f"not judged: at p{prompt}, B={worst} reads {rows[worst].scaling:.0%} of B x single, and a batch cannot "
            "beat B sequences run one at a time: a measurement error (a contended or noisy cell), not a finding. "
            + parts,
            BatchScaling(prompt, rows),
        )
    upto = max((b for b in rows if all(holds[c] for c in rows if c <= b)), default=1)
    reach = (
        "it holds at every B measured"
        if all(holds.values())
        else f"it holds up to B={upto} (step within {FLAT:.2f}x, throughput at least {LINEAR:.0%} of B x single)"
    )
    evidence = (
        f"at p{prompt}: {parts}; {reach}. Bandwidth allows B up to {limit.max_batch} within a "
        f"{one.itl_p50_ms:.2f} ms step at {machine.bandwidth_bytes_s / 1e9:.1f} GB/s"
    )
    numbers = BatchScaling(prompt, rows, holds_up_to_batch=upto, bandwidth_max_batch=limit.max_batch)
    return Verdict(claim, source, all(holds.values()), evidence, numbers)


@dataclass(frozen=True)
class Piece:
    name: str
    range: str
    median_us: float
    share_pct: float


@dataclass(frozen=True)
class OverheadReport:
    """`probe overhead`: the floor, and a cached decode step timed piece by piece (probe.capture.machine)."""

    model: str
    dtype: str
    device: str
    context_tokens: int
    floor_ms: float  # single-token forward, no cache, including the device drain
    floor_issue_ms: float  # until the forward call returned: the host's share
    floor_wait_ms: float  # the drain after it: the device's share
    launches_per_forward: int  # aten ops dispatched by the floor forward
    launch_kind: str
    host_us_per_launch: float
    cached_step_ms: float  # median decode step of the cached engine, timed piece by piece
    cached_launches_per_forward: int
    pieces: list[Piece] = field(default_factory=list)
    bookkeeping_ms: float = 0.0  # cache writes + read-back + mask-size query + mask construction
    gap_ms: float = 0.0  # cached step - floor: what Part 2 attributed to bookkeeping without measuring
    explained_pct: float = 0.0  # bookkeeping / gap
    # From a profiled cached decode (median step): how much of the step is host work and how much device
    # work. GPU: device busy vs wall, and the host's share = wall less the sync wait. CPU: there is no device;
    # the split is compute inside aten ops (ops + attention) against everything around them.
    step_dispatch: str = ""  # "launches" (kernel launches per decode step) | "top-level ops"
    step_dispatched: float = 0.0
    host_pct: float = 0.0
    device_pct: float | None = None
    compute_in_ops_pct: float = 0.0
    floor_unsynced_ms: float | None = None  # per forward, back to back with one sync at the end (None: old files)
    # a compiled forward's guard check at each call, on this model (CPU; probe.capture.machine.compiled_entry_ms)
    compiled_entry_ms: float | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> OverheadReport:
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in doc.items() if k in names}
        fields["pieces"] = [Piece(**p) for p in doc.get("pieces", [])]
        return cls(**fields)
