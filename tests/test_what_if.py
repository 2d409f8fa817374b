"""What-ifs that hold (issue 32): each states what it needs (`requires`), which of that this trace was checked for
(`holds`), and is not offered where a condition fails (`withheld` says why). Hand-built traces give each condition
and each price a known answer, worked out beside it; then the real traces (../shared/traces, skipped when absent)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probe.analysis.diagnosis.answer import answer
from probe.analysis.diagnosis.conditions import COLD_MIN_NS, GEMM_OP, step_facts
from probe.analysis.diagnosis.evidence import Context
from probe.analysis.diagnosis.verdict import diagnose_trace
from probe.analysis.diagnosis.what_if import (
    BATCH_GROWTH,
    COMPILE_MODEL,
    MAX_BATCH,
    SAME_SHAPES,
    Condition,
    WhatIf,
    _largest_batch,
    predict_batch,
    predict_threads,
)
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.types import AnalyzeOptions
from probe.analysis.records.sidecar import EventCost
from probe.analysis.roofline.ops import OpRoofline
from probe.analysis.trace import load_trace
from tests.conftest import ROOT, shared_trace
from tests.test_diagnosis import _trace, drain_then_own_work_trace

SHARED = ROOT.parent / "shared" / "traces"
WILD, PUBLIC = SHARED / "wild", SHARED / "public"


def _median(path: Path, context: Context | None = None, options: AnalyzeOptions | None = None):
    trace = load_trace(path)
    analysis = analyze(trace, options)
    base = Context.of(trace, analysis=analysis)
    if context is not None:
        base = replace(context, facts=base.facts, launch_call_ns=base.launch_call_ns)
    return diagnose_trace(analysis, base).median


def _changes(d) -> list[str]:
    return [w.change for w in d.what_if]


def _unsaid_failures(w: WhatIf) -> list[Condition]:
    """The conditions that fail on the trace and that the change does not name in its first words."""
    said = w.change.startswith("make the shapes static")
    return [c for c in w.holds if c.holds is False and not (said and c.name == SAME_SHAPES)]


def _host_bound_decode(extra_host=(), extra_gpu=(), name="decode#0", at=0, args=None):
    """A host-bound decode step of 100 us: a forward range (2-90) with two ops each launching a kernel, plus what
    a test adds; the kernels take 7 us in all."""
    t = at
    host = [
        ("user_annotation", name, t, t + 100, {}),
        ("user_annotation", "forward", t + 2, t + 90, {}),
        ("cpu_op", "aten::mm", t + 10, t + 20, args or {}),
        ("cuda_runtime", "cudaLaunchKernel", t + 12, t + 15, {"correlation": t + 1}),
        ("cpu_op", "aten::add", t + 80, t + 85, {}),
        ("cuda_runtime", "cudaLaunchKernel", t + 81, t + 83, {"correlation": t + 2}),
        *extra_host,
    ]
    gpu = [
        ("kernel", "gemm", t + 20, t + 25, {"correlation": t + 1}),
        ("kernel", "add", t + 90, t + 92, {"correlation": t + 2}),
        *extra_gpu,
    ]
    return host, gpu


# --- warm ------------------------------------------------------------------------------------------------------


def test_a_cold_step_gets_profile_a_warm_iteration_and_nothing_else(tmp_path):
    """The first launch of `big` takes 50 ms (lazy module loading) against the trace's median launch of 3 us, in a
    step of 60 ms: 50 - 0.003 of its 60 ms are first-call set-up (a warm launch still costs 3 us), so the only line
    is to profile a warm iteration, saving those 49.997 ms, and every other change is withheld."""
    host = [
        ("user_annotation", "decode#0", 0, 60_000, {}),
        ("user_annotation", "forward", 0, 59_000, {}),
        ("cpu_op", "aten::mm", 10, 50_010, {}),
        ("cuda_runtime", "cudaLaunchKernel", 10, 50_010, {"correlation": 1}),
    ]
    gpu = [("kernel", "big", 50_010, 50_020, {"correlation": 1})]
    for i in range(2, 12):  # ten launches of 3 us: the median launch
        host += [("cuda_runtime", "cudaLaunchKernel", 50_000 + 10 * i, 50_003 + 10 * i, {"correlation": i})]
        gpu += [("kernel", f"k{i}", 50_100 + 10 * i, 50_105 + 10 * i, {"correlation": i})]
    d = _median(_trace(tmp_path, host, gpu))
    assert _changes(d) == ["profile a warm iteration"]
    (w,) = d.what_if
    assert w.saving_ms == pytest.approx(49.997) and [(c.name, c.holds) for c in w.holds] == [(w.requires[0], True)]
    assert "set-up 49.997 ms = 50.000 in cold calls - 0.003 that warm calls of their kinds cost" in w.arithmetic
    assert "cudaLaunchKernel (of big) took 50.000 ms, 16,667x the trace's median launch call (3.0 us)" in w.arithmetic
    assert d.withheld and d.withheld[0].startswith("every other change: not offered: each needs a warm step")


def _cold_then(tmp_path, op_us: int, kernel_us: int):
    """A step of 60 ms whose first launch (of `big`, inside aten::conv) takes 50 ms, then ten aten::add of `op_us`
    each launching one 3 us call of a kernel of `kernel_us` (one after another on the stream), and time no event
    covers up to the window's end: 60 - 50 - 10 x op_us / 1000 ms of it."""
    host = [
        ("user_annotation", "decode#0", 0, 60_000, {}),
        ("cpu_op", "aten::conv", 100, 50_100, {}),
        ("cuda_runtime", "cudaLaunchKernel", 100, 50_100, {"correlation": 1}),
    ]
    gpu = [("kernel", "big", 50_100, 50_110, {"correlation": 1})]
    free = 50_110
    for i in range(10):
        start = 50_200 + (op_us + 100) * i
        host += [
            ("cpu_op", "aten::add", start, start + op_us, {}),
            ("cuda_runtime", "cudaLaunchKernel", start + 10, start + 13, {"correlation": i + 2}),
        ]
        at = max(free, start + 20)
        gpu += [("kernel", f"k{i}", at, at + kernel_us, {"correlation": i + 2})]
        free = at + kernel_us
    return _median(_trace(tmp_path, host, gpu))


@pytest.mark.parametrize(
    ("op_us", "kernel_us", "host_parts", "rest"),
    [
        # 60 ms of host work: 50 - 0.003 set-up (the cold launch less a warm one's 3 us, which stays launch time), 7
        # no event covers, 10 x 297 us dispatch, 11 x 3 us launch; GPU 1.010 ms
        pytest.param(
            300,
            100,
            (49_997_000, 7_000_000, 2_970_000, 33_000),
            "Without it: host work 10.003 ms against GPU work 1.010 ms (9.90x): host-bound, by unattributed (7.000 "
            "ms that no op, frame or call covers: the trace cannot say whether that is set-up too; a warm profile "
            "can).",
            id="rest-uncovered",
        ),
        # the ops take 800 us each: dispatch 10 x 797 us = 7.970 ms leads what is left
        pytest.param(
            800,
            100,
            (49_997_000, 2_000_000, 7_970_000, 33_000),
            "Without it: host work 10.003 ms against GPU work 1.010 ms (9.90x): host-bound, by dispatch.",
            id="rest-dispatch",
        ),
        # the kernels take 2 ms each: 20.010 ms of GPU work outweigh the 10 ms of host work left
        pytest.param(
            300,
            2_000,
            (49_997_000, 7_000_000, 2_970_000, 33_000),
            "Without it: host work 10.003 ms against GPU work 20.010 ms: GPU-bound.",
            id="rest-gpu",
        ),
    ],
)
def test_a_cold_steps_verdict_names_set_up_and_the_rest_without_it(tmp_path, op_us, kernel_us, host_parts, rest):
    """One cold launch of 50 ms, and 30 us in every other launch: the launch mechanism holds 50.030 ms of the step's
    60 ms of host work, but the verdict's mechanism is first-call set-up (the time inside the cold call less what a
    warm launch costs, taken out of launch calls), and the headline says what bounds the step without it, from the
    10.003 ms of host work left."""
    d = _cold_then(tmp_path, op_us, kernel_us)
    assert (d.bound, d.host_bound_by) == ("host", "setup") and "by launch" not in d.headline
    e = d.evidence
    assert (e.setup_ns, e.unattributed_ns, e.dispatch_ns, e.launch_ns) == host_parts
    assert e.host_work_ns == sum(host_parts) == 60_000_000  # the parts still add up to host work
    assert d.headline.startswith("step 0 (decode#0): host-bound, by first-call set-up. The host works ")
    assert (
        " Of its host work, 49.997 ms is first-call set-up: the first cudaLaunchKernel (of big) took 50.000 ms, "
        "16,667x the trace's median launch call (3.0 us). " + rest
    ) in d.headline
    assert _changes(d) == ["profile a warm iteration"]
    said = (
        "it counts as set-up only the cold calls' time, not the 7.000 ms of host work that no op, frame or call covers"
    )
    assert (said in d.what_if[0].assumption) == (host_parts[1] > host_parts[2])  # the rest mostly uncovered


def test_a_cold_cpu_steps_verdict_names_set_up_and_the_rest_without_it(tmp_path):
    """On a CPU: the first aten::mm takes 50 ms, its ten later calls 100 us each (its median), in a 60 ms step: 49.9 ms
    of first-call set-up (a warm aten::mm still takes 100 us), 1.1 ms inside ops and 9 ms between them."""
    host = [("user_annotation", "decode#0", 0, 60_000, {}), ("cpu_op", "aten::mm", 10, 50_010, {})]
    host += [("cpu_op", "aten::mm", 50_100 + 500 * i, 50_200 + 500 * i, {}) for i in range(10)]
    d = _median(_trace(tmp_path, host))
    assert (d.bound, d.host_bound_by) == ("cpu_only", "setup")
    assert (d.evidence.setup_ns, d.evidence.dispatch_ns) == (49_900_000, 1_100_000)
    assert d.headline == (
        "step 0 (decode#0): CPU only (no GPU side in the trace): the host's 60.000 ms is the step, most of it "
        "first-call set-up. Of its host work, 49.900 ms is first-call set-up: the first aten::mm took 50.000 ms, 500x "
        "its median call (100.0 us). Without it: host work 10.100 ms, most of it between ops (9.000 ms that no op, "
        "frame or call covers: the trace cannot say whether that is set-up too; a warm profile can)."
    )
    from probe.explorer.figures.diagnosis import step_frame

    host = step_frame(d).query("row == 'host window'").set_index("piece")["ms"]  # the explorer's bar: the same parts
    assert host["first-call set-up"] == 49.9 and host.sum() == pytest.approx(60.0)


