# ruff: noqa: E501  (the CREATE TABLE text is copied verbatim from a real export, comments and all)
"""Nsight Systems SQLite fixtures.

    python tests/data/make_nsys_fixture.py hand OUT.sqlite       # the hand-made GPU export (tests build it)
    python tests/data/make_nsys_fixture.py strip IN.sqlite OUT.sqlite.gz   # shrink a real CPU export

`build(path)` writes a small export whose numbers tests/test_trace.py and tests/test_ledger.py check by hand:
the NVTX, CUPTI runtime / kernel / memcpy / memset, StringIds and session-start tables, created with the
exact CREATE TABLE statements that `nsys export --type sqlite --lazy=false` of Nsight Systems 2022.4.2
writes (copied from such an export), and rows shaped like a CUDA decode step: registered NVTX strings
(what the `nvtx` package emits), versioned API names (`cudaLaunchKernel_v7000`), a graph launch replaying two
kernels, a launch from a second thread, an API name nobody knows, and a second process whose correlation ids
collide with the first one's.

`strip(src, dst)` keeps what the parser reads from a real export (NVTX_EVENTS, the StringIds they use, the
session start) and drops the rest, among it the machine's process list and environment, then gzips it.
"""

from __future__ import annotations

import gzip
import sqlite3
import sys
import tempfile
from pathlib import Path

