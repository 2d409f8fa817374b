"""The step diagnosis (probe.analysis.diagnosis.verdict): hand-built traces where each verdict and each what-if has a
known
answer, worked out beside it; then every public trace, each with the verdict its figures call for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.analysis.diagnosis.evidence import Context, Evidence
from probe.analysis.diagnosis.verdict import bound_words, diagnose_trace
from probe.analysis.ledger.build import analyze
from probe.analysis.trace import load_trace
from tests import oracle
from tests.conftest import DATA, shared_trace
from tests.ranks import make_collective_job
from tests.test_ledger import _polling_trace


def _trace(tmp_path: Path, host: list, gpu: list = ()) -> Path:
    """A chrome trace from (cat, name, start_us, end_us, args) on one host thread and one stream."""
    events = [
        {"ph": "X", "cat": c, "name": n, "pid": 1, "tid": 1, "ts": a, "dur": b - a, "args": args}
        for c, n, a, b, args in host
    ]
    events += [
        {"ph": "X", "cat": c, "name": n, "pid": 0, "tid": 7, "ts": a, "dur": b - a, "args": {"stream": 7, **args}}
        for c, n, a, b, args in gpu
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _diagnose(path: Path):
    trace = load_trace(path)
    return diagnose_trace(analyze(trace), Context.of(trace)).steps[0]


def test_gpu_bound_decode_that_syncs(tmp_path):
    """The host issues two kernels in 20 us and waits 78 us for them: host work 100 - 78 = 22 us, GPU busy 50 + 38
    = 88 us. GPU-bound, 4x. A loop of such steps costs the 100 us wall; without the sync, max(22, 88) = 88 us."""
    path = _trace(
        tmp_path,
        [
            ("user_annotation", "decode#0", 0, 100, {}),
            ("user_annotation", "forward", 0, 20, {}),
            ("cpu_op", "aten::mm", 2, 12, {}),
            ("cuda_runtime", "cudaLaunchKernel", 4, 9, {"correlation": 1}),
            ("cpu_op", "aten::add", 13, 19, {}),
            ("cuda_runtime", "cudaLaunchKernel", 14, 17, {"correlation": 2}),
            ("user_annotation", "sync", 20, 100, {}),
            ("cuda_runtime", "cudaStreamSynchronize", 21, 99, {"correlation": 3}),
        ],
        [("kernel", "gemm", 10, 60, {"correlation": 1}), ("kernel", "add", 60, 98, {"correlation": 2})],
    )
    d = _diagnose(path)
    assert (d.bound, d.then, d.host_bound_by, d.balanced) == ("gpu", None, None, False)
    e = d.evidence
    assert (e.wall_ns, e.host_work_ns, e.gpu_busy_ns, e.measured_ns) == (100_000, 22_000, 88_000, 100_000)
    # The sync waited while the kernels ran, up to the last one's end at 98: nothing unseen.
    assert (e.sync_wait_ns, e.external_wait_ns) == (78_000, 0)
    # mm 10 - 5, add 6 - 3; two launches 5 + 3; what no event covers: [0,2] [12,13] [19,21] [99,100]
    assert (e.dispatch_ns, e.launch_ns, e.unattributed_ns) == (8_000, 8_000, 6_000)
    assert d.headline.startswith("step 0 (decode#0): GPU-bound. The GPU works 0.088 ms for 0.022 ms of host work")
    # Capturing the forward would bring host work to 22 - 20 + 4 (the median launch call) = 6 us: still under the
    # GPU's 88, so it buys nothing and is not offered. Removing the sync buys 100 - 88 = 12 us (the wait is on the
    # step's own kernels). The GPU work that binds is named: the GEMM's 50 of 88 us, at most 50 us if it took none
    # (no shapes: a ceiling, ranked after the priced change).
    assert [(w.change.split(" in ")[0], round(w.predicted_step_ms, 6), round(w.saving_ms, 6)) for w in d.what_if] == [
        ("remove the sync", 0.088, 0.012),
        ("speed up the gemm kernels (57% of the GPU work): at most", 0.05, 0.05),
    ]
    assert d.what_if[0].saving_pct == pytest.approx(12.0)


def test_external_wait_then_its_own_gpu_work(tmp_path):
    """The stream waits on an event (cudaStreamWaitEvent); the host's blocking copy returns after 80 us, in which
    only the copy's last 1 us ran on the GPU: 79 us unseen, 79% of the window: external. Then host work 100 - 80 = 20
    against the step's own 101 us of GPU work, after the copy: GPU-bound."""
    path = _trace(
        tmp_path,
        [
            ("user_annotation", "decode#0", 0, 100, {}),
            ("cuda_runtime", "cudaStreamWaitEvent", 1, 2, {"correlation": 1}),
            ("python_function", "batch.py(443): init_new", 2, 84, {}),
            ("python_function", "<built-in method tensor of type object at 0x1>", 2, 84, {}),
            ("cuda_runtime", "cudaMemcpy", 3, 83, {"correlation": 2}),
            ("cpu_op", "aten::mm", 84, 94, {}),
            ("cuda_runtime", "cudaLaunchKernel", 85, 90, {"correlation": 3}),
        ],
        [
            ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 82, 83, {"correlation": 2}),
            ("kernel", "gemm", 95, 195, {"correlation": 3}),
        ],
    )
    d = _diagnose(path)
    assert (d.bound, d.then) == ("external", "gpu")
    e = d.evidence
    assert (e.sync_wait_ns, e.external_wait_ns, e.host_work_ns, e.gpu_busy_ns) == (80_000, 79_000, 20_000, 101_000)
    assert e.span_ns == 195_000 and e.measured_ns == 101_000
    assert "external, then GPU-bound. The host waited 0.079 ms of its 0.100 ms window (79%) in cudaMemcpy" in d.headline
    assert "at <built-in method tensor of type object> in batch.py(443): init_new" in d.headline
    # the copy was queued 2 us after the stream-wait call: the sync site says so
    (site,) = analyze(load_trace(path)).steps[0].sync_sites
    assert (site.call, site.wait_ns, site.stream_wait_before_ns) == ("cudaMemcpy", 80_000, 2_000)
    # host to device from pageable memory, as the GPU copy's name says (the call's args say nothing)
    assert (site.copy_bytes, site.copy_kind, site.copy_memory) == (None, "HtoD", "pageable")
    assert "in cudaMemcpy (a host to device copy, pageable host memory) at" in d.headline
    assert "0.002 ms after a stream-wait-event call" in d.lines[0]


def drain_then_own_work_trace(tmp_path: Path) -> Path:
    """The H100 prefill's shape: the step opens with a device-wide sync that waits 30 us (0-30) on a kernel launched
    before the step (earlier work); then 40 us of host work launches two kernels, the second of which runs 10 us past
    the host window (ends at 80, the window at 70)."""
    return _trace(
        tmp_path,
        [
            ("cuda_runtime", "cudaLaunchKernel", -5, -3, {"correlation": 9}),
            ("user_annotation", "decode#0", 0, 70, {}),
            ("cuda_runtime", "cudaDeviceSynchronize", 0, 30, {"correlation": 1}),
            ("cpu_op", "aten::mm", 31, 50, {}),
            ("cuda_runtime", "cudaLaunchKernel", 32, 36, {"correlation": 2}),
            ("cpu_op", "aten::add", 51, 69, {}),
            ("cuda_runtime", "cudaLaunchKernel", 52, 56, {"correlation": 3}),
        ],
        [
            ("kernel", "earlier", -2, 30, {"correlation": 9}),
            ("kernel", "gemm", 36, 60, {"correlation": 2}),
            ("kernel", "add", 60, 80, {"correlation": 3}),
        ],
    )


def test_a_syncs_wait_behind_a_collective_is_on_the_other_ranks_not_the_steps_saving(tmp_path):
    """Rank 0 of tests/ranks.make_collective_job: it enters at 0, its 200 us GEMM runs 20-220, its collective 220-700
    (it waits there for rank 3, which joins at 520), and it waits in cudaStreamSynchronize 30-700. Own wait 670 us,
    of it 480 behind the collective: on the other ranks. Host work 900 - 670 = 230, GPU 200 + 480 = 680; the step
    max(230 + 670, 680) = 900. Removing the sync keeps the wait on the peers: max(230 + 480, 680) = 710, saves 190
    us, not the 220 that max(230, 680) = 680 would claim."""
    rank0, *_ = make_collective_job(tmp_path / "job")
    d = _diagnose(rank0)
    (sync,) = [w for w in d.what_if if w.change.startswith("remove the sync")]
    assert (round(sync.predicted_step_ms, 6), round(sync.saving_ms, 6)) == (0.71, 0.19)
    s = analyze(load_trace(rank0)).steps[0]
    assert (s.sync_wait_ns, s.own_wait_ns, s.peer_wait_ns, s.gpu_busy_ns) == (670_000, 670_000, 480_000, 680_000)
    assert "max(host 0.230 + on peers 0.480, GPU 0.680) = 0.710 ms" in sync.arithmetic
    assert "0.480 ms of its 0.670 ms wait was behind communication kernels" in sync.arithmetic
    assert "a wait on the other ranks, not this step's own work" in sync.arithmetic


