"""Hostile numbers in a trace and on the command line (issue 37, third pass): digits `int` refuses, counts and shapes
no device could hold, steps with nothing in them, clocks that disagree, event costs that are not measurements, and
what the docstrings promise. Every input is an answer or one line; never a traceback, inf, a negative time or a share
past 100%."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe.analysis.diagnosis.answer import answer
from probe.analysis.diagnosis.evidence import Context
from probe.analysis.diagnosis.verdict import diagnose_trace
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.steps import STEP, read_marker
from probe.analysis.roofline.ops import cost_of
from probe.analysis.trace import Shapes, load_trace
from probe.counts import MAX_COUNT, count
from tests.conftest import run_probe
from tests.test_diagnosis import _trace
from tests.test_hostile_cli import one_line, with_sidecar
from tests.test_results import SIDECAR_DOC

QWEN = "qwen1.5-0.5b"
NINES = "9" * 5000  # past the 4,300 digits int() takes


def decode_steps(tmp_path: Path, names: list[str], gpu_at=(10, 60), launch_at=(4, 9), host_extra=()) -> Path:
    """Steps named `names`, 100 us apart, each a mm launching one 'gemm' kernel at `gpu_at` (us from the step's
    start; the launch call at `launch_at`)."""
    host, gpu = [], []
    for i, name in enumerate(names):
        t = 1000 + 200 * i
        host += [
            ("user_annotation", name, t, t + 100, {}),
            ("cpu_op", "aten::mm", t + 2, t + 12, {}),
            ("cuda_runtime", "cudaLaunchKernel", t + launch_at[0], t + launch_at[1], {"correlation": i + 1}),
        ]
        gpu.append(("kernel", "gemm", t + gpu_at[0], t + gpu_at[1], {"correlation": i + 1}))
    return _trace(tmp_path, host + list(host_extra), gpu)


def no_traceback(result) -> None:
    assert "Traceback" not in result.stderr and result.returncode == 0, result.stderr


# ---- 2. numbers a parser's \d lets through ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["execute_context_1(²)_generation_1(1)", f"step[DECODE bs={NINES}]", "decode#²", f"execute_new_{NINES}_cached_0"],
)
def test_digits_int_refuses_are_an_answer_in_analyze_and_compare(tmp_path, name):
    path = decode_steps(tmp_path, [name] * 3)
    result = run_probe("analyze", str(path))
    no_traceback(result)
    if NINES in name:  # a count past MAX_COUNT: the steps stay, their counts go, and one line says so
        (warning,) = [line for line in result.stderr.splitlines() if "cannot be true" in line]
        assert f"a count over {MAX_COUNT:,}" in warning and len(warning) < 400
    # compare reads the same steps: the same trace twice is no regression (exit 0, not 1)
    no_traceback(run_probe("compare", str(path), str(path)))


def test_one_rule_reads_every_count():
    assert [count(t) for t in ("0", "42", str(MAX_COUNT), str(MAX_COUNT + 1), "²", "٣", "", "-1", NINES)] == [
        0,
        42,
        MAX_COUNT,
        None,
        None,
        None,
        None,
        None,
        None,
    ]
    assert read_marker(f"step[DECODE bs={MAX_COUNT + 1}]")[:2] == (STEP, None)
    # keys attended fewer than the query tokens: no negative cached context
    kind, tokens, why = read_marker("step[MIXED bs=2 c_sq=9 c_sk=3]")
    assert tokens is None and "fewer than the query tokens" in why


MARKER_FORMS = (
    "execute_new_{a}_cached_{b}",
    "execute_context_{a}({c})_generation_{b}({d})",
    "execute_{a}_context_{a}(sq{c}sk{d}sqsq0sqsk0)_generation_{b}(sq{b}sk{d}sqsq0sqsk0)",
    "step[DECODE bs={a} toks={c}]",
    "step[MIXED bs={a} c_sq={c} c_sk={d} g_sq={b} g_sk={d}]",
    "[Executor] _forward_step {a}: {b} ctx reqs, {c} gen reqs",
)
ANY_COUNT = st.one_of(
    st.integers(0, 2**40).map(str),
    st.integers(1, 5000).map(lambda n: "9" * n),
    st.text("0123456789²٣", min_size=1, max_size=8),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(form=st.sampled_from(MARKER_FORMS), a=ANY_COUNT, b=ANY_COUNT, c=ANY_COUNT, d=ANY_COUNT)
def test_any_marker_count_is_counts_within_bounds_or_none(form, a, b, c, d):
    kind, tokens, why = read_marker(form.format(a=a, b=b, c=c, d=d))
    assert isinstance(kind, str)
    if tokens is not None:
        values = [tokens.sequences, tokens.new_tokens, tokens.context_tokens]
        assert all(v is None or 0 <= v <= 2 * MAX_COUNT for v in values), tokens
    else:
        assert why is None or len(why.splitlines()) == 1


# ---- 3. overflow and sign ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "why"),
    [
        (["--tokens", "0"], "argument --tokens: '0' is not a whole number from 1"),
        (["--tokens", "-5"], "argument --tokens: '-5' is not a whole number from 1"),
        (["--tokens", NINES[:30]], "is not a whole number from 1 to 2,147,483,647"),
        (["--batch", "0"], "argument --batch: '0' is not a whole number from 1"),
        (["--context", "-1"], "argument --context: '-1' is not a whole number from 0"),
        (["--dtype", "foo"], "unknown dtype 'foo': use one of float32, float16, bfloat16, float8"),
    ],
)
def test_roofline_flags_out_of_bounds_are_one_line(tmp_path, flag, why):
    path = decode_steps(tmp_path, ["decode#0"])
    assert why in one_line(run_probe("analyze", str(path), "--model", QWEN, "--device", "H100-SXM", *flag))


def test_recorded_shapes_no_device_could_hold_get_no_op_roofline(tmp_path):
    """Negative and 10**300 dims: the op is listed with no model (no figures), never negative or a traceback."""
    dims = {"neg": [[-16, 4096], [4096, 4096]], "huge": [[10**300, 4096], [4096, 10**300]]}
    host = [
        ("cpu_op", "aten::mm", 1000 + 200 * i + 2, 1000 + 200 * i + 12, {"Input Dims": d, "Input type": ["float"] * 2})
        for i, d in enumerate(dims.values())
    ]
    path = decode_steps(tmp_path, ["decode#0", "decode#1"], host_extra=host)
    result = run_probe("analyze", str(path), "--device", "H100-SXM", "--json")
    no_traceback(result)
    ops = json.loads(result.stdout)["op_roofline"]
    assert ops and all(o["model"] is None and o["flops"] is None for o in ops)


@settings(max_examples=80, deadline=None)
@given(
    dims=st.lists(
        st.lists(st.integers(-(2**70), 2**70) | st.integers(-3, 5000), min_size=0, max_size=4), min_size=1, max_size=3
    ),
    op=st.sampled_from(["aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::add", "aten::embedding"]),
)
def test_any_recorded_shape_costs_a_finite_non_negative_figure_or_none(dims, op):
    cost = cost_of(op, Shapes(tuple(tuple(d) for d in dims), ("c10::BFloat16",) * len(dims)))
    if cost is not None:
        assert 0 <= cost.flops and 0 <= cost.bytes and math.isfinite(float(cost.flops) + float(cost.bytes))


# ---- 4. division by an empty step -------------------------------------------------------------------------------


def test_a_step_where_nothing_ran_has_no_bound(tmp_path):
    host = [("user_annotation", f"decode#{i}", 200 * i, 200 * i, {}) for i in range(3)]
    host += [
        ("user_annotation", "decode#3", 600, 700, {}),
        ("cuda_runtime", "cudaLaunchKernel", 610, 615, {"correlation": 1}),
    ]
    path = _trace(tmp_path, host, [("kernel", "gemm", 620, 670, {"correlation": 1})])
    result = run_probe("analyze", str(path), "--model", QWEN, "--device", "H100-SXM")
    no_traceback(result)
    assert "step 1 (decode#1): no bound: nothing ran in this step (no host work, no GPU work in its 0.000 ms)." in (
        result.stdout.replace("\n", " ")
    )
    assert "inf" not in result.stdout


def test_a_step_with_launches_but_no_gpu_work_gets_its_roofline_without_a_ratio(tmp_path):
    """Zero GPU busy on a GPU trace: the step roofline said 'x / 0' (ZeroDivisionError in _departure)."""
    host, gpu = [], []
    for i in range(3):
        t = 200 * i
        host += [
            ("user_annotation", f"decode#{i}", t, t + 100, {}),
            ("cuda_runtime", "cudaLaunchKernel", t + 4, t + 9, {}),
        ]
    host.append(("cuda_runtime", "cudaLaunchKernel", 700, 705, {"correlation": 9}))
    gpu.append(("kernel", "gemm", 710, 750, {"correlation": 9}))  # outside every step: the trace is a GPU trace
    path = _trace(tmp_path, host, gpu)
    result = run_probe("analyze", str(path), "--model", QWEN, "--device", "H100-SXM")
    no_traceback(result)
    assert "no GPU work ran in this step, nothing to hold against it" in result.stdout.replace("\n", " ")


# ---- 5. clocks that disagree ------------------------------------------------------------------------------------


def test_gpu_ops_before_their_launch_are_one_warning_and_no_share_past_100(tmp_path):
    """Each kernel starts 310 us before its launch call (at +10 us) and ends at +100: 400 us of GPU work in a 100 us
    step read whole; it was '400% of the step read whole' and a launch delay of -310 us."""
    path = decode_steps(tmp_path, ["decode#0", "decode#1", "decode#2"], gpu_at=(-300, 100), launch_at=(10, 15))
    result = run_probe("analyze", str(path))
    no_traceback(result)
    warnings = [line for line in result.stderr.splitlines() if "clocks disagree" in line]
    assert warnings == [
        "probe: warning: 3 GPU op(s) start before the launch call that issued them, by up to 310.000 us: the trace's "
        "host and GPU clocks disagree (skewed clocks, a merged trace); launch delays are clipped at 0 and GPU shares "
        "at 100%"
    ]
    out = result.stdout.replace("\n", " ")
    assert "100% of the step read whole" in out and "400%" not in out and "-310" not in out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(-(2**40), 2**40), length=st.integers(0, 10**6))
def test_any_clock_skew_gives_shares_within_100_and_no_negative_delay(tmp_path, offset, length):
    """A kernel anywhere on the clock relative to its launch (ns): the verdict stands, the busy share of the step
    read whole is within [0, 1] and launch delays are not negative."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "decode#0", "pid": 1, "tid": 1, "ts": 10**9, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10**9 + 10, "dur": 5,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10**9 + 10 + offset / 1000,
         "dur": length / 1000, "args": {"stream": 7, "correlation": 1}},
    ]  # fmt: skip
    path = tmp_path / "skew.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    analysis = analyze(trace)
    (d,) = diagnose_trace(analysis, Context.of(trace)).steps
    assert 0.0 <= d.evidence.busy_of_span <= 1.0
    assert all((s.launch_delay_p50_ns or 0) >= 0 and (s.launch_delay_p90_ns or 0) >= 0 for s in analysis.steps)


