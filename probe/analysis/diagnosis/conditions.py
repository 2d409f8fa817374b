"""What a what-if assumes, checked on the trace: the facts beyond a step's ledger that say whether a change can
apply. probe.analysis.diagnosis.what_if names them in each WhatIf's `requires` and reports them in its `holds`.

One pass over the trace for every step (`step_facts`), vectorized like the ledger:

- **Cold.** A first call that takes many times what later calls of its kind take is one-time set-up, not the step:
  lazy module loading in a first kernel launch, cuBLAS or cuDNN initialisation in a first GEMM or convolution,
  autotuning, CUDA context creation. A call is *cold* when it is the first of its kind in the trace (a launch: the
  first launch of its kernel; any other runtime call or op: the first of its name), takes more than `COLD_FACTOR`
  times its baseline and at least `COLD_MIN_NS` more. The baseline is what a warm call of its kind costs: of a
  launch, the trace's median *repeat* launch (a launch of a kernel launched before: warm by this same rule), or,
  where no kernel is launched twice, its median launch call, so a trace of one step still has one (in a cold
  trace whose kernels each launch once, that median is itself a first launch's: nvFuser's H200 export, 114 us
  against 5.4 us for its four repeat launches); of any other call or op, the median of its name over the trace
  (an op called once has none, and is never cold). Calls that can block on the device (synchronizing calls,
  copies, frees) and ops holding one are left out: their time may be a wait, not set-up.
  A call that loads a module or library of kernels (`MODULE_LOAD`: the CUDA driver's cuModuleLoad* and
  cuLibraryLoad*, the runtime's cudaLibraryLoad*, HIP's hipModuleLoad*) is cold by what it is, first of its name
  or not, with no warm cost (a warm step loads nothing), and so is a launch call that holds one on its thread
  (CUDA's lazy loading of the kernel's module, where the trace records the load inside the launch). Where the
  loads are separate calls (nvFuser's cuModuleLoadDataEx, cuBLASLt's cuLibraryLoadData before its first GEMM),
  a lazily loading launch that records none is judged by the first-call rule above.
  A step's *first-call set-up* (`Cold.ns`) is the time its cold calls cover in its host window less what warm
  calls would cost there: the baselines of its outermost cold calls (one inside another is part of the outer's
  time), each at most the call's time outside the module loads it holds; a step is cold when that covers
  `COLD_SHARE` of its host window. Of a cold step, the same set-up on its
  own thread is also split by the host partition's mechanism (`Cold.parts_ns`, probe.analysis.ledger.host: each
  cold span's split scaled down by its warm cost): the verdict takes it out of the part that would hold it (a first
  launch's lazy module load is launch time by mechanism) and names it first-call set-up
  (probe.analysis.diagnosis.evidence), so the mechanism a verdict names is never the cold calls'; what a warm call
  costs stays in its part.
- **The capture region** (probe.analysis.ledger.host.capture_region): what it holds that a CUDA graph cannot:
  blocking runtime calls, synchronizing Python frames and `.item()` (`aten::item`, `aten::_local_scalar_dense`);
  ops whose output shape depends on the data (`DATA_DEPENDENT_OPS`: nonzero, unique, masked_select...).
- **Shapes from step to step.** With recorded shapes, each step's region has a fingerprint of its ops' input
  shapes; steps of one kind whose fingerprints differ run different shapes (a growing KV cache, a growing input),
  which one captured graph cannot replay.
- **Compiled already.** torch.compile's own ranges in the step (`COMPILED`: "Torch-Compiled Region", "## Call
  CompiledFxGraph ..."): a compiled step has no forward left to compile.
- **Training.** Autograd ops (`...Backward0`, `autograd::engine::evaluate_function: ...`) and optimizer steps
  (`Optimizer.step#...`) on any thread in the step's window: the step is not a forward.
- **On a CPU**, the step's ops split the way the CPU what-ifs price them (`CpuOps`): the dispatch floor (the median
  self time of the step's metadata-only ops, `VIEW_OPS`: what an op costs before it computes), the compute of the
  ops a compiled graph still calls (GEMM, attention, convolution: `KEPT_OP`), and the rest's compute: the self time
  above the floor of each op that takes more than `REST_FLOORS` floors. An op within that (a wrapper such as
  aten::linear, or an elementwise op on a decode step's few hundred values: 3-7 us where a view takes 0.7) spends
  its time setting up, not computing, and a compiled graph fuses it away.
- **On a CPU training step**, what compiling the model takes over and what it leaves as it is (`CpuOps`):
  torch.compile of a module compiles its forward and, through AOTAutograd, its backward (autograd's `...Backward0`
  ops: one compiled call for each stretch of forward ops and of backward ops), and no more. The autograd engine
  still runs `AccumulateGrad` (the gradients the compiled backward returns, added into each leaf's .grad, outside
  its graph), and the optimizer's step and zero_grad (`Optimizer.step#...`) are not the model's: their ops (the
  *eager* ops: inside an optimizer range or an AccumulateGrad op) stay as they are, and no compiled figure counts
  them (the calls a compiled graph makes, its fused runs, its compute).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from probe.analysis.intervals import assign, covered, difference, grouped_medians, inside_any, merge, nesting
from probe.analysis.ledger.gpu import Attribution, attribute
from probe.analysis.ledger.host import (
    COMPILE_RUNTIME,
    EVERY_OP,
    SYNC_CALL,
    SYNC_FRAME,
    UNATTRIBUTED,
    PartTable,
    capture_region,
    mechanism_split,
    thread_ops,
    thread_rows,
)
from probe.analysis.ledger.types import TraceAnalysis
from probe.analysis.trace import Kind, Trace, api_base_name

COLD_FACTOR = 10  # a first call this many times its baseline...
COLD_MIN_NS = 1_000_000  # ...and at least 1 ms over it is one-time set-up
COLD_SHARE = 0.1  # a step whose first-call set-up covers a tenth of its host window is cold
# calls that load a module or library of kernels, cold by what they are: the CUDA driver's (cuModuleLoad,
# cuModuleLoadData, cuModuleLoadDataEx, cuModuleLoadFatBinary, cuLibraryLoadData, cuLibraryLoadFromFile; nsys records
# them by these names beside the runtime's calls, kineto as cuda_driver events), the runtime's cudaLibraryLoadData
# and cudaLibraryLoadFromFile, and HIP's hipModuleLoad, hipModuleLoadData, hipModuleLoadDataEx (roctracer's and
# kineto's hip_runtime events). Not cuModuleGetLoadingMode, cuModuleUnload or hipModuleLaunchKernel.
MODULE_LOAD = re.compile(r"^(?:cuda|cu|hip)(?:Module|Library)Load")

# runtime calls whose time may be a wait on the device, never judged cold: syncs, copies, stream waits. (A first
# cudaFree is judged: `cudaFree(0)` is how CUDA and its libraries initialise.)
MAY_WAIT = re.compile(r"Synchroni[sz]e|Memcpy|Wait", re.IGNORECASE)
ITEM_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
DATA_DEPENDENT_OPS = frozenset(
    {
        "aten::nonzero",
        "aten::masked_select",
        "aten::unique",
        "aten::_unique",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::unique_dim_consecutive",
        "aten::bincount",
        "aten::histc",
        "aten::repeat_interleave",
    }
)
# what torch.compile leaves in a trace around a compiled call
COMPILED = re.compile(r"^Torch-Compiled Region|^## Call CompiledFxGraph|^TorchDynamo Cache Lookup|^CompiledFunction")
BACKWARD = re.compile(r"Backward\d*$|^autograd::engine::evaluate_function")
OPTIMIZER = re.compile(r"^Optimizer\.(?:step|zero_grad)#")
ACCUMULATE = re.compile(r"AccumulateGrad$")  # autograd's accumulation into a leaf's .grad (and its engine range)
MODULE_FRAME = "nn.Module: "  # the frame torch's Python tracer gives a module's call (with_stack=True)
# ops that only make a new view of a tensor, or an empty one: their self time is what dispatch costs
VIEW_OPS = frozenset(
    {
        "aten::view",
        "aten::_unsafe_view",
        "aten::reshape",
        "aten::as_strided",
        "aten::t",
        "aten::transpose",
        "aten::permute",
        "aten::expand",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::slice",
        "aten::select",
        "aten::detach",
        "aten::alias",
        "aten::empty",
        "aten::empty_strided",
        "aten::resolve_conj",
        "aten::resolve_neg",
    }
)
# GEMMs: dense, batched, oneDNN's linear, the scaled (fp8) ones, MoE's grouped expert GEMMs (_grouped_mm, the
# top op of a Qwen2-MoE decode on a CPU, and _scaled_grouped_mm), and the quantized ones: int8 (_int_mm), weight-only
# int4/int8 (_weight_int4pack_mm, _weight_int8pack_mm) and torch.ao's quantized Linear (quantize_dynamic's
# quantized::linear_dynamic, its fp16 and fused-ReLU forms, and the static quantized::linear), each a library GEMM
# that a compiled graph calls as it is; their weight packing (quantized::linear_prepack) is none
GEMM_OP = re.compile(
    r"^(?:aten::(?:mm|addmm|bmm|baddbmm|mkldnn_\w*linear\w*|_scaled_mm\w*|_(?:scaled_)?grouped_mm|_int_mm"
    r"|_weight_int[48]pack_mm\w*)|quantized::linear(?:_relu)?(?:_dynamic(?:_fp16)?)?)$"
)
ATTENTION_OP = re.compile(r"^aten::_scaled_dot_product\w*$")
CONVOLUTION_OP = re.compile(r"^aten::(?:convolution|_convolution|mkldnn_convolution|cudnn_convolution|_mkldnn\w*)$")
# ops a compiled graph still calls as they are (inductor's extern kernels): GEMMs, attention, convolutions
KEPT_OP = re.compile("|".join(f"(?:{op.pattern})" for op in (GEMM_OP, ATTENTION_OP, CONVOLUTION_OP)))
REST_FLOORS = 20  # an op whose self time is within this many dispatch floors is dispatch, not compute


@dataclass(frozen=True)
class Cold:
    """A step's first-call set-up (the module docstring): the time its cold calls take in its host window less what
    warm calls of their kinds cost, its largest cold call other than a module load, and its module loads."""

    ns: int  # first-call set-up: calls_ns - warm_ns, at least 0
    call: str  # its largest call the first-call rule found; "" when its cold calls are module loads and their launches
    call_ns: int
    baseline_ns: float  # what a warm call of its kind costs
    against: str  # what the call is measured against, in words
    calls_ns: int = 0  # the time its cold calls cover in the host window (their union)
    warm_ns: int = 0  # what its outermost cold calls cost warm: the sum of their baselines (a module load's is 0)
    loads: int = 0  # its module-load calls (MODULE_LOAD)...
    loads_ns: int = 0  # ...the time they cover in its host window...
    load_names: tuple[str, ...] = ()  # ...and their names, counted: ("cuLibraryLoadData x15", ...)
    # Of the step's set-up, the part on the step's own thread, by the host partition's mechanism outside data
    # loading (python, dispatch, launch, runtime, profiler: the innermost event decides), and "data" for what lies
    # inside data loading; a wait (sync_wait) is not host work and is left out.
    parts_ns: Mapping[str, int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        said = []
        if self.call:
            ratio = self.call_ns / self.baseline_ns if self.baseline_ns else float("inf")
            said.append(
                f"the first {self.call} took {self.call_ns / 1e6:.3f} ms, {ratio:,.0f}x {self.against} "
                f"({self.baseline_ns / 1e3:.1f} us)"
            )
        if self.loads:
            said.append(
                f"{self.loads} module load{'s' if self.loads > 1 else ''} ({', '.join(self.load_names)}) took "
                f"{self.loads_ns / 1e6:.3f} ms"
            )
        return "; ".join(said)

    @property
    def arithmetic(self) -> str:
        """The set-up as a sum: the time in cold calls less what they cost warm."""
        return (
            f"{self.ns / 1e6:.3f} ms = {self.calls_ns / 1e6:.3f} in cold calls - {self.warm_ns / 1e6:.3f} that warm "
            "calls of their kinds cost"
        )


@dataclass(frozen=True)
class CpuOps:
    """A CPU step's ops as the CPU what-ifs price them, ns (probe.analysis.diagnosis.what_if)."""

    ops: int  # cpu_ops in the step, nested ones included: each paid the dispatch floor
    floor_ns: float  # the median self time of its metadata-only ops (VIEW_OPS); 0 when it has none
    kept: int  # calls a compiled graph still makes (KEPT_OP), an op inside another such op, an eager op or one
    # outside the capture region not counted
    gemm_ns: int  # the compute of the KEPT_OP ops: GEMMs (the weights' traffic)...
    attention_ns: int  # ...attention (the KV cache's)...
    other_kept_ns: int  # ...and the rest (convolutions)
    rest_ns: int  # every other op's self time above the floor, where it exceeds REST_FLOORS floors: compute (not
    # torch.compile's bookkeeping ops, COMPILE_RUNTIME: the guard check is the compiled runtime's)
    fused: int = 0  # runs of top-level ops between the kept ones holding an op that is not a view: fused kernels
    graph_calls: int = 1  # compiled calls: one for each stretch of forward ops and of backward ops (eager ops left out)
    # a training step (the module docstring): what a compiled model leaves as it is, and the backward it takes over
    eager_ops: int = 0  # top-level eager ops: the optimizer's, AccumulateGrad's
    eager_ns: int = 0  # host time in them: the union of the optimizer's ranges and AccumulateGrad's ops
    eager_kept_ns: int = 0  # the part of the KEPT_OP compute that is theirs...
    eager_rest_ns: int = 0  # ...and of rest_ns
    eager_outside_ns: int = 0  # the part of eager_ns outside the capture region
    backward_outside_ns: int = 0  # the backward's top-level ops' host time outside the capture region: compiled too
    # the other ops outside the capture region (a loop's own matmuls, sampling), in the host work outside it
    # already: their top-level ops, and their compute, of the KEPT_OP compute and of rest_ns
    outside_ops: int = 0
    outside_kept_ns: int = 0
    outside_rest_ns: int = 0

    @property
    def compute_ns(self) -> int:
        return self.gemm_ns + self.attention_ns + self.other_kept_ns + self.rest_ns

    @property
    def compiled_compute_ns(self) -> int:
        """The compute a compiled model still does: every op's but the eager ones'."""
        return self.compute_ns - self.eager_kept_ns - self.eager_rest_ns

    @property
    def region_compute_ns(self) -> int:
        """Of that, the compute inside the compiled region (the outside's is in the host work outside it)."""
        return self.compiled_compute_ns - self.outside_kept_ns - self.outside_rest_ns


