"""Nsight Systems SQLite exports (`nsys export --type sqlite`, plain or gzipped) into the event table.

The export is opened read-only and immutable through a `file:` URI built by `Path.as_uri()`, which escapes
`%`, `#` and `?`: SQLite decodes `%2F` in a URI and stops the path at `#` or `?`, so an unescaped name can open
another file, or open read-write and create one. A gzipped export is gunzipped (within the limit of
`files.open_content`) into a temporary file rather than memory.

Columns are read in bulk: one `group_concat` a column over a chunk of rows, parsed by numpy, so no Python object
is made a value (twice as fast as fetching rows). A value of the wrong SQLite type reads as -1 (a time:
the row is dropped and counted); names are looked up once per distinct id.

What a file can make SQLite compute is bounded: a table probe reads may not be virtual or hold a generated column
(its expression runs on every read: a 45 KB file with one ran past 120 s; nsys writes neither), no value may exceed
MAX_VALUE_BYTES, and the whole read may take at most VM_STEPS_PER_BYTE SQLite instructions per byte of the file
(MIN_VM_STEPS at least), far above what reading an export needs (about 15 a byte).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from probe.analysis.intervals import inside_any
from probe.analysis.records import files
from probe.analysis.trace.table import (
    COLUMNS,
    COPY_KIND_OF_TEXT,
    DTYPES,
    OS_CALLS,
    PROFILER_STEP_PREFIX,
    DeviceInfo,
    Kind,
    Shapes,
    Trace,
    check_events,
    device_info,
    finish,
    intern,
    max_events,
)
from probe.errors import ProbeError

_NVTX_RANGE_TYPES = (59, 60, 70, 71)  # NvtxPushPopRange, NvtxStartEndRange and their NVTXT twins
_EVENT_TABLES = (
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)
_GPU_TABLES = (  # (table, kind, the column naming a row, the column of its bytes)
    ("CUPTI_ACTIVITY_KIND_KERNEL", Kind.KERNEL, "demangledName", "-1"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", Kind.GPU_MEMCPY, "copyKind", "bytes"),
    ("CUPTI_ACTIVITY_KIND_MEMSET", Kind.GPU_MEMSET, "0", "bytes"),
)
_MEMCPY_KINDS = {  # CUpti_ActivityMemcpyKind
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
_CHUNK_ROWS = 1 << 18  # rows a group_concat: ~5 MB of text a column (21 characters a value at most)
_GPU_INFO = "TARGET_INFO_GPU"  # one row a GPU of the profiled machine: its name and properties
_READ_TABLES = (*_EVENT_TABLES, "StringIds", "TARGET_INFO_SESSION_START_TIME", _GPU_INFO)
_DEVICE_KEYS = {  # DeviceInfo field <- its TARGET_INFO_GPU column (nsys's names; `id` is what deviceId refers to)
    "id": ("id",),
    "total_memory_bytes": ("totalMemory",),
    "sm_count": ("smCount",),
    "compute_major": ("computeMajor",),
    "compute_minor": ("computeMinor",),
    "warp_size": ("threadsPerWarp",),
    "max_threads_per_block": ("maxThreadsPerBlock",),
    "max_threads_per_sm": (),  # nsys records warps per SM (maxWarpsPerSm, kept in `other`), not threads
    "regs_per_block": ("maxRegistersPerBlock",),
    "regs_per_sm": ("maxRegistersPerSm",),
    "shared_memory_per_block_bytes": ("maxShmemPerBlock",),
    "shared_memory_per_block_optin_bytes": ("maxShmemPerBlockOptin",),
    "shared_memory_per_sm_bytes": ("maxShmemPerSm",),
}
MAX_DEVICES = 1024  # rows of TARGET_INFO_GPU read: a machine holds a few GPUs, a file may claim a million
MAX_VALUE_BYTES = 64 << 20  # a string, blob or group_concat: the chunks above stay under 6 MB
VM_STEPS_PER_BYTE, MIN_VM_STEPS = 400, 200_000_000
_STEPS_A_CALL = 100_000  # the progress handler runs once per this many instructions
_TIMED = "typeof(start) = 'integer' AND typeof(end) = 'integer'"


def read_nsys(source: Path, data: bytes | None = None) -> Trace:
    """Read an export in place, read-only; a gzipped one (or `data`, its bytes) through a temporary copy."""
    source = Path(source)
    if data is None and not files.is_gzipped(source):
        return _read_file(source, source)
    with tempfile.TemporaryDirectory(prefix="probe-") as tmp:
        copy = Path(tmp) / "export.sqlite"
        if data is not None:
            copy.write_bytes(data)
        else:
            with files.open_content(source) as src, open(copy, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        return _read_file(copy, source)


def _read_file(path: Path, source: Path) -> Trace:
    files.open_regular(path).close()  # a folder, FIFO or device is refused before SQLite opens it
    uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as e:
        raise ProbeError(f"{source}: unreadable SQLite export ({e})") from None
    con.text_factory = lambda b: b.decode("utf-8", "replace")  # a stray byte in one name must not stop the read
    budget = _Budget(max(MIN_VM_STEPS, VM_STEPS_PER_BYTE * path.stat().st_size))
    con.set_progress_handler(budget.step, _STEPS_A_CALL)
    if hasattr(con, "setlimit"):  # Python 3.11+
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    try:
        return _read_tables(con, source)
    except sqlite3.Error as e:
        if budget.spent:
            raise ProbeError(f"{source}: reading it would take over {budget.steps:,} SQLite steps; refused") from None
        raise ProbeError(f"{source}: unreadable SQLite export ({str(e).splitlines()[0] if str(e) else e!r})") from None
    except UnicodeDecodeError as e:  # SQLite's own error message quoting a damaged schema's bytes
        why = bytes(e.object).decode("utf-8", "replace").splitlines()[0]
        raise ProbeError(f"{source}: unreadable SQLite export ({why})") from None
    finally:
        con.close()


class _Budget:
    """SQLite's progress handler: interrupts the read once it has run `steps` instructions."""

    def __init__(self, steps: int):
        self.steps, self.used, self.spent = steps, 0, False

    def step(self) -> int:
        self.used += _STEPS_A_CALL
        self.spent = self.used > self.steps
        return int(self.spent)


