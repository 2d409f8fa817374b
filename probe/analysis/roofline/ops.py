"""The roofline of every op that launched kernels, from the shapes a trace recorded (`record_shapes=True`).

Each GPU op (kernel, memcpy, memset: cuBLASLt's GEMM issues a memset before its kernel) belongs to the cpu_op whose
call launched it: the innermost cpu_op around its
launch call on that call's thread, walked up to the nearest op that has a model here (an `aten::linear` launches
its GEMM through `aten::mm`; an SDPA launches through `_flash_attention_forward`, which takes the SDPA's shapes).
One call's kernel time is the sum of its GPU ops' durations. Per (op, input shapes) over the trace: the count of
calls, their FLOPs and bytes (per call), the kernel time (total, and the median over calls), the achieved TFLOP/s
and TB/s at that median, the arithmetic intensity, and the bound against the device's peaks (`compute` when the
intensity is at or past the ridge point peak FLOP/s / peak bandwidth, else `memory`) with `roof_pct`, the share of
the roofline's time the median call reaches.

Conventions are TraceLens's (AMD-AGI/TraceLens, TraceLens/PerfModel/perf_model.py), so the figures can be held side
by side: a GEMM is 2·M·N·K FLOPs, a bias adds M·N, and its bytes read A and B once, write C once, and read a bias
of N, at the inputs' element size (`name2bpe`); attention (the SDPA family, [B, H, N, d] inputs) is 2·B·H·Nq·Nkv·d
for QK^T and as much for PV, halved when causal with Nq = Nkv, and reads Q, K, V and writes O once; elementwise and
norm ops are one FLOP an output element and move their inputs and output once. Three kinds move less than that,
and are modelled by what they touch: a gather (`index_select`, `embedding`) reads the rows it selects, not the
table; a reduction (`mean`, `sum`, `argmax`) writes its reduced output, not one as large as its input; an op that
overwrites its first input (`copy_`, `fill_`, `zero_`) writes it without reading it. Ops without a model are listed by
kernel time with `model` None: named, never guessed.

A median call faster than the roofline allows is `over_roof`, and `over_roof_why` says which peak it passed and what
that can mean (the caches, a lower precision, a model counting more than the kernels do): never plotted without a
word. `coverage` says how much of the trace's GPU work the listed ops hold.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from probe.analysis.intervals import distinct_pairs, first_ending_by, nearest_marked
from probe.analysis.ledger.gpu import Attribution
from probe.analysis.ledger.host import thread_ops
from probe.analysis.roofline.devices import Device
from probe.analysis.trace import Shapes, Trace
from probe.counts import MAX_COUNT, signed_count

# bytes per element by the type torch.profiler records (TraceLens's name2bpe)
BPE = {
    "double": 8,
    "long int": 8,
    "float": 4,
    "int": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e5m2fnuz": 1,
    "unsigned char": 1,
    "signed char": 1,
    "bool": 1,
}
DTYPE = {"c10::BFloat16": "bfloat16", "c10::Half": "float16", "float": "float32", "double": "float64"}
DTYPE |= {k: "float8" for k in BPE if "Float8" in k}

ELEMENTWISE = {
    "aten::add", "aten::add_", "aten::sub", "aten::mul", "aten::mul_", "aten::div", "aten::div_", "aten::silu",
    "aten::silu_", "aten::gelu", "aten::relu", "aten::sigmoid", "aten::tanh", "aten::neg", "aten::exp", "aten::pow",
    "aten::rsqrt", "aten::sqrt", "aten::clone", "aten::where", "aten::cat", "aten::_to_copy", "aten::softmax",
    "aten::_softmax", "aten::cumsum",
}  # fmt: skip
# the positional inputs of an elementwise op's functional form: a tensor recorded past them is its out= tensor
ARGS = {"aten::add": 3, "aten::sub": 3, "aten::mul": 2, "aten::div": 2, "aten::pow": 2, "aten::where": 3}
ARGS |= {name: 1 for name in ("aten::silu", "aten::relu", "aten::sigmoid", "aten::tanh", "aten::neg", "aten::exp")}
ARGS |= {"aten::rsqrt": 1, "aten::sqrt": 1, "aten::gelu": 2}
OVERWRITES = {"aten::copy_", "aten::fill_", "aten::zero_"}  # the first input is the output: written, never read
# where each reduction takes `dim` in its schema; its output is as wide as the dims it keeps
REDUCTIONS = {"aten::mean": 1, "aten::sum": 1, "aten::argmax": 1, "aten::amax": 1, "aten::amin": 1}
INDEX_BPE = 8  # a reduction's index output (argmax) is int64
NORMS = {"aten::rms_norm", "aten::_fused_rms_norm", "aten::layer_norm", "aten::native_layer_norm"}


@dataclass(frozen=True)
class Cost:
    flops: int
    bytes: int
    dtype: str | None
    model: str  # which formula


def _prod(dims) -> int:
    return math.prod(int(d) for d in dims) if dims else 1


def _bpe(types: tuple[str, ...], i: int) -> int | None:
    return BPE.get(types[i]) if i < len(types) else None


def _gemm(m: int, n: int, k: int, bias: bool, bpe: int | None, model: str, dtype) -> Cost | None:
    if bpe is None:
        return None
    flops = 2 * m * n * k + (m * n if bias else 0)
    return Cost(flops, (m * k + k * n + m * n + (n if bias else 0)) * bpe, dtype, model)


def _mm(s: Shapes) -> Cost | None:
    (m, k), (_, n) = s.dims[0], s.dims[1]
    return _gemm(m, n, k, False, _bpe(s.types, 0), "gemm 2MNK", DTYPE.get(s.types[0]))


def _addmm(s: Shapes) -> Cost | None:
    (m, k), (_, n) = s.dims[1], s.dims[2]
    return _gemm(m, n, k, True, _bpe(s.types, 1), "gemm 2MNK + MN bias", DTYPE.get(s.types[1]))


def _linear(s: Shapes) -> Cost | None:
    x, w = s.dims[0], s.dims[1]
    bias = len(s.dims) > 2 and bool(s.dims[2])
    return _gemm(_prod(x[:-1]), w[0], x[-1], bias, _bpe(s.types, 0), "gemm 2MNK (linear)", DTYPE.get(s.types[0]))


def _bmm(s: Shapes) -> Cost | None:
    (b, m, k), (_, _, n) = s.dims[0], s.dims[1]
    c = _gemm(m, n, k, False, _bpe(s.types, 0), "gemm 2BMNK", DTYPE.get(s.types[0]))
    return None if c is None else Cost(c.flops * b, c.bytes * b, c.dtype, c.model)


# where each SDPA op takes is_causal, in its schema (aten/src/ATen/native/native_functions.yaml)
IS_CAUSAL = {
    "aten::scaled_dot_product_attention": 5,  # query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa
    "aten::_scaled_dot_product_flash_attention": 4,  # query, key, value, dropout_p, is_causal, return_debug_mask
    "aten::_scaled_dot_product_efficient_attention": 6,  # ..., attn_bias, compute_log_sumexp, dropout_p, is_causal
    "aten::_scaled_dot_product_cudnn_attention": 6,
}


def _sdpa(s: Shapes, causal_at: int) -> Cost | None:
    (b, hq, nq, d), (_, hkv, nkv, _), (_, _, _, dv) = s.dims[0], s.dims[1], s.dims[2]
    causal = s.concrete is not None and len(s.concrete) > causal_at and s.concrete[causal_at].lower() == "true"
    bpe = _bpe(s.types, 0)
    if bpe is None:
        return None
    flops = 2 * b * hq * nq * nkv * d + 2 * b * hq * nq * nkv * dv
    if causal and nq == nkv:
        flops //= 2
    moved = (b * nq * hq * d + b * nkv * hkv * d + b * nkv * hkv * dv + b * nq * hq * dv) * bpe
    return Cost(flops, moved, DTYPE.get(s.types[0]), "attention 4BHNqNkvd" + (" causal" if causal else ""))


def _elementwise(s: Shapes, args: int | None = None) -> Cost | None:
    """Inputs read once, the output written once, a FLOP an output element. A tensor recorded past the op's `args`
    positional inputs is its out= tensor (mul.out(self, other, *, out)): the output, written, not read."""
    tensors = [(i, d, t) for i, d, t in _tensors(s) if d]
    read = [(d, t) for i, d, t in tensors if args is None or i < args]
    if not read:
        return None
    given = [(d, t) for i, d, t in tensors if args is not None and i >= args]
    out, kind = given[0] if given else (max((d for d, _ in read), key=_prod), read[0][1])
    moved = sum(_prod(d) * BPE[t] for d, t in read) + _prod(out) * BPE[kind]
    return Cost(_prod(out), moved, DTYPE.get(read[0][1]), "by bytes: inputs and output once, a FLOP an element")


def _overwrite(s: Shapes) -> Cost | None:
    """copy_(self, src), fill_(self, value), zero_(self): self written once, every other tensor read once."""
    tensors = _tensors(s)
    if not tensors or tensors[0][0] != 0:
        return None
    _, dims, kind = tensors[0]
    out = _prod(dims)
    read = sum(_prod(d) * BPE[t] for _, d, t in tensors[1:])
    return Cost(out, read + out * BPE[kind], DTYPE.get(kind), "overwrite: its sources read, self written once")


def _reduction(s: Shapes, dim_at: int, index: bool = False) -> Cost | None:
    """The input read once, the reduced output written once: as wide as the dims kept (the recorded `dim`; every
    dim when none is recorded)."""
    tensors = _tensors(s)
    if not tensors or tensors[0][0] != 0:
        return None
    _, dims, kind = tensors[0]
    n = _prod(dims)
    reduced = _dims_of(s.concrete[dim_at] if s.concrete and len(s.concrete) > dim_at else "", len(dims))
    kept = n // _prod(dims[d] for d in reduced) if reduced and n else 1
    written = kept * (INDEX_BPE if index else BPE[kind])
    return Cost(
        n, n * BPE[kind] + written, DTYPE.get(kind), "reduction: the input read once, its reduced output written"
    )


def _gather(s: Shapes, table_at: int, index_at: int, dim_at: int | None) -> Cost | None:
    """index_select(self, dim, index), embedding(weight, indices): the rows selected are read, not the table; the
    indices read; the output (those rows) written."""
    table, index = s.dims[table_at], s.dims[index_at]
    kind, index_kind = s.types[table_at], s.types[index_at]
    if kind not in BPE or index_kind not in BPE or not table:
        return None
    dim = 0 if dim_at is None else _dim(s.concrete[dim_at] if s.concrete else "", len(table))
    out = _prod(index) * (_prod(table) // table[dim] if table[dim] else 0)
    moved = 2 * out * BPE[kind] + _prod(index) * BPE[index_kind]
    return Cost(out, moved, DTYPE.get(kind), "gather: the rows selected read (not the table), the indices, the output")


def _tensors(s: Shapes) -> list[tuple[int, tuple, str]]:
    """(position, dims, type) of each recorded tensor input."""
    return [
        (i, d, t) for i, (d, t) in enumerate(zip(s.dims, s.types, strict=False)) if t in BPE and isinstance(d, tuple)
    ]


def _dim(text: str, rank: int) -> int:
    """A recorded `dim` (Concrete Inputs' text), made non-negative; 0 when it was not recorded."""
    value = signed_count(text)
    return value % rank if value is not None and rank else 0


def _dims_of(text: str, rank: int) -> tuple[int, ...]:
    """A recorded `dim` that may be one int or a list ("[-1]"), each made non-negative; () when not recorded."""
    try:
        value = json.loads(text) if text else None
    except (ValueError, RecursionError):
        return ()
    values = value if isinstance(value, list) else [] if value is None else [value]
    if not rank or not all(isinstance(v, int) for v in values):
        return ()
    return tuple(v % rank for v in values)


MODELS: dict[str, Callable[[Shapes], Cost | None]] = {
    "aten::mm": _mm,
    "aten::addmm": _addmm,
    "aten::linear": _linear,
    "aten::bmm": _bmm,
    **{name: functools.partial(_sdpa, causal_at=at) for name, at in IS_CAUSAL.items()},
    **{name: functools.partial(_elementwise, args=ARGS.get(name)) for name in ELEMENTWISE | NORMS},
    **{name: _overwrite for name in OVERWRITES},
    **{name: functools.partial(_reduction, dim_at=at, index=name == "aten::argmax") for name, at in REDUCTIONS.items()},
    "aten::index_select": functools.partial(_gather, table_at=0, index_at=2, dim_at=1),
    "aten::embedding": functools.partial(_gather, table_at=0, index_at=1, dim_at=None),
}


def cost_of(name: str, shapes: Shapes | None) -> Cost | None:
    """The op's FLOPs and bytes per call from its recorded inputs; None when it has no model or the shapes do not fit
    the model (a TensorList, a missing type)."""
    model = MODELS.get(name)
    if model is None or shapes is None or not all(_possible(d) for d in shapes.dims):
        return None
    try:
        return model(shapes)
    except (TypeError, ValueError, IndexError):
        return None


# A tensor a device could hold: each size a count, and under 2**40 elements (a TiB of bytes, beyond any card's
# memory). Shapes past these are not a recording of real work; their op gets no roofline rather than figures that are
# negative or too large for a float.
MAX_ELEMENTS = 2**40


def _possible(dims) -> bool:
    """Whether one recorded input's sizes (a tuple of ints, a TensorList's tuple of those, or () for none) are a
    tensor a device could hold."""
    if not isinstance(dims, tuple):
        return False
    if all(isinstance(d, tuple) for d in dims):
        return all(_possible(d) for d in dims)
    if not all(type(d) is int and 0 <= d <= MAX_COUNT for d in dims):
        return False
    return math.prod(dims) <= MAX_ELEMENTS


OpBound = Literal["compute", "memory"] | None  # against the device's ridge; None without a device or a model


@dataclass(frozen=True)
class OpRoofline:
    """One op at one set of input shapes, over the trace (or one step)."""

    op: str
    shapes: str  # the recorded Input Dims, as text
    dtype: str | None
    count: int  # calls
    flops: int | None  # per call
    bytes: int | None  # per call
    kernel_us_total: float
    kernel_us_median: float  # over calls
    tflops_s_median: float | None  # at the median call
    tb_s_median: float | None
    intensity: float | None  # FLOPs / byte
    bound: OpBound  # against the device's ridge; None without a device or a model
    roof_pct: float | None  # the roofline's time over the median call's: 100 is the roof
    model: str | None  # the formula, None when not modelled
    over_roof: bool = False  # the median call beat the roofline: roof_pct past 100
    over_roof_why: str | None = None  # which peak it passed, and what that can mean

    def to_json(self) -> dict:
        return dict(vars(self))


def _owners(trace: Trace, gpu: Attribution) -> np.ndarray:
    """Per GPU op: the row of the cpu_op that owns it (its launch's innermost op, walked up to a modelled one);
    -1 without a launch or an op around it."""
    owner = np.full(len(gpu.op_rows), -1, np.int64)
    launch = gpu.op_launch
    known = np.flatnonzero(launch >= 0)
    if not len(known):
        return owner
    pairs = distinct_pairs(trace.pid[launch[known]], trace.tid[launch[known]])
    modelled = np.array([n in MODELS for n in trace.names], bool)
    for pid, tid in pairs.T.tolist():
        ops = thread_ops(trace, pid, tid)
        if not len(ops.rows):
            continue
        sel = known[(trace.pid[launch[known]] == pid) & (trace.tid[launch[known]] == tid)]
        t = trace.ts_ns[launch[sel]]
        latest = np.searchsorted(ops.start, t, side="right") - 1  # the latest op starting at or before the call
        found = first_ending_by(ops.parent, ops.end, latest, t)  # walked out until an op holds the call
        near = nearest_marked(ops.parent, modelled[trace.name_id[ops.rows]])  # then up to the nearest modelled op
        best = np.where(found >= 0, near[np.maximum(found, 0)], -1)
        best = np.where(best >= 0, best, found)
        owner[sel] = np.where(best >= 0, ops.rows[np.maximum(best, 0)], -1)
    return owner


@dataclass(frozen=True)
class OpCalls:
    """Every op call that launched GPU work, by the step its launches fell in: the owners of the trace's GPU ops
    found once (`_owners`), so that the whole trace's table and each step's select from them instead of walking
    the trace again."""

    row: np.ndarray  # the cpu_op's row
    step: np.ndarray  # the step position its GPU ops were launched in; -1 outside every step
    kernel_ns: np.ndarray  # the durations of its GPU ops in that step, summed


def op_calls(trace: Trace, gpu: Attribution) -> OpCalls:
    """Each (step, owning op) of the trace's GPU ops, with its kernel time."""
    owner = _owners(trace, gpu)
    sel = owner >= 0
    step = gpu.op_step[sel].astype(np.int64)
    n = max(len(trace), 1)
    key = (step + 1) * n + owner[sel]  # one number a (step, op row): (steps + 1) x rows, far under 2**63
    pairs, inverse = np.unique(key, return_inverse=True)
    ns = np.bincount(inverse, weights=trace.dur_ns[gpu.op_rows[sel]], minlength=len(pairs)).astype(np.int64)
    return OpCalls(pairs % n, pairs // n - 1, ns)


def op_rooflines(trace: Trace, gpu: Attribution, device: Device | None = None) -> list[OpRoofline]:
    """Per (op, shapes) over every GPU op of the trace, largest kernel time first."""
    return trace_op_rooflines(trace, op_calls(trace, gpu), device)


def trace_op_rooflines(trace: Trace, calls: OpCalls, device: Device | None = None) -> list[OpRoofline]:
    """Per (op, shapes) over the whole trace, largest kernel time first: a call's GPU ops in every step counted."""
    rows, inverse = np.unique(calls.row, return_inverse=True)
    ns = np.bincount(inverse, weights=calls.kernel_ns, minlength=len(rows)).astype(np.int64)
    return _tables(trace, rows, ns, np.zeros(len(rows), np.int64), device).get(0, [])


def step_op_rooflines(
    trace: Trace, calls: OpCalls, device: Device | None = None, top: int | None = None
) -> dict[int, list[OpRoofline]]:
    """Per step position, per (op, shapes) over that step's GPU ops, largest kernel time first (the first `top`)."""
    mine = calls.step >= 0
    return _tables(trace, calls.row[mine], calls.kernel_ns[mine], calls.step[mine], device, top)


@dataclass(frozen=True)
class _Groups:
    """Calls grouped by (scope, op name, shapes), one entry a group."""

    scope: np.ndarray
    name: np.ndarray  # name id
    shape: np.ndarray  # shape id, -1 for none
    count: np.ndarray  # calls
    total_ns: np.ndarray
    median_ns: np.ndarray  # np.median's: the middle call, or the mean of the two middle ones
    first_row: np.ndarray  # the earliest call's row: ties in the ordering fall to the group seen first


def _groups(trace: Trace, rows: np.ndarray, ns: np.ndarray, scope: np.ndarray) -> _Groups:
    name, shape = trace.name_id[rows].astype(np.int64), trace.shape_id[rows].astype(np.int64)
    order = np.lexsort((ns, shape, name, scope))  # a group's calls together, shortest first: the median mid-way
    rows, ns, scope, name, shape = rows[order], ns[order], scope[order], name[order], shape[order]
    new = (scope[1:] != scope[:-1]) | (name[1:] != name[:-1]) | (shape[1:] != shape[:-1])
    first = np.flatnonzero(np.concatenate(([True], new)))
    count = np.diff(np.append(first, len(rows)))
    mid = first + count // 2
    low = np.where(count % 2, mid, mid - 1)
    median = (ns[low].astype(np.float64) + ns[mid].astype(np.float64)) / 2
    total = np.add.reduceat(ns, first)
    return _Groups(scope[first], name[first], shape[first], count, total, median, np.minimum.reduceat(rows, first))


def _tables(
    trace: Trace, rows: np.ndarray, ns: np.ndarray, scope: np.ndarray, device: Device | None, top: int | None = None
) -> dict[int, list[OpRoofline]]:
    """Per scope (a step, or 0 for the trace), its calls grouped by (op, shapes), every scope in one pass, ordered
    by (-total, op, shapes); only the groups kept (the first `top` of each scope) are made into rows."""
    if not len(rows):
        return {}
    g = _groups(trace, rows, ns, scope)
    what = _what(trace, g.name, g.shape)
    rank = {key: i for i, key in enumerate(sorted({w[:2] for w in what.values()}))}  # by (op, shapes text)
    g_rank = np.array([rank[what[k][:2]] for k in zip(g.name.tolist(), g.shape.tolist(), strict=True)], np.int64)
    ranked = np.lexsort((g.first_row, g_rank, -(g.total_ns / 1e3), g.scope))
    if top is not None:
        scope_start = np.searchsorted(g.scope[ranked], g.scope[ranked], side="left")
        ranked = ranked[np.arange(len(ranked)) - scope_start < top]
    out: dict[int, list[OpRoofline]] = {}
    for i in ranked.tolist():
        op, _, shapes, cost = what[(int(g.name[i]), int(g.shape[i]))]
        entry = _entry(op, shapes, cost, int(g.count[i]), int(g.total_ns[i]), float(g.median_ns[i]), device)
        out.setdefault(int(g.scope[i]), []).append(entry)
    return out


def _what(trace: Trace, names: np.ndarray, shapes: np.ndarray) -> dict:
    """Per distinct (name id, shape id): the op's name, its shapes as text, its Shapes and its cost, made once."""
    out = {}
    for n, s in set(zip(names.tolist(), shapes.tolist(), strict=True)):
        name = trace.names[n]
        recorded = trace.shapes[s] if s >= 0 else None
        text = str(list(recorded.dims)) if recorded is not None else ""
        out[(n, s)] = (name, text, recorded, cost_of(name, recorded))
    return out


def _entry(
    name: str, shapes: Shapes | None, cost: Cost | None, count: int, total_ns: int, median_ns: float, device
) -> OpRoofline:
    tflops = tbs = intensity = roof = why = None
    bound: OpBound = None
    if cost is not None and median_ns > 0:
        tflops = cost.flops / median_ns / 1e3  # FLOP/ns = 1e9 FLOP/s; / 1e3 more for TFLOP/s
        tbs = cost.bytes / median_ns / 1e3
        intensity = cost.flops / cost.bytes if cost.bytes else None
        peak = device.flops_s(cost.dtype) if device is not None and cost.dtype else None
        if device is not None and peak and intensity is not None:
            ridge = peak / device.memory_bandwidth_bytes_s
            bound = "compute" if intensity >= ridge else "memory"
            roof_ns = max(cost.flops / peak, cost.bytes / device.memory_bandwidth_bytes_s) * 1e9
            roof = 100 * roof_ns / median_ns
            why = _why_over(cost, device, peak, bound, tflops, tbs) if roof > 100 else None
    return OpRoofline(
        op=name,
        shapes=str(list(shapes.dims)) if shapes is not None else "",
        dtype=cost.dtype if cost else None,
        count=count,
        flops=cost.flops if cost else None,
        bytes=cost.bytes if cost else None,
        kernel_us_total=total_ns / 1e3,
        kernel_us_median=median_ns / 1e3,
        tflops_s_median=tflops,
        tb_s_median=tbs,
        intensity=intensity,
        bound=bound,
        roof_pct=roof,
        model=cost.model if cost else None,
        over_roof=why is not None,
        over_roof_why=why,
    )


def _why_over(cost: Cost, device: Device, peak: float, bound: str, tflops: float, tbs: float) -> str:
    """Why a median call can beat the roofline: which peak it passed, and what that can mean."""
    if bound == "memory":
        bandwidth = device.memory_bandwidth_bytes_s / 1e12
        return (
            f"{tbs:.2f} TB/s is past {device.name}'s {bandwidth:.2f} TB/s of memory bandwidth: its "
            f"{cost.bytes / 1e6:,.2f} MB a call may be served by the caches (L2, Infinity Cache) rather than "
            f"memory, or the byte model ({cost.model}) counts more than its kernels move"
        )
    return (
        f"{tflops:.1f} TFLOP/s is past {device.name}'s {cost.dtype} peak of {peak / 1e12:.1f} TFLOP/s: its kernels may "
        "compute at a lower precision than the inputs' type (TF32, FP8), or the FLOP model "
        f"({cost.model}) counts work they skip"
    )


@dataclass(frozen=True)
class Coverage:
    """How much of the trace's GPU work the per-op roofline holds: the kernel time of its ops with a model (the
    points a chart draws), of every op it lists, and the trace's GPU busy time."""

    modelled_ns: int
    listed_ns: int
    gpu_busy_ns: int
    graph_replayed: bool  # the trace replays CUDA / HIP graphs: their kernels belong to no op with shapes

    @property
    def text(self) -> str:
        """One line: what the ops hold of the GPU work, and where the rest is."""
        if not self.gpu_busy_ns:
            return "no GPU work in the trace"
        share = self.modelled_ns / self.gpu_busy_ns
        line = (
            f"the ops with a model hold {self.modelled_ns / 1e6:.3f} ms of the trace's {self.gpu_busy_ns / 1e6:.3f} ms "
            f"of GPU work ({100 * share:.0f}%); every op listed {self.listed_ns / 1e6:.3f} ms"
        )
        if self.graph_replayed:
            line += "; graph-replayed kernels have no shapes, so they belong to no op here"
        return line


def coverage(ops: Sequence[OpRoofline], gpu_busy_ns: int, graph_replayed: bool) -> Coverage:
    modelled = sum(o.kernel_us_total for o in ops if o.model is not None)
    listed = sum(o.kernel_us_total for o in ops)
    return Coverage(round(modelled * 1e3), round(listed * 1e3), gpu_busy_ns, graph_replayed)


__all__ = [
    "MODELS",
    "Cost",
    "Coverage",
    "OpCalls",
    "OpRoofline",
    "cost_of",
    "coverage",
    "op_calls",
    "op_rooflines",
    "step_op_rooflines",
    "trace_op_rooflines",
]
