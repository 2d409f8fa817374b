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
from probe.analysis.roofline.ops import cost_of, coverage, op_rooflines
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


SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
BF, LONG = "c10::BFloat16", "long int"


def test_a_gather_reads_the_rows_it_selects_not_the_table():
    """index_select of 8,944 rows from a [151936, 1024] bf16 embedding table (the H100 prefill's): the rows read
    (8,944 x 1,024 x 2 B), the indices (8,944 x 8 B) and the output written (as many bytes as the rows), not the
    table's 311 MB. embedding(weight, indices [16, 559]) selects the same 8,944 rows."""
    rows = 8944 * 1024 * 2
    picked = cost_of("aten::index_select", Shapes(((151936, 1024), (), (8944,)), (BF, "Scalar", LONG), ("", "0", "")))
    assert (picked.bytes, picked.flops) == (2 * rows + 8944 * 8, 8944 * 1024)
    embedded = cost_of(
        "aten::embedding",
        Shapes(((151936, 1024), (16, 559), (), (), ()), (BF, LONG, "Scalar", "Scalar", "Scalar"), ("", "", "-1")),
    )
    assert embedded.bytes == picked.bytes and embedded.model.startswith("gather")
    # along dim 1 of a [4, 10] table, 3 indices select 3 columns of 4 elements each
    column = cost_of("aten::index_select", Shapes(((4, 10), (), (3,)), ("float", "Scalar", LONG), ("", "1", "")))
    assert column.bytes == 2 * 3 * 4 * 4 + 3 * 8


def test_a_reduction_writes_its_reduced_output():
    """mean over the last dim of [16, 559, 1024] float, keepdim: the input read once (4 B an element) and
    16 x 559 floats written, not a second input-sized tensor."""
    n = 16 * 559 * 1024
    mean = cost_of(
        "aten::mean", Shapes(((16, 559, 1024), (), (), ()), ("float", "ScalarList", "Scalar", ""), ("", "[-1]", "True"))
    )
    assert mean.bytes == n * 4 + 16 * 559 * 4
    whole = cost_of("aten::sum", Shapes(((8, 8),), ("float",)))  # no dim recorded: every dim, one element out
    assert whole.bytes == 64 * 4 + 4
    assert cost_of("aten::argmax", Shapes(((4, 100), ()), (BF, "Scalar"), ("", "1"))).bytes == 400 * 2 + 4 * 8


def test_an_overwrite_and_an_out_tensor_are_written_not_read():
    """copy_(self float, src bf16): the source read (2 B), self written (4 B), self never read; fill_ writes only;
    mul.out(self, other=Scalar, out): self read, out written once, not counted as an input too."""
    n = 16 * 559 * 1024
    copy = cost_of("aten::copy_", Shapes(((16, 559, 1024), (16, 559, 1024), ()), ("float", BF, "Scalar")))
    assert copy.bytes == n * 2 + n * 4 and copy.dtype == "float32"
    assert cost_of("aten::fill_", Shapes(((1024,), ()), ("float", "Scalar"))).bytes == 1024 * 4
    out = cost_of("aten::mul", Shapes(((4, 2798, 2798), (), (4, 2798, 2798)), ("float", "Scalar", "float")))
    assert out.bytes == 2 * 4 * 2798 * 2798 * 4
    same = cost_of("aten::mul", Shapes(((8, 8), (8, 8)), ("float", "float")))  # no out=: two read, one written
    assert same.bytes == 3 * 64 * 4


def test_the_h100_prefill_has_no_op_over_its_roof(h100):
    """Each memory-bound op of the H100 prefill under its bandwidth roof once the gather, the reductions and the
    overwrites count what they touch (before: the embedding's index_select read the whole table)."""
    _, rows = h100
    (gather,) = [r for r in rows if r.op == "aten::index_select"]
    assert gather.bytes == 2 * 8944 * 1024 * 2 + 8944 * 8 and gather.roof_pct < 100
    assert all(not r.over_roof for r in rows) and all(r.roof_pct <= 100 for r in rows if r.roof_pct)


@pytest.mark.skipif(not (SHARED / "gpu").is_dir(), reason="../shared/traces/gpu is not here")
def test_an_op_over_its_roof_says_why():
    """The A100's fp32 GEMMs run on TF32 tensor cores, past the 19.5 TFLOP/s fp32 peak: each is over_roof, and
    says which peak it passed and what can explain it; every op over its roof is flagged, and none under it."""
    trace = load_trace(SHARED / "gpu" / "cuda_train_control.trace.json.gz")
    rows = op_rooflines(trace, attribute(trace, *analyze(trace).windows()), device("A100-40GB"))
    over = [r for r in rows if r.roof_pct is not None and r.roof_pct > 100]
    assert over and all(r.over_roof and r.over_roof_why for r in over)
    assert not any(r.over_roof for r in rows if r.roof_pct is None or r.roof_pct <= 100)
    gemm = next(r for r in over if r.op == "aten::mm")
    assert "float32 peak of 19.5 TFLOP/s" in gemm.over_roof_why and "TF32" in gemm.over_roof_why


def test_coverage_says_what_the_ops_hold_of_the_gpu_work(h100):
    trace, rows = h100
    busy = analyze(trace).totals.gpu_busy_ns
    c = coverage(rows, busy, graph_replayed=False)
    assert c.modelled_ns == round(sum(r.kernel_us_total for r in rows if r.model) * 1e3) <= c.listed_ns
    assert f"of the trace's {busy / 1e6:.3f} ms of GPU work" in c.text and "graph" not in c.text
    assert "graph-replayed kernels have no shapes" in coverage(rows, busy, graph_replayed=True).text