def test_the_same_step_warm_is_not_cold(tmp_path):
    """The trace's second pass over the same kernels: each is no longer the first launch of its kernel."""
    host, gpu = _host_bound_decode()
    more_host, more_gpu = _host_bound_decode(name="decode#1", at=200)
    facts = step_facts(
        load_trace(_trace(tmp_path, host + more_host, gpu + more_gpu)), analyze(load_trace(tmp_path / "t.json"))
    )
    assert [f.cold for f in facts.values()] == [None, None]
    assert COLD_MIN_NS == 1_000_000  # a first call must cost a millisecond more than its baseline to be set-up


def _lazy_step(tmp_path, loads: str):
    """A step of 40 ms whose ten launches each launch a kernel of its own (k0..k9: every launch is the first of its
    kernel) and take 1.5 ms, the trace's median launch call, so no launch stands out from it. `loads`: each kernel's
    module loads in a 1.4 ms cuModuleLoadData (a driver call) "inside" its launch (CUDA's lazy loading, recorded
    within the launch) or just "before" it (a loader's own call, as nvFuser's and cuBLASLt's are in an nsys
    export); "none": no load."""
    host = [("user_annotation", "decode#0", 0, 40_000, {})]
    gpu = []
    for i in range(10):
        at = 100 + 3_500 * i
        launch = at + (1_500 if loads == "before" else 0)
        host.append(("cuda_runtime", "cudaLaunchKernel", launch, launch + 1_500, {"correlation": i + 1}))
        if loads != "none":
            load = at + (50 if loads == "inside" else 0)
            host.append(("cuda_driver", "cuModuleLoadData", load, load + 1_400, {}))
        gpu.append(("kernel", f"k{i}", at + 3_100, at + 3_110, {"correlation": i + 1}))
    return _trace(tmp_path, host, gpu)


@pytest.mark.parametrize("loads", ["inside", "before"])
def test_module_loads_make_a_step_of_first_launches_cold(tmp_path, loads):
    """Each kernel is launched once, so every launch is a first one and the trace's median launch call is itself a
    lazy one's: the first-call rule sees nothing. The ten module loads are set-up by what they are: 10 x 1.4 = 14 ms
    of the 40 ms step (a launch that holds one costs warm only its 0.1 ms outside the load), over a tenth of it."""
    path = _lazy_step(tmp_path, loads)
    [facts] = step_facts(load_trace(path), analyze(load_trace(path))).values()
    assert facts.cold is not None
    assert (facts.cold.ns, facts.cold.loads, facts.cold.call) == (14_000_000, 10, "")
    assert facts.cold.text == "10 module loads (cuModuleLoadData x10) took 14.000 ms"
    d = _median(path)
    assert _changes(d) == ["profile a warm iteration"] and d.what_if[0].saving_ms == pytest.approx(14.0)
    assert d.withheld[0].endswith("is first-call set-up: 10 module loads (cuModuleLoadData x10) took 14.000 ms")


def test_slow_first_launches_without_a_module_load_are_not_cold(tmp_path):
    """The same step with no module load: every launch is slow and first, but nothing in the trace says the time is
    set-up (a launch also blocks when the launch queue is full), so the step is not called cold."""
    path = _lazy_step(tmp_path, "none")
    [facts] = step_facts(load_trace(path), analyze(load_trace(path))).values()
    assert facts.cold is None
    assert "profile a warm iteration" not in _changes(_median(path))


def test_first_launches_are_judged_against_repeat_launches(tmp_path):
    """Four kernels, each launched first in 2 ms, then again in 5 us: the trace's median launch call (1.0025 ms) is
    half a lazy first launch's, but a repeat launch (warm by the cold rule itself: only a first call is cold) costs
    5 us. The four first launches are cold: 4 x (2 - 0.005) = 7.980 ms of set-up in a 20 ms step."""
    host = [("user_annotation", "decode#0", 0, 20_000, {})]
    gpu = []
    for i in range(4):
        first, again = 100 + 2_100 * i, 9_000 + 100 * i
        host.append(("cuda_runtime", "cudaLaunchKernel", first, first + 2_000, {"correlation": i + 1}))
        host.append(("cuda_runtime", "cudaLaunchKernel", again, again + 5, {"correlation": i + 11}))
        gpu.append(("kernel", f"k{i}", first + 2_000, first + 2_010, {"correlation": i + 1}))
        gpu.append(("kernel", f"k{i}", again + 20, again + 30, {"correlation": i + 11}))
    path = _trace(tmp_path, host, gpu)
    [facts] = step_facts(load_trace(path), analyze(load_trace(path))).values()
    assert facts.cold is not None and facts.cold.ns == 7_980_000
    assert facts.cold.text == (
        "the first cudaLaunchKernel (of k0) took 2.000 ms, 400x the trace's median repeat launch call (5.0 us)"
    )


def test_the_warm_what_if_saves_the_first_calls_excess_over_a_warm_one(tmp_path):
    """The first aten::conv2d takes 20 ms and holds its kernel's first launch (15 ms, cold too: the ten repeat
    launches take 5 us); the ten later aten::conv2d take 1 ms each. A warm step still calls aten::conv2d: profiling a
    warm one saves 20 - 1 = 19 ms, not the whole first call, and the launch inside it is part of its time, so no warm
    launch is taken off again. The verdict's set-up part is the same 19 ms: the conv's 5 ms of dispatch and 15 ms of
    launch, each less its share of the warm 1 ms (0.25 and 0.75), the rest staying dispatch and launch time."""
    host = [
        ("user_annotation", "decode#0", 0, 40_000, {}),
        ("cpu_op", "aten::conv2d", 100, 20_100, {}),
        ("cuda_runtime", "cudaLaunchKernel", 5_000, 20_000, {"correlation": 1}),
    ]
    gpu = [("kernel", "conv", 20_000, 20_010, {"correlation": 1})]
    for i in range(10):
        at = 21_000 + 1_100 * i
        host.append(("cpu_op", "aten::conv2d", at, at + 1_000, {}))
        host.append(("cuda_runtime", "cudaLaunchKernel", at + 10, at + 15, {"correlation": i + 2}))
        gpu.append(("kernel", "conv", at + 20, at + 30, {"correlation": i + 2}))
    d = _median(_trace(tmp_path, host, gpu))
    (w,) = d.what_if
    assert (w.change, w.saving_ms) == ("profile a warm iteration", pytest.approx(19.0))
    assert "set-up 19.000 ms = 20.000 in cold calls - 1.000 that warm calls of their kinds cost" in w.arithmetic
    assert "the first aten::conv2d took 20.000 ms, 20x its median call (1000.0 us)" in w.arithmetic
    e = d.evidence
    assert e.setup_ns == 19_000_000
    assert (e.dispatch_ns, e.launch_ns) == (250_000 + 10 * 995_000, 750_000 + 10 * 5_000)


def test_a_step_whose_cold_call_ran_on_another_thread_is_cold_with_no_set_up_of_its_own(tmp_path):
    """The cold launch (50 ms, against the trace's 3 us) runs on a helper thread of the step's process, inside the
    step's window (hta_rocm_mi250_minitoy_train's first step: a 6.5 ms first hipLaunchKernel on another thread):
    the step is cold, its set-up the launch less a warm one's 3 us, and none of it is on its own thread, so no part
    of its own host work is set-up (and the own-thread split, given no spans, is not asked)."""
    path = _trace(
        tmp_path,
        [("user_annotation", "decode#0", 0, 60_000, {})]
        + [
            ("cuda_runtime", "cudaLaunchKernel", 50_000 + 10 * i, 50_003 + 10 * i, {"correlation": i})
            for i in range(2, 12)
        ],
        [("kernel", "big", 50_010, 50_020, {"correlation": 1})]
        + [("kernel", f"k{i}", 50_100 + 10 * i, 50_105 + 10 * i, {"correlation": i}) for i in range(2, 12)],
    )
    doc = json.loads(path.read_text())
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 2,
            "ts": 100,
            "dur": 50_000,
            "args": {"correlation": 1},
        }
    )
    path.write_text(json.dumps(doc))
    [facts] = step_facts(load_trace(path), analyze(load_trace(path))).values()
    assert facts.cold is not None and (facts.cold.ns, facts.cold.parts_ns) == (49_997_000, {})
    d = _median(path)
    assert _changes(d) == ["profile a warm iteration"] and d.evidence.setup_ns == 0


# --- capture ---------------------------------------------------------------------------------------------------


def test_capture_is_offered_on_a_host_bound_forward(tmp_path):
    host, gpu = _host_bound_decode()
    d = _median(_trace(tmp_path, host, gpu))
    w = next(w for w in d.what_if if w.change == "capture the forward in a CUDA graph")
    assert {c.name: c.holds for c in w.holds} == {
        "a warm step": True,
        "the GPU side recorded": True,
        "no graph replayed already (no graph launch call in the step)": True,
        "a forward (no backward, no optimizer)": True,
        "nothing in the capture region that waits on the device (no sync, blocking copy or .item())": True,
        "no op whose output shape depends on the data": True,
        "the same shapes in every step of its kind": None,  # one step, no shapes: the trace cannot say
    }
    assert list(w.requires) == [c.name for c in w.holds]


