"""The host side of a step: two partitions of its wall time, each adding up to it exactly, and the frames, ops and
sync call sites behind them.

**By purpose** (`PURPOSE_PARTS`, after the user's own `--part`s): what the step was doing. Every nanosecond of the
step's window, on the step's own thread, goes to the first part in `PartTable.order` that covers it: the user's
parts (`--part NAME=REGEX`, in the order given: any range, cpu_op or Python frame whose name matches, for its whole
duration), then `sync` (probe's `sync` range, every runtime call that blocks the host until the device drains,
`SYNC_CALL`, every Python frame that synchronizes, `SYNC_FRAME`, and every run of event or stream queries that polls
the device, `POLL_CALLS`), `sample`, the three cache parts, `mask` (each: probe's range of that name, and the Python
frames of HF transformers' code doing that work, `_HF_FRAMES`, for an HF generate traced with stacks),
`attention` (a cpu_op matching `ATTENTION_OP`, with everything it runs), and `model`, the rest.

**By mechanism** (`MECHANISM_PARTS`): what code ran. The innermost event covering each nanosecond decides it, among
the thread's Python frames (`python_function`, from `with_stack=True`), cpu_ops and runtime calls: a frame's self
time is `python` (`sync_wait` for a synchronizing frame, and for a collective's wait: a `wait` frame directly inside
a collective's frame or op that makes no runtime call, `WAIT_FRAME`, where a Gloo rank blocks until the others
join), an op's is `dispatch`, a launch or graph-launch call's is
`launch`, a blocking call's is `sync_wait`, any other runtime call's is `runtime`; time no frame, op or call covers
is `unattributed`. A polling run (`POLL_CALLS`) is `sync_wait` over its whole span, its calls and the gaps between
them alike (`with_polls`). Ranges (record_function, NVTX) are labels, not code, so they never decide a mechanism.
Self time is torch's "Self CPU": an event's duration less its children's. Events nest on one thread, nearly always:
a range entered in one frame and left in a later one (torch.compile's "Pregraph bytecode" in b200_eager) outlives
the frame it started in. Then each stretch goes to the latest-started event still open: the event is split at its
parent's end and its continuation nests where it now lies, until every piece nests.

**Named ranges** (`named_time`): of the unattributed time, the part the user's own spans name. A range (a user
annotation, NVTX) that holds no frame, op or runtime call, or an event of a category the trace reader does not know
(`foreign_rows`: a hand-written trace's `kv` and `compute` spans), marks code the profiler recorded nothing inside:
the user's own code the span names (`ensure_layer_N_weights` loading a layer's weights). Each nanosecond of
unattributed time, outside data loading and other threads' work (the parts the answer takes first), inside such
spans goes to the innermost, by its name with numbers replaced (`family_key`), so a family of numbered spans adds up
as one. A span that holds a whole step (the step's own marker, a range around several steps) names none of its
time: it marks the step, not code in it; ProfilerStep#N and the profiler's own spans (kineto's `Trace`, `overhead`)
are never named. A range that holds ops is a label of them: its time between them stays unattributed (Python
between ops when the trace has no stacks). The mechanism partition itself is unchanged: named time is a part of
`unattributed`, which the answer names by its top span.

How the two relate: they cut the same wall two ways. `attention` by purpose is the attention ops' whole duration;
by mechanism that same time is the dispatch of those ops, the launch calls inside them and, for an op implemented
in Python (vLLM's `unified_attention`, triton's launcher), the Python frames inside them. So `top_frames` (Python
self time by frame, `python` and `sync_wait` frames alike) lists the frames inside any purpose part, and
`top_ops` is dispatch by op.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from probe import vocabulary
from probe.analysis.intervals import covered, difference, inside_any, merge, nesting
from probe.analysis.ledger.gpu import correlation_keys
from probe.analysis.ledger.patterns import Pattern, compile_user
from probe.analysis.trace import COPY_KINDS, GPU_OP_KINDS, Kind, Trace, foreign_rows, is_copy_call
from probe.errors import ProbeError


@dataclass(frozen=True)
class HostPart:
    """One part of a host partition: its key (`<name>_us` in the JSON), how people read it, the group tables and
    the explorer show it in (the three cache parts are one "cache"), and what it holds."""

    name: str
    label: str
    group: str
    holds: str


PURPOSE_PARTS: tuple[HostPart, ...] = (
    HostPart("sync", "sync", "sync", "probe's sync range; runtime calls and Python frames that wait for the device"),
    HostPart("data", "data loading", "data", "ranges, ops and frames of data loading (`DATA`): the next batch"),
    HostPart("communication", "communication", "communication", "collectives' ranges, ops, frames (`COMMUNICATION`)"),
    HostPart("sample", "sample", "sample", "probe's sample range, HF's logits processors: choosing the next token"),
    HostPart("cache_update", "cache update", "cache", "Cache.update: writing each layer's keys and values"),
    HostPart("cache_seq_length", "cache seq length", "cache", "Cache.get_seq_length: reading the filled length"),
    HostPart("cache_mask_sizes", "cache mask sizes", "cache", "Cache.get_mask_sizes"),
    HostPart("mask", "mask", "mask", "building the attention mask"),
    HostPart("attention", "attention", "attention", "attention cpu_ops (SDPA, flash, paged), all they run"),
    HostPart("model", "rest of model", "model", "the rest of the step: what no part above covers"),
)
MECHANISM_PARTS: tuple[HostPart, ...] = (
    HostPart("python", "Python", "python", "a Python frame is the innermost event (with_stack=True)"),
    HostPart("dispatch", "op dispatch", "dispatch", "a cpu_op is the innermost event: its self time"),
    HostPart("launch", "launch calls", "launch", "kernel and graph launch calls"),
    HostPart(
        "runtime",
        "other runtime",
        "runtime",
        "other runtime and driver calls: async copies, events, waits; torch.compile's guard check (`COMPILE_RUNTIME`)",
    ),
    HostPart(
        "sync_wait", "sync wait", "sync_wait", "blocking runtime calls, synchronizing frames and collectives' waits"
    ),
    HostPart(
        "profiler",
        "profiler overhead",
        "profiler",
        "the profiler's own recorded work inside this thread's events (kineto's `overhead`: CUPTI buffer requests)",
    ),
    HostPart(
        "unattributed",
        "unattributed",
        "unattributed",
        "no Python frame, op or runtime call covers it (of it, inside named ranges that hold none: `named_time`)",
    ),
)
PURPOSE = tuple(p.name for p in PURPOSE_PARTS)
MECHANISM = tuple(p.name for p in MECHANISM_PARTS)
REST, UNATTRIBUTED = "model", "unattributed"
_PROBE_RANGES = {
    "sync": vocabulary.SYNC,
    "sample": vocabulary.SAMPLE,
    "cache_update": vocabulary.CACHE_UPDATE,
    "cache_seq_length": vocabulary.CACHE_SEQ_LENGTH,
    "cache_mask_sizes": vocabulary.CACHE_MASK_SIZES,
    "mask": vocabulary.MASK,
}


def _hf_frame(module: str, function: str = r"\S+") -> re.Pattern[str]:
    """The Python frame (with_stack=True) of a function in HF transformers' `module`: `transformers/cache_utils.py(
    1042): update`, the path as torch's tracer gives it (site-packages' prefix, if any, before it)."""
    return re.compile(rf"(?:^|/)transformers/{module}\.py\(\d+\): {function}$")


# The same work in HF transformers' own code, for a trace of HF generate that holds no range of probe's: each part's
# Python frames, which feed it as probe's range does. The cache parts are the Cache methods probe's ranges wrap
# (`update`, `get_seq_length`, `get_mask_sizes` of transformers/cache_utils.py, its layers' methods of those names
# among them); the mask is anything in transformers/masking_utils.py (create_causal_mask and what it calls, but the
# cache's mask-size query: a cache part comes first); sampling is the logits processors and warpers generate applies
# each token (`transformers/generation/logits_process.py(N): __call__`: temperature, top-k, top-p, repetition). The
# argmax or multinomial generate's loop then calls is a built-in no frame name ties to sampling, so it stays the rest.
_HF_FRAMES = {
    "sample": _hf_frame("generation/logits_process", "__call__"),
    "cache_update": _hf_frame("cache_utils", "update"),
    "cache_seq_length": _hf_frame("cache_utils", "get_seq_length"),
    "cache_mask_sizes": _hf_frame("cache_utils", "get_mask_sizes"),
    "mask": _hf_frame("masking_utils"),
}
# cpu_ops whose time is attention: SDPA and its backends, and the attention ops of serving engines
ATTENTION_OP = re.compile(
    r"scaled_dot_product|flash_attn|flash_attention|efficient_attention|unified_attention|"
    r"paged_attention|_attention_forward|::attention|mla_attention",
    re.IGNORECASE,
)
# Data loading, by the names torch and the pipelines that wrap it give it, in either event schema (a user annotation
# now, an `Operator` in 2021's): the DataLoader's `enumerate(DataLoader)#...__next__` range and its `__next__` frame,
# torchrec's `## wait_for_batch ##`.
DATA = re.compile(
    r"enumerate\(DataLoader\)|DataLoader[A-Za-z_]*\.__next__|dataloader\.py\([0-9]+\): __next__|wait_for_batch"
)
# Collective communication: NCCL's and Gloo's ranges (`nccl:all_reduce`), c10d's ops (`c10d::allreduce_`), torch's
# `record_param_comms`, and any all-to-all, all-gather, all-reduce or reduce-scatter by name (c10d's Python API
# `distributed_c10d.py(..): all_reduce`, `## alltoall_fwd_single ##`, vLLM's `tensor_model_parallel_all_gather`; not
# c10d's bookkeeping, `distributed_c10d.py(..): is_initialized`).
COMMUNICATION = re.compile(
    r"^nccl:|^gloo:|^c10d::|^record_param_comms$|all_?to_?all|all_?gather|all_?reduce|reduce_?scatter", re.IGNORECASE
)
# A collective on the GPU: torch names a ProcessGroupNCCL collective's range `nccl:<op>` (RCCL's on ROCm too);
# Gloo's (`gloo:all_reduce`) runs on the CPU, so a trace holding only those may be a CPU job's.
GPU_COLLECTIVE = re.compile(r"^nccl:")
# A collective run on the host: Gloo's range (`gloo:all_reduce`, on its runloop thread) spans the collective on this
# rank from its start until it completes, when the last rank has joined: a CPU job's communication kernel.
HOST_COLLECTIVE = re.compile(r"^gloo:")
# A copy call waited for the device when its GPU copy started this long after the call began and the call was
# still running then: the copy sat in its stream's queue behind earlier work. A copy issued to an idle stream starts
# within the launch latency (7-14 us for the pinned copies of v100_dlrm_ddp_rank0_step; kernels' launch delay p50 is
# 5-20 us on the traces in tests/data), so 50 us is several times any idle start.
COPY_QUEUED_NS = 50_000
# Runtime calls that block the host until the device drains: every *Synchronize, and the synchronous copies
# (torch's .item() or .to("cpu") is hipMemcpyWithStream on ROCm; cudaMemcpyAsync + cudaStreamSynchronize on CUDA).
# And the OS runtime calls (an nsys export's OSRT_API) in which a thread waits until another thread, the OS or a timer
# lets it go: a lock, a condition, a semaphore, a join, a poll over descriptors, a sleep (a loop's `queue.get` for its
# producer is a sem_wait or a pthread_cond_wait). I/O (read, write) and the rest are the call's own work.
SYNC_CALL = re.compile(
    r"Synchronize|^(?:cuda|hip)Memcpy(?:2D|3D|Peer|WithStream|DtoH|HtoD|DtoD)?(?:_v\d+)?$|"
    r"^cuMemcpy(?:DtoH|HtoD|DtoD|2D|3D)?(?:_v\d+)?$|"
    r"^(?:pthread_(?:cond_(?:timed|clock)?wait|mutex_(?:timed|clock)?lock|rwlock_(?:timed|clock)?(?:rd|wr)lock|"
    r"(?:timed)?join|barrier_wait)|"
    r"sem_(?:timed|clock)?wait|e?poll(?:_p?wait)?|ppoll|p?select|(?:clock_)?nanosleep|u?sleep|wait(?:pid|id|4)?)$"
)
# Device-memory frees synchronize: hipFree "performs an implicit hipDeviceSynchronize() call" (HIP's API reference),
# CUDA's cuMemFree "may perform implicit synchronization" (not for stream-ordered memory, whose cudaFreeAsync is left
# out). Not a SYNC_CALL all the same: the call's time is the driver's unmapping as much as a wait on the device (825 ms
# of hipFree against 71 ms of GPU work in an MI300X training step), and booked as sync wait with no GPU op running it
# would read as a wait on unseen work; the answer names the call and that it synchronizes where it shows.
DEVICE_FREE = re.compile(r"^(?:cuda|hip)Free(?:_v\d+)?$|^cuMemFree(?:_v\d+)?$")
# Python frames that wait for the device: torch.cuda.synchronize and the synchronize methods of torch's Event and
# Stream (`<built-in method synchronize of torch.Event object>`, vLLM's decode trace).
SYNC_FRAME = re.compile(r"\bsynchronize\b")
# A collective's wait: a frame of a function `wait` (c10d's `work.wait()`, `<built-in method wait of ...>`) whose
# parent is a collective's frame or op (`COMMUNICATION`: `distributed_c10d.py(N): all_reduce`). The host blocks there
# until the last rank joins the collective: Gloo's collectives run on the host (a CPU job), so its wait is the time
# the rank waits for the others (8.1 of an 11.1 ms decode step on a rank whose peer computes more). Only a wait that
# makes no runtime call: NCCL's (RCCL's) makes the stream wait (a cudaStreamWaitEvent inside it, 10-20 us of frame
# in vLLM's TP4 traces) and returns, and its blocking form waits in a synchronizing call, counted as such. A wait,
# not Python work: mechanism `sync_wait` (its purpose stays `communication`).
WAIT_FRAME = re.compile(r"^<built-in method wait of |\): wait$")
# Python builtins in which the thread blocks until another thread acts, an event arrives or time passes: a lock's
# acquire (`<built-in method acquire of _thread.lock object>`, under threading's Condition.wait, Event.wait,
# Thread.join and Thread.start, queue.get), waiting for I/O readiness (`<built-in method poll of select.epoll
# object>`, select.select, kqueue's control: an asyncio event loop's idle wait, which a worker thread's result ends),
# and `time.sleep` (`SLEEP_BUILTIN`, nanosleep's Python form). The
# Python-level form of SYNC_CALL's OS calls: their self time is a wait, not Python work (`mechanism_split`): where
# another thread of the process ran code meanwhile (events that began and ended inside it), the wait is that
# thread's work (`waited_ns`, the step's Python that waited on other threads); where none did, a wait on what the
# trace does not hold (a thread or process not recorded, a timer, the network): sync wait, as its OS call's is.
# Inside data loading it stays data loading's own part.
BLOCKING_BUILTIN = re.compile(
    r"^<built-in (?:method (?:acquire|acquire_lock) of _thread\.(?:lock|RLock)\b|method (?:poll|select|control) of "
    r"select\.(?:epoll|poll|devpoll|kqueue)\b|function (?:select|poll|sleep)>)"
)
# Python's `time.sleep` (`<built-in function sleep>`): the thread waits for nothing and no one, it is idle (a serving
# loop between bursts of requests). Its time is no busy time of its thread's (probe.analysis.ledger.coverage); a lock's
# wait stays busy there, as a wait on work the trace may not hold.
SLEEP_BUILTIN = re.compile(r"^<built-in function sleep>$")
# Runtime calls that ask whether the device has reached a point and return at once: CUDA's and HIP's event and
# stream queries, runtime and driver API (nsys's `_v3020` suffix allowed).
QUERY_CALL = re.compile(r"^(?:cuda|hip)(?:Event|Stream)Query(?:_v\d+)?$|^cu(?:Event|Stream)Query(?:_v\d+)?$")
# Polling, the one rule (`Polls`): a thread makes the same QUERY_CALL at least POLL_CALLS times back to back (no cpu_op
# or other runtime call starts between two of them), each starting within POLL_GAP_NS of the previous one's end, the
# first inside no cpu_op. From its first call's start to its last one's end the host waits on the device, as in a
# blocking sync: the run is sync wait and sync, and its first call names the sync site. Why these bounds: a loop that
# waits (`while not event.query(): pass`) queries every few us for as long as the device takes, while a program that
# checks its in-flight work queries each piece of it once. The caching allocators query each pending event once, inside
# the op that allocates (aten::empty, aten::_pin_memory): runs of up to 32 calls in ../shared/traces, every one inside
# an op, and in DeepSeek-V3's DualPipe chunk up to 17 (its 2,241 cudaEventQuery calls are the allocator's, which
# `record_stream` keeps busy: no poll). What the rule cannot tell: a trace does not name the event queried, so a
# thread that checks 20 or more events in one quick pass outside any op reads as polling (background threads of
# ProcessGroupNCCL-style code do, in passes of 24-25, on threads of their own); a loop that sleeps longer than
# POLL_GAP_NS between its queries is not caught, its sleeps left to the time no event covers.
POLL_CALLS = 20
POLL_GAP_NS = 20_000
# torch.compile's own bookkeeping around a compiled call, recorded as cpu_ops: the guard check before each call
# (`TorchDynamo Cache Lookup`, dynamo's guard evaluation in C++: 0.110 ms of self time a call on a CPU generate), the
# bytecode that gathers the graph's inputs (`Pregraph bytecode`) and AOTAutograd's wrapper around the graph
# (`AOTDispatcher Runtime Wrapper Prologue`), the last two recorded under dynamo's `record_runtime_overhead`. Their
# self time is the compiled runtime's, not an op's compute or dispatch: mechanism `runtime`, and no op's in the op
# table. `Torch-Compiled Region` and `CompiledFunction` are not among them: they hold the compiled graph, whose kernels
# no op records, so without stacks their self time is the graph's compute.
COMPILE_RUNTIME = re.compile(r"^(?:TorchDynamo Cache Lookup|Pregraph bytecode|AOTDispatcher Runtime Wrapper \w+)$")
_HOST_MEMORY = re.compile(r"\b(Pageable|Pinned)\b")  # a GPU copy's host side, as kineto names it
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # `<built-in method __new__ of type object at 0xa20880>`
_PART_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# A frame of the caller's own source (`vllm/v1/worker/gpu_model_runner.py(931): _update_states`), not of torch's: the
# line a sync site names (SGLang's `torch.tensor(...)` copy is in `forward_batch_info.py(443): init_new`, under
# torch's `_device.py` wrapper).
_SOURCE_FRAME = re.compile(r"^(?!(?:.*/)?torch/).*\.py\(\d+\)")

