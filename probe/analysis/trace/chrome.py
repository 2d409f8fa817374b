"""torch.profiler chrome traces (`.json`, `.json.gz`, or the JSON Array Format) into the event table.

The file is streamed (`pieces`): gunzipped on the fly, its events decoded a piece of ~8 MiB at a time into
columns, so memory holds one piece and the table, never the document. msgspec decodes each event into a typed
`_Event` that holds only the fields the table reads (every other key is skipped, never built), and keeps `ts`
and `dur` as their own JSON text (`Raw`), which `timetext` turns into exact integer ns.

Lenient where the file is odd, piece by piece: a piece whose events have other types than torch writes (a list
for a name, a string id, no phase or an unknown one, a non-object event) is decoded again with every field
untyped; a byte that is not UTF-8 is replaced (U+FFFD) in that piece only, and the trace's warnings say so.
Malformed events are dropped and counted, never fatal; only a file that is not JSON, or not a trace, is refused,
with a one-line reason.

Other writers of the format: a time written as a JSON string of a number is that number (`timetext`); rocprof v1's
exact ns in args (BeginNs / EndNs, beside a `ts` cut to whole us) are the event's times, read by the untyped decode
(the typed one refuses those keys, so torch's pieces never look for them); an event with no category is a GPU op
when its process's metadata names a GPU side (rocprof v1's `GPU2`, `COPY`: `GPU_PROCESS`), a runtime call when its
name is a CUDA or HIP API call's (an eBPF tracer of libcuda writes them so), and any other is kept as other and
named in one warning line. In a trace torch did not write (format `chrome`), where a runtime call and a GPU op
carry no correlation id, a flow arrow between them gives them one (`flows`). A read skips flow arrows unread (a
third of a torch trace's events) until metadata names a process as a GPU side, whose ops carry no id (rocprof v1
names its processes first): only a trace whose joins need arrows skipped so is read again, keeping them all.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from dataclasses import dataclass
from itertools import compress, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union

import msgspec
import numpy as np

from probe.analysis.records import files
from probe.analysis.trace import pieces
from probe.analysis.trace.flows import Flows, link, wanted
from probe.analysis.trace.table import (
    COPY_KIND_OF_TEXT,
    LAUNCH_NAMES,
    ON_STREAM,
    OUT_OF_RANGE,
    PROFILER_STEP_PREFIX,
    DeviceInfo,
    Kind,
    Shapes,
    Trace,
    TraceFormat,
    api_base_name,
    check_events,
    device_info,
    finish,
    int64_or_none,
    max_events,
    of_names,
)
from probe.analysis.trace.timetext import NOT_A_NUMBER, NUMBER, decimal_text_to_ns, times_ns
from probe.errors import ProbeError

PROFILER_RANGE, MTIA_DEVICE = "cuda_profiler_range", "mtia_ccp_events"
_CHROME_KINDS = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_RANGE,
    "gpu_user_annotation": Kind.GPU_RANGE,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "hip_driver": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.GPU_MEMCPY,
    "memcpy": Kind.GPU_MEMCPY,
    "gpu_memset": Kind.GPU_MEMSET,
    "memset": Kind.GPU_MEMSET,
    "python_function": Kind.PYTHON,
    # kineto's other runtimes: its ActivityType enum aliases each of these to RUNTIME (or DRIVER)
    "mtia_runtime": Kind.RUNTIME,
    "xpu_runtime": Kind.RUNTIME,
    "xpu_driver": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "privateuse1_driver": Kind.RUNTIME,
    "glow_runtime": Kind.RUNTIME,
    "hpu_op": Kind.RUNTIME,
    # the CUPTI range profiler (HTA's cupti_counter_analysis): one range a kernel, with its counters in args
    PROFILER_RANGE: Kind.KERNEL,
    # MTIA's device side, which kineto aliases to CONCURRENT_KERNEL; by name below
    MTIA_DEVICE: Kind.KERNEL,
}
# Device events that a category alone does not say: MTIA's DMA transfers are copies, and its event record / wait
# are stream synchronization (other, as cuda_sync: not GPU busy); pe_exe, merge, remote are executions.
_KIND_BY_NAME = {MTIA_DEVICE: {"dma_request": Kind.GPU_MEMCPY, "event_record": Kind.OTHER, "event_wait": Kind.OTHER}}
# Categories that are not work of a device probe could miss: syncs, the profiler's own spans and overhead.
_KNOWN_OTHER = frozenset({"", "cuda_sync", "cuda_event", "trace", "overhead", "cpu_instant_event"})
_I64 = np.iinfo(np.int64)
_FLOW_PHASES = ("s", "t", "f")
_NUMBERED = re.compile(r"(?:stream )?([0-9]{1,18})")  # a pid / tid written as text: "25738", "stream 7"
_MISSING = msgspec.Raw()  # an absent ts / dur (or args key): empty text, which is not a number
_MAX_DIMS_DEPTH = 8  # Input Dims nest 2 deep (3 for a TensorList); deeper is not a shape recording
_ENCODE = msgspec.json.encode


class _Args(msgspec.Struct, frozen=True, gc=False):
    correlation: int = -1
    external_id: int = msgspec.field(default=-1, name="External id")
    nbytes: int | str = msgspec.field(default=-1, name="bytes")  # ROCm writes its runtime calls' as text
    kind: int | str = -1  # a copy's direction: "1" on a runtime call, "HtoD" on a GPU copy
    # the shapes a cpu_op recorded, kept as their text: few are distinct, so each is decoded once (`_Shapes`)
    dims: msgspec.Raw = msgspec.field(default=_MISSING, name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=_MISSING, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=_MISSING, name="Concrete Inputs")
    # rocprof v1's exact ns (its ts and dur are whole us, as text): typed to take no value, so a piece that holds
    # them is read untyped, where they are read (`_exact_times`); torch writes neither, so its pieces stay typed
    begin_ns: None = msgspec.field(default=None, name="BeginNs")
    end_ns: None = msgspec.field(default=None, name="EndNs")


class _Event(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event as torch writes it. gc=False: these hold no cycles, so the collector need not track them."""

    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: msgspec.Raw = _MISSING
    dur: msgspec.Raw = _MISSING
    args: _Args = _Args()


class _Begin(msgspec.Struct, tag_field="ph", tag="B", gc=False):
    """A duration event's begin: paired with the end that closes it on its thread (`_durations`), a complete event.
    Any types (a hand-written tracer's), the args kept as their text."""

    cat: Any = ""
    name: Any = ""
    pid: Any = -1
    tid: Any = -1
    ts: msgspec.Raw = _MISSING
    args: msgspec.Raw = _MISSING


class _End(msgspec.Struct, tag_field="ph", tag="E", gc=False):
    """A duration event's end: it closes the latest begin still open on its thread."""

    pid: Any = -1
    tid: Any = -1
    ts: msgspec.Raw = _MISSING


class _Meta(msgspec.Struct, tag_field="ph", tag="M", gc=False):
    """A metadata event: `process_name` names the process `pid` is in its args (rocprof v1: `CPU HIP API`, `COPY`,
    `GPU2`). Any types: a trace holds few, and what they are is looked at as they are read (`_name_processes`)."""

    name: Any = ""
    pid: Any = -1
    args: Any = None


class _Flow(msgspec.Struct, tag_field="ph", gc=False):
    """A flow arrow's start, step or end (`flows`): what binds it to a slice, and the (cat, id) that pairs it."""

    cat: str = ""
    id: int | str | None = None
    pid: int | str = -1
    tid: int | str = -1
    ts: msgspec.Raw = _MISSING
    bp: str = ""  # "e": an end binds to the slice enclosing it, not the next one


