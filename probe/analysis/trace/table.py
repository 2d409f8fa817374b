"""One event table for every trace: torch.profiler chrome JSON and Nsight Systems SQLite exports.

`probe.analysis.trace.load_trace(path) -> Trace` reads `.json`, `.json.gz` (gzip is detected by its magic bytes,
not the suffix) and nsys `.sqlite` exports. The result is a frozen `Trace`: one row an event, one numpy array a
column, names interned to integer ids into `Trace.names`. Rows are sorted by `ts_ns`, ties kept in file order.

Columns, all of length `len(trace)`:

- `ts_ns` (int64): start, integer ns on the file's own clock (chrome: `ts` x 1000 exactly; nsys: `start`).
- `dur_ns` (int64): duration in ns, >= 0 (chrome: `dur` x 1000 exactly; nsys: `end - start`).
- `kind` (int8): a `Kind` code, below.
- `name_id` (int32): index into `names`: the op, range, API call or kernel name.
- `cat_id` (int32): index into `names`: chrome's `cat` as written; for nsys, the table the row came from.
- `pid` (int64): process. Chrome GPU rows carry the device here, as the profiler writes them.
- `tid` (int64): thread. Chrome GPU rows carry the stream here. Both: the integer, or in the 2021 schema's text its
  number ("25738", GPU rows "stream 7"); other text ("PyTorch Profiler") a negative id of its own (-2, -3, ...),
  so threads named in words stay apart; -1 when absent.
- `stream` (int64): GPU stream of kernel, memcpy, memset and gpu_range rows; -1 on host rows. Chrome: the
  row's `tid`, which kineto sets to the stream (its `args.stream` agrees on every public trace), as rocprof v1
  does (its flow arrows end on a GPU op's tid, the stream id); nsys: streamId.
- `device` (int64): GPU device of those rows; -1 on host rows. Chrome: the device the row's args name where its
  piece is read untyped (rocprof v1's `dev-id`: its kernels sit on the HSA agent's process, pid 8 for device 2,
  its copies on the copy engine's, pid 1; kineto's `args.device`, its pid on every trace here), else the row's
  `pid` (kineto's device); nsys: deviceId.
- `correlation` (int64): the launch <-> GPU op link: chrome `args.correlation`, nsys `correlationId`; -1 if none.
  Where a chrome file gives a runtime call and a GPU op none but links them by a flow arrow (rocprof v1), both
  take one new id (`flows`).
- `external_id` (int64): chrome `args["External id"]` (ties a cpu_op to its runtime calls); -1 if none.
- `bytes` (int64): bytes a copy or memset moved, on gpu_memcpy and gpu_memset rows and on runtime copy calls
  (`cudaMemcpy*`, `hipMemcpy*`, `cuMemcpy*`; `is_copy_call`); -1 on every other row and when the file does not say.
  Chrome: `args.bytes`, an integer or its decimal text (ROCm writes `"bytes": "60"` on runtime calls); nsys: the
  MEMCPY and MEMSET tables' `bytes`.
- `copy_kind` (int8): a copy's direction as cudaMemcpyKind numbers (`COPY_KINDS`: 0 HtoH, 1 HtoD, 2 DtoH,
  3 DtoD, 4 default), on gpu_memcpy rows and runtime copy calls; -1 elsewhere and when unknown. Chrome: a
  runtime call's numeric `args.kind` (hipMemcpyKind has the same numbers; ROCm writes `"kind": "1"`), a GPU
  copy's `args.kind` text ("HtoD") or else its name ("Memcpy HtoD (Host -> Device)"); nsys: `copyKind`. CUPTI's
  finer directions map onto the four: arrays are device memory (HtoA is HtoD, AtoH is DtoH, AtoA / AtoD / DtoA
  are DtoD) and a peer copy (PtoP) is DtoD.
- `shape_id` (int32): index into `Trace.shapes`, the inputs a cpu_op recorded (torch.profiler
  `record_shapes=True`); -1 on every other row and when the op recorded none. One `Shapes` per distinct
  recording, in first-seen order.

`Trace.devices` holds the GPUs the file names, one `DeviceInfo` a device: chrome's top-level `deviceProperties`,
an nsys export's TARGET_INFO_GPU rows (empty when absent).

`Trace.base_ns` is the absolute epoch time of `ts_ns == 0` when the file says it (chrome
`baseTimeNanoseconds`, nsys `TARGET_INFO_SESSION_START_TIME.utcEpochNs`), else None. `Trace.rank` is the
distributed rank that recorded the trace: chrome `distributedInfo.rank` when it is an integer, else None (nsys
exports do not say: None).

Kinds (`Kind`, stored in `kind`), from chrome's `cat` (case-insensitive) or the nsys table:

- `cpu_op`: `cpu_op`, `operator`.
- `user_range`: `user_annotation` (our `prefill`, `decode#i`, `cache.*`, ...); nsys NVTX push/pop and
  start/end ranges.
- `profiler_step`: a `ProfilerStep#N` `user_annotation` or `cpu_op`; an NVTX range of that name.
- `runtime`: `cuda_runtime`, `cuda_driver`, `runtime`, `hip_runtime`, `hip_driver`, and kineto's other runtimes
  (`mtia_runtime`, `xpu_runtime`, `xpu_driver`, `privateuse1_runtime`, `privateuse1_driver`, `glow_runtime`,
  `hpu_op`); an event with no category named as a CUDA or HIP API call (`cuLaunchKernel`, `cudaMalloc`,
  `hipMemcpy`); CUPTI_ACTIVITY_KIND_RUNTIME.
- `kernel`: `kernel`, `Kernel`, `cuda_profiler_range` (the CUPTI range profiler's one range a kernel, paired with
  the launch calls in order, as HTA does; their times are the profiler's), MTIA's `mtia_ccp_events` executions
  (`pe_exe`, `merge`, `remote`); an event with no category in a process its metadata names a GPU (rocprof v1's
  `GPU2`: `chrome.GPU_PROCESS`); CUPTI_ACTIVITY_KIND_KERNEL.
- `gpu_memcpy`: `gpu_memcpy`, `memcpy`, MTIA's `dma_request`; an event with no category in a process named
  `COPY` (rocprof v1's copy engine); CUPTI_ACTIVITY_KIND_MEMCPY.
- `gpu_memset`: `gpu_memset`, `memset`; CUPTI_ACTIVITY_KIND_MEMSET.
- `gpu_range`: `gpu_user_annotation`, a user range projected onto a stream (never a step).
- `python`: `python_function`.
- `other`: anything else (`cuda_sync`, MTIA's `event_record` / `event_wait`, `Trace`, `overhead`, ...). A
  category the reader does not know at all is one line in `Trace.warnings` with its count, so a device side
  probe does not read is never taken silently for a CPU-only trace.

Derived per row, once, on first use: `Trace.launch_kind` (the one definition of a launch call: a graph launch by
name; a kernel launch by a kernel joined to it on correlation, whatever its name, or by name when none is) and
`Trace.captured` (a launch call recorded into a graph between its thread's stream-capture begin and end calls).

Joins that would go silently wrong are said in `Trace.warnings` with counts: GPU ops whose correlation id several
runtime calls share, GPU ops sharing a kernel launch's id, ids past int64 (`correlation_keys` is the join key).

Only complete events (`ph == "X"`) become rows; metadata, instants and flow arrows are counted in
`Trace.skipped` (process names and flow arrows are read for the kinds and joins above, and are no rows). Events
the table cannot hold honestly are dropped and counted in `Trace.dropped` (a negative duration, a missing
`ts`/`dur`, a non-numeric time, a start or end beyond +-2**62 ns); `Trace.warnings` says so in words. The +-2**62
bound (146 years) keeps every start, end, and the sum or difference of any two of them inside int64, so no
interval arithmetic downstream can wrap to a negative time.
"""