@pytest.mark.parametrize(
    ("added", "needs", "said"),
    [
        (
            [("cuda_runtime", "cudaStreamSynchronize", 30, 40, {"correlation": 9})],
            "nothing in the capture region that waits on the device",
            "holds cudaStreamSynchronize x1",
        ),
        ([("cpu_op", "aten::item", 30, 40, {})], "nothing in the capture region that waits", "aten::item x1"),
        ([("cpu_op", "aten::nonzero", 30, 40, {})], "no op whose output shape depends on the data", "aten::nonzero"),
        ([("cpu_op", "MmBackward0", 30, 40, {})], "a forward (no backward, no optimizer)", "1 backward ops"),
        ([("user_annotation", "Optimizer.step#SGD.step", 92, 98, {})], "a forward", "an optimizer step"),
    ],
)
def test_capture_is_withheld_where_its_condition_fails(tmp_path, added, needs, said):
    host, gpu = _host_bound_decode(extra_host=added)
    d = _median(_trace(tmp_path, host, gpu))
    assert not any("CUDA graph" in c for c in _changes(d))
    line = next(x for x in d.withheld if x.startswith("capture the forward in a CUDA graph"))
    assert f"it needs {needs}" in line and said in line


def test_a_step_that_replays_a_graph_is_not_offered_capture_and_says_why(tmp_path):
    """The host-bound decode also replays a graph (a cudaGraphLaunch whose kernel the GPU ran): its forward is
    captured already, in part at least, so capture is withheld, and the line says so with the count. Before, the
    what-if was dropped without a line: the one condition capture checked and did not state."""
    host, gpu = _host_bound_decode(
        extra_host=[("cuda_runtime", "cudaGraphLaunch", 40, 45, {"correlation": 3})],
        extra_gpu=[("kernel", "graph_kernel", 46, 48, {"correlation": 3})],
    )
    d = _median(_trace(tmp_path, host, gpu))
    assert d.bound == "host" and not any("CUDA graph" in c for c in _changes(d))
    line = next(x for x in d.withheld if x.startswith("capture the forward in a CUDA graph"))
    assert line == (
        "capture the forward in a CUDA graph: not offered: it needs no graph replayed already (no graph launch call "
        "in the step), and the step replays graphs: 1 graph launch call beside its 2 kernel launches"
    )


def test_shapes_that_change_between_steps_ask_for_static_shapes_first(tmp_path):
    """Two decode steps whose mm reads a cache one position longer each step (recorded shapes differ): capture
    needs static shapes, and the change says so in its first words."""
    dims = lambda n: {"Input Dims": [[1, 1, 8], [1, n, 8]], "Input type": ["float", "float"]}  # noqa: E731
    host0, gpu0 = _host_bound_decode(args=dims(16))
    host1, gpu1 = _host_bound_decode(name="decode#1", at=200, args=dims(17))
    d = _median(_trace(tmp_path, host0 + host1, gpu0 + gpu1))
    w = next(w for w in d.what_if if "CUDA graph" in w.change)
    assert w.change == "make the shapes static (a fixed-size cache), then capture the forward in a CUDA graph"
    same = next(c for c in w.holds if c.name.startswith("the same shapes"))
    assert same.holds is False and same.evidence == "2 distinct sets of input shapes over its kind's 2 steps"


def test_no_gpu_side_withholds_every_gpu_what_if(tmp_path):
    """Launch calls whose kernels the trace lacks (GPU activity not collected): nothing is priced against a GPU side
    that was never measured."""
    host, _ = _host_bound_decode()
    d = _median(_trace(tmp_path, host, [("kernel", "other", 300, 301, {"correlation": 99})]))
    assert d.what_if == ()
    assert d.bound == "unknown"  # the verdict's own rule (evidence.gpu_side_missing), which the condition reads
    assert any("it needs the GPU side recorded, and none of its 2 launch calls has a GPU op" in x for x in d.withheld)


def test_a_trace_torch_did_not_write_is_not_told_to_record_with_torch(tmp_path):
    """Launch calls with no GPU op in a trace another tool wrote (no category torch.profiler writes: an eBPF tracer's
    cuLaunchKernel): the reason given is not torch.profiler's ProfilerActivity.CUDA, which that tool has not."""
    from probe.analysis.trace import GPU_UNRECORDED_WHY

    bare = [{"ph": "X", "name": "cuLaunchKernel", "pid": 7, "tid": 7, "ts": 10.0 * i, "dur": 2.0} for i in range(3)]
    path = tmp_path / "ebpf.json"
    path.write_text(json.dumps({"traceEvents": bare}))
    trace = load_trace(path)
    analysis = analyze(trace)
    d = diagnose_trace(analysis, Context.of(trace, analysis=analysis)).median
    said = [*d.lines, *d.withheld, *analysis.warnings]
    assert trace.format == "chrome" and d.bound == "unknown"
    assert any("none of its 3 launch calls has a GPU op" in x and GPU_UNRECORDED_WHY["chrome"] in x for x in said)
    assert not any("ProfilerActivity" in x for x in said)
    torch = _median(_trace(tmp_path, _host_bound_decode()[0], [("kernel", "other", 300, 301, {"correlation": 99})]))
    assert any("ProfilerActivity.CUDA" in x for x in torch.withheld)  # torch's trace is told torch's reason


# --- the sync --------------------------------------------------------------------------------------------------


def test_a_sync_on_earlier_work_saves_only_the_steps_own_tail(tmp_path):
    """drain_then_own_work_trace: host 40 us, GPU 44; the 30 us sync waited on earlier work, not this step's; the
    step's own kernels run 10 us past its window, which the next step's sync would wait on (at most the 30 it
    waited here): its own time is max(40 + 0 + 10, 44) = 50, and without the sync max(40, 44) = 44: 6 us, not 30."""
    d = _median(drain_then_own_work_trace(tmp_path))
    w = next(w for w in d.what_if if w.change.startswith("remove the sync"))
    assert (round(w.predicted_step_ms, 6), round(w.saving_ms, 6)) == (0.044, 0.006)
    assert "of the 0.030 ms wait, 0.030 was on earlier work (the previous step's GPU time showing" in w.arithmetic


def test_a_sync_wholly_on_earlier_work_is_withheld_and_says_so(tmp_path):
    """The same, but the step's own kernel ends inside its window: nothing of its own to save."""
    host = [
        ("cuda_runtime", "cudaLaunchKernel", -5, -3, {"correlation": 9}),
        ("user_annotation", "decode#0", 0, 70, {}),
        ("cuda_runtime", "cudaDeviceSynchronize", 0, 30, {"correlation": 1}),
        ("cpu_op", "aten::mm", 31, 50, {}),
        ("cuda_runtime", "cudaLaunchKernel", 32, 36, {"correlation": 2}),
    ]
    gpu = [("kernel", "earlier", -2, 30, {"correlation": 9}), ("kernel", "gemm", 36, 40, {"correlation": 2})]
    d = _median(_trace(tmp_path, host, gpu))
    assert not any(c.startswith("remove the sync") for c in _changes(d))
    line = next(x for x in d.withheld if x.startswith("remove the sync"))
    assert "was on earlier work (the previous step's GPU time showing, not this step's)" in line


# --- batching --------------------------------------------------------------------------------------------------


def test_batching_splits_the_gpu_work_into_weights_and_kv(tmp_path):
    """GEMM 5 us (the weights: once a forward) and attention 4 us (the KV cache: per sequence) under 100 us of host
    work: B grows until the step passes 1.25 x 100 us: 5 + 4B <= 125 -> B = 30, its GPU 125 us; the step 125 us for
    30 tokens."""
    host, gpu = _host_bound_decode(
        extra_host=[("cuda_runtime", "cudaLaunchKernel", 86, 88, {"correlation": 3})],
        extra_gpu=[("kernel", "flash_attn_fwd_kernel", 93, 97, {"correlation": 3})],
    )
    gpu[1] = ("kernel", "gemm2", 90, 90, {"correlation": 2})  # the add: no time, so the GEMM is 5 us
    d = _median(_trace(tmp_path, host, gpu))
    w = next(w for w in d.what_if if w.change.startswith("batch"))
    assert w.change == "batch 30 sequences" and w.predicted_step_ms == pytest.approx(0.125)
    assert w.saving_ms == pytest.approx(0.1 - 0.125 / 30)
    assert w.terms == pytest.approx({"host": 0.1, "once": 0.005, "per_sequence": 0.004})
    assert predict_batch(w.terms, 2) == pytest.approx(0.1) and predict_batch(w.terms, 30) == pytest.approx(0.125)


def test_gpu_batching_with_no_per_sequence_kernel_is_withheld(tmp_path):
    """No attention or KV-cache kernel: the per-sequence term is 0, so by the model no B grows the step and the
    largest batch would be MAX_BATCH, the search's limit alone: no batch is offered, and the line says why (before:
    "batch 64 sequences" at no cost a sequence)."""
    host, gpu = _host_bound_decode()
    d = _median(_trace(tmp_path, host, gpu))
    assert not any(c.startswith("batch") for c in _changes(d))
    line = next(x for x in d.withheld if x.startswith("batch sequences"))
    assert line.startswith("batch sequences: not offered: it needs work measured per sequence, and the step's split")
    assert f"so the {MAX_BATCH} it would propose is only the most it proposes" in line


def test_cpu_batching_with_every_op_but_the_gemm_under_the_floor_is_withheld(tmp_path):
    """A tiny CPU model (hunt8's torch.export MLP): the GEMM (the weights: once) and ops at the dispatch floor, so
    the per-sequence compute is 0 and the batch it proposed was MAX_BATCH at "64 x 0.000": withheld, with its
    arithmetic."""
    host = []
    for i in range(3):
        t = 100 * i
        host += [
            ("user_annotation", f"ProfilerStep#{i + 1}", t, t + 100, {}),
            ("cpu_op", "aten::embedding", t + 2, t + 3, {"Input Dims": [[256, 64], [1, 1]]}),
            ("cpu_op", "aten::mm", t + 10, t + 40, {}),
            ("cpu_op", "aten::view", t + 41, t + 42, {}),
            ("cpu_op", "aten::add", t + 50, t + 51, {}),
            ("cpu_op", "aten::view", t + 52, t + 53, {}),
        ]
    d = _median(_trace(tmp_path, host))
    assert d.kind == "decode"
    assert not any(c.startswith("batch") for c in _changes(d))
    line = next(x for x in d.withheld if x.startswith("batch sequences"))
    assert "one sequence's step is overhead 0.070 + once 0.030 + 1 x 0.000 = 0.100 ms" in line


