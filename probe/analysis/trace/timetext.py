"""Chrome trace times as exact integer nanoseconds, from the digits of the JSON text.

torch writes `"ts": 5082703139188.524`, microseconds with three decimals around 5e12, and a float64 cannot hold
that (its spacing there is ~0.001 us), so `round(float(ts) * 1000)` can land 1 ns off. The reader keeps each
time's own text (msgspec's `Raw`) and this module turns the digits into int64 ns with numpy, no float involved.
Values with more than three decimals or an exponent go through Decimal, rounded half-to-even to whole ns. A
time written as a JSON string of a number (rocprof v1's `"ts": "852321267783"`) is that number, as chrome://tracing
and Perfetto read it; only texts that are not numbers are looked at for it, so torch's traces never pay for it.

Memory follows the count of times, not the longest one: the vectorized path holds each text in a fixed-width
array, so only texts of at most PLAIN_CHARS characters go there (every int64-ns time written plainly fits), and
a longer one (a timestamp of 100k digits) is read on its own by Decimal, at the cost of its length. A fixed-width
array of the longest text, as before, made one such timestamp in a 4.5 MB trace allocate 4.8 GiB.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation, localcontext

import numpy as np

NUMBER, NOT_A_NUMBER, OUT_OF_INT64 = 0, 1, 2  # the status `times_ns` gives each text
PLAIN_CHARS = 24  # "-9223372036854775.807" is 21: a longer plain time has leading zeros, more decimals or no fit
_I64 = np.iinfo(np.int64)
_NUMBER_START = np.frombuffer(b"-0123456789", np.uint8)  # how every JSON number begins
_DIGIT_OR_MINUS = frozenset(bytes([c]) for c in b"-0123456789")


def decimal_text_to_ns(texts: Sequence[bytes]) -> np.ndarray:
    """Microsecond numbers as JSON text (`b"5082703139188.524"`) to exact int64 nanoseconds.

    Raises ValueError for a value that is not a number or does not fit int64 ns.
    """
    ns, status = times_ns(texts)
    bad = np.flatnonzero(status)
    if len(bad):
        i = int(bad[0])
        why = "not a time" if status[i] == NOT_A_NUMBER else "time out of range"
        raise ValueError(f"{why}: {bytes(texts[i])!r} us")
    return ns


def times_ns(texts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Exact ns for each microsecond text, and a status for each: NUMBER, NOT_A_NUMBER (empty, an object, a
    string that is not a number's text: anything that does not read as a JSON number) or OUT_OF_INT64 (their ns
    are 0). A JSON string holding a number's text (`"852321267783"`) is that number."""
    n = len(texts)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8)
    torch_style = _three_decimals_to_ns(texts)
    if torch_style is not None:
        return torch_style, np.zeros(n, np.uint8)
    texts = [bytes(t) for t in texts]
    long = np.fromiter(map(len, texts), np.int64, n) > PLAIN_CHARS
    arr = np.array([b"" if x else t for t, x in zip(texts, long.tolist(), strict=True)], dtype=f"S{PLAIN_CHARS}")
    first = np.ascontiguousarray(arr).view(np.uint8).reshape(n, -1)[:, 0]
    status = np.where(np.isin(first, _NUMBER_START) | long, NUMBER, NOT_A_NUMBER).astype(np.uint8)
    whole, _, frac = np.strings.partition(arr, b".")
    ns, plain = _plain_decimals_to_ns(whole, frac)
    for i in np.flatnonzero(~plain & (status == NUMBER)).tolist():
        value = _decimal_to_ns(texts[i])
        if value is None:
            status[i] = OUT_OF_INT64 if _is_decimal(texts[i]) else NOT_A_NUMBER
        else:
            ns[i] = value
    ns[status != NUMBER] = 0
    _read_quoted(texts, ns, status)
    return ns, status