SCHEMA = [
    """CREATE TABLE StringIds (
    -- Consolidation of repetitive string values.

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- ID reference value.
    value                       TEXT      NOT NULL                     -- String value.
)""",
    """CREATE TABLE TARGET_INFO_SESSION_START_TIME (
    utcEpochNs                  INTEGER,                               -- UTC Epoch timestamp at start of the capture (ns).
    utcTime                     TEXT,                                  -- Start of the capture in UTC.
    localTime                   TEXT                                   -- Start of the capture in local time of target.
)""",
    """CREATE TABLE NVTX_EVENTS (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER,                               -- Event end timestamp (ns).
    eventType                   INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_TYPE(id)
    rangeId                     INTEGER,                               -- Correlation ID returned from a nvtxRangeStart call.
    category                    INTEGER,                               -- User-controlled ID that can be used to group events.
    color                       INTEGER,                               -- Encoded ARGB color value.
    text                        TEXT,                                  -- Optional text message for non registered strings.
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    endGlobalTid                INTEGER,                               -- Serialized GlobalId.
    textId                      INTEGER,                               -- REFERENCES StringIds(id) -- Registered NVTX domain
    domainId                    INTEGER,                               -- User-controlled ID that can be used to group events.
    uint64Value                 INTEGER,                               -- One of possible payload value union members.
    int64Value                  INTEGER,                               -- One of possible payload value union members.
    doubleValue                 REAL,                                  -- One of possible payload value union members.
    uint32Value                 INTEGER,                               -- One of possible payload value union members.
    int32Value                  INTEGER,                               -- One of possible payload value union members.
    floatValue                  REAL,                                  -- One of possible payload value union members.
    jsonTextId                  INTEGER,                               -- One of possible payload value union members.
    jsonText                    TEXT                                   -- One of possible payload value union members.
)""",
    """CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    eventClass                  INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    correlationId               INTEGER,                               -- ID used to identify events that this function call has triggered.
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Function name
    returnValue                 INTEGER   NOT NULL,                    -- Return value of the function call.
    callchainId                 INTEGER                                -- REFERENCES CUDA_CALLCHAINS(id)
)""",
    """CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    demangledName               INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Kernel function name w/ templates
    shortName                   INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Base kernel function name
    mangledName                 INTEGER,                               -- REFERENCES StringIds(id) -- Raw C++ mangled kernel function name
    launchType                  INTEGER,                               -- REFERENCES ENUM_CUDA_KRENEL_LAUNCH_TYPE(id)
    cacheConfig                 INTEGER,                               -- REFERENCES ENUM_CUDA_FUNC_CACHE_CONFIG(id)
    registersPerThread          INTEGER   NOT NULL,                    -- Number of registers required for each thread executing the kernel.
    gridX                       INTEGER   NOT NULL,                    -- X-dimension grid size.
    gridY                       INTEGER   NOT NULL,                    -- Y-dimension grid size.
    gridZ                       INTEGER   NOT NULL,                    -- Z-dimension grid size.
    blockX                      INTEGER   NOT NULL,                    -- X-dimension block size.
    blockY                      INTEGER   NOT NULL,                    -- Y-dimension block size.
    blockZ                      INTEGER   NOT NULL,                    -- Z-dimension block size.
    staticSharedMemory          INTEGER   NOT NULL,                    -- Static shared memory allocated for the kernel (B).
    dynamicSharedMemory         INTEGER   NOT NULL,                    -- Dynamic shared memory reserved for the kernel (B).
    localMemoryPerThread        INTEGER   NOT NULL,                    -- Amount of local memory reserved for each thread (B).
    localMemoryTotal            INTEGER   NOT NULL,                    -- Total amount of local memory reserved for the kernel (B).
    gridId                      INTEGER   NOT NULL,                    -- Unique grid ID of the kernel assigned at runtime.
    sharedMemoryExecuted        INTEGER,                               -- Shared memory size set by the driver.
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_EVENTS(graphNodeId)
    sharedMemoryLimitConfig     INTEGER                                -- REFERENCES ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG(id)
)""",
    """CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    bytes                       INTEGER   NOT NULL,                    -- Number of bytes transferred (B).
    copyKind                    INTEGER   NOT NULL,                    -- REFERENCES ENUM_CUDA_MEMCPY_OPER(id)
    deprecatedSrcId             INTEGER,                               -- Deprecated, use srcDeviceId instead.
    srcKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    dstKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    srcDeviceId                 INTEGER,                               -- Source device ID.
    srcContextId                INTEGER,                               -- Source context ID.
    dstDeviceId                 INTEGER,                               -- Destination device ID.
    dstContextId                INTEGER,                               -- Destination context ID.
    migrationCause              INTEGER,                               -- REFERENCES ENUM_CUDA_UNIF_MEM_MIGRATION(id)
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_EVENTS(graphNodeId)
    virtualAddress              INTEGER                                -- Virtual base address of the page/s being transferred.
)""",
    """CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    value                       INTEGER   NOT NULL,                    -- Value assigned to memory.
    bytes                       INTEGER   NOT NULL,                    -- Number of bytes set (B).
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_EVENTS(graphNodeId)
    memKind                     INTEGER                                -- REFERENCES ENUM_CUDA_MEM_KIND(id)
)""",
]

