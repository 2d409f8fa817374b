"""The write-ups' roofline beside each measured step of any trace: what the step had to move and compute, how long
that takes at the device's peaks, and where the measured step departs from it.

Inputs, each from the first place that has it:

- **the model**: a config (`--model SPEC`: a preset, a config.json or a model folder), read torch-free
  (probe.analysis.roofline.formulas.arch_for); the dtype from `--dtype`, else the dominant GEMM input type of the
  trace's recorded shapes, else bfloat16.
- **the device**: the trace's `deviceProperties` name, else `--device NAME` (probe.analysis.roofline.devices).
- **the tokens of a step**: the engine marker's own counts (vLLM's detailed `execute_*` sq/sk, SGLang's
  `bs=`/`toks=`: probe.analysis.ledger.steps.StepTokens); failing those, the recorded shapes (`record_shapes=True`: the
  first `aten::embedding` of the step gives [batch, tokens]); failing those, `--tokens`, `--batch` and `--context`.
  A flag given on the command line fills only what the trace does not say.

Figures per step (`StepRoofline`): the bytes and FLOPs of `formulas.step_cost` (weights once, KV read for every
sequence at its context and written for the new tokens), the traffic time (bytes / peak bandwidth) and the compute
time (FLOPs / peak dense FLOP/s of the dtype), the predicted GPU time (the larger: `binding_term` names it), the
measured GPU busy beside it, and their ratio (`efficiency` = predicted / measured: 1 is the roofline, 0.3 is three
times slower). `departure` says in one line where the measured step leaves the prediction and which term is wrong:
the write-ups' "one wrong term", done for any trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from probe.analysis.ledger.steps import StepTokens
from probe.analysis.ledger.types import StepLedger, TraceAnalysis
from probe.analysis.roofline.devices import Device
from probe.analysis.roofline.formulas import Arch, StepCost, step_cost
from probe.counts import MAX_COUNT
from probe.errors import ProbeError


@dataclass(frozen=True)
class TokenFlags:
    """What the command line says about the steps' tokens; it fills only what the trace does not."""

    tokens: int | None = None  # new tokens of a step, summed over its sequences
    batch: int | None = None  # sequences
    context: int | None = None  # positions cached before the step, per sequence


@dataclass(frozen=True)
class StepRoofline:
    sequences: int
    tokens: int  # new tokens, summed over the sequences
    context_tokens: int  # cached before the step, summed over the sequences
    tokens_from: str  # which source said so
    dtype: str
    device: str
    bytes: int
    flops: int
    traffic_ms: float
    compute_ms: float | None  # None when the device table has no peak for the dtype
    predicted_gpu_ms: float
    measured_gpu_ms: float | None  # the step's GPU busy; None on a CPU-only trace
    efficiency: float | None  # predicted / measured
    binding_term: Literal["traffic", "compute"]
    departure: str
    notes: tuple[str, ...]

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def resolve_tokens(step: StepLedger, shapes: StepTokens | None, flags: TokenFlags) -> tuple[int, int, int, str]:
    """(sequences, new tokens, cached context, where they came from) for one step; a one-line ProbeError when
    nothing says how many tokens the step processed."""
    sources: list[str] = []
    sequences, new, context = _tokens_said(step.tokens, shapes, sources)
    sequences, new, context = _tokens_flagged(flags, sequences, new, context, sources)
    if sequences is None:
        sequences = 1
    if new is None:
        new = sequences if step.kind == "decode" else None
    if new is None:
        raise ProbeError(
            f"step {step.name!r}: the trace does not say how many tokens it processed (no engine marker counts, no "
            "recorded shapes): give --tokens (and --batch, --context)"
        )
    if max(sequences, new, context or 0) > MAX_COUNT:
        raise ProbeError(
            f"step {step.name!r}: {sequences:,} sequences, {new:,} new tokens and {context or 0:,} cached are more "
            f"than a device could hold (over {MAX_COUNT:,}): no roofline"
        )
    return sequences, new, context or 0, ", ".join(dict.fromkeys(sources)) or "its kind (a decode step: 1 a sequence)"


_Counts = tuple[int | None, int | None, int | None]  # sequences, new tokens, cached context; None: not said yet


def _tokens_said(marker: StepTokens | None, shapes: StepTokens | None, sources: list[str]) -> _Counts:
    """What the trace says: the engine marker first, then the recorded shapes, each filling what the one before
    left unsaid; each one used is added to `sources`."""
    sequences = new = context = None
    for source in (marker, shapes):
        if source is None:
            continue
        if sequences is None:
            sequences = source.sequences
        if new is None and source.new_tokens is not None:
            new = source.new_tokens
        if context is None and source.context_tokens is not None:
            context = source.context_tokens
        sources.append(source.source)
    return sequences, new, context


def _tokens_flagged(
    flags: TokenFlags, sequences: int | None, new: int | None, context: int | None, sources: list[str]
) -> _Counts:
    """What the trace left unsaid, from --batch, --tokens and --context (a context a sequence: times the
    sequences); each flag used is added to `sources`."""
    if sequences is None and flags.batch is not None:
        sequences = flags.batch
        sources.append("--batch")
    if new is None and flags.tokens is not None:
        new = flags.tokens
        sources.append("--tokens")
    if context is None and flags.context is not None:
        context = flags.context * (sequences or 1)
        sources.append("--context")
    return sequences, new, context


