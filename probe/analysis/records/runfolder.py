"""A run folder's files: what probe writes into one, and the rule for a folder that already holds some.

A sweep into a folder that holds results would replace results.json and leave the old run's report, telemetry and
traces beside the new cells. So such a folder is refused (`claim`), unless the user says what to do with it:
`resume` continues it (the sweep keeps its finished cells and runs the others; probe.capture.sweep checks that the
configuration matches), `force` clears probe's own files first. Only the files named here are ever removed: a
user's own file in the folder stays, and so does every folder that still holds one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from probe.analysis.records.results import CELLS_CSV, CELLS_FILE, RESULTS_FILE
from probe.analysis.records.telemetry import TELEMETRY_FILE
from probe.errors import ProbeError

REPORT_FILE, REPORT_MD = "report.json", "report.md"  # probe run's answer: written as each part finishes
FILES = (RESULTS_FILE, CELLS_FILE, CELLS_CSV, TELEMETRY_FILE, REPORT_FILE, REPORT_MD)
NEXT_GLOB = "next-*"  # probe run's sweeps of the write-ups' closing predictions: next-static, next-batched
TRACES = "traces"  # probe run's profiled traces
# What probe profile writes into traces/: the trace and its sidecars, and Nsight Systems' report and export.
TRACE_SUFFIXES = (".trace.json.gz", ".meta.json", ".telemetry.parquet", ".nsys-rep", ".sqlite")


def check_writable(folder: Path) -> None:
    """Fail in one line, before any work, when `folder` cannot be written, or when its name is not UTF-8 (the OS
    takes any bytes, but no results file, Parquet writer or history can hold the name, so a finished sweep would be
    lost at its first save). The test file is created exclusively (tempfile), so nothing already at a path there,
    such as a planted symlink, is ever written through."""
    try:
        str(folder).encode("utf-8")
    except UnicodeEncodeError:
        raise ProbeError(f"output folder {os.fsencode(folder)!r}: its name is not UTF-8; choose another") from None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix=".probe-write-test."):
            pass
    except OSError as e:
        raise ProbeError(f"cannot write to output folder {folder}: {e.strerror or e}") from None


def held(folder: Path) -> list[Path]:
    """probe's own files in `folder`, its next-* sweeps and its traces/ (regular files only, symlinks not
    followed), in a stable order."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [folder / name for name in FILES]
    for sub in sorted(folder.glob(NEXT_GLOB)):
        if sub.is_dir() and not sub.is_symlink():
            found += [sub / name for name in FILES]
    traces = folder / TRACES
    if traces.is_dir() and not traces.is_symlink():
        found += sorted(f for f in traces.iterdir() if f.name.endswith(TRACE_SUFFIXES))
    return [f for f in found if f.is_file() and not f.is_symlink()]


def clear(folder: Path) -> list[Path]:
    """Remove probe's own files from `folder` (and the next-* and traces/ folders they leave empty); returns
    what was removed. Nothing else is touched."""
    gone = held(folder)
    for f in gone:
        f.unlink()
    for sub in {f.parent for f in gone if f.parent != Path(folder)}:
        if not any(sub.iterdir()):
            sub.rmdir()
    return gone


def claim(folder: Path, resume: bool = False, force: bool = False) -> None:
    """Make `folder` ready for a sweep: nothing to do when it holds no results; with `force`, clear probe's files;
    with `resume`, keep them (there must be a results.json to continue). Otherwise a one-line ProbeError."""
    if resume and force:
        raise ProbeError("--resume and --force exclude each other: continue the folder, or replace what it holds")
    found = held(folder)
    if not found:
        return
    if force:
        clear(folder)
    elif resume:
        if not (Path(folder) / RESULTS_FILE).is_file():
            raise ProbeError(f"cannot resume {folder}: it holds no {RESULTS_FILE} (use --force to replace its files)")
    else:
        names = ", ".join(str(f.relative_to(folder)) for f in found[:4]) + (", ..." if len(found) > 4 else "")
        raise ProbeError(
            f"{folder} already holds results ({names}): --resume to finish that sweep, --force to replace them"
        )