def test_a_sync_that_waits_only_behind_a_collective_is_not_offered(tmp_path):
    """The same job with the sync from the end of the GEMM (220) to the collective's end (700): all 480 us of its
    own wait is behind the collective, on the other ranks: nothing of the step's own to save."""
    rank0, *_ = make_collective_job(tmp_path / "job", sync_at_us=220)
    d = _diagnose(rank0)
    assert not [w for w in d.what_if if w.change.startswith("remove the sync")]
    s = analyze(load_trace(rank0)).steps[0]
    assert (s.sync_wait_ns, s.own_wait_ns, s.peer_wait_ns) == (480_000, 480_000, 480_000)
    (line,) = [w for w in d.withheld if w.startswith("remove the sync")]
    assert "not offered: 0.480 ms of its 0.480 ms wait was behind communication kernels" in line
    assert "a wait on the other ranks" in line


def test_own_wait_is_the_wait_on_the_steps_own_gpu_work(tmp_path):
    """The 30 us sync ran while earlier work ran: none of it waited on the step's own kernels (from 36 on)."""
    (s,) = analyze(load_trace(drain_then_own_work_trace(tmp_path))).steps
    assert (s.sync_wait_ns, s.external_wait_ns, s.own_wait_ns, s.gpu_busy_ns) == (30_000, 0, 0, 44_000)
    # the GPU-bound test step's sync (21-99) waits on its own kernels (10-98), the call returning at 99 included
    path = _trace(
        tmp_path,
        [
            ("user_annotation", "decode#0", 0, 100, {}),
            ("cuda_runtime", "cudaLaunchKernel", 4, 9, {"correlation": 1}),
            ("cuda_runtime", "cudaStreamSynchronize", 21, 99, {"correlation": 3}),
        ],
        [("kernel", "gemm", 10, 98, {"correlation": 1})],
    )
    (s,) = analyze(load_trace(path)).steps
    assert (s.sync_wait_ns, s.own_wait_ns) == (78_000, 78_000)


def test_a_copy_that_returns_after_its_copy_ends_is_sync_wait(tmp_path):
    """Shape one, `.item()` on pageable memory: cudaMemcpyAsync runs 12-58 us and returns after its 4 B device-to-
    host copy ends (50-57): the host waited, whatever the call is named. Sync wait 46 us, all with the GPU running
    (the kernel 5-50, then the copy); host work 100 - 46 = 54 us against 45 + 7 = 52 us of GPU work."""
    path = _trace(
        tmp_path,
        [
            ("user_annotation", "decode#0", 0, 100, {}),
            ("cuda_runtime", "cudaLaunchKernel", 2, 4, {"correlation": 1}),
            ("python_function", "<built-in method item of Tensor object at 0x7f>", 9, 61, {}),
            ("cpu_op", "aten::item", 10, 60, {}),
            ("cpu_op", "aten::_local_scalar_dense", 11, 59, {}),
            ("cuda_runtime", "cudaMemcpyAsync", 12, 58, {"correlation": 2}),
        ],
        [
            ("kernel", "gemm", 5, 50, {"correlation": 1}),
            ("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 50, 57, {"correlation": 2, "bytes": 4}),
        ],
    )
    d = _diagnose(path)
    e = d.evidence
    assert (e.sync_wait_ns, e.external_wait_ns, e.host_work_ns, e.gpu_busy_ns) == (46_000, 0, 54_000, 52_000)
    (site,) = analyze(load_trace(path)).steps[0].sync_sites
    assert (site.call, site.copy_bytes, site.copy_kind, site.copy_memory, site.op) == (
        "cudaMemcpyAsync",
        4,
        "DtoH",
        "pageable",
        "aten::item",
    )
    assert site.frame == "<built-in method item of Tensor object>"
    assert "in cudaMemcpyAsync (a 4 B device to host copy, pageable host memory) under aten::item at <built-in " \
        "method item of Tensor object>" in " ".join(d.lines)  # fmt: skip


def test_a_copy_that_starts_late_is_sync_wait_and_one_that_returned_is_not(tmp_path):
    """Shape two, a pageable host-to-device batch: the call runs 10-170 us; its copy starts at 150, 140 us after the
    call began (past COPY_QUEUED_NS, 50 us) while the call still ran: the stream was busy with the 5-150 kernel and
    the host waited, though the call returns before the copy ends (200). A pinned copy's call 175-180 returned long
    before its copy ran (300-310): no wait, a runtime call. Sync wait 160 us; host work 400 - 160 = 240."""
    path = _trace(
        tmp_path,
        [
            ("user_annotation", "ProfilerStep#0", 0, 400, {}),
            ("cuda_runtime", "cudaLaunchKernel", 2, 4, {"correlation": 1}),
            ("cpu_op", "aten::to", 9, 171, {}),
            ("cuda_runtime", "cudaMemcpyAsync", 10, 170, {"correlation": 2}),
            ("cuda_runtime", "cudaMemcpyAsync", 175, 180, {"correlation": 3}),
        ],
        [
            ("kernel", "conv", 5, 150, {"correlation": 1}),
            ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 150, 200, {"correlation": 2, "bytes": 77070336}),
            ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 300, 310, {"correlation": 3}),
        ],
    )
    s = analyze(load_trace(path)).steps[0]
    assert (s.sync_wait_ns, s.host_work_ns, s.mechanism_ns["runtime"]) == (160_000, 240_000, 5_000)
    (site,) = s.sync_sites
    assert (site.call, site.wait_ns, site.copy_bytes, site.copy_kind, site.copy_memory, site.op) == (
        "cudaMemcpyAsync",
        160_000,
        77_070_336,
        "HtoD",
        "pageable",
        "aten::to",
    )