from __future__ import annotations

import enum
import functools
import os
import re
import resource
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from probe.errors import ProbeError

# torch_chrome: a chrome trace torch.profiler wrote (a category it writes, or its legacy export's sides); chrome: one
# another tool wrote in the Trace Event Format (rocprof v1, an eBPF tracer of libcuda); nsys_sqlite: an nsys export.
TraceFormat = Literal["torch_chrome", "chrome", "nsys_sqlite"]
# Of each format: where it names its GPUs (`Trace.devices`), and why its GPU side can be missing and how to record it.
DEVICES_NAMED_IN: dict[TraceFormat, str] = {
    "torch_chrome": "its deviceProperties name",
    "chrome": "its deviceProperties name",
    "nsys_sqlite": "its TARGET_INFO_GPU table names",
}
GPU_UNRECORDED_WHY: dict[TraceFormat, str] = {
    "torch_chrome": "torch.profiler without ProfilerActivity.CUDA, or CUPTI unavailable",
    "chrome": "the tool that wrote the trace did not record its GPU side, or wrote it in a form probe does not read: "
    "the trace's warnings name the events kept as other",
    "nsys_sqlite": "an Nsight Systems export that recorded no kernel, copy or memset: record the GPU work inside the "
    "capture with nsys profile --trace=cuda,nvtx,osrt",
}


