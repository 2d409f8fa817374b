"""Per-step ledgers: hand-checked numbers, the public reference figures, brute-force cross-checks, our own
CPU traces (torch.profiler and nsys) and the interval primitives underneath."""

from __future__ import annotations

import gzip
import json
import os
import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from probe.analysis.intervals import assign, containers, covered, merge, nesting, union_by_group
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.host import MECHANISM, PURPOSE
from probe.analysis.ledger.steps import find_steps
from probe.analysis.ledger.timeline import step_events
from probe.analysis.ledger.types import AnalyzeOptions
from probe.analysis.trace import Kind, load_trace
from probe.errors import ProbeError
from tests.conftest import DATA, IN_CI, run_probe, shared_trace
from tests.data import make_nsys_fixture

HAND = DATA / "hand_decode.trace.json.gz"

# --- the hand-written chrome trace (tests/data/make_hand_trace.py), every figure worked out by hand -------


@pytest.fixture(scope="module")
def hand():
    return analyze(load_trace(HAND))


def test_hand_steps_are_ours_not_the_profiler_step(hand):
    assert [(s.name, s.kind, s.index, s.position) for s in hand.steps] == [
        ("prefill", "prefill", 0, 0),
        ("decode#0", "decode", 0, 1),
        ("decode#1", "decode", 1, 2),
    ]
    assert [(s.start_us, s.wall_us) for s in hand.steps] == [(0.0, 100.0), (110.0, 90.0), (210.0, 50.0)]
    assert {(s.pid, s.tid) for s in hand.steps} == {(100, 100)}


def test_hand_prefill(hand):
    s = hand.steps[0]
    # Launches: the four cudaLaunchKernel (corr 1-4); cudaDeviceSynchronize is a runtime call, not a launch.
    assert (s.launches, s.graph_launches, s.runtime_calls, s.kernels, s.gpu_ops) == (4, 0, 5, 4, 4)
    # Busy: embedding 20-30 + cat 40-45 + flash 60-90 + argmax 92-95 us, disjoint: 10 + 5 + 30 + 3 = 48 us.
    assert s.gpu_busy_ns == 48_000
    # Idle on stream 7: cat waits 10 us after embedding (its launch at 33 > 30: host), flash 15 us (launch 50
    # > 45: host), argmax 2 us (launch 84 < 90: not host, under 30 us: kernel wait). embedding is the first.
    # The GPU window runs from embedding's start to argmax's end: 20-95 us; busy 48 of its 75 us.
    assert (s.gpu_start_ns, s.gpu_window_ns, s.busy_fraction) == (20_000, 75_000, 48 / 75)
    assert (s.idle_host_wait_ns, s.idle_kernel_wait_ns, s.idle_other_ns, s.gpu_idle_ns) == (25_000, 2_000, 0, 27_000)
    # Launch calls 5 + 3 + 5 + 2 us; delays launch -> kernel 16, 7, 10, 8 us: p50 9, p90 10 + 0.7 x 6 = 14.2 (numpy's
    # linear interpolation); one kernel under 5 us (argmax, 3 us; cat is 5 us exactly).
    assert (s.launch_cpu_ns, s.launch_delay_p50_ns, s.short_kernels) == (15_000, 9_000, 1)
    assert s.launch_delay_p90_ns == pytest.approx(14_200, abs=1e-6)
    # By purpose: sync 91-99 (the cudaDeviceSynchronize inside adds nothing), sample 81-90, cache.update 30-40,
    # seq_length 13-15, mask_sizes 18-20, mask 16-26 less mask_sizes = 8, sdpa 45-70, and the rest of the model
    # 100 - 64 = 36 us (embedding 2-12, and 26 us that no event covers).
    assert s.purpose_ns == {
        "sync": 8_000,
        "data": 0,
        "communication": 0,
        "sample": 9_000,
        "cache_update": 10_000,
        "cache_seq_length": 2_000,
        "cache_mask_sizes": 2_000,
        "mask": 8_000,
        "attention": 25_000,
        "model": 36_000,
    }
    assert s.cache_ns == 14_000
    # By mechanism, the innermost event: the four launch calls 5 + 3 + 5 + 2 = 15; the ops' self time embedding
    # 10 - 5, cat 8 - 3, argmax 7 - 2, flash 21 - 5, sdpa 25 - 21: 5 + 5 + 5 + 16 + 4 = 35; the synchronize 6;
    # no Python frames; 100 - 56 = 44 us that no op, call or frame covers (ranges are labels, not code).
    assert s.mechanism_ns == {
        "python": 0,
        "dispatch": 35_000,
        "launch": 15_000,
        "runtime": 0,
        "sync_wait": 6_000,
        "profiler": 0,
        "unattributed": 44_000,
    }
    # The synchronize 92-98 waited while argmax ran 92-95, then the call returned: nothing unseen.
    assert [(x.call, x.frame, x.wait_ns, x.count) for x in s.sync_sites] == [("cudaDeviceSynchronize", None, 6_000, 1)]
    assert s.external_wait_ns == 0
    assert (s.top_level_ops, s.cpu_ops) == (4, 5)
    assert s.op_counts == {
        "aten::embedding": 1,
        "aten::cat": 1,
        "aten::scaled_dot_product_attention": 1,
        "aten::argmax": 1,
    }
    # Dispatch by op (torch's Self CPU: less child ops and the launch calls inside), ties by name.
    assert [(o.name, o.self_ns, o.calls) for o in s.top_ops] == [
        ("aten::_flash_attention_forward", 16_000, 1),
        ("aten::argmax", 5_000, 1),
        ("aten::cat", 5_000, 1),
        ("aten::embedding", 5_000, 1),
        ("aten::scaled_dot_product_attention", 4_000, 1),
    ]
    # HTA's launch delay, from each call's end, clipped at 0: 20 - 9, 40 - 36, 60 - 55, 92 - 86 = 11, 4, 5, 6 us
    # (no memcpy or memset here): p50 5.5, p90 6 + 0.7 x 5 = 9.5.
    assert s.launch_delay_from_end_p50_ns == 5_500
    assert s.launch_delay_from_end_p90_ns == pytest.approx(9_500, abs=1e-6)


def test_hand_decode0_graph_launch_memcpy_memset(hand):
    s = hand.steps[1]
    # One cudaLaunchKernel, one cudaGraphLaunch replaying two kernels; memcpy and memset count as GPU ops.
    assert (s.launches, s.graph_launches, s.runtime_calls, s.kernels, s.gpu_ops) == (1, 1, 5, 3, 5)
    # gemv 125-140, memcpy 141-143, memset 144-146, graph a 166-170, graph b 170.010-176: 15+2+2+4+5.99 us.
    assert s.gpu_busy_ns == 28_990
    # The GPU window is gemv's start to graph b's end, 125-176 us: the 30 us before gemv belong to no step's GPU
    # window. In it: memcpy 1 us and memset 1 us after the op before, graph a 20 us (host: the graph was launched
    # at 155 > 146), graph b 10 ns after graph a; all but graph a under 30 us: kernel wait. 20 + 2.01 = 51 - 28.99.
    assert (s.gpu_start_ns, s.gpu_window_ns, s.gpu_idle_ns) == (125_000, 51_000, 22_010)
    assert (s.idle_host_wait_ns, s.idle_kernel_wait_ns, s.idle_other_ns) == (20_000, 2_010, 0)
    # Launch calls: cudaLaunchKernel 5 us + cudaGraphLaunch 10 us; the one direct kernel launch waited 10 us
    # (graph replays are left out); graph a (4 us) is the one kernel under 5 us.
    assert (s.launch_cpu_ns, s.launch_delay_p50_ns, s.launch_delay_p90_ns, s.short_kernels) == (
        15_000,
        10_000,
        10_000,
        1,
    )
    assert s.kernels_by_category == {"gemm": 15_000, "other": 9_990, "memcpy": 2_000, "memset": 2_000}
    # By purpose: sync 181-199 (cudaStreamSynchronize inside), sample 171-180, cache.update 135-150 (it holds the
    # memset call and copy_), and the rest 90 - 42 = 48 us (linear 112-130, the graph launch 155-165, 20 us bare).
    assert s.purpose_ns == {
        "sync": 18_000,
        "data": 0,
        "communication": 0,
        "sample": 9_000,
        "cache_update": 15_000,
        "cache_seq_length": 0,
        "cache_mask_sizes": 0,
        "mask": 0,
        "attention": 0,
        "model": 48_000,
    }
    # By mechanism: launch calls 5 + the graph launch 10; other runtime calls: memcpy 2 + memset 1; dispatch:
    # linear 18 - addmm 16 = 2, addmm 16 - 5 - 2 = 9, copy_ 8, argmax 6; the stream synchronize 16; 90 - 59 = 31.
    assert s.mechanism_ns == {
        "python": 0,
        "dispatch": 25_000,
        "launch": 15_000,
        "runtime": 3_000,
        "sync_wait": 16_000,
        "profiler": 0,
        "unattributed": 31_000,
    }
    # The synchronize (182-198) began after the GPU's last op ended (176): no op of the trace ran while it
    # waited, so all 16 us are unseen work.
    assert s.external_wait_ns == 16_000
    assert s.op_counts == {"aten::linear": 1, "aten::copy_": 1, "aten::argmax": 1}
    assert [(o.name, o.self_ns) for o in s.top_ops] == [
        ("aten::addmm", 9_000),
        ("aten::copy_", 8_000),
        ("aten::argmax", 6_000),
        ("aten::linear", 2_000),
    ]