@pytest.mark.parametrize("gemm", [True, False])
def test_a_device_synchronize_names_a_copy_only_when_its_wait_ended_on_one(tmp_path, gemm):
    """A 131,072 B host-to-device copy (20-22 us), then (or not) a GEMM launched at 30 that runs 40-1340 us, then a
    cudaDeviceSynchronize from 50: with the GEMM, the wait ends on the GEMM (the last GPU op to end inside it), so
    the site names no copy; without it, the last GPU op to end in the wait is the copy, which the site names."""
    host = [
        ("user_annotation", "decode#0", 0, 1400, {}),
        ("cuda_runtime", "cudaMemcpyAsync", 10, 15, {"correlation": 1}),
        ("cuda_runtime", "cudaDeviceSynchronize", 50, 1345 if gemm else 60, {}),
    ]
    gpu = [("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20, 55, {"correlation": 1, "bytes": 131072})]
    if gemm:
        host.append(("cuda_runtime", "cudaLaunchKernel", 30, 35, {"correlation": 2}))
        gpu.append(("kernel", "ampere_sgemm_128x64_nn", 40, 1340, {"correlation": 2}))
    (site,) = analyze(load_trace(_trace(tmp_path, host, gpu))).steps[0].sync_sites
    assert site.call == "cudaDeviceSynchronize"
    assert (site.copy_bytes, site.copy_kind) == ((None, None) if gemm else (131072, "HtoD"))


def test_launches_with_no_gpu_side_are_unknown_with_no_what_if(tmp_path):
    """Three launch calls and no GPU op at all: no bound can be named, and no what-if is priced."""
    path = _trace(
        tmp_path,
        [("user_annotation", "decode#0", 0, 100, {})]
        + [("cuda_runtime", "cudaLaunchKernel", 10 * i, 10 * i + 5, {"correlation": i}) for i in (1, 2, 3)],
    )
    d = _diagnose(path)
    assert (d.bound, d.then, d.host_bound_by, d.balanced, d.what_if) == ("unknown", None, None, False, ())
    assert "unknown. None of its 3 launch calls has a GPU op in the trace" in d.headline


def test_a_step_whose_gpu_side_is_partly_missing_says_how_much(tmp_path):
    """Four launches, one kernel recorded (10 us). Host work 100 us; were the three missing as long, the GPU work
    would be 40 us, short of the host's 100: host-bound stands, and a line says what is missing. Make the kernel
    30 us: 30 + 3 x 30 = 120 us would pass the host's 100, so the verdict is unknown."""
    host = [("user_annotation", "decode#0", 0, 100, {})]
    host += [("cuda_runtime", "cudaLaunchKernel", 10 * i, 10 * i + 5, {"correlation": i}) for i in (1, 2, 3, 4)]
    d = _diagnose(_trace(tmp_path, host, [("kernel", "k", 20, 30, {"correlation": 1})]))
    assert d.bound == "host" and "3 of the step's 4 launch calls have no GPU op in the trace" in " ".join(d.lines)
    d = _diagnose(_trace(tmp_path, host, [("kernel", "k", 20, 50, {"correlation": 1})]))
    assert (d.bound, d.what_if) == ("unknown", ())
    assert "3 of its 4 launch calls (75%) have no GPU op in the trace: at the recorded ones' 0.030 ms each the GPU " \
        "work would be 0.120 ms, past the host's 0.100 ms" in d.headline  # fmt: skip


def graph_capture_trace(tmp_path: Path) -> Path:
    """vLLM capturing its forward at start-up, as a ROCm trace records it (no step marker: the trace is one step):
    a warm-up launch whose kernel ran, then hipStreamBeginCapture, four launches recorded into the graph (no GPU
    op: they run when the graph is replayed), hipStreamEndCapture and the graph's instantiation."""
    host = [
        ("python_function", "vllm/v1/worker/gpu_model_runner.py(5467): _capture_cudagraphs", 0, 200, {}),
        ("cpu_op", "aten::fill_", 2, 8, {}),
        ("cuda_runtime", "hipLaunchKernel", 3, 6, {"correlation": 1}),
        ("python_function", "torch/cuda/graphs.py(98): capture_begin", 10, 14, {}),
        ("cuda_runtime", "hipStreamBeginCapture", 11, 13, {"correlation": 2}),
        ("python_function", "model.py(5): forward", 20, 150, {}),
    ]
    for i, op in enumerate(("aten::mm", "aten::add", "aten::gelu", "aten::softmax")):
        at = 20 + 30 * i
        host.append(("cpu_op", op, at + 2, at + 10, {}))
        host.append(("cuda_runtime", "hipModuleLaunchKernel", at + 4, at + 8, {"correlation": 3 + i}))
    host += [
        ("python_function", "torch/cuda/graphs.py(119): capture_end", 160, 185, {}),
        ("cuda_runtime", "hipStreamEndCapture", 161, 165, {"correlation": 7}),
        ("cuda_runtime", "hipGraphInstantiateWithFlags", 170, 180, {"correlation": 8}),
    ]
    return _trace(tmp_path, host, [("kernel", "fill", 7, 9, {"correlation": 1})])


def test_graph_capture_set_up_is_said_and_prices_no_change(tmp_path):
    """Of the five launch calls, the four between hipStreamBeginCapture and hipStreamEndCapture on the thread are
    captured: not launches whose kernels are missing, and the step is capture set-up (one-off work, its forward
    captured already): no what-if is priced on it, the capture what-if least of all."""
    trace = load_trace(graph_capture_trace(tmp_path))
    (s,) = analyze(trace).steps
    assert (s.launches, s.captured_launches, s.graph_instantiations, s.launches_unmatched) == (5, 4, 1, 0)
    d = diagnose_trace(analyze(trace), Context.of(trace)).steps[0]
    assert d.bound == "host" and d.what_if == ()
    assert (
        "It is graph capture set-up, one-off work: 4 of its 5 launch calls were recorded into a graph, not run, each "
        "made on its thread between a stream-capture begin and end call; and it instantiates 1 graph(s)."
    ) in d.headline
    assert not any("have no GPU op" in line for line in d.lines)
    assert d.withheld[0].startswith("capture the forward in a CUDA graph: not offered: the step captures it already")
    assert d.withheld[1].startswith("every other change: not offered: each prices a step that runs its work")


def test_data_loading_in_the_2021_schema_bounds_the_host(tmp_path):
    """The 2021 event schema: ops are `Operator`s, the DataLoader's range too, thread ids text. Its 60 us are data
    loading (the ops inside it included), the largest part of 100 us of host work against 10 us of GPU work."""
    events = [
        ("Operator", "ProfilerStep#3", 0, 100, {}),
        ("Operator", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 5, 65, {}),
        ("Operator", "aten::stack", 10, 30, {}),
        ("Operator", "aten::mm", 70, 80, {}),
        ("Runtime", "cudaLaunchKernel", 71, 73, {"correlation": 1}),
    ]
    doc = [
        {"ph": "X", "cat": c, "name": n, "pid": 9, "tid": "9", "ts": a, "dur": b - a, "args": args}
        for c, n, a, b, args in events
    ]
    doc.append({"ph": "X", "cat": "Kernel", "name": "gemm", "pid": 0, "tid": "stream 7", "ts": 74, "dur": 10,
                "args": {"correlation": 1}})  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": doc}))
    d = _diagnose(path)
    assert (d.bound, d.host_bound_by, d.evidence.data_ns) == ("host", "data", 60_000)
    assert "host-bound, by data loading" in d.headline
    assert analyze(load_trace(path)).steps[0].purpose_ns["data"] == 60_000


def test_communication_is_its_own_purpose_and_kernel_category(tmp_path):
    """An nccl:all_reduce range (20 us) around c10d's op launches an NCCL kernel (40 us) beside a GEMM (10 us): the
    step says communication takes 20 us of its 100 us wall and 40 of its 50 us of GPU work (80%)."""
    path = _trace(
        tmp_path,
        [
            ("user_annotation", "ProfilerStep#1", 0, 100, {}),
            ("cpu_op", "aten::mm", 5, 15, {}),
            ("cuda_runtime", "cudaLaunchKernel", 6, 8, {"correlation": 1}),
            ("user_annotation", "nccl:all_reduce", 20, 40, {}),
            ("cpu_op", "c10d::allreduce_", 21, 39, {}),
            ("cuda_runtime", "cudaLaunchKernel", 22, 24, {"correlation": 2}),
        ],
        [
            ("kernel", "gemm", 10, 20, {"correlation": 1}),
            ("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 25, 65, {"correlation": 2}),
        ],
    )
    s = analyze(load_trace(path)).steps[0]
    assert (s.purpose_ns["communication"], s.kernels_by_category["communication"]) == (20_000, 40_000)
    d = _diagnose(path)
    assert (d.evidence.communication_ns, d.evidence.gpu_communication_ns) == (20_000, 40_000)
    assert "communication: 0.020 ms of the host window in collectives (20% of the wall); 0.040 ms of communication " \
        "kernels (80% of GPU work)" in d.lines  # fmt: skip


def test_a_step_that_polls_the_device_waits_and_is_gpu_bound(tmp_path):
    """tests/test_ledger.py's polling step: 20 cudaEventQuery calls (10-106) wait on the kernel (10-150), so host work
    is 200 - 96 = 104 us against 140 us of GPU work: GPU-bound, 1.35x (booked as host work, the 96 us made it
    host-bound, 200 against 140). Removing the wait brings the step to max(104, 140) = 140 us."""
    d = _diagnose(_polling_trace(tmp_path, 20))
    assert (d.bound, d.evidence.host_work_ns, d.evidence.sync_wait_ns) == ("gpu", 104_000, 96_000)
    w = d.what_if[0]
    assert w.change.startswith("remove the sync in cudaEventQuery")
    assert (round(w.predicted_step_ms, 6), round(w.saving_ms, 6)) == (0.14, 0.06)


def test_collectives_issued_from_another_thread_count_and_say_which(tmp_path):
    """DDP's allreduce runs from autograd's hooks on thread 2: its nccl:all_reduce range (50-90 us) around c10d's
    op and record_param_comms (52-88) launches an NCCL kernel of 40 us. The loop's thread 1 holds no collective, so
    its own communication is 0; thread 2's is 40 us of the 200 us wall (20%), and the line says which thread."""
    events = [
        {"ph": "X", "cat": c, "name": n, "pid": 1, "tid": tid, "ts": a, "dur": b - a, "args": args}
        for c, n, tid, a, b, args in (
            ("user_annotation", "ProfilerStep#0", 1, 0, 200, {}),
            ("cpu_op", "aten::linear", 1, 0, 20, {}),
            ("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", 2, 30, 190, {}),
            ("user_annotation", "nccl:all_reduce", 2, 50, 90, {}),
            ("cpu_op", "c10d::allreduce_", 2, 52, 88, {}),
            ("cpu_op", "record_param_comms", 2, 53, 87, {}),
            ("cuda_runtime", "cudaLaunchKernel", 2, 54, 56, {"correlation": 1}),
        )
    ]
    events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
                   "ts": 60, "dur": 40, "args": {"correlation": 1}})  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    s = analyze(load_trace(path)).steps[0]
    assert (s.purpose_ns["communication"], s.other_threads[0].communication_ns) == (0, 40_000)
    d = _diagnose(path)
    assert (d.evidence.communication_ns, d.evidence.communication_other_ns) == (0, 40_000)
    line = next(x for x in d.lines if x.startswith("communication"))
    assert line == (
        "communication: 0.040 ms of the host window in collectives on thread 1/2 (20% of the wall), 0.000 ms on "
        "the step's own thread (0% of the wall); 0.040 ms of communication kernels (100% of GPU work)"
    )


def test_a_gpu_job_without_its_gpu_side_is_unknown_not_cpu_only(tmp_path):
    """A trace whose deviceProperties name two A100s and whose step holds an nccl:all_to_all range, with no GPU op
    and no launch call: the profiler did not record the GPU side. Not "CPU only", and no CPU-priced change (an op's
    self time here is dispatch, not compute); the same trace without the devices and the collective is CPU only."""
    host = [
        ("user_annotation", "ProfilerStep#1", 0, 100, {}),
        ("cpu_op", "aten::mm", 5, 45, {}),
        ("user_annotation", "nccl:all_to_all", 50, 60, {}),
        ("cpu_op", "aten::add", 60, 90, {}),
    ]
    events = [
        {"ph": "X", "cat": c, "name": n, "pid": 1, "tid": 1, "ts": a, "dur": b - a, "args": args}
        for c, n, a, b, args in host
    ]
    gpus = [{"id": i, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85e9} for i in range(2)]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": gpus}))
    analysis = analyze(load_trace(path))
    assert not analysis.on_gpu and "deviceProperties name 2 GPU(s)" in (analysis.gpu_unrecorded or "")
    d = _diagnose(path)
    assert (d.bound, d.what_if) == ("unknown", ())
    assert "unknown. GPU side not recorded: its deviceProperties name 2 GPU(s) (NVIDIA A100-SXM4-80GB); it holds 1 " \
        "NCCL collectives (e.g. nccl:all_to_all)" in d.headline  # fmt: skip
    assert "CPU only" not in d.headline and d.withheld[0].startswith("every change: not offered")
    plain = tmp_path / "cpu.json"
    plain.write_text(json.dumps({"traceEvents": [e for e in events if e["name"] != "nccl:all_to_all"]}))
    assert _diagnose(plain).bound == "cpu_only" and analyze(load_trace(plain)).gpu_unrecorded is None


@pytest.mark.parametrize(
    "op, purpose",
    [("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "data"), ("record_param_comms", "communication")],
)
def test_a_dataloader_or_collective_operator_is_not_the_top_op(tmp_path, op, purpose):
    """2021's schema records the DataLoader's next batch as an `Operator` (a cpu_op): 40 us of self time, counted as
    data loading by the purpose partition; a collective's host op lasts as long as the other ranks make it. The top
    op, in the host line and in the "fix the top op" change, is the largest op that is neither: aten::add_'s 8 us
    (10 less its 2 us launch)."""
    path = _trace(
        tmp_path,
        [
            ("user_annotation", "ProfilerStep#1", 0, 100, {}),
            ("Operator", op, 0, 40, {}),
            ("Operator", "aten::add_", 50, 60, {}),
            ("Runtime", "cudaLaunchKernel", 52, 54, {"correlation": 1}),
        ],
        [("Kernel", "add_kernel", 55, 60, {"correlation": 1})],
    )
    s = analyze(load_trace(path)).steps[0]
    assert s.top_ops[0].name == op and s.purpose_ns[purpose] == 40_000
    d = _diagnose(path)
    assert "(top op aten::add_ 0.008)" in d.lines[0]
    changes = [w.change for w in d.what_if]
    assert "fix the top op, aten::add_ (x1)" in changes and not any(op in c for c in changes)


def test_other_threads_work_while_the_steps_thread_records_nothing(tmp_path):
    """The loop's thread runs ops 0-20 and 80-100 us and records nothing between; autograd's thread 2 runs the
    backward 25-75 (an op, one launch of a 5 us kernel). Of the 60 us the loop's thread leaves uncovered, 50 are
    the other thread's work: host-bound by it, not by "unattributed"."""
    events = [
        {"ph": "X", "cat": c, "name": n, "pid": 1, "tid": tid, "ts": a, "dur": b - a, "args": args}
        for c, n, tid, a, b, args in (
            ("user_annotation", "ProfilerStep#0", 1, 0, 100, {}),
            ("cpu_op", "aten::linear", 1, 0, 20, {}),
            ("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", 2, 25, 75, {}),
            ("cuda_runtime", "cudaLaunchKernel", 2, 30, 35, {"correlation": 1}),
            ("cpu_op", "aten::_foreach_add_", 1, 80, 100, {}),
        )
    ]
    events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 36, "dur": 5,
                   "args": {"correlation": 1}})  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert analyze(load_trace(path)).steps[0].unattributed_other_ns == 50_000
    d = _diagnose(path)
    e = d.evidence
    assert (e.other_threads_ns, e.unattributed_ns, e.dispatch_ns) == (50_000, 10_000, 40_000)
    assert (d.bound, d.host_bound_by) == ("host", "other_threads") and "by other threads' work" in d.headline


def test_a_python_frame_waiting_on_another_thread_is_other_threads_work(tmp_path):
    """With stacks, loss.backward()'s run_backward frame covers the loop thread's wait: it has no child from 100 to
    900 us while autograd's thread 2 runs the backward 150-850 (a cudaFree of 150-750 inside an op of 100-850 less
    the free: 600 us of cudaFree self, 100 of the op's, one 5 us launch). Of run_backward's 800 us of self time,
    700 are the wait on thread 2 (other threads' work), 100 its own; with main's 100 + 100 around it, Python is
    300. The verdict names what thread 2 did (cudaFree first, a device free that synchronizes), no "fix the frame"
    prices the wait, and speeding up cudaFree saves its 600 us (thread 2's 700 us all ran in the wait)."""
    events = [
        {"ph": "X", "cat": c, "name": n, "pid": 1, "tid": tid, "ts": a, "dur": b - a, "args": args}
        for c, n, tid, a, b, args in (
            ("user_annotation", "ProfilerStep#0", 1, 0, 1000, {}),
            ("python_function", "train.py(10): main", 1, 0, 1000, {}),
            ("python_function", "<built-in method run_backward of torch._C._EngineBase object at 0x7f>", 1, 100, 900,
             {}),
            ("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", 2, 150, 850, {}),
            ("cuda_runtime", "cudaLaunchKernel", 2, 155, 160, {"correlation": 1}),
            ("cuda_runtime", "cudaFree", 2, 200, 800, {}),
        )
    ]  # fmt: skip
    events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 170, "dur": 5,
                   "args": {"correlation": 1}})  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    s = analyze(load_trace(path)).steps[0]
    assert (s.mechanism_ns["python"], s.python_other_ns, s.unattributed_other_ns) == (1_000_000, 700_000, 0)
    frame = s.top_frames[0]
    assert (frame.self_ns, frame.waited_ns, frame.own_ns) == (800_000, 700_000, 100_000)
    (other,) = s.other_threads
    assert [(o.name, o.self_ns, o.calls) for o in other.top][:2] == [("cudaFree", 600_000, 1),
        ("autograd::engine::evaluate_function: AddmmBackward0", 95_000, 1)]  # fmt: skip
    d = _diagnose(path)
    e = d.evidence
    assert (e.other_threads_ns, e.python_ns) == (700_000, 300_000)
    assert (d.bound, d.host_bound_by) == ("host", "other_threads")
    line = next(x for x in d.lines if x.startswith("other threads' work"))
    assert "thread 1/2 was busy 0.700 ms, most in cudaFree 0.600 ms (x1; a device-memory free, which synchronizes" \
        " the device)" in line and "waited in <built-in method run_backward" in line  # fmt: skip
    fixes = {w.change: w.saving_ms for w in d.what_if}
    assert fixes["speed up cudaFree (x1) in thread 1/2, which the step waits on"] == pytest.approx(0.6)
    frame_fix = [v for k, v in fixes.items() if k.startswith("fix the top Python frame")]
    assert frame_fix == [pytest.approx(0.2)]  # train.py's own 200 us, not run_backward's wait


