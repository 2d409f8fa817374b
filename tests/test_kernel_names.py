"""Kernel names as people read them (kernels.short_name): nsys's and TraceLens's elision, on real names."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from probe.analysis.kernels import short_name

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


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


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces is not here")
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
