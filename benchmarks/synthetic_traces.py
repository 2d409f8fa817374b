"""Synthetic traces for the parser benchmark: a torch-2.13-style decode trace (any size, written as it is made),
ops nested thousands deep or side by side, and an Nsight Systems SQLite export.

The decode trace imitates what torch 2.13 writes for a CUDA decode loop under our annotations: one key a line,
`"ts": 5082905510131.070`, and per step the `decode#i` range (and its GPU copy), `forward`, per layer the
`cache.update#l` range and attention, groups of op -> child op -> cudaLaunchKernel -> kernel with their
`ac2g` flow arrows, then `sample` and `sync` with a cudaDeviceSynchronize.

    python -m benchmarks.synthetic_traces decode OUT.json STEPS EVENTS [--shapes]   # --shapes: record_shapes=True
    python -m benchmarks.synthetic_traces big OUT.json GB          # steps of 400 events until GB are written
    python -m benchmarks.synthetic_traces nested OUT.json N KIND   # or flat; KIND: ops, ranges or calls
    python -m benchmarks.synthetic_traces nsys OUT.sqlite EVENTS
    python -m benchmarks.synthetic_traces tiny OUT.json STEPS      # STEPS steps of one range and one op each
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "data"))
import make_nsys_fixture  # noqa: E402  (the CREATE TABLE text of a real export)

LAYERS = 4  # like the tiny preset
PID = TID = 5469
STREAM = 7
T0_NS = 5_082_905_510_131_070  # torch 2.13's ts scale: ~5e12 us, where a float64 cannot hold the ns
HEAD = (
    '{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "distributedInfo": {"rank": 0},\n'
    '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1790857026000000000,\n  "traceEvents": [\n'
)
TAIL = '\n  ],"traceName": "synthetic" }'


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _event(ph: str, cat: str, name: str, pid, tid, ts_ns: int, dur_ns: int | None, args: str) -> str:
    lines = [
        "  {",
        f'    "ph": "{ph}",',
        f'    "cat": "{cat}",',
        f'    "name": "{name}",',
        f'    "pid": {pid},',
        f'    "tid": {tid},',
        f'    "ts": {_us(ts_ns)}',
    ]
    if dur_ns is not None:
        lines[-1] += ","
        lines.append(f'    "dur": {_us(dur_ns)}')
    lines.append("    ,")
    lines.append(f'    "args": {{\n      {args}\n    }}')
    return "\n".join(lines) + "\n  }"


def _flow(ph: str, ident: int, pid, tid, ts_ns: int) -> str:
    extra = ',\n    "bp": "e"' if ph == "f" else ""
    return (
        f'  {{\n    "ph": "{ph}",\n    "id": {ident},\n    "pid": {pid},\n    "tid": {tid},\n'
        f'    "ts": {_us(ts_ns)},\n    "cat": "ac2g",\n    "name": "ac2g"{extra}\n  }}'
    )


# What torch 2.13 adds to a cpu_op's args under record_shapes=True, per op name (a decode step of the tiny preset).
SHAPES = {
    "aten::linear": '[[1, 1, 1024], [4096, 1024], [4096]], "Input type": ["float", "float", "float"], '
    '"Input Strides": [[1024, 1024, 1], [1024, 1], [1]], "Concrete Inputs": ["", "", ""]',
    "aten::addmm": '[[4096], [1, 1024], [1024, 4096], [], []], "Input type": ["float", "float", "float", "Scalar", '
    '"Scalar"], "Input Strides": [[1], [1024, 1], [1, 1024], [], []], "Concrete Inputs": ["", "", "", "1", "1"]',
    "aten::cat": '[[[1, 4, 17, 64], [1, 4, 1, 64]], []], "Input type": ["TensorList", "Scalar"], '
    '"Input Strides": [[[4352, 1088, 64, 1], [256, 64, 64, 1]], []], "Concrete Inputs": ["", "-2"]',
}


class _Writer:
    def __init__(self, seed: int, shapes: bool = False):
        self.shapes = shapes
        self.rnd = random.Random(seed)
        self.out: list[str] = []
        self.t = T0_NS  # host clock
        self.gpu_t = T0_NS  # the stream's clock: kernels queue behind each other
        self.ext = 1
        self.corr = 1

    def op(self, cat: str, name: str, ts: int, dur: int) -> None:
        args = f'"External id": {self.ext},"Record function id": 0, "Ev Idx": {self.ext}'
        if self.shapes and cat == "cpu_op":
            args += f',\n      "Input Dims": {SHAPES.get(name, SHAPES["aten::linear"])}'
        self.out.append(_event("X", cat, name, PID, TID, ts, dur, args))
        self.ext += 1

    def launch_group(self, name: str, kernel: str) -> None:
        """A top-level op, its child, the child's cudaLaunchKernel, the kernel, and the flow arrows."""
        rnd, t = self.rnd, self.t
        dur = rnd.randint(8_000, 20_000)
        self.op("cpu_op", name, t, dur)
        self.op("cpu_op", "aten::addmm" if name == "aten::linear" else name + "_out", t + 1_000, dur - 2_000)
        launch = t + 2_500
        args = f'"External id": {self.ext - 1},"cbid": 211, "correlation": {self.corr}'
        self.out.append(_event("X", "cuda_runtime", "cudaLaunchKernel", PID, TID, launch, 4_000, args))
        self.out.append(_flow("s", self.corr, PID, TID, launch))
        self.gpu_t = max(self.gpu_t, launch + 6_000)
        kd = rnd.randint(2_000, 9_000)
        args = (
            f'"queued": 0, "device": 0, "context": 1,"stream": {STREAM}, "correlation": {self.corr}, '
            '"registers per thread": 32, "shared memory": 0, "blocks per SM": 0.5, "warps per SM": 2.0, '
            '"grid": [66, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 3'
        )
        self.out.append(_event("X", "kernel", kernel, 0, STREAM, self.gpu_t, kd, args))
        self.out.append(_flow("f", self.corr, 0, STREAM, self.gpu_t))
        self.gpu_t += kd
        self.corr += 1
        self.t += dur + rnd.randint(1_000, 3_000)  # the Python between ops

    def range(self, name: str, ts: int, dur: int) -> None:
        self.op("user_annotation", name, ts, dur)

    def step(self, i: int, groups: int) -> str:
        """One decode step of about 6 * groups events, as text."""
        self.out = []
        start = self.t
        self.t += 3_000
        fwd = self.t
        per_layer = groups // LAYERS
        for layer in range(LAYERS):
            for g in range(per_layer):
                if g == per_layer // 2:
                    t = self.t
                    self.launch_group("aten::cat", "CatArrayBatchedCopy")
                    self.range(f"cache.update#{layer}", t - 500, self.t - t)
                elif g == per_layer // 2 + 1:
                    self.launch_group("aten::scaled_dot_product_attention", "flash_fwd_kernel")
                else:
                    self.launch_group("aten::linear", "gemv_kernel")
        self.range("forward", fwd, self.t - fwd)
        t = self.t
        self.launch_group("aten::argmax", "reduce_kernel")
        self.range("sample", t - 200, self.t - t + 200)
        t = self.t
        sync = max(self.gpu_t - t, 5_000)
        args = f'"cbid": 165, "correlation": {self.corr}'
        self.out.append(_event("X", "cuda_runtime", "cudaDeviceSynchronize", PID, TID, t + 500, sync, args))
        self.corr += 1
        self.t += sync + 1_000
        self.range("sync", t, self.t - t)
        decode = _event(
            "X", "user_annotation", f"decode#{i}", PID, TID, start, self.t - start, f'"External id": {self.ext}'
        )
        gpu = _event(
            "X",
            "gpu_user_annotation",
            f"decode#{i}",
            0,
            STREAM,
            start + 9_000,
            self.gpu_t - start - 9_000,
            f'"External id": {self.ext}',
        )
        self.ext += 1
        self.t += 2_000
        return ",\n".join([decode, *self.out, gpu])