class Kind(enum.IntEnum):
    CPU_OP = 0
    USER_RANGE = 1
    PROFILER_STEP = 2
    RUNTIME = 3
    KERNEL = 4
    GPU_MEMCPY = 5
    GPU_MEMSET = 6
    GPU_RANGE = 7
    PYTHON = 8
    OTHER = 9

    @property
    def label(self) -> str:
        return self.name.lower()


GPU_OP_KINDS = (Kind.KERNEL, Kind.GPU_MEMCPY, Kind.GPU_MEMSET)
ON_STREAM = (Kind.KERNEL, Kind.GPU_MEMCPY, Kind.GPU_MEMSET, Kind.GPU_RANGE)

# The counts' definitions (docs/traces.md, the counts), exactly: what counts as a kernel launch and as a graph launch.
LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipLaunchCooperativeKernel",
    }
)
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "hipGraphLaunch"})
# Stream capture (CUDA runtime and driver, HIP): a launch a thread makes between its BeginCapture and EndCapture is
# recorded into a graph, not run; instantiating a graph is its other set-up call. Matched on the base name.
_CAPTURE_CALL = re.compile(r"^(?:cuda|cu|hip)Stream(Begin|End)Capture(?:ToGraph)?$")
_INSTANTIATE_CALL = re.compile(r"^(?:cuda|cu|hip)GraphInstantiate\w*$")
LAUNCH, GRAPH_LAUNCH = 1, 2  # Trace.launch_kind's codes (0: not a launch call)
# nsys names API calls with a version and sometimes a per-thread-stream suffix: cudaLaunchKernel_ptsz_v7000.
_API_SUFFIX = re.compile(r"(?:_v\d+)?$")
_STREAM_SUFFIX = re.compile(r"_(?:ptsz|ptds)$")

PROFILER_STEP_PREFIX = "ProfilerStep#"
PROFILER_OVERHEAD = "overhead"  # the category kineto gives its own work (a CUPTI activity buffer request)
OS_CALLS = "OSRT_API"  # the category of an nsys export's OS runtime calls: runtime rows, not the GPU runtime's


def api_base_name(name: str) -> str:
    """`cudaLaunchKernel_ptsz_v7000` -> `cudaLaunchKernel`; chrome names come back unchanged."""
    return _STREAM_SUFFIX.sub("", _API_SUFFIX.sub("", name, count=1), count=1)


def capture_side(name: str) -> int:
    """+1 for a call that begins a stream capture (cudaStreamBeginCapture, cuStreamBeginCapture_v2,
    hipStreamBeginCapture, ...ToGraph), -1 for one that ends it (cudaStreamEndCapture, hipStreamEndCapture), else 0."""
    m = _CAPTURE_CALL.match(api_base_name(name))
    return 0 if m is None else 1 if m.group(1) == "Begin" else -1


def is_graph_instantiate(name: str) -> bool:
    """cudaGraphInstantiate, cuGraphInstantiateWithFlags, hipGraphInstantiateWithFlags, ...: graph set-up."""
    return _INSTANTIATE_CALL.match(api_base_name(name)) is not None


COLUMNS = (
    "ts_ns",
    "dur_ns",
    "kind",
    "name_id",
    "cat_id",
    "pid",
    "tid",
    "stream",
    "device",
    "correlation",
    "external_id",
    "bytes",
    "copy_kind",
    "shape_id",
)
DTYPES = {c: np.int64 for c in COLUMNS} | {"kind": np.int8, "name_id": np.int32, "cat_id": np.int32}
DTYPES |= {"copy_kind": np.int8, "shape_id": np.int32}

# cudaMemcpyKind (and hipMemcpyKind, which has the same numbers): the `copy_kind` codes, by index.
COPY_KINDS = ("HtoH", "HtoD", "DtoH", "DtoD", "default")
# CUPTI's and kineto's direction names (CUpti_ActivityMemcpyKind) onto those codes: arrays are device memory,
# and a peer copy goes from one device to another.
COPY_KIND_OF_TEXT = {"HtoH": 0, "HtoD": 1, "DtoH": 2, "DtoD": 3, "HtoA": 1, "AtoH": 2, "AtoA": 3, "AtoD": 3}
COPY_KIND_OF_TEXT |= {"DtoA": 3, "PtoP": 3}
_COPY_CALL = re.compile(r"(?:cuda|hip|cu)Memcpy")
_I64_MIN, _I64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
_MEMCPY_NAME = re.compile(r"Memcpy (\w+)")  # kineto's "Memcpy HtoD (Host -> Device)", nsys's "Memcpy HtoD"
_COPY_NAME = re.compile(r"Copy(Host|Device)To(Host|Device)")  # rocprof v1's "CopyHostToDevice", "CopyDeviceToHost"


