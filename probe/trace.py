"""One event table for every trace: torch.profiler chrome JSON and Nsight Systems SQLite exports.

`load_trace(path) -> Trace` reads `.json`, `.json.gz` (gzip is detected by its magic bytes, not the suffix)
and nsys `.sqlite` exports. The result is a frozen `Trace`: one row an event, one numpy array a column,
names interned to integer ids into `Trace.names`. Rows are sorted by `ts_ns`, ties kept in file order.

Columns, all of length `len(trace)`:

- `ts_ns` (int64): start, integer ns on the file's own clock (chrome: `ts` x 1000 exactly; nsys: `start`).
- `dur_ns` (int64): duration in ns, >= 0 (chrome: `dur` x 1000 exactly; nsys: `end - start`).
- `kind` (int8): a `Kind` code, below.
- `name_id` (int32): index into `names`: the op, range, API call or kernel name.
- `cat_id` (int32): index into `names`: chrome's `cat` as written; for nsys, the table the row came from.
- `pid` (int64): process. Chrome GPU rows carry the device here, as the profiler writes them. -1 if not an int.
- `tid` (int64): thread. Chrome GPU rows carry the stream here. -1 if not an int ("PyTorch Profiler").
- `stream` (int64): GPU stream of kernel, memcpy, memset and gpu_range rows; -1 on host rows. Chrome: the
  row's `tid`, which kineto sets to the stream (its `args.stream` agrees on every public trace); nsys: streamId.
- `device` (int64): GPU device of those rows; -1 on host rows. Chrome: the row's `pid`; nsys: deviceId.
- `correlation` (int64): the launch <-> GPU op link: chrome `args.correlation`, nsys `correlationId`; -1 if none.
- `external_id` (int64): chrome `args["External id"]` (ties a cpu_op to its runtime calls); -1 if none.

`Trace.base_ns` is the absolute epoch time of `ts_ns == 0` when the file says it (chrome
`baseTimeNanoseconds`, nsys `TARGET_INFO_SESSION_START_TIME.utcEpochNs`), else None.

Kinds (`Kind`, stored in `kind`), from chrome's `cat` (case-insensitive) or the nsys table:

- `cpu_op`: `cpu_op`, `operator`.
- `user_range`: `user_annotation` (our `prefill`, `decode#i`, `cache.*`, ...); nsys NVTX push/pop and
  start/end ranges.
- `profiler_step`: a `ProfilerStep#N` `user_annotation` or `cpu_op`; an NVTX range of that name.
- `runtime`: `cuda_runtime`, `cuda_driver`, `runtime`, `hip_runtime`, `hip_driver`; CUPTI_ACTIVITY_KIND_RUNTIME.
- `kernel`: `kernel`, `Kernel`; CUPTI_ACTIVITY_KIND_KERNEL.
- `gpu_memcpy`: `gpu_memcpy`, `memcpy`; CUPTI_ACTIVITY_KIND_MEMCPY.
- `gpu_memset`: `gpu_memset`, `memset`; CUPTI_ACTIVITY_KIND_MEMSET.
- `gpu_range`: `gpu_user_annotation`, a user range projected onto a stream (never a step).
- `python`: `python_function`.
- `other`: anything else (`cuda_sync`, `Trace`, `overhead`, ...).

Only complete events (`ph == "X"`) become rows; metadata, instants and flow arrows are counted in
`Trace.skipped` and left out. Events the table cannot hold honestly are dropped and counted in `Trace.dropped`
(a negative duration, a missing `ts`/`dur`, a non-numeric time); `Trace.warnings` says so in words.

Exact time. torch writes `"ts": 5082703139188.524`, microseconds with three decimals around 5e12, and a float64
cannot hold that (its spacing there is ~0.001 us), so `round(float(ts) * 1000)` can land 1 ns off. The parser
therefore reads the digits: one regex pass finds every `"ts"` / `"dur"` number in document order, the digits are
turned into integer ns with numpy (no float involved), and the values are matched to the events orjson parsed,
checked against orjson's floats. If that check fails (a `"ts"` key nested in args, a string-valued time) the
file is parsed again with the standard library and `Decimal`, slower but just as exact. Values with more than
three decimals are rounded half-to-even to whole ns.
"""

from __future__ import annotations

import enum
import gc
import gzip
import json
import re
import sqlite3
import warnings
import zlib
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from probe.errors import ProbeError