def test_kernel_wait_threshold_is_a_flag():
    """At HTA's documented 30 ns (what probe used before it matched HTA's effective 30 us), the hand trace's 1-4 us
    gaps are `other` and only the 10 ns one before graph b is kernel wait."""
    a = analyze(load_trace(HAND), AnalyzeOptions.parse(kernel_wait_us=0.03))
    assert [(s.idle_host_wait_ns, s.idle_kernel_wait_ns, s.idle_other_ns) for s in a.steps] == [
        (25_000, 0, 2_000),
        (20_000, 10, 2_000),
        (0, 0, 4_980),
    ]
    with pytest.raises(ProbeError, match="--kernel-wait-us"):
        AnalyzeOptions.parse(kernel_wait_us=-1)


def test_hand_last_step_is_kept_with_unknown_runtime_and_old_kernel_category(hand):
    s = hand.steps[2]
    # cudaLaunchKernel and cuLaunchKernel (cuda_driver) are launches, and so is cudaFooBar: a kernel joins it on
    # correlation (Trace.launch_kind), whatever its name; the "Kernel"-category one is this step's too.
    assert (s.launches, s.graph_launches, s.runtime_calls, s.kernels, s.gpu_ops) == (3, 0, 3, 3, 3)
    assert s.gpu_busy_ns == 5_000 + 20 + 10_000
    # The window is add's start to old_style's end, 230-250 us; tiny waits 1 us and old_style 3.98 us: kernel wait.
    assert (s.gpu_window_ns, s.idle_host_wait_ns, s.idle_kernel_wait_ns, s.idle_other_ns) == (20_000, 0, 4_980, 0)
    # Launch calls cudaLaunchKernel 4 us + cudaFooBar 2 us + cuLaunchKernel 2 us; delays 16, 12 (tiny, launched by
    # cudaFooBar) and 13 us: p50 13, p90 13 + 0.8 x 3 = 15.4; tiny is under 5 us.
    assert (s.launch_cpu_ns, s.launch_delay_p50_ns, s.short_kernels) == (8_000, 13_000, 1)
    assert s.launch_delay_p90_ns == pytest.approx(15_400, abs=1e-6)
    assert s.purpose_ns == {
        "sync": 8_000,
        "data": 0,
        "communication": 0,
        "sample": 10_000,
        "cache_update": 0,
        "cache_seq_length": 0,
        "cache_mask_sizes": 0,
        "mask": 0,
        "attention": 0,
        "model": 32_000,
    }
    # add 10 less its launch 4; launches 4 + cudaFooBar 2 + cuLaunchKernel 2.
    assert s.mechanism_ns == {
        "python": 0,
        "dispatch": 6_000,
        "launch": 8_000,
        "runtime": 0,
        "sync_wait": 0,
        "profiler": 0,
        "unattributed": 36_000,
    }


def test_hand_totals_and_summary(hand):
    t = hand.totals
    assert (t.events, t.kernels, t.launches, t.graph_launches, t.gpu_ops, t.runtime_calls, t.cpu_ops) == (
        54,
        11,
        8,  # cudaFooBar among them: a kernel joins it
        1,
        13,
        13,
        10,
    )
    assert t.gpu_busy_ns == 48_000 + 28_990 + 15_020 + 10_000  # + the orphan kernel 300-310
    assert t.unattributed_gpu_ops == 1  # the orphan: its launch (corr 999) is not in the trace
    assert t.span_ns == 310_000
    s = hand.summary
    assert (s.steps_used, s.steps, hand.dispatch) == ("decode", 2, "launches")
    assert (s.step_p50_us, s.step_p90_us) == (70.0, 86.0)  # decode walls 90 and 50 us, linear interpolation
    assert s.measured_p50_us == 70.0  # each step's GPU busy (28.99, 15.02 us) is shorter than its host window
    assert s.launches_per_step == 2.5  # (1 + 1) and (3 + 0)
    assert s.busy_fraction == pytest.approx((28_990 + 15_020) / (51_000 + 20_000), abs=1e-12)  # of the GPU windows
    assert s.cache_share == pytest.approx(15_000 / 140_000, abs=1e-12)
    # dispatch over the decode steps: addmm 9, copy_ 8, then argmax 6 and add 6
    assert [(o.name, o.self_ns) for o in s.top_ops][:4] == [
        ("aten::addmm", 9_000),
        ("aten::copy_", 8_000),
        ("aten::add", 6_000),
        ("aten::argmax", 6_000),
    ]


def test_hand_timeline_marks_cache_time(hand):
    items = step_events(load_trace(HAND), hand.steps[1])
    got = [(it.kind, it.part, it.name, it.start_us, it.dur_us) for it in items]
    assert got == [
        ("range", "range", "forward", 1.0, 59.0),
        ("op", "model", "aten::linear", 2.0, 18.0),
        ("range", "cache_update", "cache.update#0", 25.0, 15.0),
        ("runtime", "cache_update", "cudaMemsetAsync", 26.0, 1.0),
        ("op", "cache_update", "aten::copy_", 30.0, 8.0),
        ("runtime", "model", "cudaGraphLaunch", 45.0, 10.0),
        ("range", "sample", "sample", 61.0, 9.0),
        ("op", "sample", "aten::argmax", 62.0, 6.0),
        ("range", "sync", "sync", 71.0, 18.0),
        ("runtime", "sync", "cudaStreamSynchronize", 72.0, 16.0),
    ]


# The JSON contract of a step (the ledger's docstring): every key, so that adding, renaming or dropping one is a
# decision someone makes here, not a side effect of a new field.
STEP_KEYS = {
    "name", "kind", "index", "position", "pid", "tid", "start_us", "wall_us", "span_us", "launches",
    "graph_launches", "runtime_calls", "dispatched", "kernels", "gpu_ops", "gpu_start_us", "gpu_window_us",
    "gpu_busy_us", "gpu_idle_us", "idle_host_wait_us", "idle_kernel_wait_us", "idle_other_us", "launch_cpu_us",
    "launch_delay_p50_us", "launch_delay_p90_us", "launch_delay_from_end_p50_us", "launch_delay_from_end_p90_us",
    "short_kernels", "top_level_ops", "cpu_ops", "host_events", "host_ranges", "external_wait_us", "own_wait_us",
    "peer_wait_us", "host_collectives_us", "purpose_us",
    "mechanism_us", "cache_us", "busy_fraction", "unprofiled_estimate_us", "op_counts", "top_ops", "kernel_counts",
    "capturable_us", "capture_region", "tokens", "recorded_tokens", "data_mechanism_us", "launches_unmatched",
    "unattributed_other_us",
    "captured_launches", "graph_instantiations",
    "python_other_us", "named_us", "named_ranges",
    "kernels_by_category", "kernels_busy_by_category", "kernels_alone_by_category",
    "top_kernels", "top_frames", "sync_sites", "other_threads",
}  # fmt: skip


def test_hand_json_is_the_documented_contract(hand):
    out = json.loads(json.dumps(hand.to_json()))
    assert out["format"] == "torch_chrome"
    step = out["steps"][1]
    assert set(step) == STEP_KEYS
    assert (step["wall_us"], step["gpu_busy_us"], step["cache_us"], step["span_us"]) == (90.0, 28.99, 15.0, 90.0)
    assert list(step["purpose_us"]) == list(PURPOSE) and list(step["mechanism_us"]) == list(MECHANISM)
    assert sum(step["purpose_us"].values()) == sum(step["mechanism_us"].values()) == 90.0
    assert step["sync_sites"] == [
        {
            "call": "cudaStreamSynchronize",
            "frame": None,
            "source": None,
            "wait_us": 16.0,
            "count": 1,
            "stream_wait_before_us": None,
            # the memcpy call earlier in the step sits in addmm, the sync in no op: no copy of its own to name
            "copy_bytes": None,
            "copy_kind": None,
            "copy_memory": None,
            "op": None,
        }
    ]
    assert set(out["totals"]) >= {"events", "kernels", "launches", "graph_launches", "gpu_ops", "gpu_busy_us"}
    assert out["totals"]["gpu_busy_us"] == 102.01