def is_copy_call(name: str) -> bool:
    """A runtime or driver call that copies memory: cudaMemcpy*, hipMemcpy*, cuMemcpy*."""
    return _COPY_CALL.match(name) is not None


def copy_kind_of_name(name: str) -> int:
    """The copy_kind code a GPU copy's name says ("Memcpy DtoH (Device -> Pinned)", rocprof v1's
    "CopyDeviceToHost" -> 2), -1 if it says none."""
    m = _MEMCPY_NAME.match(name)
    if m:
        return COPY_KIND_OF_TEXT.get(m.group(1), -1)
    m = _COPY_NAME.match(name)
    return COPY_KIND_OF_TEXT[f"{m.group(1)[0]}to{m.group(2)[0]}"] if m else -1


@dataclass(frozen=True)
class Shapes:
    """What one cpu_op recorded of its inputs (torch.profiler `record_shapes=True`), exactly as written."""

    dims: tuple  # args["Input Dims"]: per input its sizes, a tuple of ints (a tuple of those for a TensorList);
    # () for a scalar or None. aten::mm of [8944, 1024] by [1024, 2816]: ((8944, 1024), (1024, 2816))
    types: tuple[str, ...]  # args["Input type"]: "c10::BFloat16", "float", "Scalar", "TensorList", "" for None
    concrete: tuple[str, ...] | None = None  # args["Concrete Inputs"]: scalar values as text, "" for tensors


@dataclass(frozen=True)
class DeviceInfo:
    """One entry of chrome's `deviceProperties` (what kineto asks the runtime), typed; None where it is absent."""

    id: int | None
    name: str  # "NVIDIA H100 80GB HBM3", "AMD Instinct MI300X"; "" when the runtime gave none
    total_memory_bytes: int | None  # totalGlobalMem
    sm_count: int | None  # numSms: streaming multiprocessors (NVIDIA), compute units (AMD)
    compute_major: int | None
    compute_minor: int | None
    warp_size: int | None  # 32 (NVIDIA), 64 (AMD wavefront)
    max_threads_per_block: int | None
    max_threads_per_sm: int | None  # maxThreadsPerMultiprocessor
    regs_per_block: int | None
    regs_per_sm: int | None  # regsPerMultiprocessor
    shared_memory_per_block_bytes: int | None  # sharedMemPerBlock
    shared_memory_per_block_optin_bytes: int | None  # sharedMemPerBlockOptin
    shared_memory_per_sm_bytes: int | None  # sharedMemPerMultiprocessor; ROCm: maxSharedMemoryPerMultiProcessor
    other: tuple[tuple[str, int | float | str | bool], ...] = ()  # any other scalar key, as written (MTIA's)


_SCALARS = (int, float, str, bool)  # the values of a device's properties kept in DeviceInfo.other


def device_info(props: dict, keys: dict[str, tuple[str, ...]]) -> DeviceInfo:
    """One device's properties as the file names them (chrome's deviceProperties entry, a TARGET_INFO_GPU row of an
    nsys export) typed: each field from the first of its `keys` that holds an integer within int64, the name from
    "name" when it is text, every other scalar value kept in `other`; a value of the wrong type reads as None."""
    ints = {
        f: next((v for k in names if (v := int64_or_none(props.get(k))) is not None), None) for f, names in keys.items()
    }
    known = {k for names in keys.values() for k in names} | {"name"}
    other = tuple(
        (k, v)
        for k, v in props.items()
        if k not in known and type(v) in _SCALARS and (type(v) is not int or int64_or_none(v) is not None)
    )
    name = props.get("name")
    return DeviceInfo(name=name if type(name) is str else "", other=other, **ints)


def int64_or_none(v) -> int | None:
    """An integer value of a file that fits int64 (not a bool, not a float), else None."""
    return v if type(v) is int and _I64_MIN <= v <= _I64_MAX else None