def test_a_thread_running_before_the_frame_is_concurrent_not_waited_on(tmp_path):
    """A compile worker's thread 3 sits in one frame (a pipe read) from before the step to after it, while the
    loop's frame runs 900 us of its own Python around one op: that thread's work did not begin inside the frame's
    self time, so it is concurrent, not waited on: Python stays Python (the rtx4080 nanovllm trace's shape)."""
    events = [
        {"ph": "X", "cat": c, "name": n, "pid": 1, "tid": tid, "ts": a, "dur": b - a, "args": args}
        for c, n, tid, a, b, args in (
            ("user_annotation", "ProfilerStep#0", 1, 0, 1000, {}),
            ("python_function", "loop.py(10): step", 1, 0, 1000, {}),
            ("cpu_op", "aten::mm", 1, 400, 500, {}),
            ("cuda_runtime", "cudaLaunchKernel", 1, 410, 420, {"correlation": 1}),
            ("python_function", "subproc_pool.py(61): _recv_msg", 3, -10, 1010, {}),
        )
    ]
    events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 430, "dur": 5,
                   "args": {"correlation": 1}})  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    s = analyze(load_trace(path)).steps[0]
    assert (s.mechanism_ns["python"], s.python_other_ns, s.top_frames[0].waited_ns) == (900_000, 0, 0)
    d = _diagnose(path)
    assert (d.evidence.other_threads_ns, d.evidence.python_ns, d.host_bound_by) == (0, 900_000, "python")