# Two more tables, as Nsight Systems 2024.6 writes them (schema 3.16.1): the GPUs of the machine, one row each, and
# the OS runtime calls of `--trace=osrt` (an export of that trace alone holds no table of SCHEMA but StringIds).
GPU_SCHEMA = """CREATE TABLE TARGET_INFO_GPU (
    vmId                        INTEGER   NOT NULL,                    -- Serialized GlobalId.
    id                          INTEGER   NOT NULL,                    -- Device ID.
    name                        TEXT,                                  -- Device name.
    busLocation                 TEXT,                                  -- PCI bus location.
    isDiscrete                  INTEGER,                               -- True if discrete, false if integrated.
    l2CacheSize                 INTEGER,                               -- Size of L2 cache (B).
    totalMemory                 INTEGER,                               -- Total amount of memory on the device (B).
    memoryBandwidth             INTEGER,                               -- Amount of memory transferred (B).
    clockRate                   INTEGER,                               -- Clock frequency (Hz).
    smCount                     INTEGER,                               -- Number of multiprocessors on the device.
    pwGpuId                     INTEGER,                               -- PerfWorks GPU ID.
    uuid                        TEXT,                                  -- Device UUID.
    luid                        INTEGER,                               -- Device LUID.
    chipName                    TEXT,                                  -- Chip name.
    cuDevice                    INTEGER,                               -- CUDA device ID.
    ctxswDevPath                TEXT,                                  -- GPU context switch device node path.
    ctrlDevPath                 TEXT,                                  -- GPU control device node path.
    revision                    INTEGER,                               -- Revision number.
    nodeMask                    INTEGER,                               -- Device node mask.
    constantMemory              INTEGER,                               -- Memory available on device for __constant__ variables (B).
    maxIPC                      INTEGER,                               -- Maximum instructions per count.
    maxRegistersPerBlock        INTEGER,                               -- Maximum number of 32-bit registers available per block.
    maxShmemPerBlock            INTEGER,                               -- Maximum optin shared memory per block.
    maxShmemPerBlockOptin       INTEGER,                               -- Maximum optin shared memory per block.
    maxShmemPerSm               INTEGER,                               -- Maximum shared memory available per multiprocessor (B).
    maxRegistersPerSm           INTEGER,                               -- Maximum number of 32-bit registers available per multiprocessor.
    threadsPerWarp              INTEGER,                               -- Warp size in threads.
    asyncEngines                INTEGER,                               -- Number of asynchronous engines.
    maxWarpsPerSm               INTEGER,                               -- Maximum number of warps per multiprocessor.
    maxBlocksPerSm              INTEGER,                               -- Maximum number of blocks per multiprocessor.
    maxThreadsPerBlock          INTEGER,                               -- Maximum number of threads per block.
    maxBlockDimX                INTEGER,                               -- Maximum X-dimension of a block.
    maxBlockDimY                INTEGER,                               -- Maximum Y-dimension of a block.
    maxBlockDimZ                INTEGER,                               -- Maximum Z-dimension of a block.
    maxGridDimX                 INTEGER,                               -- Maximum X-dimension of a grid.
    maxGridDimY                 INTEGER,                               -- Maximum Y-dimension of a grid.
    maxGridDimZ                 INTEGER,                               -- Maximum Z-dimension of a grid.
    computeMajor                INTEGER,                               -- Major compute capability version number.
    computeMinor                INTEGER,                               -- Minor compute capability version number.
    smMajor                     INTEGER,                               -- Major multiprocessor version number.
    smMinor                     INTEGER                                -- Minor multiprocessor version number.
)"""
OSRT_SCHEMA = """CREATE TABLE OSRT_API (
    -- OS runtime libraries traced to gather information about low-level userspace APIs.

    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    eventClass                  INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Function name
    returnValue                 INTEGER   NOT NULL,                    -- Return value of the function call.
    nestingLevel                INTEGER,                               -- Zero-base index of the nesting level.
    callchainId                 INTEGER   NOT NULL                     -- REFERENCES OSRT_CALLCHAINS(id)
)"""
# (id, name, totalMemory, smCount, computeMajor, computeMinor): an H200's, as its export says
H200 = (0, "NVIDIA H200", 150137864192, 132, 9, 0)

SESSION_START_NS = 1_700_000_000_000_000_000
PID_A, PID_B = 4242, 777
MAIN, WORKER = 4242, 4243
NVTX_PUSH_POP, NVTX_MARK = 59, 34
RUNTIME, DRIVER = 0, 1  # ENUM_NSYS_EVENT_CLASS: TRACE_PROCESS_EVENT_CUDA_RUNTIME / _DRIVER


def global_tid(pid: int, tid: int) -> int:
    """nsys's serialized GlobalId: (1 << 48) | pid << 24 | tid, as in a real export."""
    return (1 << 48) | (pid << 24) | tid


def global_pid(pid: int) -> int:
    return (1 << 48) | (pid << 24)