@settings(max_examples=300, deadline=None)
@given(
    host=st.floats(0, 1e9),
    once=st.floats(0, 1e9),
    per=st.floats(0, 1e8) | st.sampled_from([0.0, 1.0, 1e-300]),
    growth=st.sampled_from([1.0, BATCH_GROWTH, 2.0]),
)
def test_the_largest_batch_is_where_a_scan_from_one_stops(host, once, per, growth):
    """The batch what-ifs' models (host and GPU: max(host, once + B x per); a CPU: once + B x per) never fall as B
    grows, so the bisection stops where a scan from B = 1 up stops: at the last B within the limit."""
    for at in (lambda n: max(host, once + n * per), lambda n: once + n * per):
        limit = growth * at(1)
        scan = 1
        while scan < MAX_BATCH and at(scan + 1) <= limit:
            scan += 1
        assert _largest_batch(at, limit) == scan


# --- GPU-bound -------------------------------------------------------------------------------------------------


def _gpu_bound(tmp_path):
    host = [
        ("user_annotation", "decode#0", 0, 30, {}),
        ("cpu_op", "aten::mm", 2, 20, {}),
        ("cuda_runtime", "cudaLaunchKernel", 3, 6, {"correlation": 1}),
        ("cuda_runtime", "cudaLaunchKernel", 7, 9, {"correlation": 2}),
    ]
    gpu = [
        ("kernel", "fused_moe_kernel", 6, 76, {"correlation": 1}),
        ("kernel", "gemm", 76, 106, {"correlation": 2}),
    ]
    return _trace(tmp_path, host, gpu)


def test_a_gpu_bound_step_names_the_work_that_binds(tmp_path):
    """MoE kernels 70 of the 100 us of GPU work against 30 us of host: at most 70 us saved if they took no time
    (no shapes recorded: a ceiling, ranked after every priced change)."""
    d = _median(_gpu_bound(tmp_path))
    (w,) = d.what_if
    assert w.change == "speed up the moe kernels (70% of the GPU work): at most" and w.ceiling
    assert (round(w.predicted_step_ms, 6), round(w.saving_ms, 6)) == (0.03, 0.07)
    assert "moe 70%, gemm 30%" in w.assumption


def test_with_shapes_a_gpu_bound_step_is_priced_at_its_roof(tmp_path):
    """The step's top op at 40% of its roof over 100 us: at its roof it takes 40, and the step max(30, 40) = 40."""
    roof = OpRoofline("aten::mm", "[(8, 8), (8, 8)]", "bfloat16", 1, 1, 1, 100.0, 100.0, None, None, None, "memory",
                      40.0, "gemm")  # fmt: skip
    d = _median(_gpu_bound(tmp_path), Context(step_ops={0: (roof,)}))
    (w,) = d.what_if
    assert w.change.startswith("bring the top GPU ops to their roof (aten::mm [(8, 8), (8, 8)] at 40% of its roof")
    assert not w.ceiling and (round(w.predicted_step_ms, 6), round(w.saving_ms, 6)) == (0.04, 0.06)


def _communication_under_compute(tmp_path: Path) -> Path:
    """A GPU-bound step of 30 us of host work: two GEMMs on stream 7 (10-60, 60-90) and an NCCL kernel on stream 9
    (20-105) under them, as DualPipe runs its all-to-alls."""
    host = [
        ("user_annotation", "ProfilerStep#1", 0, 30, {}),
        ("cuda_runtime", "cudaLaunchKernel", 2, 4, {"correlation": 1}),
        ("cuda_runtime", "cudaLaunchKernel", 5, 7, {"correlation": 2}),
        ("cuda_runtime", "cudaLaunchKernel", 8, 10, {"correlation": 3}),
    ]
    gpu = [
        ("gemm", 7, 10, 60, 1),
        ("ncclDevKernel_AllToAll_RING_LL", 9, 20, 105, 2),
        ("gemm", 7, 60, 90, 3),
    ]
    events = [
        {"ph": "X", "cat": c, "name": n, "pid": 1, "tid": 1, "ts": a, "dur": b - a, "args": args}
        for c, n, a, b, args in host
    ]
    events += [
        {"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": stream, "ts": a, "dur": b - a,
         "args": {"stream": stream, "correlation": corr}}
        for n, stream, a, b, corr in gpu
    ]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_kernels_beside_others_save_only_their_time_alone(tmp_path):
    """GPU busy 10-105 = 95 us. The NCCL kernel's 85 us run under the GEMMs' 80 but for 90-105: without it the GPU
    is still busy 10-90 = 80 us, so taking it to no time saves 15 us (its time alone), not its 85. The GEMMs alone
    ran 10-20, 10 us. The step: max(host 30, GPU 95 - 15) = 80 us, saving 15 (subtracting the summed 85 said
    max(30, 95 - 85) = 30: a saving of 65 us the GPU cannot give)."""
    path = _communication_under_compute(tmp_path)
    s = analyze(load_trace(path)).steps[0]
    assert (s.gpu_busy_ns, s.kernels_by_category) == (95_000, {"gemm": 80_000, "communication": 85_000})
    assert s.kernels_busy_by_category == {"gemm": 80_000, "communication": 85_000}
    assert s.kernels_alone_by_category == {"gemm": 10_000, "communication": 15_000}
    d = _median(path)
    (w,) = d.what_if
    # 85 / 95 = 89%, 15 / 95 = 16%
    assert (
        w.change == "speed up the communication kernels (running in 89% of the GPU's busy time, alone in 16%): at most"
    )
    assert w.ceiling and (round(w.predicted_step_ms, 6), round(w.saving_ms, 6)) == (0.08, 0.015)
    assert "GPU 0.095 - 0.015 communication alone" in w.arithmetic
    assert "communication 89% (16% alone), gemm 84% (11% alone)" in w.assumption
    line = next(x for x in d.lines if x.startswith("communication"))
    assert line.endswith("0.085 ms of communication kernels (running in 89% of the GPU's busy time, alone in 16%)")


# --- a CPU -----------------------------------------------------------------------------------------------------


def _cpu_decode(tmp_path, compiled: bool = False, outside_mm: bool = False):
    """A CPU decode step of 100 us: probe's forward range over 85 of it (the other 15 the loop's: sampling), a GEMM
    of 30 us, attention 10, views of 1 (the dispatch floor) and five elementwise ops of 2 (within 20 floors:
    dispatch, not compute); nine top-level ops, the rest Python and time between ops. With `outside_mm`, the step
    runs 10 us more: a GEMM outside the forward range (92-102), the loop's own."""
    host = [
        ("user_annotation", "decode#0", 0, 110 if outside_mm else 100, {}),
        ("user_annotation", "forward", 5, 90, {}),
        ("cpu_op", "aten::mm", 10, 40, {}),
        ("cpu_op", "aten::transpose", 41, 42, {}),  # a run of views only between two kept ops: no kernel
        ("cpu_op", "aten::_scaled_dot_product_flash_attention_for_cpu", 50, 60, {}),
        ("cpu_op", "aten::view", 60, 61, {}),
        *(
            ("cpu_op", f"aten::{op}", 62 + 3 * i, 64 + 3 * i, {})
            for i, op in enumerate(("add", "mul", "neg", "relu", "sub"))
        ),
    ]
    if compiled:
        host.append(("cpu_op", "Torch-Compiled Region: 0/0", 5, 95, {}))
    if outside_mm:
        host.append(("cpu_op", "aten::mm", 92, 102, {}))
    return _trace(tmp_path, host)


def test_a_cpu_step_offers_compile_and_batch_and_no_dispatch_to_zero(tmp_path):
    """Compute 40 us (mm 30 + attention 10; the elementwise ops are dispatch). Compiled: the 15 us outside the
    forward stay; the forward's overhead, 100 - 15 - 40 = 45 over 9 top-level ops = 5 us an op, stays for the
    two ops the graph still calls, the one run of other ops it fuses (the transpose between the GEMM and attention
    is a view: no kernel) and the call itself, 4 x 5 = 20: 15 + 40 + 20 = 75 us. Batched, the GEMM reads the
    weights once and attention grows: 60 + 30 + 10 B <= 125 -> B = 3 at 120 us."""
    d = _median(_cpu_decode(tmp_path))
    assert d.bound == "cpu_only"
    assert _changes(d) == ["batch 3 sequences", "compile the forward (torch.compile)"]
    compile_ = d.what_if[1]
    assert compile_.predicted_step_ms == pytest.approx(0.075)
    assert compile_.terms == pytest.approx({"compute": 0.04, "outside": 0.015, "overhead": 0.045, "calls": 0.02})
    assert "the 2 ops it calls as they are (GEMM, attention), the 1 run(s) of other ops" in compile_.assumption
    batch = d.what_if[0]
    assert batch.predicted_step_ms == pytest.approx(0.12) and batch.terms == pytest.approx(
        {"overhead": 0.06, "once": 0.03, "per_sequence": 0.01}
    )
    assert not any(c.startswith("fix the top op") for c in _changes(d))