def _blocked_loop(tmp_path: Path, worker: bool) -> Path:
    """A serving loop's thread blocks in a lock's acquire (under threading's wait, 600 us) and in the event loop's
    epoll (200 us), around 100 us of its own Python and a 100 us op; with `worker`, a second thread of the process
    runs the model meanwhile (an op 100-500, inside the acquire), else that thread is not recorded."""
    rows = [
        (1, "user_annotation", "ProfilerStep#0", 0, 1000),
        (1, "python_function", "serve.py(10): handle", 0, 1000),
        (1, "python_function", "threading.py(295): wait", 50, 660),
        (1, "python_function", "<built-in method acquire of _thread.lock object at 0x7f3a>", 55, 655),
        (1, "python_function", "selectors.py(451): select", 660, 870),
        (1, "python_function", "<built-in method poll of select.epoll object at 0x7f3b>", 665, 865),
        (1, "cpu_op", "aten::argmax", 880, 980),
    ]
    rows += [(2, "cpu_op", "aten::mm", 100, 500)] if worker else []
    base = {"ph": "X", "pid": 1, "args": {}}
    events = [base | {"cat": c, "name": n, "tid": t, "ts": a, "dur": b - a} for t, c, n, a, b in rows]
    path = tmp_path / f"loop{int(worker)}.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_thread_blocked_in_a_lock_or_a_poll_waits_its_python_is_not_its_own(tmp_path):
    """The blocking builtins' self time is a wait, not Python work (before: the acquire was the top frame, "fix" it
    to save 60%). Where another thread of the process ran code meanwhile, the wait is that thread's work (its op's
    400 us inside the acquire); the rest is a wait on what the trace does not hold (a worker thread the profiler did
    not record, asyncio.to_thread's): sync wait, named by the builtin, as an OS wait call is, and the step's own
    (a CPU step owns its waits: no change to its host work removes them). Its Python is 100, and the frame to fix is
    the loop's own."""
    s = analyze(load_trace(_blocked_loop(tmp_path, worker=False))).steps[0]
    assert (s.python_other_ns, s.sync_wait_ns, s.mechanism_ns["python"]) == (0, 800_000, 100_000)
    waits = {f.frame: (f.self_ns, f.waited_ns) for f in s.top_frames if f.waited_ns}
    assert waits == {
        "<built-in method acquire of _thread.lock object>": (600_000, 600_000),
        "<built-in method poll of select.epoll object>": (200_000, 200_000),
    }
    assert [(x.call, x.wait_ns) for x in s.sync_sites] == [
        ("<built-in method acquire of _thread.lock object>", 600_000),
        ("<built-in method poll of select.epoll object>", 200_000),
    ]
    d = _diagnose(_blocked_loop(tmp_path, worker=False))
    assert (d.evidence.other_threads_ns, d.evidence.python_ns) == (0, 100_000)
    assert "most of it a wait: 0.800 ms sync wait in <built-in method acquire of _thread.lock object>" in d.headline
    assert not any("acquire" in w.change or "poll" in w.change for w in d.what_if)
    assert all(w.step_ms == pytest.approx(1.0) for w in d.what_if)  # priced on the whole step, its waits kept
    s = analyze(load_trace(_blocked_loop(tmp_path, worker=True))).steps[0]
    assert (s.python_other_ns, s.sync_wait_ns, s.mechanism_ns["python"]) == (400_000, 400_000, 500_000)
    d = _diagnose(_blocked_loop(tmp_path, worker=True))
    assert (d.evidence.other_threads_ns, d.evidence.python_ns) == (400_000, 100_000)


def named_ranges_trace(tmp_path: Path) -> Path:
    """Two decode steps of 1000 us inside a `generate` range, each: two ranges loading a layer's weights with no op,
    frame or call in them (`ensure_layer_0_weights` [10, 310], `ensure_layer_1_weights` [320, 620]: the user's own
    code, 600 us), a `compute` range [630, 900] holding aten::mm [640, 710] and its launch [650, 660] (a 20 us
    kernel), then a DataLoader range with no op [910, 950] (data loading, not a named range)."""
    host = [("user_annotation", "generate", 0, 2000, {})]
    gpu = []
    for i in range(2):
        b = 1000 * i
        host += [
            ("user_annotation", f"decode#{i}", b, b + 1000, {}),
            ("user_annotation", "ensure_layer_0_weights", b + 10, b + 310, {}),
            ("user_annotation", "ensure_layer_1_weights", b + 320, b + 620, {}),
            ("user_annotation", "compute", b + 630, b + 900, {}),
            ("cpu_op", "aten::mm", b + 640, b + 710, {}),
            ("cuda_runtime", "cudaLaunchKernel", b + 650, b + 660, {"correlation": i + 1}),
            ("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", b + 910, b + 950, {}),
        ]
        gpu.append(("kernel", "gemm", b + 670, b + 690, {"correlation": i + 1}))
    return _trace(tmp_path, host, gpu)


def test_time_a_range_with_no_op_names_is_its_code_not_unattributed(tmp_path):
    """No op, frame or call covers 1000 - 70 = 930 us of each step (the mechanism's unattributed, unchanged); of it
    40 us is data loading, and the two weight-loading ranges' 600 us, holding nothing the profiler recorded, are
    the user's code they name: named time, one family (`ensure_layer_N_weights`), out of unattributed, which keeps
    930 - 40 - 600 = 290 us (the gaps between compute's op and around the ranges; compute holds an op, so its gaps
    stay between ops). The step's own marker and the `generate` range around both steps name nothing. Host work
    1000 us (no sync): named 600 is the largest part; the headline names the range, not "unattributed"."""
    trace = load_trace(named_ranges_trace(tmp_path))
    analysis = analyze(trace)
    s = analysis.steps[0]
    assert (s.mechanism_ns["unattributed"], s.mechanism_ns["dispatch"], s.mechanism_ns["launch"]) == (
        930_000,
        60_000,
        10_000,
    )
    assert s.named_ns == 600_000 and [(r.name, r.ns) for r in s.named_ranges] == [("ensure_layer_N_weights", 600_000)]
    assert s.to_json()["named_ranges"] == [{"name": "ensure_layer_N_weights", "us": 600.0}]
    d = diagnose_trace(analysis, Context.of(trace)).steps[0]
    e = d.evidence
    assert (e.named_ns, e.unattributed_ns, e.data_ns, e.dispatch_ns, e.launch_ns) == (
        600_000,
        290_000,
        40_000,
        60_000,
        10_000,
    )
    assert (d.bound, d.host_bound_by) == ("host", "named")
    assert d.headline.startswith(
        "step 0 (decode#0): host-bound, by the code inside named ranges (ensure_layer_N_weights 0.600 ms; no op, "
        "frame or call recorded in them). The host works 1.000 ms for 0.020 ms of GPU work (50.00x)."
    )
    assert d.lines[0] == (
        "host work 1.000 ms = 1.000 wall - 0.000 sync wait: inside named ranges 0.600, unattributed 0.290, op "
        "dispatch 0.060, data loading 0.040, launch and runtime calls 0.010 (top range ensure_layer_N_weights 0.600; "
        "top op aten::mm 0.060)"
    )
    assert bound_words(d) == "host-bound, by named ranges"