@dataclass(frozen=True, eq=False)
class Trace:
    """One columnar event table (see the module docstring for every column) plus where it came from."""

    format: TraceFormat
    source: str  # the path it was read from
    base_ns: int | None  # absolute epoch ns of ts_ns == 0, when the file says
    names: tuple[str, ...]  # the string table behind name_id and cat_id
    ts_ns: np.ndarray
    dur_ns: np.ndarray
    kind: np.ndarray
    name_id: np.ndarray
    cat_id: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    bytes: np.ndarray
    copy_kind: np.ndarray
    shape_id: np.ndarray
    skipped: dict[str, int] = field(default_factory=dict)  # events left out on purpose, by phase
    dropped: dict[str, int] = field(default_factory=dict)  # events that could not be kept, by reason
    warnings: tuple[str, ...] = ()
    rank: int | None = None  # distributed rank that recorded the trace, when the file says
    shapes: tuple[Shapes, ...] = ()  # behind shape_id
    devices: tuple[DeviceInfo, ...] = ()  # chrome's deviceProperties

    def __len__(self) -> int:
        return len(self.ts_ns)

    def __repr__(self) -> str:
        return f"Trace({self.format}, {len(self)} events, {len(self.names)} names, {self.source!r})"

    @functools.cached_property
    def end_ns(self) -> np.ndarray:
        """ts_ns + dur_ns, added once and kept read-only: code reading one row's end at a time (step_events does,
        a row per runtime call) paid a whole-table addition for each, quadratic in the rows."""
        end = self.ts_ns + self.dur_ns
        end.flags.writeable = False
        return end

    @functools.cached_property
    def launch_kind(self) -> np.ndarray:
        """Per row, the one definition of a launch call: GRAPH_LAUNCH for a graph launch (GRAPH_LAUNCH_NAMES), LAUNCH
        for a kernel launch, 0 for any other row. A runtime call that a kernel joins by correlation is a kernel
        launch whatever its name (MTIA's `runFunction - job_prep_and_submit_for_execution`); the names
        (LAUNCH_NAMES) speak only for calls no kernel joins, a launch whose kernel was not recorded."""
        out = _launch_kinds(self)
        out.flags.writeable = False
        return out

    @functools.cached_property
    def captured(self) -> np.ndarray:
        """Per row: a launch call recorded into a graph, not run: made on a thread between its stream-capture begin
        and end calls (`capture_side`). A capture begun before the trace (an end first) or left open at its end
        holds the launches up to that end, or from that begin on."""
        out = _captured(self)
        out.flags.writeable = False
        return out

    def profiler_rows(self) -> np.ndarray:
        """The profiler's own recorded work: rows of kind other in kineto's `overhead` category (a CUPTI activity
        buffer request), in ts order."""
        other = self.rows(Kind.OTHER)
        return other[self.name_ids(lambda s: s.lower() == PROFILER_OVERHEAD)[self.cat_id[other]]]

    def os_call_rows(self) -> np.ndarray:
        """The OS runtime calls (an nsys export's `OSRT_API`: sem_wait, poll, read), runtime rows that are not the
        GPU runtime's, in ts order."""
        runtime = self.rows(Kind.RUNTIME)
        return runtime[self.name_ids(lambda s: s == OS_CALLS)[self.cat_id[runtime]]]

    @property
    def start_ns(self) -> int:
        """The trace's first instant: the earliest event start (0 for an empty table)."""
        return int(self.ts_ns[0]) if len(self) else 0

    def name(self, row: int) -> str:
        return self.names[self.name_id[row]]

    def name_ids(self, predicate) -> np.ndarray:
        """Boolean table over `names`: `mask[trace.name_id]` selects the rows whose name passes `predicate`."""
        return np.fromiter((bool(predicate(n)) for n in self.names), dtype=bool, count=len(self.names))

    def rows(self, *kinds: Kind) -> np.ndarray:
        """Row indices of the given kinds, in ts order. One comparison a kind: np.isin takes several times as long on
        a handful of small integers (it builds a lookup table over the whole column), and this runs some 50 times a
        trace."""
        mask = np.zeros(len(self.kind), bool)
        for k in kinds:
            mask |= self.kind == k
        return np.flatnonzero(mask)


def _launch_kinds(trace: Trace) -> np.ndarray:
    """Trace.launch_kind: by name for graph launches, by name or by a kernel joined to it for kernel launches."""
    out = np.zeros(len(trace), np.int8)
    runtime = trace.kind == Kind.RUNTIME
    if not runtime.any():
        return out
    key = correlation_keys(trace.format, trace.pid, trace.correlation)
    kernel_keys = key[(trace.kind == Kind.KERNEL) & (key >= 0)]
    joined = runtime & (key >= 0) & np.isin(key, kernel_keys)
    names, name_id = trace.names, trace.name_id
    graph = runtime & of_names(names, name_id, runtime, lambda s: api_base_name(s) in GRAPH_LAUNCH_NAMES)
    named = runtime & of_names(names, name_id, runtime, lambda s: api_base_name(s) in LAUNCH_NAMES)
    out[(named | joined) & ~graph] = LAUNCH
    out[graph] = GRAPH_LAUNCH
    return out