def test_compute_outside_the_forward_is_counted_once_by_compile(tmp_path):
    """_cpu_decode's step with a GEMM of 10 us outside its forward range (`outside_mm`, the loop's own matmul: a Gloo
    rank's 20 matmuls outside the model's frames). The 25 us outside the forward hold it; the compute compiled is
    the forward's 40, not 50: the overhead is 110 - 25 - 40 = 45 over the forward's 9 top-level ops, 5 us an op,
    for the 4 calls the graph still makes: 25 + 40 + 20 = 85 us. Counted twice (in the outside and again as
    compute, and the matmul as a call of the graph's), the overhead read 35 over 10 ops and the prediction
    25 + 50 + 5 x 3.5 = 92.5."""
    d = _median(_cpu_decode(tmp_path, outside_mm=True))
    compile_ = next(w for w in d.what_if if w.change.startswith("compile"))
    assert compile_.terms == pytest.approx({"compute": 0.04, "outside": 0.025, "overhead": 0.045, "calls": 0.02})
    assert compile_.predicted_step_ms == pytest.approx(0.085)
    assert "GEMM and attention 0.040 + the other ops' compute 0.000 + 4 calls x 5.00 us" in compile_.arithmetic
    assert "over its 9 top-level ops (the step's 10 less the 1 outside it, whose compute" in compile_.assumption


def test_compile_terms_past_the_host_work_they_price_show_the_cap(tmp_path):
    """A decode step of 100 us whose forward range (5-90) holds one top-level op (a scripted module's `forward`, 10-
    80) around two GEMMs (18 us each) and an add (2 us): outside 15 + GEMM 36 + the other ops' compute 29 (the add
    and the `forward` op's own 27) leave 20 us of overhead over 1 top-level op, and the compiled graph still makes 3
    calls: 15 + 36 + 29 + 3 x 20 = 140 us, more than the 100 it prices. Compiling never adds host work (the figure
    is capped at the host's), and the arithmetic now says min(host 0.100, ... = 0.140) = 0.100, where it printed
    terms summing to 0.140 as "= 0.100"."""
    host = [
        ("user_annotation", "decode#0", 0, 100, {}),
        ("user_annotation", "forward", 5, 90, {}),
        ("cpu_op", "forward", 10, 80, {}),
        ("cpu_op", "aten::mm", 12, 30, {}),
        ("cpu_op", "aten::view", 31, 32, {}),
        ("cpu_op", "aten::add", 33, 35, {}),
        ("cpu_op", "aten::mm", 42, 60, {}),
        ("cpu_op", "aten::view", 61, 62, {}),
    ]
    d = _median(_trace(tmp_path, host))
    assert not any(c.startswith("compile") for c in _changes(d))
    line = next(x for x in d.withheld if x.startswith("compile the forward"))
    assert line == (
        "compile the forward (torch.compile): not offered: by its own model it saves nothing here (host 0.100 -> "
        "min(host 0.100, outside the forward 0.015 + GEMM and attention 0.036 + the other ops' compute 0.029 + 3 "
        "calls x 20.00 us = 0.140) = 0.100: 0.100 ms - 0.000 = 0.100 ms)"
    )


def test_without_a_forward_range_or_module_frame_the_compile_saving_is_a_ceiling(tmp_path):
    """The same decode step with no forward range and no module frame (a generate traced without stacks): every op
    is taken as the forward, so the 15 us of the loop's own work outside it are priced as compiled too. The
    prediction is the same arithmetic with nothing outside: 100 - 40 = 60 us of overhead over 9 ops, 6.67 us an op,
    for 4 calls: 40 + 26.67 = 66.67 us; a ceiling ("at most", ranked after priced changes), and the assumption says
    what was taken as the forward and how to mark it."""
    host = [
        ("user_annotation", "decode#0", 0, 100, {}),
        ("cpu_op", "aten::mm", 10, 40, {}),
        ("cpu_op", "aten::transpose", 41, 42, {}),
        ("cpu_op", "aten::_scaled_dot_product_flash_attention_for_cpu", 50, 60, {}),
        ("cpu_op", "aten::view", 60, 61, {}),
        *(("cpu_op", f"aten::{op}", 62 + 3 * i, 64 + 3 * i, {}) for i, op in enumerate(("add", "mul", "neg", "relu"))),
        ("cpu_op", "aten::sub", 74, 76, {}),
    ]
    d = _median(_trace(tmp_path, host))
    (w,) = [w for w in d.what_if if w.change.startswith("compile")]
    assert w.change == "compile the forward (torch.compile): at most" and w.ceiling
    assert w.predicted_step_ms == pytest.approx(0.04 + 0.06 * 4 / 9)
    assert (
        "the host's work outside the forward (the forward taken as every op and runtime call: the trace has no module "
        "frames to mark it (record with_stack=True), so the saving is a ceiling" in w.assumption
    )
    assert _changes(d)[-1] == w.change  # ranked after the priced changes


def test_the_compile_what_if_leaves_the_wait_on_other_threads_as_it_is(tmp_path):
    """The decode step above, then 100 us blocked in a lock's acquire while a worker thread runs the model (an asyncio
    server's to_thread): compiling this thread's ops leaves the wait as it is. 200 - 100 waited - 40 compute = 60 us
    of overhead over 9 ops, 4 calls: 100 + 40 + 26.67. Spread over the ops as their overhead (160 us, 17.8 an op),
    the wait was priced away: a 44% saving, not 17%. Where the worker is recorded (an op of its own inside the
    acquire), the wait is its work, a term of the compiled step; where it is not, a sync wait the step owns (a CPU
    step's waits stay whatever its host work becomes): the same prediction either way."""
    host = [
        ("user_annotation", "decode#0", 0, 200, {}),
        ("cpu_op", "aten::mm", 10, 40, {}),
        ("cpu_op", "aten::transpose", 41, 42, {}),
        ("cpu_op", "aten::_scaled_dot_product_flash_attention_for_cpu", 50, 60, {}),
        ("cpu_op", "aten::view", 60, 61, {}),
        *(("cpu_op", f"aten::{op}", 62 + 3 * i, 64 + 3 * i, {}) for i, op in enumerate(("add", "mul", "neg", "relu"))),
        ("cpu_op", "aten::sub", 74, 76, {}),
        ("python_function", "<built-in method acquire of _thread.lock object at 0x7f>", 100, 200, {}),
    ]
    path = _trace(tmp_path, host)
    (w,) = [w for w in _median(path).what_if if w.change.startswith("compile")]
    assert w.predicted_step_ms == pytest.approx(0.1 + 0.04 + 0.06 * 4 / 9) and w.step_ms == pytest.approx(0.2)
    assert "others" not in w.terms and "0.200 ms - " in w.arithmetic  # the wait is the step's, kept
    assert "the step's thread runs no module frame to mark it, though the trace has stacks" in w.assumption
    doc = json.loads(path.read_text())
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 100,
                               "dur": 100, "args": {}})  # fmt: skip
    path.write_text(json.dumps(doc))
    (w,) = [w for w in _median(path).what_if if w.change.startswith("compile")]
    assert w.predicted_step_ms == pytest.approx(0.1 + 0.04 + 0.06 * 4 / 9)
    assert w.terms["others"] == pytest.approx(0.1) and "waiting on other threads 0.100" in w.arithmetic


def test_the_compiled_calls_guard_check_is_added_where_measured_and_said_unpriced_where_not(tmp_path):
    """probe run measures a compiled forward's guard check on the model (10 us here): the compiled step above, 75
    us, becomes 85. Where nothing measured it (any other trace), the what-if says the check is not priced."""
    path = _cpu_decode(tmp_path)
    measured = next(
        w for w in _median(path, Context(compiled_entry_ns=10_000)).what_if if w.change.startswith("compile")
    )
    assert measured.predicted_step_ms == pytest.approx(0.085) and measured.terms["entry"] == pytest.approx(0.01)
    assert "guard check (0.010 ms, measured on the model) is added" in measured.assumption
    unmeasured = next(w for w in _median(path).what_if if w.change.startswith("compile"))
    assert "entry" not in unmeasured.terms and "guard check, which an eager trace does not show, is not priced" in (
        unmeasured.assumption
    )


