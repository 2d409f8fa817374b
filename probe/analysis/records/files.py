"""Files: what kind a file is (one sniffing rule for every reader), how a file is opened (a regular file only,
gunzipped within a limit), how JSON is read (one bounded reader), what a trace is named, and how probe writes
(atomically, a folder's files as one set).

Reading. Only regular files are read: a FIFO would block the reader forever, /dev/zero never ends, and a folder
is not a trace, so `open_regular` opens without blocking and checks what it opened before reading a byte.
`open_content` gunzips on the fly and stops with a one-line error past `PROBE_MAX_GUNZIP_GIB` (default 4 GiB of
output), so a small gzip bomb cannot fill the disk or the memory of whatever holds the output.

JSON. Every JSON file probe reads other than a trace (results.json, a baseline, a sidecar, a model's config.json,
report.json, JSON a history holds) goes through `read_json` / `parse_json`: a regular file no larger than its kind
could be (`MAX_JSON_BYTES`, checked before it is read), UTF-8, nested at most
`MAX_JSON_DEPTH` deep (Python's parser recurses, and 200k levels are a RecursionError), and holding only text that
Unicode can encode (an escaped lone surrogate parses to a string no file, table or database can write). Each is
one line naming the file.

Names. A trace `probe profile` records is named `trace_stem(model, engine, device, prompt, new, batch)`:
`<model>_<engine>_<device>_p<P>_n<N>` (`_b<B>` past batch 1); `parse_stem` reads one back.

Writes go to a temp file created exclusively in the target folder (never through whatever already sits at a
predictable name there, a planted symlink included), then `os.replace` it over the target, so a reader or a
Ctrl-C never sees half a file, and a failed write leaves no temp file behind. The file gets the mode a plain
`open()` would give it (0666 less the umask), or, replacing one, the mode the old file had. `atomic_set` writes a
folder's files as one set: every new file is written before any replaces an old one, so a failed write (a full
disk) leaves the old set whole.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import stat
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np

from engines.configs import check_sizes, config_from_dict, resolve
from probe.counts import count
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

FileKind = Literal["nsys_sqlite", "chrome", "json", "nsys_report", "unknown"]  # what `sniff` says a file holds
NSYS_SQLITE: FileKind = "nsys_sqlite"
CHROME: FileKind = "chrome"
JSON: FileKind = "json"
NSYS_REPORT: FileKind = "nsys_report"
UNKNOWN: FileKind = "unknown"


GUNZIP_LIMIT_ENV = "PROBE_MAX_GUNZIP_GIB"
DEFAULT_GUNZIP_LIMIT_GIB = 4.0  # 10x the largest traces people report struggling with; a bomb stops here


def open_regular(path: Path, kind: str = "a trace file") -> io.BufferedReader:
    """Open a regular file for reading; ProbeError for anything else (a folder, a FIFO, a device, a socket),
    saying it is not `kind`.
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
        raise ProbeError(f"{path}: is {what}, not {kind}")
    return os.fdopen(fd, "rb")


def gunzip_limit_bytes() -> int:
    raw = os.environ.get(GUNZIP_LIMIT_ENV, "")
    try:
        gib = float(raw) if raw else DEFAULT_GUNZIP_LIMIT_GIB
    except ValueError:
        raise ProbeError(f"{GUNZIP_LIMIT_ENV}={raw!r} is not a number of GiB") from None
    return int(gib * 2**30)


class _Gunzipped(io.RawIOBase):
    """A gzip stream's content that raises a one-line ProbeError when it is corrupt or grows past `limit`; a
    stream that stops early (a file still being written, a copy cut short) ends where it stops, what it held given
    (the reader says what the text lacks)."""

    def __init__(self, raw: BinaryIO, path: Path, limit: int):
        self._raw, self._gz = raw, gzip.GzipFile(fileobj=raw)
        self._path, self._limit, self._seen = path, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:  # read1: one chunk at a time, so that a stream that stops early loses none that came before
            n = self._gz.readinto1(buffer)
        except EOFError:  # "Compressed file ended before the end-of-stream marker was reached": all it held was given
            n = 0
        except (OSError, zlib.error) as e:
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


def open_content(path: Path) -> io.BufferedReader:
    """A regular file's content as a stream: gunzipped (within the limit) when it starts with gzip's magic."""
    f = open_regular(path)
    if f.peek(2)[:2] != GZIP_MAGIC:
        return f
    return io.BufferedReader(_Gunzipped(f, path, gunzip_limit_bytes()), buffer_size=1 << 20)