# --- step discovery -------------------------------------------------------------------------------------


def _without(names: set[str], tmp: Path) -> Path:
    doc = json.loads(gzip.decompress(HAND.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") not in names]
    out = tmp / "t.json"
    out.write_text(json.dumps(doc))
    return out


def test_profiler_step_when_no_ranges_of_ours(tmp_path):
    a = analyze(load_trace(_without({"prefill", "decode#0", "decode#1"}, tmp_path)))
    assert [(s.name, s.kind, s.index, s.wall_us) for s in a.steps] == [("ProfilerStep#3", "profiler_step", 3, 260.0)]
    assert a.steps[0].kernels == 10 and a.steps[0].launches == 8


def test_graph_launches_start_steps_when_nothing_else_marks_them(tmp_path):
    a = analyze(load_trace(_without({"prefill", "decode#0", "decode#1", "ProfilerStep#3"}, tmp_path)))
    assert a.step_rule == "graph launches"
    (s,) = a.steps  # from the one cudaGraphLaunch (155 us) to the end of the thread's last event (sync, 259 us)
    assert (s.name, s.kind, s.start_ns, s.wall_ns) == ("graph#0", "graph", 154_000, 104_000)
    # The calls from 155 us on: the graph launch (2 replayed kernels), cudaStreamSynchronize, cudaLaunchKernel
    # (add), cudaFooBar (tiny) and cuLaunchKernel (old_style).
    assert (s.graph_launches, s.launches, s.kernels, s.gpu_ops) == (1, 3, 5, 5)


def test_whole_trace_window_when_no_steps(tmp_path):
    path = _without({"prefill", "decode#0", "decode#1", "ProfilerStep#3", "cudaGraphLaunch"}, tmp_path)
    a = analyze(load_trace(path))
    # From the thread's first event left (forward, at 1 us) to its last event's end (the sync range, 259 us): the
    # orphan kernel's end (310 us) is the GPU's, not host time
    (s,) = a.steps
    assert (s.name, s.kind, s.start_ns, s.wall_ns, s.kernels, s.gpu_ops) == ("trace", "window", 0, 258_000, 8, 10)
    assert (s.pid, s.tid) == (100, 100)
    assert a.step_rule == "whole trace" and any("--steps REGEX" in w for w in a.warnings)
    assert a.totals.unattributed_gpu_ops == 3  # the orphan, and the two graph kernels whose launch is gone


def test_overlapping_steps_are_said(tmp_path):
    doc = json.loads(gzip.decompress(HAND.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("name") == "prefill" and e.get("cat") == "user_annotation":
            e["dur"] = 150.0  # now runs into decode#0
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert any("overlap" in w for w in analyze(load_trace(path)).warnings)


# --- the hand-made nsys export (tests/data/make_nsys_fixture.py) ----------------------------------------


def test_an_nsys_export_without_gpu_work_says_how_nsys_records_it(tmp_path):
    """An export whose process made two CUDA runtime calls and ran no kernel, copy or memset: its GPU side is not
    recorded, said in nsys's words (its TARGET_INFO_GPU table, `nsys profile --trace=...`), not torch.profiler's."""
    path = tmp_path / "no_gpu_work.sqlite"
    con = sqlite3.connect(str(path))
    for sql in make_nsys_fixture.SCHEMA[:2] + [make_nsys_fixture.SCHEMA[3]]:  # StringIds, session start, runtime
        con.execute(sql)
    con.executemany(
        "INSERT INTO StringIds VALUES (?, ?)", [(1, "cuModuleGetLoadingMode"), (2, "cudaGetDeviceProperties")]
    )
    tid = make_nsys_fixture.global_tid(make_nsys_fixture.PID_A, make_nsys_fixture.MAIN)
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, NULL)",
        [(1_000, 1_700, tid, 1, 1), (40_000, 40_600, tid, 2, 2)],
    )
    con.commit()
    con.close()
    make_nsys_fixture.add_gpus(path, make_nsys_fixture.H200)
    a = analyze(load_trace(path))
    assert not a.on_gpu and a.gpu_unrecorded == (
        "its TARGET_INFO_GPU table names 1 GPU(s) (NVIDIA H200); its host made 2 GPU runtime calls, but no GPU op and "
        "no launch call (an Nsight Systems export that recorded no kernel, copy or memset: record the GPU work inside "
        "the capture with nsys profile --trace=cuda,nvtx,osrt)"
    )


def test_nsys_hand_fixture(tmp_path):
    a = analyze(load_trace(make_nsys_fixture.build(tmp_path / "hand.sqlite")))
    d0, d1 = a.steps
    assert (d0.name, d0.wall_ns, d1.name, d1.wall_ns) == ("decode#0", 10_000, "decode#1", 8_000)
    # decode#0: cudaLaunchKernel_v7000 and _ptsz_v7000 launch (K1, K2); memcpy and memset joined via the
    # memcpy call and the unknown cudaFooBar. K2 starts 10 ns after K1, the memcpy 1 us after K2: kernel waits.
    assert (d0.launches, d0.graph_launches, d0.runtime_calls, d0.kernels, d0.gpu_ops) == (2, 0, 5, 2, 4)
    assert d0.gpu_busy_ns == 2_000 + 990 + 500 + 200
    # The GPU window is 2-7.2 us: the union's gaps are 10 ns (kernel wait), 1 us before the memcpy (its call at 5
    # us started as rms_norm ended: not late) and 0.5 us before the memset on stream 8 (called at 5.3 us), each under
    # 30 us and not the host's lateness: kernel wait.
    assert (d0.gpu_window_ns, d0.idle_host_wait_ns, d0.idle_kernel_wait_ns, d0.idle_other_ns) == (5_200, 0, 1_510, 0)
    assert d0.purpose_ns == {
        "sync": 1_800,
        "data": 0,
        "communication": 0,
        "sample": 900,
        "cache_update": 1_000,
        "cache_seq_length": 0,
        "cache_mask_sizes": 200,
        "mask": 800,
        "attention": 0,
        "model": 5_300,
    }
    # Two launch calls of 300 ns; the memcpy call 200 and cudaFooBar 100 (runtime); the synchronize 1.6 us.
    assert d0.mechanism_ns == {
        "python": 0,
        "dispatch": 0,
        "launch": 600,
        "runtime": 300,
        "sync_wait": 1_600,
        "profiler": 0,
        "unattributed": 7_500,
    }
    # decode#1: a graph launch replaying two kernels, and cuLaunchKernel from the worker thread (counted: the
    # launch is inside the window; its time is not in the main thread's host partition).
    assert (d1.launches, d1.graph_launches, d1.runtime_calls, d1.kernels, d1.gpu_ops) == (1, 1, 2, 3, 3)
    assert d1.gpu_busy_ns == 1_000 + 900 + 500
    # The window starts at graph a (14 us): the 7.5 us since the memcpy are no step's GPU time. Then b 0.1 us after
    # a and argmax 1 us after b, each launched before the gap began: other.
    assert (d1.gpu_window_ns, d1.idle_host_wait_ns, d1.idle_kernel_wait_ns, d1.idle_other_ns) == (3_500, 0, 1_100, 0)
    assert (d1.purpose_ns["sync"], d1.purpose_ns["sample"], d1.purpose_ns["model"]) == (900, 1_000, 6_100)
    assert (d1.mechanism_ns["launch"], d1.mechanism_ns["unattributed"]) == (500, 7_500)  # the graph launch
    # The worker thread ran inside the window: its cuLaunchKernel, 200 ns (its `worker` range is a label).
    assert [(t.tid, t.busy_ns, t.mechanism_ns) for t in d1.other_threads] == [
        (make_nsys_fixture.WORKER, 200, {"launch": 200})
    ]
    assert d0.other_threads == ()
    t = a.totals
    # Process 777 reuses correlation id 1: its kernel must not join process 4242's launch, so it is in no step.
    assert (t.kernels, t.launches, t.graph_launches, t.gpu_ops, t.gpu_busy_ns, t.unattributed_gpu_ops) == (
        6,
        4,
        1,
        8,
        100 + 3_690 + 2_400,
        1,
    )


# --- the public traces: their reference figures (../shared/traces/public/README.md) --------------------------

REFERENCE = {  # file: (kernels, launches, graph_launches, gpu_ops, gpu_busy_us, [kernels per ProfilerStep])
    "h100_hf_qwen1.5-0.5b_prefill_b16": (1465, 1029, 0, 1707, 45647.311, [1029]),
    "b200_eager": (768, 768, 0, 929, 11596.479, None),
    "rocm_vllm_decode_cudagraph": (425, 4, 1, 434, 10717.697, None),
    "cuda_alexnet": (79, 79, 0, 98, 66141.0, None),
    "cuda_train_ns_resolution_5steps": (4350, 4350, 0, 6095, 472462.5, [870] * 5),
    "cpu_only_small": (0, 0, 0, 0, 0.0, [0]),
}


def _check_reference(path: Path, figures) -> None:
    kernels, launches, graphs, gpu_ops, busy_us, per_step = figures
    a = analyze(load_trace(path))
    t = a.totals
    assert (t.kernels, t.launches, t.graph_launches, t.gpu_ops) == (kernels, launches, graphs, gpu_ops)
    assert t.gpu_busy_us == pytest.approx(busy_us, rel=1e-4, abs=1e-9)
    if per_step is not None:
        assert [s.kind for s in a.steps] == ["profiler_step"] * len(per_step)  # the last one too
        assert [s.kernels for s in a.steps] == per_step
    for s in a.steps:
        assert 0 <= s.gpu_busy_ns <= s.gpu_window_ns and 0 <= s.busy_fraction <= 1


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_figures(name):
    _check_reference(shared_trace(f"public/{name}.trace.json.gz"), REFERENCE[name])


def _hta_idle_breakdown(path: Path, steps: int) -> tuple[float, float]:
    """HTA's get_idle_time_breakdown as HTA computes it (hta/analyzers/breakdown_analysis.py at f4d0062), kept here
    as an oracle: times as float64 microseconds; the GPU ops (kernel, memcpy, memset) of the first `steps`
    ProfilerSteps by their launch, on one stream, sorted by start; each gap is host wait if the op's launch call
    started after the previous op ended, else kernel wait if under 30 (us), else other."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"]
    t0 = min(e["ts"] for e in events if "ts" in e)
    marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}

    def launched_in_first_steps(op) -> bool:
        call = calls.get(op["args"].get("correlation"))
        return call is not None and any(a <= call["ts"] <= b for a, b in marks[:steps])

    ops = sorted(
        (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and launched_in_first_steps(e)),
        key=lambda e: e["ts"],
    )
    host = kernel = 0.0
    for before, op in zip(ops, ops[1:], strict=False):
        prev_end = (before["ts"] - t0) + before["dur"]
        gap = (op["ts"] - t0) - prev_end
        if calls[op["args"]["correlation"]]["ts"] - t0 > prev_end:
            host += gap
        elif gap < 30:
            kernel += gap
    return host, kernel


def test_kernel_wait_beside_hta_on_the_ns_resolution_trace():
    """HTA 0.6 (HTA_DISABLE_NS_ROUNDING=1) prints kernel wait 5,161.956 us and host wait 1,290.805 us for stream 7
    over ProfilerSteps 101-104 (it leaves out the last step). Exact in ns, probe finds 5,118.411 and 1,331.907:
    HTA's float64 microseconds resolve 0.25 us at these timestamps (1.7e15 us), so 41.102 us of gaps whose launch
    call in fact started after the op before ended read to HTA as kernel wait; and 2.443 us of kernel wait lie
    between steps, in no step's GPU window. 5,118.411 + 41.102 + 2.443 = 5,161.956."""
    path = shared_trace("public/cuda_train_ns_resolution_5steps.trace.json.gz")
    steps = analyze(load_trace(path)).steps[:4]
    assert [s.name for s in steps] == [f"ProfilerStep#{i}" for i in range(101, 105)]
    kernel = sum(s.idle_kernel_wait_ns for s in steps)
    host = sum(s.idle_host_wait_ns for s in steps)
    assert (kernel, host) == (5_118_411, 1_331_907)
    hta_host, hta_kernel = _hta_idle_breakdown(path, 4)
    assert (round(hta_kernel, 3), round(hta_host, 3)) == (5161.956, 1290.805)  # HTA's own printout
    assert round(hta_kernel * 1000) - kernel == 41_102 + 2_443
    assert host - round(hta_host * 1000) == 41_102  # what HTA moved from host wait to kernel wait


def test_busy_time_is_exact_not_float_summed():
    """Our union is exact; the README's 472462.5 carries float error at ts ~1.7e15 us (0.0017 % off)."""
    t = analyze(load_trace(shared_trace("public/cuda_train_ns_resolution_5steps.trace.json.gz"))).totals
    assert t.gpu_busy_ns == 472_454_441


# --- brute-force cross-checks ---------------------------------------------------------------------------


def _random_intervals(rnd, n, span=300, max_len=60):
    s = np.array([rnd.randrange(span) for _ in range(n)], np.int64)
    return s, s + np.array([rnd.randrange(max_len) for _ in range(n)], np.int64)


def _paint(starts, ends, span=400) -> np.ndarray:
    grid = np.zeros(span, bool)  # cell t = the nanosecond [t, t+1)
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        grid[s:e] = True
    return grid


def test_merge_covered_union_against_painting():
    rnd = random.Random(1)
    for _ in range(300):
        s, e = _random_intervals(rnd, rnd.randrange(0, 12))
        ms, me = merge(s, e)
        assert np.all(ms[1:] > me[:-1])  # disjoint, sorted, touching ones joined
        grid = _paint(s, e)
        assert int((me - ms).sum()) == int(grid.sum())
        lo = np.array([rnd.randrange(350) for _ in range(5)], np.int64)
        hi = lo + np.array([rnd.randrange(80) for _ in range(5)], np.int64)
        assert covered(ms, me, lo, hi).tolist() == [int(grid[a:b].sum()) for a, b in zip(lo, hi, strict=True)]
        group = np.array([rnd.randrange(-1, 3) for _ in range(len(s))], np.int64)
        want = [int(_paint(s[group == g], e[group == g]).sum()) for g in range(3)]
        assert union_by_group(group, s, e, 3).tolist() == want


def test_assign_picks_the_window_holding_each_time():
    starts, ends = np.array([0, 10, 30]), np.array([5, 20, 30])
    t = np.array([-1, 0, 5, 6, 10, 20, 25, 30, 31])
    assert assign(t, starts, ends).tolist() == [-1, 0, 0, -1, 1, 1, -1, 2, -1]


def _stack_nesting(starts, ends):
    """The obvious algorithm: walk in (start, -end) order with a stack of open intervals."""
    depth, parent, stack = [], [], []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        while stack and not (
            s < ends[stack[-1]]
            or (s == starts[stack[-1]] and e <= ends[stack[-1]] and ends[stack[-1]] > starts[stack[-1]])
        ):
            stack.pop()
        depth.append(len(stack))
        parent.append(stack[-1] if stack else -1)
        stack.append(i)
    return depth, parent


def _random_tree(rnd, lo, hi, depth=0):
    out, t = [], lo
    while t < hi and rnd.random() < 0.8:
        s = rnd.randrange(t, hi + 1)
        e = rnd.randrange(s, hi + 1) if rnd.random() < 0.85 else s  # some zero-length ops
        out.append((s, e))
        if depth < 4 and e > s:
            out += _random_tree(rnd, s, e, depth + 1)
        t = e
    return out


def test_nesting_against_a_stack():
    rnd = random.Random(2)
    for _ in range(300):
        ops = sorted(set(_random_tree(rnd, 0, 200)), key=lambda se: (se[0], -se[1]))
        if not ops:
            continue
        s = np.array([a for a, _ in ops], np.int64)
        e = np.array([b for _, b in ops], np.int64)
        depth, parent = nesting(s, e)
        want_depth, want_parent = _stack_nesting(s, e)
        assert depth.tolist() == want_depth
        assert parent.tolist() == want_parent


def _stack_containers(starts, ends):
    """The obvious algorithm: for each interval, the latest earlier one open at its start that ends no earlier."""
    out = []
    for i in range(len(starts)):
        t = max(int(ends[i]), int(starts[i]) + 1)
        out.append(next((j for j in range(i - 1, -1, -1) if ends[j] >= t), -1))
    return out


def test_containers_is_nestings_parent_where_intervals_nest_and_what_holds_whole_where_they_overlap():
    rnd = random.Random(4)
    for _ in range(300):
        ops = sorted(set(_random_tree(rnd, 0, 200)), key=lambda se: (se[0], -se[1]))
        if not ops:
            continue
        s = np.array([a for a, _ in ops], np.int64)
        e = np.array([b for _, b in ops], np.int64)
        assert containers(s, e).tolist() == nesting(s, e)[1].tolist()
        # shift some ends so intervals overlap: then the one definition is "held whole"
        e2 = e + np.array([rnd.choice((0, 0, 7, 30)) for _ in range(len(e))], np.int64)
        order = np.lexsort((-e2, s))
        assert containers(s[order], e2[order]).tolist() == _stack_containers(s[order], e2[order])
    # main [0, 2000]; __enter__ [1, 20]; the range [10, 1000] it opens; an op in the range; __exit__ [990, 1010]
    # and an op in it: the range and __exit__ sit under main, the op after __enter__ ends under the range
    s = np.array([0, 1, 10, 30, 990, 995])
    e = np.array([2000, 20, 1000, 40, 1010, 999])
    assert containers(s, e).tolist() == [-1, 0, 0, 2, 0, 4]
    assert nesting(s, e)[1].tolist() == [-1, 0, 1, 1, 1, 4]  # nesting reads only nested intervals


def test_host_partition_against_painting(tmp_path):
    """Random ranges and ops on one thread: the partition must equal painting each ns by priority."""
    rnd = random.Random(3)
    tiers = ["sync", "sample", "cache.update#0", "cache.seq_length", "cache.mask_sizes", "mask"]
    for trial in range(25):
        events = [{"ph": "X", "cat": "user_annotation", "name": "decode#0", "pid": 1, "tid": 1, "ts": 10, "dur": 300}]
        truth = {}
        for name in tiers:
            s, e = _random_intervals(rnd, rnd.randrange(0, 4), span=330)
            truth[name] = (s, e)
            events += [
                {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": int(a), "dur": int(b - a)}
                for a, b in zip(s, e, strict=True)
            ]
        ops = sorted(set(_random_tree(rnd, 0, 330)), key=lambda se: (se[0], -se[1]))
        names = [rnd.choice(["aten::mm", "aten::scaled_dot_product_attention"]) for _ in ops]
        events += [
            {"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": a, "dur": b - a}
            for (a, b), n in zip(ops, names, strict=True)
        ]
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 0, "dur": 400})
        path = tmp_path / f"t{trial}.json"
        path.write_text(json.dumps({"traceEvents": events}))
        (step,) = analyze(load_trace(path)).steps
        # Painting, in microsecond cells (the trace is in us); the step is [10, 310).
        window = slice(10, 310)
        taken = np.zeros(400, bool)
        want = {}
        depth, _ = (
            nesting(np.array([a for a, _ in ops], np.int64), np.array([b for _, b in ops], np.int64))
            if ops
            else (np.zeros(0, np.int64), None)
        )
        attn = [(a, b) for (a, b), n in zip(ops, names, strict=True) if n.endswith("attention")]
        top = [(a, b) for (a, b), d in zip(ops, depth.tolist(), strict=True) if d == 0]
        sets = {
            "sync": [truth["sync"]],
            "sample": [truth["sample"]],
            "cache_update": [truth["cache.update#0"]],
            "cache_seq_length": [truth["cache.seq_length"]],
            "cache_mask_sizes": [truth["cache.mask_sizes"]],
            "mask": [truth["mask"]],
        }
        for p in PURPOSE[:-1]:
            grid = np.zeros(400, bool)
            for s, e in sets.get(p, []):
                grid |= _paint(s, e)
            if p == "attention":
                for a, b in attn:
                    grid[a:b] = True
            mine = grid & ~taken
            want[p] = int(mine[window].sum()) * 1000
            taken |= grid
        want["model"] = int((~taken)[window].sum()) * 1000
        assert step.purpose_ns == want, trial
        # and by mechanism, ops alone: each cell goes to dispatch when an op covers it
        ops_grid = np.zeros(400, bool)
        for a, b in top:
            ops_grid[a:b] = True
        assert step.mechanism_ns["dispatch"] == int(ops_grid[window].sum()) * 1000, trial
        assert step.top_level_ops == sum(
            1 for (a, _), d in zip(ops, depth.tolist(), strict=True) if d == 0 and 10 <= a <= 310
        )


def _random_host_tree(rnd, lo, hi, depth=0):
    """Properly nested host events (kind, start, end): frames, ops and runtime calls in any order of nesting."""
    out, t = [], lo
    while t < hi and rnd.random() < 0.75:
        s = rnd.randrange(t, hi + 1)
        e = rnd.randrange(s, hi + 1)
        kind = rnd.choice(["python_function", "cpu_op", "cuda_runtime"])
        out.append((kind, s, e))
        if depth < 4 and e > s and kind != "cuda_runtime":
            out += _random_host_tree(rnd, s, e, depth + 1)
        t = e
    return out


MECHANISM_OF = {"python_function": "python", "cpu_op": "dispatch", "cuda_runtime": "runtime"}


def test_mechanism_partition_against_painting_the_innermost_event(tmp_path):
    """Random nested frames, ops and calls: each us cell goes to the innermost event covering it (painting parents
    first, children over them); a call named cudaLaunchKernel is `launch`, cudaStreamSynchronize `sync_wait`."""
    rnd = random.Random(4)
    for trial in range(40):
        tree = _random_host_tree(rnd, 0, 330)
        events = [{"ph": "X", "cat": "user_annotation", "name": "decode#0", "pid": 1, "tid": 1, "ts": 10, "dur": 300}]
        grid = np.full(400, "unattributed", dtype=object)
        names = []
        for kind, a, b in sorted(tree, key=lambda k: (k[1], -k[2])):  # outer first, so inner paint over
            name = {"cuda_runtime": rnd.choice(["cudaLaunchKernel", "cudaStreamSynchronize", "cudaEventRecord"])}.get(
                kind, f"f{len(names)}"
            )
            names.append(name)
            part = MECHANISM_OF[kind]
            if name == "cudaLaunchKernel":
                part = "launch"
            elif name == "cudaStreamSynchronize":
                part = "sync_wait"
            grid[a:b] = part
            events.append({"ph": "X", "cat": kind, "name": name, "pid": 1, "tid": 1, "ts": a, "dur": b - a})
        path = tmp_path / f"t{trial}.json"
        path.write_text(json.dumps({"traceEvents": events}))
        (step,) = analyze(load_trace(path)).steps
        cells = grid[10:310]
        want = {p: int(np.sum(cells == p)) * 1000 for p in MECHANISM}
        assert step.mechanism_ns == want, (trial, tree)


def _polling_trace(tmp_path: Path, queries: int, inside_op: bool = False) -> Path:
    """A step of 200 us on thread 1: a kernel launched at 2-4 runs 10-150 on the GPU; from 10 the thread calls
    cudaEventQuery `queries` times, 1 us each, every 5 us (10-11, 15-16, ...), with nothing between them (inside an
    aten::empty over 5-190 when `inside_op`, as the caching allocator queries its pending events); an aten::add at
    170-180. Nothing else covers the step."""
    host = [
        ("user_annotation", "ProfilerStep#1", 0, 200, {}),
        ("cuda_runtime", "cudaLaunchKernel", 2, 4, {"correlation": 1}),
        *(("cuda_runtime", "cudaEventQuery", 10 + 5 * i, 11 + 5 * i, {}) for i in range(queries)),
        ("cpu_op", "aten::add", 170, 180, {}),
    ]
    host += [("cpu_op", "aten::empty", 5, 190, {})] if inside_op else []
    events = [
        {"ph": "X", "cat": c, "name": n, "pid": 1, "tid": 1, "ts": a, "dur": b - a, "args": args}
        for c, n, a, b, args in host
    ]
    events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10, "dur": 140,
                   "args": {"stream": 7, "correlation": 1}})  # fmt: skip
    path = tmp_path / f"poll{queries}{'op' if inside_op else ''}.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_run_of_event_queries_is_a_wait_on_the_device(tmp_path):
    """20 cudaEventQuery calls back to back, 10-106, outside any op: the thread polls the kernel running 10-150, so
    those 96 us are sync wait (and sync by purpose), as a blocking sync would be, the site named by the query; the
    step's host work is 200 - 96 = 104 us. The launch 2 us, the add's dispatch 10; unattributed 200 - 96 - 2 - 10 =
    92 (before, the queries were 20 us of runtime calls and their gaps 76 us of unattributed time)."""
    s = analyze(load_trace(_polling_trace(tmp_path, 20))).steps[0]
    assert {k: v for k, v in s.mechanism_ns.items() if v} == {
        "dispatch": 10_000, "launch": 2_000, "sync_wait": 96_000, "unattributed": 92_000
    }  # fmt: skip
    assert (s.purpose_ns["sync"], s.host_work_ns, s.own_wait_ns, s.external_wait_ns) == (96_000, 104_000, 96_000, 0)
    (site,) = s.sync_sites
    assert (site.call, site.wait_ns, site.count) == ("cudaEventQuery", 96_000, 1)


