"""Any trace, any engine: steps found in real vLLM / SGLang / HF traces, the GPU window, Python frames, user parts,
kernels by name and category, and the CLI's contract. Figures come from a brute-force oracle (tests/oracle.py,
plain Python from the definitions), from hand arithmetic, or from the trace's own text, never from the code.
"""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.kernels import DEFAULT_RULES
from probe.analysis.ledger.steps import MARKERS, compile_steps_regex
from probe.analysis.ledger.types import AnalyzeOptions
from probe.analysis.trace import load_trace
from probe.errors import ProbeError
from tests import oracle
from tests.conftest import DATA, run_probe, shared_trace

REAL = [  # the public traces of ../shared/traces/public (recorded by other projects)
    "rocm_vllm_decode_cudagraph",
    "rocm_sglang_qwen3_8b_extend_step",
    "b200_eager",
    "cuda_alexnet",
    "h100_hf_qwen1.5-0.5b_prefill_b16",
    "mi300x_hf_qwen1.5-0.5b_prefill_b16",
    "cuda_train_ns_resolution_5steps",
    "cpu_only_small",
]


def _public(name: str) -> Path:
    return shared_trace(f"public/{name}.trace.json.gz")


def _check_against_oracle(path: Path, options: AnalyzeOptions | None = None, user=()) -> None:
    trace = load_trace(path)
    analysis = analyze(trace, options)
    events = oracle.read(path)
    t0 = min(e.start for e in events)
    for s in analysis.steps:
        lo = t0 + s.start_ns
        want = oracle.step(events, lo, lo + s.wall_ns, s.pid, s.tid, user)
        got = (
            s.kernels,
            s.gpu_ops,
            s.launches,
            s.graph_launches,
            s.gpu_window_ns,
            s.gpu_busy_ns,
            s.idle_host_wait_ns,
            s.idle_kernel_wait_ns,
            s.idle_other_ns,
        )
        assert got == (
            want.kernels,
            want.gpu_ops,
            want.launches,
            want.graph_launches,
            want.window,
            want.busy,
            want.idle_host,
            want.idle_kernel,
            want.idle_other,
        ), s.name
        assert s.purpose_ns == want.purpose, s.name
        assert s.mechanism_ns == want.mechanism, s.name
        top = sorted(want.frames.items(), key=lambda kv: (-kv[1], kv[0]))[: len(s.top_frames)]
        assert [(f.frame, f.self_ns) for f in s.top_frames] == top, s.name


@pytest.mark.parametrize("name", REAL)
def test_every_real_trace_matches_the_oracle(name):
    """Steps, launches, kernels, the GPU window with its busy and idle split, every host part and the Python
    frames, step by step, on every real trace we have."""
    _check_against_oracle(_public(name))


def test_user_parts_carve_their_time_out_of_the_partition():
    path = _public("rocm_vllm_decode_cudagraph")
    user = (("inputs", r"_prepare_inputs|_update_states"), ("metadata", r"_build_attention_metadata"))
    options = AnalyzeOptions.parse(parts=[f"{n}={r}" for n, r in user])
    _check_against_oracle(path, options, user)
    (step,) = analyze(load_trace(path), options).steps
    assert step.purpose_ns["inputs"] > 0 and step.purpose_ns["metadata"] > 0
    assert step.to_json()["purpose_us"]["inputs"] == step.purpose_ns["inputs"] / 1000
    plain = analyze(load_trace(path)).steps[0]
    # the user's parts come out of the rest of the model; the mechanism partition does not move
    assert step.purpose_ns["model"] < plain.purpose_ns["model"] and step.wall_ns == plain.wall_ns
    assert step.mechanism_ns == plain.mechanism_ns


# --- steps in any trace ---------------------------------------------------------------------------------