# ---- 6. the unprofiled estimate ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cost", [1e308, -5.0, 2e6])
def test_event_costs_no_profiler_has_are_one_line_naming_the_sidecar(tmp_path, cost):
    doc = SIDECAR_DOC | {"event_cost_ns": {"op": cost, "range": cost}}
    trace = with_sidecar(tmp_path, json.dumps(doc))
    line = one_line(run_probe("analyze", str(trace)))
    assert str(trace.parent) in line and ".meta.json" in line and "each must be from 0 to 1,000,000 ns" in line


def test_event_costs_larger_than_a_step_hold_its_estimate_at_zero_and_say_why(tmp_path):
    path = decode_steps(tmp_path, ["decode#0", "decode#1"])
    result = run_probe("analyze", str(path), "--event-cost-ns", "60000,60000", "--json")
    no_traceback(result)
    doc = json.loads(result.stdout)
    assert all(s["unprofiled_estimate_us"] == 0 for s in doc["steps"])
    (warning,) = [line for line in doc["warnings"] if "unprofiled estimate is held at 0" in line]
    assert "op 60000 ns, range 60000 ns" in warning
    assert "inf" not in one_line(run_probe("analyze", str(path), "--event-cost-ns", "1e308"))


# ---- 7. documented, not done ------------------------------------------------------------------------------------


