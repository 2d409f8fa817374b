"""One step on one clock (probe.explorer.step_clock) and the two rules it draws that the ledger also sums: each
GPU idle
gap with its cause (probe.analysis.ledger.gpu.idle_gaps) and each stretch of external wait
(probe.analysis.ledger.build.unseen_wait_pieces). Figures are worked out by hand from the hand trace
(tests/data/make_hand_trace.py) beside each assertion; then every public trace, where what is drawn must add up to
the ledger's own figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from probe.analysis.diagnosis.evidence import evidence
from probe.analysis.ledger.build import analyze, unseen_wait_pieces
from probe.analysis.ledger.gpu import IDLE_CAUSES, attribute, idle_gaps
from probe.analysis.trace import load_trace
from probe.explorer import step_clock as layout
from probe.explorer.step_clock import step_clock
from tests.conftest import DATA, SHARED, needs_shared, shared_trace

PUBLIC = SHARED / "public"
HAND = DATA / "hand_decode.trace.json.gz"


@pytest.fixture(scope="module")
def hand():
    trace = load_trace(HAND)
    return trace, analyze(trace)


# ---- the gaps and the external wait: one definition, summed by the ledger, drawn by the timeline ----------------


def test_each_idle_gap_of_the_hand_trace_with_its_cause(hand):
    """decode#0's GPU ops: gemv 125-140 (launched at 115), memcpy 141-143 (at 121), memset 144-146 (at 136), the
    graph's kernels 166-170 and 170.010-176 (launched at 155). The gaps: 140-141 and 143-144, each closed by an op
    launched before the gap began and under 30 us: kernel wait; 146-166, closed by a kernel launched at 155, after
    the gap began: host wait; 170-170.010: kernel wait. Prefill (ops 20-30, 40-45, 60-90, 92-95, launched at 4, 33,
    50, 84) has gaps 30-40 (cat launched at 33: host), 45-60 (flash at 50: host), 90-92 (argmax at 84: kernel)."""
    trace, analysis = hand
    gaps = idle_gaps(trace, attribute(trace, *analysis.windows()), 30_000)
    t0 = trace.start_ns
    got = [
        (int(s), int(a - t0), int(b - t0), IDLE_CAUSES[c])
        for s, a, b, c in zip(gaps.step, gaps.start, gaps.end, gaps.cause, strict=True)
    ]
    assert got == [
        (0, 30_000, 40_000, "host_wait"),
        (0, 45_000, 60_000, "host_wait"),
        (0, 90_000, 92_000, "kernel_wait"),
        (1, 140_000, 141_000, "kernel_wait"),
        (1, 143_000, 144_000, "kernel_wait"),
        (1, 146_000, 166_000, "host_wait"),
        (1, 170_000, 170_010, "kernel_wait"),
        # decode#1: add 230-235 (launched at 214), tiny 236-236.020 (at 224), old_style 240-250 (at 227)
        (2, 235_000, 236_000, "kernel_wait"),
        (2, 236_020, 240_000, "kernel_wait"),
    ]
    # the ledger's idle figures are these gaps summed (gpu.windows), step by step
    for s in analysis.steps:
        mine = [(b - a, c) for step, a, b, c in got if step == s.position]
        assert s.idle_host_wait_ns == sum(d for d, c in mine if c == "host_wait")
        assert s.idle_kernel_wait_ns == sum(d for d, c in mine if c == "kernel_wait")
        assert s.idle_other_ns == sum(d for d, c in mine if c == "other")


def test_a_gap_is_other_past_the_kernel_wait_threshold(hand):
    """With the threshold at 1.5 us, the 1 us gaps of decode#0 (and decode#1's 235-236) stay kernel waits, while
    prefill's 2 us gap (90-92) and decode#1's 3.98 us gap (236.020-240) become other: neither the host's (their
    kernels were launched at 84 and 227, before the gaps) nor short."""
    trace, analysis = hand
    gaps = idle_gaps(trace, attribute(trace, *analysis.windows()), 1_500)
    causes = [IDLE_CAUSES[c] for c in gaps.cause]
    assert causes == [
        "host_wait",
        "host_wait",
        "other",
        *["kernel_wait"] * 2,
        "host_wait",
        *["kernel_wait"] * 2,
        "other",
    ]


def test_the_external_wait_is_the_stretches_no_gpu_op_covers():
    """GPU busy [10, 20] and [30, 40]. A wait [5, 35] waited while no GPU op ran in [5, 10] and [20, 30] (15); a
    wait [15, 60] in [20, 30] only (10), since after the last GPU op inside it ends at 40 the call is returning; a
    wait [12, 18] never (0); a wait [45, 50], with no GPU op in it at all, the whole of it (5)."""
    gs, ge = np.array([10, 30]), np.array([20, 40])
    a, b = np.array([5, 15, 12, 45]), np.array([35, 60, 18, 50])
    piece, start, end = unseen_wait_pieces(gs, ge, a, b)
    assert list(zip(piece.tolist(), start.tolist(), end.tolist(), strict=True)) == [
        (0, 5, 10),
        (0, 20, 30),
        (1, 20, 30),
        (3, 45, 50),
    ]
    none = unseen_wait_pieces(np.zeros(0, np.int64), np.zeros(0, np.int64), a, b)
    assert none[0].tolist() == [0, 1, 2, 3] and (none[2] - none[1]).tolist() == [30, 45, 6, 5]


# ---- the hand trace on one clock --------------------------------------------------------------------------------


def test_the_hand_decode_step_on_one_clock(hand):
    """decode#0, host window 110-200 us, GPU work 125-176: drawn whole (90 us, 90,000 // 800 = 112 ns a column), and
    nothing merged."""
    trace, analysis = hand
    tl = step_clock(trace, analysis, 1)
    assert (tl.step, tl.wall_ns, tl.span_ns, tl.window, tl.resolution_ns) == (
        "decode#0",
        90_000,
        90_000,
        (0, 90_000),
        112,
    )
    labels = [lane.label for lane in tl.lanes]
    # ProfilerStep#3 > decode#0 > forward > cache.update#0 nest four deep; aten::linear > aten::addmm two
    assert labels == [
        "ranges 0",
        "ranges 1",
        "ranges 2",
        "ranges 3",
        "ops 0",
        "ops 1",
        "runtime calls",
        "host window",
        "GPU idle (this step's gaps)",
        "GPU 0 stream 7",
    ]
    assert not tl.merged and tl.events == len(tl.bars)
    by_name = {b.name: b for b in tl.bars if b.row >= 0}
    # each event coloured by the purpose part its time feeds, else by what it is
    assert by_name["aten::copy_"].key == by_name["cudaMemsetAsync"].key == "cache_update"  # inside cache.update#0
    assert by_name["aten::argmax"].key == "sample" and by_name["cudaStreamSynchronize"].key == "sync"
    assert (by_name["aten::linear"].key, by_name["cudaLaunchKernel"].key, by_name["cudaGraphLaunch"].key) == (
        "dispatch",
        "launch",
        "launch",
    )
    # times from the step's start: gemv 125-140 is 15-30 us in
    gemv = by_name["gemv_kernel"]
    assert (gemv.lane, gemv.start_ns, gemv.dur_ns, gemv.key, gemv.own) == (9, 15_000, 15_000, "gemm", True)
    assert "launched by cudaLaunchKernel at +0.005 ms" in gemv.detail
    assert "copy" in by_name["Memcpy HtoD (Pageable -> Device)"].detail
    # the idle gaps of the test above, from the step's start, and the 15 us before its first GPU op
    idle = sorted((b.start_ns, b.dur_ns, b.key) for b in tl.bars if b.lane == 8)
    assert idle == [
        (0, 15_000, "before_gpu"),
        (30_000, 1_000, "kernel_wait"),
        (33_000, 1_000, "kernel_wait"),
        (36_000, 20_000, "host_wait"),
        (60_000, 10, "kernel_wait"),
    ]
    # cudaStreamSynchronize 182-198 blocks while no GPU op of the trace runs (the graph's end at 176 is before it,
    # add_kernel's start at 230 after): 16 us of sync wait, all of it external, as the ledger says; the rest of the
    # 90 us window is host work, 72 us before the wait and 2 us after it
    window = sorted((b.kind, b.start_ns, b.dur_ns) for b in tl.bars if b.lane == 7)
    assert window == [("external", 72_000, 16_000), ("host_work", 0, 72_000), ("host_work", 88_000, 2_000)]
    assert tl.external_ns == analysis.steps[1].external_wait_ns == 16_000
    (mark,) = tl.marks
    assert (mark.call, mark.lane, mark.start_ns, mark.dur_ns) == ("cudaStreamSynchronize", 6, 72_000, 16_000)


def test_links_join_each_gpu_op_to_its_launch_call(hand):
    """gemv to the cudaLaunchKernel at 115 us (5 us in); both graph kernels to the cudaGraphLaunch at 155 (45 us
    in); a call's row links everything it launched, an op's row itself alone."""
    trace, analysis = hand
    tl = step_clock(trace, analysis, 1)
    ops = {o.name: o for o in tl.ops}
    assert (ops["gemv_kernel"].call_name, ops["gemv_kernel"].call_start_ns, ops["gemv_kernel"].call_lane) == (
        "cudaLaunchKernel",
        5_000,
        6,
    )
    graph = ops["graph_kernel_a"].call_row
    assert [o.name for o in tl.links([graph])] == ["graph_kernel_a", "graph_kernel_b"]
    assert [o.name for o in tl.links([ops["graph_kernel_b"].row])] == ["graph_kernel_b"]
    assert all(o.own for o in tl.ops) and len(tl.ops) == 5


def test_a_window_draws_only_what_lies_in_it(hand):
    """The window 40-55 us holds the graph launch call (45-55) and the host-wait gap (36-56) but no GPU op (the
    graph's first kernel starts at 56)."""
    trace, analysis = hand
    tl = step_clock(trace, analysis, 1, window=(40_000, 55_000))
    assert tl.window == (40_000, 55_000) and not tl.ops
    names = {b.name for b in tl.bars}
    assert "cudaGraphLaunch" in names and "gemv_kernel" not in names
    assert any(b.key == "host_wait" for b in tl.bars)


# ---- merging: nothing dropped ------------------------------------------------------------------------------------


def _many_ops(tmp_path: Path, n: int) -> Path:
    """One 1 ms ProfilerStep holding n ops of 0.1 us, one every 0.2 us, and a 50 us op after them."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    events += [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 3}", "pid": 1, "tid": 1, "ts": 0.2 * i, "dur": 0.1}
        for i in range(n)
    ]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::long", "pid": 1, "tid": 1, "ts": 900, "dur": 50})
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_short_events_merge_into_bars_as_long_as_what_they_hold(tmp_path):
    """4,000 ops of 100 ns, 100 ns apart, in a 1 ms step: a column is 1,000,000 // 800 = 1,250 ns. A run takes ops
    while the gaps between them add up to less than a column: the k-th op of the lane follows 100 k ns of gaps, so a
    new run starts each time 100 k passes a multiple of 1,250 (at k = 13, 25, 38, ...): 320 runs of 12 or 13 ops.
    Each is drawn as long as its ops (1.2 or 1.3 us), not its span, so the lane shows 400 us of ops, as many as it
    holds, never the 800 us they are spread over; and each ends within a column of its last op. The 50 us op is drawn
    as itself. Zoomed to the first 50 us (62 ns a column), the 251 ops that touch it are drawn one by one."""
    trace = load_trace(_many_ops(tmp_path, 4000))
    analysis = analyze(trace)
    tl = step_clock(trace, analysis, 0)
    ops = [b for b in tl.bars if tl.lanes[b.lane].label == "ops 0"]
    merged = [b for b in ops if b.count > 1]
    assert len(merged) == 320 and {b.count for b in merged} == {12, 13} and sum(b.count for b in merged) == 4000
    assert all(b.dur_ns == 100 * b.count for b in merged)  # what they hold
    assert all(b.extent_ns - b.dur_ns < tl.resolution_ns for b in merged)  # their gaps: under a column
    assert (merged[0].start_ns, merged[0].dur_ns, merged[0].name) == (0, 1_300, "13 ops")
    assert "13 ops merged" in merged[0].detail and "aten::op0" in merged[0].detail
    assert sum(b.dur_ns for b in ops) == 4000 * 100 + 50_000  # the lane holds 450 us of ops, and shows 450
    assert [b.name for b in ops if b.count == 1] == ["aten::long"]
    assert [(m.lane, m.events, m.bars) for m in tl.merged] == [("ops 0", 4000, 320)]
    assert sum(b.count for b in tl.bars) == tl.events  # every event is in exactly one bar
    zoomed = step_clock(trace, analysis, 0, window=(0, 50_000))
    ops = [b for b in zoomed.bars if zoomed.lanes[b.lane].label == "ops 0"]
    assert zoomed.resolution_ns == 62 and len(ops) == 251 and all(b.count == 1 for b in ops)


def test_past_max_bars_the_resolution_doubles(tmp_path, monkeypatch):
    """With room for 50 bars, the 251 ops of the first 50 us are merged at a coarser column until at most 50 bars
    remain (the step's range and its host window among them), and still every event is in one bar."""
    monkeypatch.setattr(layout, "MAX_BARS", 50)
    trace = load_trace(_many_ops(tmp_path, 4000))
    tl = step_clock(trace, analyze(trace), 0, window=(0, 50_000))
    assert len(tl.bars) <= 50 and tl.resolution_ns > 62
    assert sum(b.count for b in tl.bars) == tl.events == 251 + 2  # the ops, the range, the window's host work


# ---- every public trace: what is drawn adds up to the ledger --------------------------------------------------


@needs_shared
@pytest.mark.parametrize("name", sorted(p.name for p in PUBLIC.glob("*.json.gz")))
def test_every_public_step_on_one_clock_adds_up_to_its_ledger(name):
    trace = load_trace(shared_trace(f"public/{name}"))
    analysis = analyze(trace)
    step = analysis.steps[len(analysis.steps) // 2]
    tl = step_clock(trace, analysis, step.position)
    assert tl.external_ns == step.external_wait_ns
    assert sum(b.count for b in tl.bars) == tl.events and len(tl.bars) <= layout.MAX_BARS
    own = [o for o in tl.ops if o.own]
    assert len(own) == step.gpu_ops  # every GPU op of the step lies in the step read whole
    gaps = [b for b in tl.bars if b.kind == "idle"]
    every = idle_gaps(trace, attribute(trace, *analysis.windows()), 30_000)
    assert sum(b.count for b in gaps) == int(np.sum(every.step == step.position))  # each gap in one bar
    # merged or not, each bar is as long as what it holds: the gaps add up to the ledger's by cause
    for cause, ns in (("host_wait", step.idle_host_wait_ns), ("kernel_wait", step.idle_kernel_wait_ns)):
        assert sum(b.dur_ns for b in gaps if b.key == cause) == ns
    # the host window lane adds up to the Diagnosis's evidence: host work, sync wait with the GPU working, external
    e = evidence(step)
    held = {k: sum(b.dur_ns for b in tl.bars if b.key == k) for k in ("host_work", "gpu_wait", "external")}
    assert held == {
        "host_work": e.host_work_ns,
        "gpu_wait": e.sync_wait_ns - e.external_wait_ns,
        "external": e.external_wait_ns,
    }


def test_a_kernel_names_the_op_it_ran_for_with_its_shapes():
    """H100 Qwen1.5-0.5B: the 48 aten::mm calls of shape 8944x1024 by 1024x2816 (the per-op roofline's count) each
    launch a memset (cudaMemsetAsync, cuBLASLt's workspace) and a GEMM (cudaLaunchKernelExC) from inside the op."""
    trace = load_trace(shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz"))
    tl = step_clock(trace, analyze(trace), 0)
    mm = [o for o in tl.ops if o.op == "aten::mm [(8944, 1024), (1024, 2816)]"]
    assert (
        sorted((o.category, o.call_name) for o in mm)
        == [("gemm", "cudaLaunchKernelExC")] * 48 + [("memset", "cudaMemsetAsync")] * 48
    )
    gemm = next(o for o in mm if o.category == "gemm")
    zoomed = step_clock(trace, analyze(trace), 0, window=(gemm.start_ns, gemm.start_ns + gemm.dur_ns))
    (bar,) = [b for b in zoomed.bars if b.row == gemm.row]  # drawn alone at this zoom: its hover says the op
    assert "for aten::mm [(8944, 1024), (1024, 2816)]" in bar.detail and "category gemm" in bar.detail


def test_a_gpu_gap_under_the_external_wait_is_said_to_be_the_unseen_work_s():
    """SGLang's extend step: its GPU gap of 493.255 ms is host wait by the ledger's rule, and lies wholly inside the
    host's 493.255 ms of external wait; the timeline says so (the diagnosis calls the step external)."""
    trace = load_trace(shared_trace("public/rocm_sglang_qwen3_8b_extend_step.trace.json.gz"))
    tl = step_clock(trace, analyze(trace), 0)
    assert any(n.startswith("493.255 ms of the GPU's idle gaps") for n in tl.notes)
    hand = load_trace(HAND)
    assert not any("idle gaps" in n for n in step_clock(hand, analyze(hand), 1).notes)  # none lie under its wait
