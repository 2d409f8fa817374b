"""The step diagnosis (probe.analysis.diagnosis.verdict): hand-built traces where each verdict and each what-if has a
known
answer, worked out beside it; then every public trace, each with the verdict its figures call for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probe.analysis.diagnosis.evidence import Context
from probe.analysis.diagnosis.verdict import diagnose_trace
from probe.analysis.ledger.build import analyze
from probe.analysis.trace import load_trace

PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "traces" / "public"
DATA = Path(__file__).parent / "data"


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
    # GPU's 88, so it buys nothing and is not offered. Removing the sync buys 100 - 88 = 12 us.
    assert [(w.change.split(" in ")[0], round(w.predicted_step_ms, 6), round(w.saving_ms, 6)) for w in d.what_if] == [
        ("remove the sync", 0.088, 0.012)
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
    # host to device, as the GPU copy's name says (the call's args say nothing)
    assert (site.copy_bytes, site.copy_kind) == (None, "HtoD")
    assert "in cudaMemcpy (a host to device copy) at" in d.headline
    assert "0.002 ms after a stream-wait-event call" in d.lines[0]


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
        # B = 100 // 7 = 14: GPU 98 us at B = 14, still under the host's 100: the step stays 100 us for 14 tokens,
        # 100 / 14 = 7.142857 us a token, 92.857143 us saved a token.
        ("batch 14 sequences", 0.1, 0.092857),
        # the frame's 50 us of self time: max(100 - 50, 7) = 50
        ("fix the top Python frame, util.py(7): slow", 0.05, 0.05),
        # no forward range, no nn.Module frames: every op and call (mm 10 + add 5) is captured, one launch (the
        # median launch call, 2.5 us) stays: max(100 - 15 + 2.5, 7) = 87.5
        ("capture the forward in a CUDA graph", 0.0875, 0.0125),
        ("fix the top op, aten::mm (x1)", 0.093, 0.007),
    ]


def test_cpu_only(tmp_path):
    path = _trace(tmp_path, [("user_annotation", "decode#0", 0, 10, {}), ("cpu_op", "aten::mm", 1, 9, {})])
    d = _diagnose(path)
    assert (d.bound, d.host_bound_by, d.evidence.gpu_idle_before_ns) == ("cpu_only", "dispatch", None)
    assert d.headline.startswith("step 0 (decode#0): CPU only")


def test_the_summary_is_the_median_step_of_each_kind():
    """The hand trace: one prefill, two decode steps. The median decode step is the lower of the two middle ones by
    measured time: decode#1 (50 us) before decode#0 (90 us)."""
    a = analyze(load_trace(DATA / "hand_decode.trace.json.gz"))
    d = diagnose_trace(a)
    assert d.median.step == "decode#1" and set(d.by_kind) == {"prefill", "decode"}
    assert d.by_kind["prefill"].step == "prefill"
    assert [x.step for x in d.steps] == ["prefill", "decode#0", "decode#1"]
    assert set(d.to_json()) == {"median", "by_kind"}


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


@pytest.mark.skipif(not PUBLIC.is_dir(), reason="../shared/traces/public is not here")
@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_public_trace_verdicts(name):
    trace = load_trace(PUBLIC / f"{name}.trace.json.gz")
    d = diagnose_trace(analyze(trace), Context.of(trace)).median
    assert (d.bound, d.then, d.host_bound_by) == VERDICTS[name]


@pytest.mark.skipif(not PUBLIC.is_dir(), reason="../shared/traces/public is not here")
def test_the_hf_forwards_are_balanced():
    for name in ("h100_hf_qwen1.5-0.5b_prefill_b16", "mi300x_hf_qwen1.5-0.5b_prefill_b16"):
        assert diagnose_trace(analyze(load_trace(PUBLIC / f"{name}.trace.json.gz"))).median.balanced, name


# --- the CLI: the answer first, and in --json --------------------------------------------------------------------


def _run(cli, *args):
    done = cli(*args)
    return done.returncode, done.stdout, done.stderr


def test_analyze_prints_the_answer_before_any_table(cli):
    code, out, err = _run(cli, "analyze", str(DATA / "rocm_vllm_decode_cudagraph.trace.json.gz"))
    assert code == 0
    first = out.lstrip().splitlines()[0]
    assert first.startswith("step 0 (decode, execute_32_context_0") and "GPU-bound" in first
    assert out.index("GPU-bound") < out.index("GPU idle in each step")


def test_analyze_json_has_a_diagnosis_for_every_step_and_the_summary(cli):
    code, out, _ = _run(cli, "analyze", str(DATA / "hand_decode.trace.json.gz"), "--json")
    assert code == 0
    doc = json.loads(out)
    assert [s["diagnosis"]["bound"] for s in doc["steps"]] == ["host", "host", "host"]
    assert set(doc["diagnosis"]) == {"median", "by_kind"} and doc["diagnosis"]["median"]["step"] == "decode#1"
    assert set(doc["diagnosis"]["median"]) == {
        "step", "kind", "bound", "then", "host_bound_by", "balanced", "headline", "lines", "caveats", "evidence",
        "what_if",
    }  # fmt: skip
    assert all(set(w) == {"change", "predicted_step_ms", "saving_ms", "saving_pct", "arithmetic", "assumption"}
               for s in doc["steps"] for w in s["diagnosis"]["what_if"])  # fmt: skip
    assert doc["steps"][0]["roofline"] is None  # no model
    # no recorded shapes: each op's kernel time, and no figure guessed
    assert doc["op_roofline"] and all(o["model"] is None and o["flops"] is None for o in doc["op_roofline"])
    assert "record_shapes=True" in " ".join(doc["answer_notes"])


def test_analyze_json_roofline_with_a_model(cli):
    """The H100 HF forward with Qwen1.5-0.5B's config: the device from the trace's deviceProperties, the tokens
    from the flags (the trace has no engine marker), every roofline key, and the per-op table's GEMM."""
    path = DATA / "h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz"
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