def test_a_lone_event_query_or_an_allocators_run_stays_a_runtime_call(tmp_path):
    """One cudaEventQuery (10-11) asks once: 1 us of runtime calls, no wait. 19 in a row are short of POLL_CALLS; 20
    inside an op (the caching allocator checking its pending events in aten::empty) are the op's own work."""
    for path, runtime in (
        (_polling_trace(tmp_path, 1), 1_000),
        (_polling_trace(tmp_path, 19), 19_000),
        (_polling_trace(tmp_path, 20, inside_op=True), 20_000),
    ):
        s = analyze(load_trace(path)).steps[0]
        assert (s.mechanism_ns["runtime"], s.sync_wait_ns, s.purpose_ns["sync"], s.sync_sites) == (runtime, 0, 0, ())


def _first_step(tmp_path: Path, host: list):
    """The first step of a trace of (cat, name, start us, end us) events on one host thread."""
    events = [{"ph": "X", "cat": c, "name": n, "pid": 1, "tid": 1, "ts": a, "dur": b - a} for c, n, a, b in host]
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return analyze(load_trace(path)).steps[0]


def test_hf_transformers_frames_feed_the_cache_mask_and_sample_parts(tmp_path):
    """An HF generate step traced with stacks and no range of probe's: the frames of transformers' own cache,
    masking and logits processing feed the parts probe's ranges would. create_causal_mask (5-25) is mask but the
    cache's mask-size query inside it (10-14, a cache part first): mask 16, cache mask sizes 4. Cache.update (30-40,
    its layer's update inside) 10; get_seq_length under site-packages' path (45-48) 3; a logits processor's
    __call__ (80-90) is sample 10, its __init__ (92-95) set-up, not sample; a cache_utils.py outside transformers
    (60-65) is not HF's. The rest of the 100 us: 100 - 43 = 57."""
    host = [
        ("user_annotation", "ProfilerStep#0", 0, 100),
        ("python_function", "transformers/generation/utils.py(2700): _sample", 0, 100),
        ("python_function", "transformers/masking_utils.py(800): create_causal_mask", 5, 25),
        ("python_function", "transformers/cache_utils.py(900): get_mask_sizes", 10, 14),
        ("python_function", "transformers/cache_utils.py(700): update", 30, 40),
        ("python_function", "transformers/cache_utils.py(100): update", 31, 39),
        ("python_function", "/usr/lib/python3/site-packages/transformers/cache_utils.py(750): get_seq_length", 45, 48),
        ("python_function", "mylib/cache_utils.py(3): update", 60, 65),
        ("python_function", "transformers/generation/logits_process.py(50): __call__", 80, 90),
        ("python_function", "transformers/generation/logits_process.py(40): __init__", 92, 95),
    ]
    s = _first_step(tmp_path, host)
    assert {k: v for k, v in s.purpose_ns.items() if v} == {
        "sample": 10_000, "cache_update": 10_000, "cache_seq_length": 3_000, "cache_mask_sizes": 4_000,
        "mask": 16_000, "model": 57_000,
    }  # fmt: skip


