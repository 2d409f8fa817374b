"""The per-op roofline (probe.analysis.roofline.ops) on the H100 HF trace, TraceLens's conventions, figures by hand
and kernel times from the trace's own text."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.gpu import attribute
from probe.analysis.roofline.devices import device
from probe.analysis.roofline.ops import cost_of, op_rooflines
from probe.analysis.trace import Shapes, load_trace
from tests.conftest import shared_trace

H100 = "public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz"  # TraceLens's, in ../shared/traces


@pytest.fixture(scope="module")
def h100():
    trace = load_trace(shared_trace(H100))
    a = analyze(trace)
    return trace, op_rooflines(trace, attribute(trace, *a.windows()), device("H100-SXM"))


def _kernel_us_of(path: Path, op: str, dims) -> list[Decimal]:
    """Brute force from the JSON: per call of `op` with these Input Dims, the GPU ops launched inside it (runtime
    calls on its thread within its span, joined on correlation: the GEMM's kernel and the cudaMemsetAsync cuBLASLt
    issues before it), their durations summed, in us."""
    events = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)["traceEvents"]
    calls = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    kernels = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.setdefault(e["args"]["correlation"], []).append(e["dur"])
    out = []
    for e in events:
        if e.get("cat") == "cpu_op" and e["name"] == op and e["args"].get("Input Dims") == dims:
            inside = [c for c in calls if c["tid"] == e["tid"] and e["ts"] <= c["ts"] <= e["ts"] + e["dur"]]
            out.append(sum(sum(kernels.get(c["args"]["correlation"], [])) for c in inside))
    return out


def test_the_gemm_of_the_issue(h100):
    """aten::mm, M=8944, N=2816, K=1024, bf16: 2MNK = 51.58 GFLOP; A, B and C once at 2 bytes: (8944 x 1024 +
    1024 x 2816 + 8944 x 2816) x 2 = 74,457,088 bytes (71.0 MiB)."""
    trace, rows = h100
    (mm,) = [r for r in rows if r.op == "aten::mm" and r.shapes == "[(8944, 1024), (1024, 2816)]"]
    assert (mm.flops, mm.bytes, mm.dtype, mm.count) == (2 * 8944 * 2816 * 1024, 74_457_088, "bfloat16", 48)
    assert mm.flops == 51_581_550_592
    times = _kernel_us_of(shared_trace(H100), "aten::mm", [[8944, 1024], [1024, 2816]])
    assert len(times) == 48
    assert mm.kernel_us_total == pytest.approx(float(sum(times)), abs=1e-6)
    assert mm.kernel_us_median == pytest.approx(float(sorted(times)[23] + sorted(times)[24]) / 2, abs=1e-6)
    # achieved at the median call, and against the H100's ridge (989.5 TFLOP/s over 3.35 TB/s = 295 FLOP/byte)
    assert mm.tflops_s_median == pytest.approx(mm.flops / (mm.kernel_us_median * 1e-6) / 1e12)
    assert mm.intensity == pytest.approx(51_581_550_592 / 74_457_088) and mm.bound == "compute"
    assert mm.roof_pct == pytest.approx(100 * (mm.flops / 989.5e12) / (mm.kernel_us_median * 1e-6))


def test_models_follow_tracelens():
    bf = "c10::BFloat16"
    addmm = cost_of(
        "aten::addmm", Shapes(((1024,), (8944, 1024), (1024, 1024), (), ()), (bf, bf, bf, "Scalar", "Scalar"))
    )
    # 2MNK + MN for the bias; bytes A + B + C + a bias of N (TraceLens assumes 1 x N)
    assert addmm.flops == 2 * 8944 * 1024 * 1024 + 8944 * 1024
    assert addmm.bytes == (8944 * 1024 + 1024 * 1024 + 8944 * 1024 + 1024) * 2
    q = (16, 16, 559, 64)
    causal = cost_of(
        "aten::_scaled_dot_product_flash_attention",
        Shapes(
            (q, q, q, (), (), (), ()),
            (bf, bf, bf, "Scalar", "Scalar", "Scalar", "Scalar"),
            ("", "", "", "0.", "True", "False", "0.125"),
        ),
    )
    full = 2 * 16 * 16 * 559 * 559 * 64 * 2  # QK^T and PV
    assert causal.flops == full // 2 and causal.model.endswith("causal")
    assert causal.bytes == 4 * 16 * 559 * 16 * 64 * 2  # Q, K, V read, O written
    assert cost_of("aten::cat", Shapes((((16, 16, 559, 32), (16, 16, 559, 32)), ()), ("TensorList", "Scalar"))) is None
    assert cost_of("aten::unknown_op", Shapes(((4,),), ("float",))) is None


def test_ops_without_a_model_are_named_not_guessed(h100):
    _, rows = h100
    cat = [r for r in rows if r.op == "aten::cat"]
    assert cat and all(r.model is None and r.flops is None and r.bound is None for r in cat)
    assert rows == sorted(rows, key=lambda r: (-r.kernel_us_total, r.op, r.shapes))
