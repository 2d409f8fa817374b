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
norm ops are one FLOP an output element and move their inputs and output once. Ops without a model are listed by
kernel time with `model` None: named, never guessed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

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
    "aten::rsqrt", "aten::sqrt", "aten::copy_", "aten::clone", "aten::where", "aten::cat", "aten::fill_",
    "aten::zero_", "aten::_to_copy", "aten::index_select", "aten::embedding", "aten::softmax", "aten::_softmax",
    "aten::mean", "aten::sum", "aten::argmax", "aten::cumsum",
}  # fmt: skip
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


def _elementwise(s: Shapes) -> Cost | None:
    tensors = [(d, t) for d, t in zip(s.dims, s.types, strict=False) if t in BPE and isinstance(d, tuple) and d]
    if not tensors:
        return None
    out = max(_prod(d) for d, _ in tensors)
    moved = sum(_prod(d) * BPE[t] for d, t in tensors) + out * BPE[tensors[0][1]]
    return Cost(out, moved, DTYPE.get(tensors[0][1]), "by bytes: inputs and output once, a FLOP an element")


MODELS: dict[str, Callable[[Shapes], Cost | None]] = {
    "aten::mm": _mm,
    "aten::addmm": _addmm,
    "aten::linear": _linear,
    "aten::bmm": _bmm,
    **{name: functools.partial(_sdpa, causal_at=at) for name, at in IS_CAUSAL.items()},
    **{name: _elementwise for name in ELEMENTWISE | NORMS},
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
    tflops = tbs = intensity = roof = None
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
    )


__all__ = ["MODELS", "Cost", "OpRoofline", "cost_of", "op_rooflines"]