def test_torch_compiles_guard_check_and_bookkeeping_ops_are_runtime_not_an_ops_work(tmp_path):
    """A compiled decode step on a CPU, 100 us: the guard check (`TorchDynamo Cache Lookup`, 5-25, a guard frame of
    2 us inside: self 18), then the compiled region (30-90) holding the pregraph bytecode (31-34) and the graph's one
    extern GEMM (40-60). The guard check's and the bytecode's self time, 18 + 3 = 21 us, is the compiled runtime's:
    `runtime`, in no op's row. The region's own 60 - 3 - 20 = 37 us is the graph's kernels, which no op records:
    it stays an op's, with the GEMM's 20: dispatch 57. Python 2, and 100 - 80 = 20 us no event covers."""
    host = [
        ("user_annotation", "decode#0", 0, 100),
        ("cpu_op", "TorchDynamo Cache Lookup", 5, 25),
        ("python_function", "torch/_dynamo/guards.py(2545): fn", 8, 10),
        ("cpu_op", "Torch-Compiled Region: 0/1", 30, 90),
        ("cpu_op", "Pregraph bytecode", 31, 34),
        ("cpu_op", "aten::mm", 40, 60),
    ]
    s = _first_step(tmp_path, host)
    assert {k: v for k, v in s.mechanism_ns.items() if v} == {
        "python": 2_000, "dispatch": 57_000, "runtime": 21_000, "unattributed": 20_000
    }  # fmt: skip
    assert [(o.name, o.self_ns, o.calls) for o in s.top_ops] == [
        ("Torch-Compiled Region: 0/1", 37_000, 1), ("aten::mm", 20_000, 1)
    ]  # fmt: skip


