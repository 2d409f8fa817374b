"""Nsight Systems SQLite exports (`nsys export --type sqlite`, plain or gzipped) into the event table."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import numpy as np

from probe.analysis.trace.table import COLUMNS, PROFILER_STEP_PREFIX, Kind, Trace, finish, intern
from probe.errors import ProbeError

_NVTX_RANGE_TYPES = (59, 60, 70, 71)  # NvtxPushPopRange, NvtxStartEndRange and their NVTXT twins
_EVENT_TABLES = (
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)
_MEMCPY_KINDS = {
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


def _gid_pid(gid: np.ndarray) -> np.ndarray:
    """nsys serializes a process into globalTid/globalPid as bits 24..47."""
    return (gid >> 24) & 0xFFFFFF


def _gid_tid(gid: np.ndarray) -> np.ndarray:
    return gid & 0xFFFFFF


def read_nsys(source: Path, data: bytes | None) -> Trace:
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
        raise ProbeError(f"{source}: SQLite but not an Nsight Systems export (none of {', '.join(_EVENT_TABLES)})")
    if "StringIds" not in tables:
        raise ProbeError(f"{source}: Nsight Systems export without its StringIds table")
    strings = dict(_query(con, "SELECT id, value FROM StringIds"))
    table: dict[str, int] = {}
    parts: list[dict[str, np.ndarray]] = []

    def ids(values) -> np.ndarray:
        return np.fromiter((intern(table, v) for v in values), dtype=np.int32, count=len(values))

    def part(rows: list[tuple], kind, names: list[str], cat: str, **cols) -> None:
        n = len(rows)
        base = dict(kind=np.full(n, kind, np.int8), name_id=ids(names), cat_id=np.full(n, intern(table, cat), np.int32))
        for col in COLUMNS:
            base.setdefault(col, np.full(n, -1, np.int64))
        base.update(cols)
        parts.append(base)

    def ints(rows, i) -> np.ndarray:
        return np.fromiter((-1 if r[i] is None else r[i] for r in rows), dtype=np.int64, count=len(rows))

    dropped: dict[str, int] = {}
    if "NVTX_EVENTS" in tables:
        unclosed = _query(
            con, f"SELECT COUNT(*) FROM NVTX_EVENTS WHERE end IS NULL AND eventType IN {_NVTX_RANGE_TYPES}"
        )[0][0]
        if unclosed:
            dropped["NVTX range never closed"] = unclosed
        rows = _query(
            con,
            "SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS "
            f"WHERE end IS NOT NULL AND eventType IN {_NVTX_RANGE_TYPES}",
        )
        names = [r[2] if r[2] is not None else strings.get(r[3], "") for r in rows]
        start, gid = ints(rows, 0), ints(rows, 4)
        kind = np.array(
            [Kind.PROFILER_STEP if s.startswith(PROFILER_STEP_PREFIX) else Kind.USER_RANGE for s in names],
            dtype=np.int8,
        )
        part(
            rows,
            Kind.USER_RANGE,
            names,
            "NVTX_EVENTS",
            ts_ns=start,
            dur_ns=ints(rows, 1) - start,
            pid=np.where(gid >= 0, _gid_pid(gid), -1),
            tid=np.where(gid >= 0, _gid_tid(gid), -1),
        )
        parts[-1]["kind"] = kind
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        rows = _query(con, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        start, gid = ints(rows, 0), ints(rows, 2)
        part(
            rows,
            Kind.RUNTIME,
            [strings.get(r[4], "") for r in rows],
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            ts_ns=start,
            dur_ns=ints(rows, 1) - start,
            pid=_gid_pid(gid),
            tid=_gid_tid(gid),
            correlation=ints(rows, 3),
        )
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
        part(
            rows,
            kind,
            names,
            name,
            ts_ns=start,
            dur_ns=ints(rows, 1) - start,
            pid=_gid_pid(ints(rows, 5)),
            tid=stream,
            stream=stream,
            device=device,
            correlation=ints(rows, 4),
        )
    cols = {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}
    base = None
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = _query(con, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        base = row[0][0] if row and type(row[0][0]) is int else None
    return finish("nsys_sqlite", source, base, tuple(table), cols, {}, dropped)