# mechanism codes, in MECHANISM order
_PYTHON, _DISPATCH, _LAUNCH, _RUNTIME, _SYNC_WAIT, _PROFILER, _NONE = range(7)


def frame_name(name: str) -> str:
    """A Python frame's name as the trace writes it, less object addresses, so one builtin aggregates."""
    return _ADDRESS.sub("", name)


@dataclass(frozen=True)
class UserPart:
    name: str
    pattern: Pattern  # RE2: linear in the name (probe.analysis.ledger.patterns)


def parse_part(text: str, reserved: frozenset[str] = frozenset()) -> UserPart:
    """`NAME=REGEX` from the command line; a one-line ProbeError for a bad name, a clash or a bad regex."""
    name, sep, pattern = text.partition("=")
    name = name.strip()
    if not sep or not pattern:
        raise ProbeError(f"--part {text!r}: use NAME=REGEX")
    if not _PART_NAME.fullmatch(name):
        raise ProbeError(f"--part {text!r}: the name must be letters, digits and _ (it becomes the {name}_us key)")
    if name in PURPOSE or name in MECHANISM or name in reserved:
        raise ProbeError(
            f"--part {name}: clashes with a built-in part or field; built-in parts are "
            f"{', '.join((*PURPOSE, *MECHANISM))}"
        )
    return UserPart(name, compile_user(pattern, f"--part {name}={pattern}"))