def test_events_of_categories_probe_does_not_know_are_named_not_uncovered(tmp_path):
    """A hand-written CPU trace of its own categories (llama3-inference's `compute` and `kv` spans): MHA_L0 [0, 400],
    KV_PUSH_L0_B0 [400, 450], FFN_L0 [500, 800], MHA_L1 [1000, 1400], FFN_L1 [1500, 1800]. One whole-trace step of
    1800 us; the spans cover 800 + 600 + 50 = 1450 us of it, by family MHA_LN, FFN_LN, KV_PUSH_LN_BN: never "no
    event covers it"."""
    spans = [("compute", "MHA_L0", 0, 400), ("kv", "KV_PUSH_L0_B0", 400, 450), ("compute", "FFN_L0", 500, 800)]
    spans += [("compute", "MHA_L1", 1000, 1400), ("compute", "FFN_L1", 1500, 1800)]
    trace = load_trace(_trace(tmp_path, [(c, n, a, b, {}) for c, n, a, b in spans]))
    analysis = analyze(trace)
    (s,) = analysis.steps
    assert (s.wall_ns, s.mechanism_ns["unattributed"], s.named_ns) == (1_800_000, 1_800_000, 1_450_000)
    assert [(r.name, r.ns) for r in s.named_ranges] == [
        ("MHA_LN", 800_000),
        ("FFN_LN", 600_000),
        ("KV_PUSH_LN_BN", 50_000),
    ]
    d = diagnose_trace(analysis, Context.of(trace)).steps[0]
    assert (d.bound, d.host_bound_by, d.evidence.unattributed_ns) == ("cpu_only", "named", 350_000)
    assert d.headline == (
        "step 0 (window, trace): CPU only (no GPU side in the trace): the host's 1.800 ms is the step, most of it "
        "inside named ranges, with no op, frame or call in them (MHA_LN 0.800 ms, FFN_LN 0.600 ms)."
    )
    assert "no event covers" not in d.headline + " ".join(d.lines)


def test_a_range_that_holds_a_whole_step_names_none_of_it(tmp_path):
    """An Nsight trace of a CPU run holds ranges only: `decode#i` [100 i, 100 i + 90] holds nothing the profiler
    recorded but is the step's own marker, `generate` [0, 200] holds both steps: neither names time; the `forward`
    range inside each, [100 i + 10, 100 i + 80], does (70 of the step's 90 us)."""
    host = [("user_annotation", "generate", 0, 200, {})]
    for i in range(2):
        host += [
            ("user_annotation", f"decode#{i}", 100 * i, 100 * i + 90, {}),
            ("user_annotation", "forward", 100 * i + 10, 100 * i + 80, {}),
        ]
    analysis = analyze(load_trace(_trace(tmp_path, host)))
    assert [(s.named_ns, [r.name for r in s.named_ranges]) for s in analysis.steps] == [(70_000, ["forward"])] * 2


def test_a_range_of_no_duration_names_nothing(tmp_path):
    """A ProfilerStep [0, 100] whose only range besides it is an instant (a zero-length `mark`) and one op [10, 20]:
    no time is named, and the 90 us no op covers stay unattributed."""
    host = [("user_annotation", "ProfilerStep#0", 0, 100, {}), ("user_annotation", "mark", 50, 50, {})]
    host.append(("cpu_op", "aten::add", 10, 20, {}))
    (s,) = analyze(load_trace(_trace(tmp_path, host))).steps
    assert (s.named_ns, s.named_ranges, s.mechanism_ns["unattributed"]) == (0, (), 90_000)


def python_bound_trace(tmp_path: Path) -> Path:
    """A decode step of 100 us whose host is mostly Python, for 7 us of GPU work (test_report.py uses it too)."""
    return _trace(
        tmp_path,
        [
            ("user_annotation", "decode#0", 0, 100, {}),
            ("python_function", "loop.py(10): step", 0, 100, {}),
            ("python_function", "model.py(5): forward", 5, 95, {}),
            ("cpu_op", "aten::mm", 10, 20, {}),
            ("cuda_runtime", "cudaLaunchKernel", 12, 15, {"correlation": 1}),
            ("python_function", "util.py(7): slow", 30, 80, {}),
            ("cpu_op", "aten::add", 85, 90, {}),
            ("cuda_runtime", "cudaLaunchKernel", 86, 88, {"correlation": 2}),
        ],
        [("kernel", "gemm", 20, 25, {"correlation": 1}), ("kernel", "add", 90, 92, {"correlation": 2})],
    )


def test_host_bound_by_python_and_what_fixing_it_buys(tmp_path):
    """No sync; host work 100 us against 7 us of GPU work: host-bound, by Python (85 us: the loop frame 10, the
    forward frame 25, `slow` 50), dispatch 10 (mm 10 - 3, add 5 - 2), launches 5."""
    d = _diagnose(python_bound_trace(tmp_path))
    assert (d.bound, d.host_bound_by) == ("host", "python")
    e = d.evidence
    assert (e.python_ns, e.dispatch_ns, e.launch_ns, e.unattributed_ns) == (85_000, 10_000, 5_000, 0)
    got = [(w.change, round(w.predicted_step_ms, 6), round(w.saving_ms, 6)) for w in d.what_if]
    assert got == [
        # the frame's 50 us of self time: max(100 - 50, 7) = 50
        ("fix the top Python frame, util.py(7): slow", 0.05, 0.05),
        # no forward range, no nn.Module frames: every op and call (mm 10 + add 5) is captured, one launch (the
        # median launch call, 2.5 us) stays: max(100 - 15 + 2.5, 7) = 87.5
        ("capture the forward in a CUDA graph", 0.0875, 0.0125),
        ("fix the top op, aten::mm (x1)", 0.093, 0.007),
    ]
    # no attention kernel: no GPU work per sequence, so by the model no B grows the step and the batch it would
    # propose is only MAX_BATCH, the search's limit: withheld (it offered "batch 64 sequences" at no cost before)
    assert any(x.startswith("batch sequences: not offered: it needs work measured per sequence") for x in d.withheld)


