"""torch.profiler chrome traces (`.json`, `.json.gz`, or the JSON Array Format) into the event table.

Exact time. torch writes `"ts": 5082703139188.524`, microseconds with three decimals around 5e12, and a float64
cannot hold that (its spacing there is ~0.001 us), so `round(float(ts) * 1000)` can land 1 ns off. The parser
therefore reads the digits: one regex pass finds every `"ts"` / `"dur"` number in document order, the digits are
turned into integer ns with numpy (no float involved), and the values are matched to the events orjson parsed,
checked against orjson's floats. If that check fails (a `"ts"` key nested in args, a string-valued time) the
file is parsed again with the standard library and `Decimal`, slower but just as exact. Values with more than
three decimals are rounded half-to-even to whole ns.
"""

from __future__ import annotations

import gc
import gzip
import json
import re
import warnings
import zlib
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path

import numpy as np
import orjson

from probe.analysis.files import GZIP_MAGIC
from probe.analysis.trace.table import ON_STREAM, PROFILER_STEP_PREFIX, Kind, Trace, finish, intern
from probe.errors import ProbeError

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
}


def read_text(p: Path) -> bytes:
    """The file's bytes, gunzipped when gzipped. Raises ProbeError for a broken gzip or an empty file."""
    data = p.read_bytes()
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:
            raise ProbeError(f"{p}: truncated or corrupt gzip ({e})") from None
    if data[:3] == b"\xef\xbb\xbf":
        data = data[3:]
    if not data.strip():
        raise ProbeError(f"{p}: empty file")
    return data


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
        name_id.append(i if i is not None else intern(strings, name))
        cat = e.get("cat")
        i = strings.get(cat) if type(cat) is str else None
        cat_id.append(i if i is not None else intern(strings, cat))
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
    return np.fromiter(
        (v if type(v) is int and -(2**63) <= v < 2**63 else default for v in values), dtype=np.int64, count=len(values)
    )


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
    if (
        len(ends) != len(texts)
        or np.count_nonzero(dots) != len(texts)
        or np.any(ends < 4)
        or not np.all(dots[ends - 4])
        or np.any((chars == 101) | (chars == 69) | (chars == 43))
    ):
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


def read_chrome(source: Path) -> Trace:
    data = read_text(source)
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
    on_stream = np.isin(kind, np.asarray(ON_STREAM, dtype=np.int8))
    stream, device = np.where(on_stream, tid, -1), np.where(on_stream, pid, -1)
    cols = dict(
        ts_ns=ts_ns,
        dur_ns=dur_ns,
        kind=kind,
        name_id=name_id,
        cat_id=cat_id,
        pid=pid,
        tid=tid,
        stream=stream,
        device=device,
        correlation=_ints(c.corr),
        external_id=_ints(c.ext),
    )
    return finish("torch_chrome", source, base, names, cols, c.skipped, c.dropped)


def _read_chrome_slowly(source: Path) -> tuple[tuple[np.ndarray, np.ndarray], _Columns, int | None]:
    """Slow but exact: the standard library hands every number over as Decimal."""
    try:
        doc = json.loads(read_text(source).decode("utf-8", "replace"), parse_float=Decimal)
    except ValueError as e:
        raise ProbeError(f"{source}: not JSON ({e})") from None
    events, base = _events_of(doc, source)
    c = _collect(events)
    del doc, events
    try:
        exact = (
            np.fromiter((_decimal_to_ns(v) for v in c.ts_raw), np.int64, len(c.ts_raw)),
            np.fromiter((_decimal_to_ns(v) for v in c.dur_raw), np.int64, len(c.dur_raw)),
        )
    except ValueError as e:
        raise ProbeError(f"{source}: {e}") from None
    return exact, c, base


def _chrome_kind(cat: str) -> Kind:
    return _CHROME_KINDS.get(cat.lower(), Kind.OTHER)