def _cpu_training_step(tmp_path, module: bool = False):
    """A CPU training step of 200 us (ProfilerStep#0): a forward (mm 30 us, a view of 1: the dispatch floor, add and
    mul of 2, relu 25, ones_like 2), its backward on the same thread as the autograd engine runs it on a CPU
    (ReluBackward0 holding a threshold_backward of 16, MmBackward0 holding an mm of 25), one AccumulateGrad (its add_
    30 us) and the optimizer's step (Optimizer.step#SGD.step, 25 us, holding a _foreach_add_ of 22). With `module`,
    the model's nn.Module frame covers the forward (8-78), as with_stack records it."""
    host = [
        ("user_annotation", "ProfilerStep#0", 0, 200, {}),
        ("cpu_op", "aten::mm", 10, 40, {}),
        ("cpu_op", "aten::view", 40, 41, {}),
        ("cpu_op", "aten::add", 42, 44, {}),
        ("cpu_op", "aten::mul", 45, 47, {}),
        ("cpu_op", "aten::relu", 48, 73, {}),
        ("cpu_op", "aten::ones_like", 75, 77, {}),
        ("cpu_op", "autograd::engine::evaluate_function: ReluBackward0", 80, 100, {}),
        ("cpu_op", "ReluBackward0", 81, 99, {}),
        ("cpu_op", "aten::threshold_backward", 82, 98, {}),
        ("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 100, 130, {}),
        ("cpu_op", "MmBackward0", 101, 129, {}),
        ("cpu_op", "aten::mm", 102, 127, {}),
        ("cpu_op", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 130, 164, {}),
        ("cpu_op", "torch::autograd::AccumulateGrad", 131, 163, {}),
        ("cpu_op", "aten::add_", 132, 162, {}),
        ("user_annotation", "Optimizer.step#SGD.step", 170, 195, {}),
        ("cpu_op", "aten::_foreach_add_", 172, 194, {}),
    ]
    if module:
        host.append(("python_function", "nn.Module: MLP_0", 8, 78, {}))
    return _trace(tmp_path, host)


def test_a_cpu_training_step_is_offered_the_model_compiled_and_its_optimizer_and_accumulategrad_stay(tmp_path):
    """The step trains, so the change compiles the model: its forward and, through AOTAutograd, its backward. The
    AccumulateGrad op (130-164) and the optimizer's step (170-195) stay as they are: 34 + 25 = 59 us, their 2
    top-level ops out of the 10. The compiled part's compute: the two mm's 55 us and relu's 24 above the 1 us floor
    (threshold_backward's 16 is within 20 floors; the add_ 29 and _foreach_add_ 21 above it are the eager ops'):
    79. Its overhead: 200 - 59 - 79 = 62 us over its 8 top-level ops, 7.75 us an op. Its calls: the 2 mm, the fused
    runs (add, mul, relu, ones_like after the forward's mm; ReluBackward0 before the backward's: a run never spans
    the forward and the backward) and a compiled call for the forward and one for the backward: 6 x 7.75 = 46.5.
    Compiled: 59 + 79 + 46.5 = 184.5 us. (Before, the whole step was "the forward": 129 us of compute, the
    optimizer's and AccumulateGrad's included, 71 us of overhead over 10 ops and 5 calls: 164.5 us.)"""
    d = _median(_cpu_training_step(tmp_path))
    assert d.bound == "cpu_only"
    (w,) = [w for w in d.what_if if "compile" in w.change]
    assert COMPILE_MODEL == "compile the model (torch.compile: the forward and, through AOTAutograd, its backward)"
    assert w.change == f"{COMPILE_MODEL}: at most" and w.ceiling  # no frame marks the model: every op is taken as it
    assert w.predicted_step_ms == pytest.approx(0.1845)
    assert w.terms == pytest.approx(
        {"compute": 0.079, "outside": 0.0, "eager": 0.059, "overhead": 0.062, "calls": 0.0465}
    )
    assert "the step trains (" in w.assumption and "backward ops (e.g. ReluBackward0)" in w.assumption
    assert "an optimizer step (Optimizer.step#SGD.step)" in w.assumption
    assert "their 2 top-level ops (0.059 ms) stay as they are" in w.assumption
    assert "the 2 ops it calls as they are (GEMM, attention), the 2 run(s) of other ops" in w.assumption
    assert "the 2 compiled calls (one for each stretch of forward ops and of backward ops)" in w.assumption
    assert "left as they are (AccumulateGrad, the optimizer's) 0.059" in w.arithmetic


def test_a_cpu_training_steps_backward_outside_the_models_frames_is_compiled_too(tmp_path):
    """The same step with the model's nn.Module frame (8-78) as the capture region: the backward (80-130) lies outside
    it but a compiled model compiles it all the same, and the AccumulateGrad op and the optimizer's step (59 us)
    stay whole apart; what is left outside is the time no op covers outside the frame: 8 + 2 + 6 + 5 = 21 us. The
    overhead: 200 - 21 - 59 - 79 = 41 us over 8 ops, 5.125 us an op, for 6 calls: 21 + 59 + 79 + 30.75 = 189.75."""
    d = _median(_cpu_training_step(tmp_path, module=True))
    (w,) = [w for w in d.what_if if "compile" in w.change]
    assert w.change == COMPILE_MODEL and w.predicted_step_ms == pytest.approx(0.18975)
    assert w.terms == pytest.approx(
        {"compute": 0.079, "outside": 0.021, "eager": 0.059, "overhead": 0.041, "calls": 0.03075}
    )
    assert "outside the model (the model's nn.Module frames, with the backward's ops) stays" in w.assumption


def test_a_compiled_cpu_step_is_not_offered_compile(tmp_path):
    d = _median(_cpu_decode(tmp_path, compiled=True))
    assert "compile the forward (torch.compile)" not in _changes(d)
    assert any(x.startswith("compile the forward (torch.compile): not offered: it needs a forward not compiled")
               for x in d.withheld)  # fmt: skip


def test_threads_split_the_gemm_and_attention(tmp_path):
    """On 1 of 2 cores: the GEMM and attention's 40 us split in two, the rest stays: 100 - 20 = 80 us."""
    d = _median(_cpu_decode(tmp_path), Context(threads=(1, 2)))
    w = next(w for w in d.what_if if w.change == "run the ops on 2 threads")
    assert w.predicted_step_ms == pytest.approx(0.08)
    facts = step_facts(load_trace(tmp_path / "t.json"), analyze(load_trace(tmp_path / "t.json")))
    assert predict_threads(100_000, facts[0].cpu, 1, 4) == pytest.approx(70_000)


# --- the unprofiled step, and the bounds of any price -----------------------------------------------------------


def test_an_unprofiled_estimate_prices_the_step_and_both_are_shown(tmp_path):
    """4 events at 5 us and 1 range at 10 us are the profiler's: 30 us of the 100 us step. The verdict and every
    price stand on the 70 us left; the headline shows both figures."""
    options = AnalyzeOptions(event_cost=EventCost(op_ns=5_000, range_ns=10_000))
    host, gpu = _host_bound_decode()
    d = _median(_trace(tmp_path, host, gpu), options=options)
    e = d.evidence
    assert (e.host_work_ns, e.profiler_ns, e.unprofiled_host_ns) == (100_000, 30_000 + 10_000, 60_000)
    assert "The host works 0.060 ms unprofiled (0.100 profiled)" in d.headline
    w = next(w for w in d.what_if if w.change.startswith("fix the top op"))
    assert "0.060 ms unprofiled (0.100 profiled, less 0.040)" in w.arithmetic


_EVENTS = st.lists(
    st.tuples(st.integers(0, 900), st.integers(1, 300), st.sampled_from(["op", "launch", "sync"])), max_size=12
)


@settings(max_examples=40, deadline=None)
@given(events=_EVENTS, kernels=st.lists(st.tuples(st.integers(0, 1500), st.integers(1, 400)), max_size=6))
def test_no_what_if_promises_more_than_the_step_or_less_than_nothing(tmp_path_factory, events, kernels):
    tmp = tmp_path_factory.mktemp("w")
    host = [("user_annotation", "decode#0", 0, 1000, {})]
    for i, (start, length, kind) in enumerate(events):
        end = min(start + length, 1000)
        name = {"op": ("cpu_op", "aten::mm"), "launch": ("cuda_runtime", "cudaLaunchKernel"),
                "sync": ("cuda_runtime", "cudaStreamSynchronize")}[kind]  # fmt: skip
        host.append((*name, start, end, {"correlation": i + 1}))
    gpu = [("kernel", f"k{j}", a, a + n, {"correlation": j + 1}) for j, (a, n) in enumerate(kernels)]
    d = _median(_trace(tmp, host, gpu))
    for w in d.what_if:
        assert 0 <= w.saving_ms and w.predicted_step_ms >= 0 and 0 <= w.saving_pct <= 100
        assert not _unsaid_failures(w)


def test_what_ifs_round_trip_through_json(tmp_path):
    host, gpu = _host_bound_decode()
    d = _median(_trace(tmp_path, host, gpu))
    again = [WhatIf.from_json(json.loads(json.dumps(w.to_json()))) for w in d.what_if]
    assert again == list(d.what_if) and all(isinstance(c, Condition) for w in again for c in w.holds)


# --- real traces -----------------------------------------------------------------------------------------------

REAL = sorted(WILD.glob("*.trace.json.gz")) + sorted(PUBLIC.glob("*.trace.json.gz")) if SHARED.is_dir() else []
SLOW = {"h100_vllm_v1_llama_tp4_1000isl_32con", "mi300x_vllm_v1_llama_tp4_1000isl_32con"}  # 40 s each, to analyze


def _found(name: str):
    """A real trace's diagnosis of every step (skipped when the trace is absent)."""
    path = next((p for p in (WILD / f"{name}.trace.json.gz", PUBLIC / f"{name}.trace.json.gz") if p.is_file()), None)
    if path is None:
        pytest.skip(f"{name} is not in ../shared/traces")
    trace = load_trace(path)
    return answer(trace, analyze(trace)).diagnosis


def _real(name: str):
    return _found(name).median


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name.split(".")[0] in SLOW else []) for p in REAL],
)
def test_no_real_trace_is_offered_a_what_if_whose_requires_fails(path):
    trace = load_trace(path)
    for d in answer(trace, analyze(trace)).diagnosis.steps:
        for w in d.what_if:
            assert not _unsaid_failures(w), (d.step, w.change)
            assert 0 <= w.saving_ms and w.predicted_step_ms >= 0


def test_the_cold_moe_forward_is_told_to_profile_a_warm_iteration():
    d = _real("a100_switch_transformer_moe_forward_cold")
    assert _changes(d) == ["profile a warm iteration"]
    assert "the first cudaLaunchKernel" in d.what_if[0].arithmetic and "318.912 ms" in d.what_if[0].arithmetic
    # 513.236 ms in 44 cold calls less 0.921 ms that the 19 outermost cost warm (17 ops at their names' medians, 28
    # to 188 us; two launches at the median repeat launch's 9.0 us): the set-up a warm step saves
    assert d.host_bound_by == "setup" and d.evidence.setup_ns == 512_315_000
    assert (
        "set-up 512.315 ms = 513.236 in cold calls - 0.921 that warm calls of their kinds cost"
        in d.what_if[0].arithmetic
    )
    assert "Without it: host work 97.280 ms against GPU work 12.054 ms (8.07x): host-bound, by launch." in d.headline


@pytest.mark.parametrize(
    "name", ["rtx2080ti_linear_train_40iters_nosteps", "rtx2080ti_resnet_train_30iters_nosteps", "cuda_alexnet"]
)
def test_cold_traces(name):
    """The first iteration holds first-call set-up (cuBLAS, cuDNN, CUDA's start): it is told to profile a warm one and
    nothing else; a later iteration is warm, and the median step (one of them, where the trace has several) is not
    told so (cuda_alexnet has no iterations to find: its one step is the cold one)."""
    found = _found(name)
    assert _changes(found.steps[0]) == ["profile a warm iteration"]
    if len(found.steps) > 1:
        assert "profile a warm iteration" not in _changes(found.median)
        assert all(_changes(s) != ["profile a warm iteration"] for s in found.steps[2:])