def content_size(path: Path) -> int:
    """About how many bytes `open_content` gives: the file's size, or past it what a gzip records of its content (its
    last member's size, mod 2**32). An estimate, for choosing how to read a file, never a limit."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size < 18 or f.peek(2)[:2] != GZIP_MAGIC:
            return size
        f.seek(-4, os.SEEK_END)
        return max(size, int.from_bytes(f.read(4), "little"))


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


def sniff(path: Path) -> FileKind:
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


def is_trace_file(path: Path) -> bool:
    """A trace in a folder: by its name (`TRACE_SUFFIXES`), or a plain `.json` whose content is a chrome trace
    (`sniff`: kineto's `export_chrome_trace("x.json")`); a sidecar, a results file or a model's config is not."""
    return is_trace_name(path.name) or (path.name.endswith(".json") and path.is_file() and sniff(path) == CHROME)


def stem_of(name: str) -> str:
    """`x.trace.json.gz` -> `x`; the stem a trace's sidecars (.meta.json, .telemetry.parquet) share."""
    for suffix in _STEM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return Path(name).stem


def stem_names(stem: str) -> tuple[str, ...]:
    """Every trace name whose sidecars are `stem`'s: the names `stem_of` reads `stem` back from."""
    return tuple(stem + suffix for suffix in _STEM_SUFFIXES)


@dataclass(frozen=True)
class TraceStem:
    """What a trace's file name says: the model, engine and device it was profiled on, and its shape."""

    model: str
    engine: str
    device: str  # the device type: cpu, cuda
    prompt: int
    new_tokens: int
    batch: int = 1


def trace_stem(model: str, engine: str, device: str, prompt: int, new_tokens: int, batch: int = 1) -> str:
    """The stem `probe profile` names a trace and its sidecars by: `tiny_cached_cpu_p64_n8`, `_b4` past batch 1.
    The engine's own name, which holds no underscore, so the name reads back (`parse_stem`) whatever the model's."""
    if "_" in engine or not engine:
        raise ProbeError(f"engine name {engine!r} cannot name a trace: it must be non-empty and hold no '_'")
    return f"{model}_{engine}_{device}_p{prompt}_n{new_tokens}" + (f"_b{batch}" if batch > 1 else "")


_STEM = re.compile(
    r"(?P<model>.+)_(?P<engine>[^_]+)_(?P<device>[a-z]+)_p(?P<prompt>[0-9]+)_n(?P<new>[0-9]+)(?:_b(?P<batch>[0-9]+))?",
    re.DOTALL,  # a model folder's name may hold any character but "/"
)


def parse_stem(name: str) -> TraceStem | None:
    """A trace's file name (or its stem) read back into what `trace_stem` put there; None for other names."""
    match = _STEM.fullmatch(stem_of(name))
    if match is None:
        return None
    prompt, new, batch = count(match["prompt"]), count(match["new"]), count(match["batch"] or "1")
    if prompt is None or new is None or batch is None:
        return None  # a size over MAX_COUNT: not a name probe wrote
    return TraceStem(match["model"], match["engine"], match["device"], prompt, new, batch)


# Every JSON probe writes nests under 10 levels (results: file, cells, a cell, its runs, a run's steps); 100 leaves
# room for a hand-made config and stays far below the depth at which Python's parser recurses into a RecursionError.
MAX_JSON_DEPTH = 100
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEP = np.zeros(256, np.int8)  # a byte's change of the nesting level
_BRACKET_STEP[list(b"[{")], _BRACKET_STEP[list(b"]}")] = 1, -1
_DEPTH_CHUNK = 1 << 20


JsonKind = Literal["results file", "report", "sidecar", "model config", "device file"]
# The most bytes each kind of JSON file could really hold, checked (stat) before a byte is read: Python's parser
# builds objects of up to ~20x the text (an empty list is 56 bytes for its 3 characters), so the cap bounds the
# memory a hostile file can cost. A results file (or a baseline, which is one) holds every cell's per-run and
# per-token lists: a 400-cell sweep of batch 32 x 1024 tokens writes ~120 MB. A report holds figures per cell; a
# sidecar a trace's config, environment and clock (~2 KB); a model's config.json a few KB (a label map at most);
# a device file one device.
MAX_JSON_BYTES: dict[JsonKind, int] = {
    "results file": 256 << 20,
    "report": 16 << 20,
    "sidecar": 1 << 20,
    "model config": 4 << 20,
    "device file": 1 << 20,
}


def read_json(path: str | Path, kind: JsonKind):
    """A JSON file's value, read by the rules above; ProbeError, in one line naming the file, otherwise. A file
    larger than its kind's cap (`MAX_JSON_BYTES`) is refused by its size, before it is read."""
    path = Path(path)
    cap = MAX_JSON_BYTES[kind]
    try:
        with open_regular(path, "a JSON file") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(cap + 1) if size <= cap else b""  # one grown since the fstat is still held to the cap
    except OSError as e:
        raise ProbeError(f"cannot read {path}: {e.strerror or e}") from None
    if max(size, len(data)) > cap:
        size = max(size, len(data))
        raise ProbeError(f"{path}: {_size(size)}, larger than any {kind} (probe reads one up to {_size(cap)})")
    return parse_json(data, str(path))


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


def parse_json(data: bytes | str, where: str):
    """JSON text's value, read by the rules above (`where` names it in the error)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProbeError(
            f"cannot read {where}: not UTF-8 text (byte {e.start}: {raw[e.start : e.start + 1]!r})"
        ) from None
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise ProbeError(f"cannot read {where}: JSON nested {depth} deep; probe reads at most {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ProbeError(f"cannot read {where}: not valid JSON ({str(e).splitlines()[0]})") from None
    if _SURROGATE_ESCAPE.search(raw):  # rare: only then is every string checked
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            bad = e.object[e.start : e.end]
            raise ProbeError(
                f"cannot read {where}: it holds {ascii(bad)}, a lone surrogate: text no file or table can hold"
            ) from None
    return value


def model_raw(spec: str) -> dict:
    """A model spec's config.json (engines.configs.resolve: a preset, a config.json, a model folder) as a plain
    dict, read by `read_json` (a file nested too deep or not UTF-8 is one line) and its sizes checked: no
    transformers, no torch."""
    source = resolve(spec)
    raw = read_json(source.config_path, "model config")
    if not isinstance(raw, dict):
        raise ProbeError(f"{source.config_path}: a config.json is a JSON object, not {type(raw).__name__}")
    check_sizes(raw, str(source.config_path))
    return raw


def model_config(spec: str):
    """The transformers config of a model spec, from `model_raw`."""
    return config_from_dict(model_raw(spec), str(resolve(spec).config_path))


def json_depth(raw: bytes) -> int:
    """How deep JSON text nests its arrays and objects (brackets inside strings not counted), without parsing it:
    the brackets alone, summed a chunk at a time, so the cost is a copy or two of the text, never arrays of its
    length."""
    brackets = _JSON_STRING.sub(b'""', raw).translate(None, _NOT_BRACKETS)
    deepest = level = 0
    for start in range(0, len(brackets), _DEPTH_CHUNK):
        chunk = np.frombuffer(brackets, np.uint8, min(_DEPTH_CHUNK, len(brackets) - start), start)
        levels = np.cumsum(_BRACKET_STEP[chunk], dtype=np.int64) + level
        deepest, level = max(deepest, int(levels.max())), int(levels[-1])
    return deepest


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc/self/status, since 4.7)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (what the standard library does too)
    os.umask(mask)
    return mask


def new_file_mode(path: Path) -> int:
    """The mode a file written at `path` gets: that of the regular file it replaces, else what a plain open()
    creates (0666 less the umask), so a team's shared folder stays readable to the team."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return 0o666 & ~_umask()


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A fresh temp file beside `path` for a writer that wants a path (Parquet, gzip); it replaces `path` when
    the block ends without an error and is removed when it does not."""
    target = Path(path)
    with atomic_set(target.parent, [target.name]) as paths:
        yield paths[target.name]


@contextlib.contextmanager
def atomic_set(folder: str | Path, names: Sequence[str]) -> Iterator[dict[str, Path]]:
    """A fresh temp file beside each of `names` in `folder`, by name, for writers that fill them all. When the
    block ends without an error each replaces its file, in the order given (put the file readers trust last);
    when it raises (a full disk, a writer that failed) every temp file is removed and the old files stay as they
    were. A replace is a rename within the folder, which needs no space; only a crash between the renames (no
    signal: callers defer SIGINT and SIGTERM across a save) could mix the two sets."""
    folder = Path(folder)
    temps: dict[str, Path] = {}
    try:
        for name in names:
            fd, made = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
            temps[name] = Path(made)
            try:
                os.fchmod(fd, new_file_mode(folder / name))
            finally:
                os.close(fd)
        yield dict(temps)
        for name in names:
            os.replace(temps.pop(name), folder / name)
    except BaseException:
        for left in temps.values():
            with contextlib.suppress(OSError):
                os.unlink(left)
        raise


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Write text (UTF-8) or bytes to `path` atomically."""
    payload = data.encode() if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(payload)