@dataclass(frozen=True)
class StepFacts:
    """What the trace says about one step beyond its ledger (the module docstring)."""

    cold: Cold | None = None
    blocking: tuple[str, ...] = ()  # in the capture region: "cudaStreamSynchronize x2"
    dynamic: tuple[str, ...] = ()  # data-dependent-shape ops in the capture region: "aten::nonzero x3"
    shapes_vary: bool | None = None  # None: no shapes recorded, or no other step of its kind
    shape_sets: int = 0  # distinct shape fingerprints among the steps of its kind
    kind_steps: int = 0  # steps of its kind with shapes
    training: tuple[str, ...] = ()  # "412 backward ops (e.g. ConvolutionBackward0)", "Optimizer.step#SGD.step"
    compiled: tuple[str, ...] = ()  # compiled regions the step calls: "Torch-Compiled Region: 0/0 x1"
    cpu: CpuOps | None = None  # a CPU-only trace's ops
    module_calls: tuple[int, str] | None = None  # its outermost module called most, when 2+ times: (5, "Owlv2...")

    def iterations_text(self) -> str | None:
        """The caveat of a step whose outermost module ran more than once in it: it may hold that many iterations."""
        if self.module_calls is None:
            return None
        k, module = self.module_calls
        return (
            f"this step calls its outermost module {module} {k} times: if each call is an iteration, a figure per "
            f"iteration is 1/{k} of the step's"
        )


