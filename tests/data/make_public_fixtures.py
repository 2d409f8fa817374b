"""Copy the public GPU traces from ../shared/traces/public into tests/data, stripped to fit in git.

    python tests/data/make_public_fixtures.py [SOURCE_DIR]

Small files are copied byte for byte. Files over 300 KB are rewritten with only what the parser reads, in
steps, stopping at the first that fits: (1) flow arrows and instant events go, each event's `args` keeps only
`KEEP_ARGS` (the joins, and the recorded shapes and copy sizes), and only the trace-level keys the parser or a reader
needs stay (the recording job's user, host and scheduler fields go); (2) `python_function` events go too;
(3) what no reference figure depends on goes: cpu_op events, and runtime calls that are neither kernel
launches nor the launcher of any GPU op. Kernels, memcpy, memset, launches, the step ranges and the engine
markers always stay. Every number is written back as the exact text it had.
See PROVENANCE.md for what each file is and where it came from.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).parent
DEFAULT_SOURCE = HERE.parent.parent.parent / "shared" / "traces" / "public"
LIMIT = 300_000
# what the parser reads of an event's args: the joins, and the shapes and copy sizes the rooflines use
KEEP_ARGS = (
    "correlation",
    "External id",
    "stream",
    "device",
    "Input Dims",
    "Input type",
    "Concrete Inputs",
    "bytes",
    "kind",
)
KEEP_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "distributedInfo",
    "displayTimeUnit",
    "baseTimeNanoseconds",
    "traceEvents",
    "traceName",
)
DROP_CATS = ("python_function",)
LAUNCHES = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "hipGraphLaunch",
)
GPU_CATS = ("kernel", "Kernel", "gpu_memcpy", "gpu_memset")


class Raw(str):
    """A number's original text, written back verbatim."""


def dump(obj) -> str:
    if isinstance(obj, Raw):
        return str(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(dump(v) for v in obj) + "]"
    return json.dumps(obj)


def strip(src: Path, dst: Path) -> None:
    doc = json.loads(gzip.decompress(src.read_bytes()), parse_float=Raw, parse_int=Raw)
    events = []
    for e in doc["traceEvents"]:
        if e.get("ph") in ("s", "f", "i"):
            continue
        if isinstance(e.get("args"), dict):
            e["args"] = {k: v for k, v in e["args"].items() if k in KEEP_ARGS}
        events.append(e)
    doc = {k: v for k, v in doc.items() if k in KEEP_KEYS}
    for keep in (events, [e for e in events if e.get("cat") not in DROP_CATS], None):
        doc["traceEvents"] = keep if keep is not None else _figures_only(doc["traceEvents"])
        data = gzip.compress(dump(doc).encode(), compresslevel=9, mtime=0)
        if len(data) <= LIMIT:
            break
    dst.write_bytes(data)


def _figures_only(events: list[dict]) -> list[dict]:
    """What the reference figures depend on: GPU ops, their launchers, launches, and the step ranges."""
    launchers = {
        str(e["args"]["correlation"]) for e in events if e.get("cat") in GPU_CATS and "correlation" in e.get("args", {})
    }
    keep = []
    for e in events:
        cat = e.get("cat")
        if e.get("ph") in ("s", "f") or cat == "cpu_op":
            continue
        if (
            cat in ("cuda_runtime", "cuda_driver")
            and e.get("name") not in LAUNCHES
            and str(e.get("args", {}).get("correlation")) not in launchers
        ):
            continue
        keep.append(e)
    return keep


def main(source: Path) -> None:
    for src in sorted(source.glob("*.trace.json.gz")):
        dst = HERE / src.name
        if src.stat().st_size <= LIMIT:
            shutil.copyfile(src, dst)
        else:
            strip(src, dst)
        print(f"{dst.name}: {dst.stat().st_size / 1000:.0f} KB")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_SOURCE)