def test_real_engine_markers_find_the_iteration():
    vllm = analyze(load_trace(_public("rocm_vllm_decode_cudagraph")))
    assert vllm.step_rule.startswith("engine markers: vLLM execute_*")
    # execute_32_context_0(...)_generation_32(...): 32 requests decoding, none in prefill
    assert [(s.kind, s.graph_launches, s.kernels) for s in vllm.steps] == [("decode", 1, 425)]
    b200 = analyze(load_trace(_public("b200_eager")))
    # execute_context_1(888_788544)_generation_0(0): one prompt, nothing decoding. The trace's gpu_user_annotation
    # copy of the same range is on the GPU timeline and is never a step.
    assert [(s.kind, s.launches) for s in b200.steps] == [("prefill", 768)]


def test_nested_markers_are_one_step_the_outermost():
    path = _public("rocm_sglang_qwen3_8b_extend_step")
    a = analyze(load_trace(path))
    (step,) = a.steps  # step[EXTEND bs=15 toks=15360] sits inside the execute_ range: one iteration, one step
    assert step.name.startswith("execute_15360_context_15") and step.kind == "prefill"
    assert "SGLang step" in a.step_rule or "vLLM execute_*" in a.step_rule
    # All 527 launches start inside the execute_ range, 521 of them inside the inner step[...].
    assert step.launches == 527
    inner = analyze(load_trace(path), AnalyzeOptions.parse(steps=r"step\[.*\]")).steps
    assert [(s.name, s.launches, s.kind) for s in inner] == [("step[EXTEND bs=15 toks=15360]", 521, "prefill")]


