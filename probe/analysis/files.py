"""Files: what kind a file is (one sniffing rule for every reader), how a trace is opened (a regular file only,
gunzipped within a limit), and how probe writes (atomically).

Reading. Only regular files are read: a FIFO would block the reader forever, /dev/zero never ends, and a folder
is not a trace, so `open_regular` opens without blocking and checks what it opened before reading a byte.
`open_content` gunzips on the fly and stops with a one-line error past `PROBE_MAX_GUNZIP_GIB` (default 4 GiB of
output), so a small gzip bomb cannot fill the disk or the memory of whatever holds the output.

Writes go to a temp file created exclusively in the target folder (never through whatever already sits at a
predictable name there, a planted symlink included), then `os.replace` it over the target, so a reader or a
Ctrl-C never sees half a file, and a failed write leaves no temp file behind.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import stat
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from probe.errors import ProbeError

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".qdstrm")
TRACE_SUFFIXES = (".trace.json", ".json.gz", ".sqlite", ".sqlite.gz")  # what the explorer lists as traces
# A trace's sidecars share its stem: <stem>.meta.json, <stem>.telemetry.parquet.
_STEM_SUFFIXES = (
    ".trace.json.gz",
    ".trace.json",
    ".nsys.sqlite.gz",
    ".nsys.sqlite",
    ".json.gz",
    ".json",
    ".sqlite.gz",
    ".sqlite",
)

NSYS_SQLITE, CHROME, JSON, NSYS_REPORT, UNKNOWN = "nsys_sqlite", "chrome", "json", "nsys_report", "unknown"


GUNZIP_LIMIT_ENV = "PROBE_MAX_GUNZIP_GIB"
DEFAULT_GUNZIP_LIMIT_GIB = 4.0  # 10x the largest traces people report struggling with; a bomb stops here


def open_regular(path: Path) -> BinaryIO:
    """Open a regular file for reading; ProbeError for anything else (a folder, a FIFO, a device, a socket).
    O_NONBLOCK so that opening a FIFO returns at once instead of waiting for a writer; the check is on what was
    opened (fstat), not on the name, so the file cannot be swapped between the check and the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ProbeError(f"{path}: no such file") from None
    except OSError as e:
        raise ProbeError(f"{path}: cannot open ({e.strerror or e})") from None
    except ValueError as e:  # a NUL byte in the name
        raise ProbeError(f"{path!r}: cannot open ({e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise ProbeError(f"{path}: is {what}, not a trace file")
    return os.fdopen(fd, "rb")


def gunzip_limit_bytes() -> int:
    raw = os.environ.get(GUNZIP_LIMIT_ENV, "")
    try:
        gib = float(raw) if raw else DEFAULT_GUNZIP_LIMIT_GIB
    except ValueError:
        raise ProbeError(f"{GUNZIP_LIMIT_ENV}={raw!r} is not a number of GiB") from None
    return int(gib * 2**30)


class _Gunzipped(io.RawIOBase):
    """A gzip stream's content that raises a one-line ProbeError when it is corrupt or grows past `limit`."""

    def __init__(self, raw: BinaryIO, path: Path, limit: int):
        self._raw, self._gz = raw, gzip.GzipFile(fileobj=raw)
        self._path, self._limit, self._seen = path, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            n = self._gz.readinto(buffer)
        except (EOFError, OSError, zlib.error) as e:
            raise ProbeError(f"{self._path}: truncated or corrupt gzip ({e})") from None
        self._seen += n
        if self._seen > self._limit:
            raise ProbeError(
                f"{self._path}: gunzips to more than {self._limit / 2**30:g} GiB; "
                f"set {GUNZIP_LIMIT_ENV} to read it anyway"
            )
        return n

    def close(self) -> None:
        self._gz.close()  # a GzipFile does not close the file it was handed
        self._raw.close()
        super().close()


def open_content(path: Path) -> BinaryIO:
    """A regular file's content as a stream: gunzipped (within the limit) when it starts with gzip's magic."""
    f = open_regular(path)
    if f.peek(2)[:2] != GZIP_MAGIC:
        return f
    return io.BufferedReader(_Gunzipped(f, path, gunzip_limit_bytes()), buffer_size=1 << 20)


def is_gzipped(path: Path) -> bool:
    with open_regular(path) as f:
        return f.read(2) == GZIP_MAGIC


def head(path: Path, size: int = 1 << 16) -> bytes:
    """The first `size` bytes of the file's content, gunzipped when it is gzipped (b"" for a broken gzip and for
    anything that is not a regular file)."""
    try:
        with open_content(path) as f:
            return f.read(size)
    except (ProbeError, OSError):
        return b""


def sniff(path: Path) -> str:
    """What a file holds, by its content: an nsys SQLite export, a chrome trace, other JSON, an nsys report
    (by suffix: it must be exported first), or unknown."""
    if Path(path).name.endswith(NSYS_REPORT_SUFFIXES):
        return NSYS_REPORT
    text = head(path)
    if text.startswith(SQLITE_MAGIC):
        return NSYS_SQLITE
    body = text.lstrip(b"\xef\xbb\xbf \t\r\n")
    if body.startswith(b"[") or b'"traceEvents"' in text:
        return CHROME
    return JSON if body.startswith(b"{") else UNKNOWN


def is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES)


def trace_stem(name: str) -> str:
    """`x.trace.json.gz` -> `x`; the stem a trace's sidecars (.meta.json, .telemetry.parquet) share."""
    for suffix in _STEM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return Path(name).stem


def trace_meta(path: Path) -> dict | None:
    """The sidecar `probe profile` writes next to a trace, <stem>.meta.json or <stem>.nsys.meta.json, when one
    is there: the run's config and environment, its clock anchor and the profiler's cost per event."""
    stem = trace_stem(path.name)
    for candidate in (path.with_name(f"{stem}.meta.json"), path.with_name(f"{stem}.nsys.meta.json")):
        if candidate.is_file():
            try:
                meta = json.loads(candidate.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ProbeError(f"cannot read {candidate}: {str(e).splitlines()[0]}") from None
            if not isinstance(meta, dict) or not all(isinstance(meta.get(k, {}), dict) for k in ("config", "env")):
                raise ProbeError(
                    f"{candidate}: not a probe sidecar (expected an object whose config and env are objects)"
                )
            return meta
    return None


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A fresh temp file beside `path` for a writer that wants a path (Parquet, gzip); it replaces `path` when
    the block ends without an error and is removed when it does not."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write text (UTF-8) or bytes to `path` atomically."""
    payload = data.encode() if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(payload)
