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

import numpy as np

from probe.analysis.ledger.gpu import Attribution
from probe.analysis.ledger.host import thread_ops
from probe.analysis.roofline.devices import Device
from probe.analysis.trace import Shapes, Trace

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
    return int(text) % rank if text.lstrip("-").isdigit() and rank else 0


def _dims_of(text: str, rank: int) -> tuple[int, ...]:
    """A recorded `dim` that may be one int or a list ("[-1]"), each made non-negative; () when not recorded."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
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
    if model is None or shapes is None:
        return None
    try:
        return model(shapes)
    except (TypeError, ValueError, IndexError):
        return None


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
    bound: str | None  # "compute" | "memory" against the device's ridge; None without a device or a model
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
    pairs = np.unique(np.stack([trace.pid[launch[known]], trace.tid[launch[known]]]), axis=1)
    modelled = np.array([n in MODELS for n in trace.names], bool)
    for pid, tid in pairs.T.tolist():
        ops = thread_ops(trace, pid, tid)
        if not len(ops.rows):
            continue
        parent = ops.parent
        sel = known[(trace.pid[launch[known]] == pid) & (trace.tid[launch[known]] == tid)]
        t = trace.ts_ns[launch[sel]]
        cur = np.searchsorted(ops.start, t, side="right") - 1  # the latest op starting at or before the call
        inside = np.zeros(len(sel), bool)
        for _ in range(int(ops.depth.max(initial=0)) + 1):  # walk out until an op holds the call
            ok = (cur >= 0) & ~inside
            holds = ok & (ops.end[np.maximum(cur, 0)] >= t)
            inside |= holds
            cur = np.where(ok & ~holds, parent[np.maximum(cur, 0)], cur)
        cur = np.where(inside, cur, -1)
        found = cur.copy()
        for _ in range(int(ops.depth.max(initial=0)) + 1):  # then up to the nearest modelled op
            climb = (cur >= 0) & ~modelled[trace.name_id[ops.rows[np.maximum(cur, 0)]]]
            cur = np.where(climb, parent[np.maximum(cur, 0)], cur)
        best = np.where(cur >= 0, cur, found)
        owner[sel] = np.where(best >= 0, ops.rows[np.maximum(best, 0)], -1)
    return owner


def op_rooflines(
    trace: Trace, gpu: Attribution, device: Device | None = None, steps: np.ndarray | None = None
) -> list[OpRoofline]:
    """Per (op, shapes), largest kernel time first, over the GPU ops selected by `steps` (a mask over gpu.op_rows;
    every GPU op when None)."""
    owner = _owners(trace, gpu)
    sel = owner >= 0 if steps is None else (owner >= 0) & steps
    if not sel.any():
        return []
    call_rows, inverse = np.unique(owner[sel], return_inverse=True)
    call_ns = np.bincount(inverse, weights=trace.dur_ns[gpu.op_rows[sel]]).astype(np.int64)
    groups: dict[tuple[int, int], list[int]] = {}
    for row, ns in zip(call_rows.tolist(), call_ns.tolist(), strict=True):
        groups.setdefault((int(trace.name_id[row]), int(trace.shape_id[row])), []).append(ns)
    out = []
    for (name_id, shape_id), times in groups.items():
        name = trace.names[name_id]
        shapes = trace.shapes[shape_id] if shape_id >= 0 else None
        cost = cost_of(name, shapes)
        median_ns = float(np.median(times))
        out.append(_entry(name, shapes, cost, times, median_ns, device))
    return sorted(out, key=lambda r: (-r.kernel_us_total, r.op, r.shapes))


def _entry(
    name: str, shapes: Shapes | None, cost: Cost | None, times: list[int], median_ns: float, device
) -> OpRoofline:
    tflops = tbs = intensity = roof = why = None
    bound = None
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
        count=len(times),
        flops=cost.flops if cost else None,
        bytes=cost.bytes if cost else None,
        kernel_us_total=sum(times) / 1e3,
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


__all__ = ["MODELS", "Cost", "Coverage", "OpRoofline", "cost_of", "coverage", "op_rooflines"]