FORMATS = ("torch_chrome", "nsys_sqlite")


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
_ON_STREAM = (Kind.KERNEL, Kind.GPU_MEMCPY, Kind.GPU_MEMSET, Kind.GPU_RANGE)

# The shared README's lists, exactly: what counts as a kernel launch and as a graph launch.
LAUNCH_NAMES = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel",
    "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel",
})
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "hipGraphLaunch"})
# nsys names API calls with a version and sometimes a per-thread-stream suffix: cudaLaunchKernel_ptsz_v7000.
_API_SUFFIX = re.compile(r"(?:_v\d+)?$")
_STREAM_SUFFIX = re.compile(r"_(?:ptsz|ptds)$")

_CHROME_KINDS = {
    "cpu_op": Kind.CPU_OP, "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_RANGE,
    "gpu_user_annotation": Kind.GPU_RANGE,
    "cuda_runtime": Kind.RUNTIME, "cuda_driver": Kind.RUNTIME, "runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME, "hip_driver": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.GPU_MEMCPY, "memcpy": Kind.GPU_MEMCPY,
    "gpu_memset": Kind.GPU_MEMSET, "memset": Kind.GPU_MEMSET,
    "python_function": Kind.PYTHON,
}
PROFILER_STEP_PREFIX = "ProfilerStep#"


def api_base_name(name: str) -> str:
    """`cudaLaunchKernel_ptsz_v7000` -> `cudaLaunchKernel`; chrome names come back unchanged."""
    return _STREAM_SUFFIX.sub("", _API_SUFFIX.sub("", name, count=1), count=1)


COLUMNS = ("ts_ns", "dur_ns", "kind", "name_id", "cat_id", "pid", "tid", "stream", "device", "correlation",
           "external_id")


@dataclass(frozen=True, eq=False)
class Trace:
    """One columnar event table (see the module docstring for every column) plus where it came from."""

    format: str  # "torch_chrome" | "nsys_sqlite"
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
    skipped: dict[str, int] = field(default_factory=dict)  # events left out on purpose, by phase
    dropped: dict[str, int] = field(default_factory=dict)  # events that could not be kept, by reason
    warnings: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.ts_ns)

    def __repr__(self) -> str:
        return f"Trace({self.format}, {len(self)} events, {len(self.names)} names, {self.source!r})"

    @property
    def end_ns(self) -> np.ndarray:
        return self.ts_ns + self.dur_ns

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
        """Row indices of the given kinds, in ts order."""
        return np.flatnonzero(np.isin(self.kind, np.asarray(kinds, dtype=np.int8)))

    def frame(self):
        """The table as a pandas DataFrame with `name`, `cat` and `kind` spelled out (for the app)."""
        import pandas as pd

        names = np.asarray(self.names, dtype=object)
        data = {c: getattr(self, c) for c in COLUMNS}
        data["name"] = names[self.name_id] if len(names) else np.array([], dtype=object)
        data["cat"] = names[self.cat_id] if len(names) else np.array([], dtype=object)
        data["kind"] = np.asarray([k.label for k in Kind], dtype=object)[self.kind]
        return pd.DataFrame(data)


def load_trace(path: str | Path) -> Trace:
    """Read a torch.profiler chrome trace (.json / .json.gz) or an nsys SQLite export (.sqlite, or gzipped)
    into a `Trace`. Raises ProbeError, with a one-line reason, for a missing, empty, truncated or foreign file.
    """
    p = Path(path)
    if not p.exists():
        raise ProbeError(f"{p}: no such file")
    if p.is_dir():
        raise ProbeError(f"{p}: is a folder, not a trace file")
    with open(p, "rb") as f:
        head = f.read(16)
    if not head:
        raise ProbeError(f"{p}: empty file")
    if head.startswith(_SQLITE_MAGIC):
        return _read_nsys(p, None)
    if p.suffix in (".nsys-rep", ".qdrep", ".qdstrm"):
        raise ProbeError(f"{p}: an Nsight Systems report; export it first: nsys export --type sqlite {p}")
    if head[:2] == b"\x1f\x8b":
        with gzip.open(p, "rb") as f:
            try:
                inner = f.read(16)
            except (EOFError, OSError, zlib.error) as e:
                raise ProbeError(f"{p}: truncated or corrupt gzip ({e})") from None
        if inner.startswith(_SQLITE_MAGIC):
            return _read_nsys(p, _read_text(p))
    return _read_chrome(p)


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _read_text(p: Path) -> bytes:
    """The file's bytes, gunzipped when gzipped. Raises ProbeError for a broken gzip or an empty file."""
    data = p.read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:
            raise ProbeError(f"{p}: truncated or corrupt gzip ({e})") from None
    if data[:3] == b"\xef\xbb\xbf":
        data = data[3:]
    if not data.strip():
        raise ProbeError(f"{p}: empty file")
    return data