def _refuse_computed_tables(con: sqlite3.Connection, source: Path) -> None:
    """A virtual table or a generated column computes its values on every read, with whatever expression the file
    gives: nsys writes neither, so a table probe reads that has one is refused before a row is read."""
    rows = con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    for name, sql in rows:
        if name not in _READ_TABLES:
            continue
        if isinstance(sql, str) and sql.lstrip()[:14].upper() == "CREATE VIRTUAL":
            raise ProbeError(f"{source}: {name} is a virtual table (nsys writes none): not an Nsight Systems export")
        generated = [r[1] for r in con.execute(f'PRAGMA table_xinfo("{name}")') if r[6] in (2, 3)]
        if generated:
            raise ProbeError(
                f"{source}: {name}.{generated[0]} is a generated column, computed on every read (nsys writes none): "
                "not an Nsight Systems export"
            )


class _Names:
    """The trace's name table, filled from StringIds ids and from text, one lookup per distinct value."""

    def __init__(self, strings: dict):
        self.strings = strings  # StringIds: id -> value
        self.table: dict[str, int] = {}

    def of_ids(self, ids: np.ndarray) -> np.ndarray:
        """Name ids of StringIds ids ("" for an id it lacks)."""
        distinct, inverse = np.unique(ids, return_inverse=True)
        mine = [intern(self.table, self.strings.get(int(i), "")) for i in distinct]
        return np.asarray(mine, np.int32)[inverse] if len(ids) else np.zeros(0, np.int32)

    def of_texts(self, texts: list) -> np.ndarray:
        return np.asarray([intern(self.table, t) for t in texts], np.int32).reshape(-1)

    def of_one(self, text: str, n: int) -> np.ndarray:
        return np.full(n, intern(self.table, text), np.int32)