def shape_tokens(analysis: TraceAnalysis) -> dict[int, StepTokens]:
    """Each step's tokens from the shapes it recorded (`record_shapes=True`), by position: the first
    `aten::embedding` on the step's thread in its window, whose indices [batch, tokens] give `batch` sequences of
    `tokens` new tokens each (probe.analysis.ledger.phases, read once by the ledger: `StepLedger.recorded_tokens`).
    Steps without one, or whose indices are not two counts of at least 1, are left out."""
    return {s.position: s.recorded_tokens for s in analysis.steps if s.recorded_tokens is not None}


def step_roofline(
    step: StepLedger,
    arch: Arch,
    dtype: str,
    device: Device,
    on_gpu: bool,
    shapes: StepTokens | None = None,
    flags: TokenFlags | None = None,
) -> StepRoofline:
    sequences, new, context, source = resolve_tokens(step, shapes, flags or TokenFlags())
    cost = step_cost(arch, dtype, sequences, max(new, sequences), context)
    traffic = cost.traffic_ms(device.memory_bandwidth_bytes_s)
    peak = device.flops_s(dtype)
    compute = cost.compute_ms(peak) if peak else None
    binding: Literal["traffic", "compute"] = "compute" if compute is not None and compute > traffic else "traffic"
    predicted = max(traffic, compute or 0.0)
    measured = step.gpu_busy_ns / 1e6 if on_gpu else None
    efficiency = predicted / measured if measured else None
    notes = cost.notes if peak else (*cost.notes, f"no {dtype} peak FLOP/s for {device.name}: compute not bounded")
    return StepRoofline(
        sequences=sequences,
        tokens=new,
        context_tokens=context,
        tokens_from=source,
        dtype=dtype,
        device=device.name,
        bytes=cost.bytes,
        flops=cost.flops,
        traffic_ms=traffic,
        compute_ms=compute,
        predicted_gpu_ms=predicted,
        measured_gpu_ms=measured,
        efficiency=efficiency,
        binding_term=binding,
        departure=_departure(step, cost, traffic, compute, predicted, measured, device, dtype),
        notes=notes,
    )


def _departure(step: StepLedger, cost: StepCost, traffic, compute, predicted, measured, device: Device, dtype) -> str:
    """Where the measured step leaves the prediction, and which term is wrong."""
    binding = "compute" if compute is not None and compute > traffic else "traffic"
    terms = f"traffic {cost.bytes / 1e9:.3f} GB / {device.memory_bandwidth_bytes_s / 1e12:.2f} TB/s = {traffic:.3f} ms"
    if compute is not None:
        peak = device.flops_s(dtype) or 0.0
        terms += f", compute {cost.flops / 1e12:.3f} TFLOP / {peak / 1e12:.0f} TFLOP/s = {compute:.3f} ms"
    if measured is None:
        return f"predicted GPU {predicted:.3f} ms ({terms}); no GPU side was measured"
    if not measured:
        return f"predicted GPU {predicted:.3f} ms ({terms}); no GPU work ran in this step, nothing to hold against it"
    host = step.host_work_ns / 1e6
    if host > measured:
        return (
            f"predicted GPU {predicted:.3f} ms ({terms}; {binding} binds), measured GPU busy {measured:.3f} ms "
            f"({predicted / measured:.0%} of the roofline), but the step is the host's {host:.3f} ms of work: the "
            "host term is what departs, not the GPU's"
        )
    return (
        f"predicted GPU {predicted:.3f} ms ({terms}; {binding} binds), measured GPU busy {measured:.3f} ms: the "
        f"kernels run at {predicted / measured:.0%} of the roofline; the GPU term departs by "
        f"{measured - predicted:.3f} ms (the per-op roofline names which ops)"
    )


def gpu_ms_at(arch: Arch, dtype: str, device: Device, r: StepRoofline) -> Callable[[int], float]:
    """The roofline's GPU time of this step with its sequences multiplied by b: for the diagnosis's batch what-if."""

    def at(b: int) -> float:
        cost = step_cost(arch, dtype, r.sequences * b, max(r.tokens, r.sequences) * b, r.context_tokens * b)
        peak = device.flops_s(dtype)
        return max(cost.traffic_ms(device.memory_bandwidth_bytes_s), cost.compute_ms(peak) if peak else 0.0)

    return at


def rooflines(
    analysis: TraceAnalysis,
    arch: Arch,
    dtype: str,
    device: Device,
    shapes: dict[int, StepTokens] | None = None,
    flags: TokenFlags | None = None,
) -> dict[int, StepRoofline]:
    """Every step's roofline, by position."""
    shapes = shapes or {}
    return {
        s.position: step_roofline(s, arch, dtype, device, analysis.on_gpu, shapes.get(s.position), flags)
        for s in analysis.steps
    }
