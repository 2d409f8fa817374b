"""Files: what kind a file is (one sniffing rule for every reader) and how probe writes (atomically).

Writes go to a temp file created exclusively in the target folder (never through whatever already sits at a
predictable name there, a planted symlink included), then `os.replace` it over the target, so a reader or a
Ctrl-C never sees half a file, and a failed write leaves no temp file behind.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

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


def head(path: Path, size: int = 1 << 16) -> bytes:
    """The first `size` bytes of the file's content, gunzipped when it is gzipped (b"" for a broken gzip)."""
    with open(path, "rb") as f:
        raw = f.read(size)
    if raw.startswith(GZIP_MAGIC):
        try:
            with gzip.open(path, "rb") as f:
                return f.read(size)
        except (EOFError, OSError, zlib.error):
            return b""
    return raw


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