class _FlowStart(_Flow, tag="s"):
    pass


class _FlowStep(_Flow, tag="t"):
    pass


class _FlowEnd(_Flow, tag="f"):
    pass


# Every other phase of the Trace Event Format, as an empty struct: its keys are skipped, never built. Flow arrows
# are a third of a torch trace: the fast decode skips them too, and a read that keeps them decodes them as _Flow.
# An event with no phase, or another one, sends its piece to the untyped decode.
_EMPTY = {
    ph: msgspec.defstruct(f"_Phase{i}", [], tag_field="ph", tag=ph, gc=False)
    for i, ph in enumerate("iICbnestfPONDVvRc()")
}
_FLOW_TYPES: dict[type, str] = {_FlowStart: "s", _FlowStep: "t", _FlowEnd: "f"}
_UNREAD_FLOWS = tuple(_EMPTY[ph] for ph in _FLOW_PHASES)
_DURATION_TYPES: dict[type, str] = {_Begin: "B", _End: "E"}
_PHASE_OF: dict[type, str] = {cls: ph for ph, cls in _EMPTY.items()} | {_Meta: "M"} | _FLOW_TYPES | _DURATION_TYPES
if TYPE_CHECKING:  # the phase structs are made at run time, so to a type checker an event of any phase is Any
    _FAST_PHASE = Any
    _FLOWS_PHASE = Any
else:  # unions built from a tuple
    _FAST_PHASE = Union[(_Event, _Meta, _Begin, _End, *_EMPTY.values())]
    _FLOWS_PHASE = Union[
        (_Event, _Meta, _Begin, _End, *_FLOW_TYPES, *(c for ph, c in _EMPTY.items() if ph not in _FLOW_PHASES))
    ]


class _AnyEvent(msgspec.Struct, gc=False):
    """The same fields with any JSON type, for a piece the typed decode refused (a flow arrow's id and bp too)."""

    ph: Any = None
    cat: Any = ""
    name: Any = ""
    pid: Any = -1
    tid: Any = -1
    ts: msgspec.Raw = _MISSING
    dur: msgspec.Raw = _MISSING
    args: Any = None
    id: Any = None
    bp: Any = ""


_E = TypeVar("_E")


class _Doc(msgspec.Struct, Generic[_E], gc=False):
    traceEvents: list[_E] | None = None  # the file's own keys, as written
    baseTimeNanoseconds: Any = None
    distributedInfo: Any = None
    deviceProperties: Any = None


class _AnyDoc(msgspec.Struct, gc=False):
    traceEvents: msgspec.Raw = _MISSING
    baseTimeNanoseconds: Any = None
    distributedInfo: Any = None
    deviceProperties: Any = None


@dataclass(frozen=True)
class _Top:
    """The trace's top-level keys that the table keeps."""

    base_ns: int | None = None
    rank: int | None = None
    devices: tuple[DeviceInfo, ...] = ()


@dataclass(frozen=True)
class _Typed:
    """The typed decoders of a list of events and of a trace's document: the fast ones skip flow arrows unread."""

    events: msgspec.json.Decoder
    doc: msgspec.json.Decoder
    keeps_flows: bool


_FAST = _Typed(msgspec.json.Decoder(list[_FAST_PHASE]), msgspec.json.Decoder(_Doc[_FAST_PHASE]), False)
_WITH_FLOWS = _Typed(msgspec.json.Decoder(list[_FLOWS_PHASE]), msgspec.json.Decoder(_Doc[_FLOWS_PHASE]), True)
_ANY_JSON = msgspec.json.Decoder()
_RAW = msgspec.json.Decoder(msgspec.Raw)  # validates any JSON, builds nothing
_RAW_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])
_ANY_EVENT = msgspec.json.Decoder(_AnyEvent)
_ANY_DOC = msgspec.json.Decoder(_AnyDoc)


class _FlowsSkipped(Exception):
    """The fast decode skipped flow arrows unread, and the trace's joins need them: read it again keeping them."""


def read_chrome(source: Path) -> Trace:
    try:
        return _read(source, _FAST)
    except _FlowsSkipped:
        pass  # (out of the except block, so the first read's table is freed before the second)
    return _read(source, _WITH_FLOWS)


def _read(source: Path, typed: _Typed) -> Trace:
    table = _Table(source, typed=typed)
    if not typed.keeps_flows and pieces.two_processes(files.content_size(source)):
        try:
            rest = pieces.split_in_two(
                lambda: files.open_content(source), table.piece_part, table.merge, str(source), _frame_ok
            )
            return table.finish(table.add_document(rest))
        except pieces.Diverged:  # a false cut or odd types: read again by this process alone, as below
            table = _Table(source, typed=typed)
    with files.open_content(source) as stream:
        rest = pieces.split(stream, table.add_piece, str(source), _frame_ok)
    return table.finish(table.add_document(rest))


_KEYS = msgspec.json.Decoder(dict[str, msgspec.Raw])  # an object's keys, its values left as text
# Other profilers' JSON, each by a top-level key only it writes, and what it is.
_OTHER_FORMATS = {
    "rocprofiler-sdk-tool": "a rocprofiler-sdk (rocprofv3) results file",
    "nodes": "a PyTorch execution trace (ExecutionTraceObserver: ops and tensors, no times)",
}
_READS = "probe reads torch.profiler's chrome trace (export_chrome_trace, tensorboard_trace_handler) or nsys SQLite"