def step_facts(trace: Trace, analysis: TraceAnalysis) -> dict[int, StepFacts]:
    """Every step's facts, by position."""
    n = len(analysis.steps)
    if not n:
        return {}
    lo, hi = analysis.windows()
    gpu = attribute(trace, lo, hi)
    cold = _cold(trace, gpu, lo, hi, [(s.pid, s.tid) for s in analysis.steps])
    training, compiled = _named(trace, lo, hi, BACKWARD, OPTIMIZER), _named(trace, lo, hi, COMPILED)
    region = _region(trace, analysis, lo, hi)
    cpu = _cpu_ops(trace, analysis, lo, hi) if not analysis.on_gpu else [None] * n
    calls = _module_calls(trace, analysis, lo, hi)
    return {
        s.position: StepFacts(
            cold=cold[i],
            blocking=region[i][0],
            dynamic=region[i][1],
            shapes_vary=region[i][2],
            shape_sets=region[i][3],
            kind_steps=region[i][4],
            training=_training_text(training[i]),
            compiled=_counted(compiled[i][0]),
            cpu=cpu[i],
            module_calls=calls[i],
        )
        for i, s in enumerate(analysis.steps)
    }


def _module_calls(trace: Trace, analysis: TraceAnalysis, lo: np.ndarray, hi: np.ndarray) -> list:
    """Per step: (k, module) when the outermost module called most often in it, on its own thread, ran k >= 2 times
    (OWLv2's ProfilerStep holds five detector forwards; a diffusion pipeline's, four transformer calls); else None.
    Outermost: no module frame around it (a layer is inside its model). One nesting a thread, one count."""
    out: list[tuple[int, str] | None] = [None] * len(lo)
    frames = trace.rows(Kind.PYTHON)
    frames = frames[trace.name_ids(lambda s: s.startswith(MODULE_FRAME))[trace.name_id[frames]]]
    pid = np.array([s.pid for s in analysis.steps], np.int64)
    tid = np.array([s.tid for s in analysis.steps], np.int64)
    for p, t in {(s.pid, s.tid) for s in analysis.steps} if len(frames) else ():
        mine = frames[(trace.pid[frames] == p) & (trace.tid[frames] == t)]
        mine = mine[np.lexsort((-trace.end_ns[mine], trace.ts_ns[mine]))]
        top = mine[nesting(trace.ts_ns[mine], trace.end_ns[mine])[0] == 0]
        step = assign(trace.ts_ns[top], lo, hi)
        own = (step >= 0) & (pid[np.maximum(step, 0)] == p) & (tid[np.maximum(step, 0)] == t)
        keys, counts = np.unique(step[own] * len(trace.names) + trace.name_id[top[own]], return_counts=True)
        for key, k in zip(keys.tolist(), counts.tolist(), strict=True):
            i, name = divmod(key, len(trace.names))
            if k >= 2 and (out[i] is None or k > out[i][0]):
                out[i] = (k, trace.names[name].removeprefix(MODULE_FRAME))
    return out