# --- our own engine's CPU traces ------------------------------------------------------------------------

NEW_TOKENS = 5


@pytest.fixture(scope="module")
def own_cpu_trace(tmp_path_factory):
    from probe.capture.config import ProfileConfig
    from probe.capture.profile import profile_torch

    out = tmp_path_factory.mktemp("own")
    capture = profile_torch(ProfileConfig(engine="cached", prompt=32, new_tokens=NEW_TOKENS, device="cpu"), out)
    return load_trace(capture.trace)


def _ranges_in(trace, lo, hi, names):
    rows = trace.rows(Kind.USER_RANGE)
    keep = [
        r
        for r in rows.tolist()
        if lo <= trace.ts_ns[r] and trace.end_ns[r] <= hi and trace.name(r).split("#")[0] in names
    ]
    return keep


def test_own_cpu_trace_ledger(own_cpu_trace):
    trace = own_cpu_trace
    a = analyze(trace)
    assert [s.name for s in a.steps] == ["prefill"] + [f"decode#{i}" for i in range(NEW_TOKENS - 1)]
    decode = a.steps[1:]
    for s in a.steps:
        assert (s.launches, s.kernels, s.gpu_busy_ns, s.gpu_idle_ns) == (0, 0, 0, 0)
        lo = trace.start_ns + s.start_ns
        hi = lo + s.wall_ns
        # Computed another way: our cache ranges never nest in each other, sample or sync, so the cache part
        # is their plain sum; mask is its range less the cache queries inside it.
        cache = sum(
            int(trace.dur_ns[r])
            for r in _ranges_in(trace, lo, hi, {"cache.update", "cache.seq_length", "cache.mask_sizes"})
        )
        assert s.cache_ns == cache > 0
        (sample,) = _ranges_in(trace, lo, hi, {"sample"})
        (sync,) = _ranges_in(trace, lo, hi, {"sync"})
        assert (s.purpose_ns["sample"], s.purpose_ns["sync"]) == (int(trace.dur_ns[sample]), int(trace.dur_ns[sync]))
        (mask,) = _ranges_in(trace, lo, hi, {"mask"})
        inner = _ranges_in(
            trace, int(trace.ts_ns[mask]), int(trace.end_ns[mask]), {"cache.seq_length", "cache.mask_sizes"}
        )
        assert s.purpose_ns["mask"] == int(trace.dur_ns[mask]) - sum(int(trace.dur_ns[r]) for r in inner)
        assert s.purpose_ns["attention"] > 0 and s.purpose_ns["model"] > 0
        assert s.mechanism_ns["dispatch"] > 0 and s.mechanism_ns["unattributed"] > 0
        assert s.mechanism_ns["launch"] == s.mechanism_ns["sync_wait"] == 0  # a CPU trace: no runtime calls
    # The dispatched op count is the same every decode step (the machine facts: a TorchDispatchMode count).
    assert len({s.top_level_ops for s in decode}) == 1
    assert len({tuple(sorted(s.op_counts.items())) for s in decode}) == 1
    assert sum(decode[0].op_counts.values()) == decode[0].top_level_ops
    assert a.dispatch == "top-level ops" and a.summary.launches_per_step == decode[0].top_level_ops


def test_own_cpu_trace_top_level_count_matches_a_stack_walk(own_cpu_trace):
    trace = own_cpu_trace
    a = analyze(trace)
    rows = trace.rows(Kind.CPU_OP)
    order = sorted(rows.tolist(), key=lambda r: (trace.ts_ns[r], -trace.end_ns[r]))
    for s in a.steps:
        lo = trace.start_ns + s.start_ns
        hi = lo + s.wall_ns
        top, open_until = 0, -1
        for r in order:
            if trace.ts_ns[r] >= open_until:
                if lo <= trace.ts_ns[r] <= hi:
                    top += 1
            open_until = max(open_until, int(trace.end_ns[r]))
        assert s.top_level_ops == top


def nsys_available() -> bool:
    from probe.capture.profile import find_nsys
    from probe.errors import ProbeError

    try:
        find_nsys()
    except ProbeError:
        return False
    return True