# (start, end, name, thread); name is a registered string unless marked text=...
NVTX = [
    (1_000, 11_000, "decode#0", MAIN),
    (1_100, 8_000, "forward", MAIN),
    (2_000, 3_000, "cache.update#0", MAIN),
    (3_500, 4_500, "text:mask", MAIN),  # an unregistered string: NVTX_EVENTS.text, not textId
    (3_600, 3_800, "cache.mask_sizes", MAIN),
    (8_100, 9_000, "sample", MAIN),
    (9_100, 10_900, "sync", MAIN),
    (12_000, 20_000, "decode#1", MAIN),
    (18_000, 19_000, "sample", MAIN),
    (19_000, 19_900, "sync", MAIN),
    (0, 30_000, "worker", WORKER),  # another thread's range: neither a step nor in the main thread's ledger
]
MARKS = [(5_000, "marker", MAIN)]  # an NvtxMark: an instant, not a range

# (start, end, class, pid, tid, correlation, name)
CALLS = [
    (1_200, 1_500, RUNTIME, PID_A, MAIN, 1, "cudaLaunchKernel_v7000"),
    (2_100, 2_400, RUNTIME, PID_A, MAIN, 2, "cudaLaunchKernel_ptsz_v7000"),
    (5_000, 5_200, RUNTIME, PID_A, MAIN, 3, "cudaMemcpyAsync_v3020"),
    (5_300, 5_400, RUNTIME, PID_A, MAIN, 4, "cudaFooBar_v1"),  # a name nobody knows: not a launch
    (9_200, 10_800, RUNTIME, PID_A, MAIN, 5, "cudaStreamSynchronize_v3020"),
    (13_000, 13_500, RUNTIME, PID_A, MAIN, 6, "cudaGraphLaunch_v10000"),
    (16_000, 16_200, DRIVER, PID_A, WORKER, 7, "cuLaunchKernel"),  # launched from the other thread
    (100, 200, RUNTIME, PID_B, PID_B, 1, "cudaLaunchKernel_v7000"),  # process B reuses correlation id 1
]
# (start, end, device, stream, correlation, pid, name)
KERNELS = [
    (2_000, 4_000, 0, 7, 1, PID_A, "gemv_kernel"),
    (4_010, 5_000, 0, 7, 2, PID_A, "rms_norm_kernel"),
    (14_000, 15_000, 0, 7, 6, PID_A, "graph_kernel_a"),
    (15_100, 16_000, 0, 7, 6, PID_A, "graph_kernel_b"),
    (17_000, 17_500, 0, 7, 7, PID_A, "argmax_kernel"),
    (300, 400, 1, 7, 1, PID_B, "other_process_kernel"),
]
MEMCPYS = [(6_000, 6_500, 0, 7, 3, PID_A, 1)]  # copyKind 1 = HtoD
MEMSETS = [(7_000, 7_200, 0, 8, 4, PID_A)]


def build(path: Path) -> Path:
    """Write the hand-made export to `path` (replacing it)."""
    path.unlink(missing_ok=True)
    con = sqlite3.connect(str(path))
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    for sql in SCHEMA:
        con.execute(sql)
    con.execute(
        "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)",
        (SESSION_START_NS, "2023-11-14T22:13:20", "2023-11-14T22:13:20"),
    )
    for start, end, name, tid in NVTX:
        text, text_id = (name[5:], None) if name.startswith("text:") else (None, sid(name))
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, color, text, globalTid, textId, domainId) "
            "VALUES (?, ?, ?, 255, ?, ?, ?, 0)",
            (start, end, NVTX_PUSH_POP, text, global_tid(PID_A, tid), text_id),
        )
    for start, name, tid in MARKS:
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid) VALUES (?, NULL, ?, ?, ?)",
            (start, NVTX_MARK, sid(name), global_tid(PID_A, tid)),
        )
    for start, end, cls, pid, tid, corr, name in CALLS:
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, 0, NULL)",
            (start, end, cls, global_tid(pid, tid), corr, sid(name)),
        )
    for grid, (start, end, device, stream, corr, pid, name) in enumerate(KERNELS):
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, "
            "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, "
            "blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, "
            "localMemoryTotal, gridId) VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, "
            "0, ?)",
            (start, end, device, stream, corr, global_pid(pid), sid(name), sid(name), grid),
        )
    for start, end, device, stream, corr, pid, kind in MEMCPYS:
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
            "correlationId, globalPid, bytes, copyKind) VALUES (?, ?, ?, 1, ?, ?, ?, 4096, ?)",
            (start, end, device, stream, corr, global_pid(pid), kind),
        )
    for start, end, device, stream, corr, pid in MEMSETS:
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, "
            "correlationId, globalPid, value, bytes) VALUES (?, ?, ?, 1, ?, ?, ?, 0, 1024)",
            (start, end, device, stream, corr, global_pid(pid)),
        )
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
    con.commit()
    con.close()
    return path