def _read_tables(con: sqlite3.Connection, source: Path) -> Trace:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    present = [t for t in _EVENT_TABLES if t in tables]
    if not present:
        raise ProbeError(_nothing_to_read(source, tables))
    if "StringIds" not in tables:
        raise ProbeError(f"{source}: Nsight Systems export without its StringIds table")
    _refuse_computed_tables(con, source)
    rows = sum(con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in present)
    check_events(rows, source, max_events())  # before a column is built
    names = _Names(dict(con.execute("SELECT id, value FROM StringIds")))
    dropped: Counter[str] = Counter()
    shapes: list[Shapes] = []  # what torch's op ranges recorded of their inputs (`_op_ranges`)
    parts = []
    cuda = None
    odd = 0  # SQLite keeps an integer past int64 as a REAL: such an id reads as -1 and joins nothing, which is said
    if "NVTX_EVENTS" in tables:
        parts.append(_nvtx(con, names, dropped, shapes))
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        cuda = _runtime(con, names, dropped)  # the CUDA runtime calls, which the OS calls inside them belong to
        parts.append(cuda)
        odd += _odd_ids(con, "CUPTI_ACTIVITY_KIND_RUNTIME", parts[-1]["correlation"])
    for table, kind, label, nbytes in _GPU_TABLES:
        if table in tables:
            nbytes = nbytes if nbytes in _columns(con, table) else "-1"  # an export without it: not said
            parts.append(_gpu(con, names, dropped, table, kind, label, nbytes))
            odd += _odd_ids(con, table, parts[-1]["correlation"])
    if OS_CALLS in tables:
        parts.append(_os_calls(con, names, dropped, cuda))
    notes = (f"{odd} row(s) with a correlation id that is not an integer (past int64, or text): left unjoined",)
    cols = {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}
    base = None
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        base = row[0] if row and type(row[0]) is int else None
    devices = _devices(con) if _GPU_INFO in tables else ()
    return finish(
        "nsys_sqlite",
        source,
        base,
        tuple(names.table),
        cols,
        {},
        dict(dropped),
        notes=notes[:odd],
        devices=devices,
        shapes=tuple(shapes),
    )


def _devices(con) -> tuple[DeviceInfo, ...]:
    """The GPUs the export names (TARGET_INFO_GPU, one row a GPU: 'NVIDIA H200', its memory, SMs, ...) typed as
    chrome's deviceProperties are, so a roofline knows the device without --device."""
    cursor = con.execute(f"SELECT * FROM {_GPU_INFO} ORDER BY rowid LIMIT {MAX_DEVICES}")
    columns = [d[0] for d in cursor.description]
    return tuple(device_info(dict(zip(columns, row, strict=True)), _DEVICE_KEYS) for row in cursor)


# What an export records in the tables probe does not read, by the table (nsys profile --trace=osrt, --sample=cpu, ...)
_OTHER_TRACES = {
    OS_CALLS: "OS runtime calls",  # read beside CUDA or NVTX (`_os_calls`), not alone: they hold no step
    "SCHED_EVENTS": "thread scheduling",
    "SAMPLING_CALLCHAINS": "CPU samples",
    "MPI_P2P_EVENTS": "MPI calls",
    "CUDA_GPU_MEMORY_USAGE_EVENTS": "GPU memory usage",
    "GPU_METRICS": "GPU metrics",
}


def _nothing_to_read(source: Path, tables: set[str]) -> str:
    """Why a SQLite file with none of the event tables is refused: an Nsight Systems export (its StringIds and the
    TARGET_INFO_* / ENUM_NSYS_* tables every export holds) recorded without CUDA or NVTX, said with what it did record
    and how to record what probe reads; else a SQLite file of something else."""
    nsys = "StringIds" in tables and any(t.startswith(("TARGET_INFO_", "ENUM_NSYS_")) for t in tables)
    if not nsys:
        return f"{source}: SQLite but not an Nsight Systems export (none of {', '.join(_EVENT_TABLES)})"
    held = [what for table, what in _OTHER_TRACES.items() if table in tables]
    return (
        f"{source}: an Nsight Systems export without a CUDA or NVTX trace (it holds "
        f"{', '.join(held) if held else 'none of the events probe reads'}): probe reads CUDA kernels, copies, API "
        "calls and NVTX ranges; record them with nsys profile --trace=cuda,nvtx,osrt"
    )