@pytest.mark.nsys
@pytest.mark.xdist_group("nsys")  # one nsys session at a time (tests/test_capture.py)
@pytest.mark.slow
@pytest.mark.skipif(not (IN_CI or nsys_available()), reason="nsys not installed (scripts/install-nsys.sh)")
def test_own_nsys_cpu_export(tmp_path):
    """A live CPU nsys run of our loop: no CUPTI tables, our NVTX ranges become the steps."""
    result = run_probe(
        "profile",
        "--nsys",
        "--engine",
        "cached",
        "--prompt",
        "16",
        "--new-tokens",
        "3",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    a = analyze(load_trace(tmp_path / "tiny_cached_cpu_p16_n3.sqlite"))
    assert [s.name for s in a.steps] == ["prefill", "decode#0", "decode#1"]
    for s in a.steps:
        assert all(s.purpose_ns[p] > 0 for p in ("cache_update", "sample", "sync", "mask"))
        assert s.kernels == 0


def test_committed_nsys_cpu_export():
    a = analyze(load_trace(DATA / "cpu_tiny_cached_p16_n3.nsys.sqlite.gz"))
    assert [s.name for s in a.steps] == ["prefill", "decode#0", "decode#1"]
    for s in a.steps:
        assert all(s.purpose_ns[p] > 0 for p in ("cache_seq_length", "cache_mask_sizes", "cache_update"))
        assert s.top_level_ops == 0 and s.mechanism_ns["dispatch"] == 0  # nsys on a CPU sees our ranges only
        assert s.mechanism_ns["unattributed"] == s.wall_ns


def test_find_steps_is_one_window_for_a_trace_without_markers():
    steps = find_steps(load_trace(shared_trace("public/cuda_alexnet.trace.json.gz")))
    assert steps.names == ["trace"] and steps.kinds == ["window"] and steps.rule == "whole trace"
    assert any("--steps" in w for w in steps.warnings)


def test_more_steps_than_one_analysis_holds_is_one_line(tmp_path):
    """Each step costs a few KiB of figures, so the step count is bounded (PROBE_MAX_STEPS) with a one-line refusal
    that names the count and the way out, never gigabytes of memory."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"decode#{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
        for i in range(30)
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = run_probe("analyze", str(path), env={**os.environ, "PROBE_MAX_STEPS": "29"})
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "30 steps found by probe ranges, more than the 29 one analysis holds" in result.stderr
    assert run_probe("analyze", str(path), env={**os.environ, "PROBE_MAX_STEPS": "30"}).returncode == 0


def test_a_step_kind_reads_as_words():
    """ "not offered: it needs a decode step, and an iteration", never "a iteration step" or "a profiler_step step"."""
    from probe.analysis.ledger.types import kind_words

    said = {k: kind_words(k, article=True) for k in ("decode", "iteration", "profiler_step", "step", "window", "mixed")}
    assert said == {
        "decode": "a decode step",
        "iteration": "an iteration",
        "profiler_step": "a ProfilerStep range",
        "step": "a step",
        "window": "a whole-trace window",
        "mixed": "a mixed (prefill and decode) step",
    }
    assert kind_words("eagle_verify") == "eagle_verify step"  # an engine's own mode
    from probe.analysis.diagnosis.what_if import _phase_words

    assert _phase_words("step") == "a step, which no marker or recorded shape says is decode"  # not "..., and a step"
    assert _phase_words("prefill") == "a prefill step"


# --- a step's phase from its recorded shapes (probe.analysis.ledger.phases) --------------------------------------


def _shaped_steps(
    tmp_path: Path, indices: list, name: str = "ProfilerStep#{}", cat: str = "user_annotation", keys: list | None = None
) -> Path:
    """One step of 100 us each (ProfilerStep#1.. by default), each holding an aten::embedding (2-3 us) whose
    recorded indices are `indices[i]` (None: no shapes recorded) and an aten::mm (10-40 us); with `keys`, an
    aten::scaled_dot_product_attention (50-55 us) reading `keys[i]` keys for the step's tokens."""
    events = []
    for i, dims in enumerate(indices):
        t = 100 * i
        args = {} if dims is None else {"Input Dims": [[256, 64], dims], "Input type": ["float", "long int"]}
        events += [
            {"ph": "X", "cat": cat, "name": name.format(i + 1), "pid": 1, "tid": 1, "ts": t, "dur": 100, "args": {}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::embedding", "pid": 1, "tid": 1, "ts": t + 2, "dur": 1,
             "args": args},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 30, "args": {}},
        ]  # fmt: skip
        if keys is not None:
            b, q = dims
            attention = {"Input Dims": [[b, 4, q, 16], [b, 2, keys[i], 16], [b, 2, keys[i], 16]]}
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::scaled_dot_product_attention", "pid": 1,
                           "tid": 1, "ts": t + 50, "dur": 5, "args": attention})  # fmt: skip
    path = tmp_path / "shaped.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_profiler_step_takes_its_phase_from_its_first_embedding(tmp_path):
    """ProfilerSteps say no phase; their embeddings do: [1, 16] before [1, 1] is the prefill, [1, 1] a decode of
    one sequence. The steady steps are then the decodes, the prefill out of their pool."""
    a = analyze(load_trace(_shaped_steps(tmp_path, [[1, 16], [1, 1], [1, 1], [1, 1]])))
    assert [s.kind for s in a.steps] == ["prefill", "decode", "decode", "decode"]
    assert [(s.recorded_tokens.sequences, s.recorded_tokens.new_tokens) for s in a.steps] == [(1, 16)] + [(1, 1)] * 3
    assert (a.summary.steps_used, a.summary.steps) == ("decode", 3)


def test_a_step_reading_3x1_with_no_marker_is_a_decode_of_three_sequences(tmp_path):
    a = analyze(load_trace(_shaped_steps(tmp_path, [[3, 1]] * 3)))
    assert [s.kind for s in a.steps] == ["decode"] * 3
    assert [s.recorded_tokens.sequences for s in a.steps] == [3] * 3
    assert a.steps[0].recorded_tokens.source == "recorded shapes (aten::embedding [3, 1])"


def test_a_loop_without_a_kv_cache_is_decode_steps_growing_by_one_token(tmp_path):
    """No KV cache: every step re-reads the whole sequence, [1, 16], [1, 17], [1, 18], for one new token: each a
    decode step (the first too: the same work, one token shorter), its recorded tokens all it recomputes."""
    a = analyze(load_trace(_shaped_steps(tmp_path, [[1, 16], [1, 17], [1, 18]])))
    assert [s.kind for s in a.steps] == ["decode"] * 3
    assert [s.recorded_tokens.new_tokens for s in a.steps] == [16, 17, 18]


def test_a_shape_that_says_no_phase_leaves_the_kind_as_it_is(tmp_path):
    """Nothing is guessed: no shapes recorded; [8, 128] every step (a training step, an encoder's forward, a step
    holding a whole generate read [B, T] too); a lone [1, 16] after decodes with no decode after it."""
    a = analyze(load_trace(_shaped_steps(tmp_path, [None, None])))
    assert [s.kind for s in a.steps] == ["profiler_step"] * 2 and a.steps[0].recorded_tokens is None
    a = analyze(load_trace(_shaped_steps(tmp_path, [[8, 128]] * 3)))
    assert [s.kind for s in a.steps] == ["profiler_step"] * 3
    a = analyze(load_trace(_shaped_steps(tmp_path, [[1, 1], [1, 1], [1, 16]])))
    assert [s.kind for s in a.steps] == ["decode", "decode", "profiler_step"]


def test_a_kind_a_marker_gave_is_kept_and_its_sequences_recorded(tmp_path):
    """probe's own `decode#i` ranges say decode whatever the shapes; the shapes still say how many sequences."""
    path = _shaped_steps(tmp_path, [[3, 16], [3, 1]], name="decode#{}")
    a = analyze(load_trace(path))
    assert [s.kind for s in a.steps] == ["decode", "decode"]
    assert [s.recorded_tokens.sequences for s in a.steps] == [3, 3]


def test_shapes_give_no_phase_where_most_steps_fit_no_prefill_or_decode_pattern(tmp_path):
    """An assisted generate's iterations each read [1, 2] first (the assistant's candidates) and its last, the
    target alone, [1, 1]: read one by one, the tenth would be a prefill and the last the loop's only decode, its
    steady state. Most steps fit neither pattern, so none takes a phase from its shapes; where most fit (a prefill,
    decodes, then one scoring forward), those that fit do."""
    a = analyze(load_trace(_shaped_steps(tmp_path, [[1, 16]] + [[1, 2]] * 9 + [[1, 1]])))
    assert {s.kind for s in a.steps} == {"profiler_step"}
    assert (a.summary.steps_used, a.summary.steps) == ("all", 11)
    a = analyze(load_trace(_shaped_steps(tmp_path, [[1, 16]] + [[1, 1]] * 4 + [[1, 20]])))
    assert [s.kind for s in a.steps] == ["prefill"] + ["decode"] * 4 + ["profiler_step"]


