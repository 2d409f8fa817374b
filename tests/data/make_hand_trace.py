"""The hand-written chrome trace: a prefill and two decode steps of an imaginary CUDA engine.

    python tests/data/make_hand_trace.py      # rewrites hand_decode.trace.json.gz next to this file

Every event is typed below in ns from T0; the file spells them the way torch 2.13 does (microseconds with
three decimals, one key a line). T0 is 4497900028327.853 us on purpose: there a float64 multiplied by 1000
and rounded lands 1 ns off, so a parser that goes through floats gets the first event wrong. tests/test_ledger.py
works every figure out by hand from this table.
"""

from __future__ import annotations

import gzip
from pathlib import Path

T0_NS = 4_497_900_028_327_853
PID = TID = 100
GPU_PID, STREAM = 0, 7

# (cat, name, start, end, args) with start/end in ns from T0; host events on PID/TID, GPU events on stream 7.
HOST = [
    ("user_annotation", "ProfilerStep#3", 0, 260_000, {}),  # ours win over ProfilerStep when both exist
    # prefill [0, 100 us]
    ("user_annotation", "prefill", 0, 100_000, {}),
    ("user_annotation", "forward", 1_000, 80_000, {}),
    ("cpu_op", "aten::embedding", 2_000, 12_000, {}),
    ("cuda_runtime", "cudaLaunchKernel", 4_000, 9_000, {"correlation": 1}),
    ("user_annotation", "cache.seq_length", 13_000, 15_000, {}),
    ("user_annotation", "mask", 16_000, 26_000, {}),
    ("user_annotation", "cache.mask_sizes", 18_000, 20_000, {}),
    ("user_annotation", "cache.update#0", 30_000, 40_000, {}),
    ("cpu_op", "aten::cat", 31_000, 39_000, {}),
    ("cuda_runtime", "cudaLaunchKernel", 33_000, 36_000, {"correlation": 2}),
    ("cpu_op", "aten::scaled_dot_product_attention", 45_000, 70_000, {}),
    ("cpu_op", "aten::_flash_attention_forward", 47_000, 68_000, {}),
    ("cuda_runtime", "cudaLaunchKernel", 50_000, 55_000, {"correlation": 3}),
    ("user_annotation", "sample", 81_000, 90_000, {}),
    ("cpu_op", "aten::argmax", 82_000, 89_000, {}),
    ("cuda_runtime", "cudaLaunchKernel", 84_000, 86_000, {"correlation": 4}),
    ("user_annotation", "sync", 91_000, 99_000, {}),
    ("cuda_runtime", "cudaDeviceSynchronize", 92_000, 98_000, {"correlation": 5}),
    # decode#0 [110, 200 us]
    ("user_annotation", "decode#0", 110_000, 200_000, {}),
    ("user_annotation", "forward", 111_000, 170_000, {}),
    ("cpu_op", "aten::linear", 112_000, 130_000, {}),
    ("cpu_op", "aten::addmm", 113_000, 129_000, {}),
    ("cuda_runtime", "cudaLaunchKernel", 115_000, 120_000, {"correlation": 6}),
    ("cuda_runtime", "cudaMemcpyAsync", 121_000, 123_000, {"correlation": 7}),
    ("user_annotation", "cache.update#0", 135_000, 150_000, {}),
    ("cuda_runtime", "cudaMemsetAsync", 136_000, 137_000, {"correlation": 8}),
    ("cpu_op", "aten::copy_", 140_000, 148_000, {}),
    ("cuda_runtime", "cudaGraphLaunch", 155_000, 165_000, {"correlation": 9}),
    ("user_annotation", "sample", 171_000, 180_000, {}),
    ("cpu_op", "aten::argmax", 172_000, 178_000, {}),
    ("user_annotation", "sync", 181_000, 199_000, {}),
    ("cuda_runtime", "cudaStreamSynchronize", 182_000, 198_000, {"correlation": 10}),
    # decode#1 [210, 260 us], the last step
    ("user_annotation", "decode#1", 210_000, 260_000, {}),
    ("cpu_op", "aten::add", 212_000, 222_000, {}),
    ("cuda_runtime", "cudaLaunchKernel", 214_000, 218_000, {"correlation": 11}),
    ("cuda_runtime", "cudaFooBar", 224_000, 226_000, {"correlation": 12}),  # unknown name, still a launcher
    ("cuda_driver", "cuLaunchKernel", 227_000, 229_000, {"correlation": 13}),
    ("user_annotation", "sample", 240_000, 250_000, {}),
    ("user_annotation", "sync", 251_000, 259_000, {}),
]
GPU = [
    ("kernel", "embedding_kernel", 20_000, 30_000, {"correlation": 1}),
    ("kernel", "cat_kernel", 40_000, 45_000, {"correlation": 2}),
    ("kernel", "flash_fwd_kernel", 60_000, 90_000, {"correlation": 3}),
    ("kernel", "argmax_kernel", 92_000, 95_000, {"correlation": 4}),
    ("gpu_user_annotation", "decode#0", 125_000, 176_000, {}),  # the GPU's copy of a range: never a step
    ("kernel", "gemv_kernel", 125_000, 140_000, {"correlation": 6}),
    ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 141_000, 143_000, {"correlation": 7}),
    ("gpu_memset", "Memset (Device)", 144_000, 146_000, {"correlation": 8}),
    ("kernel", "graph_kernel_a", 166_000, 170_000, {"correlation": 9}),
    ("kernel", "graph_kernel_b", 170_010, 176_000, {"correlation": 9}),
    ("kernel", "add_kernel", 230_000, 235_000, {"correlation": 11}),
    ("kernel", "tiny_kernel", 236_000, 236_020, {"correlation": 12}),
    ("Kernel", "old_style_kernel", 240_000, 250_000, {"correlation": 13}),  # torch < 1.9 spelled it "Kernel"
    ("kernel", "orphan_kernel", 300_000, 310_000, {"correlation": 999}),  # its launch is not in the trace
]


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _event(cat: str, name: str, pid: int, tid: int, start: int, end: int, args: dict) -> str:
    arg_text = ", ".join(f'"{k}": {v}' for k, v in args.items())
    return (
        f'  {{\n    "ph": "X",\n    "cat": "{cat}",\n    "name": "{name}",\n    "pid": {pid},\n'
        f'    "tid": {tid},\n    "ts": {_us(T0_NS + start)},\n    "dur": {_us(end - start)}\n    ,\n'
        f'    "args": {{\n      {arg_text}\n    }}\n  }}'
    )