@dataclass(frozen=True)
class FrameTime:
    frame: str  # the frame's name as the trace writes it, object addresses removed
    self_ns: int  # time this frame was the innermost event (torch's Self CPU)
    count: int  # frame events with this name that start in the scope
    waited_ns: int = 0  # of self_ns, the part the frame waited, not its own code: outside data loading, while another
    # thread of the process ran events that began and ended there (`waited_on`); and all of a blocking frame's
    # (mechanism sync_wait: a synchronizing frame, a collective's wait, `WAIT_FRAME`, a blocking builtin's wait on
    # nothing recorded)

    @property
    def own_ns(self) -> int:
        """The frame's self time less its wait on other threads: what fixing the frame itself could save."""
        return self.self_ns - self.waited_ns

    def to_json(self) -> dict:
        return {
            "frame": self.frame,
            "self_us": self.self_ns / 1e3,
            "count": self.count,
            "waited_us": self.waited_ns / 1e3,
        }


@dataclass(frozen=True)
class OpTime:
    name: str
    self_ns: int  # dispatch: the time this op was the innermost event, summed over its calls
    calls: int  # every call with this name, nested ones included

    @property
    def self_us(self) -> float:
        return self.self_ns / 1000

    def to_json(self) -> dict:
        return {"name": self.name, "self_us": self.self_us, "calls": self.calls}


@dataclass(frozen=True)
class SyncSite:
    """Where a step waited for the device: the blocking call (a runtime call, or a synchronizing frame), the
    innermost Python frame around it and the innermost frame of source code (`file.py(line): function`)."""

    call: str
    frame: str | None
    source: str | None
    wait_ns: int  # the blocking calls' time inside the step
    count: int
    stream_wait_before_ns: int | None = None  # a *StreamWaitEvent call this long before the first blocking call,
    # in the same step: the stream the call waited on was itself waiting on an event
    copy_bytes: int | None = None  # the copy the wait was for: the blocking call's own (hipMemcpyWithStream), or
    copy_kind: str | None = None  # the copy call just before it in the same op (.item(): cudaMemcpyAsync, then sync)
    copy_memory: str | None = None  # "pageable" or "pinned": the host memory of that copy, where the trace says
    op: str | None = None  # the outermost cpu_op around the blocking call (aten::item, aten::to): what was called

    def to_json(self) -> dict:
        return {
            "call": self.call,
            "frame": self.frame,
            "source": self.source,
            "wait_us": self.wait_ns / 1e3,
            "count": self.count,
            "stream_wait_before_us": None if self.stream_wait_before_ns is None else self.stream_wait_before_ns / 1e3,
            "copy_bytes": self.copy_bytes,
            "copy_kind": self.copy_kind,
            "copy_memory": self.copy_memory,
            "op": self.op,
        }


@dataclass(frozen=True)
class ThreadTime:
    """Another thread's host time inside a step's window (autograd's backward thread, a communication thread, an
    async scheduler): how long any event of it ran there, and that time by mechanism."""

    pid: int
    tid: int
    busy_ns: int
    mechanism_ns: dict[str, int]
    top: tuple[OpTime, ...] = ()  # its frames, ops and runtime calls by innermost self time there, largest first
    communication_ns: int = 0  # its time inside collectives' ranges, ops and frames (`COMMUNICATION`) there

    def to_json(self) -> dict:
        return {
            "pid": self.pid,
            "tid": self.tid,
            "busy_us": self.busy_ns / 1e3,
            "mechanism_us": {k: v / 1e3 for k, v in self.mechanism_ns.items()},
            "top": [o.to_json() for o in self.top],
            "communication_us": self.communication_ns / 1e3,
        }


@dataclass
class ThreadOps:
    """The cpu_ops of one thread, sorted by (start asc, end desc), with their nesting."""

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    depth: np.ndarray
    parent: np.ndarray  # index of the enclosing op in these arrays, -1 at the top
    self_ns: np.ndarray  # duration less direct cpu_op children


def thread_rows(trace: Trace, rows: np.ndarray, pid: int, tid: int) -> np.ndarray:
    return rows[(trace.pid[rows] == pid) & (trace.tid[rows] == tid)]


def thread_ops(trace: Trace, pid: int, tid: int) -> ThreadOps:
    return nested(trace, thread_rows(trace, trace.rows(Kind.CPU_OP), pid, tid))


def nested(trace: Trace, rows: np.ndarray) -> ThreadOps:
    """One thread's events `rows` (its cpu_ops, or its frames, ops and calls together) with their nesting and self
    time, sorted by (start asc, end desc)."""
    start, end = trace.ts_ns[rows], trace.end_ns[rows]
    order = np.lexsort((-end, start))
    rows, start, end = rows[order], start[order], end[order]
    depth, parent = nesting(start, end)
    dur = end - start
    child = np.zeros(len(rows), np.int64)
    has = parent >= 0
    np.add.at(child, parent[has], dur[has])
    return ThreadOps(rows, start, end, depth, parent, np.maximum(dur - child, 0))


@dataclass(frozen=True)
class Polls:
    """Polling runs (`POLL_CALLS`), in (thread, time) order: the row of each one's first query call (its thread, its
    name, the frames around it), its start (that call's) and its end (its last call's), ns."""

    first: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def of_thread(self, trace: Trace, pid: int, tid: int) -> Polls:
        """The runs of thread pid/tid."""
        mine = (trace.pid[self.first] == pid) & (trace.tid[self.first] == tid)
        return Polls(self.first[mine], self.start[mine], self.end[mine])


def polling_runs(trace: Trace, query: np.ndarray) -> Polls:
    """Every polling run of the trace (`POLL_CALLS`, the rule); `query`: QUERY_CALL over the trace's names. One pass
    over the cpu_ops and runtime calls in (thread, start) order, an op before a call that starts with it; then, for
    the few threads that hold a run, whether its first call lies inside an op."""
    rows = trace.rows(Kind.CPU_OP, Kind.RUNTIME)
    is_call = trace.kind[rows] == Kind.RUNTIME
    rows = rows[np.lexsort((is_call, trace.ts_ns[rows], trace.tid[rows], trace.pid[rows]))]
    name, start, end = trace.name_id[rows], trace.ts_ns[rows], trace.end_ns[rows]
    pid, tid = trace.pid[rows], trace.tid[rows]
    q = (trace.kind[rows] == Kind.RUNTIME) & query[name]
    follows = np.zeros(len(rows), bool)  # a query call that continues the run of the one before it
    follows[1:] = q[1:] & q[:-1] & (name[1:] == name[:-1]) & (pid[1:] == pid[:-1]) & (tid[1:] == tid[:-1])
    follows[1:] &= start[1:] - end[:-1] <= POLL_GAP_NS
    first = np.flatnonzero(q & ~follows)
    last = np.flatnonzero(q & ~np.append(follows[1:], False))
    long = last - first + 1 >= POLL_CALLS
    first, last = first[long], last[long]
    keep = ~_inside_ops(trace, rows[first])
    return Polls(rows[first][keep], start[first][keep], end[last][keep])


def _inside_ops(trace: Trace, calls: np.ndarray) -> np.ndarray:
    """Per call: whether it lies inside a cpu_op of its own thread (one pass a thread that has such calls)."""
    out = np.zeros(len(calls), bool)
    if not len(calls):
        return out
    ops = trace.rows(Kind.CPU_OP)
    for pid, tid in {(int(p), int(t)) for p, t in zip(trace.pid[calls], trace.tid[calls], strict=True)}:
        mine = (trace.pid[calls] == pid) & (trace.tid[calls] == tid)
        own = thread_rows(trace, ops, pid, tid)
        out[mine] = inside_any(trace.ts_ns[own], trace.end_ns[own], trace.ts_ns[calls[mine]], trace.end_ns[calls[mine]])
    return out