def _captured(trace: Trace) -> np.ndarray:
    """Trace.captured: per thread that calls a capture begin or end, its capture depth at each of its launch calls
    (the begins less the ends before it, offset by the ends that come before any begin)."""
    out = np.zeros(len(trace), bool)
    runtime = trace.kind == Kind.RUNTIME
    side = of_names(trace.names, trace.name_id, runtime, capture_side, np.int8, 0)
    marks = np.flatnonzero(runtime & (side != 0))
    if not len(marks):
        return out
    launches = np.flatnonzero(trace.launch_kind > 0)
    threads = np.unique(np.stack([trace.pid[marks], trace.tid[marks]], axis=1), axis=0)
    for pid, tid in threads.tolist():
        mine = marks[(trace.pid[marks] == pid) & (trace.tid[marks] == tid)]  # in time order, as the rows are
        depth = np.cumsum(side[mine].astype(np.int64))
        before = max(0, -int(depth.min()))  # ends with no begin in the trace: a capture open when it started
        depth += before
        on = launches[(trace.pid[launches] == pid) & (trace.tid[launches] == tid)]
        k = np.searchsorted(trace.ts_ns[mine], trace.ts_ns[on], side="right")
        at = np.where(k > 0, depth[np.maximum(k - 1, 0)], before)
        out[on[at > 0]] = True
    return out


def intern(strings: dict[str, int], s) -> int:
    """The id of `s` in a string table being built (`str()` of anything that is not a string)."""
    if not isinstance(s, str):
        s = "" if s is None else str(s)
    i = strings.get(s)
    if i is None:
        i = strings[s] = len(strings)
    return i


# Events, not bytes, are what a trace costs once read: identical tiny events gzip ~300:1, so a few MB of file can
# hold tens of millions. `probe analyze` holds ~180 bytes an event for the table and ~320 at its peak with the
# ledger (1M tiny events, measured with /usr/bin/time); rounded up, so the cap errs toward refusing.
BYTES_PER_EVENT = 400
MAX_EVENTS_ENV = "PROBE_MAX_EVENTS"