# ---------------------------------------------------------------------------------------------------------
# torch.profiler chrome traces


_TS_TEXT = re.compile(rb'"ts"\s*:\s*(-?[0-9][0-9.eE+-]*)')
_DUR_TEXT = re.compile(rb'"dur"\s*:\s*(-?[0-9][0-9.eE+-]*)')
_POW10 = 10 ** np.arange(4, dtype=np.int64)


class _Columns:
    """What one pass over the parsed events collects; times stay raw until the exact conversion."""

    def __init__(self):
        self.strings: dict[str, int] = {}
        self.name_id, self.cat_id, self.pid, self.tid = [], [], [], []
        self.corr, self.ext = [], []
        self.ts_raw, self.dur_raw = [], []  # X events' own values, whatever type the JSON parser gave
        self.ts_pos, self.dur_pos = [], []  # their ordinals among all numeric "ts" / "dur" values in the file
        self.n_ts = self.n_dur = 0  # how many numeric "ts" / "dur" values the file holds, all phases
        self.skipped: dict[str, int] = {}
        self.dropped: dict[str, int] = {}


def _intern(strings: dict[str, int], s) -> int:
    if not isinstance(s, str):
        s = "" if s is None else str(s)
    i = strings.get(s)
    if i is None:
        i = strings[s] = len(strings)
    return i


_NUMBER = frozenset({int, float, Decimal})


def _collect(events: list) -> _Columns:
    """One pass over the events. Hot loop (~1 us an event), so it stays flat and uses locals."""
    c = _Columns()
    strings = c.strings
    ts_pos, dur_pos, ts_raw, dur_raw = c.ts_pos, c.dur_pos, c.ts_raw, c.dur_raw
    name_id, cat_id, pids, tids = c.name_id, c.cat_id, c.pid, c.tid
    corr, ext = c.corr, c.ext
    skipped, dropped = c.skipped, c.dropped
    number = _NUMBER
    n_ts = n_dur = 0
    for e in events:
        if type(e) is not dict:
            dropped["not an object"] = dropped.get("not an object", 0) + 1
            continue
        ts = e.get("ts")
        ts_ok = type(ts) in number
        n_ts += ts_ok
        dur = e.get("dur")
        dur_ok = type(dur) in number
        n_dur += dur_ok
        ph = e.get("ph")
        if ph != "X":
            key = ph if type(ph) is str else str(ph)
            skipped[key] = skipped.get(key, 0) + 1
            continue
        if not (ts_ok and dur_ok):
            reason = "missing or non-numeric ts" if not ts_ok else "missing or non-numeric dur"
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        ts_raw.append(ts)
        dur_raw.append(dur)
        ts_pos.append(n_ts - 1)
        dur_pos.append(n_dur - 1)
        name = e.get("name")
        i = strings.get(name) if type(name) is str else None  # a list or dict name would not hash
        name_id.append(i if i is not None else _intern(strings, name))
        cat = e.get("cat")
        i = strings.get(cat) if type(cat) is str else None
        cat_id.append(i if i is not None else _intern(strings, cat))
        pids.append(e.get("pid", -1))
        tids.append(e.get("tid", -1))
        a = e.get("args")
        if type(a) is dict:
            corr.append(a.get("correlation", -1))
            ext.append(a.get("External id", -1))
        else:
            corr.append(-1)
            ext.append(-1)
    c.n_ts, c.n_dur = n_ts, n_dur
    return c


def _ints(values: list, default: int = -1) -> np.ndarray:
    """A list of JSON values as int64, with `default` wherever a value is missing or not an integer."""
    try:
        arr = np.array(values) if values else np.zeros(0, np.int64)
    except (ValueError, OverflowError):  # ragged lists
        arr = None
    if arr is not None and arr.dtype == np.int64 and arr.ndim == 1:
        return arr  # every value an integer: the common case, with no Python loop
    return np.fromiter((v if type(v) is int and -(2**63) <= v < 2**63 else default for v in values),
                       dtype=np.int64, count=len(values))