def test_the_profilers_own_buffer_request_is_its_cost_not_the_frames(tmp_path):
    """Kineto records a CUPTI activity buffer request as an `overhead` event on a thread of its own (pid -1); it
    ran inside `slow` (30-80 us), 40-70, on the thread that needed the buffer. Those 30 us are the profiler's: out
    of the frame's self time (50 -> 20, so the forward's 25 is now the top frame), into profiler overhead, and off
    the host work the verdict weighs (100 -> 70 unprofiled). One inside no event of the thread is left out."""
    path = python_bound_trace(tmp_path)
    doc = json.loads(path.read_text())
    doc["traceEvents"] += [
        {"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0, "ts": 40, "dur": 30},
        {"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0, "ts": 200, "dur": 9},
    ]
    path.write_text(json.dumps(doc))
    s = analyze(load_trace(path)).steps[0]
    assert (s.mechanism_ns["profiler"], s.mechanism_ns["python"]) == (30_000, 55_000)
    assert [(f.frame, f.self_ns) for f in s.top_frames] == [
        ("model.py(5): forward", 25_000),
        ("util.py(7): slow", 20_000),
        ("loop.py(10): step", 10_000),
    ]
    d = _diagnose(path)
    e = d.evidence
    assert (e.profiler_recorded_ns, e.profiler_ns, e.unprofiled_host_ns, e.python_ns) == (
        30_000,
        30_000,
        70_000,
        55_000,
    )
    assert "profiler overhead 0.030" in d.lines[0]
    top = next(w for w in d.what_if if w.change.startswith("fix the top Python frame"))
    assert (top.change, round(top.saving_ms, 6)) == ("fix the top Python frame, model.py(5): forward", 0.025)


def test_a_queued_loops_measured_step_is_its_gpu_work_not_its_host_window(tmp_path):
    """Five GEMMs enqueued 10 us apart, each 1 ms on the GPU, back to back: each step's host window is 10 us, but
    an iteration costs 1 ms, which the summary's measured step says (as the verdict weighs it); the host window's
    median is said as what it is."""
    host = [("user_annotation", f"decode#{i}", 10 * i, 10 * i + 8, {}) for i in range(5)]
    host += [("cuda_runtime", "cudaLaunchKernel", 10 * i + 2, 10 * i + 6, {"correlation": i + 1}) for i in range(5)]
    gpu = [("kernel", "gemm", 20 + 1000 * i, 1020 + 1000 * i, {"correlation": i + 1}) for i in range(5)]
    s = analyze(load_trace(_trace(tmp_path, host, gpu))).summary
    assert (s.step_p50_us, s.measured_p50_us) == (8.0, 1000.0)


def test_the_profilers_work_beside_a_blocked_thread_stays_its_wait(tmp_path):
    """A 185 us cudaDeviceSynchronize (10-195) with kineto's Resource and Instrumentation events (pid -1) inside it,
    20-36: the thread was blocked on the device, whose work ends the wait, so the 16 us stay sync wait, not the
    profiler's cost on the thread; a buffer request inside an op (200-209) is still the profiler's."""
    path = _trace(
        tmp_path,
        [
            ("user_annotation", "decode#0", 0, 220, {}),
            ("cuda_runtime", "cudaLaunchKernel", 2, 8, {"correlation": 1}),
            ("cuda_runtime", "cudaDeviceSynchronize", 10, 195, {}),
            ("cpu_op", "aten::add", 198, 215, {}),
        ],
        [("kernel", "gemm", 9, 190, {"correlation": 1})],
    )
    doc = json.loads(path.read_text())
    doc["traceEvents"] += [
        {"ph": "X", "cat": "overhead", "name": name, "pid": -1, "tid": 0, "ts": ts, "dur": dur}
        for name, ts, dur in (("Resource", 20, 10), ("Instrumentation", 30, 6), ("Activity Buffer Request", 200, 9))
    ]
    path.write_text(json.dumps(doc))
    s = analyze(load_trace(path)).steps[0]
    assert (s.sync_wait_ns, s.mechanism_ns["profiler"]) == (185_000, 9_000)


@pytest.mark.parametrize("forwards, said", [(2, 2), (1, None)])
def test_a_step_that_calls_its_model_twice_says_it_may_hold_two_iterations(tmp_path, forwards, said):
    """OWLv2's ProfilerStep holds five detector forwards: the outermost module's calls in the step, counted on its
    thread (its layers, inside it, are not counted), say how many iterations it may hold."""
    host = [("user_annotation", "ProfilerStep#0", 0, 1000, {})]
    for i in range(forwards):
        a = 100 + 400 * i
        host += [("python_function", "nn.Module: Detector_0", a, a + 300, {})]
        host += [("python_function", f"nn.Module: Layer_{j}", a + 10 + 90 * j, a + 90 + 90 * j, {}) for j in range(3)]
        host += [("cuda_runtime", "cudaLaunchKernel", a + 20, a + 25, {"correlation": i + 1})]
    gpu = [("kernel", "gemm", 150 + 400 * i, 200 + 400 * i, {"correlation": i + 1}) for i in range(forwards)]
    trace = load_trace(_trace(tmp_path, host, gpu))
    analysis = analyze(trace)
    d = diagnose_trace(analysis, Context.of(trace, analysis=analysis)).steps[0]  # the facts need the analysis
    found = [c for c in d.caveats if "outermost module" in c]
    if said is None:
        assert found == []
    else:
        assert found == [
            "this step calls its outermost module Detector_0 2 times: if each call is an iteration, a figure per "
            "iteration is 1/2 of the step's"
        ]


def test_cpu_only(tmp_path):
    path = _trace(tmp_path, [("user_annotation", "decode#0", 0, 10, {}), ("cpu_op", "aten::mm", 1, 9, {})])
    d = _diagnose(path)
    assert (d.bound, d.host_bound_by, d.evidence.gpu_idle_before_ns) == ("cpu_only", "dispatch", None)
    assert d.headline.startswith("step 0 (decode#0): CPU only")


GLOO_WAIT = "<built-in method wait of pybind11_builtins.pybind11_object object at 0x7f4d068c8410>"


@pytest.mark.parametrize("where", ["gloo", "user", "nccl"])
def test_a_gloo_ranks_wait_in_a_collective_is_a_wait_not_python(tmp_path, where):
    """A CPU decode step of a Gloo job (decode#0, 1000 us): the forward's frame [0, 300] runs an op [10, 290]; then
    the collective's frame `distributed_c10d.py: all_reduce` [300, 1000] runs c10d's op [305, 320] and `work.wait()`
    [330, 990], a frame of function `wait` directly inside the collective: the rank blocks there until the last rank
    joins, 660 us of self time. Mechanism: sync_wait 660 us, not Python (the forward's frame 20 us and the
    collective's 25 us of self time); host work 1000 - 660 = 340 us; the wait frame's own time (what fixing it could
    save) is 0, so the top frame is the collective's (25 us), and the headline names the wait first. The same
    `wait` frame under the user's own frame (`loop.py: drain`), no collective around it, is the user's Python: its
    660 us stay Python and it is the top frame. So is NCCL's wait, which makes the stream wait (a
    cudaStreamWaitEvent in it, 10 us) and returns: a wait that makes a runtime call is not the host blocking (its
    blocking form blocks in a synchronizing call)."""
    parent = "loop.py(7): drain" if where == "user" else "torch/distributed/distributed_c10d.py(3155): all_reduce"
    host = [
        ("user_annotation", "decode#0", 0, 1000, {}),
        ("python_function", "nn.Module: M_0", 0, 300, {}),
        ("cpu_op", "aten::mm", 10, 290, {}),
        ("python_function", parent, 300, 1000, {}),
        ("cpu_op", "c10d::allreduce_", 305, 320, {}),
        ("python_function", GLOO_WAIT, 330, 990, {}),
    ]
    if where == "nccl":
        host.append(("cuda_runtime", "cudaStreamWaitEvent", 340, 350, {}))
    path = _trace(tmp_path, host)
    (s,) = analyze(load_trace(path)).steps
    events = oracle.read(path)
    lo = min(e.start for e in events) + s.start_ns
    assert s.mechanism_ns == oracle.step(events, lo, lo + s.wall_ns, s.pid, s.tid).mechanism  # the brute force's
    d = _diagnose(path)
    wait = "<built-in method wait of pybind11_builtins.pybind11_object object>"  # object addresses removed
    if where == "nccl":
        assert (s.mechanism_ns["sync_wait"], s.mechanism_ns["python"]) == (0, 20_000 + 25_000 + 650_000)
        return
    if where == "user":
        assert (s.mechanism_ns["sync_wait"], s.mechanism_ns["python"]) == (0, 20_000 + 25_000 + 660_000)
        assert d.headline.endswith("most of it python.") and f"top frame {wait} 0.660" in d.lines[0]
        return
    assert (s.mechanism_ns["sync_wait"], s.mechanism_ns["python"]) == (660_000, 20_000 + 25_000)
    assert s.purpose_ns["communication"] == 700_000  # its purpose stays the collective's
    assert [(f.frame, f.self_ns, f.own_ns) for f in s.top_frames][:1] == [(wait, 660_000, 0)]
    assert (d.bound, d.evidence.host_work_ns) == ("cpu_only", 340_000)
    assert d.headline == (
        "step 0 (decode#0): CPU only (no GPU side in the trace): the host's 1.000 ms is the step, most of it a wait: "
        f"0.660 ms sync wait in {wait} at {parent}; its 0.340 ms of host work is most of it inside ops."
    )
    assert f"top frame {parent} 0.025" in d.lines[0]
    assert all(wait not in w.change for w in d.what_if)  # no "fix the top Python frame" of a wait


def test_the_summary_is_the_median_step_of_each_kind():
    """The hand trace: one prefill, two decode steps. The median decode step is the lower of the two middle ones by
    measured time: decode#1 (50 us) before decode#0 (90 us)."""
    a = analyze(load_trace(DATA / "hand_decode.trace.json.gz"))
    d = diagnose_trace(a)
    assert d.median.step == "decode#1" and set(d.by_kind) == {"prefill", "decode"}
    assert d.by_kind["prefill"].step == "prefill"
    assert [x.step for x in d.steps] == ["prefill", "decode#0", "decode#1"]
    assert set(d.to_json()) == {"median", "by_kind", "mix"}


# --- every public trace, with the verdict its figures call for (the reasoning in docs/diagnosis.md) ------------

VERDICTS = {
    # one vLLM decode replayed from a graph: 2.25 ms of host work issues 10.72 ms of GPU work
    "rocm_vllm_decode_cudagraph": ("gpu", None, None),
    # SGLang's extend: 493 ms blocked in a copy behind a stream wait, no GPU op running; then 29 ms of host work
    # against 493 ms of its own GPU work
    "rocm_sglang_qwen3_8b_extend_step": ("external", "gpu", None),
    # HF Qwen forwards, batch 16 x 559: host and GPU within 4% of each other (balanced); the H100's host works 33.03
    # ms for 31.91 ms of GPU work, the MI300X's GPU 29.74 for 29.64 of host work
    "h100_hf_qwen1.5-0.5b_prefill_b16": ("host", None, "dispatch"),
    "mi300x_hf_qwen1.5-0.5b_prefill_b16": ("gpu", None, None),
    # vLLM eager on a B200: 87 ms of host work (49 of it Python) for 11.6 ms of GPU work
    "b200_eager": ("host", None, "python"),
    "cpu_only_small": ("cpu_only", None, "unattributed"),
}


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_public_trace_verdicts(name):
    trace = load_trace(shared_trace(f"public/{name}.trace.json.gz"))
    d = diagnose_trace(analyze(trace), Context.of(trace)).median
    assert (d.bound, d.then, d.host_bound_by) == VERDICTS[name]


@pytest.mark.parametrize("name", ["h100_hf_qwen1.5-0.5b_prefill_b16", "mi300x_hf_qwen1.5-0.5b_prefill_b16"])
def test_the_hf_forwards_are_balanced(name):
    assert diagnose_trace(analyze(load_trace(shared_trace(f"public/{name}.trace.json.gz")))).median.balanced


# --- the CLI: the answer first, and in --json --------------------------------------------------------------------


def _run(cli, *args):
    done = cli(*args)
    return done.returncode, done.stdout, done.stderr


def test_analyze_prints_the_answer_before_any_table(cli):
    code, out, err = _run(cli, "analyze", str(shared_trace("public/rocm_vllm_decode_cudagraph.trace.json.gz")))
    assert code == 0
    first = out.lstrip().splitlines()[0]
    assert first.startswith("step 0 (decode, execute_32_context_0") and "GPU-bound" in first
    assert out.index("GPU-bound") < out.index("GPU idle in each step")


def test_analyze_json_has_a_diagnosis_for_every_step_and_the_summary(cli):
    code, out, _ = _run(cli, "analyze", str(DATA / "hand_decode.trace.json.gz"), "--json")
    assert code == 0
    doc = json.loads(out)
    assert [s["diagnosis"]["bound"] for s in doc["steps"]] == ["host", "host", "host"]
    assert set(doc["diagnosis"]) == {"median", "by_kind", "mix"} and doc["diagnosis"]["median"]["step"] == "decode#1"
    assert set(doc["diagnosis"]["median"]) == {
        "step", "kind", "bound", "then", "host_bound_by", "balanced", "headline", "lines", "caveats", "evidence",
        "what_if", "withheld",
    }  # fmt: skip
    figures = {"change", "predicted_step_ms", "saving_ms", "saving_pct", "terms", "ceiling", "step_ms"}
    words = {"arithmetic", "assumption", "requires", "holds"}
    assert doc["diagnosis"]["median"]["what_if"]
    assert all(set(w) == figures | words for w in doc["diagnosis"]["median"]["what_if"])
    # each step: the verdict and its figures; the words once, for the median step and each kind's
    assert all(set(s["diagnosis"]) == {"bound", "then", "host_bound_by", "balanced", "evidence", "what_if"}
               for s in doc["steps"])  # fmt: skip
    assert all(set(w) == figures for s in doc["steps"] for w in s["diagnosis"]["what_if"])
    median = next(s for s in doc["steps"] if s["name"] == "decode#1")
    assert [w["change"] for w in median["diagnosis"]["what_if"]] == [
        w["change"] for w in doc["diagnosis"]["median"]["what_if"]
    ]
    assert doc["steps"][0]["roofline"] is None  # no model
    # no recorded shapes: each op's kernel time, and no figure guessed
    assert doc["op_roofline"] and all(o["model"] is None and o["flops"] is None for o in doc["op_roofline"])
    assert "record_shapes=True" in " ".join(doc["answer_notes"])


def test_analyze_json_roofline_with_a_model(cli):
    """The H100 HF forward with Qwen1.5-0.5B's config: the device from the trace's deviceProperties, the tokens
    from the flags (the trace has no engine marker), every roofline key, and the per-op table's GEMM."""
    path = shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz")
    model = "qwen1.5-0.5b"  # the shipped preset
    code, out, _ = _run(cli, "analyze", str(path), "--json", "--model", str(model), "--tokens", "8944", "--batch", "16")
    assert code == 0
    doc = json.loads(out)
    r = doc["steps"][0]["roofline"]
    for key in ("sequences", "tokens", "context_tokens", "bytes", "flops", "traffic_ms", "compute_ms",
                "predicted_gpu_ms", "measured_gpu_ms", "efficiency", "binding_term"):  # fmt: skip
        assert key in r, key
    assert (r["sequences"], r["tokens"], r["device"], r["binding_term"]) == (16, 8944, "H100-SXM", "compute")
    gemm = next(
        o for o in doc["op_roofline"] if o["op"] == "aten::mm" and o["shapes"] == "[(8944, 1024), (1024, 2816)]"
    )
    assert (gemm["flops"], gemm["bytes"], gemm["bound"]) == (51_581_550_592, 74_457_088, "compute")
    assert doc["steps"][0]["op_roofline"][0]["op"] == doc["op_roofline"][0]["op"]
    code, out, _ = _run(cli, "analyze", str(path), "--model", str(model), "--tokens", "8944", "--batch", "16")
    assert "roofline (" in out and "compute binds" in out and "ops by GPU time beside the roofline (H100-SXM" in out


# ---- the hole: a stretch of the step no work of the trace explains (issue 35, item 8) ---------------------------


def _hole_trace(tmp_path: Path, other_step: bool) -> Path:
    """A step whose host window is 0-20 us and whose one kernel runs 80-100 us: 60 us from the window's close to
    its first GPU op, with no GPU op of the trace in it. With `other_step`, a second step's host window (30-70 us)
    and its kernel (40-50 us) fill 40 of those 60 us: a hole of 20 us."""
    host = [
        ("user_annotation", "decode#0", 0, 20, {}),
        ("cuda_runtime", "cudaLaunchKernel", 2, 5, {"correlation": 1}),
    ]
    gpu = [("kernel", "gemm", 80, 100, {"correlation": 1})]
    if other_step:
        host += [
            ("user_annotation", "decode#1", 30, 70, {}),
            ("cuda_runtime", "cudaLaunchKernel", 31, 33, {"correlation": 2}),
        ]
        gpu.append(("kernel", "gemm", 40, 50, {"correlation": 2}))
    return _trace(tmp_path, host, gpu)


def test_a_hole_with_no_work_of_the_trace_is_named_in_the_headline(tmp_path):
    """Host window 20 us, GPU busy 20 us: the measured step is 20 us, and the 60 us hole after the window is three
    times that (HOLE_SHARE 0.5 of it is 10 us): the headline and the verdict's few words name it."""
    d = _diagnose(_hole_trace(tmp_path, other_step=False))
    assert d.evidence.hole_ns == 60_000 and d.evidence.measured_ns == 20_000 and d.evidence.hole_named
    assert "Beside it, a hole of 0.060 ms (300% of the measured step)" in d.headline
    assert bound_words(d).endswith(", beside a 0.060 ms hole")


def test_a_stretch_another_step_works_in_is_no_hole(tmp_path):
    """The second step's host window (30-70 us) covers 40 of the 60 us: 20 us of hole, still past 10 us (named)."""
    d = _diagnose(_hole_trace(tmp_path, other_step=True))
    assert d.evidence.hole_ns == 20_000 and d.evidence.hole_named


def test_an_old_report_without_the_hole_reads_back():
    d = _diagnose(shared_trace("public/rocm_vllm_decode_cudagraph.trace.json.gz"))
    doc = d.evidence.to_json()
    assert doc["hole_us"] == pytest.approx(5962, abs=1)  # 8.371 ms to the first GPU op, less the 2.409 ms window
    del doc["hole_us"]
    assert Evidence.from_json(doc).hole_ns == 0


def test_gpt_oss_names_its_125_ms_hole(cli):
    """vLLM's gpt-oss mixed step: its first GPU op starts 124.878 ms after its 26.353 ms host window closes, with no
    work of the trace in between; the GPU's 156.086 ms is the measured step, and the hole 80% of it."""
    proc = cli("analyze", shared_trace("engines", "vllm_gptoss_mixed_x4_tiled.json.gz"), "--json")
    median = json.loads(proc.stdout)["diagnosis"]["median"]
    assert median["evidence"]["hole_us"] == pytest.approx(124_878, abs=1)
    assert "Beside it, a hole of 124.878 ms (80% of the measured step)" in median["headline"]