def max_events() -> tuple[int, str]:
    """How many events one trace may hold, and why: `PROBE_MAX_EVENTS` when set, else as many as the memory this
    process can still get (`memory_left`) holds at BYTES_PER_EVENT each."""
    raw = os.environ.get(MAX_EVENTS_ENV, "")
    if raw:
        try:
            return max(1, int(raw)), f"{MAX_EVENTS_ENV}={raw} allows"
        except ValueError:
            raise ProbeError(f"{MAX_EVENTS_ENV}={raw!r}: a whole number of events") from None
    left = memory_left()
    why = f"{left / 2**30:.1f} GiB of free memory holds at {BYTES_PER_EVENT} bytes each"
    return max(1, left // BYTES_PER_EVENT), why


def check_events(n: int, source: Path, cap: tuple[int, str]) -> None:
    """ProbeError, in one line, when a trace holds more than `cap` (max_events) events: said before they are read."""
    if n > cap[0]:
        raise ProbeError(f"{source}: more than {cap[0]:,} events, the most {cap[1]}; set {MAX_EVENTS_ENV} to read more")


def memory_left() -> int:
    """The bytes this process can still allocate: the least of the system's available memory, what its cgroup's
    limit leaves, and what its address-space limit (RLIMIT_AS, `prlimit --as`) leaves; unbounded where none can
    be read (not Linux)."""
    left = []
    available = _proc_kib("/proc/meminfo", "MemAvailable")
    if available is not None:
        left.append(available * 1024)
    try:
        with open("/sys/fs/cgroup/memory.max") as f_max, open("/sys/fs/cgroup/memory.current") as f_cur:
            limit = f_max.read().strip()
            if limit != "max":
                left.append(int(limit) - int(f_cur.read()))
    except (OSError, ValueError):
        pass
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    mapped = _proc_kib("/proc/self/status", "VmSize")
    if soft != resource.RLIM_INFINITY and mapped is not None:
        left.append(soft - mapped * 1024)
    return max(0, min(left)) if left else 2**62


def _proc_kib(path: str, field: str) -> int | None:
    """A `Name: N kB` line's N from a /proc file; None when it cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


MAX_TIME_NS = 2**62  # |start|, |end| below this: any two times add or subtract without leaving int64
OUT_OF_RANGE = "time beyond +-2**62 ns"


def finish(
    fmt: TraceFormat,
    source: Path,
    base: int | None,
    names: tuple[str, ...],
    cols: dict[str, np.ndarray],
    skipped: dict[str, int],
    dropped: dict[str, int],
    rank: int | None = None,
    notes: tuple[str, ...] = (),
    shapes: tuple[Shapes, ...] = (),
    devices: tuple[DeviceInfo, ...] = (),
) -> Trace:
    """Drop rows that cannot be kept honestly, sort by start, keep `bytes`, `copy_kind` and `shape_id` only on the
    rows they describe, and wrap up with warnings (`notes` first). `cols` is consumed: its arrays are replaced one
    at a time, so the table is never held twice."""
    dropped = dict(dropped)
    names, escaped = visible(names)
    if escaped:
        notes += (f"{escaped} name(s) held control characters (a newline, an escape sequence): shown escaped (\\n)",)
    reasons = _unkeepable(cols["ts_ns"], cols["dur_ns"])
    if reasons:
        keep = np.ones(len(cols["ts_ns"]), bool)
        for why, bad in reasons.items():
            dropped[why] = dropped.get(why, 0) + int(bad.sum())
            keep &= ~bad
        _take(cols, keep)
    ts = cols["ts_ns"]
    if len(ts) > 1 and np.any(ts[1:] < ts[:-1]):
        _take(cols, np.argsort(ts, kind="stable"))
    if len(cols["ts_ns"]) == 0:
        what = (
            "no events in its tables"
            if fmt == "nsys_sqlite"
            else "no complete ('X') events, nor begin-end ('B', 'E') pairs"
        )
        extra = f" ({describe(dropped)} dropped)" if dropped else ""
        raise ProbeError(f"{source}: trace has {what}{extra}")
    shapes = _where_meaningful(cols, names, shapes)
    notes += _join_warnings(fmt, cols, names)
    warnings = notes + tuple(f"dropped {n} event(s): {why}" for why, n in sorted(dropped.items()))
    return Trace(
        format=fmt,
        source=str(source),
        base_ns=base,
        names=names,
        skipped=dict(skipped),
        dropped=dropped,
        warnings=warnings,
        rank=rank,
        shapes=shapes,
        devices=devices,
        **{k: np.ascontiguousarray(cols.pop(k), dtype=DTYPES[k]) for k in COLUMNS},
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def visible(names: tuple[str, ...]) -> tuple[tuple[str, ...], int]:
    """The names with every control character as its escape (`\\n`, `\\x1b`), and how many held one: a trace's
    names are printed to terminals and tables, where a newline breaks the layout and an escape sequence is obeyed."""
    out = tuple(_CONTROL.sub(lambda m: repr(m.group())[1:-1], n) if _CONTROL.search(n) else n for n in names)
    return out, sum(a is not b for a, b in zip(out, names, strict=True))


def correlation_keys(fmt: str, pid: np.ndarray, correlation: np.ndarray) -> np.ndarray:
    """The key that joins a launch call to its GPU ops (-1: none). nsys numbers correlations per process, chrome
    per trace (its GPU rows carry the device in pid)."""
    if fmt == "nsys_sqlite":
        return np.where(correlation >= 0, (pid << 40) + correlation, -1)
    return correlation


def _join_warnings(fmt: str, cols: dict[str, np.ndarray], names: tuple[str, ...]) -> tuple[str, ...]:
    """Joins that would go silently wrong, with counts: GPU ops whose correlation id several runtime calls share
    (each is joined to the first of them), and GPU ops that share the id of a kernel launch, which launches one
    kernel (all would be credited to that call). Shared ids no GPU op carries join nothing and are not said (MTIA's
    runtime nests calls under one id), and a graph launch's replays share its id by right."""
    kind, key = cols["kind"], correlation_keys(fmt, cols["pid"], cols["correlation"])
    runtime = kind == Kind.RUNTIME
    ops = np.isin(kind, np.asarray(GPU_OP_KINDS, np.int8)) & (key >= 0)
    ids, per_id = _distinct(key[ops])
    calls, per_call = _distinct(key[runtime & (key >= 0)])
    out = []
    shared = calls[per_call > 1]
    ambiguous = np.isin(ids, shared)
    if ambiguous.any():
        n_calls = int(per_call[np.isin(calls, ids[ambiguous])].sum())
        out.append(
            f"{int(per_id[ambiguous].sum())} GPU ops carry {int(ambiguous.sum())} correlation id(s) shared by "
            f"{n_calls} runtime calls: each is joined to the first call with its id, so their GPU work may be "
            "credited to the wrong call and step"
        )
    if (per_id > 1).any():
        launch = runtime & of_names(names, cols["name_id"], runtime, lambda s: api_base_name(s) in LAUNCH_NAMES)
        crowded = np.isin(ids, key[launch]) & (per_id > 1)
        if crowded.any():
            out.append(
                f"{int(per_id[crowded].sum())} GPU ops share {int(crowded.sum())} correlation id(s) of kernel "
                "launch calls, which launch one kernel each: all of them are credited to one call"
            )
    return tuple(out)


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(keys, return_counts=True) of non-negative keys; by counting, not sorting, when they are dense
    (CUPTI numbers correlations 1, 2, 3, ...)."""
    if len(keys) and int(keys.max()) < 4 * len(keys) + 4096:
        counts = np.bincount(keys)
        ids = np.flatnonzero(counts)
        return ids, counts[ids]
    return np.unique(keys, return_counts=True)


def _where_meaningful(cols: dict[str, np.ndarray], names: tuple[str, ...], shapes: tuple[Shapes, ...]):
    """-1 in `bytes` and `copy_kind` but on copies (and memsets, for bytes), in `shape_id` but on cpu_ops; a GPU
    copy the file gave no direction takes its name's. Returns the shapes still referenced, ids renumbered. A column
    that holds nothing (most traces record no shapes; many no copy) is left as it is: no pass over its rows."""
    kind, name_id = cols["kind"], cols["name_id"]
    memcpy = kind == Kind.GPU_MEMCPY
    said_bytes, said_kind = (cols["bytes"] != -1).any(), (cols["copy_kind"] != -1).any()
    if said_bytes or said_kind:
        runtime = kind == Kind.RUNTIME
        copies = memcpy | (runtime & of_names(names, name_id, runtime, is_copy_call))
        if said_bytes:
            nbytes = cols["bytes"]
            cols["bytes"] = np.where((copies | (kind == Kind.GPU_MEMSET)) & (nbytes >= 0), nbytes, -1)  # a count
        if said_kind:
            cols["copy_kind"] = np.where(copies, cols["copy_kind"], -1).astype(np.int8)
    direction = cols["copy_kind"]
    unsaid = memcpy & (direction < 0)
    if unsaid.any():
        direction[unsaid] = of_names(names, name_id, unsaid, copy_kind_of_name, np.int8, -1)[unsaid]
    if not shapes:
        return ()
    shape_id = np.where(kind == Kind.CPU_OP, cols["shape_id"], -1).astype(np.int32)
    has = shape_id >= 0
    used = np.bincount(shape_id[has], minlength=len(shapes)) > 0
    renumber = (np.cumsum(used) - 1).astype(np.int32)
    shape_id[has] = renumber[shape_id[has]]
    cols["shape_id"] = shape_id
    return tuple(s for s, u in zip(shapes, used.tolist(), strict=True) if u)


def of_names(names: tuple[str, ...], name_id: np.ndarray, rows: np.ndarray, f, dtype=bool, default=0) -> np.ndarray:
    """f(name) for each row's name, evaluated once a distinct name among `rows` (`default` on the other rows): a
    trace of a million step names must not pay a regex a name for the few names of its copies."""
    present = np.zeros(len(names), bool)
    present[name_id[rows]] = True  # no sort: a million distinct names are a million writes
    ids = np.flatnonzero(present)
    table = np.full(len(names), default, dtype)
    table[ids] = [f(names[i]) for i in ids.tolist()]
    return table[name_id]


def _unkeepable(ts: np.ndarray, dur: np.ndarray) -> dict[str, np.ndarray]:
    """The rows the table cannot hold, by reason (disjoint masks; only reasons that have a row)."""
    far = (ts >= MAX_TIME_NS) | (ts <= -MAX_TIME_NS) | (dur >= MAX_TIME_NS) | (dur <= -MAX_TIME_NS)
    if far.any():  # zero those rows out first, so the sum below cannot wrap
        ts, dur = np.where(far, 0, ts), np.where(far, 0, dur)
    far |= ts + dur >= MAX_TIME_NS
    negative = ~far & (dur < 0)
    return {why: bad for why, bad in ((OUT_OF_RANGE, far), ("negative duration", negative)) if bad.any()}


def _take(cols: dict[str, np.ndarray], index: np.ndarray) -> None:
    """Select rows in place, column by column, freeing each old column before the next copy is made."""
    for k in list(cols):
        cols[k] = cols[k][index]


def describe(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))