def test_a_thread_asleep_between_its_steps_is_not_busy(tmp_path):
    """A serving loop that sleeps between two bursts of requests (`time.sleep`, 1 ms, under the loop's own frame):
    three ProfilerSteps of an op each, 300 us in all, the sleep [200, 1200] between the second and the third. The
    sleeping thread waits for nothing and no one: it is idle, not busy, so the steps hold all of its busy time and
    no warning says they may not be the run's (it said 23%, the most outside them `<built-in function sleep>`, and
    that the thread's work ran on another thread)."""
    events = [{"ph": "X", "cat": "python_function", "name": "serve.py(3): loop", "pid": 1, "tid": 1, "ts": 0,
               "dur": 1300}]  # fmt: skip
    for i, t in enumerate((0, 100, 1200)):
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t, "dur": 100},
            {"ph": "X", "cat": "cpu_op", "name": "aten::randint", "pid": 1, "tid": 1, "ts": t + 2, "dur": 90},
        ]
    events.append(
        {"ph": "X", "cat": "python_function", "name": "<built-in function sleep>", "pid": 1, "tid": 1, "ts": 200,
         "dur": 1000}
    )  # fmt: skip
    path = tmp_path / "sleep.json"
    path.write_text(json.dumps({"traceEvents": events}))
    a = analyze(load_trace(path))
    assert len(a.steps) == 3
    assert not [w for w in a.warnings if "of their thread's busy time" in w]


def test_steps_holding_little_of_their_threads_time_on_a_cpu_trace_are_said(tmp_path):
    """A serving loop's main thread: three ProfilerSteps building requests (an op each), and a long wait for a worker
    thread the profiler did not record (`<built-in method acquire ...>`, 1 ms) outside them. With no GPU work to
    weigh, the host stands in: the steps hold 3% of their thread's busy time, and the warning names the wait, its
    object address removed. Steps holding most of it: no warning."""

    def trace(wait_us: int) -> Path:
        events = []
        for i in range(3):
            t = 100 * i
            events += [
                {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t,
                 "dur": 20},
                {"ph": "X", "cat": "cpu_op", "name": "aten::randint", "pid": 1, "tid": 1, "ts": t + 2, "dur": 10},
            ]  # fmt: skip
        frame = "<built-in method acquire of _thread.lock object at 0x7f00ccfd9900>"
        events.append(
            {"ph": "X", "cat": "python_function", "name": frame, "pid": 1, "tid": 1, "ts": 300, "dur": wait_us}
        )
        path = tmp_path / f"wait{wait_us}.json"
        path.write_text(json.dumps({"traceEvents": events}))
        return path

    said = [w for w in analyze(load_trace(trace(1_000))).warnings if "of their thread's busy time" in w]
    assert len(said) == 1 and said[0].startswith("the steps hold 3% of their thread's busy time (0.030 of 1.030 ms)")
    assert (
        "the most outside them: <built-in method acquire of _thread.lock object>, 1.000 ms of its own time" in said[0]
    )
    assert not [w for w in analyze(load_trace(trace(5))).warnings if "of their thread's busy time" in w]


def test_two_steps_growing_by_a_token_are_no_run_without_a_kv_cache(tmp_path):
    """Prompt lookup: single-token steps, then verify rounds of [1, 4] and [1, 5] (three and four candidates), then
    one more token. Two steps growing by one are no loop without a KV cache (that takes three): the [1, 4] round
    stays an iteration, not a decode step the median could land on."""
    a = analyze(load_trace(_shaped_steps(tmp_path, [[1, 28]] + [[1, 1]] * 5 + [[1, 4], [1, 5], [1, 1]])))
    assert [s.kind for s in a.steps][5:7] == ["decode", "profiler_step"]
    a = analyze(load_trace(_shaped_steps(tmp_path, [[1, 16], [1, 17], [1, 18], [1, 19]])))
    assert [s.kind for s in a.steps] == ["decode"] * 4


def test_a_verify_round_that_appends_to_the_cache_is_no_prefill(tmp_path):
    """Prompt lookup's rounds [1, 4] then [1, 5] before a single-token step, their attention reading 33 and 38 keys:
    more than their own tokens and more than the step before read, so they append to a cache they did not start,
    and the [1, 5] one is no prefill (it was, being followed by [1, 1]). A prefill's keys are its own tokens (a
    dynamic cache, a second request's prompt after the first's decodes) or the whole preallocated cache (a static
    one: as many keys as the step before read): both stay prefills."""
    lookup = [[1, 28]] + [[1, 1]] * 5 + [[1, 4], [1, 5], [1, 1]]
    a = analyze(load_trace(_shaped_steps(tmp_path, lookup, keys=[28, 29, 30, 31, 32, 33, 37, 42, 43])))
    assert [s.kind for s in a.steps] == ["prefill"] + ["decode"] * 5 + ["profiler_step"] * 2 + ["decode"]
    dynamic = [[1, 16], [1, 1], [1, 1], [1, 12], [1, 1]]
    a = analyze(load_trace(_shaped_steps(tmp_path, dynamic, keys=[16, 17, 18, 12, 13])))
    assert [s.kind for s in a.steps] == ["prefill", "decode", "decode", "prefill", "decode"]
    a = analyze(load_trace(_shaped_steps(tmp_path, dynamic, keys=[64] * 5)))  # a static cache of 64 positions
    assert [s.kind for s in a.steps] == ["prefill", "decode", "decode", "prefill", "decode"]


def test_a_chunked_prefills_chunks_are_each_a_prefill(tmp_path):
    """HF generate(prefill_chunk_size=16) on a 48-token prompt: three steps read [1, 16] each, their attention 16,
    32 and 48 keys (the first starts the cache, each next appends its chunk), then single-token steps. All three are
    the prompt's prefill; the last was left an iteration (its keys grew past its tokens, as a verify round's do) and
    the first two said nothing. A prefill then a verify round, [1, 28] then [1, 4] with 28 and 32 keys, is two steps:
    no run, the round stays (`test_a_verify_round_that_appends_to_the_cache_is_no_prefill`)."""
    chunked = [[1, 16]] * 3 + [[1, 1]] * 4
    a = analyze(load_trace(_shaped_steps(tmp_path, chunked, keys=[16, 32, 48, 49, 50, 51, 52])))
    assert [s.kind for s in a.steps] == ["prefill"] * 3 + ["decode"] * 4
    last_shorter = [[1, 16], [1, 16], [1, 8], [1, 1], [1, 1]]
    a = analyze(load_trace(_shaped_steps(tmp_path, last_shorter, keys=[16, 32, 40, 41, 42])))
    assert [s.kind for s in a.steps] == ["prefill"] * 3 + ["decode"] * 2
    lookup = [[1, 28], [1, 4], [1, 1], [1, 1], [1, 1]]
    a = analyze(load_trace(_shaped_steps(tmp_path, lookup, keys=[28, 32, 33, 34, 35])))
    assert [s.kind for s in a.steps] == ["profiler_step"] * 2 + ["decode"] * 3


def _cpu_trace(tmp_path: Path, events: list[dict]) -> Path:
    """A CPU-only torch.profiler chrome trace of `events` (X events on one thread; ts/dur in us)."""
    base = {"ph": "X", "pid": 7, "tid": 7}
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": [{**base, **e} for e in events]}))
    return path


def test_the_empty_profiler_step_the_last_step_call_opens_is_no_step(tmp_path):
    """`prof.step()` after a loop's last iteration opens a ProfilerStep that the profiler's stop closes with nothing
    in it (a profiler frame, no op): with steps that hold ops beside it, it is not a step (it was the median of
    two). When no ProfilerStep holds an op, they all stay."""
    events = []
    for i in range(2):
        t = 100.0 + i * 1000
        events += [
            {"cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": t, "dur": 900.0},
            {"cat": "cpu_op", "name": "aten::mm", "ts": t + 10, "dur": 800.0},
        ]
    events += [
        {"cat": "user_annotation", "name": "ProfilerStep#2", "ts": 2100.0, "dur": 50.0},
        {"cat": "python_function", "name": "torch/profiler/profiler.py(800): step", "ts": 2110.0, "dur": 20.0},
    ]
    steps = find_steps(load_trace(_cpu_trace(tmp_path, events)))
    assert steps.names == ["ProfilerStep#0", "ProfilerStep#1"]
    only_empty = [e for e in events if e["name"] != "aten::mm"]
    steps = find_steps(load_trace(_cpu_trace(tmp_path, only_empty)))
    assert steps.names == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