def test_a_forward_that_syncs_is_not_offered_capture():
    d = _real("rtx4080_nanovllm_qwen3_decode_one_layer")
    assert not any("CUDA graph" in c for c in _changes(d))
    assert any("cudaStreamSynchronize x6" in x and x.startswith("capture the forward") for x in d.withheld)


@pytest.mark.parametrize(
    "name",
    [
        "h800_deepseek_v3_dualpipe_train_chunk",
        "v100_dlrm_ddp_rank0_step",
        "v100_resnet50_train_dataloader_nw0",
        "v100_resnet50_train_nw4",
        "cuda_train_ns_resolution_5steps",
    ],
)
def test_training_steps_are_not_offered_capture(name):
    d = _real(name)
    assert not any("CUDA graph" in c for c in _changes(d))
    assert any(x.startswith("capture the forward") and "backward ops" in x for x in d.withheld)


def test_a_trace_without_its_gpu_side_is_offered_nothing():
    d = _real("a100_launches_without_kernels")
    assert d.what_if == () and any("none of its 260 launch calls has a GPU op" in x for x in d.withheld)


def test_the_h100_prefills_sync_prices_its_own_wait():
    """The sync waits 14.1 ms on earlier work; the step's own GPU work ends 2.2 ms after its host work: ~2 ms."""
    d = _real("h100_hf_qwen1.5-0.5b_prefill_b16")
    w = next(w for w in d.what_if if w.change.startswith("remove the sync"))
    assert 2.0 < w.saving_ms < 2.5


def test_sglangs_wait_saves_what_the_events_allow():
    d = _real("rocm_sglang_qwen3_8b_extend_step")
    w = next(w for w in d.what_if if w.change.startswith("overlap the wait"))
    assert w.saving_ms < 1.5


def test_the_dualpipe_chunks_communication_runs_under_its_compute():
    """DeepSeek-V3's DualPipe chunk: 113.030 ms of DeepEP communication kernels on a stream of their own, under the
    compute; without them the GPU is still busy 124.366 of its 128.515 ms, so they alone are 4.149 ms. The change
    offered is the category whose time alone is the largest (MoE's 8.412 ms, its GEMMs beside the all-to-alls), and
    it saves that, not a summed time."""
    path = shared_trace("wild", "h800_deepseek_v3_dualpipe_train_chunk.trace.json.gz")
    trace = load_trace(path)
    s = analyze(trace).steps[0]
    assert (s.gpu_busy_ns, s.kernels_by_category["communication"]) == (128_515_000, 113_030_000)
    assert (s.kernels_alone_by_category["communication"], s.kernels_alone_by_category["moe"]) == (4_149_000, 8_412_000)
    assert max(s.kernels_alone_by_category.values()) == 8_412_000
    w = next(w for w in _real("h800_deepseek_v3_dualpipe_train_chunk").what_if if w.change.startswith("speed up"))
    assert w.change == "speed up the moe kernels (running in 55% of the GPU's busy time, alone in 7%): at most"
    assert w.saving_ms == pytest.approx(8.412)


def test_the_vllm_decode_names_its_moe_kernels():
    d = _real("rocm_vllm_decode_cudagraph")
    assert d.what_if[0].change == "speed up the moe kernels (73% of the GPU work): at most"


def test_b200_eager_is_offered_capture():
    assert _changes(_real("b200_eager"))[0] == "capture the forward in a CUDA graph"


def test_a_cpu_trace_from_the_wild_is_offered_compile_not_dispatch_to_zero():
    """A forward and its backward (13 backward ops, 3 AccumulateGrad, no optimizer): the model compiled, forward and
    backward, its 3 AccumulateGrad ops left as they are."""
    d = _real("cpu_only_qlora_compile_tiny")
    assert _changes(d) == [f"{COMPILE_MODEL}: at most"]  # no module frames: every op taken as the model, a ceiling
    assert not any(c.startswith("fix the top op") for c in _changes(d))
    assert "their 3 top-level ops (0.012 ms) stay as they are" in d.what_if[0].assumption


def test_probe_analyze_on_a_cached_cpu_trace_offers_compile_and_batch(cli):
    done = cli("analyze", str(ROOT / "traces" / "tiny_cached_cpu_p64_n16.trace.json.gz"), "--json")
    assert done.returncode == 0
    changes = [w["change"] for w in json.loads(done.stdout)["diagnosis"]["median"]["what_if"]]
    assert "compile the forward (torch.compile)" in changes and any(c.startswith("batch ") for c in changes)


def test_a_cpu_steps_op_split_is_its_kinds_median_so_one_preempted_op_is_not_compute(tmp_path):
    """Three decode steps of the same ops; in the second, the OS held its mul (2 us in the others, within 20 of the
    view's 1 us floor: dispatch) for 60 us. Read alone, that step's rest would hold 59 us of "compute" that compiling
    keeps and batching repeats; each figure is the median over the steps of its kind, so every step's split is the
    steady one: GEMM 30, attention 10, no rest."""
    host = []
    for k in range(3):
        t, held = 200 * k, 60 if k == 1 else 2
        host += [
            ("user_annotation", f"decode#{k}", t, t + 190, {}),
            ("cpu_op", "aten::mm", t + 10, t + 40, {}),
            ("cpu_op", "aten::view", t + 41, t + 42, {}),
            ("cpu_op", "aten::mul", t + 43, t + 43 + held, {}),
            ("cpu_op", "aten::_scaled_dot_product_flash_attention_for_cpu", t + 110, t + 120, {}),
        ]
    trace = load_trace(_trace(tmp_path, host))
    facts = step_facts(trace, analyze(trace))
    splits = {(f.cpu.gemm_ns, f.cpu.attention_ns, f.cpu.rest_ns, f.cpu.ops) for f in facts.values()}
    assert splits == {(30_000, 10_000, 0, 4)}


def test_a_convolution_and_the_ops_it_calls_are_one_call_of_the_compiled_graph(tmp_path):
    """aten::convolution calls aten::_convolution, which calls aten::mkldnn_convolution: all three match the ops a
    compiled graph still calls, but the graph calls the outermost once (ResNet-18 on a CPU counted 610 such calls
    for 210 convolutions, and the compile what-if saved a sixth of what its own model says)."""
    host = []
    for k in range(2):
        t = 300 * k
        host += [
            ("user_annotation", f"decode#{k}", t, t + 290, {}),
            ("cpu_op", "aten::conv2d", t + 10, t + 100, {}),
            ("cpu_op", "aten::convolution", t + 11, t + 99, {}),
            ("cpu_op", "aten::_convolution", t + 12, t + 98, {}),
            ("cpu_op", "aten::mkldnn_convolution", t + 13, t + 97, {}),
            ("cpu_op", "aten::relu", t + 110, t + 120, {}),
            ("cpu_op", "aten::addmm", t + 130, t + 160, {}),
        ]
    trace = load_trace(_trace(tmp_path, host))
    facts = step_facts(trace, analyze(trace))
    assert {f.cpu.kept for f in facts.values()} == {2}  # the convolution once, the addmm once


def test_moe_grouped_expert_gemms_are_gemms_the_compiled_graph_calls(tmp_path):
    """A Qwen2-MoE decode step on a CPU: the experts' GEMM is one aten::_grouped_mm (40 us, its top op), between a
    dense addmm (20) and an elementwise mul (30, above 20 view floors of 1 us: compute). The grouped GEMM is a GEMM
    (the weights' traffic, read once by a batch) and an extern call of the compiled graph, as inductor keeps it: 2
    kept calls, GEMMs 60 us, rest 29 (mul's 30 above the floor); the mul after it is its own fused run."""
    host = [
        ("user_annotation", "decode#0", 0, 200, {}),
        ("cpu_op", "aten::addmm", 10, 30, {}),
        ("cpu_op", "aten::view", 31, 32, {}),
        ("cpu_op", "aten::_grouped_mm", 40, 80, {}),
        ("cpu_op", "aten::mul", 90, 120, {}),
    ]
    trace = load_trace(_trace(tmp_path, host))
    (cpu,) = [f.cpu for f in step_facts(trace, analyze(trace)).values()]
    assert (cpu.kept, cpu.gemm_ns, cpu.other_kept_ns, cpu.rest_ns, cpu.fused) == (2, 60_000, 0, 29_000, 1)


@pytest.mark.parametrize("gemm", ["quantized::linear_dynamic", "aten::_weight_int8pack_mm", "aten::_int_mm"])
def test_quantized_gemms_are_gemms_the_compiled_graph_calls(tmp_path, gemm):
    """A decode step of a dynamically quantized model on a CPU (quantize_dynamic: every Linear is one
    quantized::linear_dynamic, a leaf op with no aten::mm under it), or of int8 weight-only / int8 x int8 GEMMs: the
    quantized GEMM is a GEMM and an extern call of the compiled graph. Read as other ops' compute it was fused away,
    and the compile what-if saved 79% of a decode step whose fifteen int8 GEMMs it priced as one fused run. Here:
    2 kept calls, GEMMs 60 us, rest 29 (the mul's 30 above the view's floor of 1 us); the weight packing is no GEMM."""
    host = [
        ("user_annotation", "decode#0", 0, 200, {}),
        ("cpu_op", gemm, 10, 30, {}),
        ("cpu_op", "aten::view", 31, 32, {}),
        ("cpu_op", gemm, 40, 80, {}),
        ("cpu_op", "aten::mul", 90, 120, {}),
    ]
    trace = load_trace(_trace(tmp_path, host))
    (cpu,) = [f.cpu for f in step_facts(trace, analyze(trace)).values()]
    assert (cpu.kept, cpu.gemm_ns, cpu.rest_ns) == (2, 60_000, 29_000)
    assert GEMM_OP.match("quantized::linear_prepack") is None