def add_gpus(path: Path, *gpus: tuple[int, str, int, int, int, int]) -> Path:
    """Add TARGET_INFO_GPU to the export at `path`, a row a GPU: (id, name, totalMemory, smCount, computeMajor,
    computeMinor), the other columns as an H200's row holds them."""
    con = sqlite3.connect(str(path))
    con.execute(GPU_SCHEMA)
    for gpu in gpus:
        con.execute(
            "INSERT INTO TARGET_INFO_GPU (vmId, id, name, totalMemory, smCount, computeMajor, computeMinor, "
            "threadsPerWarp, maxThreadsPerBlock, maxShmemPerSm, maxWarpsPerSm, chipName) "
            "VALUES (281474976710656, ?, ?, ?, ?, ?, ?, 32, 1024, 233472, 64, 'GH100')",
            gpu,
        )
    con.commit()
    con.close()
    return path


def build_osrt_only(path: Path) -> Path:
    """An export of `nsys profile --trace=osrt` alone: StringIds, the session start, the GPUs and OS runtime calls
    (two `read` calls), no table probe reads events from."""
    path.unlink(missing_ok=True)
    con = sqlite3.connect(str(path))
    for sql in (SCHEMA[0], SCHEMA[1], OSRT_SCHEMA):
        con.execute(sql)
    con.execute("INSERT INTO StringIds VALUES (1, 'read')")
    for start in (1_000, 5_000):
        con.execute(
            "INSERT INTO OSRT_API VALUES (?, ?, 27, ?, 1, 0, 0, 1)", (start, start + 500, global_tid(PID_A, MAIN))
        )
    con.commit()
    con.close()
    return add_gpus(path, H200)


KEEP_TABLES = (
    "NVTX_EVENTS",
    "StringIds",
    "TARGET_INFO_SESSION_START_TIME",
    "ENUM_NSYS_EVENT_TYPE",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)


def strip(src: Path, dst: Path) -> None:
    """Keep the tables the parser reads (and only the strings they use); gzip the result."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work.sqlite"
        work.write_bytes(src.read_bytes())
        con = sqlite3.connect(str(work))
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for t in tables:
            if t not in KEEP_TABLES and not t.startswith("sqlite_"):
                con.execute(f"DROP TABLE {t}")
        used = {r[0] for r in con.execute("SELECT textId FROM NVTX_EVENTS WHERE textId IS NOT NULL")}
        for table, col in (
            ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"),
            ("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"),
            ("CUPTI_ACTIVITY_KIND_KERNEL", "shortName"),
        ):
            if table in tables:
                used |= {r[0] for r in con.execute(f"SELECT {col} FROM {table}")}
        con.execute(f"DELETE FROM StringIds WHERE id NOT IN ({','.join(str(i) for i in sorted(used)) or 'NULL'})")
        con.commit()
        con.execute("VACUUM")
        con.close()
        dst.write_bytes(gzip.compress(work.read_bytes(), compresslevel=9, mtime=0))


if __name__ == "__main__":
    if sys.argv[1:2] == ["hand"]:
        print(build(Path(sys.argv[2])))
    elif sys.argv[1:2] == ["strip"]:
        strip(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(__doc__)