def _what_else(doc: bytes) -> str:
    """What a JSON object without traceEvents holds instead: another profiler's format named by a key only it
    writes, else its top-level keys; then what probe reads."""
    try:
        keys = list(_KEYS.decode(doc))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return _READS
    known = [what for key, what in _OTHER_FORMATS.items() if key in keys]
    if known:
        return f"{known[0]}; {_READS}"
    shown = ", ".join(repr(k)[:40] for k in keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")
    return f"its keys are {shown or 'none'}; {_READS}"


class _Mark(msgspec.Struct, gc=False):
    """A duration event's begin or end, as read (`_Table._durations` pairs them)."""

    begin: bool
    cat: Any = ""
    name: Any = ""
    pid: Any = -1
    tid: Any = -1
    ts: bytes = b""  # the time as written (microseconds)
    args: bytes = b""  # the begin's args as written


def _key(value: Any) -> tuple[str, str]:
    """A pid or tid as a key its thread's begins and ends share, whatever its JSON type."""
    return type(value).__name__, str(value)


def _complete(begin: _Mark, dur_ns: int) -> bytes:
    """The complete (X) event a begin makes with its end `dur_ns` later, as JSON text: its time as written, its
    duration as exact microseconds."""
    fields = [b'"ph":"X"', b'"cat":' + _ENCODE(begin.cat), b'"name":' + _ENCODE(begin.name)]
    fields += [b'"pid":' + _ENCODE(begin.pid), b'"tid":' + _ENCODE(begin.tid), b'"ts":' + begin.ts]
    fields.append(b'"dur":%d.%03d' % divmod(dur_ns, 1000))
    if begin.args:
        fields.append(b'"args":' + begin.args)
    return b"{" + b",".join(fields) + b"}"


_AT_BYTE = re.compile(r"\(byte (\d+)\)")


def _stops_short(error: str, doc: bytes) -> bool:
    """Whether the decoder's `error` on `doc` says the text stopped before its JSON did: it ran out of input
    ("truncated"), or met its end mid-value (a number cut after its point: "invalid number" at the last byte)."""
    at = _AT_BYTE.search(error)
    return "truncated" in error or (at is not None and int(at.group(1)) >= len(doc.rstrip()))


def _cut_short_note(cut_short: tuple[int, bool] | None) -> tuple[str, ...]:
    """What a text that stopped before its JSON closed lost: the bytes after its last whole event; nothing where it
    stopped after one (the JSON Array Format's closing bracket is optional), said where an object did."""
    if cut_short is None:
        return ()
    left, obj = cut_short
    why = "a profiler stopped mid-export, or a copy not finished"
    if left:
        return (f"the trace's text stops inside an event ({why}): read to its last whole event, the {left:,} bytes "
                "after it left out",)  # fmt: skip
    return (f"the trace's text stops before its JSON closes ({why}): read to its last event",) if obj else ()


def _frame_ok(frame: bytes) -> bool:
    """Whether `frame` really opens the events array: `{... "traceEvents": [` closed is `{... "traceEvents": []}`.
    (`"traceEvents": [` can also sit inside a string or be the tail of a longer key.)"""
    if frame.lstrip().startswith(b"["):
        return True
    doc, error = _decode(_ANY_JSON, frame + b"]}")
    return not error and isinstance(doc, dict) and doc.get("traceEvents") == []


def _decode(decoder: msgspec.json.Decoder, text: bytes | memoryview) -> tuple[Any, str]:
    """(value, "") or (None, why the text is not whole JSON); a ValidationError (valid JSON of other types)
    propagates. msgspec raises RecursionError, not DecodeError, for JSON nested past its depth limit."""
    try:
        return decoder.decode(text), ""
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError as e:
        return None, str(e).splitlines()[0] or "not decodable"
    except RecursionError:
        return None, "nested deeper than the decoder allows"


@dataclass
class _Part:
    """One piece's events as a table of their own made them: columns whose name, category and shape ids index this
    piece's `names` and `shape_keys`, with what was left out of it."""

    columns: dict[str, np.ndarray]
    names: list[str]
    shape_keys: list[bytes]
    counters: tuple[Counter[str], Counter[str], Counter[str]]  # skipped, dropped, past int64, as _Table counts them
    items: int
    process_names: dict[int, str]
    flows_unread: int


class _Table:
    """The columns built so far, the name table, and what was left out along the way."""

    def __init__(self, source: Path, cap: tuple[int, str] | None = None, typed: _Typed = _FAST):
        self.source = source
        self.typed = typed
        self.process_names: dict[int, str] = {}  # pid -> its process_name metadata
        # the rows whose args name their device (`_named_devices`), and that device: read untyped only
        self.named_devices: list[tuple[np.ndarray, np.ndarray]] = []
        self.flows: list[Flows] = []  # the flow arrows kept, a piece's at a time
        self.flow_cats = _NameTable()  # (cat, whether the id is text) -> its number, what pairs a flow with its id
        self.flow_texts = _NameTable()  # an id written as text -> its number
        self.flows_unread = 0  # flow arrows skipped unread (they are kept only where self.typed.keeps_flows)
        self.strings = _NameTable()
        self.columns = _Growing()
        self.skipped: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.replaced = 0  # characters that were not UTF-8, now U+FFFD
        self.error = ""  # why the last text did not decode
        self.items = 0  # array items seen, events or not
        self.odd_start = False  # one of the first 100 items is not an object
        self.shapes = _Shapes()
        self.past_int64: Counter[str] = Counter()  # ids that are integers past int64, by what they are
        self.thread_names: dict[str, int] = {}  # pid / tid text that is no number -> its index (id -2 - index)
        self.max_events = cap or max_events()  # checked as each piece comes, before the table grows past it
        self.marks: list[_Mark] = []  # duration events' begins and ends, in the file's order (`_durations`)
        self.cut_short: tuple[int, bool] | None = None  # a text that stopped before its JSON closed: (bytes left
        # out after its last whole event, whether it was an object, whose close is no option)

    def add_piece(self, array: memoryview) -> bool:
        """pieces.split's test: True when `array` is a JSON array of whole events (then they are in the table)."""
        return self._add_events(array)

    def piece_part(self, array: memoryview) -> _Part | None:
        """A piece read by a table of its own, for `merge` (in this process or a forked one); None when the fast
        typed decode does not take it whole, or it names a thread in words (those ids are the sequential read's),
        or a process as a GPU side (whose flow arrows the sequential read keeps from there on)."""
        table = _Table(self.source, self.max_events)
        try:
            table._add_typed(_FAST.events.decode(array))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
        if table.thread_names or table.typed.keeps_flows or table.marks:  # begins and ends pair across pieces
            return None
        cols, keys = table.columns.take(), table.shapes.ids.keys_in_order
        return _Part(cols, list(table.strings), keys, table.counters(), table.items, *table.meta())

    def meta(self) -> tuple[dict[int, str], int]:
        """What a piece's part carries besides its rows: the process names, the flow arrows skipped unread."""
        return self.process_names, self.flows_unread

    def merge(self, part: _Part) -> None:
        """A piece's part, in the file's order: its names and shapes take this table's ids (a name new here takes
        the next, so the ids come out as one table reading every piece in turn gives them)."""
        cols = part.columns
        ids = np.fromiter(map(self.strings.__getitem__, part.names), np.int32, len(part.names))
        cols["name_id"], cols["cat_id"] = ids[cols["name_id"]], ids[cols["cat_id"]]
        if part.shape_keys:
            shape_ids = np.fromiter(map(self.shapes.ids.__getitem__, part.shape_keys), np.int32, len(part.shape_keys))
            has = cols["shape_id"] >= 0
            cols["shape_id"][has] = shape_ids[cols["shape_id"][has]]
        for mine, theirs in zip(self.counters(), part.counters, strict=True):
            mine.update(theirs)
        self.items += part.items
        self.process_names.update(part.process_names)
        self.flows_unread += part.flows_unread
        check_events(self.columns.n + len(cols["ts_ns"]), self.source, self.max_events)
        self.columns.append(cols)

    def counters(self) -> tuple[Counter[str], Counter[str], Counter[str]]:
        return self.skipped, self.dropped, self.past_int64

    def add_document(self, doc: bytes) -> _Top:
        """The trace's last events and its top-level keys; a text that stops before its JSON closes, closed after
        its last whole event (`pieces.closings`), what it leaves out said (`self.cut_short`)."""
        try:
            return self._add_document(doc)
        except ProbeError:
            if not _stops_short(self.error, doc):
                raise
            said = self.error
        for text, left in pieces.closings(doc):
            if self._decode(_RAW, text) is not None:  # whole JSON: read as a trace (or said why it is none)
                top = self._add_document(text)
                self.cut_short = (left, doc.lstrip()[:1] == b"{")
                return top
        raise ProbeError(f"{self.source}: not JSON ({said})")

    def _add_document(self, doc: bytes) -> _Top:
        head = doc.lstrip()[:1]
        if not head:
            raise ProbeError(f"{self.source}: {'empty file' if not doc else 'only whitespace, no JSON'}")
        if head == b"[":
            if not self._add_events(doc):
                raise ProbeError(f"{self.source}: not JSON ({self.error})")
            if self.items == 0 or self.odd_start:  # [1, 2, 3] is JSON, not a trace in the JSON Array Format
                raise ProbeError(self._not_a_trace())
            return _Top()
        if head != b"{":  # a string, a number, true / false / null: JSON, or not
            valid = self._decode(_RAW, doc) is not None
            raise ProbeError(self._not_a_trace() if valid else f"{self.source}: not JSON ({self.error})")
        top = self._top_keys(doc)
        if top is None:
            raise ProbeError(f"{self.source}: not JSON ({self.error})")
        if top.traceEvents is None:
            raise ProbeError(f"{self.source}: JSON but not a trace (no traceEvents list): {_what_else(doc)}")
        return _Top(int64_or_none(top.baseTimeNanoseconds), _rank(top.distributedInfo), _devices(top.deviceProperties))

    def _not_a_trace(self) -> str:
        return f"{self.source}: JSON but not a trace (expected an object with traceEvents)"

    def _top_keys(self, doc: bytes) -> _Doc | _AnyDoc | None:
        """Decode the document's object, adding its events; `traceEvents` is None on the result when it has no
        list of events. None when the document is not JSON."""
        try:
            top = self._decode(self.typed.doc, doc)
            if top is not None and top.traceEvents is not None:
                self._add_typed(top.traceEvents)
            return top
        except msgspec.ValidationError:  # odd types: the events one by one, the keys as they come
            top = self._decode(_ANY_DOC, doc)
        if top is not None:
            events = bytes(top.traceEvents)
            if not (events.startswith(b"[") and self._add_events(events)):
                top.traceEvents = None
        return top

    def _add_events(self, text: bytes | memoryview) -> bool:
        """Decode a JSON list of events into the table; False when the text is not whole JSON."""
        try:
            events = self._decode(self.typed.events, text)
            if events is not None:
                self._add_typed(events)
        except msgspec.ValidationError:  # odd types somewhere: take every event as it comes
            items = self._decode(_RAW_ITEMS, text)
            if items is None:
                return False
            self._add_untyped(items)
            return True
        return events is not None

    def _decode(self, decoder: msgspec.json.Decoder, text: bytes | memoryview):
        """decoder.decode(text), with bytes that are not UTF-8 replaced when that is what stops it; None (and
        `self.error`) when the text is not whole JSON. A ValidationError (valid JSON, other types) propagates."""
        out, self.error = _decode(decoder, text)
        if "UTF-8" not in self.error:
            return out
        text = bytes(text)  # a piece is a view into the reader's buffer
        fixed = text.decode("utf-8", "replace").encode()
        out, self.error = _decode(decoder, fixed)
        if not self.error:
            self.replaced += fixed.count("\ufffd".encode()) - text.count("\ufffd".encode())
        return out

    def _add_typed(self, events: list) -> None:
        self.items += len(events)
        phases = Counter(map(type, events))
        if phases.pop(_Event, 0) < len(events):
            self._other_phases(events, phases)
        xs = [e for e in events if type(e) is _Event]
        args = [e.args for e in xs]
        shape = self.shapes.ids_of_texts(args)
        ints = ([a.correlation for a in args], [a.external_id for a in args], [a.nbytes for a in args])
        self._add(*_common_fields(xs), *ints, [a.kind for a in args], shape, typed=True)

    def _add_untyped(self, items: list[msgspec.Raw]) -> None:
        events = []
        for i, raw in enumerate(map(bytes, items), start=self.items):
            event = self._decode(_ANY_EVENT, raw) if raw.startswith(b"{") else None
            if event is None:
                self.dropped["not an object"] += 1
                self.odd_start |= i < 100
            else:
                events.append(event)
        self.items += len(items)
        xs = [e for e in events if e.ph == "X"]
        others = [e for e in events if e.ph != "X"]
        self.skipped.update(str(e.ph) for e in others)
        if metas := [e for e in others if e.ph == "M"]:
            self._name_processes(metas)
        if flows := [e for e in others if e.ph in _FLOW_PHASES]:
            if self.typed.keeps_flows:  # as the typed read of this table would
                self._add_flows(flows, [e.ph for e in flows])
            else:
                self.flows_unread += len(flows)
        self.marks += [
            _Mark(e.ph == "B", e.cat, e.name, e.pid, e.tid, bytes(e.ts), b"" if e.args is None else _ENCODE(e.args))
            for e in others
            if e.ph in ("B", "E")
        ]
        ts, dur, name, cat, pid, tid = _common_fields(xs)
        args = [e.args if type(e.args) is dict else {} for e in xs]
        corr = [a.get("correlation", -1) for a in args]
        ext = [a.get("External id", -1) for a in args]
        nbytes = [a.get("bytes", -1) for a in args]
        kinds = [a.get("kind", -1) for a in args]
        shape = self.shapes.ids_of_values(args)
        exact = _exact_times([a.get("BeginNs", -1) for a in args], [a.get("EndNs", -1) for a in args])
        device = _named_devices(args)
        name, cat = list(map(_text, name)), list(map(_text, cat))
        self._add(ts, dur, name, cat, pid, tid, corr, ext, nbytes, kinds, shape, exact=exact, device=device)

    def _add(
        self,
        ts: list,
        dur: list,
        name: list,
        cat: list,
        pid: list,
        tid: list,
        corr: list,
        ext: list,
        nbytes: list,
        kinds: list,
        shape: np.ndarray,
        typed: bool = False,
        exact: _Exact | None = None,
        device: np.ndarray | None = None,
    ) -> None:
        ts_ns, ts_status = times_ns(ts)
        dur_ns, dur_status = times_ns(dur)
        if exact is not None:
            ts_ns[exact.rows], dur_ns[exact.rows] = exact.ts_ns, exact.dur_ns
            ts_status[exact.rows] = dur_status[exact.rows] = NUMBER
        keep = (ts_status == NUMBER) & (dur_status == NUMBER)
        part = dict(
            ts_ns=ts_ns,
            dur_ns=dur_ns,
            name_id=self._ids(name),
            cat_id=self._ids(cat),
            pid=self._thread_ids(pid),
            tid=self._thread_ids(tid),
            correlation=self._ids_past_int64(corr, "correlation id", "left unjoined from its launch", typed),
            external_id=self._ids_past_int64(ext, "External id", "not tied to its op", typed),
            bytes=_counts(nbytes),
            copy_kind=_copy_kinds(kinds),
            shape_id=shape,
        )
        if not keep.all():
            self._count_dropped(ts_status, dur_status)
            part = {k: v[keep] for k, v in part.items()}
            device = None if device is None else device[keep]
        if device is not None and (named := np.flatnonzero(device >= 0)).size:
            self.named_devices.append((self.columns.n + named, device[named]))
        check_events(self.columns.n + len(part["ts_ns"]), self.source, self.max_events)
        self.columns.append(part)

    def _other_phases(self, events: list, phases: Counter[type]) -> None:
        """A typed piece's events of other phases than X: counted as skipped; process names and (where this read
        keeps them) flow arrows read."""
        self.skipped.update({_PHASE_OF[cls]: n for cls, n in phases.items()})
        self.flows_unread += sum(phases.get(cls, 0) for cls in _UNREAD_FLOWS)
        if _Meta in phases:
            self._name_processes([e for e in events if type(e) is _Meta])
        if any(cls in phases for cls in _FLOW_TYPES):
            flows = [e for e in events if type(e) in _FLOW_TYPES]
            self._add_flows(flows, [_FLOW_TYPES[type(e)] for e in flows])
        if _Begin in phases or _End in phases:
            self.marks += [  # their texts copied: a piece's Raw values are views into it
                _Mark(True, e.cat, e.name, e.pid, e.tid, bytes(e.ts), bytes(e.args))
                if type(e) is _Begin
                else _Mark(False, pid=e.pid, tid=e.tid, ts=bytes(e.ts))
                for e in events
                if type(e) in _DURATION_TYPES
            ]

    def _durations(self) -> None:
        """Duration events (B, E) as complete ones: on each thread, in order of time (the file's among equals), an
        end closes the latest begin still open, and the pair is one event from the begin's time to the end's, with
        the begin's category, name and args (the Trace Event Format's rule). An end with no begin open, and a begin
        never ended, are dropped and counted; none is left among the skipped phases."""
        marks, self.marks = self.marks, []
        if not marks:
            return
        ts_ns, status = times_ns([m.ts for m in marks])
        open_: dict[tuple, list[int]] = {}
        pairs: list[tuple[int, int]] = []
        for i in sorted(range(len(marks)), key=lambda i: (ts_ns[i], i)):
            if status[i] != NUMBER:
                self.dropped["duration event with no time"] += 1
                continue
            m = marks[i]
            stack = open_.setdefault((_key(m.pid), _key(m.tid)), [])
            if m.begin:
                stack.append(i)
            elif stack:
                pairs.append((stack.pop(), i))
            else:
                self.dropped["end (E) with no begin open on its thread"] += 1
        if never := sum(map(len, open_.values())):
            self.dropped["begin (B) never ended"] += never
        for ph in "BE":  # each begin and end is paired or dropped, never skipped
            self.skipped.pop(ph, None)
        if not pairs:
            return
        items = self.items
        self._add_events(b"[" + b",".join(_complete(marks[b], int(ts_ns[e] - ts_ns[b])) for b, e in pairs) + b"]")
        self.items = items

    def _name_processes(self, metas: list) -> None:
        """The process names that `process_name` metadata gives in args.name, by pid (read as the pid column reads
        it). A process named as a GPU side (`_process_side`) has the flow arrows kept from here on: its ops carry
        no correlation id."""
        for e in metas:
            label = e.args.get("name") if type(e.args) is dict else None
            if e.name == "process_name" and type(label) is str:
                self.process_names[self._thread_id(e.pid)] = label
                if _process_side(label) is not None:
                    self.typed = _WITH_FLOWS

    def _add_flows(self, flows: list, phases: list) -> None:
        """Flow arrows (typed `_Flow`s or untyped events) with their phases, as columns. One with no time, or no id
        a flow is known by (an integer within int64, or a text), is left out: it could bind nothing."""
        n = len(flows)
        ts_ns, status = times_ns([f.ts for f in flows])
        ids = [f.id for f in flows]
        text = [type(i) is str for i in ids]
        cats = zip([_text(f.cat) for f in flows], text, strict=True)
        cat = np.fromiter(map(self.flow_cats.__getitem__, cats), np.int64, n)
        ids = [self.flow_texts[i] if t else i for i, t in zip(ids, text, strict=True)]
        usable = np.fromiter((type(i) is int and _I64.min <= i <= _I64.max for i in ids), bool, n)
        start = np.fromiter((p == "s" for p in phases), bool, n)
        bind_next = np.fromiter((p == "f" and f.bp != "e" for p, f in zip(phases, flows, strict=True)), bool, n)
        pid, tid = self._thread_ids([f.pid for f in flows]), self._thread_ids([f.tid for f in flows])
        keep = (status == NUMBER) & usable
        columns = (cat, _ints(ids), start, bind_next, pid, tid, ts_ns)
        self.flows.append(Flows(*(c[keep] for c in columns)))

    def _ids_past_int64(self, values: list, what: str, so: str, typed: bool = False) -> np.ndarray:
        """An id column as int64 (-1 where missing or not an integer), counting the integers past int64: their
        rows can join nothing, and the trace's warnings say how many. Only a column off the fast path (an integer
        that does not fit, or another type) is looked at value by value; a typed piece's ids are ints already
        (msgspec refused any other type), so their types need no look."""
        if typed or set(map(type, values)) <= {int}:
            try:
                return np.fromiter(values, np.int64, len(values))
            except OverflowError:
                pass
        past = sum(1 for v in values if type(v) is int and not _I64.min <= v <= _I64.max)
        if past:
            self.past_int64[f"{what} past int64: {so}"] += past
        return _ints(values)

    def _thread_ids(self, values: list) -> np.ndarray:
        """A pid or tid column as int64. The 2021 schema writes them as text: a number's digits ("25738") and a
        GPU row's stream ("stream 7") read as that number; any other text gets its own negative id (-2, -3, ... in
        first-seen order), so two threads named in words stay two threads. -1 where the value is missing."""
        if set(map(type, values)) <= {int}:
            return _ints(values)
        return np.fromiter((self._thread_id(v) for v in values), np.int64, len(values))

    def _thread_id(self, value) -> int:
        if type(value) is int:
            return value if _I64.min <= value <= _I64.max else -1
        if type(value) is not str:
            return -1
        m = _NUMBERED.fullmatch(value)
        if m:
            return int(m[1])
        return -2 - self.thread_names.setdefault(value, len(self.thread_names))

    def _count_dropped(self, ts_status: np.ndarray, dur_status: np.ndarray) -> None:
        no_ts = ts_status == NOT_A_NUMBER
        no_dur = ~no_ts & (dur_status == NOT_A_NUMBER)
        far = ~no_ts & ~no_dur & ((ts_status != NUMBER) | (dur_status != NUMBER))
        for why, mask in (
            ("missing or non-numeric ts", no_ts),
            ("missing or non-numeric dur", no_dur),
            (OUT_OF_RANGE, far),
        ):
            if mask.any():
                self.dropped[why] += int(mask.sum())

    def _ids(self, values: list[str]) -> np.ndarray:
        return np.fromiter(map(self.strings.__getitem__, values), np.int32, len(values))

    def _join_by_flows(self, fmt: TraceFormat, kind: np.ndarray, cols: dict[str, np.ndarray]) -> tuple[str, ...]:
        """Runtime calls and GPU ops with no correlation id joined by the flow arrows between them (`flows.link`),
        in a trace torch did not write: torch writes its arrows from the ids it writes beside them (kineto's ac2g)
        or from an op to its kernel (the legacy export's cpu_to_cuda), so they join nothing its ids do not. Raises
        _FlowsSkipped when the arrows are wanted and some were skipped unread."""
        if fmt != "chrome":
            return ()
        if self.flows_unread and wanted(kind, cols["correlation"]):
            raise _FlowsSkipped
        return link(kind, cols, Flows.join(self.flows))

    def finish(self, top: _Top) -> Trace:
        self._durations()
        if not self.columns.n:  # empty columns of the right types: finish() says why
            self._add([], [], [], [], [], [], [], [], [], [], np.zeros(0, np.int32))
        names = tuple(self.strings)
        cols = self.columns.take()
        cats = np.flatnonzero(np.bincount(cols["cat_id"], minlength=len(names))).tolist()  # no sort of the rows
        kind, notes = _kinds(names, cats, cols["cat_id"], cols["name_id"])
        blank = next((i for i in cats if names[i] == ""), -1)  # the category of events that have none
        legacy, legacy_notes = _legacy_sides(kind, names, cols, self.thread_names, blank)
        legacy_notes += _gpu_processes(kind, cols, self.process_names, blank)
        legacy_notes += _without_category(kind, names, cols, blank)  # after the processes' sides took theirs
        on_stream = np.isin(kind, np.asarray(ON_STREAM, dtype=np.int8))
        cols["kind"] = kind
        cols["stream"] = np.where(on_stream, cols["tid"], -1)
        cols["device"] = np.where(on_stream & ~legacy, cols["pid"], np.where(on_stream, cols["tid"], -1))
        for rows, device in self.named_devices:  # a GPU op whose args name its device: that device, not its pid
            named = on_stream[rows] & ~legacy[rows]
            cols["device"][rows[named]] = device[named]
        notes += legacy_notes
        notes += _pair_profiler_ranges(names, cats, cols)
        fmt: TraceFormat = "torch_chrome" if legacy.any() or _torch_wrote(names, cats) else "chrome"
        notes += self._join_by_flows(fmt, kind, cols)
        if self.replaced:
            notes += (f"replaced {self.replaced} character(s) that were not UTF-8 with U+FFFD",)
        notes += _cut_short_note(self.cut_short)
        notes += tuple(f"{n} event(s) with a {why}" for why, n in sorted(self.past_int64.items()))
        ops_only = np.where(kind == Kind.CPU_OP, cols["shape_id"], -1)
        shapes, cols["shape_id"], odd = self.shapes.finish(ops_only)
        if odd:
            notes += (f"{odd} recorded input shape(s) not lists of ints and strings: left out (shape_id -1)",)
        return finish(
            fmt,
            self.source,
            top.base_ns,
            names,
            cols,
            dict(self.skipped),
            dict(self.dropped),
            rank=top.rank,
            notes=notes,
            shapes=shapes,
            devices=top.devices,
        )


def _kinds(
    names: tuple[str, ...], cats: list[int], cat_id: np.ndarray, name_id: np.ndarray
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Each row's Kind: by its category, then ProfilerStep#N by name, then the device events `_KIND_BY_NAME` says
    by name; and one line naming the categories this reader does not know (kept as other). Each category and name
    is looked at once, whatever the row count (a million step names are a million names, but a few categories)."""
    if not len(cat_id):
        return np.zeros(0, np.int8), ()
    kind_of_cat = np.full(len(names), Kind.OTHER, np.int8)
    for i in cats:
        kind_of_cat[i] = _chrome_kind(names[i])
    kind = kind_of_cat[cat_id]
    ranges = (kind == Kind.USER_RANGE) | (kind == Kind.CPU_OP)
    kind[ranges & of_names(names, name_id, ranges, lambda s: s.startswith(PROFILER_STEP_PREFIX))] = Kind.PROFILER_STEP
    for i in cats:
        by_name = _KIND_BY_NAME.get(names[i].lower())
        if by_name:
            rows = cat_id == i
            named = of_names(names, name_id, rows, lambda s, m=by_name: m.get(s, -1), np.int8, -1)
            kind[rows & (named >= 0)] = named[rows & (named >= 0)]
    unknown = [i for i in cats if foreign_category(names[i])]
    if not unknown:
        return kind, ()
    counts = ", ".join(f"{names[i]} ({np.count_nonzero(cat_id == i)})" for i in unknown[:5])
    more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
    return kind, (
        f"events of categories this reader does not know, kept as 'other' (a device side probe does not support "
        f"is left out of every GPU figure): {counts}{more}",
    )


# torch.autograd.profiler's own export (before kineto, torch < 1.8) writes no category: the process an event sits in
# names its side, and a kernel's tid is its device.
_LEGACY_SIDES = {"cpu functions": Kind.CPU_OP, "cuda functions": Kind.KERNEL}


def _legacy_sides(
    kind: np.ndarray, names: tuple[str, ...], cols: dict[str, np.ndarray], thread_names: dict[str, int], blank: int
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Rows with no category (`blank`: its name id, -1 when every event has one) in a process named as the legacy
    export names its sides take that side's Kind (in place); returns which rows are legacy kernels (their device is
    their tid) and a line saying what was read so."""
    legacy_kernels = np.zeros(len(kind), bool)
    said = []
    for text, j in thread_names.items():
        side = _LEGACY_SIDES.get(text.lower())
        if side is None or blank < 0:
            continue
        rows = (cols["pid"] == -2 - j) & (cols["cat_id"] == blank) & (kind == Kind.OTHER)
        if rows.any():
            kind[rows] = side
            legacy_kernels |= rows & (side == Kind.KERNEL)
            said.append(f"{np.count_nonzero(rows)} in {text!r} as {'kernels' if side == Kind.KERNEL else 'CPU ops'}")
    if not said:
        return legacy_kernels, ()
    return legacy_kernels, (
        "events with no category read as torch.autograd.profiler's legacy export (before kineto): "
        + ", ".join(said)
        + "; it records no launch calls, so no kernel joins one",
    )


# A process whose process_name metadata names a GPU side, by its whole name, any case: rocprof v1 names each HSA
# agent's process `GPU<n>` (its kernels; `GPU 0` alike) and its copy engine's `COPY` (its copies).
GPU_PROCESS = re.compile(r"GPU ?[0-9]{1,4}", re.IGNORECASE)
_COPY_PROCESS = re.compile(r"COPY", re.IGNORECASE)


def _process_side(name: str) -> Kind | None:
    """The Kind of a process's events with no category, by the name its metadata gives it; None: no GPU side."""
    if GPU_PROCESS.fullmatch(name):
        return Kind.KERNEL
    return Kind.GPU_MEMCPY if _COPY_PROCESS.fullmatch(name) else None


def _gpu_processes(kind: np.ndarray, cols: dict[str, np.ndarray], process_names: dict[int, str], blank: int) -> tuple:
    """Rows with no category that nothing read yet (`blank`: its name id, -1 when every event has one), in a
    process named as a GPU side (`_process_side`), take that side's Kind (in place); one line says how many. An
    event with a category is never read by its process. A copy's direction is its name's (`copy_kind_of_name`), its
    bytes unknown."""
    sides = {pid: side for pid, name in process_names.items() if (side := _process_side(name)) is not None}
    if blank < 0 or not sides:
        return ()
    free = (cols["cat_id"] == blank) & (kind == Kind.OTHER)
    said = []
    for pid, side in sides.items():
        rows = free & (cols["pid"] == pid)
        if rows.any():
            kind[rows] = side
            what = "kernels" if side == Kind.KERNEL else "GPU copies"
            said.append(f"{np.count_nonzero(rows)} in {process_names[pid]!r} as {what}")
    if not said:
        return ()
    return ("events with no category read by the GPU side their process's metadata names: " + ", ".join(said),)


# A CUDA or HIP API call by its name: the runtime's (cudaMalloc, hipMemcpy, __hipPushCallConfiguration) or the
# driver's (cuLaunchKernel, cuMemAlloc_v2), the prefix followed by a capital, so cutlass_*, cudnn* or hipblaslt*
# kernels are not calls.
_API_CALL = re.compile(r"_*(?:cuda|cu|hip)[A-Z]\w*")


def _without_category(kind: np.ndarray, names: tuple[str, ...], cols: dict[str, np.ndarray], blank: int) -> tuple:
    """Events with no category that nothing else read (in place): a CUDA or HIP API call by name (`_API_CALL`) is
    a runtime call, as a tracer of the driver writes them (eBPF on libcuda: cuLaunchKernel, cuStreamSynchronize);
    the rest stay other. One line each says how many, and the commonest names; a trace whose events all have a
    category is untouched."""
    if blank < 0:
        return ()
    rows = (cols["cat_id"] == blank) & (kind == Kind.OTHER)
    if not rows.any():
        return ()
    calls = rows & of_names(names, cols["name_id"], rows, _API_CALL.fullmatch)
    kind[calls] = Kind.RUNTIME
    said = []
    if calls.any():
        said.append(
            f"{np.count_nonzero(calls)} event(s) with no category read as CUDA/HIP API calls by their names: "
            f"{_commonest(names, cols['name_id'][calls])}"
        )
    if (rest := rows & ~calls).any():
        said.append(
            f"{np.count_nonzero(rest)} event(s) with no category, kept as 'other' (a device side among them is left "
            f"out of every GPU figure): {_commonest(names, cols['name_id'][rest])}"
        )
    return tuple(said)


def _commonest(names: tuple[str, ...], name_id: np.ndarray, shown: int = 5) -> str:
    """The commonest names among `name_id` with their counts ("cuStreamSynchronize (11), ..."), most first."""
    ids, counts = np.unique(name_id, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    text = ", ".join(f"{names[ids[i]][:80]} ({counts[i]})" for i in order[:shown].tolist())
    return text + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _pair_profiler_ranges(names: tuple[str, ...], cats: list[int], cols: dict[str, np.ndarray]) -> tuple[str, ...]:
    """CUPTI range-profiler kernels carry no correlation: pair the i-th (by start) with the i-th kernel launch
    call, as HTA's cupti_counter_analysis does, when their counts agree. Their times are the profiler's ranges,
    not the kernels' own, and the warning says so."""
    range_cats = [i for i in cats if names[i].lower() == PROFILER_RANGE]
    if not range_cats:
        return ()
    ranges = np.flatnonzero(np.isin(cols["cat_id"], range_cats))
    runtime = cols["kind"] == Kind.RUNTIME
    launches = np.flatnonzero(runtime & of_names(names, cols["name_id"], runtime, _is_launch))
    said = f"{len(ranges)} kernels are CUPTI range-profiler ranges (cuda_profiler_range): their names and counters are "
    if len(ranges) != len(launches) or np.any(cols["correlation"][ranges] >= 0):
        return (said + f"real, their times are the profiler's; not paired with the {len(launches)} launch calls",)
    ts, corr = cols["ts_ns"], cols["correlation"]
    corr[ranges[np.argsort(ts[ranges], kind="stable")]] = corr[launches[np.argsort(ts[launches], kind="stable")]]
    return (said + "real and each is paired with a launch call in order, but their times are the profiler's",)


def _is_launch(name: str) -> bool:
    return api_base_name(name) in LAUNCH_NAMES


class _Shapes:
    """The distinct shape recordings of cpu_ops, interned as the pieces come (typed pieces by the JSON text of their
    three keys, untyped ones by their values), each decoded once at the end and made one id per distinct `Shapes`."""

    def __init__(self):
        self.ids = _KeyTable()

    def ids_of_texts(self, args: list[_Args]) -> np.ndarray:
        n = len(args)
        out = np.full(n, -1, np.int32)
        dims, types = [a.dims for a in args], [a.types for a in args]
        if dims.count(_MISSING) == n and types.count(_MISSING) == n:
            return out  # the common case: recorded without shapes
        # C-level passes: which rows recorded any, then their three texts joined (no NUL sits in JSON text outside
        # a string, so the key is unique and splits back) and looked up
        said = (map(operator.is_not, column, repeat(_MISSING)) for column in (dims, types))
        has = list(map(operator.or_, *said))
        rows = np.flatnonzero(np.fromiter(has, bool, n))
        keys = map(b"\0".join, compress(zip(dims, types, [a.concrete for a in args], strict=True), has))
        out[rows] = np.fromiter(map(self.ids.__getitem__, keys), np.int32, len(rows))
        return out

    def ids_of_values(self, args: list[dict]) -> np.ndarray:
        out = np.full(len(args), -1, np.int32)
        for i, a in enumerate(args):
            if "Input Dims" in a or "Input type" in a:
                value = tuple(a.get(k, _MISSING) for k in ("Input Dims", "Input type", "Concrete Inputs"))
                out[i] = self.ids[_ENCODE(value)]
                self.ids.decoded.setdefault(int(out[i]), value)
        return out

    def finish(self, shape_id: np.ndarray) -> tuple[tuple[Shapes, ...], np.ndarray, int]:
        """(one Shapes per distinct recording, the ids renumbered to them, how many rows recorded something else)."""
        keys = self.ids.keys_in_order
        if not keys:
            return (), shape_id, 0
        distinct: dict[Shapes, int] = {}
        renumber = np.full(len(keys), -1, np.int32)
        for j, key in enumerate(keys):
            value = self.ids.decoded.get(j) or tuple(_decoded(t) if t else _MISSING for t in key.split(b"\0"))
            shapes = _shapes(*value)
            if shapes is not None:
                renumber[j] = distinct.setdefault(shapes, len(distinct))
        has = shape_id >= 0
        odd = int(np.count_nonzero(renumber[shape_id[has]] < 0))
        out = np.full(len(shape_id), -1, np.int32)
        out[has] = renumber[shape_id[has]]
        return tuple(distinct), out, odd


class _KeyTable(dict):
    """Shape key -> id in first-seen order, a new key taking the next id as it is looked up (see _NameTable).
    Untyped pieces key by their values' encoding (which holds no NUL, so it never meets a typed key) and keep the
    values themselves."""

    def __init__(self) -> None:
        super().__init__()
        self.keys_in_order: list[bytes] = []
        self.decoded: dict[int, tuple] = {}  # id -> decoded values, for the keys of untyped pieces

    def __missing__(self, key: bytes) -> int:
        i = self[key] = len(self.keys_in_order)
        self.keys_in_order.append(key)
        return i


def _shapes(dims, types, concrete) -> Shapes | None:
    """A Shapes from the decoded values, or None when they are not lists of ints and lists of strings."""
    d = () if dims is _MISSING else _dims(dims, 0)
    t = () if types is _MISSING else _strings(types)
    c = None if concrete is _MISSING else _strings(concrete)
    if d is None or t is None or (c is None and concrete is not _MISSING):
        return None
    return Shapes(d, t, c)


def _dims(value, depth: int) -> tuple | None:
    """`Input Dims` as nested tuples of ints (not bools); None for anything else, or nesting past _MAX_DIMS_DEPTH."""
    if type(value) is not list or depth > _MAX_DIMS_DEPTH:
        return None
    out = []
    for v in value:
        inner = v if type(v) is int else _dims(v, depth + 1)
        if inner is None:
            return None
        out.append(inner)
    return tuple(out)


def _strings(value) -> tuple[str, ...] | None:
    return tuple(value) if type(value) is list and all(type(v) is str for v in value) else None


def _decoded(text: msgspec.Raw):
    """A shape key's JSON value; None (not a shape) when it is nested past msgspec's limit."""
    try:
        return _ANY_JSON.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None


class _NameTable(dict):
    """string -> id, in first-seen order; a string it lacks gets the next id as it is looked up, so a piece's ids
    are one C-level pass over its names (`map(table.__getitem__, names)`) whether they are new or not."""

    def __missing__(self, s: str) -> int:
        i = self[s] = len(self)
        return i


class _Growing:
    """Columns filled piece by piece, in arrays that double when full. Each growth copies one column at a time into
    a fresh large allocation (mmap'd, so the old one goes back to the system when freed): memory holds the table
    and one column. A list of per-piece arrays joined at the end held the table twice, the second copy stranded
    in the heap."""

    def __init__(self):
        self.cols: dict[str, np.ndarray] = {}
        self.n = 0  # rows filled

    def append(self, part: dict[str, np.ndarray]) -> None:
        m = len(part["ts_ns"])
        if not self.cols:
            self.cols = {k: np.empty(max(m, 1 << 16), v.dtype) for k, v in part.items()}
        size = len(self.cols["ts_ns"])
        if self.n + m > size:
            size = max(2 * size, self.n + m)
            for k in list(self.cols):
                grown = np.empty(size, self.cols[k].dtype)
                grown[: self.n] = self.cols[k][: self.n]
                self.cols[k] = grown  # the old column is freed here, before the next one grows
        for k, v in part.items():
            self.cols[k][self.n : self.n + m] = v
        self.n += m

    def take(self) -> dict[str, np.ndarray]:
        """The columns cut to their rows, one at a time (each copy replaces its padded column)."""
        return {k: self.cols.pop(k)[: self.n].copy() for k in list(self.cols)}


def _common_fields(xs: list) -> tuple[list, list, list, list, list, list]:
    """ts, dur, name, cat, pid, tid of the events, a list each (a comprehension a field is the fastest way)."""
    return (
        [e.ts for e in xs],
        [e.dur for e in xs],
        [e.name for e in xs],
        [e.cat for e in xs],
        [e.pid for e in xs],
        [e.tid for e in xs],
    )


@dataclass(frozen=True)
class _Exact:
    """The events of a piece that carry their exact ns in args (rocprof v1's BeginNs / EndNs), and those times."""

    rows: np.ndarray  # indices into the piece's complete events
    ts_ns: np.ndarray
    dur_ns: np.ndarray


def _exact_times(begin: list, end: list) -> _Exact | None:
    """rocprof v1 writes each event's exact ns in args.BeginNs and args.EndNs (text, on the clock of its `ts`, which
    is the same time cut to whole us): where both are there, 0 <= BeginNs <= EndNs, they are the event's times.
    None when no event has them."""
    if begin.count(-1) == len(begin):
        return None
    b, e = _counts(begin), _counts(end)
    rows = np.flatnonzero((b >= 0) & (e >= b))
    return _Exact(rows, b[rows], e[rows] - b[rows]) if len(rows) else None


def _named_devices(args: list[dict]) -> np.ndarray | None:
    """The device each event's args name, -1 where none; None when no event names one. rocprof v1 writes a GPU
    op's device as `dev-id` (text: its process is the HSA agent's, pid 8 for device 2, or the copy engine's, one
    for every device); kineto as `device` (always its pid in the traces seen). Read only by the untyped decode,
    where rocprof's pieces are read (their BeginNs / EndNs keep them from the typed one): a kineto trace read typed
    keeps its pid, which is the same device."""
    named = [a.get("dev-id", a.get("device", -1)) for a in args]
    return None if named.count(-1) == len(named) else _counts(named)


def _text(v) -> str:
    """A name or category of any JSON type as text (a list name is kept as its repr, as before)."""
    return v if type(v) is str else "" if v is None else str(v)


def _ints(values: list, default: int = -1) -> np.ndarray:
    """JSON values as int64, with `default` wherever a value is missing or not an integer that fits."""
    if set(map(type, values)) <= {int}:  # (not bool, not float: fromiter would take True and 3.0 as 1 and 3)
        try:
            return np.fromiter(values, np.int64, len(values))  # every value an integer: the common case
        except OverflowError:  # an integer past int64
            pass
    return np.fromiter(
        (v if type(v) is int and _I64.min <= v <= _I64.max else default for v in values),
        dtype=np.int64,
        count=len(values),
    )


def _counts(values: list) -> np.ndarray:
    """`args.bytes` as int64: an integer, or its decimal text; -1 for anything else."""
    if values.count(-1) == len(values):
        return np.full(len(values), -1, np.int64)
    return _ints([int(v) if type(v) is str and v.isdecimal() and len(v) < 19 else v for v in values])


# args.kind as a copy_kind code: a runtime call's cudaMemcpyKind number (or its text), a GPU copy's direction name
_COPY_CODE: dict = {**COPY_KIND_OF_TEXT, **{k: k for k in range(5)}, **{str(k): k for k in range(5)}}


def _copy_kinds(values: list) -> np.ndarray:
    if values.count(-1) == len(values):
        return np.full(len(values), -1, np.int8)
    code = _COPY_CODE.get
    return np.fromiter((code(v, -1) if type(v) in (int, str) else -1 for v in values), np.int8, len(values))


_DEVICE_KEYS = {  # DeviceInfo field <- its deviceProperties key (kineto's names; then ROCm's for shared memory per SM)
    "id": ("id",),
    "total_memory_bytes": ("totalGlobalMem",),
    "sm_count": ("numSms",),
    "compute_major": ("computeMajor",),
    "compute_minor": ("computeMinor",),
    "warp_size": ("warpSize",),
    "max_threads_per_block": ("maxThreadsPerBlock",),
    "max_threads_per_sm": ("maxThreadsPerMultiprocessor",),
    "regs_per_block": ("regsPerBlock",),
    "regs_per_sm": ("regsPerMultiprocessor",),
    "shared_memory_per_block_bytes": ("sharedMemPerBlock",),
    "shared_memory_per_block_optin_bytes": ("sharedMemPerBlockOptin",),
    "shared_memory_per_sm_bytes": ("sharedMemPerMultiprocessor", "maxSharedMemoryPerMultiProcessor"),
}


def _devices(props) -> tuple[DeviceInfo, ...]:
    """deviceProperties as DeviceInfo, one an object."""
    if type(props) is not list:
        return ()
    return tuple(device_info(p, _DEVICE_KEYS) for p in props if type(p) is dict)


def _rank(info) -> int | None:
    return int64_or_none(info.get("rank")) if isinstance(info, dict) else None


def _chrome_kind(cat: str) -> Kind:
    return _CHROME_KINDS.get(cat.lower(), Kind.OTHER)


def foreign_category(cat: str) -> bool:
    """A chrome category this reader does not know at all (kept as other, and named in `Trace.warnings`): not one
    it reads, nor a sync, the profiler's own spans or overhead (`_KNOWN_OTHER`). A hand-written trace's own
    categories (`kv`, `compute`) are foreign: the user's spans, which probe reads as neither code nor device work."""
    return cat.lower() not in _CHROME_KINDS and cat.lower() not in _KNOWN_OTHER


def foreign_rows(trace: Trace) -> np.ndarray:
    """The rows of a chrome trace (torch's or another tool's) whose category is foreign (`foreign_category`), in ts
    order; none for an nsys export, whose rows come from the tables it reads. In another tool's trace (not torch's:
    `_torch_wrote`) an event with no category that nothing read as a call or a device side is its own too (JAX's
    host events, which name no category), not torch's blank kind of other."""
    if trace.format == "nsys_sqlite":
        return np.zeros(0, np.int64)
    other = trace.rows(Kind.OTHER)
    foreign = trace.name_ids(lambda s: foreign_category(s) or (s == "" and trace.format == "chrome"))
    return other[foreign[trace.cat_id[other]]]


# The categories torch.profiler writes (those this reader knows by name, bar the empty one): a trace with one is its
_TORCH_CATEGORIES = (frozenset(_CHROME_KINDS) | _KNOWN_OTHER) - {""}


def _torch_wrote(names: tuple[str, ...], cats: list[int]) -> bool:
    """Whether torch.profiler wrote the trace, as far as its categories say (its legacy export has none: its sides
    say it)."""
    return any(names[i].lower() in _TORCH_CATEGORIES for i in cats)


__all__ = ["decimal_text_to_ns", "foreign_category", "foreign_rows", "read_chrome"]