def _counted(names: list[str], top: int = 3) -> tuple[str, ...]:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return tuple(f"{name} x{c}" for name, c in ordered[:top])


def _per_step(step: np.ndarray, values: list[str], n: int) -> list[list[str]]:
    out: list[list[str]] = [[] for _ in range(n)]
    for s, v in zip(step.tolist(), values, strict=True):
        if s >= 0:
            out[s].append(v)
    return out


# what a cold call's baseline is (Cold.against), by its label code
LAUNCH_REPEAT, CALL, OP, LOAD, LAUNCH_ALL = 0, 1, 2, 3, 4
_AGAINST = {
    LAUNCH_REPEAT: "the trace's median repeat launch call",
    LAUNCH_ALL: "the trace's median launch call",
    CALL: "its median call",
    OP: "its median call",
    LOAD: "no warm cost (a warm step loads no module)",
}


class _Candidates(NamedTuple):
    """The calls and ops that may be cold: each with the key of its kind, its baseline (what a warm call of its kind
    costs, ns), its label code (`_AGAINST`) and whether it is set-up by what it is (a module load, or a launch call
    holding one)."""

    rows: np.ndarray
    keys: np.ndarray
    baseline: np.ndarray
    label: np.ndarray
    setup: np.ndarray


class _ColdCalls(NamedTuple):
    """The cold calls, in time order: their baselines and label codes, what each costs warm (`_warm_costs`), and
    whether the first-call rule found it (not only set-up by what it is: a module load, a launch holding one)."""

    rows: np.ndarray
    baseline: np.ndarray
    label: np.ndarray
    warm: np.ndarray
    by_rule: np.ndarray


def _cold(
    trace: Trace, gpu: Attribution, lo: np.ndarray, hi: np.ndarray, threads: list[tuple[int, int]]
) -> list[Cold | None]:
    """Per step (`threads`: each step's pid and tid): its first-call set-up (the module docstring), or None when it
    covers less than COLD_SHARE of it."""
    n = len(lo)
    kernel_of = _launched_names(trace, gpu)
    candidates = _cold_candidates(trace, kernel_of)
    if candidates is None:
        return [None] * n
    calls = _first_and_cold(trace, candidates)
    if not len(calls.rows):
        return [None] * n
    cold = _cold_steps(trace, kernel_of, calls, lo, hi)
    if not any(cold):
        return cold
    parts = _own_parts(trace, calls, [i for i, c in enumerate(cold) if c is not None], lo, hi, threads)
    return [replace(c, parts_ns=parts[i]) if c is not None else None for i, c in enumerate(cold)]


def _own_parts(
    trace: Trace, calls: _ColdCalls, cold: list[int], lo: np.ndarray, hi: np.ndarray, threads: list[tuple[int, int]]
) -> dict[int, dict[str, int]]:
    """Per cold step (`cold`: their positions): its set-up on its own thread, within its host window, by the host
    partition's mechanism outside data loading, and inside data loading as "data" (`Cold.parts_ns`). One split a
    thread, over the merged spans of its cold steps' own cold calls; each span's split is scaled by its share that is
    set-up (its time less the baselines of the outermost cold calls in it, over its time), so what warm calls cost
    stays in the parts that hold it."""
    table = PartTable.build(trace)
    step = assign(trace.ts_ns[calls.rows], lo, hi)
    out: dict[int, dict[str, int]] = {}
    for p, t in sorted({threads[i] for i in cold}):
        starts, ends, owner, share = [], [], [], []
        for i in (i for i in cold if threads[i] == (p, t)):
            sel = (step == i) & (trace.pid[calls.rows] == p) & (trace.tid[calls.rows] == t)
            rows = calls.rows[sel]
            a, b = merge(np.maximum(trace.ts_ns[rows], lo[i]), np.minimum(trace.end_ns[rows], hi[i]))
            span = assign(trace.ts_ns[rows], a, b)
            warm = np.bincount(span[span >= 0], weights=calls.warm[sel][span >= 0], minlength=len(a))
            starts.append(a)
            ends.append(b)
            owner.append(np.full(len(a), i))
            share.append(np.clip(1 - warm / np.maximum(b - a, 1), 0, 1))
        of, scale = np.concatenate(owner), np.concatenate(share)
        if not len(of):  # the cold calls ran on other threads: none of the step's own host work is set-up
            out.update((i, {}) for i in cold if threads[i] == (p, t))
            continue
        split = mechanism_split(trace, table, p, t, np.concatenate(starts), np.concatenate(ends))
        for i in (i for i in cold if threads[i] == (p, t)):
            f = np.where(of == i, scale, 0.0)
            parts = {k: round(float((v - split.in_data[k]) @ f)) for k, v in split.mechanism.items()}
            data = round(sum(float(v @ f) for k, v in split.in_data.items() if k != "sync_wait"))
            del parts["sync_wait"], parts[UNATTRIBUTED]  # a wait is not host work; the calls cover their own span
            out[i] = {k: v for k, v in (parts | {"data": data}).items() if v}
    return out


def _launched_names(trace: Trace, gpu: Attribution) -> np.ndarray:
    """Per row of the trace: for a launch call, the name id of the GPU op it launched; -1 for every other row."""
    kernel_of = np.full(len(trace), -1, np.int64)
    launched = gpu.op_launch >= 0
    kernel_of[gpu.op_launch[launched]] = trace.name_id[gpu.op_rows[launched]]
    return kernel_of