def _read_quoted(texts: list[bytes], ns: np.ndarray, status: np.ndarray) -> None:
    """A time written as a JSON string of a number (rocprof v1: `"ts": "852321267783"`) reads as that number, as
    chrome://tracing and Perfetto read it; in place. Only texts already found not a number are looked at, so a file
    of JSON numbers pays nothing. The string's own text must be a JSON number: no escapes, spaces or second
    quotes."""
    quoted = [i for i in np.flatnonzero(status == NOT_A_NUMBER).tolist() if _is_quoted(texts[i])]
    if not quoted:
        return
    inner_ns, inner_status = times_ns([texts[i][1:-1] for i in quoted])
    ns[quoted], status[quoted] = inner_ns, inner_status


def _is_quoted(text: bytes) -> bool:
    """A JSON string that may hold a number: it begins as a number begins and ends with a digit, as every JSON
    number does (Decimal would take the spaces of `"5 "`)."""
    return (
        len(text) > 2
        and text[:1] == b'"'
        and text[-1:] == b'"'
        and text[1:2] in _DIGIT_OR_MINUS
        and text[-2:-1].isdigit()
    )


def _three_decimals_to_ns(texts: Sequence[bytes]) -> np.ndarray | None:
    """The common case, fast: every value has exactly three decimals (torch writes "%.3f"), so dropping the dot
    leaves the ns as an integer, which numpy's text reader parses exactly (no float). None when any value is
    written another way."""
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


def _plain_decimals_to_ns(whole: np.ndarray, frac: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ns of the rows written `[-]digits[.digits]` with at most three decimals that fit int64, and which rows
    those are; the others are left at 0."""
    negative = np.strings.startswith(whole, b"-")
    body = np.strings.lstrip(whole, b"-")
    body_len, frac_len = np.strings.str_len(body), np.strings.str_len(frac)
    ok = np.strings.isdigit(body) & (np.strings.str_len(whole) - body_len <= 1) & (frac_len <= 3)
    ok &= (body_len < 16) | ((body_len == 16) & (body < b"9223372036854775"))
    ok &= np.strings.isdigit(frac) | (frac_len == 0)
    n = len(whole)
    if not ok.any():
        return np.zeros(n, np.int64), ok
    w = np.where(ok, body, b"0").astype(np.int64)
    d = _frac_digits(np.where(ok, frac, b"").astype("S3"), n)
    magnitude = w * 1000 + d
    return np.where(ok, np.where(negative, -magnitude, magnitude), 0), ok


def _frac_digits(frac: np.ndarray, n: int) -> np.ndarray:
    """Up to three fractional digits (validated by the caller) as ns; NUL padding reads as 0."""
    width = frac.dtype.itemsize
    d = np.zeros((n, 3), np.int64)
    if width:
        raw = np.ascontiguousarray(frac).view(np.uint8).reshape(n, width)
        d[:, :width] = np.where(raw == 0, 0, raw.astype(np.int64) - 48)
    return d[:, 0] * 100 + d[:, 1] * 10 + d[:, 2]


def _is_decimal(text: bytes) -> bool:
    """Whether the text is a finite JSON number (then a None from _decimal_to_ns means it does not fit)."""
    return _decimal(text) is not None


def _decimal(text: bytes) -> Decimal | None:
    """The text as a finite Decimal, if it begins as a JSON number does (a JSON string, object or literal never
    reaches Decimal)."""
    if not text[:1] or text[:1] not in b"-0123456789":
        return None
    try:
        d = Decimal(text.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError):
        return None
    return d if d.is_finite() else None


def _decimal_to_ns(text: bytes) -> int | None:
    """One microsecond value (numeric text) to integer ns, half-to-even; None when it is not a finite number or
    does not fit int64. The exponent is checked first: `1e999999999` must not build a billion-digit integer;
    the product is exact (a precision of the text's own length), so 30 decimals round as the text says."""
    d = _decimal(text)
    if d is None or d.adjusted() > 18:
        return None
    with localcontext() as ctx:
        ctx.prec = max(28, len(text) + 4)
        ns = int((d * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))
    return ns if _I64.min <= ns <= _I64.max else None
