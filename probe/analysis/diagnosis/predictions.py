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

from probe.analysis.diagnosis.evidence import Context
from probe.analysis.diagnosis.verdict import Diagnosis
from probe.analysis.diagnosis.what_if import predict_batch
from probe.analysis.records.results import BenchResults, Cell
from probe.analysis.roofline.formulas import batch_limit, predict_step_ms

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


@dataclass(frozen=True)
class Prediction:
    engine: str
    prompt_tokens: int
    batch: int
    context: int  # mean cached positions over the decode steps
    traffic_ms: float
    floor_ms: float
    predicted_ms: float
    binding: str  # "host" | "bandwidth"
    measured_ms: float  # ITL p50
    ratio: float  # measured / predicted
    points_at: str
    host_source: str = "eager floor"  # what floor_ms is: the eager floor, or the engine's own host cost (HostCost)


@dataclass(frozen=True)
class Verdict:
    claim: str
    source: str
    supported: bool | None  # None: this run has not measured what the claim needs
    evidence: str
    numbers: dict = field(default_factory=dict)


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
class Check:
    """A prediction the step diagnosis made from one engine's profiled trace, held against the cell that measures
    it: the ratio is measured / predicted (1 is exact)."""

    prediction: str
    predicted_ms: float | None
    measured_ms: float | None
    ratio: float | None
    evidence: str


def prediction_checks(results: BenchResults, diagnoses: dict[str, Diagnosis], prompt: int) -> list[Check]:
    """The diagnosis's what-ifs against measurement (probe.analysis.diagnosis.verdict, the same code `probe analyze`
    runs):
    the cached engine's trace predicts the static engine's step (capturing the forward in a graph), and B = 1
    predicts B = 2 (the batch what-if's model at B = 2)."""
    cached = diagnoses.get("cached")
    static, two = cell_at(results, "static", prompt), cell_at(results, "batched", prompt, 2)
    to_static, to_two = f"the cached trace predicts the static step at p{prompt}", f"B=1 predicts B=2 at p{prompt}"
    if cached is None or cached.bound == "cpu_only":
        why = "no profiled cached trace" if cached is None else "a CPU trace: no graph to capture, no GPU side"
        return [
            Check(to_static, None, None, None, f"not checked: {why}"),
            Check(to_two, None, None, None, f"not checked: {why}"),
        ]
    out = []
    w = next((w for w in cached.what_if if w.change == "capture the forward in a CUDA graph"), None)
    if static is None:
        out.append(Check(to_static, None, None, None, "not checked: no static cell at this prompt"))
    elif w is None:
        out.append(Check(to_static, None, None, None, "not checked: the diagnosis offers no capture (it buys nothing)"))
    else:
        out.append(_check(to_static, w.predicted_step_ms, static, w.arithmetic))
    if two is None:
        out.append(Check(to_two, None, None, None, "not checked: no batched B=2 cell"))
    else:
        out.append(
            _check(to_two, predict_batch(cached.evidence, 2, Context()) / 1e6, two, "host work stays, GPU work doubles")
        )
    return out


def _check(prediction: str, predicted_ms: float, cell: Cell, how: str) -> Check:
    measured = cell.itl_p50_ms
    note = " (the cell ran contended: the ratio is not a verdict)" if cell.contended else ""
    return Check(prediction, predicted_ms, measured, measured / predicted_ms, f"{how}; measured ITL p50{note}")


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
                points_at(ratio, binding, c.recomputes),
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
    short = naive.prompt_tokens
    cache_gain = naive.itl_p50_ms / cached.itl_p50_ms
    static_gain = cached.itl_p50_ms / static.itl_p50_ms
    numbers = {
        "prompt": short,
        "naive_itl_ms": naive.itl_p50_ms,
        "cached_itl_ms": cached.itl_p50_ms,
        "static_itl_ms": static.itl_p50_ms,
        "cache_speedup": cache_gain,
        "static_speedup": static_gain,
    }
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
    if one.contended:
        return Verdict(
            claim,
            source,
            None,
            f"not judged: the B=1 cell at p{prompt}, the reference every scaling is taken against, ran contended "
            f"({one.other_cpu_cores:.2f} cores of other work beside it)",
        )
    rows = {
        b: {
            "itl_ms": c.itl_p50_ms,
            "step_ratio": c.itl_p50_ms / one.itl_p50_ms,
            "tok_s": c.decode_tok_s,
            "scaling": c.decode_tok_s / (b * one.decode_tok_s),
        }
        for b, c in sorted(by_batch.items())
    }
    dtype = results.dtype
    limit = batch_limit(arch, dtype, one.itl_p50_ms, prompt + one.new_tokens, machine.bandwidth_bytes_s)
    holds = {b: r["step_ratio"] <= FLAT and r["scaling"] >= LINEAR for b, r in rows.items()}
    parts = ", ".join(
        f"B={b}: {r['itl_ms']:.2f} ms ({r['step_ratio']:.2f}x), {r['tok_s']:.0f} tok/s "
        f"({r['scaling']:.0%} of B x single)"
        for b, r in rows.items()
    )
    impossible = [b for b, r in rows.items() if r["scaling"] > 1 + HOLDS]
    if impossible:
        worst = max(impossible, key=lambda b: rows[b]["scaling"])
        return Verdict(
            claim,
            source,
            None,
            f"not judged: at p{prompt}, B={worst} reads {rows[worst]['scaling']:.0%} of B x single, and a batch cannot "
            "beat B sequences run one at a time: a measurement error (a contended or noisy cell), not a finding. "
            + parts,
            {"prompt": prompt, "by_batch": rows},
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
    numbers = {"prompt": prompt, "by_batch": rows, "holds_up_to_batch": upto, "bandwidth_max_batch": limit.max_batch}
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

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> OverheadReport:
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in doc.items() if k in names}
        fields["pieces"] = [Piece(**p) for p in doc.get("pieces", [])]
        return cls(**fields)