@dataclass(frozen=True)
class PartTable:
    """Per name id of a trace: which part a range, op, call or frame of that name feeds, the user parts, and the
    normalized Python frame names."""

    by_name: dict[str, np.ndarray]  # part or rule -> bool over trace.names
    user: tuple[tuple[str, np.ndarray], ...]  # (name, bool over trace.names), in priority order
    frame_id: np.ndarray  # name id -> id into `frames` (the normalized Python frame names)
    frames: tuple[str, ...]
    waited: np.ndarray  # bool over the trace's rows: a copy call the host waited in (`waited_copies`)
    copy_of: dict[int, int]  # a copy call's row -> the row of the GPU copy it launched
    polls: Polls  # the trace's polling runs (`polling_runs`)

    @property
    def order(self) -> tuple[str, ...]:
        """The purpose partition's parts in priority order."""
        return (*(name for name, _ in self.user), *PURPOSE)

    @classmethod
    def build(cls, trace: Trace, user_parts: tuple[UserPart, ...] = ()) -> PartTable:
        split = [vocabulary.split_label(n)[0] for n in trace.names]
        by_name = {part: np.array([n == label for n in split], bool) for part, label in _PROBE_RANGES.items()}
        by_name["attention"] = trace.name_ids(lambda s: ATTENTION_OP.search(s) is not None)
        by_name["sync_call"] = trace.name_ids(lambda s: SYNC_CALL.search(s) is not None)
        by_name["sync_frame"] = trace.name_ids(lambda s: SYNC_FRAME.search(s) is not None)
        by_name["wait_frame"] = trace.name_ids(lambda s: WAIT_FRAME.search(s) is not None)
        by_name["blocking_builtin"] = trace.name_ids(lambda s: BLOCKING_BUILTIN.search(s) is not None)
        by_name["source_frame"] = trace.name_ids(lambda s: _SOURCE_FRAME.search(s) is not None)
        by_name["stream_wait"] = trace.name_ids(lambda s: "StreamWaitEvent" in s)
        by_name["query_call"] = trace.name_ids(lambda s: QUERY_CALL.search(s) is not None)
        by_name["data"] = trace.name_ids(lambda s: DATA.search(s) is not None)
        by_name["communication"] = trace.name_ids(lambda s: COMMUNICATION.search(s) is not None)
        for part, frame in _HF_FRAMES.items():
            by_name[f"{part}_frame"] = trace.name_ids(lambda s, frame=frame: frame.search(s) is not None)
        by_name["compile_runtime"] = trace.name_ids(lambda s: COMPILE_RUNTIME.search(s) is not None)
        user = tuple((p.name, trace.name_ids(lambda s, p=p: p.pattern.search(s) is not None)) for p in user_parts)
        table: dict[str, int] = {}
        frame_id = np.fromiter(
            (table.setdefault(frame_name(n), len(table)) for n in trace.names), np.int64, len(trace.names)
        )
        copy_of = copy_calls(trace)
        polls = polling_runs(trace, by_name["query_call"])
        return cls(by_name, user, frame_id, tuple(table), waited_copies(trace, copy_of), copy_of, polls)


def copy_calls(trace: Trace) -> dict[int, int]:
    """Each copy call's row (cudaMemcpy*, hipMemcpy*, cuMemcpy*: `is_copy_call`) -> the row of the first GPU copy
    joined to it on correlation."""
    runtime = trace.rows(Kind.RUNTIME)
    calls = runtime[trace.name_ids(is_copy_call)[trace.name_id[runtime]]]
    copies = trace.rows(Kind.GPU_MEMCPY)
    if not len(calls) or not len(copies):
        return {}
    first: dict[int, int] = {}
    for key, row in zip(correlation_keys(trace, copies).tolist(), copies.tolist(), strict=True):
        if key >= 0:
            first.setdefault(key, row)
    keys = correlation_keys(trace, calls).tolist()
    return {row: first[key] for row, key in zip(calls.tolist(), keys, strict=True) if key in first}


def waited_copies(trace: Trace, copy_of: dict[int, int]) -> np.ndarray:
    """Per row of the trace: a copy call the trace shows the host waited in, whatever the call is named
    (cudaMemcpyAsync, hipMemcpyAsync, hipMemcpyWithStream): the call returned at or after its GPU copy ended (a copy
    from or to pageable memory, the copy behind `.item()` or `.tolist()`), or its GPU copy started `COPY_QUEUED_NS`
    or more after the call began while the call still ran (the stream was busy with earlier work, and the call
    waited for it). A call that returned before its copy started did not wait, however late the copy ran."""
    out = np.zeros(len(trace), bool)
    if not copy_of:
        return out
    calls = np.fromiter(copy_of, np.int64, len(copy_of))
    copies = np.fromiter(copy_of.values(), np.int64, len(copy_of))
    call_s, call_e = trace.ts_ns[calls], trace.end_ns[calls]
    copy_s, copy_e = trace.ts_ns[copies], trace.end_ns[copies]
    out[calls[(call_e >= copy_e) | ((copy_s - call_s >= COPY_QUEUED_NS) & (call_e >= copy_s))]] = True
    return out


@dataclass
class HostSplit:
    """Both partitions of some steps' windows on one thread (part -> ns per step), and what lies behind them."""

    purpose: dict[str, np.ndarray]  # every part in PartTable.order, one value per step
    mechanism: dict[str, np.ndarray]  # every part in MECHANISM, one value per step
    frames: list[tuple[FrameTime, ...]]  # per step, by self time, largest first
    ops: list[tuple[OpTime, ...]]  # per step, dispatch by op, largest first
    sync_sites: list[tuple[SyncSite, ...]]  # per step, largest wait first
    sync_segments: tuple[np.ndarray, np.ndarray, np.ndarray]  # (step, start, end) of every sync_wait piece
    frame_totals: dict[int, tuple[int, int, int]]  # frame id -> (self ns, calls, waited ns) over these steps
    in_data: dict[str, np.ndarray]  # every part in MECHANISM: the mechanism split of the time inside data loading
    python_other: np.ndarray  # per step: of Python self time outside data loading, the wait on other threads
    named: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per step: `named_time`'s ns
    named_top: list[tuple[NamedTime, ...]] = field(default_factory=list)  # per step: by span name, largest first