def _groups(steps: int, events: int) -> int:
    fixed = 10 + 2 * LAYERS  # ranges per step outside the launch groups
    return max(LAYERS * 2, (events // steps - fixed) // 6)


def decode_steps(steps: int, events: int, seed: int = 0, shapes: bool = False) -> Iterator[str]:
    """The text of each of `steps` decode steps, about `events` events in all."""
    w = _Writer(seed, shapes)
    groups = _groups(steps, events)
    for i in range(steps):
        yield w.step(i, groups)


def make_trace(steps: int, events: int = 400_000, seed: int = 0, shapes: bool = False) -> bytes:
    """A torch-2.13-style chrome trace with `steps` decode steps and about `events` events in all (with the
    cpu_ops' input shapes, as record_shapes=True writes them, when `shapes`)."""
    return (HEAD + ",\n".join(decode_steps(steps, events, seed, shapes)) + TAIL).encode()


def write_big_trace(path: Path, gb: float, events_per_step: int = 400) -> int:
    """Steps of ~`events_per_step` events written one by one until the file passes `gb` GB; returns the steps."""
    w = _Writer(0)
    groups = _groups(1, events_per_step)
    target, written, i = gb * 1e9, 0, 0
    with open(path, "w") as f:
        f.write(HEAD)
        while written < target:
            text = (",\n" if i else "") + w.step(i, groups)
            written += f.write(text)
            i += 1
        f.write(TAIL)
    return i


NESTED_KINDS = {  # what nests: its category and the names it cycles through
    "ops": ("cpu_op", ["aten::mm", "aten::scaled_dot_product_attention", "aten::linear"]),
    "ranges": ("user_annotation", ["mask", "cache.seq_length", "forward", "cache.update#0"]),
    "calls": ("cuda_runtime", ["cudaLaunchKernel", "cudaStreamSynchronize"]),
}


def nested_trace(n: int, nested: bool, kind: str = "ops") -> str:
    """One decode step holding `n` events of `kind`, each inside the previous one (`nested`) or one after another."""
    cat, names = NESTED_KINDS[kind]
    events = [{"ph": "X", "cat": "user_annotation", "name": "decode#0", "pid": 1, "tid": 1, "ts": 0, "dur": 4 * n + 2}]
    for i in range(n):
        ts, dur = (1 + i, 4 * n - 2 * i) if nested else (1 + 4 * i, 3)
        events.append({"ph": "X", "cat": cat, "name": names[i % len(names)], "pid": 1, "tid": 1, "ts": ts, "dur": dur})
    return json.dumps({"traceEvents": events})


def write_tiny_steps(path: Path, steps: int) -> None:
    """`steps` decode steps of ~190 bytes each, written as they are made: a `decode#i` range holding one cpu_op,
    the shape of issue 28's 190 MB trace of a million steps (9.4 GiB and 118 s before)."""
    with open(path, "w") as f:
        f.write('{"traceEvents": [\n')
        for i in range(steps):
            ts, sep = 10 * i, ",\n" if i else ""
            f.write(
                f'{sep}{{"ph": "X", "cat": "user_annotation", "name": "decode#{i}", "pid": 1, '
                f'"tid": 1, "ts": {ts}.000, "dur": 8.000}},\n{{"ph": "X", "cat": "cpu_op", "name": "aten::add", '
                f'"pid": 1, "tid": 1, "ts": {ts + 1}.000, "dur": 5.000}}'
            )
        f.write("\n]}\n")


def make_nsys_export(path: Path, events: int) -> None:
    """An export of `events` rows: per group a cudaLaunchKernel and its kernel, and an NVTX range every 2 groups.
    Rows are made by SQLite itself (a recursive CTE), so a million take about a second."""
    path.unlink(missing_ok=True)
    con = sqlite3.connect(str(path))
    for sql in make_nsys_fixture.SCHEMA:
        con.execute(sql)
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, '', '')")
    strings = [(1, "cudaLaunchKernel_v7000"), (2, "gemv_kernel"), (3, "decode#0"), (4, "forward")]
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings)
    groups = events // 5  # 2 launches, 2 kernels, 1 NVTX range
    gtid, gpid = make_nsys_fixture.global_tid(PID, TID), make_nsys_fixture.global_pid(PID)

    def rows(n: int) -> str:
        return f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {n - 1}) "

    con.execute(
        rows(2 * groups) + "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME "
        f"SELECT 1000 * i, 1000 * i + 400, 0, {gtid}, i, 1, 0, NULL FROM n"
    )
    con.execute(
        rows(2 * groups) + "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, "
        "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, "
        "blockY, blockZ, staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId) "
        f"SELECT 1000 * i + 500, 1000 * i + 900, 0, 1, {STREAM}, i, {gpid}, 2, 2, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, "
        "0, i FROM n"
    )
    con.execute(
        rows(groups) + "INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid) "
        f"SELECT 2000 * i, 2000 * i + 1900, 59, 4, {gtid} FROM n"
    )
    con.commit()
    con.close()


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = p.add_subparsers(dest="what", required=True)

    def kind(name: str, help: str) -> argparse.ArgumentParser:
        sub = kinds.add_parser(name, help=help)
        sub.add_argument("out", type=Path, help="the file to write")
        return sub

    decode = kind("decode", "a decode trace of STEPS steps, ~EVENTS events in all")
    decode.add_argument("steps", type=int)
    decode.add_argument("events", type=int)
    decode.add_argument("--shapes", action="store_true", help="with the cpu_ops' input shapes (record_shapes=True)")
    kind("big", "steps of 400 events until GB gigabytes are written").add_argument("gb", type=float)
    for shape in ("nested", "flat"):
        one = kind(shape, f"N events {shape} (each inside the last, or side by side)")
        one.add_argument("n", type=int)
        one.add_argument("kind", choices=("ops", "ranges", "calls"))
    kind("nsys", "an Nsight Systems SQLite export of ~EVENTS events").add_argument("events", type=int)
    kind("tiny", "STEPS steps of one range and one op each").add_argument("steps", type=int)
    args = p.parse_args(argv)
    if args.what == "decode":
        args.out.write_bytes(make_trace(args.steps, args.events, shapes=args.shapes))
    elif args.what == "big":
        print(write_big_trace(args.out, args.gb))
    elif args.what == "tiny":
        write_tiny_steps(args.out, args.steps)
    elif args.what in ("nested", "flat"):
        args.out.write_text(nested_trace(args.n, args.what == "nested", args.kind))
    else:
        make_nsys_export(args.out, args.events)


if __name__ == "__main__":
    main(sys.argv[1:])