def decimal_text_to_ns(texts: list[bytes]) -> np.ndarray:
    """Microsecond numbers as JSON text (`b"5082703139188.524"`) to exact int64 nanoseconds.

    Plain decimals (`[-]digits[.digits]`, at most three fractional digits, fitting int64 ns) are converted by
    numpy alone; anything else (more digits, an exponent) goes through Decimal, rounded half-to-even to ns.
    Raises ValueError for a value that is not a number or does not fit int64 ns.
    """
    n = len(texts)
    if n == 0:
        return np.zeros(0, np.int64)
    torch_style = _three_decimals_to_ns(texts)
    if torch_style is not None:
        return torch_style
    whole, _, frac = np.strings.partition(np.array(texts), b".")
    if frac.dtype.itemsize <= 3:
        try:
            w = whole.astype(np.int64)  # raises unless every row's whole part is an integer
        except (ValueError, OverflowError):
            w = None
        if w is not None and np.all(np.abs(w) < _MAX_US):
            d = _frac_digits(frac, n)
            if d is not None:
                negative = np.ascontiguousarray(whole).view(np.uint8).reshape(n, -1)[:, 0] == 45  # "-0.5"
                magnitude = np.abs(w) * 1000 + d
                return np.where(negative, -magnitude, magnitude)
    return _decimal_text_to_ns_rowwise(texts, whole, frac)


_MAX_US = 9223372036854775  # whole microseconds that still fit int64 ns after x 1000 (plus <1000 ns)


def _three_decimals_to_ns(texts: list[bytes]) -> np.ndarray | None:
    """The common case, twice as fast: every value has exactly three decimals (torch writes "%.3f"), so
    dropping the dot leaves the ns as an integer, which numpy's text reader parses exactly (no float).
    None when any value is written another way."""
    blob = b" ".join(texts) + b" "
    chars = np.frombuffer(blob, np.uint8)
    ends = np.flatnonzero(chars == 32)
    dots = chars == 46
    if len(ends) != len(texts) or np.count_nonzero(dots) != len(texts) or np.any(ends < 4) \
            or not np.all(dots[ends - 4]) or np.any((chars == 101) | (chars == 69) | (chars == 43)):
        return None  # a missing dot, other than 3 decimals, or an exponent
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy only warns when it stops early; make that an error
        try:
            ns = np.fromstring(blob.replace(b".", b""), dtype=np.int64, sep=" ")
        except (ValueError, DeprecationWarning, OverflowError):
            return None
    if len(ns) != len(texts) or np.any((ns == _I64.max) | (ns == _I64.min)):
        return None  # the reader saturates out-of-range values instead of failing: leave those to the slow path
    return ns


_I64 = np.iinfo(np.int64)


def _frac_digits(frac: np.ndarray, n: int) -> np.ndarray | None:
    """Up to three fractional digits as ns (NUL padding reads as 0); None if any byte is not a digit."""
    width = frac.dtype.itemsize
    d = np.zeros((n, 3), np.int64)
    if width:
        raw = np.ascontiguousarray(frac).view(np.uint8).reshape(n, width)
        if not np.all(((raw >= 48) & (raw <= 57)) | (raw == 0)):
            return None
        d[:, :width] = np.where(raw == 0, 0, raw.astype(np.int64) - 48)
    return d[:, 0] * 100 + d[:, 1] * 10 + d[:, 2]


def _decimal_text_to_ns_rowwise(texts: list[bytes], whole: np.ndarray, frac: np.ndarray) -> np.ndarray:
    """The rare path: validate row by row; plain rows stay vectorized, the others go through Decimal."""
    negative = np.strings.startswith(whole, b"-")
    body = np.strings.lstrip(whole, b"-")
    body_len, frac_len = np.strings.str_len(body), np.strings.str_len(frac)
    ok = np.strings.isdigit(body) & (np.strings.str_len(whole) - body_len <= 1) & (frac_len <= 3)
    ok &= (body_len < 16) | ((body_len == 16) & (body < b"9223372036854775"))
    ok &= np.strings.isdigit(frac) | (frac_len == 0)
    n = len(texts)
    ns = np.zeros(n, np.int64)
    if ok.any():
        w = np.where(ok, body, b"0").astype(np.int64)
        d = _frac_digits(np.where(ok, frac, b"").astype("S3"), n)
        magnitude = w * 1000 + d
        ns = np.where(ok, np.where(negative, -magnitude, magnitude), 0)
    for i in np.flatnonzero(~ok):
        ns[i] = _decimal_to_ns(texts[i].decode("ascii", "replace"))
    return ns


