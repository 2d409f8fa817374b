"""The roofline of a step, from any decoder config: the bytes it must move, the FLOPs it must do, and what follows.

The model is the write-ups' (Part 1, "The floor every step sits on"; Part 2, "Where a decode step actually goes"):
a step reads every weight it uses once and the KV cache it attends to, so it takes at least traffic / bandwidth;
it does its FLOPs, so it takes at least flops / peak; the host spends a floor issuing its kernels; the step takes
the largest of these. `step_cost` is the one definition of a step's bytes and FLOPs; everything else here
(`decode_step`, `batch_limit`, the `probe roofline` report) is built on it.

A step runs B sequences (`sequences`), N new tokens summed over them (`new_tokens`: B for a decode step, the prompt
lengths for a prefill, both for a mixed step) and C positions already cached before the step, summed over them
(`context_tokens`). Both are split evenly over the sequences (as even as integers allow). For a sequence with c
cached and n new positions:

- **Weights**, read once a step: every parameter a pass streams (attention, dense MLPs, shared experts, routers,
  norms, SSM mixers, the LM head's matrix, tied or not), plus the routed experts the step touches. The token
  table and learned position tables are gathered, N rows, not read whole (not counted). MoE: a token runs top_k
  of E experts a layer, so N tokens touch between top_k (all route alike) and min(E, N x top_k) experts (each
  routes to its own set). `weight_bytes` takes the union bound min(E, N x top_k): exact at N = 1, and every
  expert once N x top_k >= E; `weight_bytes_min` is the floor.
- **KV**, per attention layer: the n new positions are written; attention then reads every position the new
  tokens attend to, the new ones included (engines and servers read them back from the cache): c + n on a full
  layer, min(c, w - 1) + n on a sliding layer of window w (token t sees positions p - w < q <= p). A position is
  the layer's cache width (2 x kv_heads x head_dim, or what the family keeps: MLA's kv_lora_rank +
  qk_rope_head_dim, falcon's K/V heads) x the KV dtype.
- **State**, per linear-attention / SSM layer: the constant state (conv window + recurrent state) is read once
  and written once per sequence. No per-token cache.
- **FLOPs**, TraceLens's convention (a GEMM is 2 x M x N x K: AMD-AGI/TraceLens, TraceLens/PerfModel/perf_model.py,
  GEMM.flops_func): linear 2 x N x (streamed parameters but the head) + 2 x N x top_k x (one expert's parameters)
  a MoE layer, and the LM head 2 x (logit positions) x its parameters, one logit position a sequence by default
  (what servers and these engines compute: logits_to_keep=1; pass logit_positions=N for a forward that computes
  every position's logits). Attention: a query attending k keys costs 2 x heads x (head_dim + v_head_dim) x k (QK^T
  and PV); a new token at position p attends p + 1 keys, at most w on a sliding layer.

Not modelled (named in each StepCost's notes where they apply): activations and their traffic, the softmax and
elementwise work, MLA's re-expansion of every cached latent through kv_b_proj (transformers 5.24 does it each
step; absorbed kernels do not), the SSM scan's FLOPs, routing imbalance.

Units: bytes are bytes (GB = 1e9, GiB = 2**30), times are ms unless the name says otherwise, FLOP/s are per second.
Nothing here reads weights or touches a GPU, except probe.capture.machine.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Literal

from engines.arch import SLIDING, Arch, ArchError, from_raw
from engines.configs import ModelError
from probe.analysis.records.files import model_raw
from probe.errors import ProbeError

__all__ = ["Arch", "StepCost", "arch_for", "step_cost"]

# The dtypes engines.models.DTYPES can build; and those a step's weights and KV cache may be read in: float8 too, an
# fp8 checkpoint's weights (its GEMMs recorded as c10::Float8_e4m3fn and kin) and 8-bit KV caches (vLLM's
# --kv-cache-dtype fp8).
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
STEP_DTYPE_BYTES = DTYPE_BYTES | {"float8": 1}
# The share of device memory weights plus KV cache may take: vLLM's default gpu_memory_utilization, "the fraction
# of GPU memory to be used for the model executor" (docs.vllm.ai, engine arguments). The rest is the CUDA context,
# activations, the allocator's slack.
MEMORY_FRACTION = 0.9
MAX_BATCH_SEARCHED = 2**31  # the batch bounds are searched up to here


def arch_for(spec: str) -> Arch:
    """The Arch of a preset name, a config.json or a model folder, read as plain JSON by
    probe.analysis.records.files.model_raw (no transformers, no torch)."""
    try:
        return from_raw(model_raw(spec))
    except (ArchError, ModelError) as e:
        raise ProbeError(str(e)) from None


def dtype_bytes(dtype: str) -> int:
    """Bytes an element of `dtype` takes; a one-line ProbeError for a dtype the roofline does not know."""
    if dtype not in STEP_DTYPE_BYTES:
        raise ProbeError(f"unknown dtype {dtype!r}: use one of {', '.join(STEP_DTYPE_BYTES)}")
    return STEP_DTYPE_BYTES[dtype]


# ---- parameters and the cache ------------------------------------------------------------------------------


def params(arch: Arch) -> int:
    """Parameters the model has; a tied embedding counts once (as `sum(p.numel())` counts it)."""
    return arch.params.total


def dense_params(arch: Arch) -> int:
    """Parameters every pass streams whole: all but the gathered tables and the routed experts, the head's matrix
    included (the token table itself when tied)."""
    p = arch.params
    return p.total - p.embedding - p.experts - p.lm_head + arch.head_params


def experts_touched(arch: Arch, tokens: int) -> tuple[int, int]:
    """(fewest, most) routed experts `tokens` tokens run in one MoE layer: top_k, and min(E, tokens x top_k)."""
    e = arch.experts
    if e is None or tokens < 1:
        return 0, 0
    return min(e.top_k, e.count), min(e.count, tokens * e.top_k)


def weights_bytes(arch: Arch, dtype: str, tokens: int | None = None) -> int:
    """Bytes one pass reads for weights: the dense parameters once, plus the routed experts `tokens` tokens may
    touch (union bound); every expert when `tokens` is None.

    The LM head matmul reads its whole vocab x hidden matrix, tied or not, so a tied matrix is read in full, once.
    Tables a pass only gathers from are left out: an untied input embedding and GPT-2's position table give a row
    a token, not the table (for the 1.5B preset that is 3 KiB against 3.09 GB).
    """
    e = arch.experts
    experts = 0 if e is None else (e.count if tokens is None else experts_touched(arch, tokens)[1])
    return (dense_params(arch) + experts * (e.layers * e.params_each if e else 0)) * dtype_bytes(dtype)


def resident_bytes(arch: Arch, dtype: str) -> int:
    """Bytes the weights occupy in memory (Part 1's '2.88 GiB of weights'), every expert included."""
    return params(arch) * dtype_bytes(dtype)


def kv_bytes_per_token(arch: Arch, dtype: str) -> int:
    """Cache bytes per position per sequence over every attention layer: the write-ups' 2 x L x kv_heads x head_dim
    x dtype for a dense model (what the layers keep: MLA's latent, falcon's heads; a sliding layer too, until its
    window is full)."""
    return arch.attention_layers * sum(arch.kv_width) * dtype_bytes(dtype)


def state_bytes(arch: Arch, dtype: str) -> int:
    """The constant state per sequence over every linear-attention / SSM layer."""
    return arch.state_layers * (arch.state.elements if arch.state else 0) * dtype_bytes(dtype)


def positions_read(arch: Arch, layer_type: str, positions: int, new: int) -> int:
    """Positions one sequence's attention reads in one layer when `new` of its `positions` are this step's (no
    window: every position, as `_attended` counts them)."""
    if layer_type == SLIDING and arch.window is not None:
        return min(positions, arch.window - 1 + new)
    return positions


def _kv_read_bytes(arch: Arch, dtype: str, positions: int, new: int) -> int:
    width = sum(arch.kv_width) * dtype_bytes(dtype)
    full = arch.attention_layers - arch.sliding_layers
    sliding = arch.sliding_layers * positions_read(arch, SLIDING, positions, new) if arch.sliding_layers else 0
    return width * (full * positions + sliding)


def cache_bytes(arch: Arch, dtype: str, positions: int, batch: int = 1) -> int:
    """Bytes B sequences of `positions` positions hold between steps: every position on a full layer, the last
    w - 1 on a sliding one (all the next token needs), the state of a linear layer."""
    return batch * (_kv_read_bytes(arch, dtype, positions, 0) + state_bytes(arch, dtype))


# ---- one step ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepCost:
    """What one step must move and compute (see the module docstring for every term)."""

    sequences: int
    new_tokens: int
    context_tokens: int
    logit_positions: int  # positions the LM head runs on
    weight_bytes: int  # dense weights once, plus the routed experts the step may touch (union bound)
    weight_bytes_min: int  # the same with every token routed alike (equal to weight_bytes without MoE)
    experts_touched: tuple[int, int] | None  # per MoE layer: (fewest, most)
    kv_read_bytes: int
    kv_write_bytes: int
    state_bytes: int  # linear-attention / SSM state, read and written
    kv_bytes: int  # kv_read + kv_write + state
    bytes: int  # weight_bytes + kv_bytes
    linear_flops: int
    attention_flops: int
    flops: int
    notes: tuple[str, ...]

    def traffic_ms(self, bandwidth_bytes_s: float) -> float:
        return self.bytes / bandwidth_bytes_s * 1e3

    def compute_ms(self, flops_s: float) -> float:
        return self.flops / flops_s * 1e3


def _sequences(sequences: int, new_tokens: int, context_tokens: int) -> list[tuple[int, int, int]]:
    """[(cached, new, how many sequences)]: sequence i gets one more new token while i < N mod B, and one more
    cached position while i < C mod B."""
    rn, rc = new_tokens % sequences, context_tokens % sequences
    qn, qc = new_tokens // sequences, context_tokens // sequences
    groups = [
        (qc + 1, qn + 1, min(rn, rc)),
        (qc, qn + 1, max(0, rn - rc)),
        (qc + 1, qn, max(0, rc - rn)),
        (qc, qn, sequences - max(rn, rc)),
    ]
    return [g for g in groups if g[2]]


def _attended(cached: int, new: int, window: int | None) -> int:
    """Sum over the new tokens of the keys each attends to: the token at position p sees min(p + 1, w)."""
    lo, hi = cached + 1, cached + new  # p + 1 for the first and the last new token
    if window is None or hi <= window:
        return (lo + hi) * new // 2
    if lo > window:
        return new * window
    return (lo + window) * (window - lo + 1) // 2 + (hi - window) * window


def step_cost(
    arch: Arch,
    dtype: str,
    sequences: int,
    new_tokens: int,
    context_tokens: int,
    *,
    kv_dtype: str | None = None,
    logit_positions: int | None = None,
) -> StepCost:
    """The bytes and FLOPs of one step of `sequences` sequences, `new_tokens` tokens processed in all and
    `context_tokens` positions cached before it in all (each split evenly). Weights are in `dtype`, the cache in
    `kv_dtype` (default: `dtype`); the LM head runs on `logit_positions` positions (default: one a sequence)."""
    if sequences < 1 or new_tokens < sequences or context_tokens < 0:
        raise ProbeError(
            f"a step needs at least one sequence, one new token a sequence and no negative context: got "
            f"sequences={sequences}, new_tokens={new_tokens}, context_tokens={context_tokens}"
        )
    kv_dtype = kv_dtype or dtype
    w, kvb = dtype_bytes(dtype), dtype_bytes(kv_dtype)
    logits = sequences if logit_positions is None else logit_positions
    e = arch.experts
    fewest, most = experts_touched(arch, new_tokens)
    expert_layer_bytes = e.layers * e.params_each * w if e else 0
    dense = dense_params(arch)

    kv_read = attended = 0
    full = arch.attention_layers - arch.sliding_layers
    for cached, new, count in _sequences(sequences, new_tokens, context_tokens):
        kv_read += count * _kv_read_bytes(arch, kv_dtype, cached + new, new)
        attended += count * (
            full * _attended(cached, new, None) + arch.sliding_layers * _attended(cached, new, arch.window)
        )
    kv_write = arch.attention_layers * sum(arch.kv_width) * kvb * new_tokens
    state = 2 * sequences * state_bytes(arch, kv_dtype)
    linear = 2 * new_tokens * (dense - arch.head_params) + 2 * logits * arch.head_params
    if e:
        linear += 2 * new_tokens * e.top_k * e.layers * e.params_each
    attention = 2 * arch.heads * (arch.head_dim + arch.v_head_dim) * attended
    weight, weight_min = dense * w + most * expert_layer_bytes, dense * w + fewest * expert_layer_bytes
    kv = kv_read + kv_write + state
    return StepCost(
        sequences=sequences,
        new_tokens=new_tokens,
        context_tokens=context_tokens,
        logit_positions=logits,
        weight_bytes=weight,
        weight_bytes_min=weight_min,
        experts_touched=(fewest, most) if e else None,
        kv_read_bytes=kv_read,
        kv_write_bytes=kv_write,
        state_bytes=state,
        kv_bytes=kv,
        bytes=weight + kv,
        linear_flops=linear,
        attention_flops=attention,
        flops=linear + attention,
        notes=_notes(arch, new_tokens, logits, fewest, most),
    )


def _notes(arch: Arch, tokens: int, logits: int, fewest: int, most: int) -> tuple[str, ...]:
    notes = [
        f"weights: {dense_params(arch):,} dense parameters read once (the LM head's {arch.head_params:,} included); "
        f"gathered tables not read whole",
        f"LM head on {logits} position(s)",
    ]
    if arch.sliding_layers and arch.window is not None:
        notes.append(
            f"sliding window {arch.window}: {arch.sliding_layers} of {arch.layers} layers read at most "
            f"{arch.window - 1} cached positions a sequence"
        )
    if arch.experts:
        e = arch.experts
        notes.append(
            f"MoE: {e.count} experts a layer in {e.layers} layers, top {e.top_k}: {tokens} token(s) touch "
            f"{fewest} to {most} a layer; bytes take {most} (union bound), weight_bytes_min {fewest}"
        )
    notes.extend(arch.notes)
    if arch.state_layers and arch.state:  # no State: a family counted on the meta device, whose notes say so
        notes.append(
            f"state: {arch.state_layers} of {arch.layers} layers keep {arch.state.elements:,} elements a sequence "
            f"(conv {arch.state.conv:,} + recurrent {arch.state.recurrent:,}), read and written once a step; "
            f"its scan FLOPs not modelled"
        )
    if not arch.attention_layers:
        notes.append("no attention layer: no per-token cache")
    notes.append("not modelled: activations, softmax and elementwise work")
    return tuple(notes)


# ---- the write-ups' decode step and what follows --------------------------------------------------------


@dataclass(frozen=True)
class TokenForwards:
    """Token forwards (one token through the model once) to generate L tokens after a P-token prompt."""

    naive: int  # no cache: step i feeds all P + i tokens, so sum over i < L of (P + i) = L*P + L(L-1)/2
    cached: int  # the prompt once, then one token a step: P + L (the write-ups' count)
    recompute_ratio: float  # naive / cached


def token_forwards(prompt: int, new_tokens: int) -> TokenForwards:
    naive = new_tokens * prompt + new_tokens * (new_tokens - 1) // 2
    cached = prompt + new_tokens
    return TokenForwards(naive, cached, naive / cached)


@dataclass(frozen=True)
class DecodeStep:
    """One decode step of `batch` sequences, each reading `context` positions (its cache, the new one included)."""

    context: int
    batch: int
    weight_bytes: int
    kv_read_bytes: int  # KV read, plus the state of linear layers
    traffic_bytes: int
    traffic_ms: float  # traffic / bandwidth: no step can be faster
    kv_read_ms: float
    ceiling_tok_s: float  # batch tokens per traffic_ms: the rate bandwidth alone allows
    flops: int


def decode_step(arch: Arch, dtype: str, context: int, batch: int, bandwidth_bytes_s: float) -> DecodeStep:
    """The write-ups' decode step: the weights once and the cache read, no writes (their traffic). `context` = 0
    reads weights only."""
    if context >= 1:
        cost = step_cost(arch, dtype, batch, batch, batch * (context - 1))
        weight, kv = cost.weight_bytes, cost.kv_read_bytes + cost.state_bytes // 2
        flops = cost.flops
    else:
        weight, kv, flops = weights_bytes(arch, dtype, batch), 0, 0
    traffic_ms = (weight + kv) / bandwidth_bytes_s * 1e3
    return DecodeStep(
        context=context,
        batch=batch,
        weight_bytes=weight,
        kv_read_bytes=kv,
        traffic_bytes=weight + kv,
        traffic_ms=traffic_ms,
        kv_read_ms=kv / bandwidth_bytes_s * 1e3,
        ceiling_tok_s=batch * 1e3 / traffic_ms,
        flops=flops,
    )


def fits(arch: Arch, dtype: str, positions: int, batch: int, memory_bytes: float) -> tuple[bool, float, float]:
    """(whether the weights plus B sequences' cache of `positions` fit, bytes needed, bytes usable): usable is
    MEMORY_FRACTION of the device's memory."""
    need = resident_bytes(arch, dtype) + cache_bytes(arch, dtype, positions, batch)
    usable = memory_bytes * MEMORY_FRACTION
    return need <= usable, need, usable


# What caps the batch: the step-time budget (its traffic fits the measured step), the memory, or compute (past the
# ridge the step stops being bandwidth-bound).
BatchBound = Literal["step budget", "memory", "compute"]


@dataclass(frozen=True)
class BatchLimit:
    """The largest batch of decode steps at `sequence_tokens` positions a sequence, and what binds it.

    Three bounds, each where its input is known: memory (weights plus every sequence's cache within
    MEMORY_FRACTION of the device's memory), compute (the smallest batch whose step is compute-bound: past it a
    larger batch adds step time, not throughput) and a step budget (the write-ups' traffic bound: weights plus
    cache reads within `step_ms` at the bandwidth; the budget is a measured step, never a default)."""

    step_ms: float | None
    sequence_tokens: int
    step_bytes: float | None  # what the bandwidth moves in step_ms
    cache_budget_bytes: float | None  # step_bytes less the weights, read once whatever the batch
    max_cached_positions: int | None  # cache_budget_bytes in positions (the write-ups' dense count)
    traffic_max_batch: int | None
    memory_bytes: float | None
    memory_max_batch: int | None
    compute_bound_batch: int | None  # the smallest batch whose step is compute-bound; None: none up to 2**31
    max_batch: int | None  # the least of the bounds known
    binding: BatchBound | None  # the bound that sets max_batch; None: none known


def _largest(ok, hi: int = MAX_BATCH_SEARCHED) -> int:
    """The largest b in [0, hi] with ok(b), for ok true at 0 and monotone (true, then false)."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def batch_limit(
    arch: Arch,
    dtype: str,
    step_ms: float | None,
    sequence_tokens: int,
    bandwidth_bytes_s: float,
    *,
    memory_bytes: float | None = None,
    peak_flops_s: float | None = None,
) -> BatchLimit:
    def traffic_ms(b: int) -> float:
        return decode_step(arch, dtype, sequence_tokens, b, bandwidth_bytes_s).traffic_ms if b else 0.0

    bounds: dict[BatchBound, int] = {}
    step_bytes = budget = positions = None
    if step_ms is not None:
        step_bytes = bandwidth_bytes_s * step_ms / 1e3
        budget = step_bytes - weights_bytes(arch, dtype, 1)
        per_position = kv_bytes_per_token(arch, dtype)
        positions = max(0, math.floor(budget / per_position)) if per_position else None
        bounds["step budget"] = _largest(lambda b: b == 0 or traffic_ms(b) <= step_ms)
    if memory_bytes is not None:
        bounds["memory"] = _largest(lambda b: b == 0 or fits(arch, dtype, sequence_tokens, b, memory_bytes)[0])
    compute_bound = None
    if peak_flops_s is not None:
        flops_ms = lambda b: decode_step(arch, dtype, sequence_tokens, b, bandwidth_bytes_s).flops / peak_flops_s * 1e3  # noqa: E731
        below = _largest(lambda b: b == 0 or flops_ms(b) < traffic_ms(b))
        if below < MAX_BATCH_SEARCHED:
            compute_bound = bounds["compute"] = below + 1
    binding = min(bounds, key=bounds.__getitem__, default=None)
    return BatchLimit(
        step_ms=step_ms,
        sequence_tokens=sequence_tokens,
        step_bytes=step_bytes,
        cache_budget_bytes=budget,
        max_cached_positions=positions,
        traffic_max_batch=bounds.get("step budget"),
        memory_bytes=memory_bytes,
        memory_max_batch=bounds.get("memory"),
        compute_bound_batch=compute_bound,
        max_batch=bounds[binding] if binding else None,
        binding=binding,
    )


StepBinding = Literal["host", "bandwidth"]  # which term of the step model binds


def predict_step_ms(
    arch: Arch, dtype: str, context: int, batch: int, bandwidth_bytes_s: float, floor_ms: float
) -> tuple[float, StepBinding]:
    """The write-ups' step model: max(host floor, traffic / bandwidth), and which term binds.

    Returns (predicted_ms, "host") when the floor is at least the traffic time (a tie goes to the host,
    since the GPU then waits on it), else (traffic_ms, "bandwidth").
    """
    traffic_ms = decode_step(arch, dtype, context, batch, bandwidth_bytes_s).traffic_ms
    return (floor_ms, "host") if floor_ms >= traffic_ms else (traffic_ms, "bandwidth")


# ---- the report ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    model: str
    dtype: str
    arch: Arch
    counted_by: str  # "formula (engines/arch.py)" or "meta-device build"
    prompt: int
    new_tokens: int
    batch: int
    context: int
    bandwidth_bytes_s: float
    bandwidth_source: str
    device: str | None  # the device table entry the memory and FLOP/s come from, if any
    peak_flops_s: float | None
    memory_bytes: float | None
    params: int
    params_by_kind: dict[str, int]
    weights_bytes: int  # read by one pass, every expert (see weights_bytes)
    resident_bytes: int  # held in memory
    kv_bytes_per_token: int
    cache_bytes: int  # B sequences' cache of P + L positions
    naive_token_forwards: int
    cached_token_forwards: int
    recompute_ratio: float
    decode_step: DecodeStep
    step_cost: StepCost  # the same decode step, every term (writes included)
    compute_ms: float | None
    binding_term: str  # "bandwidth" or "compute" (at the device's peaks)
    expert_bounds: dict | None  # MoE: bytes a decode step reads at B = 1 and with every expert touched
    fit: dict | None  # memory: {"fits", "need_bytes", "usable_bytes", "positions"}
    batch_limit: BatchLimit

    def to_json(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))  # tuples become lists


def roofline(
    arch: Arch,
    dtype: str,
    *,
    prompt: int,
    new_tokens: int,
    batch: int,
    context: int | None,
    bandwidth_bytes_s: float,
    bandwidth_source: str,
    step_ms: float | None,
    model: str = "",
    counted_by: str = "formula (engines/arch.py)",
    device: str | None = None,
    peak_flops_s: float | None = None,
    memory_bytes: float | None = None,
) -> Roofline:
    """Every figure for one configuration; `context` defaults to P + L, the cache in full."""
    context = prompt + new_tokens if context is None else context
    forwards = token_forwards(prompt, new_tokens)
    step = decode_step(arch, dtype, context, batch, bandwidth_bytes_s)
    cost = step_cost(arch, dtype, batch, batch, batch * max(context - 1, 0))
    compute_ms = cost.compute_ms(peak_flops_s) if peak_flops_s else None
    bounds = _expert_bounds(arch, dtype, cost, context)
    held = max(context, prompt + new_tokens)
    fit = _memory_fit(arch, dtype, held, batch, memory_bytes)
    return Roofline(
        model=model,
        dtype=dtype,
        arch=arch,
        counted_by=counted_by,
        prompt=prompt,
        new_tokens=new_tokens,
        batch=batch,
        context=context,
        bandwidth_bytes_s=bandwidth_bytes_s,
        bandwidth_source=bandwidth_source,
        device=device,
        peak_flops_s=peak_flops_s,
        memory_bytes=memory_bytes,
        params=params(arch),
        params_by_kind=arch.params.as_dict(),
        weights_bytes=weights_bytes(arch, dtype),
        resident_bytes=resident_bytes(arch, dtype),
        kv_bytes_per_token=kv_bytes_per_token(arch, dtype),
        cache_bytes=cache_bytes(arch, dtype, prompt + new_tokens, batch),
        naive_token_forwards=forwards.naive,
        cached_token_forwards=forwards.cached,
        recompute_ratio=forwards.recompute_ratio,
        decode_step=step,
        step_cost=cost,
        compute_ms=compute_ms,
        binding_term="compute" if compute_ms is not None and compute_ms > step.traffic_ms else "bandwidth",
        expert_bounds=bounds,
        fit=fit,
        batch_limit=batch_limit(
            arch, dtype, step_ms, context, bandwidth_bytes_s, memory_bytes=memory_bytes, peak_flops_s=peak_flops_s
        ),
    )


def _expert_bounds(arch: Arch, dtype: str, cost: StepCost, context: int) -> dict | None:
    """A MoE model's weight bytes a decode step reads at B = 1 and with every expert touched, and the experts a
    layer touches at the batch; None for a dense model."""
    if cost.experts_touched is None:
        return None
    one = step_cost(arch, dtype, 1, 1, max(context - 1, 0))
    return {
        "batch_1_weight_bytes": one.weight_bytes,
        "all_experts_weight_bytes": weights_bytes(arch, dtype),
        "experts_per_layer_at_batch": list(cost.experts_touched),
    }


def _memory_fit(arch: Arch, dtype: str, held: int, batch: int, memory_bytes: float | None) -> dict | None:
    """Whether the weights and `batch` caches of `held` positions fit the device's usable memory, and the bytes on
    each side; None when the device's memory is not known."""
    if memory_bytes is None:
        return None
    ok, need, usable = fits(arch, dtype, held, batch, memory_bytes)
    return {"fits": ok, "need_bytes": need, "usable_bytes": usable, "positions": held}