def _cold_candidates(trace: Trace, kernel_of: np.ndarray) -> _Candidates | None:
    """The calls and ops that may be cold (`_Candidates`); None when there are none. Calls and ops that may wait are
    left out."""
    rt = trace.rows(Kind.RUNTIME)
    wait_names = trace.name_ids(lambda s: bool(MAY_WAIT.search(s) or SYNC_CALL.search(api_base_name(s))))
    load_names = trace.name_ids(lambda s: bool(MODULE_LOAD.match(api_base_name(s))))
    is_launch = trace.launch_kind[rt] > 0
    loads = load_names[trace.name_id[rt]] & ~is_launch
    waits = wait_names[trace.name_id[rt]] & ~loads
    ops = trace.rows(Kind.CPU_OP)
    holds_wait = _holds_wait(trace, ops, rt[waits])
    parts: list[_Candidates] = []
    if is_launch.any():
        parts.append(_launch_candidates(trace, rt[is_launch], kernel_of, rt[loads]))
    if loads.any():
        parts.append(_load_candidates(trace, rt[loads]))
    for rows, kind_code in ((rt[~is_launch & ~waits & ~loads], CALL), (ops[~holds_wait], OP)):
        if len(rows):
            parts.append(_named_candidates(trace, rows, kind_code))
    if not parts:
        return None
    return _Candidates(*(np.concatenate(column) for column in zip(*parts, strict=True)))


def _holds_wait(trace: Trace, ops: np.ndarray, wait_calls: np.ndarray) -> np.ndarray:
    """Per op: whether it holds a call that may wait (its time may be that wait)."""
    blocking = np.sort(trace.ts_ns[wait_calls])
    o_start, o_end = trace.ts_ns[ops], trace.end_ns[ops]
    return np.searchsorted(blocking, o_end, side="right") > np.searchsorted(blocking, o_start, side="left")


def _holds_on_thread(trace: Trace, outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Per `outer` row: whether an `inner` row on its thread starts inside it (calls on one thread nest)."""
    out = np.zeros(len(outer), bool)
    for p, t in set(zip(trace.pid[inner].tolist(), trace.tid[inner].tolist(), strict=True)):
        starts = np.sort(trace.ts_ns[inner[(trace.pid[inner] == p) & (trace.tid[inner] == t)]])
        mine = (trace.pid[outer] == p) & (trace.tid[outer] == t)
        o = outer[mine]
        out[mine] = np.searchsorted(starts, trace.end_ns[o]) > np.searchsorted(starts, trace.ts_ns[o])
    return out


def _launch_candidates(trace: Trace, lr: np.ndarray, kernel_of: np.ndarray, loads: np.ndarray) -> _Candidates:
    """Launch calls, a kind per launched kernel (a launch without its kernel: its own), against the trace's median
    repeat launch (of a kernel launched before), or its median launch call where no kernel is launched twice; a
    launch call holding a module load (`loads`) is set-up by what it is."""
    key = np.where(kernel_of[lr] >= 0, kernel_of[lr], -1 - lr)
    order = np.argsort(trace.ts_ns[lr], kind="stable")
    repeat = np.ones(len(lr), bool)
    repeat[order[np.unique(key[order], return_index=True)[1]]] = False
    label = LAUNCH_REPEAT if repeat.any() else LAUNCH_ALL
    median = float(np.median(trace.dur_ns[lr[repeat] if repeat.any() else lr]))
    n = len(lr)
    return _Candidates(
        lr, _kind_key(trace, 0, key), np.full(n, median), np.full(n, label), _holds_on_thread(trace, lr, loads)
    )


def _load_candidates(trace: Trace, rows: np.ndarray) -> _Candidates:
    """Module loads: each a kind of its own, with no warm cost, set-up by what it is."""
    n = len(rows)
    return _Candidates(rows, _kind_key(trace, LOAD, -1 - rows), np.zeros(n), np.full(n, LOAD), np.ones(n, bool))


def _named_candidates(trace: Trace, rows: np.ndarray, kind_code: int) -> _Candidates:
    """Calls or ops, a kind per name, each against the median of its name (called once: no baseline, never cold)."""
    names = trace.name_id[rows].astype(np.int64)
    uniq, medians = grouped_medians(names, trace.dur_ns[rows])
    counts = np.bincount(np.searchsorted(uniq, names), minlength=len(uniq))
    med = medians[np.searchsorted(uniq, names)]
    med = np.where(counts[np.searchsorted(uniq, names)] > 1, med, np.inf)
    n = len(rows)
    return _Candidates(rows, _kind_key(trace, kind_code, names), med, np.full(n, kind_code), np.zeros(n, bool))


def _kind_key(trace: Trace, kind_code: int, key: np.ndarray) -> np.ndarray:
    """A (kind, key) pair as one int64, kind x span + key + offset, so a 1-D unique finds each pair's first call (a
    2-D unique with axis=0 sorts the pairs as records, 10x slower); a key runs from -1 - len(trace) to the last
    name id."""
    offset = len(trace) + 1
    span = offset + max(len(trace.names), len(trace)) + 1
    return kind_code * span + key.astype(np.int64) + offset


def _first_and_cold(trace: Trace, c: _Candidates) -> _ColdCalls:
    """The cold calls, in time order: the first of their kind, over COLD_FACTOR times their baseline and at least
    COLD_MIN_NS over it, and those set-up by what they are."""
    order = np.argsort(trace.ts_ns[c.rows], kind="stable")
    rows, keys, baseline, label, setup = (column[order] for column in c)
    _, first_at = np.unique(keys, return_index=True)
    first = np.zeros(len(rows), bool)
    first[first_at] = True
    dur = trace.dur_ns[rows].astype(np.float64)
    by_rule = first & (dur > COLD_FACTOR * baseline) & (dur - baseline >= COLD_MIN_NS) & (label != LOAD)
    is_cold = by_rule | setup
    rows, baseline, label = rows[is_cold], baseline[is_cold], label[is_cold]
    return _ColdCalls(rows, baseline, label, _warm_costs(trace, rows, baseline, label == LOAD), by_rule[is_cold])


def _warm_costs(trace: Trace, rows: np.ndarray, baseline: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Per cold call: what it would cost warm. An outermost one (inside no other cold call on its thread; calls on one
    thread nest) costs its baseline, but no more than its time outside the module loads inside it (a warm launch loads
    nothing, whatever the trace's median launch, itself a lazy one's where every kernel launches once); one inside
    another is part of the outer's time, and costs nothing more."""
    out = np.zeros(len(rows))
    for p, t in set(zip(trace.pid[rows].tolist(), trace.tid[rows].tolist(), strict=True)):
        mine = np.flatnonzero((trace.pid[rows] == p) & (trace.tid[rows] == t))
        mine = mine[np.lexsort((-trace.end_ns[rows[mine]], trace.ts_ns[rows[mine]]))]
        start, end = trace.ts_ns[rows[mine]], trace.end_ns[rows[mine]]
        outer = mine[nesting(start, end)[0] == 0]
        inner_load = mine[load[mine] & ~np.isin(mine, outer)]
        held = assign(trace.ts_ns[rows[inner_load]], trace.ts_ns[rows[outer]], trace.end_ns[rows[outer]])
        loaded = np.bincount(held[held >= 0], weights=trace.dur_ns[rows[inner_load]][held >= 0], minlength=len(outer))
        out[outer] = np.minimum(baseline[outer], np.maximum(trace.dur_ns[rows[outer]] - loaded, 0))
    return out