def _decimal_to_ns(value) -> int:
    """One microsecond value (int, Decimal, or numeric text) to integer ns, half-to-even."""
    try:
        d = value if isinstance(value, Decimal) else Decimal(str(value))
        ns = int((d * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))
    except (InvalidOperation, ValueError, OverflowError) as e:
        raise ValueError(f"not a time: {value!r}") from e
    if not -(2**63) <= ns < 2**63:
        raise ValueError(f"time out of range: {value!r} us")
    return ns


def _numbers_in_text(data: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """Every numeric "ts" and "dur" value in the file, in document order, as exact ns (None if one is bad)."""
    try:
        return decimal_text_to_ns(_TS_TEXT.findall(data)), decimal_text_to_ns(_DUR_TEXT.findall(data))
    except ValueError:
        return None


def _align(numbers: tuple[np.ndarray, np.ndarray] | None, c: _Columns) -> tuple[np.ndarray, np.ndarray] | None:
    """The X events' ts and dur from the text's numbers; None when the text and the parse disagree."""
    if numbers is None:
        return None
    out = []
    pairs = zip(numbers, (c.n_ts, c.n_dur), (c.ts_pos, c.dur_pos), (c.ts_raw, c.dur_raw), strict=True)
    for every, count, pos, raw in pairs:
        if len(every) != count:
            return None
        mine = every[np.asarray(pos, dtype=np.int64)]
        try:
            theirs = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            return None
        # The k-th number in the text must be the k-th number orjson saw. The two agree to float rounding
        # (< 4e-16 relative); a match shifted by one event would be off by that event's spacing.
        tol = np.maximum(np.abs(theirs) * 1e-15, 1e-9)
        if not np.all(np.abs(mine / 1000.0 - theirs) <= tol):
            return None
        out.append(mine)
    return out[0], out[1]


def _parse_json(data: bytes, source: Path):
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ProbeError(f"{source}: not JSON ({str(e).splitlines()[0]})") from None


def _events_of(doc, source: Path) -> tuple[list, int | None]:
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            raise ProbeError(f"{source}: JSON but not a trace (no traceEvents list)")
        base = doc.get("baseTimeNanoseconds")
        return events, base if type(base) is int else None
    if isinstance(doc, list) and all(isinstance(e, dict) for e in doc[:100]) and doc:
        return doc, None  # the JSON Array Format: a bare list of events
    raise ProbeError(f"{source}: JSON but not a trace (expected an object with traceEvents)")


def _read_chrome(source: Path) -> Trace:
    data = _read_text(source)
    numbers = _numbers_in_text(data)  # first, so the text can be let go before the big event lists exist
    gc_was = gc.isenabled()
    gc.disable()  # ~400k small dicts: the cyclic collector would walk them again and again for nothing
    try:
        doc = _parse_json(data, source)
        if numbers is not None:
            del data
        events, base = _events_of(doc, source)
        c = _collect(events)
        del doc, events  # freed by reference counting while the collector is still off: no full sweep of them
    finally:
        if gc_was:
            gc.enable()
    exact = _align(numbers, c)
    if exact is None:
        exact, c, base = _read_chrome_slowly(source)
    ts_ns, dur_ns = exact
    names = tuple(c.strings)
    name_id = np.asarray(c.name_id, dtype=np.int32)
    cat_id = np.asarray(c.cat_id, dtype=np.int32)
    kind_of_cat = np.array([_chrome_kind(s) for s in names], dtype=np.int8)
    kind = kind_of_cat[cat_id] if len(cat_id) else np.zeros(0, np.int8)
    step_names = np.array([s.startswith(PROFILER_STEP_PREFIX) for s in names], dtype=bool)
    if len(name_id):
        is_step = step_names[name_id] & ((kind == Kind.USER_RANGE) | (kind == Kind.CPU_OP))
        kind[is_step] = Kind.PROFILER_STEP
    pid, tid = _ints(c.pid), _ints(c.tid)
    on_stream = np.isin(kind, np.asarray(_ON_STREAM, dtype=np.int8))
    stream, device = np.where(on_stream, tid, -1), np.where(on_stream, pid, -1)
    cols = dict(ts_ns=ts_ns, dur_ns=dur_ns, kind=kind, name_id=name_id, cat_id=cat_id, pid=pid, tid=tid,
                stream=stream, device=device, correlation=_ints(c.corr), external_id=_ints(c.ext))
    return _finish("torch_chrome", source, base, names, cols, c.skipped, c.dropped)


def _read_chrome_slowly(source: Path) -> tuple[tuple[np.ndarray, np.ndarray], _Columns, int | None]:
    """Slow but exact: the standard library hands every number over as Decimal."""
    try:
        doc = json.loads(_read_text(source).decode("utf-8", "replace"), parse_float=Decimal)
    except ValueError as e:
        raise ProbeError(f"{source}: not JSON ({e})") from None
    events, base = _events_of(doc, source)
    c = _collect(events)
    del doc, events
    try:
        exact = (np.fromiter((_decimal_to_ns(v) for v in c.ts_raw), np.int64, len(c.ts_raw)),
                 np.fromiter((_decimal_to_ns(v) for v in c.dur_raw), np.int64, len(c.dur_raw)))
    except ValueError as e:
        raise ProbeError(f"{source}: {e}") from None
    return exact, c, base


def _chrome_kind(cat: str) -> Kind:
    return _CHROME_KINDS.get(cat.lower(), Kind.OTHER)


def _finish(fmt: str, source: Path, base: int | None, names: tuple[str, ...], cols: dict[str, np.ndarray],
            skipped: dict[str, int], dropped: dict[str, int]) -> Trace:
    """Drop rows that cannot be kept honestly, sort by start, and wrap up with warnings."""
    dropped = dict(dropped)
    negative = cols["dur_ns"] < 0
    if negative.any():
        dropped["negative duration"] = int(negative.sum())
        cols = {k: v[~negative] for k, v in cols.items()}
    order = np.argsort(cols["ts_ns"], kind="stable")
    cols = {k: np.ascontiguousarray(v[order]) for k, v in cols.items()}
    if len(cols["ts_ns"]) == 0:
        what = "no complete ('X') events" if fmt == "torch_chrome" else "no events in its tables"
        extra = f" ({_describe(dropped)} dropped)" if dropped else ""
        raise ProbeError(f"{source}: trace has {what}{extra}")
    warnings = tuple(f"dropped {n} event(s): {why}" for why, n in sorted(dropped.items()))
    return Trace(format=fmt, source=str(source), base_ns=base, names=names, skipped=dict(skipped),
                 dropped=dropped, warnings=warnings, **cols)


def _describe(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))