def test_tokens_come_from_the_recorded_embedding_and_float8_takes_the_fp8_peak(tmp_path):
    """The embedding's indices [16, 559]: 16 sequences of 559 new tokens, 8,944 in all, with no flag; the GEMM's
    c10::Float8_e4m3fn is float8, at H100's 1,979 TFLOP/s."""
    shapes = [
        ("aten::embedding", [[151936, 1024], [16, 559]], ["c10::BFloat16", "long int"]),
        ("aten::mm", [[8944, 1024], [1024, 1024]], ["c10::Float8_e4m3fn"] * 2),
    ]
    host = [("user_annotation", "forward", 0, 200, {})]
    gpu = []
    for i, (op, dims, types) in enumerate(shapes):
        t = 10 + 60 * i
        host += [
            ("cpu_op", op, t, t + 20, {"Input Dims": dims, "Input type": types}),
            ("cuda_runtime", "cudaLaunchKernel", t + 2, t + 8, {"correlation": i + 1}),
        ]
        gpu.append(("kernel", "gemm" if i else "embedding", t + 10, t + 50, {"correlation": i + 1}))
    path = _trace(tmp_path, host, gpu)
    result = run_probe("analyze", str(path), "--model", QWEN, "--device", "H100-SXM", "--steps", "^forward$", "--json")
    no_traceback(result)
    (step,) = json.loads(result.stdout)["steps"]
    r = step["roofline"]
    assert (r["sequences"], r["tokens"], r["tokens_from"]) == (16, 8944, "recorded shapes (aten::embedding [16, 559])")
    assert r["dtype"] == "float8" and r["compute_ms"] == pytest.approx(r["flops"] / 1979e12 * 1e3)


def test_answer_reads_shapes_in_process(tmp_path):
    """The library call the explorer makes gets the same tokens (answer() passes the shapes itself)."""
    host = [
        ("user_annotation", "forward", 0, 100, {}),
        ("cpu_op", "aten::embedding", 10, 20, {"Input Dims": [[100, 8], [2, 7]], "Input type": ["float", "long int"]}),
    ]
    trace = load_trace(_trace(tmp_path, host))
    found = answer(trace, analyze(trace), QWEN, "H100-SXM")
    (r,) = found.rooflines.values()
    assert (r.sequences, r.tokens) == (2, 14)