def _cold_steps(
    trace: Trace, kernel_of: np.ndarray, calls: _ColdCalls, lo: np.ndarray, hi: np.ndarray
) -> list[Cold | None]:
    """Per step whose first-call set-up covers COLD_SHARE of its host window: its set-up (the time its cold calls
    cover less what the ones that start in it cost warm), its largest call the first-call rule found (a launch cold
    only by the module load it holds is told by its load) and its module loads."""
    n = len(lo)
    calls_ns = covered(*merge(trace.ts_ns[calls.rows], trace.end_ns[calls.rows]), lo, hi)
    step = assign(trace.ts_ns[calls.rows], lo, hi)
    inside = step >= 0
    warm_ns = np.rint(np.bincount(step[inside], weights=calls.warm[inside], minlength=n)).astype(np.int64)
    setup_ns = np.maximum(calls_ns - warm_ns, 0)
    is_load = calls.label == LOAD
    loads = calls.rows[is_load]
    loads_ns = covered(*merge(trace.ts_ns[loads], trace.end_ns[loads]), lo, hi)
    out: list[Cold | None] = [None] * n
    for i in np.flatnonzero(setup_ns >= COLD_SHARE * (hi - lo)).tolist():
        mine = np.flatnonzero(step == i)
        if not len(mine):
            continue
        mine_loads = calls.rows[mine[is_load[mine]]]
        out[i] = Cold(
            int(setup_ns[i]),
            *_largest(trace, kernel_of, calls, mine[calls.by_rule[mine]]),
            calls_ns=int(calls_ns[i]),
            warm_ns=int(warm_ns[i]),
            loads=len(mine_loads),
            loads_ns=int(loads_ns[i]),
            load_names=_counted(_names(trace, mine_loads)),
        )
    return out


def _largest(trace: Trace, kernel_of: np.ndarray, calls: _ColdCalls, idx: np.ndarray) -> tuple[str, int, float, str]:
    """Of the cold calls `idx`: the longest's name (a launch: its call and its kernel), time, baseline and what the
    baseline is, in words; ("", 0, 0.0, "") when there are none."""
    if not len(idx):
        return "", 0, 0.0, ""
    j = idx[np.argmax(trace.dur_ns[calls.rows[idx]])]
    row = int(calls.rows[j])
    call = trace.names[trace.name_id[row]]
    if calls.label[j] in (LAUNCH_REPEAT, LAUNCH_ALL) and kernel_of[row] >= 0:
        call = f"{api_base_name(call)} (of {trace.names[kernel_of[row]][:60]})"
    return call, int(trace.dur_ns[row]), float(calls.baseline[j]), _AGAINST[int(calls.label[j])]


def _named(trace: Trace, lo: np.ndarray, hi: np.ndarray, *patterns: re.Pattern) -> list[tuple[list[str], ...]]:
    """Per step: the names of the ops, ranges and frames, on any thread in its window, that match each pattern."""
    rows = trace.rows(Kind.CPU_OP, Kind.USER_RANGE, Kind.PYTHON)
    names = trace.name_id[rows]
    step = assign(trace.ts_ns[rows], lo, hi)
    found = []
    for pattern in patterns:
        match = trace.name_ids(lambda s, p=pattern: bool(p.search(s)))[names]
        found.append(_per_step(step[match], [trace.names[i] for i in names[match].tolist()], len(lo)))
    return [tuple(f[i] for f in found) for i in range(len(lo))]


def _training_text(found: tuple[list[str], ...]) -> tuple[str, ...]:
    """What says a step trains, in words: its backward ops and its optimizer steps."""
    backward, optimizer = found
    said = []
    if backward:
        example = next((x for x in backward if not x.startswith("autograd::")), backward[0])
        said.append(f"{len(backward)} backward ops (e.g. {example})")
    if optimizer:
        said.append(f"an optimizer step ({optimizer[0]})")
    return tuple(said)


# A random 64-bit word per shape id: a step's fingerprint is their sum (mod 2**64) over its region's ops.
_FINGERPRINT_SEED = 32


def _among_launches(trace: Trace, rows: np.ndarray, step: np.ndarray, n: int) -> np.ndarray:
    """Per row (of one thread, `step` its step or -1): whether it starts between its step's first and last launch
    call. A sync after the last launch reads the step's result once the work is queued, one before the first waits
    for the step before: a graph of the launches leaves both outside it, so neither stops a capture."""
    launch = (trace.kind[rows] == Kind.RUNTIME) & (trace.launch_kind[rows] > 0) & (step >= 0)
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(first, step[launch], trace.ts_ns[rows[launch]])
    np.maximum.at(last, step[launch], trace.ts_ns[rows[launch]])
    k = np.maximum(step, 0)
    start = trace.ts_ns[rows]
    return (step >= 0) & (start > first[k]) & (start < last[k])