# ---------------------------------------------------------------------------------------------------------
# Nsight Systems SQLite exports

_NVTX_RANGE_TYPES = (59, 60, 70, 71)  # NvtxPushPopRange, NvtxStartEndRange and their NVTXT twins
_EVENT_TABLES = ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
                 "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
_MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
                 9: "HtoH", 10: "PtoP"}


def _gid_pid(gid: np.ndarray) -> np.ndarray:
    """nsys serializes a process into globalTid/globalPid as bits 24..47."""
    return (gid >> 24) & 0xFFFFFF


def _gid_tid(gid: np.ndarray) -> np.ndarray:
    return gid & 0xFFFFFF


def _read_nsys(source: Path, data: bytes | None) -> Trace:
    """`data` holds the database when it came gzipped; otherwise the file is opened read-only in place."""
    try:
        if data is None:
            con = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        elif hasattr(sqlite3.Connection, "deserialize"):  # Python 3.11+
            con = sqlite3.connect(":memory:")
            con.deserialize(data)
        else:
            return _read_nsys_copy(source, data)
        try:
            return _read_nsys_tables(con, source)
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise ProbeError(f"{source}: unreadable SQLite export ({e})") from None


def _read_nsys_copy(source: Path, data: bytes) -> Trace:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="probe-") as tmp:
        copy = Path(tmp) / "export.sqlite"
        copy.write_bytes(data)
        con = sqlite3.connect(str(copy))
        try:
            return _read_nsys_tables(con, source)
        finally:
            con.close()


