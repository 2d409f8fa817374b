"""Kernel names as people read them (kernels.short_name: nsys's and TraceLens's elision) and the categories the
rule table gives them, on every kernel name of every real trace."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal

import pytest

from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.kernels import DEFAULT_RULES, KERNEL_RULES, short_name
from probe.analysis.ledger.patterns import max_width
from probe.analysis.trace import Kind, load_trace
from tests.conftest import DATA, SHARED, needs_shared, shared_trace


@pytest.mark.parametrize(
    ("name", "short"),
    [
        # return type, template arguments (lambdas and parentheses inside them) and the parameter list go
        (
            "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::FillFunctor"
            "<float> >(at::TensorIteratorBase&, at::native::FillFunctor<float> const&)::{lambda(int)#1}>(int, "
            "at::native::gpu_kernel_impl_nocast<at::native::FillFunctor<float> >(at::TensorIteratorBase&, "
            "at::native::FillFunctor<float> const&)::{lambda(int)#1})",
            "at::native::elementwise_kernel",
        ),
        # an anonymous namespace is part of the name; a name cut inside its template arguments still shortens
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
            "TensorListMetadata<1>, at::na",
            "at::native::(anonymous namespace)::multi_tensor_apply_kernel",
        ),
        (
            "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::x)",
            "(anonymous namespace)::store_kvcache",
        ),
        (
            "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::B",
            "vllm::rotary_embedding_kernel",
        ),
        ("void splitKreduce_kernel<32, 16, int>(cublasSplitKParams<float>, float const*)", "splitKreduce_kernel"),
        # a SFINAE return type (B200's vLLM): a `>` in parentheses compares, it closes no template
        (
            "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
            "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*)",
            "vllm::fused_add_rms_norm_kernel",
        ),
        # a generic wrapper keeps the kernel it wraps
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align1>(cutlass_80_tensorop_s1688"
            "gemm_256x64_16x4_nn_align1::Params)",
            "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align1>",
        ),
        # mangled names: the qualified name of the symbol
        (
            "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS",
            "sgl_hip::activation::act_and_mul_kernel",
        ),
        ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0E", "aiter::add_rmsnorm_quant_kernel"),
        ("_Z13my_kernel_abcPfi", "my_kernel_abc"),
        # not signatures: unchanged
        ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
        (
            "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256",
            "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256",
        ),
        ("triton_poi_fused__to_copy_1", "triton_poi_fused__to_copy_1"),
        ("_ZZbad", "_ZZbad"),
    ],
)
def test_short_name(name, short):
    assert short_name(name) == short


@pytest.mark.slow  # over 6 s in the default run (a subprocess with torch, or many): `pytest -m slow`
@needs_shared
def test_every_real_kernel_name_shortens_to_a_name_without_parameters():
    """Every kernel of every shared trace: a non-empty name no longer than the full one, with no parameter list
    left (no `(` right after an identifier) unless the full name was not a signature."""
    names = set()
    for path in sorted(SHARED.glob("*/*.json.gz")):
        doc = json.loads(gzip.open(path).read())
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        names |= {e["name"] for e in events if str(e.get("cat", "")).lower() == "kernel"}
    assert len(names) > 300
    shortened = 0
    for name in names:
        short = short_name(name)
        assert short and len(short) <= len(name)
        if short != name:
            shortened += 1
            assert not short.startswith("void ")
    assert shortened > 100  # the templated CUDA kernels: most of them


# --- categories -------------------------------------------------------------------------------------------


def _kernel_names(paths) -> set[str]:
    """The names of every row the reader takes for a kernel (range-profiler and MTIA kernels included)."""
    names = set()
    for path in paths:
        trace = load_trace(path)
        names |= {trace.names[i] for i in set(trace.name_id[trace.kind == Kind.KERNEL].tolist())}
    return names


@needs_shared
def test_every_kernel_of_every_real_trace_has_its_hand_assigned_category():
    """tests/data/kernel_categories.json: each kernel name of the public and peer traces (417), with the category a
    person gave it after reading the name (tests/data/PROVENANCE.md); the file holds exactly those names."""
    expected = json.loads((DATA / "kernel_categories.json").read_text())
    names = _kernel_names(sorted(p for d in ("public", "peer") for p in (SHARED / d).glob("*.json.gz")))
    assert set(expected) == names and len(names) == 417
    wrong = {n: (DEFAULT_RULES.category(n), want) for n, want in expected.items() if DEFAULT_RULES.category(n) != want}
    assert wrong == {}


def test_moe_expert_gemms_are_moe_on_the_vllm_decode_trace():
    """gpt-oss on vLLM (MI300X, graph replay): triton_kernels' _matmul_ogs_* expert GEMMs (with and without the
    fused swiglu) are 65.6% of GPU busy; they were `gemm`, leaving `moe` the routing kernels' 7.0%. Summed from the
    JSON text: _matmul_ogs 7,034,595 ns of 10,717,708 busy (0.656); with routing, finalize and topk, moe is
    7,789,086 ns (0.727) and gemm keeps the dense projections' 1,230,560 ns (0.115)."""
    path = shared_trace("public/rocm_vllm_decode_cudagraph.trace.json.gz")
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    ogs = sum(int(Decimal(e["dur"]) * 1000) for e in kernels if e["name"].startswith("_matmul_ogs"))
    a = analyze(load_trace(path))
    busy = a.totals.gpu_busy_ns
    assert (ogs, busy) == (7_034_595, 10_717_708) and round(ogs / busy, 3) == 0.656
    assert a.kernel_categories["moe"] == 7_789_086 and a.kernel_categories["gemm"] == 1_230_560
    assert {k.category for k in a.kernels if k.name.startswith("_matmul_ogs")} == {"moe"}


def test_every_built_in_rule_has_a_bounded_match_width():
    """A bounded width W makes re.search linear in the name (each start reads at most W characters), so no kernel
    name can make the table quadratic. `flashinfer.*(prefill|decode)`, the old attention rule that took 15.7 s on
    one 80k-character name, is the kind this rejects."""
    widths = {category: max_width(pattern) for category, pattern in KERNEL_RULES}
    assert all(w is not None and w <= 32 for w in widths.values()), widths
    assert max_width(r"flashinfer.*(prefill|decode)") is None and max_width(r"cutlass.*(sgemm|tensorop)") is None
    # what the old rule caught, the bounded one still does
    for name in ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>", "flashinfer::SingleDecodeWithKVCache"):
        assert DEFAULT_RULES.category(name) == "attention"


def test_kernel_stats_carry_the_short_name_beside_the_full_one():
    a = analyze(load_trace(shared_trace("public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz")))
    for k in a.kernels:
        assert k.short_name == short_name(k.name)
        assert k.to_json()["name"] == k.name and k.to_json()["short_name"] == k.short_name
    assert any(k.short_name != k.name for k in a.kernels)
    assert all(k.short_name == short_name(k.name) for s in a.steps for k in s.top_kernels)