def _region(trace: Trace, analysis: TraceAnalysis, lo: np.ndarray, hi: np.ndarray):
    """Per step: (blocking calls, data-dependent ops, shapes vary, shape sets, steps of its kind with shapes) in
    its capture region."""
    steps = analysis.steps
    n = len(steps)
    pid = np.array([s.pid for s in steps])
    tid = np.array([s.tid for s in steps])
    blocking: list[list[str]] = [[] for _ in range(n)]
    dynamic: list[list[str]] = [[] for _ in range(n)]
    prints = np.zeros(n, np.uint64)
    shaped = np.zeros(n, bool)
    words = np.random.default_rng(_FINGERPRINT_SEED).integers(0, 2**63, len(trace.shapes) + 1, dtype=np.uint64)
    sync_call = trace.name_ids(lambda s: bool(SYNC_CALL.search(api_base_name(s))))
    sync_frame = trace.name_ids(lambda s: bool(SYNC_FRAME.search(s)))
    item = trace.name_ids(lambda s: s in ITEM_OPS)
    data_dependent = trace.name_ids(lambda s: s in DATA_DEPENDENT_OPS)
    for p, t in sorted({(int(a), int(b)) for a, b in zip(pid, tid, strict=True)}):
        sel = np.flatnonzero((pid == p) & (tid == t))
        cap_s, cap_e, what = capture_region(trace, p, t)
        rows = thread_rows(trace, trace.rows(Kind.RUNTIME, Kind.PYTHON, Kind.CPU_OP), p, t)
        start = trace.ts_ns[rows]
        in_region = inside_any(cap_s, cap_e, start, start)
        step = assign(start, lo[sel], hi[sel])
        step = np.where(in_region & (step >= 0), sel[np.maximum(step, 0)], -1)
        names = trace.name_id[rows]
        kind = trace.kind[rows]
        is_block = ((kind == Kind.RUNTIME) & sync_call[names]) | ((kind == Kind.PYTHON) & sync_frame[names])
        is_block |= (kind == Kind.CPU_OP) & item[names]
        if what == EVERY_OP:  # no forward marks the region: a graph holds the launches, from the first to the last
            is_block &= _among_launches(trace, rows, step, n)
        for i, found in enumerate(_per_step(step[is_block], _names(trace, rows[is_block]), n)):
            blocking[i] += found
        is_dyn = (kind == Kind.CPU_OP) & data_dependent[names]
        for i, found in enumerate(_per_step(step[is_dyn], _names(trace, rows[is_dyn]), n)):
            dynamic[i] += found
        has_shape = (kind == Kind.CPU_OP) & (trace.shape_id[rows] >= 0) & (step >= 0)
        if has_shape.any():
            np.add.at(prints, step[has_shape], words[trace.shape_id[rows[has_shape]]])
            shaped[np.unique(step[has_shape])] = True
    vary: list[bool | None] = [None] * n
    sets, counts = [0] * n, [0] * n
    kinds: dict[str, list[int]] = {}
    for i, ledger in enumerate(steps):
        if shaped[i]:
            kinds.setdefault(ledger.kind, []).append(i)
    for members in kinds.values():
        distinct = len({int(prints[i]) for i in members})
        for i in members:
            sets[i], counts[i] = distinct, len(members)
            vary[i] = distinct > 1 if len(members) > 1 else None
    return [(_counted(blocking[i]), _counted(dynamic[i]), vary[i], sets[i], counts[i]) for i in range(n)]


def _names(trace: Trace, rows: np.ndarray) -> list[str]:
    return [trace.names[i] for i in trace.name_id[rows].tolist()]