def _nvtx(con, names: _Names, dropped: Counter, shapes: list[Shapes]) -> dict[str, np.ndarray]:
    ranges = f"eventType IN {_NVTX_RANGE_TYPES}"
    _count(con, dropped, "NVTX range never closed", f"NVTX_EVENTS WHERE end IS NULL AND {ranges}")
    closed = f"end IS NOT NULL AND {ranges}"
    _count(con, dropped, "non-integer start or end", f"NVTX_EVENTS WHERE {closed} AND NOT ({_TIMED})")
    where = f"{closed} AND {_TIMED}"
    c = _int_columns(con, "NVTX_EVENTS", where, start="start", end="end", gid="globalTid", text_id="textId")
    name_id = names.of_ids(c["text_id"])
    # Unregistered strings sit in `text` instead of `textId`: few rows, read as they are.
    texts = con.execute(f"SELECT rowid, text FROM NVTX_EVENTS WHERE text IS NOT NULL AND {where}").fetchall()
    if texts:
        rowid, text = zip(*texts, strict=True)
        name_id[np.searchsorted(c["rowid"], np.asarray(rowid, np.int64))] = names.of_texts([_text(t) for t in text])
    gid = c["gid"]
    part = _part(
        Kind.USER_RANGE,
        name_id,
        names.of_one("NVTX_EVENTS", len(gid)),
        ts_ns=c["start"],
        dur_ns=c["end"] - c["start"],
        pid=np.where(gid >= 0, _gid_pid(gid), -1),
        tid=np.where(gid >= 0, _gid_tid(gid), -1),
    )
    is_step = np.array([s.startswith(PROFILER_STEP_PREFIX) for s in names.table], bool)
    part["kind"][is_step[name_id]] = Kind.PROFILER_STEP
    _op_ranges(part, names, shapes)
    return part


# torch's op ranges (`torch.autograd.profiler.emit_nvtx`, and the CUDA profiler's NVTX observer): each op's range is
# named `NAME, seq = N, op_id = M, sizes = [[..], ..], input_op_ids = [(M, k), ..]`, each part after the name only
# when known (torch/csrc/profiler/util.cpp, getNvtxStr). The counters make every name unique, so no op would repeat.
_OP_RANGE = re.compile(
    r"(?P<name>[^,]+?)(?:, seq = -?\d+)?(?P<op>, op_id = \d+)?(?:, sizes = (?P<sizes>\[[\[\]0-9, ]*\]))?"
    r"(?:, input_op_ids = \[[(),0-9 ]*\])?"
)


def _op_ranges(part: dict[str, np.ndarray], names: _Names, shapes: list[Shapes]) -> None:
    """NVTX ranges that are torch's op ranges (`_OP_RANGE`, with a seq or an op_id) become the cpu_ops they stand
    for, in place: named by the op, their `sizes` their recorded input shapes (no dtypes: torch writes none), as
    torch.profiler's `record_shapes` gives them. Each distinct text is parsed once."""
    used = np.unique(part["name_id"])
    texts = list(names.table)
    op_of = np.full(len(texts), -1, np.int32)
    shape_of = np.full(len(texts), -1, np.int32)
    seen: dict[tuple, int] = {}  # dims -> their index in `shapes`
    for i in used.tolist():
        m = _OP_RANGE.fullmatch(texts[i])
        if m is None or m.end("name") == len(texts[i]) or not m.group("name").strip():
            continue  # a plain range: no counter after its name
        op_of[i] = intern(names.table, m.group("name"))
        if m.group("sizes") is not None:
            try:
                dims = tuple(tuple(d) for d in json.loads(m.group("sizes")))
            except (ValueError, TypeError):
                continue
            if dims not in seen:
                seen[dims] = len(shapes)
                shapes.append(Shapes(dims, ("",) * len(dims)))
            shape_of[i] = seen[dims]
    rows = op_of[part["name_id"]] >= 0
    if rows.any():
        part["kind"][rows] = Kind.CPU_OP
        part["shape_id"][rows] = shape_of[part["name_id"][rows]]
        part["name_id"][rows] = op_of[part["name_id"][rows]]