def test_a_compiled_calls_guard_check_is_not_compute(tmp_path):
    """A compiled CPU decode step: the guard check (TorchDynamo Cache Lookup, 40 us of self time) is the compiled
    runtime's (probe.analysis.ledger.host.COMPILE_RUNTIME), not compute a batch repeats: the rest holds the mul's
    30 us above the view's 1 us floor, 29, and the compiled region's own 140 - 20 - 1 - 30 = 89 (the graph's kernels,
    which no op records), 88 above it: 117 (with the guard check's 39 above the floor, it was 156)."""
    host = [
        ("user_annotation", "decode#0", 0, 200, {}),
        ("cpu_op", "TorchDynamo Cache Lookup", 5, 45, {}),
        ("cpu_op", "Torch-Compiled Region: 0/1", 50, 190, {}),
        ("cpu_op", "aten::mm", 60, 80, {}),
        ("cpu_op", "aten::view", 81, 82, {}),
        ("cpu_op", "aten::mul", 90, 120, {}),
    ]
    trace = load_trace(_trace(tmp_path, host))
    (cpu,) = [f.cpu for f in step_facts(trace, analyze(trace)).values()]
    assert (cpu.gemm_ns, cpu.rest_ns) == (20_000, 117_000)


@pytest.mark.parametrize("sync_at, offered", [(95, True), (50, False)])
def test_a_sync_after_the_last_launch_leaves_a_capture_of_every_op_offered(tmp_path, sync_at, offered):
    """No forward range and no module frame: the capture region is every op and call, and a graph holds the launches,
    from the first to the last. A cudaStreamSynchronize after the last launch reads the result once the work is
    queued (a ParticleTransformer step ends so) and stays outside the graph; one between two launches stops it."""
    host = [("user_annotation", "ProfilerStep#0", 0, 120, {})]
    for i, at in enumerate((10, 30, 70)):
        host += [("cpu_op", "aten::mm", at, at + 15, {}), ("cuda_runtime", "cudaLaunchKernel", at + 2, at + 6,
                  {"correlation": i + 1})]  # fmt: skip
    host += [("cuda_runtime", "cudaStreamSynchronize", sync_at, sync_at + 5, {})]
    gpu = [("kernel", "gemm", 12 + 20 * i, 14 + 20 * i, {"correlation": i + 1}) for i in range(3)]
    d = _median(_trace(tmp_path, host, gpu))
    capture = "capture the forward in a CUDA graph"
    assert (capture in _changes(d)) == offered
    if not offered:
        assert any(w.startswith(f"{capture}: not offered") and "cudaStreamSynchronize" in w for w in d.withheld)


def test_a_change_its_own_model_prices_at_no_saving_says_so(tmp_path):
    """A GPU-bound step: capturing its launches leaves max(host, GPU) at the GPU's time. The change is not dropped
    without a word: it is withheld with the arithmetic that gives no saving."""
    host = [("user_annotation", "ProfilerStep#0", 0, 120, {})]
    for i, at in enumerate((10, 30)):
        host += [("cpu_op", "aten::mm", at, at + 15, {}), ("cuda_runtime", "cudaLaunchKernel", at + 2, at + 6,
                  {"correlation": i + 1})]  # fmt: skip
    gpu = [("kernel", "gemm", 12 + 150 * i, 162 + 150 * i, {"correlation": i + 1}) for i in range(2)]  # 300 us
    d = _median(_trace(tmp_path, host, gpu))
    assert d.bound == "gpu" and "capture the forward in a CUDA graph" not in _changes(d)
    (said,) = [w for w in d.withheld if w.startswith("capture the forward in a CUDA graph: not offered")]
    assert "by its own model it saves nothing here (max(host" in said


# --- batching from the sequences the step holds ----------------------------------------------------------------


def _cpu_steps_of(tmp_path, batch: int, gemm: tuple[int, int], attention: tuple[int, int]):
    """Three ProfilerSteps of 100 us on a CPU, no marker of a phase: each an aten::embedding [batch, 1] (2-3 us,
    at the dispatch floor as the views), a GEMM and attention at the times given, and a view after each."""
    host = []
    for i in range(3):
        t = 100 * i
        host += [
            ("user_annotation", f"ProfilerStep#{i + 1}", t, t + 100, {}),
            ("cpu_op", "aten::embedding", t + 2, t + 3, {"Input Dims": [[256, 64], [batch, 1]]}),
            ("cpu_op", "aten::mm", t + gemm[0], t + gemm[1], {}),
            ("cpu_op", "aten::view", t + gemm[1] + 1, t + gemm[1] + 2, {}),
            ("cpu_op", "aten::_scaled_dot_product_flash_attention_for_cpu", t + attention[0], t + attention[1], {}),
            ("cpu_op", "aten::view", t + attention[1] + 1, t + attention[1] + 2, {}),
        ]
    return _trace(tmp_path, host)


def test_cpu_batching_prices_from_the_three_sequences_the_step_holds(tmp_path):
    """The embedding [3, 1] makes each ProfilerStep a decode of 3 sequences. GEMM 30 us (the weights: once),
    attention 15 us for the 3 sequences: 5 us one; overhead 100 - 45 = 55. One sequence's step 55 + 30 + 5 = 90;
    the largest B within 1.25 x 90 = 112.5: 85 + 5 B <= 112.5 -> B = 5, its step 110 us, 22 us a token against
    100 / 3 = 33.3 now: saves 11.3 us a token (34%). Read as one sequence (before), it offered B = 3 at 120 us, 40
    us a token: a saving that was a loss."""
    d = _median(_cpu_steps_of(tmp_path, 3, (10, 40), (50, 65)))
    assert d.kind == "decode"
    w = next(w for w in d.what_if if w.change.startswith("batch"))
    assert w.change == "batch 5 sequences" and w.predicted_step_ms == pytest.approx(0.11)
    assert w.terms == pytest.approx({"overhead": 0.055, "once": 0.03, "per_sequence": 0.005})
    assert w.saving_ms == pytest.approx(0.1 / 3 - 0.022) and w.saving_pct == pytest.approx(100 * (1 - 0.022 * 30))
    assert "0.022 ms a token against 0.100 / 3 = 0.033 now" in w.arithmetic
    assert "the step holds 3 sequences (recorded shapes (aten::embedding [3, 1]))" in w.assumption
    assert predict_batch(w.terms, 3) == pytest.approx(0.1) and predict_batch(w.terms, 5) == pytest.approx(0.11)


def test_cpu_batching_is_withheld_where_the_step_holds_more_than_the_model_proposes(tmp_path):
    """GEMM 10 us once, attention 60 us for 3 sequences (20 one), overhead 30: one sequence's step 60, and 40 +
    20 B <= 1.25 x 60 = 75 holds only at B = 1: the step's 3 are past it, so no batch is offered, and the line
    says why with the arithmetic."""
    d = _median(_cpu_steps_of(tmp_path, 3, (5, 15), (20, 80)))
    assert not any(c.startswith("batch") for c in _changes(d))
    line = next(x for x in d.withheld if x.startswith("batch sequences"))
    assert line == (
        "batch sequences: not offered: the step holds 3 sequences already (recorded shapes (aten::embedding "
        "[3, 1])), at or past the 1 the model proposes: one sequence's step is overhead 0.030 + once 0.010 + 1 x "
        "0.020 = 0.060 ms, and B = 2 would take overhead 0.030 + once 0.010 + 2 x 0.020 = 0.080 ms, past 1.25 x "
        "0.060 = 0.075"
    )


def test_cpu_batching_is_withheld_with_its_arithmetic_where_the_model_proposes_one_sequence(tmp_path):
    """One sequence a step (embedding [1, 1]): GEMM 10 us once, attention 60 us per sequence, overhead 30: one
    sequence's step 100, and B = 2 would take 160, past 1.25 x 100 = 125, so the model proposes B = 1, no batch.
    Before, the what-if vanished without a line (a step holding several sequences said why; one holding one did
    not), so of a trace's decode steps some offered a batch and the others said nothing of it."""
    d = _median(_cpu_steps_of(tmp_path, 1, (5, 15), (20, 80)))
    assert d.kind == "decode" and not any(c.startswith("batch") for c in _changes(d))
    line = next(x for x in d.withheld if x.startswith("batch sequences"))
    assert line == (
        "batch sequences: not offered: the model proposes no batch past the one sequence the step holds (recorded "
        "shapes (aten::embedding [1, 1])): one sequence's step is overhead 0.030 + once 0.010 + 1 x 0.060 = 0.100 "
        "ms, and B = 2 would take overhead 0.030 + once 0.010 + 2 x 0.060 = 0.160 ms, past 1.25 x 0.100 = 0.125"
    )


def test_gpu_batching_prices_from_the_sequences_a_decode_step_holds(tmp_path):
    """probe's decode#0 with an embedding [3, 1]: the 4 us of attention are 3 sequences', 4/3 us one; the GEMM's 5
    once; host 100 binds. 5 + 4/3 B stays under 125 to MAX_BATCH: B = 64, the step 100 us, 1.5625 us a token
    against 100 / 3 = 33.3 now."""
    host, gpu = _host_bound_decode(
        extra_host=[
            ("cuda_runtime", "cudaLaunchKernel", 86, 88, {"correlation": 3}),
            ("cpu_op", "aten::embedding", 3, 5, {"Input Dims": [[256, 64], [3, 1]]}),
        ],
        extra_gpu=[("kernel", "flash_attn_fwd_kernel", 93, 97, {"correlation": 3})],
    )
    gpu[1] = ("kernel", "gemm2", 90, 90, {"correlation": 2})
    d = _median(_trace(tmp_path, host, gpu))
    w = next(w for w in d.what_if if w.change.startswith("batch"))
    assert w.change == f"batch {MAX_BATCH} sequences" and w.predicted_step_ms == pytest.approx(0.1)
    assert w.terms == pytest.approx({"host": 0.1, "once": 0.005, "per_sequence": 0.004 / 3})
    assert w.saving_ms == pytest.approx(0.1 / 3 - 0.1 / MAX_BATCH)