def _total(step: np.ndarray, mask: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(step[mask], weights=values[mask], minlength=n)


def _cpu_ops(trace: Trace, analysis: TraceAnalysis, lo: np.ndarray, hi: np.ndarray) -> list[CpuOps | None]:
    """Per step of a CPU-only trace, on its own thread: its ops split as the CPU what-ifs price them, each figure the
    median over the steps of its kind (`_kind_medians`)."""
    n = len(lo)
    out: list[CpuOps | None] = [None] * n
    steps = analysis.steps
    for p, t in sorted({(s.pid, s.tid) for s in steps}):
        sel = np.array([i for i, s in enumerate(steps) if (s.pid, s.tid) == (p, t)])
        columns = _thread_split(trace, p, t, lo[sel], hi[sel])
        medians = _kind_medians(list(columns.values()), [steps[i].kind for i in sel])
        for j, i in enumerate(sel.tolist()):
            if medians[0][j]:
                out[i] = _cpu_ops_of({name: float(m[j]) for name, m in zip(columns, medians, strict=True)})
    return out


def _cpu_ops_of(row: dict[str, float]) -> CpuOps:
    """One step's CpuOps from its figures by field name (`_thread_split`'s), the counts and ns as ints."""
    n = {k: int(v) for k, v in row.items()}
    return CpuOps(
        n["ops"],
        row["floor_ns"],
        n["kept"],
        n["gemm_ns"],
        n["attention_ns"],
        n["other_kept_ns"],
        n["rest_ns"],
        fused=n["fused"],
        graph_calls=n["graph_calls"],
        eager_ops=n["eager_ops"],
        eager_ns=n["eager_ns"],
        eager_kept_ns=n["eager_kept_ns"],
        eager_rest_ns=n["eager_rest_ns"],
        eager_outside_ns=n["eager_outside_ns"],
        backward_outside_ns=n["backward_outside_ns"],
        outside_ops=n["outside_ops"],
        outside_kept_ns=n["outside_kept_ns"],
        outside_rest_ns=n["outside_rest_ns"],
    )


def _thread_split(trace: Trace, p: int, t: int, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
    """Per window of one thread (sorted), CpuOps' figures by field name, `ops` first."""
    ops = thread_ops(trace, p, t)
    step = assign(ops.start, lo, hi)
    inside = step >= 0
    names = trace.name_id[ops.rows]
    view = trace.name_ids(lambda s: s in VIEW_OPS)[names]
    gemm = trace.name_ids(lambda s: bool(GEMM_OP.match(s)))[names] & inside
    attention = trace.name_ids(lambda s: bool(ATTENTION_OP.match(s)))[names] & inside
    kept = trace.name_ids(lambda s: bool(KEPT_OP.match(s)))[names] & inside
    m = len(lo)
    floor = np.zeros(m)
    if (view & inside).any():
        which, medians = grouped_medians(step[view & inside], ops.self_ns[view & inside])
        floor[which] = medians
    op_floor = floor[np.maximum(step, 0)]
    bookkeeping = trace.name_ids(lambda s: bool(COMPILE_RUNTIME.search(s)))[names]  # the compiled runtime's
    rest = inside & ~kept & ~bookkeeping & (ops.self_ns > REST_FLOORS * op_floor)
    above = np.maximum(ops.self_ns - op_floor, 0)
    ones = np.ones(len(step))
    train = _training_split(trace, p, t, ops, lo, hi)
    eager, backward = train.pop("eager"), train.pop("backward")
    # the ops outside the region a compiled model takes over (a loop's own matmuls, sampling): in the host work
    # outside it, priced whole there; no call of the compiled graph's
    outside = train.pop("outside") & ~eager & ~backward & ~_under(ops, backward)
    compiled_kept = kept & ~eager & ~outside
    fused, graph_calls = _fused_runs(ops, step, inside & ~eager & ~outside, compiled_kept, view, backward, m)
    top = inside & (ops.depth == 0)
    return {
        "ops": _total(step, inside, ones, m),
        "floor_ns": floor,
        "kept": _total(step, compiled_kept & ~_under(ops, kept), ones, m),
        "gemm_ns": _total(step, gemm, ops.self_ns, m),
        "attention_ns": _total(step, attention, ops.self_ns, m),
        "other_kept_ns": _total(step, kept & ~gemm & ~attention, ops.self_ns, m),
        "rest_ns": _total(step, rest, above, m),
        "fused": fused,
        "graph_calls": graph_calls,
        "eager_ops": _total(step, top & eager, ones, m),
        "eager_kept_ns": _total(step, kept & eager, ops.self_ns, m),
        "eager_rest_ns": _total(step, rest & eager, above, m),
        "outside_ops": _total(step, top & outside, ones, m),
        "outside_kept_ns": _total(step, kept & outside, ops.self_ns, m),
        "outside_rest_ns": _total(step, rest & outside, above, m),
    } | train


def _training_split(trace: Trace, p: int, t: int, ops, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
    """Of one thread's ops (the module docstring, a CPU training step): which are eager and which are backward ops,
    and which lie outside the capture region, as masks over `ops`; and per window, the eager ops' host time (in all,
    and outside the capture region) and the backward ops' outside the capture region."""
    names = trace.name_id[ops.rows]
    ranges = thread_rows(trace, trace.rows(Kind.CPU_OP, Kind.USER_RANGE, Kind.PYTHON), p, t)
    optimizer = ranges[trace.name_ids(lambda s: bool(OPTIMIZER.search(s)))[trace.name_id[ranges]]]
    accumulate = trace.name_ids(lambda s: bool(ACCUMULATE.search(s)))[names]
    es, ee = merge(
        np.concatenate((trace.ts_ns[optimizer], ops.start[accumulate])),
        np.concatenate((trace.end_ns[optimizer], ops.end[accumulate])),
    )
    eager = inside_any(es, ee, ops.start, ops.end)
    backward = trace.name_ids(lambda s: bool(BACKWARD.search(s)))[names] & ~eager
    cap_s, cap_e, _ = capture_region(trace, p, t)
    top = backward & (ops.depth == 0)
    bs, be = merge(ops.start[top], ops.end[top])
    return {
        "eager": eager,
        "backward": backward,
        "outside": ~inside_any(cap_s, cap_e, ops.start, ops.end),
        "eager_ns": covered(es, ee, lo, hi),
        "eager_outside_ns": covered(*difference(es, ee, cap_s, cap_e), lo, hi),
        "backward_outside_ns": covered(*difference(bs, be, cap_s, cap_e), lo, hi),
    }


def _kind_medians(columns: list[np.ndarray], kinds: list[str]) -> list[np.ndarray]:
    """Each column's values replaced by their median over the steps of the same kind: the what-ifs price the median
    steady step, and one op held up in that step would otherwise read as compute: in one profiled tiny step an
    aten::matmul wrapper had 175 us of self time, and that step's rest read 0.243 ms where its kind's median is
    0.055."""
    out = [c.astype(np.float64) for c in columns]
    for kind in set(kinds):
        same = np.array([k == kind for k in kinds])
        for c, o in zip(columns, out, strict=True):
            o[same] = np.median(c[same])
    return out


def _under(ops, marked: np.ndarray) -> np.ndarray:
    """Per op: whether an op around it (an ancestor) is marked. A convolution's `_convolution` and
    `mkldnn_convolution` are one call of the compiled graph, not three."""
    out = np.zeros(len(marked), bool)
    up = ops.parent.copy()
    while (more := up >= 0).any():
        out[more] |= marked[up[more]]
        up[more] = ops.parent[up[more]]
    return out


def _fused_runs(
    ops, step: np.ndarray, inside: np.ndarray, kept: np.ndarray, view: np.ndarray, backward: np.ndarray, m: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per step: the runs of top-level ops between two that hold a kept op (a GEMM, attention), each run holding
    an op that is not a view: inductor fuses each such run into its kernels, which the compiled graph calls in
    turn between its extern calls. (A run of views only is a reinterpretation, no kernel.) And the compiled calls:
    one for each stretch of forward ops and of backward ops (AOTAutograd compiles a backward graph of its own, so a
    run never spans the two). Only the ops `inside` count (the eager ones left out)."""
    root = np.arange(len(ops.rows))  # each op's top-level ancestor, climbing the nesting a level at a time
    up = ops.parent.copy()
    while (more := up >= 0).any():
        root[more] = up[more]
        up[more] = ops.parent[up[more]]
    holds_kept = np.zeros(len(root), bool)
    holds_kept[root[kept]] = True
    top = np.flatnonzero(inside & (ops.depth == 0))  # in start order
    turns = np.ones(len(top), bool)  # a new stretch: a step's first op, or one on the other side of the backward
    turns[1:] = (backward[top][1:] != backward[top][:-1]) | (step[top][1:] != step[top][:-1])
    run = np.cumsum(holds_kept[top] | turns)  # a new run after each op that holds a kept one, and at each turn
    computes = ~holds_kept[top] & ~view[top]
    key = step[top][computes].astype(np.int64) * (len(top) + 1) + run[computes]
    fused = np.bincount(np.unique(key) // (len(top) + 1), minlength=m)
    return fused, np.bincount(step[top][turns], minlength=m)