def _repeat(path: Path, n: int, out: Path) -> Path:
    """A real single-step trace repeated n times: each copy shifted past the last one's end, its correlation,
    External id and flow ids offset, so the copies never join each other's GPU work."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    starts = [Decimal(e["ts"]) for e in events if "ts" in e]
    ends = [Decimal(e["ts"]) + Decimal(e.get("dur", 0)) for e in events if "ts" in e]
    span = max(ends) - min(starts) + 1000  # plus 1 ms between copies
    ids = [
        int(v)
        for e in events
        for v in [(e.get("args") or {}).get("correlation"), e.get("id")]
        if isinstance(v, int | Decimal)
    ]
    stride = max(ids, default=0) + 1
    copies = []
    for k in range(n):
        for e in events:
            c = dict(e, args=dict(e["args"])) if isinstance(e.get("args"), dict) else dict(e)
            if "ts" in c:
                c["ts"] = Decimal(c["ts"]) + k * span
            args = c.get("args") or {}
            for key in ("correlation", "External id"):
                if isinstance(args.get(key), int):
                    args[key] += k * stride
            if isinstance(c.get("id"), int):
                c["id"] += k * stride
            copies.append(c)
    doc["traceEvents"] = copies
    target = out / f"{path.name.removesuffix('.trace.json.gz')}_x{n}.json"
    target.write_text(_dump(doc))
    return target


def _dump(obj) -> str:
    """JSON with every Decimal written as its exact digits (json.dumps would make it a string or a float)."""
    if isinstance(obj, Decimal):
        return format(obj, "f")
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(_dump(v) for v in obj) + "]"
    return json.dumps(obj)


@pytest.mark.parametrize(
    "name", ["rocm_vllm_decode_cudagraph", "rocm_sglang_qwen3_8b_extend_step", "h100_hf_qwen1.5-0.5b_prefill_b16"]
)
def test_a_real_step_repeated_n_times_is_n_steps(tmp_path, name):
    single = analyze(load_trace(_public(name))).steps[0]
    repeated = analyze(load_trace(_repeat(_public(name), 5, tmp_path)))
    assert len(repeated.steps) == 5
    for s in repeated.steps:
        assert (
            s.kind,
            s.wall_ns,
            s.launches,
            s.graph_launches,
            s.kernels,
            s.gpu_window_ns,
            s.gpu_busy_ns,
            s.idle_host_wait_ns,
            s.purpose_ns,
            s.mechanism_ns,
            s.kernels_by_category,
        ) == (
            single.kind,
            single.wall_ns,
            single.launches,
            single.graph_launches,
            single.kernels,
            single.gpu_window_ns,
            single.gpu_busy_ns,
            single.idle_host_wait_ns,
            single.purpose_ns,
            single.mechanism_ns,
            single.kernels_by_category,
        )


def test_the_gpu_window_keeps_busy_within_it_when_the_gpu_runs_behind():
    """Training: each ProfilerStep's kernels run long after its host window closed (its busy was 269% of the
    wall). In the GPU window, busy never exceeds the window."""
    a = analyze(load_trace(_public("cuda_train_ns_resolution_5steps")))
    assert any(s.gpu_busy_ns > s.wall_ns for s in a.steps)  # the case that needs the window
    assert all(0 < s.busy_fraction <= 1 for s in a.steps) and a.summary.busy_fraction <= 1


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("execute_new_3_cached_0", "prefill"),
        ("execute_new_0_cached_32", "decode"),
        ("execute_new_2_cached_30", "mixed"),
        ("execute_context_0(0)_generation_32(32)", "decode"),
        ("execute_context_1(888_788544)_generation_0(0)", "prefill"),
        ("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)", "decode"),
        ("step[EXTEND bs=15 toks=15360]", "prefill"),
        ("step[DECODE bs=32]", "decode"),
        ("step[MIXED bs=4]", "mixed"),
        ("step[IDLE bs=0]", "idle"),
        ("step[DECODE bs=8 g_sq=8 g_sk=900]", "decode"),
        ("scheduler.run_batch", "step"),
        ("[Executor] _forward_step 12: 0 ctx reqs, 8 gen reqs", "decode"),
    ],
)
def test_every_documented_marker_and_its_kind(tmp_path, name, kind):
    """Each marker in MARKERS, as its engine writes it (from the engines' source; tests/data has three of them),
    becomes a step of the documented kind."""
    assert any(m.pattern.fullmatch(name) for m in MARKERS)
    events = [
        {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    a = analyze(load_trace(path))
    assert [(s.name, s.kind) for s in a.steps] == [(name, kind)] and a.step_rule.startswith("engine markers")


def test_steps_regex_comes_first_and_a_miss_falls_back_with_a_warning(tmp_path):
    hand = DATA / "hand_decode.trace.json.gz"
    a = analyze(load_trace(hand), AnalyzeOptions.parse(steps="forward"))
    assert a.step_rule == "--steps" and [(s.name, s.wall_us) for s in a.steps] == [("forward", 79.0), ("forward", 59.0)]
    missed = analyze(load_trace(hand), AnalyzeOptions.parse(steps="no-such-range"))
    assert missed.step_rule == "probe ranges" and len(missed.steps) == 3
    assert any("matched no range" in w for w in missed.warnings)
    with pytest.raises(ProbeError, match="not a regular expression"):
        compile_steps_regex("(")


# --- Python frames by hand ----------------------------------------------------------------------------------


def test_python_frames_innermost_self_time_by_hand(tmp_path):
    """One step [0, 100] us: frame A [0, 90] holds B [10, 60] (which holds the op [20, 30] and C at 0x7f1 [40, 50])
    and C at 0x7f2 [70, 80]. Ops cover 10 us. Python: A's own 10+10+10 = 30, B's 50 - 10 - 10 = 30, C's 10 + 10
    (both addresses aggregate) = 20: 80 us. Unattributed: [90, 100] = 10 us."""

    def ev(cat, name, a, b):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": a, "dur": b - a}

    events = [
        ev("user_annotation", "decode#0", 0, 100),
        ev("python_function", "a.py(1): A", 0, 90),
        ev("python_function", "b.py(2): B", 10, 60),
        ev("cpu_op", "aten::mm", 20, 30),
        ev("python_function", "<built-in method C of X object at 0x7f1>", 40, 50),
        ev("python_function", "<built-in method C of X object at 0x7f2>", 70, 80),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    a = analyze(load_trace(path))
    (s,) = a.steps
    assert (s.mechanism_ns["dispatch"], s.mechanism_ns["python"], s.mechanism_ns["unattributed"]) == (
        10_000,
        80_000,
        10_000,
    )
    assert [(f.frame, f.self_ns, f.count) for f in s.top_frames] == [
        ("a.py(1): A", 30_000, 1),
        ("b.py(2): B", 30_000, 1),
        ("<built-in method C of X object>", 20_000, 2),
    ]
    assert [f.to_json() for f in a.python_frames][2] == {
        "frame": "<built-in method C of X object>",
        "self_us": 20.0,
        "count": 2,
        "waited_us": 0.0,
    }


def test_an_event_that_outlives_its_parent_keeps_its_time(tmp_path):
    """Frame A [0, 10] us; op B [5, 15] starts in A and outlives it; frame C [12, 20] starts in B after A ended
    and outlives B. Each stretch goes to the latest-started event still open: A [0, 5], B [5, 12], C [12, 20];
    [20, 30] nothing. Python 5 + 8, dispatch 7, unattributed 10, and B's split is one call."""

    def ev(cat, name, a, b):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": a, "dur": b - a}

    events = [
        ev("user_annotation", "decode#0", 0, 30),
        ev("python_function", "a.py(1): A", 0, 10),
        ev("cpu_op", "aten::B", 5, 15),
        ev("python_function", "c.py(3): C", 12, 20),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    (s,) = analyze(load_trace(path)).steps
    assert (s.mechanism_ns["python"], s.mechanism_ns["dispatch"], s.mechanism_ns["unattributed"]) == (
        13_000,
        7_000,
        10_000,
    )
    assert [(o.name, o.self_ns, o.calls) for o in s.top_ops] == [("aten::B", 7_000, 1)]
    assert [(f.frame, f.self_ns) for f in s.top_frames] == [("c.py(3): C", 8_000), ("a.py(1): A", 5_000)]


# --- kernels by category ---------------------------------------------------------------------------------


def test_every_real_kernel_name_gets_its_hand_assigned_category():
    """tests/data/kernel_categories.json: every kernel name of every real trace, with the category a person
    assigned it after reading the name (see tests/data/PROVENANCE.md)."""
    expected = json.loads((DATA / "kernel_categories.json").read_text())
    assert len(expected) > 190
    wrong = {
        name: (DEFAULT_RULES.category(name), want)
        for name, want in expected.items()
        if DEFAULT_RULES.category(name) != want
    }
    assert wrong == {}


def test_kernel_table_figures_from_the_trace_text():
    """The vLLM trace's attention kernels, summed straight from the JSON."""
    doc = json.loads(gzip.decompress(_public("rocm_vllm_decode_cudagraph").read_bytes()), parse_float=Decimal)
    durs = sorted(
        int(Decimal(e["dur"]) * 1000)
        for e in doc["traceEvents"]
        if e.get("cat") == "kernel" and e["name"] == "kernel_unified_attention_3d"
    )
    a = analyze(load_trace(_public("rocm_vllm_decode_cudagraph")))
    (k,) = [k for k in a.kernels if k.name == "kernel_unified_attention_3d"]
    assert (k.category, k.count, k.total_ns, k.max_ns) == ("attention", len(durs), sum(durs), durs[-1])
    assert k.p50_ns == (durs[5] + durs[6]) / 2 and len(durs) == 12
    assert k.share_of_busy == sum(durs) / a.totals.gpu_busy_ns
    assert a.kernel_categories["attention"] == sum(s.kernels_by_category.get("attention", 0) for s in a.steps)


def test_a_user_kernel_rule_comes_before_the_table():
    a = analyze(
        load_trace(_public("rocm_vllm_decode_cudagraph")),
        AnalyzeOptions.parse(kernel_categories=["moe_gemm=_matmul_ogs"]),
    )
    assert {k.category for k in a.kernels if k.name.startswith("_matmul_ogs")} == {"moe_gemm"}
    with pytest.raises(ProbeError, match="CATEGORY=REGEX"):
        AnalyzeOptions.parse(kernel_categories=["nonsense"])


# --- the CLI ---------------------------------------------------------------------------------------------


def test_analyze_json_contract():
    result = run_probe(
        "analyze", str(_public("rocm_vllm_decode_cudagraph")), "--json", "--part", "inputs=_prepare_inputs"
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["step_rule"].startswith("engine markers")
    assert set(out["kernels"][0]) == {
        "name",
        "short_name",
        "category",
        "count",
        "total_us",
        "mean_us",
        "p50_us",
        "max_us",
        "share_of_busy",
    }
    assert set(out["python_frames"][0]) == {"frame", "self_us", "count", "waited_us"}
    assert isinstance(out["kernel_categories"]["gemm"], float)
    step = out["steps"][0]
    # the user's part leads the purpose partition; both partitions add up to the wall (float us, so to 1e-9)
    assert list(step["purpose_us"])[0] == "inputs" and step["purpose_us"]["inputs"] > 0
    for partition in ("purpose_us", "mechanism_us"):
        assert sum(step[partition].values()) == pytest.approx(step["wall_us"], abs=1e-9)
    assert step["sync_sites"][0]["call"] == "<built-in method synchronize of torch.Event object>"
    assert 0 <= step["busy_fraction"] <= 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--steps", "("], "--steps '(': not a regular expression"),
        (["--part", "x=("], "--part x=(: not a regular expression"),
        (["--part", "model=aten"], "--part model: clashes with a built-in part"),
        (["--part", "dispatch=aten"], "--part dispatch: clashes with a built-in part"),
        (["--part", "wall=aten"], "--part wall: clashes with a built-in part or field"),
        (["--part", "noequals"], "--part 'noequals': use NAME=REGEX"),
        (["--kernel-category", "x=["], "--kernel-category x=[: not a regular expression"),
        (["--step", "²"], "no step '²' in this trace"),
    ],
)
def test_bad_flags_are_one_line_errors(flags, message):
    result = run_probe("analyze", str(DATA / "hand_decode.trace.json.gz"), *flags)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_a_steps_regex_that_matches_nothing_warns_and_falls_back():
    result = run_probe("analyze", str(DATA / "hand_decode.trace.json.gz"), "--steps", "nothing-here")
    assert result.returncode == 0, result.stderr
    # the warning goes to stderr, printed before the tables; the tables say which rule found the steps instead
    assert "matched no range" in result.stderr and "found by probe ranges" in re.sub(r"\s+", " ", result.stdout)


# --- kernels in probe compare ----------------------------------------------------------------------------


def _with_extra_kernel(path: Path, out: Path, name: str) -> Path:
    """The trace plus one more launch of kernel `name` inside its step: a hipLaunchKernel call on the step's
    thread and the kernel it launched, on a new correlation id."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    events = doc["traceEvents"]
    step = next(e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_"))
    kernel = next(e for e in events if e.get("cat") == "kernel" and e["name"] == name)
    corr = 1 + max(int(e["args"]["correlation"]) for e in events if "correlation" in (e.get("args") or {}))
    ts = Decimal(step["ts"]) + Decimal("10")
    events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipLaunchKernel",
            "pid": step["pid"],
            "tid": step["tid"],
            "ts": ts,
            "dur": Decimal("3"),
            "args": {"correlation": corr},
        }
    )
    events.append(dict(kernel, ts=Decimal(kernel["ts"]) + Decimal("1"), args={"correlation": corr}))
    target = out / "more.json"
    target.write_text(_dump(doc))
    return target


def test_compare_alerts_on_a_kernel_that_grows_and_names_it(tmp_path):
    base = _public("rocm_vllm_decode_cudagraph")
    name = (
        "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, "
        "c10::BFloat16 const*, int, long, long, long, int, int, int)"
    )
    current = _with_extra_kernel(base, tmp_path, name)
    result = run_probe("compare", str(base), str(current), "--counts-only", "--json")
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    kernel_alerts = [a for a in doc["alerts"] if a["metric"] == "kernels"]
    assert len(kernel_alerts) == 1
    assert "kernels/step 425 -> 426 (+1)" in kernel_alerts[0]["message"]
    assert "vllm::rotary_embedding_kernel 24 -> 25 (+1)" in kernel_alerts[0]["message"]  # the short name
    # every kernel that moved, by short name (kernels.short_name)
    assert [(c["key"], c["metric"], c["name"], c["baseline"], c["current"], c["change"]) for c in doc["changes"]] == [
        ("decode", "kernels", "vllm::rotary_embedding_kernel", 24.0, 25.0, "grown")
    ]


# --- the unprofiled estimate -----------------------------------------------------------------------------


def test_unprofiled_estimate_is_wall_less_the_profilers_cost_per_event():
    """decode#0 of the hand trace records, on its thread: 4 cpu_ops (linear, addmm, copy_, argmax), 5 runtime
    calls, and 4 ranges besides its own (forward, cache.update#0, sample, sync; decode#0 itself makes 5)."""
    from probe.analysis.records.sidecar import EventCost

    cost = EventCost(op_ns=100.0, range_ns=1_000.0)
    step = analyze(load_trace(DATA / "hand_decode.trace.json.gz"), AnalyzeOptions(event_cost=cost)).steps[1]
    assert (step.host_events, step.host_ranges) == (9, 5)
    assert step.unprofiled_estimate_ns == 90_000 - 9 * 100 - 5 * 1_000
    result = run_probe("analyze", str(DATA / "hand_decode.trace.json.gz"), "--event-cost-ns", "100,1000", "--json")
    assert json.loads(result.stdout)["steps"][1]["unprofiled_estimate_us"] == 84.1
    bad = run_probe("analyze", str(DATA / "hand_decode.trace.json.gz"), "--event-cost-ns", "lots")
    assert bad.returncode == 2 and "use OP,RANGE" in bad.stderr


def test_a_graph_launch_without_its_kernels_is_said(tmp_path):
    """A graph replayed while the profiler could not see it: the step's GPU side would read as idle. decode#0 of
    the hand trace launches gemv directly and replays a graph of two kernels; drop those two."""
    assert not any("launched a graph" in w for w in analyze(load_trace(DATA / "hand_decode.trace.json.gz")).warnings)
    doc = json.loads(gzip.decompress((DATA / "hand_decode.trace.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("graph_kernel")]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    a = analyze(load_trace(path))
    assert (a.steps[1].graph_launches, a.steps[1].kernels) == (1, 1)  # gemv only
    (warning,) = [w for w in a.warnings if "launched a graph" in w]
    assert warning.startswith("1 step(s) launched a graph but hold none of its kernels (decode#0)")


def test_launches_with_no_gpu_activity_at_all_is_said(tmp_path):
    """A real GPU trace with its device side dropped (a profile without ProfilerActivity.CUDA looks like this):
    every GPU figure would read as zero, so the analysis says why."""
    real = _public("b200_eager")
    assert not any("no GPU activity" in w for w in analyze(load_trace(real)).warnings)
    doc = json.loads(gzip.decompress(real.read_bytes()))
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset"}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in gpu_cats]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    a = analyze(load_trace(path))
    assert a.totals.gpu_ops == 0 and a.totals.launches > 0
    (warning,) = [w for w in a.warnings if "no GPU activity" in w]
    assert warning.startswith(f"the trace holds {a.totals.launches + a.totals.graph_launches} launch calls")