def _runtime(con, names: _Names, dropped: Counter) -> dict[str, np.ndarray]:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    _count(con, dropped, "non-integer start or end", f"{table} WHERE NOT ({_TIMED})")
    ids = {"gid": "globalTid", "corr": "correlationId", "name": "nameId"}
    c = _int_columns(con, table, _TIMED, start="start", end="end", **ids)
    return _part(
        Kind.RUNTIME,
        names.of_ids(c["name"]),
        names.of_one(table, len(c["start"])),
        ts_ns=c["start"],
        dur_ns=c["end"] - c["start"],
        pid=_gid_pid(c["gid"]),
        tid=_gid_tid(c["gid"]),
        correlation=c["corr"],
    )


def _os_calls(con, names: _Names, dropped: Counter, cuda: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """The OS runtime calls (`OSRT_API`: `nsys profile --trace=osrt`, a default; nsys records those past its
    threshold) as runtime calls of their threads, but for those inside a CUDA runtime call of their thread (the
    driver's ioctl under cudaLaunchKernel, its poll under cudaStreamSynchronize): those are that call's own time.
    What a thread waited in (sem_wait, pthread_cond_wait, poll, nanosleep) is its blocking calls' rule's
    (probe.analysis.ledger.host.SYNC_CALL); read, open and the rest are runtime calls."""
    table = OS_CALLS
    _count(con, dropped, "non-integer start or end", f"{table} WHERE NOT ({_TIMED})")
    c = _int_columns(con, table, _TIMED, start="start", end="end", gid="globalTid", name="nameId")
    pid, tid = _gid_pid(c["gid"]), _gid_tid(c["gid"])
    keep = ~_inside_calls(pid, tid, c["start"], c["end"], cuda) if cuda is not None else np.ones(len(pid), bool)
    return _part(
        Kind.RUNTIME,
        names.of_ids(c["name"][keep]),
        names.of_one(table, int(keep.sum())),
        ts_ns=c["start"][keep],
        dur_ns=c["end"][keep] - c["start"][keep],
        pid=pid[keep],
        tid=tid[keep],
    )


def _inside_calls(pid, tid, start, end, calls: dict[str, np.ndarray]) -> np.ndarray:
    """Which intervals [start, end] of threads pid/tid lie inside a call of `calls` (a part) on their own thread:
    `inside_any` a thread, each side sorted by thread once (not a mask over every row a thread)."""
    span = int(max(tid.max(initial=0), calls["tid"].max(initial=0))) + 1
    mine, theirs = pid * span + tid, calls["pid"] * span + calls["tid"]  # a thread's key on both sides
    by_mine, by_theirs = np.argsort(mine, kind="stable"), np.argsort(theirs, kind="stable")
    mine_sorted, theirs_sorted = mine[by_mine], theirs[by_theirs]
    inside = np.zeros(len(pid), bool)
    for t in np.unique(mine).tolist():
        here = by_mine[np.searchsorted(mine_sorted, t) : np.searchsorted(mine_sorted, t, side="right")]
        rows = by_theirs[np.searchsorted(theirs_sorted, t) : np.searchsorted(theirs_sorted, t, side="right")]
        call_start = calls["ts_ns"][rows]
        inside[here] = inside_any(call_start, call_start + calls["dur_ns"][rows], start[here], end[here])
    return inside


def _gpu(
    con, names: _Names, dropped: Counter, table: str, kind: Kind, label: str, nbytes: str
) -> dict[str, np.ndarray]:
    _count(con, dropped, "non-integer start or end", f"{table} WHERE NOT ({_TIMED})")
    c = _int_columns(
        con,
        table,
        _TIMED,
        start="start",
        end="end",
        device="deviceId",
        stream="streamId",
        corr="correlationId",
        gpid="globalPid",
        label=label,
        nbytes=nbytes,
    )
    n = len(c["start"])
    copy_kind = np.full(n, -1, np.int8)
    if kind == Kind.KERNEL:
        name_id = names.of_ids(c["label"])
    elif kind == Kind.GPU_MEMCPY:
        distinct, inverse = np.unique(c["label"], return_inverse=True)
        texts = [_MEMCPY_KINDS.get(int(k), str(int(k))) for k in distinct]
        ids = [intern(names.table, f"Memcpy {t}") for t in texts]
        name_id = np.asarray(ids, np.int32)[inverse] if n else np.zeros(0, np.int32)
        copy_kind = np.asarray([COPY_KIND_OF_TEXT.get(t, -1) for t in texts], np.int8)[inverse] if n else copy_kind
    else:
        name_id = names.of_one("Memset", n) if n else np.zeros(0, np.int32)
    return _part(
        kind,
        name_id,
        names.of_one(table, n),
        ts_ns=c["start"],
        dur_ns=c["end"] - c["start"],
        pid=_gid_pid(c["gpid"]),
        tid=c["stream"],
        stream=c["stream"],
        device=c["device"],
        correlation=c["corr"],
        bytes=c["nbytes"],
        copy_kind=copy_kind,
    )


def _columns(con, table: str) -> set[str]:
    return {r[1] for r in con.execute(f"PRAGMA table_xinfo({table})")}


def _part(kind: Kind, name_id: np.ndarray, cat_id: np.ndarray, **cols: np.ndarray) -> dict[str, np.ndarray]:
    n = len(name_id)
    part = {c: np.full(n, -1, DTYPES[c]) for c in COLUMNS}
    part.update(kind=np.full(n, kind, np.int8), name_id=name_id, cat_id=cat_id, **cols)
    return part


def _count(con, dropped: Counter, why: str, rows: str) -> None:
    n = con.execute(f"SELECT COUNT(*) FROM {rows}").fetchone()[0]
    if n:
        dropped[why] += n


def _int_columns(con, table: str, where: str, **exprs: str) -> dict[str, np.ndarray]:
    """Integer columns (and `rowid`) of the rows of `table` that pass `where`, in rowid order; a value that is
    not an integer reads as -1. All aggregates of one SELECT step through the same rows in the same order, so
    the columns stay aligned; chunks follow rowid, so each resumes with an index seek."""
    exprs = {"rowid": "rowid", **exprs}
    ints = ", ".join(
        f"CASE WHEN typeof({e}) = 'integer' THEN {e} ELSE -1 END AS c{i}" for i, e in enumerate(exprs.values())
    )
    concat = ", ".join(f"group_concat(c{i})" for i in range(len(exprs)))
    rows = f"FROM {table} WHERE (?1 IS NULL OR rowid > ?1) AND ({where}) ORDER BY rowid LIMIT {_CHUNK_ROWS}"
    sql = f"SELECT COUNT(*), max(c0), {concat} FROM (SELECT {ints} {rows})"
    chunks: list[list[np.ndarray]] = []
    after = None
    while True:
        n, last, *texts = con.execute(sql, (after,)).fetchone()
        if n == 0:
            break
        chunks.append([_parse_ints(t, n) for t in texts])
        if n < _CHUNK_ROWS:
            break
        after = last
    if not chunks:
        return {k: np.zeros(0, np.int64) for k in exprs}
    return {k: np.concatenate([c[i] for c in chunks]) for i, k in enumerate(exprs)}


def _odd_ids(con, table: str, ids: np.ndarray) -> int:
    """How many rows hold a correlation id that is neither an integer nor NULL (SQLite keeps an integer past int64
    as a REAL): they read as -1 and join nothing. Counted only when some id read as -1."""
    if not (ids < 0).any():
        return 0
    sql = f"SELECT COUNT(*) FROM {table} WHERE {_TIMED} AND typeof(correlationId) NOT IN ('integer', 'null')"
    return con.execute(sql).fetchone()[0]


def _parse_ints(text: str, n: int) -> np.ndarray:
    values = np.fromstring(text, dtype=np.int64, sep=",")  # SQLite wrote them: plain decimal integers
    if len(values) != n:
        raise ProbeError(f"expected {n} values from SQLite, read {len(values)}")
    return values


def _text(v) -> str:
    return v if type(v) is str else "" if v is None else str(v)


def _gid_pid(gid: np.ndarray) -> np.ndarray:
    """nsys serializes a process into globalTid/globalPid as bits 24..47."""
    return (gid >> 24) & 0xFFFFFF


def _gid_tid(gid: np.ndarray) -> np.ndarray:
    return gid & 0xFFFFFF