def render() -> bytes:
    events = [_event(cat, name, PID, TID, s, e, a) for cat, name, s, e, a in HOST]
    events += [
        _event(cat, name, GPU_PID, STREAM, s, e, {"device": GPU_PID, "stream": STREAM, **a})
        for cat, name, s, e, a in GPU
    ]
    # What the parser must skip: metadata, an instant and a flow arrow pair.
    events.insert(
        0,
        f'  {{\n    "ph": "M", "name": "process_name", "ts": {_us(T0_NS)}, "pid": {PID}, "tid": 0,\n'
        '    "args": {"name": "python"}\n  }',
    )
    events.append(
        f'  {{\n    "ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "",\n'
        f'    "ts": {_us(T0_NS + 320_000)}\n  }}'
    )
    events.append(
        f'  {{"ph": "s", "id": 1, "pid": {PID}, "tid": {TID}, "ts": {_us(T0_NS + 4_000)}, '
        '"cat": "ac2g", "name": "ac2g"}'
    )
    events.append(
        f'  {{"ph": "f", "id": 1, "pid": {GPU_PID}, "tid": {STREAM}, "ts": {_us(T0_NS + 20_000)}, '
        '"cat": "ac2g", "name": "ac2g", "bp": "e"}'
    )
    head = '{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "baseTimeNanoseconds": 1700000000000000000,\n'
    return (head + '  "traceEvents": [\n' + ",\n".join(events) + '\n  ],\n  "traceName": "hand" }').encode()


if __name__ == "__main__":
    out = Path(__file__).with_name("hand_decode.trace.json.gz")
    out.write_bytes(gzip.compress(render(), compresslevel=9, mtime=0))
    print(out)
