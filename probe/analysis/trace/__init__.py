"""The event table every analysis reads, and the readers that fill it (see `table` for every column).

`load_trace(path)` reads torch.profiler chrome JSON (`.json`, `.json.gz`) and Nsight Systems SQLite exports
(`.sqlite`, or gzipped), deciding by content, not by suffix. Chrome JSON is streamed (`chrome`, `pieces`): memory
follows the event table, not the size of the document. Only regular files are read, gzip within a limit (`files`).
"""

from __future__ import annotations

import os
from pathlib import Path

from probe.analysis.records import files
from probe.analysis.trace.chrome import decimal_text_to_ns, foreign_rows, read_chrome
from probe.analysis.trace.nsys import read_nsys
from probe.analysis.trace.table import (
    COLUMNS,
    COPY_KINDS,
    DEVICES_NAMED_IN,
    GPU_OP_KINDS,
    GPU_UNRECORDED_WHY,
    GRAPH_LAUNCH,
    GRAPH_LAUNCH_NAMES,
    LAUNCH,
    LAUNCH_NAMES,
    PROFILER_STEP_PREFIX,
    DeviceInfo,
    Kind,
    Shapes,
    Trace,
    TraceFormat,
    api_base_name,
    capture_side,
    is_copy_call,
    is_graph_instantiate,
)
from probe.errors import ProbeError


def load_trace(path: str | Path) -> Trace:
    """Read a torch.profiler chrome trace (.json / .json.gz) or an nsys SQLite export (.sqlite, or gzipped)
    into a `Trace`. Raises ProbeError, with a one-line reason, for a missing, empty, truncated or foreign file,
    and for anything but a regular file (a folder, a FIFO, a device), before reading a byte of it.
    """
    p = Path(path)
    with files.open_regular(p) as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise ProbeError(f"{p}: empty file")
    kind = files.sniff(p)
    if kind == files.NSYS_REPORT:
        raise ProbeError(f"{p}: an Nsight Systems report; export it first: nsys export --type sqlite {p}")
    if kind == files.NSYS_SQLITE:
        return read_nsys(p)
    return read_chrome(p)


__all__ = [
    "COLUMNS",
    "COPY_KINDS",
    "DEVICES_NAMED_IN",
    "GPU_OP_KINDS",
    "GPU_UNRECORDED_WHY",
    "GRAPH_LAUNCH",
    "GRAPH_LAUNCH_NAMES",
    "LAUNCH",
    "LAUNCH_NAMES",
    "PROFILER_STEP_PREFIX",
    "DeviceInfo",
    "Kind",
    "Shapes",
    "Trace",
    "TraceFormat",
    "api_base_name",
    "capture_side",
    "is_copy_call",
    "is_graph_instantiate",
    "decimal_text_to_ns",
    "foreign_rows",
    "load_trace",
    "read_chrome",
    "read_nsys",
]