def _query(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def _read_nsys_tables(con: sqlite3.Connection, source: Path) -> Trace:
    tables = {r[0] for r in _query(con, "SELECT name FROM sqlite_master WHERE type='table'")}
    present = [t for t in _EVENT_TABLES if t in tables]
    if not present:
        raise ProbeError(f"{source}: SQLite but not an Nsight Systems export "
                         f"(none of {', '.join(_EVENT_TABLES)})")
    if "StringIds" not in tables:
        raise ProbeError(f"{source}: Nsight Systems export without its StringIds table")
    strings = dict(_query(con, "SELECT id, value FROM StringIds"))
    table: dict[str, int] = {}
    parts: list[dict[str, np.ndarray]] = []

    def ids(values) -> np.ndarray:
        return np.fromiter((_intern(table, v) for v in values), dtype=np.int32, count=len(values))

    def part(rows: list[tuple], kind, names: list[str], cat: str, **cols) -> None:
        n = len(rows)
        base = dict(kind=np.full(n, kind, np.int8), name_id=ids(names),
                    cat_id=np.full(n, _intern(table, cat), np.int32))
        for col in COLUMNS:
            base.setdefault(col, np.full(n, -1, np.int64))
        base.update(cols)
        parts.append(base)

    def ints(rows, i) -> np.ndarray:
        return np.fromiter((-1 if r[i] is None else r[i] for r in rows), dtype=np.int64, count=len(rows))

    dropped: dict[str, int] = {}
    if "NVTX_EVENTS" in tables:
        unclosed = _query(con, f"SELECT COUNT(*) FROM NVTX_EVENTS WHERE end IS NULL AND eventType IN "
                               f"{_NVTX_RANGE_TYPES}")[0][0]
        if unclosed:
            dropped["NVTX range never closed"] = unclosed
        rows = _query(con, "SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS "
                           f"WHERE end IS NOT NULL AND eventType IN {_NVTX_RANGE_TYPES}")
        names = [r[2] if r[2] is not None else strings.get(r[3], "") for r in rows]
        start, gid = ints(rows, 0), ints(rows, 4)
        kind = np.array([Kind.PROFILER_STEP if s.startswith(PROFILER_STEP_PREFIX) else Kind.USER_RANGE
                         for s in names], dtype=np.int8)
        part(rows, Kind.USER_RANGE, names, "NVTX_EVENTS", ts_ns=start, dur_ns=ints(rows, 1) - start,
             pid=np.where(gid >= 0, _gid_pid(gid), -1), tid=np.where(gid >= 0, _gid_tid(gid), -1))
        parts[-1]["kind"] = kind
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        rows = _query(con, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        start, gid = ints(rows, 0), ints(rows, 2)
        part(rows, Kind.RUNTIME, [strings.get(r[4], "") for r in rows], "CUPTI_ACTIVITY_KIND_RUNTIME",
             ts_ns=start, dur_ns=ints(rows, 1) - start, pid=_gid_pid(gid), tid=_gid_tid(gid),
             correlation=ints(rows, 3))
    gpu_tables = (
        ("CUPTI_ACTIVITY_KIND_KERNEL", Kind.KERNEL, "demangledName"),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", Kind.GPU_MEMCPY, "copyKind"),
        ("CUPTI_ACTIVITY_KIND_MEMSET", Kind.GPU_MEMSET, "0"),
    )
    for name, kind, label in gpu_tables:
        if name not in tables:
            continue
        rows = _query(con, f"SELECT start, end, deviceId, streamId, correlationId, globalPid, {label} FROM {name}")
        start = ints(rows, 0)
        if kind == Kind.KERNEL:
            names = [strings.get(r[6], "") for r in rows]
        elif kind == Kind.GPU_MEMCPY:
            names = [f"Memcpy {_MEMCPY_KINDS.get(r[6], r[6])}" for r in rows]
        else:
            names = ["Memset"] * len(rows)
        stream, device = ints(rows, 3), ints(rows, 2)
        part(rows, kind, names, name, ts_ns=start, dur_ns=ints(rows, 1) - start, pid=_gid_pid(ints(rows, 5)),
             tid=stream, stream=stream, device=device, correlation=ints(rows, 4))
    cols = {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}
    base = None
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = _query(con, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        base = row[0][0] if row and type(row[0][0]) is int else None
    return _finish("nsys_sqlite", source, base, tuple(table), cols, {}, dropped)