def purpose_tiers(trace: Trace, table: PartTable, pid: int, tid: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What each purpose part but the last (`model`, the rest) covers on thread pid/tid, as merged intervals, in
    priority order: the user's parts (ranges, ops and frames of a matching name), sync (probe's range, blocking
    calls and copy calls the host waited in, synchronizing frames), data loading and communication (ranges, ops and
    frames named so), sample, the cache parts and mask (probe's ranges, and HF transformers' frames of the same work:
    `_HF_FRAMES`), attention (attention ops). Sync holds the
    thread's polling runs too (`Polls`)."""
    ranges = thread_rows(trace, trace.rows(Kind.USER_RANGE, Kind.PROFILER_STEP), pid, tid)
    runtime = thread_rows(trace, trace.rows(Kind.RUNTIME), pid, tid)
    ops = thread_rows(trace, trace.rows(Kind.CPU_OP), pid, tid)
    frames = thread_rows(trace, trace.rows(Kind.PYTHON), pid, tid)

    def spans(*pairs: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        rows = np.concatenate([rows[mask[trace.name_id[rows]]] for rows, mask in pairs])
        return merge(trace.ts_ns[rows], trace.end_ns[rows])

    tiers: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, mask in table.user:
        tiers[name] = spans((ranges, mask), (ops, mask), (frames, mask))
    waited = runtime[table.waited[runtime]]
    polls = table.polls.of_thread(trace, pid, tid)
    sync_s, sync_e = spans(
        (ranges, table.by_name["sync"]), (runtime, table.by_name["sync_call"]), (frames, table.by_name["sync_frame"])
    )
    tiers["sync"] = merge(
        np.concatenate((sync_s, trace.ts_ns[waited], polls.start)),
        np.concatenate((sync_e, trace.end_ns[waited], polls.end)),
    )
    for part in ("data", "communication"):
        tiers[part] = named_spans(trace, table, pid, tid, part)
    for part in ("sample", "cache_update", "cache_seq_length", "cache_mask_sizes", "mask"):
        tiers[part] = spans((ranges, table.by_name[part]), (frames, table.by_name[f"{part}_frame"]))
    tiers["attention"] = spans((ops, table.by_name["attention"]))
    return tiers


def named_spans(trace: Trace, table: PartTable, pid: int, tid: int, part: str) -> tuple[np.ndarray, np.ndarray]:
    """The ranges, ops and frames of thread pid/tid whose names `table` gives to `part` ("data": `DATA`,
    "communication": `COMMUNICATION`), as merged intervals."""
    rows = thread_rows(trace, trace.rows(Kind.USER_RANGE, Kind.PROFILER_STEP, Kind.CPU_OP, Kind.PYTHON), pid, tid)
    rows = rows[table.by_name[part][trace.name_id[rows]]]
    return merge(trace.ts_ns[rows], trace.end_ns[rows])


def purpose_split(
    trace: Trace, table: PartTable, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray, tiers: dict | None = None
):
    """The purpose partition of the windows [lo, hi] on thread pid/tid: part -> ns per window, in priority order;
    the last part, `model`, is what no other part covers, so the parts add up to the windows exactly. `tiers`:
    purpose_tiers' answer, when the caller has it."""
    tiers = tiers if tiers is not None else purpose_tiers(trace, table, pid, tid)
    parts: dict[str, np.ndarray] = {}
    acc_s, acc_e = np.zeros(0, np.int64), np.zeros(0, np.int64)
    before = np.zeros(len(lo), np.int64)
    for part in table.order[:-1]:
        acc_s, acc_e = merge(np.concatenate([acc_s, tiers[part][0]]), np.concatenate([acc_e, tiers[part][1]]))
        now = covered(acc_s, acc_e, lo, hi)
        parts[part] = now - before
        before = now
    parts[REST] = (hi - lo) - before
    return parts


@dataclass
class _Innermost:
    """A thread's host events, nested, each with its self segments: the pieces of the timeline where it is the
    innermost event. An event that outlives the event it started in is split at that event's end into pieces
    (`original` is False for the continuations), so the pieces nest properly and each stretch of time goes to the
    latest-started event still open."""

    rows: np.ndarray  # a trace row per piece, pieces sorted by (start, continuation first, -end, kind rank)
    start: np.ndarray
    end: np.ndarray
    original: np.ndarray  # the piece that starts where its event starts
    parent: np.ndarray
    mechanism: np.ndarray  # a code per piece
    seg_owner: np.ndarray  # self segments: index into the pieces, start, end
    seg_start: np.ndarray
    seg_end: np.ndarray
    split: int  # events that outlived the event they started in


def _innermost(trace: Trace, table: PartTable, rows: np.ndarray) -> _Innermost:
    kind = trace.kind[rows]
    rank = np.where(kind == Kind.PYTHON, 0, np.where(kind == Kind.CPU_OP, 1, 2))  # equal spans: frame, op, call
    start, end = trace.ts_ns[rows], trace.end_ns[rows]
    original = np.ones(len(rows), bool)
    split = 0
    while True:
        # Among pieces starting together, a continuation is the outer one: its event started earlier.
        order = np.lexsort((rank, -end, original, start))
        rows, start, end, rank, original = rows[order], start[order], end[order], rank[order], original[order]
        depth, parent = nesting(start, end)
        limit = np.where(parent >= 0, end[np.maximum(parent, 0)], end)
        over = (start < limit) & (end > limit)  # starts inside its parent, ends after it
        if not over.any():
            break
        split += int(np.sum(over & original))
        rows = np.concatenate((rows, rows[over]))
        start = np.concatenate((start, limit[over]))
        rank = np.concatenate((rank, rank[over]))
        original = np.concatenate((original, np.zeros(int(over.sum()), bool)))
        end = np.concatenate((np.where(over, limit, end), end[over]))
    kind = trace.kind[rows]
    names = trace.name_id[rows]
    mech = np.full(len(rows), _RUNTIME, np.int8)
    is_op = kind == Kind.CPU_OP
    mech[is_op & ~table.by_name["compile_runtime"][names]] = _DISPATCH  # a compile bookkeeping op stays runtime
    is_frame = kind == Kind.PYTHON
    mech[is_frame] = np.where(table.by_name["sync_frame"][names[is_frame]], _SYNC_WAIT, _PYTHON)
    is_call = kind == Kind.RUNTIME
    waits = np.flatnonzero(is_frame & table.by_name["wait_frame"][names] & (parent >= 0))
    waits = waits[table.by_name["communication"][names[parent[waits]]]]  # a collective's wait (WAIT_FRAME) ...
    calls = np.sort(start[is_call])
    holds = np.searchsorted(calls, end[waits], side="left") - np.searchsorted(calls, start[waits], side="left")
    mech[waits[holds == 0]] = _SYNC_WAIT  # ... that makes no runtime call: the host itself blocks in it
    mech[is_call & (trace.launch_kind[rows] > 0)] = _LAUNCH
    mech[is_call & (table.by_name["sync_call"][names] | table.waited[rows])] = _SYNC_WAIT
    owner, a, b = _self_segments(start, end, parent)
    return _Innermost(rows, start, end, original, parent, mech, owner, a, b, split)


def _self_segments(start: np.ndarray, end: np.ndarray, parent: np.ndarray):
    """Each event's self region as segments (owner, start, end): its interval less its children's. The children
    of an event are disjoint and inside it (the pieces nest properly), so the segments tile the union exactly."""
    empty = np.zeros(0, np.int64)
    n = len(start)
    if not n:
        return empty, empty, empty
    idx = np.arange(n)
    by_parent = np.lexsort((idx, parent))
    p = parent[by_parent]
    first_child = np.concatenate(([True], p[1:] != p[:-1]))
    prev_end = np.where(first_child, start[np.maximum(p, 0)], np.roll(end[by_parent], 1))
    has_parent = p >= 0
    # the gap before each child: from the previous sibling's end (or the parent's start) to the child's start
    owner = [p[has_parent]]
    seg_a = [prev_end[has_parent]]
    seg_b = [start[by_parent][has_parent]]
    # each event's tail: from its last child's end (or its own start) to its own end
    last_child_end = start.copy()
    last = np.concatenate((p[1:] != p[:-1], [True])) & has_parent
    last_child_end[p[last]] = end[by_parent][last]
    owner.append(idx)
    seg_a.append(last_child_end)
    seg_b.append(end)
    o, a, b = np.concatenate(owner), np.concatenate(seg_a), np.concatenate(seg_b)
    keep = b > a
    return o[keep], a[keep], b[keep]


def _charge(seg_start: np.ndarray, seg_end: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """Cut segments at every window boundary and give each piece to the window holding it: (segment index, window,
    piece start, piece end) for the pieces inside a window. Windows need not be sorted; where they overlap, a piece
    goes to the latest-starting window that holds it, so no nanosecond is counted twice."""
    empty = np.zeros(0, np.int64)
    if not len(seg_start) or not len(lo):
        return empty, empty, empty, empty
    bounds = np.unique(np.concatenate((lo, hi)))
    first = np.searchsorted(bounds, seg_start, side="right")
    cuts = np.searchsorted(bounds, seg_end, side="left") - first
    pieces = 1 + np.maximum(cuts, 0)
    seg = np.repeat(np.arange(len(seg_start)), pieces)
    a, b, first = seg_start[seg], seg_end[seg], first[seg]
    k = np.arange(len(seg)) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # piece number in its segment
    piece_start = np.where(k > 0, bounds[np.minimum(first + k - 1, len(bounds) - 1)], a)
    piece_end = np.where(k < np.repeat(pieces, pieces) - 1, bounds[np.minimum(first + k, len(bounds) - 1)], b)
    order = np.argsort(lo, kind="stable")
    slo, shi = lo[order], hi[order]
    step = np.searchsorted(slo, piece_start, side="right") - 1
    inside = (step >= 0) & (piece_end <= shi[np.maximum(step, 0)])
    return seg[inside], order[step[inside]], piece_start[inside], piece_end[inside]


def host_events(trace: Trace, pid: int, tid: int) -> np.ndarray:
    """The rows that can decide a mechanism on one thread: Python frames, cpu_ops and runtime calls."""
    return thread_rows(trace, trace.rows(Kind.PYTHON, Kind.CPU_OP, Kind.RUNTIME), pid, tid)


def thread_pieces(trace: Trace, table: PartTable, pid: int, tid: int) -> _Innermost:
    """Thread pid/tid's host events as innermost pieces, the one reading both a step's thread and another thread get:
    its polling runs made waits (`with_polls`), then the profiler's own recorded work cut out (`with_profiler`)."""
    inner = _innermost(trace, table, host_events(trace, pid, tid))
    return with_profiler(trace, with_polls(table.polls.of_thread(trace, pid, tid), inner))


def thread_code(trace: Trace, table: PartTable, pid: int, tid: int) -> tuple[np.ndarray, np.ndarray]:
    """When thread pid/tid ran code (a Python frame, an op, a runtime call) or polled the device, as merged
    intervals: what its pieces cover."""
    polls = table.polls.of_thread(trace, pid, tid)
    rows = host_events(trace, pid, tid)
    return merge(np.concatenate((trace.ts_ns[rows], polls.start)), np.concatenate((trace.end_ns[rows], polls.end)))


def with_polls(polls: Polls, inner: _Innermost) -> _Innermost:
    """A thread's pieces with its polling runs (`Polls`, the thread's own) made waits: each run is a piece of
    mechanism sync_wait over its whole span, named by its first query call and nested where that call is (its frames
    name the sync site), and takes every stretch of the span: the self segments of the calls and frames inside it,
    and the gaps between its calls that no event covers. A continuation, not an original piece: it is no new call."""
    if not len(polls.first):
        return inner
    lo = min(int(polls.start.min()), int(inner.seg_start.min()) if len(inner.seg_start) else int(polls.start.min()))
    hi = max(int(polls.end.max()), int(inner.seg_end.max()) if len(inner.seg_end) else int(polls.end.max()))
    gap_s, gap_e = difference(np.array([lo]), np.array([hi]), *merge(polls.start, polls.end))
    kept, _, kept_a, kept_b = _charge(inner.seg_start, inner.seg_end, gap_s, gap_e)
    originals = np.flatnonzero(inner.original)
    by_row = np.argsort(inner.rows[originals], kind="stable")
    at = originals[by_row[np.searchsorted(inner.rows[originals], polls.first, sorter=by_row)]]
    n, runs = len(inner.rows), len(polls.first)
    return _Innermost(
        np.concatenate((inner.rows, polls.first)),
        np.concatenate((inner.start, polls.start)),
        np.concatenate((inner.end, polls.end)),
        np.concatenate((inner.original, np.zeros(runs, bool))),
        np.concatenate((inner.parent, inner.parent[at])),
        np.concatenate((inner.mechanism, np.full(runs, _SYNC_WAIT, np.int8))),
        np.concatenate((inner.seg_owner[kept], n + np.arange(runs))),
        np.concatenate((kept_a, polls.start)),
        np.concatenate((kept_b, polls.end)),
        inner.split,
    )


def with_profiler(trace: Trace, inner: _Innermost) -> _Innermost:
    """A thread's pieces with the profiler's own recorded work that ran inside them: kineto records a CUPTI buffer
    request as an `overhead` event on a thread of its own (pid -1), but the thread that needed the buffer paid it,
    inside whatever it was running. Where one lies inside the union of these events, its span is its own (a piece
    of mechanism profiler), cut out of the self segments it falls in; one inside no event here is left to the
    others. What lies inside a blocking call's wait stays the wait's: the thread was blocked on the device, whose
    work ends the wait, profiler or not (kineto's Resource and Instrumentation events beside a 185 ms
    cudaDeviceSynchronize). A cut, not a place in the nesting: an event the profiler's straddles would make the
    nesting split piece after piece."""
    own = trace.profiler_rows()
    if not len(own) or not len(inner.rows):
        return inner
    own = own[inside_any(*merge(inner.start, inner.end), trace.ts_ns[own], trace.end_ns[own])]
    if not len(own):
        return inner
    o_s, o_e = merge(trace.ts_ns[own], trace.end_ns[own])
    blocked = inner.mechanism[inner.seg_owner] == _SYNC_WAIT  # the thread's waits on the device keep their time
    o_s, o_e = difference(o_s, o_e, *merge(inner.seg_start[blocked], inner.seg_end[blocked]))
    if not len(o_s):
        return inner
    first = own[np.searchsorted(trace.ts_ns[own], o_s, side="right") - 1]  # each span named by the event it is in
    gap_s, gap_e = difference(
        np.array([min(int(inner.seg_start.min()), int(o_s[0]))]), np.array([int(inner.seg_end.max())]), o_s, o_e
    )
    out_seg, _, out_a, out_b = _charge(inner.seg_start, inner.seg_end, gap_s, gap_e)
    in_seg, in_win, in_a, in_b = _charge(inner.seg_start, inner.seg_end, o_s, o_e)
    n = len(inner.rows)
    return _Innermost(
        np.concatenate((inner.rows, first)),
        np.concatenate((inner.start, o_s)),
        np.concatenate((inner.end, o_e)),
        np.concatenate((inner.original, np.ones(len(o_s), bool))),
        np.concatenate((inner.parent, np.full(len(o_s), -1))),
        np.concatenate((inner.mechanism, np.full(len(o_s), _PROFILER, np.int8))),
        np.concatenate((inner.seg_owner[out_seg], n + in_win)),
        np.concatenate((out_a, in_a)),
        np.concatenate((out_b, in_b)),
        inner.split,
    )


def mechanism_split(
    trace: Trace,
    table: PartTable,
    pid: int,
    tid: int,
    lo: np.ndarray,
    hi: np.ndarray,
    top_frames: int | None = None,
    top_ops: int | None = None,
) -> HostSplit:
    """Both partitions of the windows [lo, hi] (steps on thread pid/tid), with frames, ops and sync sites."""
    n = len(lo)
    inner = thread_pieces(trace, table, pid, tid)
    seg, step, piece_start, piece_end = _charge(inner.seg_start, inner.seg_end, lo, hi)
    tiers = purpose_tiers(trace, table, pid, tid)
    data_s, data_e = tiers["data"]
    names = trace.name_id[inner.rows]
    os_wait = np.isin(inner.rows, os_waits(trace), assume_unique=False)  # per event: an OS call it waits in
    owner = inner.seg_owner[seg]
    py = inner.mechanism[owner] == _PYTHON
    waits = py | os_wait[owner]  # a Python frame's self time, an OS wait: the thread runs no code of its own
    others = waited_on(trace, pid, tid, (data_s, data_e), piece_start[waits], piece_end[waits])
    # a blocked thread's pieces (a blocking builtin, an OS wait), cut where other threads' work or data loading
    # starts or ends: each part is one or the other or a wait on nothing recorded (BLOCKING_BUILTIN)
    blocking = (py & table.by_name["blocking_builtin"][names[owner]]) | os_wait[owner]
    bounds = np.concatenate((*others, data_s, data_e))
    seg, step, piece_start, piece_end = _cut_at(bounds, blocking, seg, step, piece_start, piece_end)
    ns = piece_end - piece_start
    owner = inner.seg_owner[seg]
    mech = inner.mechanism[owner].copy()
    in_data_ns = covered(data_s, data_e, piece_start, piece_end)  # of each piece, the part inside data loading
    waits = (mech == _PYTHON) | os_wait[owner]
    waited = np.zeros(len(ns), np.int64)
    waited[waits] = covered(*others, piece_start[waits], piece_end[waits])
    blocked = (table.by_name["blocking_builtin"][names[owner]] & (mech == _PYTHON)) | os_wait[owner]
    mech[blocked & (waited == 0) & (in_data_ns == 0)] = _SYNC_WAIT  # no recorded thread worked: a wait
    mech[os_wait[owner] & (waited > 0)] = _PYTHON  # other threads' work, as a frame's wait on them is
    mechanism = _by_mechanism(mech, step, ns, n)
    mechanism[UNATTRIBUTED] = (hi - lo) - sum(mechanism.values())
    in_data = _by_mechanism(mech, step, in_data_ns, n)
    in_data[UNATTRIBUTED] = covered(data_s, data_e, lo, hi) - sum(in_data.values())
    starts_in = _call_steps(inner, lo, hi)
    kind = trace.kind[inner.rows]
    is_frame = kind == Kind.PYTHON
    is_op = (kind == Kind.CPU_OP) & (inner.mechanism == _DISPATCH)  # an op that dispatches: not compile bookkeeping
    calls = np.ones(len(names), np.int64)
    f_self = _grouped(step, table.frame_id[names[owner]], ns, is_frame[owner], n)
    f_calls = _grouped(starts_in, table.frame_id[names], calls, is_frame & (starts_in >= 0), n)
    python_other = np.bincount(step, weights=waited, minlength=n).astype(np.int64)
    blocked = (mech == _SYNC_WAIT) & is_frame[owner]  # a synchronizing frame, a collective's wait: all of it a wait
    waited[blocked] = ns[blocked]
    f_waited = _grouped(step, table.frame_id[names[owner]], waited, (waited > 0) & is_frame[owner], n)
    o_self = _grouped(step, names[owner].astype(np.int64), ns, is_op[owner], n)
    o_calls = _grouped(starts_in, names.astype(np.int64), calls, is_op & (starts_in >= 0), n)
    sites = _sync_sites(trace, table, inner, (owner, mech, step, ns), lo)
    is_sync = mech == _SYNC_WAIT
    sync_segments = (step[is_sync], piece_start[is_sync], piece_end[is_sync])
    code_s, code_e = merge(inner.seg_start, inner.seg_end)  # what the mechanism gave a part: all but unattributed
    taken = merge(np.concatenate((code_s, data_s)), np.concatenate((code_e, data_e)))
    named, named_top = named_time(trace, table, pid, tid, (lo, hi), taken)
    return HostSplit(
        purpose_split(trace, table, pid, tid, lo, hi, tiers),
        mechanism,
        _ranked_frames(table, (f_self, f_waited), f_calls, top_frames),
        _ranked_ops(trace, o_self, o_calls, top_ops),
        sites,
        sync_segments,
        _frame_totals(f_self, f_calls, f_waited),
        in_data,
        python_other,
        named,
        named_top,
    )


NAMED_KEPT = 3  # a step's named spans kept, by name, largest first
_NUMBER = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class NamedTime:
    """Unattributed time inside named spans of one name (`named_time`): the name with its numbers replaced by `N`
    (`ensure_layer_N_weights` for `ensure_layer_0_weights` .. `ensure_layer_7_weights`), and the ns."""

    name: str
    ns: int

    def to_json(self) -> dict:
        return {"name": self.name, "us": self.ns / 1e3}


def family_key(name: str) -> str | None:
    """A span's name with each number replaced by `N` (`token_7_processing` -> `token_N_processing`): what the
    members of one numbered family share; None for a name without a number."""
    key = _NUMBER.sub("N", name)
    return None if key == name else key


def named_range_rows(trace: Trace, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The rows of thread pid/tid that name the user's own code (the module docstring): its ranges and its events of
    a foreign category, on the host, that hold no frame, op or runtime call (none starts inside) and no whole window
    [lo, hi] (a step's marker, a range around steps)."""
    rows = np.concatenate(
        (thread_rows(trace, trace.rows(Kind.USER_RANGE), pid, tid), thread_rows(trace, foreign_rows(trace), pid, tid))
    )
    rows = rows[trace.stream[rows] < 0]
    if not len(rows):
        return rows
    start, end = trace.ts_ns[rows], trace.end_ns[rows]
    code = np.sort(trace.ts_ns[host_events(trace, pid, tid)])
    holds_code = np.searchsorted(code, end, side="left") > np.searchsorted(code, start, side="left")
    order = np.argsort(lo, kind="stable")
    first_end = np.minimum.accumulate(hi[order][::-1])[::-1]  # of the windows starting at or after each, the first end
    k = np.searchsorted(lo[order], start, side="left")
    holds_step = (
        (k < len(lo)) & (first_end[np.minimum(k, len(lo) - 1)] <= end) if len(lo) else np.zeros(len(rows), bool)
    )
    return rows[~holds_code & ~holds_step]


def named_time(
    trace: Trace,
    table: PartTable,
    pid: int,
    tid: int,
    windows: tuple[np.ndarray, np.ndarray],
    taken: tuple[np.ndarray, np.ndarray],
) -> tuple[np.ndarray, list[tuple[NamedTime, ...]]]:
    """Per window [lo, hi] of thread pid/tid: the time inside its named ranges (`named_range_rows`) outside `taken`
    (merged: the thread's code events and data loading) and other threads' work (`others_busy`, which the answer
    names first), and that time by the innermost span's name with numbers replaced, the first `NAMED_KEPT`, largest
    first."""
    lo, hi = windows
    n = len(lo)
    rows = named_range_rows(trace, pid, tid, lo, hi)
    if not len(rows):
        return np.zeros(n, np.int64), [() for _ in range(n)]
    others_s, others_e = others_busy(trace, pid, tid)
    taken = merge(np.concatenate((taken[0], others_s)), np.concatenate((taken[1], others_e)))
    inner = _innermost(trace, table, rows)
    if not len(inner.seg_start):  # spans of no duration: nothing to name
        return np.zeros(n, np.int64), [() for _ in range(n)]
    gap_s, gap_e = difference(np.array([int(inner.seg_start.min())]), np.array([int(inner.seg_end.max())]), *taken)
    seg, _, a, b = _charge(inner.seg_start, inner.seg_end, gap_s, gap_e)
    piece, step, piece_start, piece_end = _charge(a, b, lo, hi)
    ns = piece_end - piece_start
    keys: dict[str, int] = {}
    key_of = {
        i: keys.setdefault(family_key(trace.names[i]) or trace.names[i], len(keys))
        for i in set(trace.name_id[rows].tolist())
    }
    key = np.fromiter(
        (key_of[i] for i in trace.name_id[inner.rows[inner.seg_owner[seg[piece]]]].tolist()), np.int64, len(piece)
    )
    text = list(keys)
    by_name = _grouped(step, key, ns, np.ones(len(ns), bool), n)
    top = [
        tuple(sorted((NamedTime(text[k], v) for k, v in d.items()), key=lambda x: (-x.ns, x.name))[:NAMED_KEPT])
        for d in by_name
    ]
    return np.bincount(step, weights=ns, minlength=n).astype(np.int64), top


def _others_code(trace: Trace, pid: int, tid: int) -> np.ndarray:
    """The code events (Python frames, cpu_ops, runtime calls; a range alone is a label) of process `pid`'s threads
    other than `tid`; not an OS call in which a thread waits (`SYNC_CALL`: a producer's nanosleep, the main thread's
    join), which runs no code."""
    rows = trace.rows(Kind.PYTHON, Kind.CPU_OP, Kind.RUNTIME)
    rows = rows[(trace.pid[rows] == pid) & (trace.tid[rows] != tid)]
    waits = os_waits(trace)
    return np.setdiff1d(rows, waits, assume_unique=True) if len(waits) else rows


def os_waits(trace: Trace) -> np.ndarray:
    """The rows of OS calls in which a thread waits (`SYNC_CALL`'s: a lock, a condition, a semaphore, a join, a poll,
    a sleep), sorted."""
    waits = trace.os_call_rows()
    return waits[trace.name_ids(lambda s: SYNC_CALL.search(s) is not None)[trace.name_id[waits]]]


def others_busy(trace: Trace, pid: int, tid: int) -> tuple[np.ndarray, np.ndarray]:
    """When any other thread of process `pid` ran code, as merged intervals."""
    rows = _others_code(trace, pid, tid)
    return merge(trace.ts_ns[rows], trace.end_ns[rows])


def waited_on(
    trace: Trace, pid: int, tid: int, data: tuple[np.ndarray, np.ndarray], start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Of the stretches [start, end] (disjoint) in which thread pid/tid runs no op or call of its own (a Python
    frame's self time: the frame has no child event there), outside data loading (`data`, merged), when other
    threads of its process ran events that began and ended inside one stretch, as merged intervals: work handed off
    and waited for (autograd's backward under `run_backward`, a helper thread joined). A thread already running when
    the stretch began (a compile worker blocked in a pipe read for the whole trace) is concurrent, not waited on."""
    rows = _others_code(trace, pid, tid)
    if not len(rows) or not len(start):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a, b = trace.ts_ns[rows], trace.end_ns[rows]
    order = np.argsort(start, kind="stable")
    ps, pe = start[order], end[order]
    k = np.searchsorted(ps, a, side="right") - 1
    kc = np.maximum(k, 0)
    inside = (k >= 0) & (b <= pe[kc])  # began and ended inside one stretch
    return difference(*merge(a[inside], b[inside]), *data)


def _cut_at(bounds: np.ndarray, sel: np.ndarray, *pieces: np.ndarray) -> tuple[np.ndarray, ...]:
    """Pieces (their columns, the last two start and end) with the selected ones cut at every bound strictly
    inside them, each part after the piece it came from."""
    *cols, start, end = pieces
    bounds = np.unique(bounds)
    if not len(bounds) or not sel.any():
        return (*cols, start, end)
    first = np.searchsorted(bounds, start, side="right")
    cuts = np.where(sel, np.maximum(np.searchsorted(bounds, end, side="left") - first, 0), 0)
    parts = cuts + 1
    of = np.repeat(np.arange(len(start)), parts)
    k = np.arange(len(of)) - np.repeat(np.cumsum(parts) - parts, parts)  # each part's number in its piece
    last = len(bounds) - 1
    new_start = np.where(k == 0, start[of], bounds[np.clip(first[of] + k - 1, 0, last)])
    new_end = np.where(k == cuts[of], end[of], bounds[np.clip(first[of] + k, 0, last)])
    return (*(c[of] for c in cols), new_start, new_end)


def _by_mechanism(mech: np.ndarray, step: np.ndarray, values: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Per mechanism part but the unattributed rest, the pieces' `values` summed per step."""
    out = {}
    for code, part in enumerate(MECHANISM[:-1]):
        sel = mech == code
        out[part] = np.bincount(step[sel], weights=values[sel], minlength=n).astype(np.int64)
    return out


def _call_steps(inner: _Innermost, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The step each event starts in, where its call is counted (-1: none, or a continuation, which is no new
    call)."""
    order = np.argsort(lo, kind="stable")
    s_of = np.searchsorted(lo[order], inner.start, side="right") - 1
    starts_in = np.where((s_of >= 0) & (inner.start <= hi[order][np.maximum(s_of, 0)]), order[np.maximum(s_of, 0)], -1)
    starts_in[~inner.original] = -1  # a continuation is no new call
    return starts_in


def _ranked_frames(
    table: PartTable,
    self_ns: tuple[list[dict[int, int]], list[dict[int, int]]],
    calls: list[dict[int, int]],
    top: int | None,
) -> list[tuple[FrameTime, ...]]:
    """Per step, its Python frames by self time, largest first (the first `top`); `self_ns`: per step, each frame's
    self time and the part of it waited on other threads."""
    mine_all, waited_all = self_ns
    return [
        tuple(
            sorted(
                (FrameTime(table.frames[f], mine.get(f, 0), called.get(f, 0), waited.get(f, 0)) for f in mine | called),
                key=lambda x: (-x.self_ns, x.frame),
            )[:top]
        )
        for mine, waited, called in zip(mine_all, waited_all, calls, strict=True)
    ]


def _ranked_ops(
    trace: Trace, self_ns: list[dict[int, int]], calls: list[dict[int, int]], top: int | None
) -> list[tuple[OpTime, ...]]:
    """Per step, its cpu_ops by self time (their dispatch), largest first (the first `top`)."""
    return [
        tuple(
            sorted(
                (OpTime(trace.names[o], mine.get(o, 0), called.get(o, 0)) for o in mine | called),
                key=lambda x: (-x.self_ns, x.name),
            )[:top]
        )
        for mine, called in zip(self_ns, calls, strict=True)
    ]


def _frame_totals(
    self_ns: list[dict[int, int]], calls: list[dict[int, int]], waited: list[dict[int, int]]
) -> dict[int, tuple[int, int, int]]:
    """Frame id -> (self ns, calls, waited ns) over all the steps."""
    totals: dict[int, list[int]] = {}
    for column, per_step in enumerate((self_ns, calls, waited)):
        for step in per_step:
            for f, v in step.items():
                totals.setdefault(f, [0, 0, 0])[column] += v
    return {f: (a, b, c) for f, (a, b, c) in totals.items()}


def _grouped(step: np.ndarray, key: np.ndarray, value: np.ndarray, sel: np.ndarray, n: int) -> list[dict[int, int]]:
    """Per step, key -> summed value over the selected rows (rows with step < 0 are left out)."""
    sel = sel & (step >= 0)
    out: list[dict[int, int]] = [{} for _ in range(n)]
    if not sel.any():
        return out
    width = int(key[sel].max()) + 1
    keys, inverse = np.unique(step[sel].astype(np.int64) * width + key[sel], return_inverse=True)
    sums = np.bincount(inverse, weights=value[sel], minlength=len(keys)).astype(np.int64)
    for k, v in zip(keys.tolist(), sums.tolist(), strict=True):
        out[k // width][k % width] = v
    return out


def _sync_sites(
    trace: Trace, table: PartTable, inner: _Innermost, pieces: tuple[np.ndarray, ...], lo: np.ndarray
) -> list[tuple[SyncSite, ...]]:
    """Per step, the blocking calls by (call, innermost frame, innermost source frame), their time in the step, and
    whether a stream-wait-event call came before them in the step; from the step's pieces (each one's event,
    mechanism, step and ns)."""
    n = len(lo)
    owner, mech, step, ns = pieces
    sel = mech == _SYNC_WAIT
    if not sel.any():
        return [() for _ in range(n)]
    kind = trace.kind[inner.rows]
    names = trace.name_id[inner.rows]
    by_step = _sites_by_step(trace, table, inner, kind, names, (owner[sel], step[sel], ns[sel]), n)
    waited = _stream_wait_gap(table, inner, kind, names, lo)
    copied = _copy_finder(trace, table, inner, kind)
    return [
        tuple(
            sorted(
                (
                    SyncSite(
                        c,
                        f,
                        src,
                        v[0],
                        len(v[1]),
                        waited(int(v[2]), s),
                        *copied(v[3]),
                        _outer_op(trace, inner, kind, names, v[3]),
                    )
                    for (c, f, src), v in d.items()
                ),
                key=lambda x: (-x.wait_ns, x.call),
            )
        )
        for s, d in enumerate(by_step)
    ]


def _outermost_blocking(inner: _Innermost, blocking: np.ndarray) -> dict[int, int]:
    """Each blocking event -> the outermost blocking event around it: a synchronizing frame inside another blocking
    event is part of that event's wait, so the site reported is the outermost."""
    outer = blocking.copy()
    cur = inner.parent[blocking]
    while (cur >= 0).any():
        up = (cur >= 0) & (inner.mechanism[np.maximum(cur, 0)] == _SYNC_WAIT)
        outer = np.where(up, cur, outer)
        cur = np.where(cur >= 0, inner.parent[np.maximum(cur, 0)], -1)
    return dict(zip(blocking.tolist(), outer.tolist(), strict=True))


def _frames_around(
    table: PartTable, inner: _Innermost, kind: np.ndarray, names: np.ndarray, event: int
) -> tuple[str | None, str | None]:
    """The innermost Python frame around `event`, and the innermost source frame (one of the user's files)."""
    frame = source = None
    cur = int(inner.parent[event])
    while cur >= 0 and source is None:
        if kind[cur] == Kind.PYTHON:
            name = table.frames[table.frame_id[names[cur]]]
            frame = frame or name
            if table.by_name["source_frame"][names[cur]]:
                source = name
        cur = int(inner.parent[cur])
    return frame, source


def _sites_by_step(
    trace: Trace,
    table: PartTable,
    inner: _Innermost,
    kind: np.ndarray,
    names: np.ndarray,
    waits: tuple[np.ndarray, np.ndarray, np.ndarray],
    n: int,
) -> list[dict[tuple, list]]:
    """Per step, (call, frame, source) -> [wait ns, the blocking rows, the first one's start, that site], from the
    sync-wait segments (`waits`: each one's blocking event, step and ns)."""
    out: list[dict[tuple, list]] = [{} for _ in range(n)]
    owner, step, ns = waits
    site_of = _outermost_blocking(inner, np.unique(owner))
    frames: dict[int, tuple[str | None, str | None]] = {}  # by site: a site's segments are many
    for o, s, v in zip(owner.tolist(), step.tolist(), ns.tolist(), strict=True):
        site = site_of[o]
        if site not in frames:
            frames[site] = _frames_around(table, inner, kind, names, site)
        frame, source = frames[site]
        call = table.frames[table.frame_id[names[site]]] if kind[site] == Kind.PYTHON else trace.names[names[site]]
        acc = out[s].setdefault((call, frame, source), [0, set(), inner.start[site], site])
        acc[0] += v
        acc[1].add(int(inner.rows[site]))
        if inner.start[site] < acc[2]:
            acc[2], acc[3] = inner.start[site], site
    return out


def _stream_wait_gap(
    table: PartTable, inner: _Innermost, kind: np.ndarray, names: np.ndarray, lo: np.ndarray
) -> Callable[[int, int], int | None]:
    """`waited(first, s)`: how long before `first` the latest stream-wait-event call of step `s` came; None when
    none came in the step before it."""
    is_wait = (kind == Kind.RUNTIME) & table.by_name["stream_wait"][names] & inner.original
    waits = np.sort(inner.start[is_wait])

    def waited(first: int, s: int) -> int | None:
        k = int(np.searchsorted(waits, first, side="right")) - 1
        return int(first - waits[k]) if k >= 0 and waits[k] >= lo[s] else None

    return waited


def _copy_finder(
    trace: Trace, table: PartTable, inner: _Innermost, kind: np.ndarray
) -> Callable[[int], tuple[int | None, str | None, str | None]]:
    """`copied(site)`: the copy a blocking call waits on, as (bytes, direction, host memory), each None unknown."""
    copies = _copies(trace)
    calls = inner.rows
    keys = correlation_keys(trace, calls)
    is_copy = (
        (kind == Kind.RUNTIME)
        & inner.original
        & ((trace.copy_kind[calls] >= 0) | np.isin(keys, np.fromiter(copies, np.int64, len(copies))))
    )

    # the copy calls by (parent, start, the first one last among equal starts): a site finds the latest copy under
    # its parent by two searches, not by a pass over the thread's events (one a step would cost steps x events)
    copy_at = np.flatnonzero(is_copy)
    copy_at = copy_at[np.lexsort((-copy_at, inner.start[copy_at], inner.parent[copy_at]))]
    copy_parent, copy_start = inner.parent[copy_at], inner.start[copy_at]
    # the trace's GPU ops by end: what a wait ended on is the last of them to end inside it
    gpu = trace.rows(*GPU_OP_KINDS)
    gpu = gpu[np.argsort(trace.end_ns[gpu], kind="stable")]
    gpu_end = trace.end_ns[gpu]

    def ended_on_a_copy(site: int) -> bool:
        """Whether the wait of `site` ended on a copy: the last GPU op to end inside it is one (a trace with no GPU
        side cannot say, and keeps the copy call)."""
        if not len(gpu):
            return True
        k = int(np.searchsorted(gpu_end, inner.end[site], side="right")) - 1
        return k >= 0 and gpu_end[k] >= inner.start[site] and trace.kind[gpu[k]] == Kind.GPU_MEMCPY

    def copied(site: int) -> tuple[int | None, str | None, str | None]:
        """The blocking call's own copy; else, when its wait ended on a copy, the latest copy call before it under
        the same parent (a device synchronize after a copy and then a GEMM waits on the GEMM, not the copy); its size
        and direction from the call's own args, else from the GPU copy it launched; its host memory from the GPU
        copy's name (kineto's `Memcpy DtoH (Device -> Pageable)`)."""
        at = site
        if not is_copy[site]:
            if not ended_on_a_copy(site):
                return None, None, None
            parent = inner.parent[site]
            a, b = int(np.searchsorted(copy_parent, parent)), int(np.searchsorted(copy_parent, parent, side="right"))
            k = a + int(np.searchsorted(copy_start[a:b], inner.start[site], side="right")) - 1
            if k < a:
                return None, None, None
            at = int(copy_at[k])
        row = int(calls[at])
        size, direction = copies.get(int(keys[at]), (-1, -1))
        size = int(trace.bytes[row]) if trace.bytes[row] >= 0 else size
        direction = int(trace.copy_kind[row]) if trace.copy_kind[row] >= 0 else direction
        gpu = table.copy_of.get(row)
        memory = _HOST_MEMORY.search(trace.name(gpu)) if gpu is not None else None
        return (
            (size if size >= 0 else None),
            COPY_KINDS[direction] if 0 <= direction < len(COPY_KINDS) else None,
            memory[1].lower() if memory else None,
        )

    return copied


def _outer_op(trace: Trace, inner: _Innermost, kind: np.ndarray, names: np.ndarray, site: int) -> str | None:
    """The outermost cpu_op around the blocking call: what the program called (aten::item, aten::to)."""
    found, cur = None, int(inner.parent[site])
    while cur >= 0:
        if kind[cur] == Kind.CPU_OP:
            found = trace.names[names[cur]]
        cur = int(inner.parent[cur])
    return found


def _copies(trace: Trace) -> dict[int, tuple[int, int]]:
    """Correlation key -> (bytes, copy kind) of every GPU copy: what a copy call launched, when its own args do not
    say (CUDA's runtime calls carry neither)."""
    rows = trace.rows(Kind.GPU_MEMCPY)
    keys = correlation_keys(trace, rows)
    return {
        int(k): (int(b), int(c))
        for k, b, c in zip(keys.tolist(), trace.bytes[rows].tolist(), trace.copy_kind[rows].tolist(), strict=True)
        if k >= 0
    }


def thread_busy(
    trace: Trace, table: PartTable, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray], list[tuple[OpTime, ...]]]:
    """Another thread's time in each window [lo, hi]: the union of its code events there (frames, ops, runtime calls;
    a range alone is a label, not work) less its waits (mechanism sync_wait: blocked, it runs nothing the step could
    wait on), that union by mechanism, and its events by innermost self time (the first `OTHER_TOP_KEPT`; a call
    counted in the window it starts in): what the thread spent the time on."""
    n = len(lo)
    inner = thread_pieces(trace, table, pid, tid)
    seg, step, piece_start, piece_end = _charge(inner.seg_start, inner.seg_end, lo, hi)
    ns = piece_end - piece_start
    owner = inner.seg_owner[seg]
    mech = inner.mechanism[owner]
    by = _by_mechanism(mech, step, ns, n)
    busy = covered(*thread_code(trace, table, pid, tid), lo, hi) - by.pop("sync_wait")
    working = mech != _SYNC_WAIT
    seg, step, ns, owner = seg[working], step[working], ns[working], owner[working]
    names = table.frame_id[trace.name_id[inner.rows]]  # by name less object addresses: one builtin aggregates
    starts_in = _call_steps(inner, lo, hi)
    self_ns = _grouped(step, names[owner], ns, np.ones(len(owner), bool), n)
    calls = _grouped(starts_in, names, np.ones(len(names), np.int64), starts_in >= 0, n)
    ranked = (
        sorted(
            (OpTime(table.frames[k], v, called.get(k, 0)) for k, v in mine.items()),
            key=lambda o: (-o.self_ns, o.name),
        )
        for mine, called in zip(self_ns, calls, strict=True)
    )
    return busy, by, [tuple(r[:OTHER_TOP_KEPT]) for r in ranked]


OTHER_TOP_KEPT = 3  # another thread's events named per step: what it spent the time on


EVERY_OP = "every op and runtime call"  # the capture region where the trace marks no forward


def capture_region(trace: Trace, pid: int, tid: int) -> tuple[np.ndarray, np.ndarray, str]:
    """What a CUDA graph of the step would capture, on one thread, as merged intervals, and what it is: probe's
    `forward` ranges (the engine call); else the model's outermost `nn.Module: ...` frames (torch's with_stack
    names a module call so); else every cpu_op and runtime call, which is all a graph can hold."""
    ranges = thread_rows(trace, trace.rows(Kind.USER_RANGE), pid, tid)
    forward = ranges[
        [vocabulary.split_label(trace.names[n])[0] == vocabulary.FORWARD for n in trace.name_id[ranges].tolist()]
    ]
    if len(forward):
        return (*merge(trace.ts_ns[forward], trace.end_ns[forward]), "probe's forward ranges")
    frames = thread_rows(trace, trace.rows(Kind.PYTHON), pid, tid)
    modules = frames[[trace.names[n].startswith("nn.Module: ") for n in trace.name_id[frames].tolist()]]
    if len(modules):
        return (*merge(trace.ts_ns[modules], trace.end_ns[modules]), "the model's nn.Module frames")
    code = thread_rows(trace, trace.rows(Kind.CPU_OP, Kind.RUNTIME), pid, tid)
    return (*merge(trace.ts_ns[code], trace.end_ns[code]), EVERY_OP)
